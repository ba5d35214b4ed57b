//! agentstore: a durable, self-checking JSONL session store for AI agents.
//!
//! Layers, bottom up:
//! - [`framing`]: the bytes of one line (JSON + CRC32C), no I/O;
//! - [`scan`]: reading lines back, torn tail versus damage;
//! - [`log`] and [`durability`]: appending with a proof of durability;
//! - [`query`]: streamed reads by seq, range and type (no lock);
//! - [`create`], [`fsck`], [`repair`]: making, checking and fixing sessions;
//! - [`layout`], [`lock`], [`meta`], [`fsutil`]: where files live and how
//!   they are created and replaced durably;
//! - [`lease`]: a session owned by one worker at a time, its writes fenced
//!   by epoch;
//! - [`nodes`], [`projection`], [`session`], [`recovery`], [`checkpoint`], [`context`],
//!   [`blob`]: what makes the log an agent session (part 2);
//! - [`owner`]: a session's lease owner: taking it over (recovery under
//!   the next epoch), renewing and releasing the lease;
//! - [`adapter`]: the agentchaos adapter protocol served over a session;
//! - [`crashpoint`] and [`fault`]: hooks for the agentchaos harness, inert
//!   unless their environment variables are set;
//! - `bench` (feature `bench`, on by default): `agentstore bench`, the
//!   disk and store latency report;
//! - [`interrupt`]: clean exits on Ctrl-C and SIGTERM for long commands.

// The `coverage` feature is agentchaos-coverage's build, which
// chaos/coverage/rustc-wrapper instruments (and marks with this cfg).
#[cfg(all(feature = "coverage", not(agentstore_coverage)))]
compile_error!("the `coverage` feature is built by chaos/coverage/build, which instruments it");

pub mod adapter;
#[cfg(feature = "bench")]
pub mod bench;
pub mod blob;
pub mod checkpoint;
pub mod context;
pub mod crashpoint;
pub mod create;
pub mod durability;
pub mod error;
pub mod event;
pub mod export;
pub mod fault;
pub mod framing;
pub mod fsck;
pub mod fsutil;
pub mod index;
pub mod interrupt;
pub mod layout;
pub mod lease;
pub mod lock;
pub mod log;
pub mod meta;
pub mod nodes;
pub mod owner;
pub mod projection;
pub mod query;
pub mod recovery;
pub mod repair;
pub mod scan;
pub mod session;

pub use durability::{Acked, Durability, DurablePosition, Written};
pub use error::{Error, Result};
pub use event::{Event, Record, Seq};
pub use layout::{SessionId, SessionPaths};
pub use log::{EventLog, LogOptions, OpenReport};
pub use projection::Projection;
pub use query::{Events, LogReader, Query};
pub use recovery::{RecoveryState, UncertainCall};
pub use scan::{LogPosition, Scanner, TornTail};
pub use session::{Intent, ResumeReport, Session, SessionOptions, SessionView, SnapshotUse};
