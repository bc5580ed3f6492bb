//! A schema error on its way up: each level of the walk adds its own step
//! of the key path, so paths are built only when an error happens.

use crate::error::TraceError;

/// One step of a key path.
#[derive(Debug)]
enum Seg {
    Key(String),
    Index(usize),
}

/// A schema error on its way up; the path is collected innermost first.
#[derive(Debug)]
pub(super) struct SchemaErr {
    path: Vec<Seg>,
    expected: String,
    found: String,
}

impl SchemaErr {
    pub(super) fn new(expected: impl Into<String>, found: impl Into<String>) -> SchemaErr {
        SchemaErr { path: Vec::new(), expected: expected.into(), found: found.into() }
    }

    pub(super) fn missing(key: &str) -> SchemaErr {
        SchemaErr {
            path: vec![Seg::Key(key.to_owned())],
            expected: "this key".to_owned(),
            found: "no such key".to_owned(),
        }
    }

    pub(super) fn key(mut self, key: &str) -> SchemaErr {
        self.path.push(Seg::Key(key.to_owned()));
        self
    }

    pub(super) fn index(mut self, index: usize) -> SchemaErr {
        self.path.push(Seg::Index(index));
        self
    }

    pub(super) fn into_trace_error(self) -> TraceError {
        let mut key_path = String::new();
        for seg in self.path.iter().rev() {
            match seg {
                Seg::Key(key) => {
                    if !key_path.is_empty() {
                        key_path.push('.');
                    }
                    key_path.push_str(key);
                }
                Seg::Index(i) => key_path.push_str(&format!("[{i}]")),
            }
        }
        if key_path.is_empty() {
            key_path.push_str("<root>");
        }
        TraceError::Schema { path: None, key_path, expected: self.expected, found: self.found }
    }
}

/// Adds a key to the path of an error.
pub(super) trait AtKey<T> {
    fn at(self, key: &str) -> Result<T, SchemaErr>;
    fn at_index(self, index: usize) -> Result<T, SchemaErr>;
}

impl<T> AtKey<T> for Result<T, SchemaErr> {
    fn at(self, key: &str) -> Result<T, SchemaErr> {
        self.map_err(|e| e.key(key))
    }
    fn at_index(self, index: usize) -> Result<T, SchemaErr> {
        self.map_err(|e| e.index(index))
    }
}
