//! The checker: the invariants, each a function from observed facts to
//! violations that explain themselves.
//!
//! Facts are a trial's [`History`] (what the child reported over its pipe,
//! what the disk held at each observation, what the world and the
//! workspace hold at the end) and the [`Reference`] (the crash-free trace
//! run of the same scenario). The truth never comes from the store: acks
//! come from the child's pipe, phases are computed by [`Model`] from the
//! log as it was before recovery, the projection and the context a store
//! must serve by [`crate::model::oracle`] from the model (never by agentstore's
//! fold), and the expected outcome is the crash-free run's. Each [`Violation`] says what was expected, what was
//! found, and which events; the runner adds the crash point and the replay
//! command. This module must never perform I/O.
//!
//! Each group of invariants has a file of its own: `prefix.rs`
//! (log-prefix), `durability.rs` (acked-durable), `blobs.rs`
//! (blob-readable), `quarantine.rs` (quarantine-recorded), `recovery.rs`
//! (what each recovery must do and report), `checkpoint.rs`
//! (checkpoint-projection), `effects.rs` (effect-at-most-once),
//! `outcome.rs` (how the trial ended: runs closed, exactly-once-outcome),
//! `failed_sync.rs` (failed-sync-not-acked) and `group_commit.rs`
//! (acked-after-sync). This file holds
//! [`Invariant`], [`Violation`] and the entry points, [`check`] and
//! [`check_recovery`].

pub mod evidence;
pub mod workers;

mod blobs;
mod checkpoint;
mod durability;
mod effects;
mod failed_sync;
#[cfg(test)]
mod fixture;
mod group_commit;
mod outcome;
mod prefix;
mod quarantine;
mod recovery;

pub use durability::{acked_survived_database_crash, lost_acks, LostAck};

use std::collections::BTreeMap;
use std::fmt;

use agentchaos_protocol::event::Record;
use serde_json::Value;

use crate::agent::world::Application;
use crate::history::{History, LifeEnd};
use crate::model::{describe_record, Model};
use crate::store::Observation;

use blobs::blobs_readable;
use checkpoint::checkpoint;
use durability::acked_durable;
use effects::effect_at_most_once;
use failed_sync::failed_sync_not_acked;
use group_commit::acked_after_sync;
use outcome::{exactly_once_outcome, runs_closed_at_end};
use prefix::{created, prefix_of_reference, segments, well_formed};
use quarantine::quarantine_recorded;
use recovery::recovery;

/// The invariants, with their stable names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    OrphanMarkedUncertain,
    EffectAtMostOnce,
    AckedDurable,
    LogPrefix,
    RunsClosed,
    CheckpointProjection,
    RecoveryIdempotent,
    ExactlyOnceOutcome,
    /// A probe, not a trial check (`crate::campaign::probe`).
    DamageRefused,
    /// A probe, not a trial check (`crate::campaign::probe`).
    LedgerRefusesDoubleCommit,
    FailedSyncNotAcked,
    /// A probe, not a trial check (`crate::campaign::probe`).
    SecondWriterRefused,
    BlobReadable,
    ContextWindow,
    /// A probe, not a trial check (`crate::campaign::probe`).
    RuleRefused,
    QuarantineRecorded,
    /// A probe, not a trial check (`crate::campaign::probe`).
    TailRules,
    AckedAfterSync,
}

