//! What the PostgreSQL store can refuse or fail at, one line each, with
//! the protocol error kind it is reported as.

use agentchaos_protocol::ErrorKind;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A refusal or failure of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A session rule (or the ledger's unique constraint) refused the
    /// event; the transaction rolled back, nothing was written.
    #[error("rule violated: {0}")]
    Rule(String),
    /// The database could not be reached, or a statement or commit failed
    /// for another reason than a rule: the event is not acknowledged.
    #[error("{0}")]
    Io(String),
    /// A stored event is not an event of this protocol.
    #[error("{0}")]
    Damage(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Exists(String),
    /// Unusable input (a bad session id, a moved workspace).
    #[error("{0}")]
    Invalid(String),
    /// Another owner's lease on the session is live (by the database's clock).
    #[error("{0}")]
    LeaseHeld(String),
    /// The session's lease epoch moved past this connection's: another
    /// owner took over; nothing was written.
    #[error("{0}")]
    Fenced(String),
}

impl StoreError {
    /// The protocol's error kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Rule(_) => ErrorKind::Rule,
            StoreError::Io(_) => ErrorKind::Io,
            StoreError::Damage(_) => ErrorKind::Damage,
            StoreError::NotFound(_) => ErrorKind::NotFound,
            StoreError::Exists(_) => ErrorKind::Exists,
            StoreError::Invalid(_) => ErrorKind::Invalid,
            StoreError::LeaseHeld(_) => ErrorKind::LeaseHeld,
            StoreError::Fenced(_) => ErrorKind::Fenced,
        }
    }

    /// Wraps a PostgreSQL error with what was being done. A unique
    /// violation is the ledger refusing a second commit: a rule.
    pub fn pg(doing: &str) -> impl FnOnce(postgres::Error) -> StoreError + '_ {
        move |e| {
            let detail = match e.as_db_error() {
                Some(db) => format!("{} ({})", db.message(), db.code().code()),
                None => e.to_string(),
            };
            let msg = format!("postgres: {doing}: {detail}");
            match e.code() {
                Some(&postgres::error::SqlState::UNIQUE_VIOLATION) => StoreError::Rule(msg),
                _ => StoreError::Io(msg),
            }
        }
    }
}

impl From<agentstore::Error> for StoreError {
    fn from(e: agentstore::Error) -> Self {
        match e {
            agentstore::Error::Rule(m) => StoreError::Rule(m),
            e @ agentstore::Error::InvalidSessionId { .. } => StoreError::Invalid(e.to_string()),
            e => StoreError::Io(e.to_string()),
        }
    }
}
