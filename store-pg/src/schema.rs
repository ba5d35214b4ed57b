//! The tables of the PostgreSQL store and how a connection is set up.
//!
//! - `sessions`: one row per (root, session), its key, its `next_seq` and
//!   its lease (`lease_worker`, `lease_epoch`: 0 when never leased,
//!   `lease_granted_ms`, `lease_expires_ms`: the database's clock). Every
//!   write locks this row (`FOR UPDATE`), so writes to one session are
//!   serialized however many processes write it, and each checks the
//!   lease epoch in its own transaction;
//! - `events`: the source of truth, keyed by `(session_key, seq)`, the
//!   event as JSON text (byte for byte what was acknowledged);
//! - `effects`: the effect ledger, `UNIQUE (session_key, operation_id)`:
//!   the constraint itself refuses a second commit, in the same
//!   transaction as the event;
//! - `blobs`: payloads by SHA-256.
//!
//! Everything lives in one PostgreSQL schema ([`schema_name`]); a store
//! with the `ledger-without-unique` fault uses a schema of its own, so its
//! broken ledger never shares a table with a correct one.

use postgres::{Client, NoTls};

use crate::error::{Result, StoreError};
use crate::fault::{self, Fault};

/// Any fixed key: the advisory lock that serializes creating the tables
/// (concurrent `CREATE TABLE IF NOT EXISTS` can fail on the catalog).
const DDL_LOCK: i64 = 0x6167_656e_7473_7467; // "agentstg"

/// The PostgreSQL schema holding this store's tables.
pub fn schema_name() -> &'static str {
    if fault::active(Fault::LedgerWithoutUnique) {
        "agentstore_fault_ledger_without_unique"
    } else {
        "agentstore"
    }
}

fn tables(schema: &str, ledger_unique: bool) -> String {
    let unique = if ledger_unique {
        ",\n    UNIQUE (session_key, operation_id)"
    } else {
        ""
    };
    format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.sessions (
    key bigserial PRIMARY KEY,
    root text NOT NULL,
    session text NOT NULL,
    next_seq bigint NOT NULL,
    UNIQUE (root, session)
);
ALTER TABLE {schema}.sessions
    ADD COLUMN IF NOT EXISTS lease_worker text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS lease_epoch bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS lease_granted_ms bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS lease_expires_ms bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS {schema}.events (
    session_key bigint NOT NULL REFERENCES {schema}.sessions (key),
    seq bigint NOT NULL,
    ts text NOT NULL,
    event text NOT NULL,
    PRIMARY KEY (session_key, seq)
);
CREATE TABLE IF NOT EXISTS {schema}.effects (
    session_key bigint NOT NULL REFERENCES {schema}.sessions (key),
    operation_id text NOT NULL,
    seq bigint NOT NULL,
    external_ref text NOT NULL{unique}
);
CREATE TABLE IF NOT EXISTS {schema}.blobs (
    digest text PRIMARY KEY,
    data bytea NOT NULL
);"
    )
}

/// Connects to `dsn`, sets the durability every session connection uses
/// (`synchronous_commit = on`: a commit returns after its WAL is flushed
/// on the server) and creates the tables if they are missing.
///
/// The tables are created (or given the lease columns) only when the
/// catalog says something is missing: `ALTER TABLE` takes an exclusive
/// lock on `sessions` even when each column exists, so running it on every
/// connect would make a worker's open wait for any other worker's
/// transaction that holds a session row.
pub fn connect(dsn: &str) -> Result<Client> {
    let mut client = Client::connect(dsn, NoTls).map_err(StoreError::pg("connect"))?;
    let sync = if fault::active(Fault::SynchronousCommitOff) {
        "off" // Broken on purpose: commits return before the WAL is flushed.
    } else {
        "on"
    };
    client
        .batch_execute(&format!(
            "SET synchronous_commit = {sync}; SET TIME ZONE 'UTC';"
        ))
        .map_err(StoreError::pg("set synchronous_commit"))?;
    if tables_are_complete(&mut client, schema_name())? {
        return Ok(client);
    }
    let mut tx = client.transaction().map_err(StoreError::pg("begin"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&DDL_LOCK])
        .map_err(StoreError::pg("lock the schema"))?;
    tx.batch_execute(&tables(
        schema_name(),
        !fault::active(Fault::LedgerWithoutUnique),
    ))
    .map_err(StoreError::pg("create tables"))?;
    tx.commit().map_err(StoreError::pg("commit the tables"))?;
    Ok(client)
}

/// Whether every table and column of [`tables`] exists, read from the
/// catalog alone: `to_regclass` and `pg_attribute` take no lock on the
/// tables, so a transaction holding a session row never delays this.
fn tables_are_complete(client: &mut Client, schema: &str) -> Result<bool> {
    let row = client
        .query_one(
            "SELECT to_regclass($1 || '.events') IS NOT NULL
                AND to_regclass($1 || '.effects') IS NOT NULL
                AND to_regclass($1 || '.blobs') IS NOT NULL
                AND (SELECT count(*) FROM pg_attribute
                     WHERE attrelid = to_regclass($1 || '.sessions')
                       AND attname IN ('lease_worker', 'lease_epoch',
                                       'lease_granted_ms', 'lease_expires_ms')
                       AND NOT attisdropped) = 4",
            &[&schema],
        )
        .map_err(StoreError::pg("read the catalog"))?;
    Ok(row.get(0))
}
