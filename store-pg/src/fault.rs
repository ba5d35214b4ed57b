//! Deliberately broken variants of the PostgreSQL store, one broken
//! promise each, selected with `agentstore-pg adapter --fault NAME`. Each
//! is a mutant the harness must catch; a harness that passes one is worth
//! nothing for that promise.
//!
//! Without `--fault`, [`active`] is one load that returns false and the
//! store behaves as documented. Nothing here may change behaviour otherwise.

use std::sync::OnceLock;

/// Each fault breaks exactly one promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The effect ledger's table has no unique constraint on the operation
    /// id, and the ledger is that constraint: a second commit is accepted.
    LedgerWithoutUnique,
    /// Every connection runs with `synchronous_commit = off`: a commit
    /// returns before its WAL is flushed, so a database crash right after
    /// an acknowledgement can lose it.
    SynchronousCommitOff,
    /// Appends, commits and renewals of a taken-over owner are not
    /// checked against the session's epoch: the zombie writes on.
    NoEpochCheck,
    /// Lease times are the worker's clock (this process's real-time clock
    /// plus `AGENTSTORE_PG_CLOCK_SKEW_MS`), not the database's: a worker
    /// whose clock runs ahead takes over a live lease.
    LeaseByWorkerClock,
    /// A takeover grants the next epoch without recovery: the new owner
    /// acts on the previous owner's unmarked orphans.
    TakeoverWithoutRecovery,
    /// A renewal is not checked against the session's epoch: it extends
    /// the current lease, whoever holds it, and the renewing connection
    /// adopts that lease's epoch, so a taken-over owner writes on beside
    /// its successor.
    RenewWithoutEpochCheck,
    /// A worker asking again for a session whose lapsed lease names its
    /// own worker id is granted the same epoch: a second process under
    /// that id shares the epoch with the first.
    ReclaimSameEpoch,
    /// Releasing a lease (closing a leased connection) is not checked
    /// against the session's epoch: a fenced owner's close ends its
    /// successor's live lease.
    ReleaseWithoutFence,
    /// A write whose connection died in its `COMMIT` is acknowledged
    /// without asking the server whether it committed.
    LostCommitAssumed,
    /// A reconnecting connection adopts the session's current lease epoch,
    /// whoever was granted it: a reconnect becomes the new owner.
    ReconnectAdoptsEpoch,
    /// A write reads the session row (its lease and epoch) without locking
    /// it (no `FOR UPDATE`): the epoch is checked at one moment, and a
    /// takeover that commits before this write's commit is overwritten.
    FenceWithoutRowLock,
}

impl Fault {
    /// Every fault with its name and the promise it breaks.
    pub const ALL: &'static [(Fault, &'static str, &'static str)] = &[
        (
            Fault::LedgerWithoutUnique,
            "ledger-without-unique",
            "an operation id is committed at most once (the ledger's unique constraint)",
        ),
        (
            Fault::SynchronousCommitOff,
            "synchronous-commit-off",
            "an acknowledged append survives a database crash (synchronous_commit = on)",
        ),
        (
            Fault::NoEpochCheck,
            "no-epoch-check",
            "a taken-over owner's writes are refused (fenced)",
        ),
        (
            Fault::LeaseByWorkerClock,
            "lease-by-worker-clock",
            "a lease expires by the database's clock, never a worker's",
        ),
        (
            Fault::TakeoverWithoutRecovery,
            "takeover-without-recovery",
            "a takeover marks the previous owner's orphans before the new owner acts",
        ),
        (
            Fault::RenewWithoutEpochCheck,
            "renew-without-epoch-check",
            "a taken-over owner's renewal is fenced like its writes",
        ),
        (
            Fault::ReclaimSameEpoch,
            "reclaim-same-epoch",
            "every grant is a new epoch, even to the worker id that held the last one",
        ),
        (
            Fault::ReleaseWithoutFence,
            "release-without-fence",
            "a fenced owner's close leaves its successor's lease alone",
        ),
        (
            Fault::LostCommitAssumed,
            "lost-commit-assumed",
            "a write whose connection died is acknowledged only if the server committed it",
        ),
        (
            Fault::ReconnectAdoptsEpoch,
            "reconnect-adopts-epoch",
            "a reconnect keeps its connection's epoch: it is not a new owner",
        ),
        (
            Fault::FenceWithoutRowLock,
            "fence-without-row-lock",
            "a write's epoch check holds until it commits (the session row stays locked)",
        ),
    ];

    /// Looks a fault up by name.
    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL
            .iter()
            .find(|(_, n, _)| *n == name)
            .map(|(f, _, _)| *f)
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        Fault::ALL
            .iter()
            .find(|(f, _, _)| *f == self)
            .map(|(_, n, _)| *n)
            .expect("every fault is listed in ALL")
    }
}

static ACTIVE: OnceLock<Fault> = OnceLock::new();

/// Switches `fault` on for this process (once, from `main` or a test).
pub fn activate(fault: Fault) {
    let _ = ACTIVE.set(fault);
}

/// Is `fault` switched on?
pub fn active(fault: Fault) -> bool {
    ACTIVE.get() == Some(&fault)
}
