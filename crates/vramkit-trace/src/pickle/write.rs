//! A pickle writer for plain data, protocol 2 to 4.
//!
//! It uses only opcodes the pytorch.org/memory_viz viewer's own parser
//! accepts (no `BINUNICODE8`, no bytes, no `LONG4`, no `FRAME`), and
//! memoizes every container (by `Arc` identity) and every string (by
//! content), so a frames list shared by 100k entries is written once and
//! referred to with `BINGET` after that, as CPython does.

use super::op;
use crate::value::Value;
use crate::error::TraceError;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

/// Deepest nesting written (values read by this crate are never deeper).
const MAX_DEPTH: usize = 200;
/// Items per `APPENDS`/`SETITEMS` batch (CPython's `_BATCHSIZE`).
pub(crate) const BATCH: usize = 1000;
/// Bytes buffered before they go to the underlying writer.
const FLUSH_AT: usize = 1 << 16;

/// Writes `value` as one pickle of `protocol` (2, 3 or 4).
pub fn write_value(value: &Value, protocol: u8, out: impl Write) -> Result<(), TraceError> {
    let mut writer = Writer::new(out, protocol)?;
    writer.value(value, 0)?;
    writer.finish().map(drop)
}

/// Writes `value` as a protocol-4 pickle into a new vector.
pub fn to_vec(value: &Value) -> Result<Vec<u8>, TraceError> {
    let mut out = Vec::new();
    write_value(value, 4, &mut out)?;
    Ok(out)
}

/// A pickle being written, value by value, with one memo throughout: a
/// container or string written once is referred to after that.
pub(crate) struct Writer<W> {
    out: W,
    buf: Vec<u8>,
    protocol: u8,
    /// Memo index of each container written, by the address of its `Arc`
    /// (kept, so that no other container takes that address).
    by_ptr: HashMap<usize, (u32, Value)>,
    /// Memo index of each string written, by content.
    by_str: HashMap<Arc<str>, u32>,
    next: u32,
}

impl<W: Write> Writer<W> {
    /// Starts a pickle of `protocol` (2, 3 or 4).
    pub(crate) fn new(out: W, protocol: u8) -> Result<Writer<W>, TraceError> {
        if !(2..=4).contains(&protocol) {
            return Err(TraceError::Encode {
                key_path: "<root>".to_owned(),
                message: format!("expected pickle protocol 2, 3 or 4 (what the viewer reads), got {protocol}"),
            });
        }
        let mut buf = Vec::with_capacity(FLUSH_AT * 2);
        buf.extend_from_slice(&[op::PROTO, protocol]);
        Ok(Writer { out, buf, protocol, by_ptr: HashMap::new(), by_str: HashMap::new(), next: 0 })
    }

    /// Ends the pickle (`STOP`) and hands back the output.
    pub(crate) fn finish(mut self) -> Result<W, TraceError> {
        self.buf.push(op::STOP);
        self.flush()?;
        Ok(self.out)
    }

    /// One opcode without argument (`MARK`, `APPEND`, `SETITEMS`, ...).
    pub(crate) fn op(&mut self, code: u8) {
        self.buf.push(code);
    }

    /// A dict no other value shares (never memoized, so it need not stay
    /// alive): a trace entry streamed out.
    pub(crate) fn unshared_dict(&mut self, pairs: &[(Value, Value)]) -> Result<(), TraceError> {
        self.buf.push(op::EMPTY_DICT);
        self.pairs(pairs, 0)
    }

    fn flush(&mut self) -> Result<(), TraceError> {
        self.out.write_all(&self.buf).map_err(|source| TraceError::Write { source })?;
        self.buf.clear();
        Ok(())
    }

