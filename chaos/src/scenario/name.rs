//! Names a scenario gives that become part of a path: a scenario's name is
//! the directory its failing trials are kept in (`--keep DIR/NAME/`)
//! and the file a random or shrunk scenario is written to (`NAME.json`).
//!
//! This module owns the one rule for such names ([`is_name`]) and
//! [`SafeName`], which can only be built through it. It must never accept
//! a name that is not exactly one path component of its own: no `/`, no
//! NUL or control character, not `.` or `..`, and bounded in length.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The longest scenario name.
pub const MAX_NAME_LEN: usize = 64;

/// Whether `s` is 1 to `max` characters of a-z, 0-9, '-', '_' or '.',
/// other than `.` and `..`: one path component, whatever directory it is
/// joined to.
pub fn is_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s != "."
        && s != ".."
        && s.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        })
}

/// A name that is not a [`SafeName`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("scenario name {0:?} must be 1-{MAX_NAME_LEN} characters of a-z, 0-9, '-', '_' or '.', and not \".\" or \"..\" (it names a directory)")]
pub struct BadName(pub String);

/// A scenario's name: one safe path component ([`is_name`], at most
/// [`MAX_NAME_LEN`] bytes). Deserializing one validates it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SafeName(String);

impl SafeName {
    pub fn new(name: impl Into<String>) -> Result<SafeName, BadName> {
        let name = name.into();
        if is_name(&name, MAX_NAME_LEN) {
            Ok(SafeName(name))
        } else {
            Err(BadName(name))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SafeName {
    type Error = BadName;

    fn try_from(name: String) -> Result<SafeName, BadName> {
        SafeName::new(name)
    }
}

impl From<SafeName> for String {
    fn from(name: SafeName) -> String {
        name.0
    }
}

impl std::ops::Deref for SafeName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SafeName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl AsRef<Path> for SafeName {
    fn as_ref(&self) -> &Path {
        Path::new(&self.0)
    }
}

impl fmt::Display for SafeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for SafeName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for SafeName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_plain_path_component_is_a_name() {
        for good in ["a", "small", "random-1f", "a.b", "...", "x_y-z.0"] {
            let n = SafeName::new(good).unwrap();
            assert_eq!(Path::new(n.as_str()).components().count(), 1, "{good}");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in [
            "", ".", "..", "a/b", "/", "../x", "A", "a b", "a\0", "a\n", "é", &long,
        ] {
            assert_eq!(SafeName::new(bad), Err(BadName(bad.to_string())), "{bad:?}");
        }
        assert!(SafeName::new("a".repeat(MAX_NAME_LEN)).is_ok());
    }

    #[test]
    fn deserializing_validates() {
        let n: SafeName = serde_json::from_str("\"small\"").unwrap();
        assert_eq!(n, "small");
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"small\"");
        let e = serde_json::from_str::<SafeName>("\"..\"").unwrap_err();
        assert!(e.to_string().contains("not \".\" or \"..\""), "{e}");
    }
}
