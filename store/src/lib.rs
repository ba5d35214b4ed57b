//! agentstore: a durable, self-checking JSONL session store for AI agents.
//!
//! Layers, bottom up:
//! - [`framing`]: the bytes of one line (JSON + CRC32C), no I/O;
//! - [`scan`]: reading lines back, torn tail versus damage;
//! - [`log`] and [`durability`]: appending with a proof of durability;
//! - [`layout`], [`lock`], [`meta`], [`fsutil`]: where files live and how
//!   they are created and replaced durably;
//! - [`crashpoint`] and [`fault`]: hooks for the agentchaos harness, inert
//!   unless their environment variables are set;
//! - [`bench`]: `agentstore bench`, the disk and store latency report.

pub mod bench;
pub mod crashpoint;
pub mod durability;
pub mod error;
pub mod event;
pub mod fault;
pub mod framing;
pub mod fsutil;
pub mod index;
pub mod layout;
pub mod lock;
pub mod log;
pub mod meta;
pub mod scan;

pub use durability::{Acked, Durability, DurablePosition};
pub use error::{Error, Result};
pub use event::{Event, Record, Seq};
pub use layout::{SessionId, SessionPaths};
pub use log::{EventLog, LogOptions, OpenReport};
pub use scan::{LogPosition, Scanner, TornTail};
