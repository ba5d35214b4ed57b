//! A SQLite-backed agent session store: a second, independent
//! implementation of the session semantics agentstore has, so agentchaos is
//! shown on a store that is not JSONL.
//!
//! One database per session (`ROOT/<session>.sqlite`), WAL journal,
//! `synchronous=FULL`, exclusive locking (one writer). Every append is one
//! transaction that checks the session rules, inserts the event and updates
//! the derived tables (runs, the history tree, calls, the effect ledger,
//! the plan); it is acknowledged only after `COMMIT` returned, i.e. after
//! the WAL was fsynced. Only the protocol's shapes (the crate
//! `agentchaos_protocol`: events, requests, replies) are shared with
//! agentstore: the rules, recovery, projection and context here are this
//! crate's own.
//!
//! - [`schema`]: the tables and how a connection is set up;
//! - [`store`]: create, open, append (rules and derived state), recover;
//! - [`view`]: the projection and the model's context, read from the tables;
//! - [`serve`]: the agentchaos adapter protocol on stdin/stdout;
//! - [`mutant`]: deliberately broken variants (`--mutant NAME`), inert unless selected.

pub mod error;
pub mod mutant;
pub mod schema;
pub mod serve;
pub mod store;
pub mod view;

pub use error::{Result, StoreError};
pub use store::SqliteStore;
