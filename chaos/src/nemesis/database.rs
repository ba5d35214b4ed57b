//! The database-crash nemesis: a store whose events live in a database
//! server (the PostgreSQL store) loses the server, not its own process.
//! Each crash is real, on a private PostgreSQL cluster the harness started
//! ([`agentstore_pg::cluster`]), never on any other server:
//!
//! - `immediate`: `pg_ctl stop -m immediate`: the server quits at once,
//!   without a checkpoint, and replays its WAL at the next start;
//! - `kill`: SIGKILL of every process of the server (postmaster, backends,
//!   background writers) at once, as an OOM kill or a crash of its host;
//! - `kill-frozen`: before the first append, the server's background
//!   processes (WAL writer, background writer, checkpointer, autovacuum)
//!   are stopped with SIGSTOP, then SIGKILL as `kill`. Nothing but the
//!   backend serving the store can then write WAL, so what a commit did
//!   not flush itself (an asynchronous commit, `synchronous_commit = off`)
//!   is lost, every time: the crash that WAL writer's timer would
//!   otherwise win or lose by chance.
//!
//! The kernel's page cache survives every one of these (the machine does
//! not lose power): what they model is a crash of the server process, not
//! of the disk. This module owns the crash models and how each is applied
//! to a cluster; it never decides whether a trial passed.

use std::fmt;
use std::str::FromStr;

use agentstore_pg::cluster::{Cluster, ClusterError};

/// How the database server dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DatabaseCrash {
    Immediate,
    Kill,
    KillFrozen,
}

impl DatabaseCrash {
    pub const ALL: [DatabaseCrash; 3] = [
        DatabaseCrash::Immediate,
        DatabaseCrash::Kill,
        DatabaseCrash::KillFrozen,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DatabaseCrash::Immediate => "immediate",
            DatabaseCrash::Kill => "kill",
            DatabaseCrash::KillFrozen => "kill-frozen",
        }
    }

    /// What it does, in words, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            DatabaseCrash::Immediate => "pg_ctl stop -m immediate",
            DatabaseCrash::Kill => "SIGKILL of every server process",
            DatabaseCrash::KillFrozen => {
                "SIGKILL of every server process, its background writers stopped since before the first append"
            }
        }
    }

    /// Called before the store's first append: `kill-frozen` stops the
    /// server's background processes here.
    pub fn prepare(self, cluster: &Cluster) -> Result<(), ClusterError> {
        if self == DatabaseCrash::KillFrozen {
            cluster.freeze_background()?;
        }
        Ok(())
    }

    /// Crashes the server.
    pub fn apply(self, cluster: &mut Cluster) -> Result<(), ClusterError> {
        match self {
            DatabaseCrash::Immediate => cluster.stop_immediate(),
            DatabaseCrash::Kill | DatabaseCrash::KillFrozen => cluster.kill(),
        }
    }
}

impl fmt::Display for DatabaseCrash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A crash model that is not one of [`DatabaseCrash::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown database crash {0:?} (immediate, kill or kill-frozen)")]
pub struct UnknownDatabaseCrash(pub String);

impl FromStr for DatabaseCrash {
    type Err = UnknownDatabaseCrash;

    fn from_str(s: &str) -> Result<Self, UnknownDatabaseCrash> {
        DatabaseCrash::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownDatabaseCrash(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in DatabaseCrash::ALL {
            assert_eq!(c.name().parse::<DatabaseCrash>(), Ok(c));
        }
        assert!("stop".parse::<DatabaseCrash>().is_err());
    }
}
