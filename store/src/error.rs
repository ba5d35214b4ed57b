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

    /// A read of the event log failed (EIO, ...) at a byte offset: the
    /// log is refused, never taken to end there.
    #[error("read {} at byte offset {offset}: {source} (a failed read is not the end of the log: refused)", path.display())]
    Read {
        path: PathBuf,
        offset: u64,
        #[source]
        source: io::Error,
    },

    /// A session id that could escape ROOT or is otherwise unusable.
    #[error("invalid session id {}: {reason}", quote(id))]
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
    #[error("session {id:?} is locked by another writer (pid {}); lock file {}", holder(pid), lock.display())]
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

    /// Where the store keeps a file, something it never writes there: a
    /// symbolic link, a FIFO, socket, device or directory, or a file larger
    /// than the store ever writes. Refused before a byte of it is read
    /// (never opened, for anything but a regular file); to the adapter
    /// protocol, damage.
    #[error("{} {what}", path.display())]
    Foreign { path: PathBuf, what: String },

    /// An event type this build does not know, on a line that did not mark itself ignorable.
    #[error("unknown event type {} in {}: line {line}, byte offset {offset} (written by a newer schema? lines may set \"ignorable\":true to be skipped by older readers)", quote(type_name), path.display())]
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

    /// Another owner's lease on the session is live (by this machine's clock).
    #[error("session {id:?} is leased to worker {} at epoch {epoch} until {expires_at_ms} ms since the epoch, {} ms from now by this machine's clock", quote(worker_id), expires_at_ms.saturating_sub(*now_ms))]
    LeaseHeld {
        id: String,
        worker_id: String,
        epoch: u64,
        expires_at_ms: u64,
        now_ms: u64,
    },

    /// The session's lease epoch moved past the one this handle holds:
    /// another owner took it over. Nothing was written.
    #[error("session {id:?} was taken over: this writer holds lease epoch {held}, the session is at epoch {current} (worker {}); nothing was written", quote(worker_id))]
    Fenced {
        id: String,
        held: u64,
        current: u64,
        worker_id: String,
    },
}

/// How many characters of user input or file contents an error message quotes.
pub const QUOTE_CHARS: usize = 80;

/// The longest error message the CLI prints or the adapter sends, in characters.
pub const MESSAGE_CHARS: usize = 1024;

/// `text` quoted for a one-line message: in double quotes, with quotes,
/// backslashes and control characters (newlines!) escaped, and cut after
/// [`QUOTE_CHARS`] characters with an ellipsis and its full length.
pub fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars().take(QUOTE_CHARS) {
        out.extend(c.escape_debug());
    }
    out.push('"');
    let total = text.chars().count();
    if total > QUOTE_CHARS {
        out = format!("{}…\" ({total} chars)", &out[..out.len() - 1]);
    }
    out
}

/// `message` made safe to print as one line: control characters escaped,
/// and cut after [`MESSAGE_CHARS`] characters with an ellipsis and its full
/// length. The last guard for messages built from text this store does not
/// control (a parser's complaint that quotes its input, a path).
pub fn one_line(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MESSAGE_CHARS));
    for c in message.chars().take(MESSAGE_CHARS) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    let total = message.chars().count();
    if total > MESSAGE_CHARS {
        out.push_str(&format!("… ({total} chars)"));
    }
    out
}

/// The lock holder as the lock file names it: a pid as is, anything else quoted.
fn holder(pid: &str) -> String {
    if pid == "unknown"
        || (!pid.is_empty() && pid.len() <= 20 && pid.bytes().all(|b| b.is_ascii_digit()))
    {
        pid.to_string()
    } else {
        quote(pid)
    }
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
