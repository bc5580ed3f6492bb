//! JSON of the same shape as the pickles (what the newer memory_viz viewer
//! also reads). Tuples become lists; the schema decoder accepts a list
//! wherever a tuple is expected, so they read back as tuples.

use crate::error::TraceError;
use crate::value::Value;
use crate::tree::{Item, Tree, MAX_DEPTH};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use std::fmt;
use std::io::Write;

/// Parses JSON text into a document, keeping dict order.
pub(crate) fn parse(bytes: &[u8]) -> Result<(Tree, Item), TraceError> {
    let json_error = |e: serde_json::Error| TraceError::Json {
        path: None,
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    };
    let mut tree = Tree::default();
    // serde_json refuses nesting deeper than 128, which bounds the recursion.
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let root = ItemSeed(&mut tree).deserialize(&mut de).map_err(json_error)?;
    de.end().map_err(json_error)?;
    Ok((tree, root))
}

/// Deserializes one JSON value straight into the arena.
struct ItemSeed<'t>(&'t mut Tree);

impl<'de> DeserializeSeed<'de> for ItemSeed<'_> {
    type Value = Item;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Item, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemSeed<'_> {
    type Value = Item;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Item, E> {
        Ok(Item::NONE)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Item, E> {
        Ok(Item::bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Item, E> {
        Ok(self.0.int(i128::from(n)))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Item, E> {
        Ok(self.0.int(i128::from(n)))
    }

    fn visit_f64<E>(self, x: f64) -> Result<Item, E> {
        Ok(self.0.float(x))
    }

    fn visit_str<E>(self, s: &str) -> Result<Item, E> {
        Ok(self.0.push_str(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(ItemSeed(&mut *self.0))? {
            items.push(item);
        }
        Ok(self.0.push_seq(false, items.into_iter()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Item, A::Error> {
        let mut pairs = Vec::new();
        while let Some(key) = map.next_key_seed(ItemSeed(&mut *self.0))? {
            let value = map.next_value_seed(ItemSeed(&mut *self.0))?;
            pairs.push((key, value));
        }
        Ok(self.0.push_dict(pairs.into_iter()))
    }
}

/// Writes `value` as JSON (compact). Dict keys must be str or int
/// (ints become strings, as Python's `json` does).
pub fn write_value(value: &Value, out: impl Write) -> Result<(), TraceError> {
    let mut out = std::io::BufWriter::new(out);
    serde_json::to_writer(&mut out, &Depth(value, 0)).map_err(|e| {
        if e.is_io() {
            TraceError::Write { source: e.into() }
        } else {
            TraceError::Encode { key_path: "<value>".to_owned(), message: e.to_string() }
        }
    })?;
    out.flush().map_err(|source| TraceError::Write { source })
}

/// A value at a nesting depth, so serialization stops at [`MAX_DEPTH`].
struct Depth<'a>(&'a Value, usize);

impl Serialize for Depth<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Depth(value, depth) = *self;
        if depth > MAX_DEPTH {
            return Err(S::Error::custom(format!("nested more than {MAX_DEPTH} levels deep")));
        }
        match value {
            Value::None => serializer.serialize_unit(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Int(n) => serializer.serialize_i64(*n),
            Value::BigInt(n) => serializer.serialize_i128(*n),
            Value::Float(x) => serializer.serialize_f64(*x),
            Value::Str(s) => serializer.serialize_str(s),
            Value::List(items) | Value::Tuple(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items.iter() {
                    seq.serialize_element(&Depth(item, depth + 1))?;
                }
                seq.end()
            }
            Value::Dict(pairs) => {
                let mut map = serializer.serialize_map(Some(pairs.len()))?;
                for (k, v) in pairs.iter() {
                    match k {
                        Value::Str(s) => map.serialize_key(&**s)?,
                        Value::Int(n) => map.serialize_key(&n.to_string())?,
                        Value::BigInt(n) => map.serialize_key(&n.to_string())?,
                        other => {
                            return Err(S::Error::custom(format!(
                                "a dict key of type {} has no JSON form",
                                other.type_name()
                            )))
                        }
                    }
                    map.serialize_value(&Depth(v, depth + 1))?;
                }
                map.end()
            }
        }
    }
}
