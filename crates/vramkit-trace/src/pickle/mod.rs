//! Python pickles of plain data: an unpickler that never executes anything
//! ([`read`](mod@read)) and a writer that emits only what the pytorch.org/memory_viz
//! viewer accepts ([`write`](mod@write)).

pub(crate) mod input;
mod read_ahead;
pub mod read;
/// The owned value a pickle reads into and is written from (defined at the
/// crate's root, beside the document that freezes into it).
pub mod value {
    pub use crate::value::Value;
}
pub mod write;

/// Opcode bytes (CPython `Lib/pickle.py`).
pub(crate) mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const FLOAT: u8 = b'F';
    pub const INT: u8 = b'I';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const LONG: u8 = b'L';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const GET: u8 = b'g';
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const PUT: u8 = b'p';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    pub const PROTO: u8 = 0x80;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;

    /// CPython's name for an opcode byte, `"unknown"` if it is none.
    pub fn name(op: u8) -> &'static str {
        match op {
            MARK => "MARK",
            STOP => "STOP",
            POP => "POP",
            POP_MARK => "POP_MARK",
            DUP => "DUP",
            FLOAT => "FLOAT",
            INT => "INT",
            BININT => "BININT",
            BININT1 => "BININT1",
            LONG => "LONG",
            BININT2 => "BININT2",
            NONE => "NONE",
            BINUNICODE => "BINUNICODE",
            APPEND => "APPEND",
            DICT => "DICT",
            EMPTY_DICT => "EMPTY_DICT",
            APPENDS => "APPENDS",
            GET => "GET",
            BINGET => "BINGET",
            LONG_BINGET => "LONG_BINGET",
            LIST => "LIST",
            EMPTY_LIST => "EMPTY_LIST",
            PUT => "PUT",
            BINPUT => "BINPUT",
            LONG_BINPUT => "LONG_BINPUT",
            SETITEM => "SETITEM",
            TUPLE => "TUPLE",
            EMPTY_TUPLE => "EMPTY_TUPLE",
            SETITEMS => "SETITEMS",
            BINFLOAT => "BINFLOAT",
            PROTO => "PROTO",
            TUPLE1 => "TUPLE1",
            TUPLE2 => "TUPLE2",
            TUPLE3 => "TUPLE3",
            NEWTRUE => "NEWTRUE",
            NEWFALSE => "NEWFALSE",
            LONG1 => "LONG1",
            LONG4 => "LONG4",
            SHORT_BINUNICODE => "SHORT_BINUNICODE",
            BINUNICODE8 => "BINUNICODE8",
            MEMOIZE => "MEMOIZE",
            FRAME => "FRAME",
            // Refused: they import, call, or build objects we do not model.
            b'c' => "GLOBAL",
            0x93 => "STACK_GLOBAL",
            b'R' => "REDUCE",
            b'b' => "BUILD",
            b'i' => "INST",
            b'o' => "OBJ",
            0x81 => "NEWOBJ",
            0x92 => "NEWOBJ_EX",
            b'P' => "PERSID",
            b'Q' => "BINPERSID",
            0x82 => "EXT1",
            0x83 => "EXT2",
            0x84 => "EXT4",
            b'S' => "STRING",
            b'T' => "BINSTRING",
            b'U' => "SHORT_BINSTRING",
            b'V' => "UNICODE",
            b'B' => "BINBYTES",
            b'C' => "SHORT_BINBYTES",
            0x8e => "BINBYTES8",
            0x8f => "EMPTY_SET",
            0x90 => "ADDITEMS",
            0x91 => "FROZENSET",
            0x96 => "BYTEARRAY8",
            0x97 => "NEXT_BUFFER",
            0x98 => "READONLY_BUFFER",
            _ => "unknown",
        }
    }
}