impl Invariant {
    pub const ALL: [Invariant; 18] = [
        Invariant::OrphanMarkedUncertain,
        Invariant::EffectAtMostOnce,
        Invariant::AckedDurable,
        Invariant::LogPrefix,
        Invariant::RunsClosed,
        Invariant::CheckpointProjection,
        Invariant::RecoveryIdempotent,
        Invariant::ExactlyOnceOutcome,
        Invariant::DamageRefused,
        Invariant::LedgerRefusesDoubleCommit,
        Invariant::FailedSyncNotAcked,
        Invariant::SecondWriterRefused,
        Invariant::BlobReadable,
        Invariant::ContextWindow,
        Invariant::RuleRefused,
        Invariant::QuarantineRecorded,
        Invariant::TailRules,
        Invariant::AckedAfterSync,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Invariant::OrphanMarkedUncertain => "orphan-marked-uncertain",
            Invariant::EffectAtMostOnce => "effect-at-most-once",
            Invariant::AckedDurable => "acked-durable",
            Invariant::LogPrefix => "log-prefix",
            Invariant::RunsClosed => "runs-closed",
            Invariant::CheckpointProjection => "checkpoint-projection",
            Invariant::RecoveryIdempotent => "recovery-idempotent",
            Invariant::ExactlyOnceOutcome => "exactly-once-outcome",
            Invariant::DamageRefused => "damage-refused",
            Invariant::LedgerRefusesDoubleCommit => "ledger-refuses-double-commit",
            Invariant::FailedSyncNotAcked => "failed-sync-not-acked",
            Invariant::SecondWriterRefused => "second-writer-refused",
            Invariant::BlobReadable => "blob-readable",
            Invariant::ContextWindow => "context-window",
            Invariant::RuleRefused => "rule-refused",
            Invariant::QuarantineRecorded => "quarantine-recorded",
            Invariant::TailRules => "tail-rules",
            Invariant::AckedAfterSync => "acked-after-sync",
        }
    }

    /// The promise, in one sentence.
    pub fn promise(self) -> &'static str {
        match self {
            Invariant::OrphanMarkedUncertain => "every call without a result at the crash is marked uncertain once, with the right phase, and the context shows it",
            Invariant::EffectAtMostOnce => "no operation is applied twice in the world or the workspace, and the log commits each operation id at most once",
            Invariant::AckedDurable => "every event the store acknowledged before the crash is there after it",
            Invariant::LogPrefix => "the log after a crash is a prefix of what the agent wrote, plus recovery events: no gap, duplicate, reordering, or partial or fused line",
            Invariant::RunsClosed => "every run without a finish is marked interrupted, exactly once",
            Invariant::CheckpointProjection => "the snapshot at k equals the fold of the log up to k, and snapshot + tail equals the full fold",
            Invariant::RecoveryIdempotent => {
                "a second recovery appends nothing; each recovery's `appended` is true"
            }
            Invariant::ExactlyOnceOutcome => "after resuming to completion, the world and the workspace equal those of a crash-free run",
            Invariant::DamageRefused => "a store file damaged in its middle makes open (or reading) refuse with `damage`, or changes nothing the store serves: never a silent skip",
            Invariant::LedgerRefusesDoubleCommit => "a second effect_committed for an operation id already committed is refused as a rule violation, and leaves nothing behind",
            Invariant::SecondWriterRefused => "while one process holds a session open, a second open of it is refused with `locked`: two writers would hand out the same seqs and one's acknowledged events would be lost",
            Invariant::BlobReadable => "every blob a durable event references reads back with its size and digest, after every crash and power loss",
            Invariant::ContextWindow => "the context after a recovery shows the active compaction's summary, then the messages of the active branch inside the compaction window in order, and nothing from before the window or from another branch; a budget drops the oldest messages first, never the summary or the recovery lines",
            Invariant::RuleRefused => "an append the session rules forbid (a side effect without an operation id, a committed operation called again, a commit before its intent, a committed or unreconciled call started again, a parent that names no entry, a compaction not under the active leaf) is refused with `rule` and is not in the log after reopening",
            Invariant::QuarantineRecorded => "after a recovery, every torn tail seen after an earlier crash is kept whole in a quarantine file of the session directory that a durable tail_quarantined names at the offset it was cut from, and every quarantine file there is named by one (where the harness reads the session directory)",
            Invariant::TailRules => "bytes after the log's last acknowledged line are cut as a torn tail exactly when agentstore's tail rules say one write could leave them (at most 64 torn lines; a piece without a newline ends the file or is at most one 4 MiB line), else opening refuses with `damage`; never an acknowledged event lost (where the harness knows the log's format: in-process)",
            Invariant::AckedAfterSync => "in Batch mode every ack comes after a successful sync that covers it (the in-process store's reported syncs): no follower is acknowledged while its group's sync is in flight, and a failed group sync acknowledges none of its waiters",
            Invariant::FailedSyncNotAcked => "after a write fails (ENOSPC), nothing is acknowledged until the store writes again and syncs what it wrote (a file the store never syncs: writes again, all it claims for it); after an fsync fails (EIO), nothing until that file is written again and synced: a retried fsync proves nothing, the kernel may have dropped the unsynced pages",
        }
    }

    pub fn from_name(name: &str) -> Option<Invariant> {
        Invariant::ALL.into_iter().find(|i| i.name() == name)
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken promise, explained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: Invariant,
    /// When it was observed: "after life 0 was killed", "after the first recovery in life 1", …
    pub when: String,
    pub expected: String,
    pub found: String,
    /// The events involved, as `seq N type call`.
    pub events: Vec<String>,
}

impl Violation {
    /// Names every path under the trial's store root `root` `ROOT/…`, as
    /// the syscall nemesis does, so that a finding reads the same in every
    /// run and in its replay: a store's own messages (a refused open, an
    /// agent that could not go on) name the files of its scratch directory.
    pub fn rooted(mut self, root: &std::path::Path) -> Violation {
        let root = root.display().to_string();
        for text in [&mut self.expected, &mut self.found]
            .into_iter()
            .chain(self.events.iter_mut())
        {
            *text = text.replace(&root, "ROOT");
        }
        self
    }
}

