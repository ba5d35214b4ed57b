//! The SQLite baseline: what a user would reach for instead of the store.
//!
//! WAL journal, `synchronous=FULL` (the WAL is synced at every commit, so a
//! committed row survives power loss, as an acked store append does), one
//! transaction per event. Each row holds the same line bytes the store
//! writes, already encoded: SQLite gets the serialization for free, which
//! makes the comparison conservative for the store.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection};

use super::BenchError;

/// One SQLite database receiving one event per transaction.
#[derive(Debug)]
pub struct SqliteLog {
    path: PathBuf,
    conn: Connection,
    line: Vec<u8>,
    seq: i64,
}

impl SqliteLog {
    /// Creates the database at `path` with the schema and pragmas above.
    pub fn create(path: &Path, line: &[u8]) -> Result<SqliteLog, BenchError> {
        let err = |e| BenchError::sqlite(path, e);
        let conn = Connection::open(path).map_err(err)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(BenchError::Sqlite {
                path: path.to_path_buf(),
                reason: format!("journal_mode=WAL refused (got {mode})"),
            });
        }
        conn.execute_batch(
            "PRAGMA synchronous=FULL;
             CREATE TABLE events (seq INTEGER PRIMARY KEY, line BLOB NOT NULL);",
        )
        .map_err(err)?;
        Ok(SqliteLog {
            path: path.to_path_buf(),
            conn,
            line: line.to_vec(),
            seq: 0,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Inserts one event in its own (autocommit) transaction; returns once committed.
    pub fn op(&mut self) -> Result<(), BenchError> {
        let inserted = self
            .conn
            .prepare_cached("INSERT INTO events (seq, line) VALUES (?1, ?2)")
            .and_then(|mut stmt| stmt.execute(params![self.seq, self.line]));
        inserted.map_err(|e| BenchError::sqlite(&self.path, e))?;
        self.seq += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_op_commits_one_row_in_wal_mode() {
        let d = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let path = d.path().join("events.db");
        let mut db = SqliteLog::create(&path, b"{\"x\":1}\n").unwrap();
        for _ in 0..3 {
            db.op().unwrap();
        }
        // A second connection sees every committed row.
        let other = Connection::open(&path).unwrap();
        let n: i64 = other
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3);
        let mode: String = other
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }
}
