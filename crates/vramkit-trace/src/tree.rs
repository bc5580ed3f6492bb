//! The parsed document both readers produce and the schema decoder reads.
//!
//! An arena: containers and strings are nodes in one `Vec`, and an [`Item`]
//! is either a scalar or a node index. A pickle memo reference is just a
//! copy of an `Item`, so an object shared 100k times is one node, and
//! containers can still be filled after they were memoized (as pickles do:
//! `EMPTY_LIST`, `MEMOIZE`, then `APPENDS`). Nothing here recurses except
//! [`Tree::freeze`], which is depth-limited (a pickle can build cycles).

use crate::pickle::value::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// Index of a node in [`Tree::nodes`].
pub(crate) type NodeId = usize;

/// Deepest nesting [`Tree::freeze`] follows.
pub(crate) const MAX_DEPTH: usize = 200;

/// A scalar, or a reference to a node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Item {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Node(NodeId),
}

/// A value that needs storage of its own.
#[derive(Debug)]
pub(crate) enum Node {
    /// Only for ints outside `i64`.
    BigInt(i128),
    Str(Box<str>),
    List(Vec<Item>),
    Tuple(Vec<Item>),
    Dict(Vec<(Item, Item)>),
}

/// A whole document.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    pub(crate) nodes: Vec<Node>,
}

impl Tree {
    pub(crate) fn push(&mut self, node: Node) -> Item {
        self.nodes.push(node);
        Item::Node(self.nodes.len() - 1)
    }

    pub(crate) fn node(&self, item: Item) -> Option<&Node> {
        match item {
            Item::Node(id) => self.nodes.get(id),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self, item: Item) -> Option<&str> {
        match self.node(item) {
            Some(Node::Str(s)) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_dict(&self, item: Item) -> Option<&[(Item, Item)]> {
        match self.node(item) {
            Some(Node::Dict(pairs)) => Some(pairs),
            _ => None,
        }
    }

    /// A list's items (a tuple's too: JSON has no tuples).
    pub(crate) fn as_seq(&self, item: Item) -> Option<&[Item]> {
        match self.node(item) {
            Some(Node::List(items) | Node::Tuple(items)) => Some(items),
            _ => None,
        }
    }

    pub(crate) fn as_i128(&self, item: Item) -> Option<i128> {
        match item {
            Item::Int(n) => Some(i128::from(n)),
            Item::Node(_) => match self.node(item) {
                Some(Node::BigInt(n)) => Some(*n),
                _ => None,
            },
            _ => None,
        }
    }

    /// A short description for error messages: the type and a glimpse.
    pub(crate) fn describe(&self, item: Item) -> String {
        match item {
            Item::None => "None".to_owned(),
            Item::Bool(b) => format!("a bool ({})", if b { "True" } else { "False" }),
            Item::Int(n) => format!("an int ({n})"),
            Item::Float(x) => format!("a float ({x:?})"),
            Item::Node(_) => match self.node(item) {
                Some(Node::BigInt(n)) => format!("an int ({n})"),
                Some(Node::Str(s)) => {
                    let glimpse: String = s.chars().take(40).collect();
                    let more = if glimpse.len() < s.len() { "..." } else { "" };
                    format!("a str ({glimpse:?}{more})")
                }
                Some(Node::List(items)) => format!("a list of {} items", items.len()),
                Some(Node::Tuple(items)) => format!("a tuple of {} items", items.len()),
                Some(Node::Dict(pairs)) => format!("a dict of {} keys", pairs.len()),
                None => "a dangling reference".to_owned(),
            },
        }
    }

    /// An owned copy of `item`. Shared nodes stay shared (one `Arc`).
    /// Fails on nesting deeper than [`MAX_DEPTH`], which includes cycles.
    pub(crate) fn freeze(&self, item: Item) -> Result<Value, TooDeep> {
        let mut done = HashMap::new();
        self.freeze_in(item, 0, &mut done)
    }

    fn freeze_in(&self, item: Item, depth: usize, done: &mut HashMap<NodeId, Value>) -> Result<Value, TooDeep> {
        let id = match item {
            Item::None => return Ok(Value::None),
            Item::Bool(b) => return Ok(Value::Bool(b)),
            Item::Int(n) => return Ok(Value::Int(n)),
            Item::Float(x) => return Ok(Value::Float(x)),
            Item::Node(id) => id,
        };
        if let Some(value) = done.get(&id) {
            return Ok(value.clone());
        }
        if depth >= MAX_DEPTH {
            return Err(TooDeep);
        }
        let value = match self.nodes.get(id) {
            None => Value::None,
            Some(Node::BigInt(n)) => Value::int(*n),
            Some(Node::Str(s)) => Value::Str(Arc::from(&**s)),
            Some(Node::List(items)) => Value::List(self.freeze_all(items, depth, done)?),
            Some(Node::Tuple(items)) => Value::Tuple(self.freeze_all(items, depth, done)?),
            Some(Node::Dict(pairs)) => {
                let mut out = Vec::with_capacity(pairs.len());
                for &(k, v) in pairs {
                    out.push((self.freeze_in(k, depth + 1, done)?, self.freeze_in(v, depth + 1, done)?));
                }
                Value::Dict(Arc::from(out))
            }
        };
        done.insert(id, value.clone());
        Ok(value)
    }

    fn freeze_all(&self, items: &[Item], depth: usize, done: &mut HashMap<NodeId, Value>) -> Result<Arc<[Value]>, TooDeep> {
        items.iter().map(|&i| self.freeze_in(i, depth + 1, done)).collect()
    }
}

/// [`Tree::freeze`] met nesting deeper than [`MAX_DEPTH`] (or a cycle).
#[derive(Debug)]
pub(crate) struct TooDeep;
