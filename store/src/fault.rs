//! Deliberately broken behaviours, one promise each, so the harness can be
//! seen to fail.
//!
//! A fault is active only when the `AGENTSTORE_FAULT` environment variable
//! names it (the harness sets it for `agentchaos run --store-fault NAME`).
//! With the variable unset, [`active`] is a single atomic load that returns
//! false and the store behaves as documented. Nothing here may change
//! behaviour without that variable.

use std::sync::OnceLock;

/// Each fault breaks exactly one promise of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Sync appends return their ack before the fdatasync (which is deferred to the next append).
    AckBeforeFsync,
    /// `tool_started` (the intent) is acknowledged but never written.
    SkipIntent,
    /// Recovery reports every uncertain call as `requested`, inviting a blind re-run.
    RerunUncertain,
    /// The snapshot is written in place (truncate + write), not via temp + rename.
    NonAtomicSnapshot,
    /// The snapshot claims one more event than its projection folded.
    CheckpointSeqAhead,
    /// Opening for writing leaves a torn tail in place, so the next append fuses onto it.
    NoTornTailRepair,
    /// The rendered context leaves out the `<recovery>` block.
    DropRecoveryBlock,
    /// Recovery marks orphaned calls again even when they are already marked.
    MarkTwice,
    /// Reading the log skips a damaged line before the tail instead of refusing it.
    SkipDamagedLines,
    /// The log never calls fdatasync: sync appends are acknowledged with their bytes in the page cache only.
    NoFdatasync,
    /// Sync appends call fdatasync before their write instead of after it (syncing only what came before).
    FdatasyncBeforeWrite,
    /// Creating a session never fsyncs the session directory, so the entry of the new events.jsonl (and of session.json) is not durable.
    NoDirFsyncCreate,
    /// The snapshot's temp file is renamed into place without being fsynced first.
    SnapshotNoFsync,
    /// The adapter's `open` refuses a session whose creation a crash interrupted (the bug the power-loss campaign found).
    RefuseIncompleteSession,
    /// A failed fdatasync of the log is retried, and the append acknowledged if the retry succeeds.
    FsyncRetry,
    /// Every append rewrites the whole log: truncate to zero, then write every line again; a crash in between loses every acknowledged event.
    RewriteWholeLog,
    /// The effect ledger is keyed by call, not by operation: a second commit of an operation from another call is accepted.
    LedgerPerCall,
    /// Opening for writing takes no lock: a second writer opens the session beside the first.
    NoWriterLock,
    /// A blob's temp file is renamed into place without being fsynced first: an event may reference a blob a power loss emptied.
    BlobNoFsync,
    /// A failed fdatasync refuses the append but keeps its bytes and goes on: no rollback, no poisoning; a retried append lands after the refused one.
    KeepRefusedAppend,
    /// A call re-run after reconciliation keeps its old recovery mark, so a crash during the re-run is never marked again.
    RerunKeepsOldMark,
    /// Batch mode acknowledges an append once it is written, comparing the wrong position (the end, not the durable length): no group sync covers it yet.
    BatchAckWhenWritten,
    /// Batch mode: an appender that finds another's group sync running returns acknowledged at once, before that sync returns (and whether or not it covers the appender's event).
    BatchFollowerEarlyAck,
    /// Batch mode: when a group sync fails, the leader is refused but the appenders that waited for it are woken as acknowledged.
    FailedSyncAcksFollowers,
    /// Batch mode: a failed write cuts the log back to its durable length, not to where its own line starts: the lines other appenders wrote and wait on are cut, and the group sync that follows acknowledges them.
    FailedWriteCutsGroup,
    /// Batch mode: a commit written by one of several parallel appenders enters the effect ledger only once a sync covers it, so a second commit of the same operation written into the same group is accepted.
    LedgerFoldedAtSync,
    /// The projection ignores a compaction's window: its branch still starts at the root.
    FoldBranchIgnoresCompaction,
    /// The projection ignores `leaf_moved`: the active leaf stays the last entry written.
    FoldWrongLeaf,
    /// The projection hangs every new entry under the active leaf, whatever its `parent`: an implicit branch (an entry under an earlier one, no `leaf_moved`) is served as more of the old branch.
    FoldIgnoresImplicitBranch,
    /// The reader's line limit is one byte below the writer's: an acknowledged event of the largest size the writer takes reads back as damage.
    ReadLimitBelowWriteLimit,
    /// The rendered context leaves out the compaction summary.
    ContextDropsSummary,
    /// A context over its token budget drops the `<recovery>` block along with the oldest entries.
    ContextBudgetDropsRecovery,
    /// A context over its token budget drops its newest entries instead of its oldest.
    ContextBudgetDropsNewest,
    /// A side-effecting tool call without an operation id is accepted: nothing can dedupe its effect.
    SkipOperationIdRule,
    /// A call without a side effect (a read, an idempotent write) marked `started` must be reconciled before it runs again, which the session rules do not ask: an agent's legal re-run of a read is refused.
    ReconcileReads,
    /// A `parent` naming no entry of the log is accepted: the new entry hangs under nothing.
    SkipParentRule,
    /// A compaction is accepted wherever it hangs (it must hang under the active leaf).
    CompactionAnywhere,
    /// A compaction is accepted whatever entry it keeps from (it must keep an entry of the active branch).
    CompactionKeepsAnything,
    /// Opening never records a quarantine file in a `tail_quarantined`: the cut stays silent.
    UnrecordedQuarantine,
    /// A second cut at the offset of an earlier one overwrites the earlier one's quarantine file.
    QuarantineOverwrite,
    /// A torn tail of exactly the most lines one write can leave is refused as damage (the bound off by one).
    TailBoundExclusive,
    /// Zeros from the start of a final segment up to a newline are taken for a lost sector and cut.
    ZerosToNewlineTorn,
    /// A leased writer's epoch is never compared with the session's: a taken-over owner's appends, intents, commits and renewals are accepted.
    NoEpochCheck,
    /// A takeover grants the next epoch but runs no recovery: the previous owner's orphans stay unmarked.
    TakeoverWithoutRecovery,
    /// Acquiring a lease never looks at the current one's expiry: a second worker takes over a live lease.
    LeaseIgnoresExpiry,
    /// A takeover cuts the log's last line (the previous owner's last acknowledged event) before its recovery.
    TakeoverTruncatesTail,
    /// Every write of a lease holder is refused with `fenced`, its epoch current or not: nothing is ever written under a lease.
    RefuseLeasedWrites,
    /// Acquiring a live lease grants it again at the same epoch: two workers hold one epoch, and both write.
    LeaseSameEpoch,
    /// Closing a fenced handle ends the current owner's lease (its expiry set to now): the next worker takes over a live owner's session at once.
    FencedCloseReleases,
    /// Renewing a lease never compares the handle's epoch with the session's: a taken-over owner's renewal writes its old epoch back, and it holds the session again.
    RenewWithoutEpochCheck,
    /// A worker asking again for a session whose lapsed lease names its own worker id is granted the same epoch: a second process under that id shares the epoch with the first.
    ReclaimSameEpoch,
    /// Releasing a lease (closing a leased handle) is acknowledged but leaves the lease live: the next worker waits out the ttl of an owner that left.
    ReleaseKeepsLease,
    /// The lease record is rewritten in place (truncate, write, fsync), not through a temp file and a rename: a crash inside a grant or a renewal leaves `lease.json` empty, and no worker can take the session over.
    LeaseWrittenInPlace,
    /// Opening for writing takes the file's size for the end of the log: appends land after the pre-allocated zeros, which then sit between acknowledged lines.
    AppendAfterPreallocation,
    /// A blob is read back without checking its size and digest: a damaged blob is served as it is.
    BlobUncheckedRead,
    /// A final segment is judged without looking for a whole valid line inside a bad piece: two acknowledged lines fused by a damaged newline, the last one's own newline gone, are cut as a torn tail.
    FusedLinesTorn,
    /// Zeros inside a torn piece are damage even where they are whole lost sectors: a torn group write that lost a sector is refused, the session no longer opens.
    LostSectorRefused,
    /// Only the first run of zeros in a torn piece is judged: written zeros after a lost sector pass for a torn write, and acknowledged-looking damage is cut.
    ZerosFirstRunOnly,
    /// A torn piece with no newline and a well-formed header is judged by its checksum, which a torn line never matches: a torn write is refused as damage.
    UnterminatedChecksumDamage,
    /// Reading the log takes a failed read (EIO) or a short read for the end of the file: an open cuts or appends over the acknowledged lines after it.
    ReadErrorIsEof,
    /// A failed rename of a blob's temp file into place is ignored: the event that references the blob is acknowledged while no blob is under its name.
    BlobRenameErrorIgnored,
    /// Creating the file a torn tail is saved to is retried under the next name after any error, not only when the name is taken: on a full disk an open with a torn tail never returns.
    QuarantineRetriesAnyError,
}

