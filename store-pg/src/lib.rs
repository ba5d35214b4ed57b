//! agentstore-pg: an agent session store on a real PostgreSQL server, with
//! agentstore's session semantics (its rules and fold, `agentstore::projection`),
//! speaking the agentchaos adapter protocol, and a private PostgreSQL
//! cluster for tests and the harness.
//!
//! Events are rows keyed by `(session, seq)`; the effect ledger is a
//! unique constraint on `(session, operation_id)`; every append is one
//! transaction, acknowledged after its `COMMIT` returned with
//! `synchronous_commit = on`.
//!
//! - [`cluster`]: a private PostgreSQL cluster (initdb, start, crash, restart);
//! - [`schema`]: the tables and how a connection is set up;
//! - [`store`]: create, open, append, recover, read back;
//! - [`context`]: the model's context from the fold;
//! - [`serve`]: the adapter protocol on stdin/stdout;
//! - [`fault`]: deliberately broken variants (`--fault NAME`), inert unless selected;
//! - `bench` (feature `bench`): `agentstore-pg bench`, against agentstore in one run.

#[cfg(feature = "bench")]
pub mod bench;
pub mod cluster;
pub mod context;
pub mod error;
pub mod fault;
pub mod schema;
pub mod serve;
pub mod store;

pub use error::{Result, StoreError};
pub use store::PgStore;
