//! What the SQLite store can refuse or fail at, one line each, with the
//! protocol error kind it is reported as.

use agentchaos_protocol::ErrorKind;
use rusqlite::ErrorCode;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A refusal or failure of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A session rule refused the event; nothing was written.
    #[error("rule violated: {0}")]
    Rule(String),
    /// The database or a file could not be read or written.
    #[error("{0}")]
    Io(String),
    /// The database is not a session database or is corrupt.
    #[error("{0}")]
    Damage(String),
    /// Another process holds the session.
    #[error("{0}")]
    Locked(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Exists(String),
    /// Unusable input (a bad session id, a moved workspace).
    #[error("{0}")]
    Invalid(String),
}

impl StoreError {
    /// The protocol's error kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Rule(_) => ErrorKind::Rule,
            StoreError::Io(_) => ErrorKind::Io,
            StoreError::Damage(_) => ErrorKind::Damage,
            StoreError::Locked(_) => ErrorKind::Locked,
            StoreError::NotFound(_) => ErrorKind::NotFound,
            StoreError::Exists(_) => ErrorKind::Exists,
            StoreError::Invalid(_) => ErrorKind::Invalid,
        }
    }

    /// Wraps a SQLite error with what was being done.
    pub fn sqlite(doing: &str) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
        move |e| {
            let msg = format!("sqlite: {doing}: {e}");
            match e.sqlite_error_code() {
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                    StoreError::Locked(format!("{msg} (another process holds the session)"))
                }
                Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
                    StoreError::Damage(msg)
                }
                // The derived tables carry the rules as constraints too (a
                // second commit of an operation id): a refusal, not a failure.
                Some(ErrorCode::ConstraintViolation) => StoreError::Rule(msg),
                _ => StoreError::Io(msg),
            }
        }
    }

    /// Wraps an I/O error with the call and path.
    pub fn io(op: &str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StoreError {
        let what = format!("{op} {}", path.display());
        move |e| StoreError::Io(format!("{what}: {e}"))
    }
}
