//! A store's keys: integers or strings, as MXNet's stores take.

use std::fmt;

/// A key: an integer or a string, as MXNet's stores take.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// An integer key (a parameter's index).
    Int(i64),
    /// A string key (a parameter's name).
    Str(String),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Int(i) => write!(f, "{i}"),
            Key::Str(s) => write!(f, "'{s}'"),
        }
    }
}

impl From<i64> for Key {
    fn from(i: i64) -> Key {
        Key::Int(i)
    }
}

impl From<i32> for Key {
    fn from(i: i32) -> Key {
        Key::Int(i.into())
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Key {
        Key::Str(s.to_string())
    }
}

impl From<String> for Key {
    fn from(s: String) -> Key {
        Key::Str(s)
    }
}
