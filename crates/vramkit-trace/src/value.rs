//! An owned Python value: what a snapshot pickle can hold.
//!
//! Containers and strings sit behind `Arc`, so one object referenced from
//! many places (PyTorch's shared frames lists) stays one object here, and the
//! pickle writer emits it once and refers back to it.

use std::fmt;
use std::sync::Arc;

/// A plain Python object: `None`, bool, int, float, str, list, tuple, dict.
///
/// Invariant: `BigInt` holds only values outside `i64`; use [`Value::int`]
/// to build integers so equal numbers compare equal.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None` (`null` in JSON).
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An int that fits in `i64`.
    Int(i64),
    /// An int outside `i64` but inside `i128`.
    BigInt(i128),
    /// A float.
    Float(f64),
    /// A str.
    Str(Arc<str>),
    /// A list.
    List(Arc<[Value]>),
    /// A tuple (a list in JSON).
    Tuple(Arc<[Value]>),
    /// A dict, in insertion order.
    Dict(Arc<[(Value, Value)]>),
}

impl Value {
    /// An int, as `Int` when it fits in `i64`.
    pub fn int(n: i128) -> Value {
        match i64::try_from(n) {
            Ok(small) => Value::Int(small),
            Err(_) => Value::BigInt(n),
        }
    }

    /// A str.
    pub fn str(s: &str) -> Value {
        Value::Str(Arc::from(s))
    }

    /// A dict from key/value pairs.
    pub fn dict(pairs: Vec<(Value, Value)>) -> Value {
        Value::Dict(Arc::from(pairs))
    }

    /// A list.
    pub fn list(items: Vec<Value>) -> Value {
        Value::List(Arc::from(items))
    }

    /// The integer, if this is one.
    pub fn as_i128(&self) -> Option<i128> {
        match self {
            Value::Int(n) => Some(i128::from(*n)),
            Value::BigInt(n) => Some(*n),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value under string key `key`, if this is a dict that has one.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(pairs) => pairs.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Python's name for the type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
        }
    }
}

/// Python `repr`-like text (short; for messages and debugging).
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::None => f.write_str("None"),
            Value::Bool(true) => f.write_str("True"),
            Value::Bool(false) => f.write_str("False"),
            Value::Int(n) => write!(f, "{n}"),
            Value::BigInt(n) => write!(f, "{n}"),
            Value::Float(x) => write!(f, "{x:?}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::List(items) => write_seq(f, "[", items, "]"),
            Value::Tuple(items) if items.len() == 1 => write_seq(f, "(", items, ",)"),
            Value::Tuple(items) => write_seq(f, "(", items, ")"),
            Value::Dict(pairs) => {
                f.write_str("{")?;
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

fn write_seq(f: &mut fmt::Formatter<'_>, open: &str, items: &[Value], close: &str) -> fmt::Result {
    f.write_str(open)?;
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item}")?;
    }
    f.write_str(close)
}