    /// A dict's pairs after its `EMPTY_DICT` (and memo put).
    fn pairs(&mut self, pairs: &[(Value, Value)], depth: usize) -> Result<(), TraceError> {
        match pairs {
            [] => {}
            [(k, v)] => {
                self.value(k, depth + 1)?;
                self.value(v, depth + 1)?;
                self.buf.push(op::SETITEM);
            }
            _ => {
                for batch in pairs.chunks(BATCH) {
                    self.buf.push(op::MARK);
                    for (k, v) in batch {
                        self.value(k, depth + 1)?;
                        self.value(v, depth + 1)?;
                    }
                    self.buf.push(op::SETITEMS);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn value(&mut self, value: &Value, depth: usize) -> Result<(), TraceError> {
        if depth > MAX_DEPTH {
            return Err(TraceError::Encode {
                key_path: "<value>".to_owned(),
                message: format!("nested more than {MAX_DEPTH} levels deep"),
            });
        }
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        match value {
            Value::None => self.buf.push(op::NONE),
            Value::Bool(true) => self.buf.push(op::NEWTRUE),
            Value::Bool(false) => self.buf.push(op::NEWFALSE),
            Value::Int(n) => self.int(i128::from(*n)),
            Value::BigInt(n) => self.int(*n),
            Value::Float(x) => {
                self.buf.push(op::BINFLOAT);
                self.buf.extend_from_slice(&x.to_be_bytes());
            }
            Value::Str(s) => {
                if let Some(&index) = self.by_str.get(&**s) {
                    self.get(index);
                } else {
                    self.str(s)?;
                    let index = self.put()?;
                    self.by_str.insert(s.clone(), index);
                }
            }
            Value::List(items) => {
                let key = items.as_ptr() as usize;
                if let Some(&(index, _)) = self.by_ptr.get(&key) {
                    self.get(index);
                    return Ok(());
                }
                self.buf.push(op::EMPTY_LIST);
                let index = self.put()?;
                self.by_ptr.insert(key, (index, value.clone()));
                match &items[..] {
                    [] => {}
                    [one] => {
                        self.value(one, depth + 1)?;
                        self.buf.push(op::APPEND);
                    }
                    _ => {
                        for batch in items.chunks(BATCH) {
                            self.buf.push(op::MARK);
                            for item in batch {
                                self.value(item, depth + 1)?;
                            }
                            self.buf.push(op::APPENDS);
                        }
                    }
                }
            }
            Value::Dict(pairs) => {
                let key = pairs.as_ptr() as usize;
                if let Some(&(index, _)) = self.by_ptr.get(&key) {
                    self.get(index);
                    return Ok(());
                }
                self.buf.push(op::EMPTY_DICT);
                let index = self.put()?;
                self.by_ptr.insert(key, (index, value.clone()));
                self.pairs(pairs, depth)?;
            }
            Value::Tuple(items) => {
                let key = items.as_ptr() as usize;
                if let Some(&(index, _)) = self.by_ptr.get(&key) {
                    self.get(index);
                    return Ok(());
                }
                if items.is_empty() {
                    // Empty tuples share one address; never memoized, as in CPython.
                    self.buf.push(op::EMPTY_TUPLE);
                    return Ok(());
                }
                if items.len() > 3 {
                    self.buf.push(op::MARK);
                }
                for item in items.iter() {
                    self.value(item, depth + 1)?;
                }
                self.buf.push(match items.len() {
                    1 => op::TUPLE1,
                    2 => op::TUPLE2,
                    3 => op::TUPLE3,
                    _ => op::TUPLE,
                });
                let index = self.put()?;
                self.by_ptr.insert(key, (index, value.clone()));
            }
        }
        Ok(())
    }

    fn int(&mut self, n: i128) {
        if let Ok(small) = u8::try_from(n) {
            self.buf.extend_from_slice(&[op::BININT1, small]);
        } else if let Ok(small) = u16::try_from(n) {
            self.buf.push(op::BININT2);
            self.buf.extend_from_slice(&small.to_le_bytes());
        } else if let Ok(small) = i32::try_from(n) {
            self.buf.push(op::BININT);
            self.buf.extend_from_slice(&small.to_le_bytes());
        } else {
            // Shortest two's-complement form, as CPython's encode_long.
            let bytes = n.to_le_bytes();
            let mut len = bytes.len();
            while len > 1 {
                let (last, prev) = (bytes[len - 1], bytes[len - 2]);
                if (last == 0 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0) {
                    len -= 1;
                } else {
                    break;
                }
            }
            self.buf.extend_from_slice(&[op::LONG1, len as u8]);
            self.buf.extend_from_slice(&bytes[..len]);
        }
    }

    fn str(&mut self, s: &str) -> Result<(), TraceError> {
        if s.len() < 256 && self.protocol >= 4 {
            self.buf.extend_from_slice(&[op::SHORT_BINUNICODE, s.len() as u8]);
        } else {
            // BINUNICODE8 is not in the viewer's set, so 4 GiB is the limit.
            let len = u32::try_from(s.len()).map_err(|_| TraceError::Encode {
                key_path: "<value>".to_owned(),
                message: format!("a string of {} bytes is longer than a protocol-4 BINUNICODE can hold", s.len()),
            })?;
            self.buf.push(op::BINUNICODE);
            self.buf.extend_from_slice(&len.to_le_bytes());
        }
        self.buf.extend_from_slice(s.as_bytes());
        Ok(())
    }

    /// Memoizes the value on top of the stack; returns its index.
    fn put(&mut self) -> Result<u32, TraceError> {
        let index = self.next;
        self.next = index.checked_add(1).ok_or_else(|| TraceError::Encode {
            key_path: "<value>".to_owned(),
            message: "more than 2^32 objects".to_owned(),
        })?;
        if self.protocol >= 4 {
            self.buf.push(op::MEMOIZE);
        } else if let Ok(short) = u8::try_from(index) {
            self.buf.extend_from_slice(&[op::BINPUT, short]);
        } else {
            self.buf.push(op::LONG_BINPUT);
            self.buf.extend_from_slice(&index.to_le_bytes());
        }
        Ok(index)
    }

    fn get(&mut self, index: u32) {
        if let Ok(short) = u8::try_from(index) {
            self.buf.extend_from_slice(&[op::BINGET, short]);
        } else {
            self.buf.push(op::LONG_BINGET);
            self.buf.extend_from_slice(&index.to_le_bytes());
        }
    }
}
