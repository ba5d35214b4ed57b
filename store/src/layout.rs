//! Where things live under ROOT, and which session ids are acceptable.
//!
//! `ROOT/sessions/<session-id>/{session.json, events.jsonl, lock, ...}`.
//! This module owns path construction; it must never build a path from an
//! unvalidated id, so nothing can resolve outside ROOT.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Longest accepted session id, in bytes.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// A validated session id: ASCII letters, digits, `-`, `_`, `.`; not `.` or
/// `..`, not starting with `.`, at most [`MAX_SESSION_ID_LEN`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct SessionId(String);

impl SessionId {
    /// Validates `id`.
    pub fn new(id: &str) -> Result<SessionId> {
        let bad = |reason| Error::InvalidSessionId {
            id: id.to_string(),
            reason,
        };
        if id.is_empty() {
            return Err(bad("empty"));
        }
        if id.len() > MAX_SESSION_ID_LEN {
            return Err(bad("longer than 128 bytes"));
        }
        if id.starts_with('.') {
            return Err(bad(
                "must not start with '.' (no '.', '..' or hidden names)",
            ));
        }
        if id.contains(['/', '\\']) {
            return Err(bad("contains a path separator"));
        }
        if id.chars().any(|c| c.is_control()) {
            return Err(bad("contains a control character"));
        }
        if !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(bad(
                "only ASCII letters, digits, '-', '_' and '.' are allowed",
            ));
        }
        Ok(SessionId(id.to_string()))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The file names inside one session directory.
pub const EVENTS_FILE: &str = "events.jsonl";
/// Session metadata, replaced atomically.
pub const META_FILE: &str = "session.json";
/// The writer lock (flock).
pub const LOCK_FILE: &str = "lock";
/// The checkpoint snapshot (part 2).
pub const SNAPSHOT_FILE: &str = "snapshot.json";
/// The lease record of a leased session ([`crate::lease`]).
pub const LEASE_FILE: &str = "lease.json";
/// Content-addressed blobs (part 2).
pub const BLOBS_DIR: &str = "blobs";

/// What the name of a quarantine file starts with: the torn bytes a writer
/// cut at byte offset N are saved to `events.jsonl.torn-N` (or
/// `events.jsonl.torn-N.K`, K = 1, 2, …, when an earlier cut at N left one).
pub const QUARANTINE_PREFIX: &str = "events.jsonl.torn-";

/// The byte offset a quarantine file's name says its bytes were cut at, or
/// `None` if `name` is not a quarantine file's name.
pub fn quarantine_offset(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(QUARANTINE_PREFIX)?;
    let (offset, copy) = match rest.split_once('.') {
        Some((offset, copy)) => (offset, Some(copy)),
        None => (rest, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(offset) || copy.is_some_and(|c| !digits(c)) {
        return None;
    }
    offset.parse().ok()
}

/// Paths of one session under ROOT.
#[derive(Debug, Clone)]
pub struct SessionPaths {
    root: PathBuf,
    id: SessionId,
    dir: PathBuf,
}

impl SessionPaths {
    /// Paths of session `id` under `root`.
    pub fn new(root: &Path, id: &SessionId) -> SessionPaths {
        SessionPaths {
            root: root.to_path_buf(),
            id: id.clone(),
            dir: sessions_dir(root).join(id.as_str()),
        }
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn id(&self) -> &SessionId {
        &self.id
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn events(&self) -> PathBuf {
        self.dir.join(EVENTS_FILE)
    }
    pub fn meta(&self) -> PathBuf {
        self.dir.join(META_FILE)
    }
    pub fn lock(&self) -> PathBuf {
        self.dir.join(LOCK_FILE)
    }
    pub fn snapshot(&self) -> PathBuf {
        self.dir.join(SNAPSHOT_FILE)
    }
    /// The lease record of a leased session ([`crate::lease`]).
    pub fn lease(&self) -> PathBuf {
        self.dir.join(LEASE_FILE)
    }
    pub fn blobs(&self) -> PathBuf {
        self.dir.join(BLOBS_DIR)
    }
    /// The quarantine files in the session directory, `(name, offset)`,
    /// sorted by name.
    pub fn quarantine_files(&self) -> Result<Vec<(String, u64)>> {
        let entries = std::fs::read_dir(&self.dir).map_err(Error::io("read_dir", &self.dir))?;
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(Error::io("read_dir", &self.dir))?;
            if let Some(name) = entry.file_name().to_str() {
                if let Some(offset) = quarantine_offset(name) {
                    found.push((name.to_string(), offset));
                }
            }
        }
        found.sort();
        Ok(found)
    }
}

/// `ROOT/sessions`.
pub fn sessions_dir(root: &Path) -> PathBuf {
    root.join("sessions")
}

/// The ids of every session under ROOT, sorted. Entries that are not valid ids are ignored
/// here because they cannot be sessions this store created; `fsck` reports them.
pub fn list_sessions(root: &Path) -> Result<Vec<SessionId>> {
    let dir = sessions_dir(root);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read_dir", &dir)(e)),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(Error::io("read_dir", &dir))?;
        if let Some(name) = entry.file_name().to_str() {
            if let Ok(id) = SessionId::new(name) {
                if entry.path().join(EVENTS_FILE).exists() {
                    ids.push(id);
                }
            }
        }
    }
    ids.sort();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_ids_that_could_escape_root() {
        for bad in [
            "", ".", "..", "../x", "a/b", "a\\b", ".hidden", "a\nb", "a\0b", "é",
        ] {
            assert!(SessionId::new(bad).is_err(), "{bad:?} accepted");
        }
        let long = "x".repeat(MAX_SESSION_ID_LEN + 1);
        assert!(SessionId::new(&long).is_err());
        assert!(SessionId::new(&"x".repeat(MAX_SESSION_ID_LEN)).is_ok());
        assert!(SessionId::new("fix-tests_01.v2").is_ok());
    }

    #[test]
    fn quarantine_names_carry_their_offset() {
        assert_eq!(quarantine_offset("events.jsonl.torn-812"), Some(812));
        assert_eq!(quarantine_offset("events.jsonl.torn-812.2"), Some(812));
        for other in [
            "events.jsonl",
            "events.jsonl.torn-",
            "events.jsonl.torn-x",
            "events.jsonl.torn-8.",
            "events.jsonl.torn-8.tmp",
            "events.jsonl.torn-8.1.1",
        ] {
            assert_eq!(quarantine_offset(other), None, "{other}");
        }
    }
}
