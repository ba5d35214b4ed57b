//! The store's error type.
//!
//! Every error renders as one line that names what is wrong and where (file,
//! line, byte offset). The CLI prints exactly that line and exits non-zero;
//! nothing in the store panics on bad input.

use std::io;
use std::path::PathBuf;

/// Result alias used across the store.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the store can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O call failed. `op` names the call (`fdatasync`, `rename`, ...).
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// A session id that could escape ROOT or is otherwise unusable.
    #[error("invalid session id {id:?}: {reason}")]
    InvalidSessionId { id: String, reason: &'static str },

    /// The session does not exist under ROOT.
    #[error("no session {id:?} under {}", root.display())]
    NoSuchSession { id: String, root: PathBuf },

    /// The session already exists (on create).
    #[error("session {id:?} already exists under {}", root.display())]
    SessionExists { id: String, root: PathBuf },

    /// The session's creation was interrupted before `session_created` became
    /// durable: its log holds no event. Opening it for creation finishes it.
    #[error("session {id:?} is incomplete: its creation was interrupted before session_created became durable (open_or_create finishes it)")]
    IncompleteSession { id: String },

    /// Another process holds the writer lock.
    #[error("session {id:?} is locked by another writer (pid {pid}); lock file {}", lock.display())]
    SessionLocked {
        id: String,
        pid: String,
        lock: PathBuf,
    },

    /// Damaged data: a line before the log's tail, a snapshot or a blob.
    /// Never skipped: the store refuses to load it.
    #[error("damaged {}: line {line}, byte offset {offset}: {reason}", path.display())]
    Damage {
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        offset: u64,
        reason: String,
    },

    /// An event type this build does not know, on a line that did not mark itself ignorable.
    #[error("unknown event type {type_name:?} in {}: line {line}, byte offset {offset} (written by a newer schema? lines may set \"ignorable\":true to be skipped by older readers)", path.display())]
    UnknownEventType {
        path: PathBuf,
        line: u64,
        offset: u64,
        type_name: String,
    },

    /// A previous fdatasync failed: the handle refuses every append until reopened.
    #[error("event log {} is poisoned by an earlier failure ({reason}); reopen the session", path.display())]
    Poisoned { path: PathBuf, reason: String },

    /// An event larger than the framing allows.
    #[error(
        "event of {size} bytes exceeds the limit of {limit} bytes (store large payloads as blobs)"
    )]
    EventTooLarge { size: usize, limit: usize },

    /// A session rule was broken at append time (part 2).
    #[error("rule violated: {0}")]
    Rule(String),

    /// Input that is not what it should be (CLI input, snapshot, metadata).
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// Wraps an `io::Error` with the call and path it came from.
    pub fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { op, path, source }
    }

    /// True for errors caused by the log being damaged (as opposed to I/O or misuse).
    pub fn is_damage(&self) -> bool {
        matches!(self, Error::Damage { .. } | Error::UnknownEventType { .. })
    }
}
