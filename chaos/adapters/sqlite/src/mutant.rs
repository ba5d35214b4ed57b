//! Deliberately broken variants of this store, one broken promise each,
//! selected with `agentchaos-sqlite-adapter --mutant NAME`. They are the
//! mutant corpus (`chaos/mutants/README.md`): a harness that passes them
//! would be worth nothing.
//!
//! Without `--mutant`, [`active`] is a single load that returns false and
//! the store behaves as documented. Nothing here may change behaviour
//! otherwise.

use std::sync::OnceLock;

/// Each mutant breaks exactly one promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutant {
    /// Recovery marks every orphaned call `requested`, inviting a blind re-run.
    RerunUncertain,
    /// Recovery marks calls again that an earlier recovery already marked.
    MarkTwice,
    /// Recovery forgets calls whose intent is durable (marks only `requested` ones).
    ForgetStarted,
    /// Recovery reports its marks but rolls them back instead of committing.
    RecoveryUncommitted,
    /// The effect ledger accepts a second commit of an operation id.
    DoubleCommit,
    /// A committed call may start again.
    RerunCommitted,
    /// `start_tool` acknowledges the intent without writing `tool_started`.
    LoseIntent,
    /// After a restart the leaf is the last message written, not the branch the user was on.
    LeafFromLastLine,
    /// The context leaves out the recovery notice.
    DropRecoveryNotice,
    /// The append reply is written and flushed before the COMMIT.
    AckBeforeWrite,
}

impl Mutant {
    /// Every mutant with its name and the promise it breaks.
    pub const ALL: &'static [(Mutant, &'static str, &'static str)] = &[
        (
            Mutant::RerunUncertain,
            "rerun-uncertain",
            "recovery reports how far each orphaned call got",
        ),
        (Mutant::MarkTwice, "mark-twice", "recovery is idempotent"),
        (
            Mutant::ForgetStarted,
            "forget-started",
            "recovery marks every call without a result",
        ),
        (
            Mutant::RecoveryUncommitted,
            "recovery-uncommitted",
            "what recovery reports is durable",
        ),
        (
            Mutant::DoubleCommit,
            "double-commit",
            "an operation id is committed at most once",
        ),
        (
            Mutant::RerunCommitted,
            "rerun-committed",
            "a committed call never runs again",
        ),
        (
            Mutant::LoseIntent,
            "lose-intent",
            "the intent is durable before the tool runs",
        ),
        (
            Mutant::LeafFromLastLine,
            "leaf-from-last-line",
            "the active leaf survives a restart",
        ),
        (
            Mutant::DropRecoveryNotice,
            "drop-recovery-notice",
            "the context shows every uncertain call",
        ),
        (
            Mutant::AckBeforeWrite,
            "ack-before-write",
            "an append is acknowledged only once it is durable",
        ),
    ];

    /// Looks a mutant up by name.
    pub fn from_name(name: &str) -> Option<Mutant> {
        Mutant::ALL
            .iter()
            .find(|(_, n, _)| *n == name)
            .map(|(m, _, _)| *m)
    }
}

static ACTIVE: OnceLock<Mutant> = OnceLock::new();

/// Switches `mutant` on for this process (once, from `main`).
pub fn activate(mutant: Mutant) {
    let _ = ACTIVE.set(mutant);
}

/// Is `mutant` switched on?
pub fn active(mutant: Mutant) -> bool {
    ACTIVE.get() == Some(&mutant)
}