/// What the crash-free run of the same scenario produced.
#[derive(Debug, Clone)]
pub struct Reference {
    pub records: Vec<Record>,
    pub world: Vec<Application>,
    pub workspace: BTreeMap<String, Vec<u8>>,
}

/// An observation with when it was made.
#[derive(Debug)]
pub struct Moment<'a> {
    pub obs: &'a Observation,
    pub when: String,
    /// After a recovery (no torn tail allowed any more).
    pub recovered: bool,
    /// Acks of lives before this one must be present.
    pub acked_by_lives: usize,
}

fn v(
    invariant: Invariant,
    when: &str,
    expected: String,
    found: String,
    events: Vec<String>,
) -> Violation {
    Violation {
        invariant,
        when: when.to_string(),
        expected,
        found,
        events,
    }
}

/// [`check`] of a trial whose store root was `root`, with every path under
/// it written `ROOT/…` in the findings ([`Violation::rooted`]).
pub fn check_rooted(h: &History, reference: &Reference, root: &std::path::Path) -> Vec<Violation> {
    check(h, Some(reference))
        .into_iter()
        .map(|v| v.rooted(root))
        .collect()
}

/// Checks every invariant on one trial. `reference` is `None` for the trace run itself.
pub fn check(h: &History, reference: Option<&Reference>) -> Vec<Violation> {
    let mut out = Vec::new();
    let moments = moments(h);
    for m in &moments {
        well_formed(m, &mut out);
        acked_durable(h, m, &mut out);
        blobs_readable(m, &mut out);
        quarantine_recorded(h, m, &mut out);
    }
    if let (Some(reference), Some(first)) = (reference, h.after_kill.first()) {
        prefix_of_reference(h, first, reference, &mut out);
    }
    segments(h, &mut out);
    created(h, &mut out);
    for (i, life) in h.lives.iter().enumerate().skip(1) {
        recovery(h, i, life, &mut out);
    }
    checkpoint(&moments, &mut out);
    let final_model = Model::fold(&h.final_obs.records);
    runs_closed_at_end(h, &final_model, &mut out);
    effect_at_most_once(h, &final_model, &mut out);
    exactly_once_outcome(h, reference, &mut out);
    failed_sync_not_acked(h, &mut out);
    acked_after_sync(h, &mut out);
    // The same broken promise seen at several observations is one finding:
    // keep the earliest.
    let mut seen = std::collections::HashSet::new();
    out.retain(|v| seen.insert((v.invariant, v.expected.clone())));
    out
}

/// The invariants a crash state can be judged on when only the store's
/// recovery ran on it and no agent resumed (the power-loss campaign,
/// [`crate::campaign::powercampaign`]): acked-durable and log-prefix at every
/// observation, orphan-marked-uncertain, runs-closed, checkpoint-projection
/// and recovery-idempotent for the recovering life. The end-of-trial checks
/// (creation, closed runs, effects, outcome) need a resumed agent.
pub fn check_recovery(h: &History, reference: &Reference) -> Vec<Violation> {
    let mut out = Vec::new();
    let moments = moments(h);
    for m in &moments {
        well_formed(m, &mut out);
        acked_durable(h, m, &mut out);
        blobs_readable(m, &mut out);
        quarantine_recorded(h, m, &mut out);
    }
    if let Some(first) = h.after_kill.first() {
        prefix_of_reference(h, first, reference, &mut out);
    }
    segments(h, &mut out);
    for (i, life) in h.lives.iter().enumerate().skip(1) {
        recovery(h, i, life, &mut out);
    }
    checkpoint(&moments, &mut out);
    let mut seen = std::collections::HashSet::new();
    out.retain(|v| seen.insert((v.invariant, v.expected.clone())));
    out
}

