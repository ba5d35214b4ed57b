//! The tables of a session database and how a connection to it is set up.
//!
//! `events` is the source of truth (seq, type, time, the event as JSON).
//! The other tables are derived from it inside the same transaction as
//! each insert, so they can never disagree with it on disk:
//! `session` (id, workspace, active leaf), `runs`, `nodes` (the history
//! tree), `calls` (tool calls and how far each got), `effects` (the effect
//! ledger: one row per committed operation id, `UNIQUE`) and `plan`.
//! `blobs` holds large payloads by SHA-256, committed before any event can
//! reference them.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::error::{Result, StoreError};

/// Bumped when the tables change shape.
pub const SCHEMA_VERSION: i64 = 1;

const TABLES: &str = "
CREATE TABLE session (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    session_id TEXT NOT NULL,
    workspace TEXT NOT NULL,
    leaf INTEGER
);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY,
    type TEXT NOT NULL,
    ts TEXT NOT NULL,
    json TEXT NOT NULL
);
CREATE TABLE runs (
    started_seq INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    ended TEXT
);
CREATE TABLE nodes (
    seq INTEGER PRIMARY KEY,
    parent INTEGER,
    first_kept INTEGER
);
CREATE TABLE calls (
    seq INTEGER PRIMARY KEY,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    args TEXT NOT NULL,
    effect TEXT NOT NULL,
    operation_id TEXT,
    target TEXT,
    needs_approval INTEGER NOT NULL,
    approval TEXT,
    started INTEGER NOT NULL DEFAULT 0,
    recovery TEXT,
    reconciled TEXT,
    result_seq INTEGER
);
CREATE UNIQUE INDEX calls_open ON calls (call_id) WHERE result_seq IS NULL;
CREATE TABLE effects (
    operation_id TEXT NOT NULL UNIQUE,
    call_seq INTEGER NOT NULL,
    external_ref TEXT NOT NULL,
    seq INTEGER NOT NULL
);
CREATE TABLE plan (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    goal TEXT NOT NULL,
    steps TEXT NOT NULL
);
CREATE TABLE blobs (
    digest TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
";

/// Opens `path` (creating the file only when `create`) with the durability
/// and locking settings every session connection uses: exclusive locking
/// (a second writer gets `locked` at once), WAL, `synchronous=FULL` (a
/// commit returns after the WAL is fsynced).
pub fn connect(path: &Path, create: bool) -> Result<Connection> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    // With exclusive locking, a second writer fails on its first access.
    let held = |e: StoreError| match e {
        StoreError::Locked(_) => StoreError::Locked(format!(
            "session database {} is held by another writer",
            path.display()
        )),
        e => e,
    };
    connect_locked(path, flags).map_err(held)
}

fn connect_locked(path: &Path, flags: OpenFlags) -> Result<Connection> {
    let conn = Connection::open_with_flags(path, flags).map_err(StoreError::sqlite("open"))?;
    conn.busy_timeout(Duration::ZERO)
        .map_err(StoreError::sqlite("set busy timeout"))?;
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
        .map_err(StoreError::sqlite("set locking_mode"))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(StoreError::sqlite("set journal_mode"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Io(format!(
            "sqlite: {} refused WAL mode (journal_mode is {mode})",
            path.display()
        )));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(StoreError::sqlite("set synchronous"))?;
    Ok(conn)
}

/// Creates the tables (inside the caller's transaction).
pub fn create_tables(conn: &Connection) -> Result<()> {
    conn.execute_batch(TABLES)
        .map_err(StoreError::sqlite("create tables"))?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(StoreError::sqlite("set user_version"))
}

/// The schema version of an existing database (0: no tables yet).
pub fn version(conn: &Connection) -> Result<i64> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(StoreError::sqlite("read user_version"))
}
