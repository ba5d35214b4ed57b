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
        let bytes = std::fs::read(&path).map_err(Error::io("read", &path))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            Error::Invalid(format!(
                "{}: not valid session metadata: {e}",
                path.display()
            ))
        })
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
        fsutil::replace_atomic(path, &bytes, "meta")
    }
}
