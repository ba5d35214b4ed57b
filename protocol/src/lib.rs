//! The agentchaos adapter protocol, versions 1 and 2 (`chaos/PROTOCOL.md`),
//! defined once: the event vocabulary ([`event`]), every request and reply
//! ([`message`]), the projection a store serves ([`view`]) and the JSON
//! Schema derived from them ([`schema`], committed at
//! `protocol/schema/protocol.schema.json`).
//!
//! Every store and the harness use these types: agentstore (which
//! re-exports [`event`] as `agentstore::event`), the SQLite store, and
//! agentchaos's client and oracle. This crate owns shapes and their
//! conversions only; it never does I/O and never holds a store's rules,
//! but for [`fork_server`] (feature `fork-server`): version 2's transport
//! for an adapter written in Rust.

pub mod event;
#[cfg(feature = "fork-server")]
pub mod fork_server;
pub mod message;
pub mod schema;
pub mod view;

pub use event::{BlobRef, Body, Event, EventId, Record, Seq};
pub use message::{
    Capability, ErrorKind, Refusal, Request, FORK_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
pub use view::{CallView, Plan, ProjectionView};