impl Fault {
    /// Every fault with its name and the promise it breaks.
    pub const ALL: &'static [(Fault, &'static str, &'static str)] = &[
        (
            Fault::AckBeforeFsync,
            "ack-before-fsync",
            "an acknowledged append is durable",
        ),
        (
            Fault::SkipIntent,
            "skip-intent",
            "the intent is durable before a side effect runs",
        ),
        (
            Fault::RerunUncertain,
            "rerun-uncertain",
            "an uncertain call is reconciled before it runs again",
        ),
        (
            Fault::NonAtomicSnapshot,
            "non-atomic-snapshot",
            "a snapshot is replaced atomically",
        ),
        (
            Fault::CheckpointSeqAhead,
            "checkpoint-seq-ahead",
            "a snapshot's seq matches its projection",
        ),
        (
            Fault::NoTornTailRepair,
            "no-torn-tail-repair",
            "a torn tail is repaired before the next append",
        ),
        (
            Fault::DropRecoveryBlock,
            "drop-recovery-block",
            "the context shows every uncertain call",
        ),
        (Fault::MarkTwice, "mark-twice", "recovery is idempotent"),
        (
            Fault::SkipDamagedLines,
            "skip-damaged-lines",
            "damage before the tail is refused, never skipped",
        ),
        (
            Fault::NoFdatasync,
            "no-fdatasync",
            "an acknowledged append is durable (power loss)",
        ),
        (
            Fault::FdatasyncBeforeWrite,
            "fdatasync-before-write",
            "an acknowledged append is durable: its own bytes are synced (power loss)",
        ),
        (
            Fault::NoDirFsyncCreate,
            "no-dir-fsync-create",
            "a created session's events.jsonl survives a power loss (its directory is fsynced)",
        ),
        (
            Fault::SnapshotNoFsync,
            "snapshot-no-fsync",
            "a snapshot is replaced atomically: its data is durable before the rename (power loss)",
        ),
        (
            Fault::RefuseIncompleteSession,
            "refuse-incomplete-session",
            "a restart opens every state a crash leaves (adapter only)",
        ),
        (
            Fault::FsyncRetry,
            "fsync-retry",
            "a failed fsync is never retried into an acknowledgement",
        ),
        (
            Fault::RewriteWholeLog,
            "rewrite-whole-log",
            "an append never puts acknowledged events at risk (it appends; it does not truncate and rewrite)",
        ),
        (
            Fault::LedgerPerCall,
            "ledger-per-call",
            "an operation is committed at most once, whichever call commits it",
        ),
        (
            Fault::NoWriterLock,
            "no-writer-lock",
            "a second writer is refused while one holds the session",
        ),
        (
            Fault::BlobNoFsync,
            "blob-no-fsync",
            "a blob an event references is durable before the event (power loss)",
        ),
        (
            Fault::KeepRefusedAppend,
            "keep-refused-append",
            "a refused append leaves nothing behind: after a failed fdatasync the log is cut back and refuses appends until reopened",
        ),
        (
            Fault::RerunKeepsOldMark,
            "rerun-keeps-old-mark",
            "a re-run after reconciliation is a new attempt: a crash during it is marked uncertain again",
        ),
        (
            Fault::BatchAckWhenWritten,
            "batch-ack-when-written",
            "in Batch mode an append returns only once a group sync covers it (run with --durability batch)",
        ),
        (
            Fault::BatchFollowerEarlyAck,
            "batch-follower-early-ack",
            "in Batch mode a follower is acknowledged only after the group sync that covers it returns (run with --durability batch)",
        ),
        (
            Fault::FailedSyncAcksFollowers,
            "failed-sync-acks-followers",
            "in Batch mode a failed group sync refuses every waiter of its group (run with --durability batch)",
        ),
        (
            Fault::FailedWriteCutsGroup,
            "failed-write-cuts-group",
            "in Batch mode a failed write takes back its own line only: no event another appender wrote is lost (run with --durability batch)",
        ),
        (
            Fault::LedgerFoldedAtSync,
            "ledger-folded-at-sync",
            "an operation is committed at most once, also when two commits of it are written into one group (run with --durability batch)",
        ),
        (
            Fault::FoldBranchIgnoresCompaction,
            "fold-branch-ignores-compaction",
            "the active branch starts at the latest compaction's first kept entry",
        ),
        (
            Fault::FoldWrongLeaf,
            "fold-wrong-leaf",
            "a leaf_moved moves the active leaf",
        ),
        (
            Fault::FoldIgnoresImplicitBranch,
            "fold-ignores-implicit-branch",
            "an entry hangs under its parent, which becomes the active branch",
        ),
        (
            Fault::ReadLimitBelowWriteLimit,
            "read-limit-below-write-limit",
            "every line the writer takes reads back",
        ),
        (
            Fault::ContextDropsSummary,
            "context-drops-summary",
            "the context shows the compaction's summary",
        ),
        (
            Fault::ContextBudgetDropsRecovery,
            "context-budget-drops-recovery",
            "a token budget never trims the recovery block",
        ),
        (
            Fault::ContextBudgetDropsNewest,
            "context-budget-drops-newest",
            "a token budget drops the oldest entries first",
        ),
        (
            Fault::SkipOperationIdRule,
            "skip-operation-id-rule",
            "a side-effecting call without an operation id is refused",
        ),
        (
            Fault::ReconcileReads,
            "reconcile-reads",
            "a read-only call marked started runs again without a reconciliation",
        ),
        (
            Fault::SkipParentRule,
            "skip-parent-rule",
            "a parent must name an existing message-like event",
        ),
        (
            Fault::CompactionAnywhere,
            "compaction-anywhere",
            "a compaction hangs under the active leaf",
        ),
        (
            Fault::CompactionKeepsAnything,
            "compaction-keeps-anything",
            "a compaction keeps an entry of the active branch",
        ),
        (
            Fault::UnrecordedQuarantine,
            "unrecorded-quarantine",
            "every cut torn tail is named by a durable tail_quarantined",
        ),
        (
            Fault::QuarantineOverwrite,
            "quarantine-overwrite",
            "a cut never destroys the bytes an earlier cut at the same offset kept",
        ),
        (
            Fault::TailBoundExclusive,
            "tail-bound-exclusive",
            "a torn tail one write could leave (up to a whole group's lines) is cut, not refused",
        ),
        (
            Fault::ZerosToNewlineTorn,
            "zeros-to-newline-torn",
            "an acknowledged line zeroed with its newline kept is damage, not a torn tail",
        ),
        (
            Fault::NoEpochCheck,
            "no-epoch-check",
            "a taken-over lease holder's writes are refused (fenced) (agentchaos workers)",
        ),
        (
            Fault::TakeoverWithoutRecovery,
            "takeover-without-recovery",
            "a takeover marks the previous owner's orphans before the new owner acts (agentchaos workers)",
        ),
        (
            Fault::LeaseIgnoresExpiry,
            "lease-ignores-expiry",
            "a live lease is never taken over (agentchaos workers)",
        ),
        (
            Fault::TakeoverTruncatesTail,
            "takeover-truncates-tail",
            "every event acknowledged to the previous owner survives a takeover (agentchaos workers)",
        ),
        (
            Fault::RefuseLeasedWrites,
            "refuse-leased-writes",
            "the current lease holder's writes are accepted (agentchaos workers)",
        ),
        (
            Fault::LeaseSameEpoch,
            "lease-same-epoch",
            "a live lease is never granted again, not even at its own epoch (agentchaos workers)",
        ),
        (
            Fault::FencedCloseReleases,
            "fenced-close-releases",
            "a fenced worker's close leaves the current owner's lease alone (agentchaos workers)",
        ),
        (
            Fault::RenewWithoutEpochCheck,
            "renew-without-epoch-check",
            "a taken-over owner's renewal is fenced like its writes (agentchaos workers)",
        ),
        (
            Fault::ReclaimSameEpoch,
            "reclaim-same-epoch",
            "every grant is a new epoch, even to the worker id that held the last one (agentchaos workers)",
        ),
        (
            Fault::ReleaseKeepsLease,
            "release-keeps-lease",
            "an acknowledged close of a leased session ends its lease (agentchaos workers)",
        ),
        (
            Fault::LeaseWrittenInPlace,
            "lease-written-in-place",
            "the lease record is replaced atomically: a crash inside a renewal leaves the session to the next worker (agentchaos workers)",
        ),
        (
            Fault::AppendAfterPreallocation,
            "append-after-preallocation",
            "a reopened log is appended at its last line, not after the zeros pre-allocated past it",
        ),
        (
            Fault::BlobUncheckedRead,
            "blob-unchecked-read",
            "a damaged blob is refused, never served",
        ),
        (
            Fault::FusedLinesTorn,
            "fused-lines-torn",
            "two acknowledged lines fused by a damaged newline are damage, never a torn tail",
        ),
        (
            Fault::LostSectorRefused,
            "lost-sector-refused",
            "a torn group write that lost whole sectors is repaired within the tail rules",
        ),
        (
            Fault::ZerosFirstRunOnly,
            "zeros-first-run-only",
            "zeros written inside a torn line (not whole lost sectors) are damage, wherever they are in it",
        ),
        (
            Fault::UnterminatedChecksumDamage,
            "unterminated-checksum-damage",
            "a torn line with no newline is repaired, whatever its header's checksum says",
        ),
        (
            Fault::ReadErrorIsEof,
            "read-error-is-eof",
            "a failed or short read of the log is refused or read on, never taken for its end (nothing acknowledged is cut or appended over)",
        ),
        (
            Fault::BlobRenameErrorIgnored,
            "blob-rename-error-ignored",
            "every blob an acknowledged event references reads back under its name",
        ),
        (
            Fault::QuarantineRetriesAnyError,
            "quarantine-retries-any-error",
            "an open that cannot save a torn tail (a full disk) refuses, and never loops",
        ),
    ];

    /// The faults only the many-workers campaign (`agentchaos workers`)
    /// reveals: a single agent never has its lease taken over.
    pub const LEASE: &'static [Fault] = &[
        Fault::NoEpochCheck,
        Fault::TakeoverWithoutRecovery,
        Fault::LeaseIgnoresExpiry,
        Fault::TakeoverTruncatesTail,
        Fault::RefuseLeasedWrites,
        Fault::LeaseSameEpoch,
        Fault::FencedCloseReleases,
        Fault::RenewWithoutEpochCheck,
        Fault::ReclaimSameEpoch,
        Fault::ReleaseKeepsLease,
        Fault::LeaseWrittenInPlace,
    ];

    /// The faults the power-loss nemesis (`agentchaos run --nemesis powerloss`) catches and kill campaigns do
    /// not: a SIGKILL keeps the page cache, and no kill point of `run`
    /// lands inside the adapter's creation of a session.
    pub const POWER_LOSS: &'static [Fault] = &[
        Fault::NoFdatasync,
        Fault::FdatasyncBeforeWrite,
        Fault::NoDirFsyncCreate,
        Fault::SnapshotNoFsync,
        Fault::RefuseIncompleteSession,
        Fault::BlobNoFsync,
    ];

    /// The fault's stable name.
    pub fn name(self) -> &'static str {
        Fault::ALL
            .iter()
            .find(|(f, _, _)| *f == self)
            .map(|(_, n, _)| *n)
            .expect("every fault is listed in ALL")
    }

    /// Looks a fault up by name.
    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL
            .iter()
            .find(|(_, n, _)| *n == name)
            .map(|(f, _, _)| *f)
    }
}

/// The environment variable that selects a fault.
pub const FAULT_ENV: &str = "AGENTSTORE_FAULT";

static ACTIVE: OnceLock<Option<Fault>> = OnceLock::new();

/// Is `fault` switched on for this process?
pub fn active(fault: Fault) -> bool {
    *ACTIVE.get_or_init(|| {
        let name = std::env::var(FAULT_ENV).ok()?;
        match Fault::from_name(&name) {
            Some(f) => Some(f),
            None => {
                eprintln!("agentstore: {FAULT_ENV}={name:?} names no fault");
                std::process::exit(2)
            }
        }
    }) == Some(fault)
}