/// Every observation of a trial with when it was made, life by life (after
/// its recoveries, then after its crash), the end last.
pub fn moments(h: &History) -> Vec<Moment<'_>> {
    let mut m = Vec::new();
    for (i, life) in h.lives.iter().enumerate() {
        if let Some(a) = &life.after_recovery {
            m.push(Moment {
                obs: a,
                when: format!("after the first recovery in life {i}"),
                recovered: true,
                acked_by_lives: i,
            });
        }
        if let Some(b) = &life.after_second_recovery {
            m.push(Moment {
                obs: b,
                when: format!("after the second recovery in life {i}"),
                recovered: true,
                acked_by_lives: i,
            });
        }
        if let Some(k) = h.after_kill.get(i) {
            let cut = if i == 0 && !h.power_cut.is_empty() {
                " and the power cut"
            } else {
                ""
            };
            m.push(Moment {
                obs: k,
                when: format!("after life {i} {}{cut}, before recovery", ended(life.end)),
                recovered: false,
                acked_by_lives: i + 1,
            });
        }
    }
    let finished = matches!(h.last().end, LifeEnd::Exited(_));
    m.push(Moment {
        obs: &h.final_obs,
        when: "at the end of the trial".to_string(),
        recovered: finished,
        acked_by_lives: h.lives.len(),
    });
    m
}

/// How a life that did not finish ended, for `when`: killed, or gave up
/// after an injected error.
fn ended(end: LifeEnd) -> &'static str {
    if end == LifeEnd::Killed {
        "was killed"
    } else {
        "gave up"
    }
}

fn events(n: usize) -> String {
    if n == 1 {
        "1 event".to_string()
    } else {
        format!("{n} events")
    }
}

fn tail(records: &[Record], n: usize) -> Vec<String> {
    records[records.len().saturating_sub(n)..]
        .iter()
        .map(describe_record)
        .collect()
}

/// The first path at which two JSON values differ, with both sides (shortened).
pub fn first_diff(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let p = format!("{path}.{k}");
                match (x.get(k), y.get(k)) {
                    (Some(l), Some(r)) => first_diff(l, r, &p),
                    (l, r) => Some(format!("{p}: {} vs {}", short(l), short(r))),
                }
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (l, r))| first_diff(l, r, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path}: {} vs {}", short(Some(a)), short(Some(b)))),
    }
}

fn short(v: Option<&Value>) -> String {
    let s = v.map_or("(absent)".to_string(), Value::to_string);
    if s.len() > 80 {
        format!(
            "{}…",
            &s[..s.char_indices().nth(80).map_or(s.len(), |(i, _)| i)]
        )
    } else {
        s
    }
}

/// One violation in words, with its replay command.
pub fn explain(v: &Violation, scenario: &str, crash_point: &str, replay: &str) -> String {
    let mut s = format!(
        "VIOLATION {} · scenario {scenario}\n  crash:    {crash_point}\n  when:     {}\n  expected: {}\n  found:    {}\n",
        v.invariant, v.when, v.expected, v.found
    );
    if !v.events.is_empty() {
        s.push_str(&format!("  events:   {}\n", v.events.join(" · ")));
    }
    s.push_str(&format!("  replay:   {replay}\n"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_trials_store_root_read_root_in_a_finding() {
        let scratch = std::path::Path::new("/dev/shm/agentchaos-12-ab/000000-0000000018/root");
        let rooted = v(
            Invariant::ExactlyOnceOutcome,
            "after life 0 gave up",
            "life 1 resumes".into(),
            format!(
                "adapter refused open (damage): {}/sessions.db: malformed",
                scratch.display()
            ),
            vec![format!("seq 0 session_created in {}", scratch.display())],
        )
        .rooted(scratch);
        assert_eq!(
            rooted.found,
            "adapter refused open (damage): ROOT/sessions.db: malformed"
        );
        assert_eq!(rooted.events, ["seq 0 session_created in ROOT"]);
        assert_eq!(rooted.expected, "life 1 resumes");
    }

    #[test]
    fn names_are_stable_and_round_trip() {
        let names: Vec<&str> = Invariant::ALL.iter().map(|i| i.name()).collect();
        assert_eq!(
            names,
            [
                "orphan-marked-uncertain",
                "effect-at-most-once",
                "acked-durable",
                "log-prefix",
                "runs-closed",
                "checkpoint-projection",
                "recovery-idempotent",
                "exactly-once-outcome",
                "damage-refused",
                "ledger-refuses-double-commit",
                "failed-sync-not-acked",
                "second-writer-refused",
                "blob-readable",
                "context-window",
                "rule-refused",
                "quarantine-recorded",
                "tail-rules",
                "acked-after-sync"
            ]
        );
        for i in Invariant::ALL {
            assert_eq!(Invariant::from_name(i.name()), Some(i));
        }
    }

    #[test]
    fn first_diff_names_the_path() {
        let a = serde_json::json!({"calls": {"c": {"started": true}}, "n": 1});
        let b = serde_json::json!({"calls": {"c": {"started": false}}, "n": 1});
        assert_eq!(
            first_diff(&a, &b, "p").as_deref(),
            Some("p.calls.c.started: true vs false")
        );
        assert_eq!(first_diff(&a, &a, "p"), None);
    }
}
