//! What "acknowledged" means: the durability modes and the proof types.
//!
//! An [`Acked`] is only ever built by the event log after the bytes of that
//! event reached stable storage (under [`Durability::Sync`] or
//! [`Durability::Batch`]). Holding one is the proof; nothing else is.

use std::time::Duration;

use crate::event::{EventId, Seq};

/// When an append may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Each append returns after its own `fdatasync`. The default.
    #[default]
    Sync,
    /// Group commit: concurrent appenders share one `fdatasync`. The first
    /// waiter leads: it waits for the appenders already inside `append`
    /// (at most `max_delay`, or until `max_events` are pending), and, while
    /// its group is smaller than the previous one, up to one more sync's
    /// duration for the appenders that sync just woke (they are likely on
    /// their way back); it syncs once and wakes everyone its sync covered.
    /// It never waits longer than one sync for appenders that have not
    /// called `append` yet, and a lone appender's groups are of one, so it
    /// pays one `fdatasync` and no delay. Each append still returns only
    /// once its own
    /// bytes are durable. `max_events` is taken as `1..=`[`MAX_GROUP_EVENTS`],
    /// and it also bounds the lines written but not yet durable: an append
    /// that would exceed it waits for the running sync first (or, when none
    /// runs, as when its group was written with [`crate::EventLog::write_with`]
    /// and nobody waits for it yet, syncs the group itself), so a power cut
    /// can tear at most one group.
    Batch {
        max_delay: Duration,
        max_events: usize,
    },
    /// No sync at all: an `Acked` proves nothing. Tests and benchmarks only.
    None,
}

impl std::str::FromStr for Durability {
    type Err = String;

    /// `sync` or `batch` (group commit with [`Durability::batch`]'s limits),
    /// as the command lines take it.
    fn from_str(s: &str) -> Result<Durability, String> {
        match s {
            "sync" => Ok(Durability::Sync),
            "batch" => Ok(Durability::batch()),
            other => Err(format!(
                "durability {} is not sync or batch",
                crate::error::quote(other)
            )),
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Durability::Sync => f.write_str("sync"),
            Durability::Batch {
                max_delay,
                max_events,
            } => write!(
                f,
                "batch (max delay {} µs, max {max_events} events)",
                max_delay.as_micros()
            ),
            Durability::None => f.write_str("none"),
        }
    }
}

impl Durability {
    /// A batch mode with defaults fit for interactive agents (1 ms, 64 events).
    pub fn batch() -> Durability {
        Durability::Batch {
            max_delay: Duration::from_millis(1),
            max_events: 64,
        }
    }
}

/// The largest group a `Batch` log commits with one `fdatasync`, and so the
/// most lines a power cut can tear (see [`crate::scan`]).
pub const MAX_GROUP_EVENTS: usize = 64;

/// A byte length of the log known to be on stable storage, with the seq of
/// the next event after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DurablePosition {
    pub(crate) len: u64,
    pub(crate) next_seq: Seq,
}

impl DurablePosition {
    /// Bytes of the log that are durable.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Whether nothing is durable yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The seq the next appended event gets.
    pub fn next_seq(&self) -> Seq {
        self.next_seq
    }
}

/// One event written to the log and not yet acknowledged: in `Batch` mode
/// its group commit may still be to come. Only [`crate::EventLog::wait`]
/// (or [`crate::Session::wait`]) turns it into an [`Acked`], so an event
/// cannot be reported durable before its sync without saying so in the
/// types.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an event is durable only once it is waited for"]
pub struct Written(pub(crate) Acked);

impl Written {
    /// The seq the event was written at (its id is `event_id(seq)`).
    pub fn seq(&self) -> Seq {
        self.0.seq
    }
}

/// Proof that one event is durable: its seq, id, and where its line lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub(crate) seq: Seq,
    pub(crate) id: EventId,
    pub(crate) offset: u64,
    pub(crate) end: u64,
}

impl Acked {
    pub fn seq(&self) -> Seq {
        self.seq
    }
    pub fn id(&self) -> &EventId {
        &self.id
    }
    /// Byte offset of the event's line.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Byte offset just past the event's newline.
    pub fn end(&self) -> u64 {
        self.end
    }
}
