//! Stores under test as separate programs: the adapter protocol (version 1,
//! `chaos/PROTOCOL.md`) and the client that drives an adapter process.
//!
//! [`protocol`] holds the wire shapes; [`client`] spawns the adapter and
//! validates every reply. The client speaks in agentstore's data types
//! (`Event`, `Record`, `RecoveryState`) so the harness can use an adapter
//! exactly where it uses the in-process store; [`backend`] is the harness's
//! store traits over it (`agentchaos run --adapter`).

pub mod backend;
pub mod client;
pub mod protocol;

pub use backend::AdapterBackend;
pub use client::{AdapterCommand, Client, ClientError, ClientOptions, ProtocolError};
pub use protocol::{Capability, ErrorKind, OpenArgs, ProjectionView};
