//! `session.json`: small, hot metadata, replaced atomically.
//!
//! The event log stays the source of truth for what happened; this file only
//! says what the session is (id, schema, workspace) and its status, so that
//! `ls` need not read logs. It is always replaced whole (temp, fsync,
//! rename, fsync dir), never edited in place.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::event::{now_ts, SCHEMA_VERSION};
use crate::fsutil;
use crate::layout::SessionPaths;

/// The log format this build writes (see [`SessionMeta::log_format`]).
pub const LOG_FORMAT: u32 = 2;

/// The largest `session.json` the store writes, and so reads: its fixed
/// fields take under 1 KiB, and the workspace is a path (at most 4096
/// bytes on Linux, up to 6 bytes each once JSON-escaped).
pub const META_MAX_BYTES: u64 = 64 << 10;

fn log_format_1() -> u32 {
    1
}

/// Whether a session is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Active,
    Closed,
}

/// The content of `session.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMeta {
    pub id: String,
    pub schema_version: u32,
    /// The on-disk format of `events.jsonl` (docs/on-disk-format.md):
    /// 1, a file that ends at its last line; 2, a file that may go on
    /// with pre-allocated zero bytes. Absent (a session made before 2) is 1.
    #[serde(default = "log_format_1")]
    pub log_format: u32,
    pub workspace: String,
    /// The git HEAD of the workspace when the session started, if it is a repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_head: Option<String>,
    pub status: SessionStatus,
    pub created: String,
    pub updated: String,
}

impl SessionMeta {
    /// Metadata for a session being created now.
    pub fn new(paths: &SessionPaths, workspace: &str, git_head: Option<String>) -> SessionMeta {
        let now = now_ts();
        SessionMeta {
            id: paths.id().to_string(),
            schema_version: SCHEMA_VERSION,
            log_format: LOG_FORMAT,
            workspace: workspace.to_string(),
            git_head,
            status: SessionStatus::Active,
            created: now.clone(),
            updated: now,
        }
    }

    /// Reads `session.json`.
    pub fn read(paths: &SessionPaths) -> Result<SessionMeta> {
        let path = paths.meta();
        let bytes = fsutil::read_capped(&path, META_MAX_BYTES, fsutil::Links::Refuse)?;
        serde_json::from_slice(&bytes).map_err(|e| {
            // serde_json counts lines and columns from 1; the column in bytes.
            let start: usize = bytes
                .split_inclusive(|&b| b == b'\n')
                .take(e.line().saturating_sub(1))
                .map(<[u8]>::len)
                .sum();
            Error::Damage {
                path,
                line: e.line() as u64,
                offset: (start + e.column().saturating_sub(1)).min(bytes.len()) as u64,
                reason: format!("not valid session metadata: {e}"),
            }
        })
    }

    /// Before a writer appends: a log of format 1 is every byte a log of
    /// format 2 (a format 1 log never has zeros after its last line), so it
    /// is converted by saying so here, before the first pre-allocation: a
    /// build that knows only format 1 cuts such zeros as a torn tail, and
    /// this build reads both alike. A format newer than this build's is
    /// refused: its rules are not known here.
    pub fn migrate_log_format(&mut self, paths: &SessionPaths) -> Result<()> {
        match self.log_format {
            LOG_FORMAT => Ok(()),
            newer if newer > LOG_FORMAT => Err(Error::Invalid(format!(
                "{}: log format {newer} is newer than this build's {LOG_FORMAT}",
                paths.meta().display()
            ))),
            _ => {
                self.log_format = LOG_FORMAT;
                self.write(paths)
            }
        }
    }

    /// Replaces `session.json` atomically, stamping `updated`.
    pub fn write(&mut self, paths: &SessionPaths) -> Result<()> {
        self.write_at(&paths.meta())
    }

    /// Replaces the metadata file at `path` atomically, stamping `updated`
    /// (for a session directory still being built under another name).
    pub fn write_at(&mut self, path: &Path) -> Result<()> {
        self.updated = now_ts();
        let mut bytes = serde_json::to_vec_pretty(self).expect("metadata serializes");
        bytes.push(b'\n');
        if bytes.len() as u64 > META_MAX_BYTES {
            return Err(Error::Invalid(format!(
                "{}: metadata of {} bytes (a workspace path of {} bytes) is more than the {META_MAX_BYTES} bytes of session.json",
                path.display(),
                bytes.len(),
                self.workspace.len()
            )));
        }
        fsutil::replace_atomic(path, &bytes, "meta")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::SessionId;
    use crate::session::{Session, SessionOptions};

    #[test]
    fn a_format_1_session_is_migrated_by_its_next_writer_and_a_newer_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let id = SessionId::new("s").unwrap();
        let paths = SessionPaths::new(dir.path(), &id);
        drop(Session::create(dir.path(), &id, dir.path(), SessionOptions::default()).unwrap());
        assert_eq!(SessionMeta::read(&paths).unwrap().log_format, LOG_FORMAT);
        // A session made before format 2: no log_format in session.json.
        let mut old: serde_json::Value =
            serde_json::from_slice(&std::fs::read(paths.meta()).unwrap()).unwrap();
        old.as_object_mut().unwrap().remove("log_format");
        std::fs::write(paths.meta(), old.to_string()).unwrap();
        assert_eq!(SessionMeta::read(&paths).unwrap().log_format, 1);
        let log = std::fs::read(paths.events()).unwrap();
        drop(Session::open(dir.path(), &id, SessionOptions::default()).unwrap());
        assert_eq!(SessionMeta::read(&paths).unwrap().log_format, LOG_FORMAT);
        // Its lines are unchanged: a format 1 log is a format 2 log.
        assert_eq!(std::fs::read(paths.events()).unwrap(), log);
        old["log_format"] = (LOG_FORMAT + 1).into();
        std::fs::write(paths.meta(), old.to_string()).unwrap();
        match Session::open(dir.path(), &id, SessionOptions::default()) {
            Err(Error::Invalid(m)) => assert!(m.contains("log format 3 is newer"), "{m}"),
            other => panic!("a newer format opened: {:?}", other.map(|_| ())),
        }
    }
}
