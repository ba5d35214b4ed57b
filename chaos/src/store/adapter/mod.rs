//! Stores under test as separate programs: the client that drives an
//! adapter process over the adapter protocol (versions 1 and 2,
//! `chaos/PROTOCOL.md`; its shapes are the crate `agentchaos_protocol`).
//!
//! [`client`] spawns the adapter and validates every reply. It speaks in
//! the protocol's data types (`Event`, `Record`, `RecoveryState`) so the
//! harness can use an adapter exactly where it uses the in-process store;
//! [`backend`] is the harness's store traits over it (`agentchaos run --adapter`).

pub mod backend;
pub mod client;

pub use agentchaos_protocol::message::OpenArgs;
pub use agentchaos_protocol::{Capability, ErrorKind, ProjectionView};
pub use backend::{AdapterBackend, HandDownError};
pub use client::{
    process_counts, AdapterCommand, BadAdapterCommand, Client, ClientError, ClientOptions,
    ProcessCounts, ProtocolError,
};
