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

pub mod evidence;
pub mod workers;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use agentchaos_protocol::event::{Decision, Event, Record, Seq};
use serde_json::Value;

use crate::agent::tools::tagged_operation;
use crate::agent::world::Application;
use crate::history::{Append, History, Life, LifeEnd, RecoveryReport};
use crate::model::oracle::{self, Shown};
use crate::model::{call_of, describe_record, phase_name, store_authored, Model, RunClose};
use crate::nemesis::powerloss::{LoggedOp, Op};
use crate::nemesis::syscall::{Call, FaultOutcome, SyscallFault};
use crate::store::{CheckpointView, Observation};

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
}

impl Invariant {
    pub const ALL: [Invariant; 17] = [
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
            Invariant::FailedSyncNotAcked => "after a write fails (ENOSPC), nothing is acknowledged until the store writes again and syncs what it wrote; after an fsync fails (EIO), nothing until that file is written again and synced: a retried fsync proves nothing, the kernel may have dropped the unsynced pages",
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

/// `acked-durable` across a crash of the database server under the store
/// (`crate::nemesis::database`): every event in `acked` (seq and event,
/// as the harness sent it and the store acknowledged it before the
/// crash) must be served at its seq with the same content by a fresh
/// adapter after the server restarted. `served` is `None` when the store
/// answered that the session does not exist.
pub fn acked_survived_database_crash(
    acked: &[(Seq, Event)],
    served: Option<&[Record]>,
    when: &str,
) -> Vec<Violation> {
    let Some(served) = served else {
        return match acked.last() {
            None => Vec::new(),
            Some((last, _)) => vec![v(
                Invariant::AckedDurable,
                when,
                format!(
                    "the session with {} acknowledged event(s), up to seq {last}",
                    acked.len()
                ),
                "the store says the session does not exist (not_found)".into(),
                acked
                    .iter()
                    .map(|(seq, e)| format!("seq {seq} {}", crate::model::describe_event(e)))
                    .collect(),
            )],
        };
    };
    let mut out = Vec::new();
    for (seq, event) in acked {
        let found = served.iter().find(|r| r.seq == *seq);
        let same = found.and_then(|r| r.event()).is_some_and(|e| e == event);
        if !same {
            out.push(v(
                Invariant::AckedDurable,
                when,
                format!("seq {seq} {}", crate::model::describe_event(event)),
                match found {
                    None => format!(
                        "no event at seq {seq} (the store serves {} event(s))",
                        served.len()
                    ),
                    Some(r) => crate::model::describe_record(r),
                },
                vec![format!("seq {seq} {}", crate::model::describe_event(event))],
            ));
        }
    }
    out
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

/// log-prefix: no damage ever; no torn tail once recovered.
fn well_formed(m: &Moment<'_>, out: &mut Vec<Violation>) {
    if let Some(d) = &m.obs.damage {
        out.push(v(
            Invariant::LogPrefix,
            &m.when,
            "every record of the log whole and valid (only the last write may be torn, before recovery)".into(),
            format!("damage: {d}"),
            tail(&m.obs.records, 3),
        ));
    } else if let (true, Some(t)) = (m.recovered, &m.obs.torn) {
        out.push(v(
            Invariant::LogPrefix,
            &m.when,
            "no torn tail after recovery (it must be cut before anything is appended)".into(),
            t.clone(),
            tail(&m.obs.records, 3),
        ));
    }
}

/// quarantine-recorded, after a recovery, where the harness reads the
/// session directory: every torn tail an earlier life's crash left (seen
/// after that crash) is kept whole, byte for byte, in a quarantine file
/// that a durable `tail_quarantined` names with the offset the tail was
/// cut from; and every quarantine file in the directory is named by one.
/// A cut that overwrites an earlier one (two cuts at one offset), or one
/// that no event records, fails it.
fn quarantine_recorded(h: &History, m: &Moment<'_>, out: &mut Vec<Violation>) {
    let Some(files) = m.obs.quarantine.as_ref().filter(|_| m.recovered) else {
        return;
    };
    let named: Vec<(&str, u64, &Record)> = m
        .obs
        .records
        .iter()
        .filter_map(|r| match r.event() {
            Some(Event::TailQuarantined { file, offset, .. }) => Some((file.as_str(), *offset, r)),
            _ => None,
        })
        .collect();
    for (name, bytes) in files {
        if !named.iter().any(|(f, _, _)| f == name) {
            out.push(v(
                Invariant::QuarantineRecorded,
                &m.when,
                "every quarantine file in the session directory named by a durable tail_quarantined".into(),
                format!(
                    "{name} ({} bytes) is named by no event: the cut it keeps is silent",
                    bytes.len()
                ),
                vec![],
            ));
        }
    }
    for (life, seen) in h.after_kill.iter().enumerate().take(m.acked_by_lives) {
        let Some((offset, torn)) = &seen.torn_bytes else {
            continue;
        };
        let at_offset: Vec<_> = named.iter().filter(|(_, o, _)| o == offset).collect();
        let kept = at_offset
            .iter()
            .any(|(f, _, _)| files.iter().any(|(name, bytes)| name == f && bytes == torn));
        if kept {
            continue;
        }
        let found = if at_offset.is_empty() {
            format!("no tail_quarantined names a cut at offset {offset}")
        } else {
            let held: Vec<String> = at_offset
                .iter()
                .map(|(f, _, _)| match files.iter().find(|(name, _)| name == f) {
                    Some((_, b)) => format!("{f} holds {} other bytes", b.len()),
                    None => format!("{f} is not in the session directory"),
                })
                .collect();
            format!(
                "{}: the torn bytes are gone (a later cut at the same offset overwrote them?)",
                held.join("; ")
            )
        };
        out.push(v(
            Invariant::QuarantineRecorded,
            &m.when,
            format!(
                "the torn tail seen after life {life}'s crash ({} bytes from offset {offset}) kept whole in a quarantine file a durable tail_quarantined names at offset {offset}",
                torn.len()
            ),
            found,
            at_offset.iter().map(|(_, _, r)| describe_record(r)).collect(),
        ));
    }
}

/// blob-readable: every blob a record in the log references reads back
/// with its size and digest. One violation per moment, with the count.
fn blobs_readable(m: &Moment<'_>, out: &mut Vec<Violation>) {
    let bad: Vec<_> = m.obs.blobs.iter().filter(|b| b.problem.is_some()).collect();
    let Some(first) = bad.first() else { return };
    let record = m
        .obs
        .records
        .get(first.seq as usize)
        .map(describe_record)
        .unwrap_or_else(|| format!("seq {}", first.seq));
    out.push(v(
        Invariant::BlobReadable,
        &m.when,
        format!(
            "blob {} ({} bytes), referenced by {record}, to read back with its digest",
            first.reference.digest, first.reference.size
        ),
        format!(
            "{}{}",
            first.problem.as_deref().unwrap_or_default(),
            if bad.len() > 1 {
                format!(
                    " (and {} more of {} referenced blobs)",
                    bad.len() - 1,
                    m.obs.blobs.len()
                )
            } else {
                String::new()
            }
        ),
        vec![record],
    ));
}

/// An acknowledged event an observation does not hold at its seq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostAck {
    /// The life it was acknowledged to (its place in [`History::lives`]),
    /// and its index in that life's writes.
    pub life: usize,
    pub write: usize,
    pub seq: Seq,
    /// What the log holds there instead, in words.
    pub holds: String,
}

/// The events acknowledged to the lives before `m.acked_by_lives` that
/// `m`'s observation does not hold at their seq with the same content
/// (fingerprint): what `acked-durable` reports.
pub fn lost_acks(h: &History, m: &Moment<'_>) -> Vec<LostAck> {
    let mut lost = Vec::new();
    for (at, life) in h.lives[..m.acked_by_lives.min(h.lives.len())]
        .iter()
        .enumerate()
    {
        for (write, w) in life.writes.iter().enumerate() {
            let Some(seq) = w.acked else { continue };
            let found = m.obs.records.get(seq as usize);
            let ok = found
                .and_then(Record::event)
                .is_some_and(|e| crate::agent::wire::fingerprint(e) == w.fingerprint);
            if !ok {
                let holds = match found {
                    Some(r) => format!("the log holds {} there", describe_record(r)),
                    None => format!(
                        "the log ends before seq {seq} ({})",
                        events(m.obs.records.len())
                    ),
                };
                lost.push(LostAck {
                    life: at,
                    write,
                    seq,
                    holds,
                });
            }
        }
    }
    lost
}

/// acked-durable: every ack the child reported is in the log at its seq.
/// One violation per moment, saying how many acknowledged events are
/// missing or changed, and which (the first and the last).
fn acked_durable(h: &History, m: &Moment<'_>, out: &mut Vec<Violation>) {
    // (life, type, seq, what the log holds there) of every broken ack.
    let lost: Vec<(u32, &str, Seq, String)> = lost_acks(h, m)
        .into_iter()
        .map(|l| {
            let life = &h.lives[l.life];
            (
                life.index,
                life.writes[l.write].type_name.as_str(),
                l.seq,
                l.holds,
            )
        })
        .collect();
    let (Some(first), Some(last)) = (lost.first(), lost.last()) else {
        return;
    };
    let acked: usize = h.lives[..m.acked_by_lives.min(h.lives.len())]
        .iter()
        .flat_map(|l| &l.writes)
        .filter(|w| w.acked.is_some())
        .count();
    let name = |(life, ty, seq, _): &(u32, &str, Seq, String)| {
        format!("{ty} at seq {seq} (acknowledged to life {life})")
    };
    let (expected, found) = if lost.len() == 1 {
        (
            format!("{}, acknowledged as durable", name(first)),
            first.3.clone(),
        )
    } else {
        (
            format!("all {acked} acknowledged events in the log at their seqs"),
            format!(
                "{} of them missing or changed: from {} to {}; at the first, {}",
                lost.len(),
                name(first),
                name(last),
                first.3
            ),
        )
    };
    out.push(v(
        Invariant::AckedDurable,
        &m.when,
        expected,
        found,
        tail(&m.obs.records, 2),
    ));
}

fn normalized(e: &Event) -> Event {
    match e {
        Event::SessionCreated {
            session_id,
            schema_version,
            ..
        } => Event::SessionCreated {
            session_id: session_id.clone(),
            schema_version: *schema_version,
            workspace: String::new(),
        },
        other => other.clone(),
    }
}

/// log-prefix: what the first process left is a prefix of the crash-free log.
fn prefix_of_reference(
    h: &History,
    first: &Observation,
    reference: &Reference,
    out: &mut Vec<Violation>,
) {
    let when = &format!("after life 0 {}, before recovery", ended(h.lives[0].end));
    // Opening the log to observe it may cut a torn tail and record the cut
    // (`tail_quarantined`, store-authored): not part of what the agent wrote.
    let written = first
        .records
        .iter()
        .filter(|r| !matches!(r.event(), Some(Event::TailQuarantined { .. })));
    for (i, rec) in written.enumerate() {
        let Some(want) = reference.records.get(i) else {
            out.push(v(
                Invariant::LogPrefix,
                when,
                format!(
                    "at most {} (the crash-free run's log)",
                    events(reference.records.len())
                ),
                format!("extra event {}", describe_record(rec)),
                vec![describe_record(rec)],
            ));
            return;
        };
        let same = match (rec.event(), want.event()) {
            (Some(a), Some(b)) => normalized(a) == normalized(b),
            _ => rec.body.type_name() == want.body.type_name(),
        };
        if !same {
            out.push(v(
                Invariant::LogPrefix,
                when,
                format!("{} (as in the crash-free run)", describe_record(want)),
                describe_record(rec),
                tail(&first.records[..=i], 3),
            ));
            return;
        }
    }
}

fn start_records(h: &History, life: usize) -> &[Record] {
    match life {
        0 => &[],
        i => &h.after_kill[i - 1].records,
    }
}

fn end_obs(h: &History, life: usize) -> &Observation {
    h.after_kill.get(life).unwrap_or(&h.final_obs)
}

/// log-prefix: each process only ever added to the log: recovery events
/// first, then exactly what it announced, in order.
fn segments(h: &History, out: &mut Vec<Violation>) {
    for (i, life) in h.lives.iter().enumerate() {
        if i > 0 && i > h.after_kill.len() {
            break;
        }
        let start = start_records(h, i);
        let end = end_obs(h, i);
        let when = if i < h.after_kill.len() {
            format!("after life {i} {}", ended(life.end))
        } else {
            "at the end of the trial".to_string()
        };
        if let Some(bad) = first_divergence(start, &end.records) {
            out.push(v(
                Invariant::LogPrefix,
                &when,
                format!(
                    "the {} events present when life {i} started to stay as they were",
                    start.len()
                ),
                bad,
                tail(&end.records, 3),
            ));
            continue;
        }
        for obs in [&life.after_recovery, &life.after_second_recovery]
            .into_iter()
            .flatten()
        {
            if let Some(bad) = first_divergence(&obs.records, &end.records) {
                out.push(v(
                    Invariant::LogPrefix,
                    &when,
                    format!("the events present after life {i}'s recovery to stay as they were"),
                    bad,
                    tail(&end.records, 3),
                ));
            }
        }
        if let Some(found) = suffix_problem(&end.records[start.len()..], life) {
            out.push(v(
                Invariant::LogPrefix,
                &when,
                format!("the events after seq {} to be recovery events, then what life {i} wrote, in order", start.len().saturating_sub(1)),
                found,
                tail(&end.records, 4),
            ));
        }
    }
}

/// log-prefix: a finished session's log starts with its creation.
fn created(h: &History, out: &mut Vec<Violation>) {
    if !h.last().done {
        return;
    }
    let first = h.final_obs.records.first();
    if !matches!(
        first.and_then(Record::event),
        Some(Event::SessionCreated { .. })
    ) {
        out.push(v(
            Invariant::LogPrefix,
            "at the end of the trial",
            "the log to start with session_created at seq 0 (a crash inside the session's creation must be finished by the next open)".into(),
            first.map_or("an empty log".to_string(), |r| format!("it starts with {}", describe_record(r))),
            tail(&h.final_obs.records[..h.final_obs.records.len().min(2)], 2),
        ));
    }
}

/// Is `before` a prefix of `after`? If not, says where it differs.
fn first_divergence(before: &[Record], after: &[Record]) -> Option<String> {
    for (i, b) in before.iter().enumerate() {
        match after.get(i) {
            None => {
                return Some(format!(
                    "the log now ends at seq {} and {} is gone",
                    after.len(),
                    describe_record(b)
                ))
            }
            Some(a) if a != b => {
                let json = |r: &Record| {
                    serde_json::json!({
                        "seq": r.seq,
                        "id": r.id.to_string(),
                        "ts": r.ts,
                        "redaction": format!("{:?}", r.redaction),
                        "event": match &r.body {
                            agentchaos_protocol::event::Body::Known(e) => {
                                serde_json::to_value(e).expect("an event serializes")
                            }
                            agentchaos_protocol::event::Body::Ignorable { fields, .. } => fields.clone(),
                        },
                    })
                };
                let (was, now) = (json(b), json(a));
                let changed = first_diff(&was, &now, "")
                    .map(|d| format!(" (first change: {}, was vs now)", d.trim_start_matches('.')))
                    .unwrap_or_default();
                return Some(format!(
                    "{} was rewritten as {}{changed}",
                    describe_record(b),
                    describe_record(a)
                ));
            }
            Some(_) => {}
        }
    }
    None
}

/// What life `i` added to the log must be recovery events, then exactly
/// what it announced, in order. An append the store refused with an I/O
/// error may be absent; if the agent retried it, the refused attempt must
/// have left nothing behind, or the retry duplicates it.
fn suffix_problem(suffix: &[Record], life: &Life) -> Option<String> {
    let writes = &life.writes;
    let mut next = 0;
    // The last refused attempt skipped because its retry followed.
    let mut refused_and_retried: Option<&Append> = None;
    let mut agent_started = false;
    let cut_record = |r: &Record| matches!(r.event(), Some(Event::TailQuarantined { .. }));
    for (k, rec) in suffix.iter().enumerate() {
        let Some(e) = rec.event() else {
            return Some(format!(
                "{} is not an event the agent or recovery writes",
                describe_record(rec)
            ));
        };
        if store_authored(e) {
            // The open after this life's crash may cut its torn last write
            // and record the cut: after the life's appends, at the end.
            let records_the_last_cut = suffix[k..].iter().all(cut_record);
            if agent_started && !records_the_last_cut {
                return Some(format!(
                    "{} appears after life {}'s own appends had begun",
                    describe_record(rec),
                    life.index
                ));
            }
            continue;
        }
        agent_started = true;
        let found = crate::agent::wire::fingerprint(e);
        let duplicate = |w: Option<&Append>| {
            w.filter(|w| w.fingerprint == found).map(|w| {
                format!(
                    "{} again: the store refused that {} with an I/O error, kept it, and the agent's retry added it a second time",
                    describe_record(rec),
                    w.type_name
                )
            })
        };
        loop {
            let Some(w) = writes.get(next) else {
                return Some(duplicate(refused_and_retried).unwrap_or_else(|| {
                    format!(
                        "{} was never written by life {} (it wrote {} events)",
                        describe_record(rec),
                        life.index,
                        writes.len()
                    )
                }));
            };
            next += 1;
            if w.refused {
                let retried = writes
                    .get(next)
                    .is_some_and(|r| r.fingerprint == w.fingerprint);
                if retried {
                    refused_and_retried = Some(w);
                    continue;
                }
                if w.fingerprint != found {
                    continue; // Refused and absent: as it should be.
                }
            } else if w.fingerprint != found {
                return Some(duplicate(refused_and_retried).unwrap_or_else(|| {
                    format!(
                        "{} where life {} wrote {} (a gap, duplicate, reordering or altered event)",
                        describe_record(rec),
                        life.index,
                        w.type_name
                    )
                }));
            }
            // Kept past the retry itself: the copy after it is the duplicate.
            if refused_and_retried.is_some_and(|r| r.fingerprint != w.fingerprint) {
                refused_and_retried = None;
            }
            break;
        }
    }
    None
}

/// What one life's first recovery started from and left, for the checks
/// of [`recovery`].
struct RecoveryFacts<'h> {
    /// "after the first recovery in life N".
    when: String,
    /// The disk before any recovery of this chain.
    base: &'h Observation,
    /// The model of `base`: what was open at the crash.
    before: Model,
    /// The disk after the first recovery.
    after: &'h Observation,
    /// What the agent said its recovery did and served.
    report: &'h RecoveryReport,
    /// The records the recovery appended.
    region: &'h [Record],
}

/// orphan-marked-uncertain, runs-closed, context-window,
/// checkpoint-projection and recovery-idempotent after the first recovery
/// of life `i`.
fn recovery(h: &History, i: usize, life: &Life, out: &mut Vec<Violation>) {
    let (Some(report), Some(after)) = (&life.recovered, &life.after_recovery) else {
        return;
    };
    // The log before any recovery of this chain: after the last life that
    // got past its recovery (a life killed inside its recovery leaves a
    // partial block, which belongs to this one).
    let base_life = (0..i)
        .rev()
        .find(|&j| j == 0 || h.lives[j].recovered.is_some())
        .unwrap_or(0);
    let Some(base) = h.after_kill.get(base_life) else {
        return;
    };
    let facts = RecoveryFacts {
        when: format!("after the first recovery in life {i}"),
        base,
        before: Model::fold(&base.records),
        after,
        report,
        region: &after.records[base.records.len().min(after.records.len())..],
    };
    orphans_marked(&facts, out);
    uncertain_reported(&facts, out);
    recovery_contexts(&facts, out);
    open_run_closed(&facts, out);
    resumed_projection(&facts, out);
    recovery_account_true(&facts, base_life + 1 == i, out);
    second_recovery_changes_nothing(&facts, i, life, out);
}

/// recovery-idempotent, the first recovery's account: the `appended` it
/// reports is no more than the log grew by since the crash, and (when no
/// recovery killed in between left marks of its own there) no less than
/// the `run_interrupted` and `tool_recovery` events it added. A store may
/// author other events on open (agentstore's `tail_quarantined`), so only
/// those two types bound it from below.
fn recovery_account_true(f: &RecoveryFacts<'_>, own_region: bool, out: &mut Vec<Violation>) {
    let claimed = f.report.appended;
    let grown = f.region.len() as u64;
    let marks = f
        .region
        .iter()
        .filter(|r| {
            matches!(
                r.event(),
                Some(Event::RunInterrupted { .. } | Event::ToolRecovery { .. })
            )
        })
        .count() as u64;
    let low = if own_region { marks } else { 0 };
    if claimed < low || claimed > grown {
        out.push(v(
            Invariant::RecoveryIdempotent,
            &f.when,
            format!(
                "the recovery's `appended` to count what it appended: from {low} (its run_interrupted and tool_recovery events) to {grown} (all the log grew by since the crash)"
            ),
            format!("it says it appended {claimed}"),
            f.region.iter().map(describe_record).collect(),
        ));
    }
}

/// Every call open at the crash gets exactly one `tool_recovery` mark with
/// its phase, unless this attempt already marked it.
fn orphans_marked(f: &RecoveryFacts<'_>, out: &mut Vec<Violation>) {
    let RecoveryFacts {
        when,
        base,
        before,
        region,
        ..
    } = f;
    let calls_in = |id: &str| -> Vec<&Record> {
        region
            .iter()
            .filter(
                |r| matches!(r.event(), Some(Event::ToolRecovery { call_id, .. }) if call_id == id),
            )
            .collect()
    };
    for call in before.open_calls() {
        let marks = calls_in(&call.call_id);
        let phase = call.phase();
        let history: Vec<String> = base
            .records
            .iter()
            .filter(|r| r.event().and_then(crate::model::call_of) == Some(call.call_id.as_str()))
            .map(describe_record)
            .chain(marks.iter().map(|r| describe_record(r)))
            .collect();
        let mark_phases: Vec<&'static str> = marks
            .iter()
            .filter_map(|r| match r.event() {
                Some(Event::ToolRecovery { phase, .. }) => Some(phase_name(*phase)),
                _ => None,
            })
            .collect();
        if call.needs_mark() {
            if mark_phases != [phase_name(phase)] {
                let found = match mark_phases.len() {
                    0 => "no tool_recovery mark".to_string(),
                    1 => format!("a mark with phase {}", mark_phases[0]),
                    n => format!("{n} marks (phases {})", mark_phases.join(", ")),
                };
                out.push(v(
                    Invariant::OrphanMarkedUncertain,
                    when,
                    format!(
                        "call {} ({}) had no result at the crash: one tool_recovery with phase {}",
                        call.call_id,
                        call.tool,
                        phase_name(phase)
                    ),
                    found,
                    history,
                ));
            }
        } else if !marks.is_empty() {
            out.push(v(
                Invariant::OrphanMarkedUncertain,
                when,
                format!(
                    "call {} already marked in this attempt: no new mark",
                    call.call_id
                ),
                format!("{} more mark(s)", marks.len()),
                history,
            ));
        }
    }
}

/// The recovery reports every uncertain call with its phase.
fn uncertain_reported(f: &RecoveryFacts<'_>, out: &mut Vec<Violation>) {
    let RecoveryFacts {
        when,
        after,
        report,
        ..
    } = f;
    let after_model = Model::fold(&after.records);
    for call in after_model.open_calls() {
        let Some(phase) = call.uncertain() else {
            continue;
        };
        let reported = report.uncertain.iter().find(|u| u.call_id == call.call_id);
        if reported.map(|u| u.phase) != Some(phase) {
            out.push(v(
                Invariant::OrphanMarkedUncertain,
                when,
                format!(
                    "recovery to report call {} as uncertain, phase {}",
                    call.call_id,
                    phase_name(phase)
                ),
                match reported {
                    Some(u) => format!("reported with phase {}", phase_name(u.phase)),
                    None => "not reported".to_string(),
                },
                vec![],
            ));
        }
    }
    // And nothing else: a call reported uncertain that is closed, or
    // already reconciled, invites a second reconciliation or a re-run.
    for u in &report.uncertain {
        let open = after_model.open_calls().find(|c| c.call_id == u.call_id);
        if open.and_then(|c| c.uncertain()).is_none() {
            let (why, events) = match open {
                Some(c) => (
                    if c.mark.is_none() {
                        "open, but not marked in its current attempt"
                    } else {
                        "open, but reconciled since its mark"
                    },
                    after
                        .records
                        .iter()
                        .filter(|r| r.event().and_then(call_of) == Some(u.call_id.as_str()))
                        .map(describe_record)
                        .collect(),
                ),
                None => ("not open: it has a result, or no tool_call", vec![]),
            };
            out.push(v(
                Invariant::OrphanMarkedUncertain,
                when,
                format!(
                    "recovery to report only the calls marked uncertain and not reconciled; call {} is {why}",
                    u.call_id
                ),
                format!("it reported call {} as uncertain, phase {}", u.call_id, phase_name(u.phase)),
                events,
            ));
        }
    }
}

/// What the contexts served after the recovery show (the recovery lines,
/// the summary, the window), against the oracle's reading of the log they
/// were rendered from.
fn recovery_contexts(f: &RecoveryFacts<'_>, out: &mut Vec<Violation>) {
    let RecoveryFacts {
        when,
        after,
        report,
        ..
    } = f;
    let expected = oracle::context(&after.records);
    for served in &report.contexts {
        for p in expected.problems(&served.text, served.budget) {
            let invariant = match p.shown {
                Shown::Recovery => Invariant::OrphanMarkedUncertain,
                Shown::Window => Invariant::ContextWindow,
            };
            out.push(v(invariant, when, p.expected, p.found, p.events));
        }
    }
}

/// runs-closed: the open run gets exactly one run_interrupted.
fn open_run_closed(f: &RecoveryFacts<'_>, out: &mut Vec<Violation>) {
    let RecoveryFacts {
        when,
        before,
        after,
        report,
        region,
        ..
    } = f;
    let interrupts = |id: &str| {
        region
            .iter()
            .filter(|r| matches!(r.event(), Some(Event::RunInterrupted { run_id }) if run_id == id))
            .count()
    };
    if let Some(open) = before.open_run_id() {
        let n = interrupts(open);
        if n != 1 {
            out.push(v(
                Invariant::RunsClosed,
                when,
                format!("run {open} had no finish at the crash: exactly one run_interrupted"),
                format!("{n} run_interrupted for it"),
                tail(&after.records, 3),
            ));
        } else if !report.interrupted.iter().any(|r| r == open) {
            out.push(v(
                Invariant::RunsClosed,
                when,
                format!("recovery to report run {open} as interrupted"),
                format!("it reported {:?}", report.interrupted),
                vec![],
            ));
        }
    }
}

/// checkpoint-projection through the store's own resume path: what it
/// rebuilt (from its snapshot, if it trusted one) is the oracle's
/// projection of its log.
fn resumed_projection(f: &RecoveryFacts<'_>, out: &mut Vec<Violation>) {
    let RecoveryFacts {
        when,
        after,
        report,
        ..
    } = f;
    if let Some(full) = &after.fold {
        if let Some(d) = first_diff(&report.projection, full, "projection") {
            out.push(v(
                Invariant::CheckpointProjection,
                when,
                "the store's projection after resuming to equal the harness's projection of its whole log (chaos/PROTOCOL.md `projection`)".into(),
                format!("they differ at {d} (the store's vs the harness's)"),
                tail(&after.records, 2),
            ));
        }
    }
}

/// recovery-idempotent: the second recovery changes nothing on disk (its
/// bytes when the harness can read them, else its events).
fn second_recovery_changes_nothing(
    f: &RecoveryFacts<'_>,
    i: usize,
    life: &Life,
    out: &mut Vec<Violation>,
) {
    let after = f.after;
    if let (Some(again), Some(b)) = (life.recovered_again, &life.after_second_recovery) {
        let changed = match (b.bytes, after.bytes) {
            (Some(x), Some(y)) => x != y,
            _ => b.records != after.records,
        };
        if again != 0 || changed {
            let extra: Vec<String> = b
                .records
                .get(after.records.len()..)
                .unwrap_or_default()
                .iter()
                .map(describe_record)
                .collect();
            let size = |o: &Observation| match o.bytes {
                Some(x) => format!("{} bytes ({})", x.len, events(o.records.len())),
                None => events(o.records.len()),
            };
            out.push(v(
                Invariant::RecoveryIdempotent,
                &format!("after the second recovery in life {i}"),
                format!("nothing appended: the log stays at {}", size(after)),
                format!(
                    "the store says it appended {again}; the log has {}",
                    size(b)
                ),
                extra,
            ));
        }
    }
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

/// checkpoint-projection, at every moment (reported once per trial).
fn checkpoint(moments: &[Moment<'_>], out: &mut Vec<Violation>) {
    for m in moments {
        let problem = match &m.obs.checkpoint {
            CheckpointView::Absent | CheckpointView::Opaque => None,
            CheckpointView::Unreadable(why) => Some((
                "snapshot.json holds the old or the new snapshot, whole (it is replaced atomically)".to_string(),
                format!("it is unreadable: {why}"),
            )),
            CheckpointView::Present(f) => {
                let k = f.next_seq;
                if f.log_offset_of_next != Some(f.offset) {
                    Some((
                        format!("the snapshot's events 0..{k} to end at byte {} of the log, where event {k} starts", f.offset),
                        match f.log_offset_of_next {
                            Some(o) => format!("event {k} starts at byte {o}"),
                            None => format!("the log has only {}", events(m.obs.records.len())),
                        },
                    ))
                } else if f.fold_at.as_ref() != Some(&f.snapshot) {
                    Some((
                        format!("the snapshot's projection to equal the harness's projection of events 0..{k}"),
                        match &f.fold_at {
                            Some(fold) => format!(
                                "they differ at {} (the snapshot's vs the harness's)",
                                first_diff(&f.snapshot, fold, "projection").unwrap_or_default()
                            ),
                            None => format!("the log has only {}", events(m.obs.records.len())),
                        },
                    ))
                } else if f.resumed.is_none() || f.resumed != m.obs.fold {
                    Some((
                        "snapshot + the log's tail to equal the harness's projection of the whole log".to_string(),
                        match (&f.resumed, &m.obs.fold) {
                            (Some(r), Some(full)) => format!(
                                "they differ at {} (the resumed snapshot's vs the harness's)",
                                first_diff(r, full, "projection").unwrap_or_default()
                            ),
                            (None, _) => "the tail cannot be folded onto the snapshot".to_string(),
                            (Some(_), None) => "the store serves no projection to compare it with".to_string(),
                        },
                    ))
                } else {
                    None
                }
            }
        };
        if let Some((expected, found)) = problem {
            out.push(v(
                Invariant::CheckpointProjection,
                &m.when,
                expected,
                found,
                tail(&m.obs.records, 2),
            ));
            return;
        }
    }
}

/// runs-closed at the end: every run closed exactly once.
fn runs_closed_at_end(h: &History, model: &Model, out: &mut Vec<Violation>) {
    let done = h.last().done;
    for run in &model.runs {
        let bad = match run.closes.len() {
            0 if done => Some("no run_finished or run_interrupted".to_string()),
            0 | 1 => None,
            n => Some(format!(
                "{n} closes ({})",
                run.closes
                    .iter()
                    .map(|(s, c)| format!(
                        "seq {s} {}",
                        if *c == RunClose::Finished {
                            "run_finished"
                        } else {
                            "run_interrupted"
                        }
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
        if let Some(found) = bad {
            out.push(v(
                Invariant::RunsClosed,
                "at the end of the trial",
                format!("run {} (seq {}) closed exactly once", run.run_id, run.seq),
                found,
                vec![],
            ));
        }
    }
}

fn call_events(records: &[Record], call_id: &str) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.event().and_then(crate::model::call_of) == Some(call_id))
        .map(describe_record)
        .collect()
}

/// effect-at-most-once: in the world, the workspace and the log.
fn effect_at_most_once(h: &History, model: &Model, out: &mut Vec<Violation>) {
    let when = "at the end of the trial";
    let records = &h.final_obs.records;
    let call_of_op = |op: &str| {
        model
            .calls
            .values()
            .find(|c| c.operation_id.as_deref() == Some(op))
            .map(|c| c.call_id.clone())
    };
    let mut by_op: BTreeMap<&str, Vec<&Application>> = BTreeMap::new();
    for a in &h.world {
        by_op.entry(&a.id).or_default().push(a);
    }
    for (op, apps) in by_op {
        if apps.len() > 1 {
            let lives: Vec<String> = apps.iter().map(|a| a.life.to_string()).collect();
            out.push(v(
                Invariant::EffectAtMostOnce,
                when,
                format!(
                    "operation {op} ({}: {}) applied at most once in the world",
                    apps[0].service, apps[0].action
                ),
                format!(
                    "applied {} times, by lives {}",
                    apps.len(),
                    lives.join(", ")
                ),
                call_of_op(op)
                    .map(|c| call_events(records, &c))
                    .unwrap_or_default(),
            ));
        }
    }
    let mut tags: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    for (file, bytes) in &h.workspace {
        for line in std::str::from_utf8(bytes).unwrap_or_default().lines() {
            if let Some(op) = tagged_operation(line) {
                tags.entry(op).or_insert((0, file)).0 += 1;
            }
        }
    }
    for (op, (n, file)) in tags {
        if n > 1 {
            out.push(v(
                Invariant::EffectAtMostOnce,
                when,
                format!("operation {op} appended to {file} at most once"),
                format!("{n} lines tagged {op} in {file}"),
                call_of_op(op)
                    .map(|c| call_events(records, &c))
                    .unwrap_or_default(),
            ));
        }
    }
    for call in model.calls.values() {
        let events = || call_events(records, &call.call_id);
        if call.approvals.len() > 1 {
            out.push(v(
                Invariant::EffectAtMostOnce,
                when,
                format!("the human asked once about call {}", call.call_id),
                format!("{} approval events", call.approvals.len()),
                events(),
            ));
        }
        if let Some(&(commit, _)) = call.commits.first() {
            if let Some(&s) = call.starts.iter().find(|&&s| s > commit) {
                out.push(v(
                    Invariant::EffectAtMostOnce,
                    when,
                    format!(
                        "call {} never started again after its effect was committed (seq {commit})",
                        call.call_id
                    ),
                    format!("tool_started again at seq {s}"),
                    events(),
                ));
            }
        }
        if call.needs_approval {
            let approved_at = call
                .approvals
                .iter()
                .find(|(_, d)| *d == Decision::Approved)
                .map(|&(s, _)| s);
            if let Some(&s) = call
                .starts
                .iter()
                .find(|&&s| approved_at.is_none_or(|a| s < a))
            {
                out.push(v(
                    Invariant::EffectAtMostOnce,
                    when,
                    format!(
                        "gated call {} starts only after a durable approval",
                        call.call_id
                    ),
                    format!("tool_started at seq {s} without one before it"),
                    events(),
                ));
            }
        }
    }
    let mut commits: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for r in records {
        if let Some(Event::EffectCommitted { operation_id, .. }) = r.event() {
            commits
                .entry(operation_id)
                .or_default()
                .push(describe_record(r));
        }
    }
    for (op, seen) in commits {
        if seen.len() > 1 {
            out.push(v(
                Invariant::EffectAtMostOnce,
                when,
                format!("at most one effect_committed for operation {op} in the log"),
                format!("{} commits", seen.len()),
                seen,
            ));
        }
    }
}

/// exactly-once-outcome: the agent finished, and the world and the
/// workspace equal the crash-free run's.
fn exactly_once_outcome(h: &History, reference: Option<&Reference>, out: &mut Vec<Violation>) {
    let when = "at the end of the trial";
    let last = h.last();
    if h.error.is_some() {
        // Not carried out as planned (the trial's error says why, and whose
        // fault): no resumed outcome to judge.
        return;
    }
    if !(last.done && last.end == LifeEnd::Exited(0)) {
        let how = match last.end {
            LifeEnd::Exited(c) => format!("exited with status {c}"),
            LifeEnd::Signaled(s) => format!("died of signal {s}"),
            LifeEnd::Killed => "was killed".to_string(),
            LifeEnd::Hung => "hung".to_string(),
        };
        out.push(v(
            Invariant::ExactlyOnceOutcome,
            when,
            format!("life {} to resume the scenario to completion", last.index),
            format!(
                "it {how}: {}",
                if last.stderr.is_empty() {
                    "(no message)"
                } else {
                    &last.stderr
                }
            ),
            tail(&h.final_obs.records, 3),
        ));
        return;
    }
    let Some(reference) = reference else { return };
    let count = |apps: &[Application]| {
        let mut m: BTreeMap<(String, String, String), usize> = BTreeMap::new();
        for a in apps {
            *m.entry((a.id.clone(), a.service.clone(), a.action.clone()))
                .or_default() += 1;
        }
        m
    };
    let (want, got) = (count(&reference.world), count(&h.world));
    let keys: std::collections::BTreeSet<_> = want.keys().chain(got.keys()).collect();
    let mut diffs = Vec::new();
    for k in keys {
        let (w, g) = (
            want.get(k).copied().unwrap_or(0),
            got.get(k).copied().unwrap_or(0),
        );
        if w != g {
            diffs.push(format!(
                "{} ({}: {}) applied {g} time(s), the crash-free run {w}",
                k.0, k.1, k.2
            ));
        }
    }
    let files: std::collections::BTreeSet<&String> = reference
        .workspace
        .keys()
        .chain(h.workspace.keys())
        .collect();
    for f in files {
        match (reference.workspace.get(f), h.workspace.get(f)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(_), None) => diffs.push(format!("{f} is missing")),
            (None, Some(_)) => diffs.push(format!("{f} should not exist")),
            (Some(a), Some(b)) => diffs.push(format!("{f} differs: {}", line_diff(a, b))),
            (None, None) => {}
        }
    }
    if !diffs.is_empty() {
        out.push(v(
            Invariant::ExactlyOnceOutcome,
            when,
            "the world and the workspace of the crash-free run".to_string(),
            diffs.join("; "),
            vec![],
        ));
    }
}

/// The index in `oplog` of the last write of a whole line (ending in a
/// newline: not pre-allocated zeros) that `writes` matches, between the
/// agent's stdout line at byte `line` and its next one: the store's write
/// of the event that line announced.
fn line_written(
    oplog: &crate::nemesis::powerloss::OpLog,
    line: u64,
    writes: &dyn Fn(&Op) -> bool,
) -> Option<usize> {
    let k = oplog
        .outputs
        .iter()
        .position(|m| m.offset <= line && line < m.offset + m.len)?;
    let end = oplog
        .outputs
        .get(k + 1)
        .map_or(oplog.ops.len(), |m| m.after_ops);
    (oplog.outputs[k].after_ops..end).rev().find(|&i| {
        let op = &oplog.ops[i].op;
        writes(op) && matches!(op, Op::Write { data, .. } if data.0.last() == Some(&b'\n'))
    })
}

/// failed-sync-not-acked: after the syscall nemesis made an fsync of file F
/// fail (EIO) in a life, no append is acknowledged until F is written
/// again and then synced; after it made a write fail (ENOSPC), none until
/// the store has written a file and then synced that file. A failed write
/// changed nothing on disk, so new durable progress in any file earns the
/// ack (a WAL store's failed checkpoint leaves its log authoritative: its
/// next commit writes and syncs the log, not the file the checkpoint
/// wrote); whether that progress holds the acked event is acked-durable's
/// question. A failed fsync may have dropped F's unsynced pages, so only
/// F's own rewrite counts. An fsync that failed while F held no unsynced
/// write lost nothing and is not judged, nor one whose unsynced writes
/// each repeat the bytes of a synced write to another file (a WAL store's
/// checkpoint copying pages its log holds). The order of the agent's ack
/// lines against the store's syscalls is exact: the tracer places every
/// write to the agent's stdout between the recorded ops.
fn failed_sync_not_acked(h: &History, out: &mut Vec<Violation>) {
    for life in &h.lives {
        failed_sync_not_acked_in(life, out);
    }
}

fn failed_sync_not_acked_in(life: &Life, out: &mut Vec<Violation>) {
    let Some(sys) = &life.syscalls else { return };
    let (Some(report), Some(oplog)) = (&sys.fault, &sys.oplog) else {
        return;
    };
    let (SyscallFault::Fail { errno }, FaultOutcome::Injected { event }, Some(before)) =
        (report.plan.fault, &report.outcome, report.stdout_before)
    else {
        return;
    };
    let (path, is_sync) = match &event.call {
        Call::Write { path, .. } => (path, false),
        Call::Sync { path, .. } => (path, true),
        _ => return,
    };
    let Ok(file) = path.strip_prefix(&sys.root) else {
        return;
    };
    let at = event.index;
    let writes = |op: &Op| matches!(op, Op::Write { path, .. } if path == file);
    let syncs_file = |op: &Op, file: &Path| match op {
        Op::Fsync { path } | Op::Fdatasync { path } => path == file,
        Op::SyncAll => true,
        _ => false,
    };
    let syncs = |op: &Op| syncs_file(op, file);
    let origin = |o: &LoggedOp| o.origin.map(|g| g.syscall);
    if is_sync {
        let before_failure: Vec<&LoggedOp> = oplog
            .ops
            .iter()
            .filter(|o| origin(o).is_some_and(|i| i < at))
            .collect();
        // F's writes since its last sync: what the kernel may have dropped.
        let mut dirty: Vec<&[u8]> = Vec::new();
        for o in &before_failure {
            match &o.op {
                Op::Write { path, data, .. } if path == file => dirty.push(&data.0),
                op if syncs(op) => dirty.clear(),
                _ => {}
            }
        }
        // Bytes a synced write to another file already holds are not lost
        // with F's pages: a WAL store's checkpoint copies pages its log
        // holds, and the log stays authoritative until F is synced.
        let synced_elsewhere = |bytes: &[u8]| {
            before_failure.iter().enumerate().any(|(i, o)| match &o.op {
                Op::Write { path, data, .. } if path != file && data.0 == bytes => before_failure
                    [i + 1..]
                    .iter()
                    .any(|later| syncs_file(&later.op, path)),
                _ => false,
            })
        };
        if dirty.iter().all(|bytes| synced_elsewhere(bytes)) {
            return;
        }
    }
    let root = sys.root.display().to_string();
    let text = |e: &crate::nemesis::syscall::SyscallEvent| e.to_string().replace(&root, "ROOT");
    for &(w, offset) in &sys.acks {
        if offset < before {
            continue;
        }
        let after_ops = oplog
            .outputs
            .iter()
            .find(|m| m.offset <= offset && offset < m.offset + m.len)
            .map_or(oplog.ops.len(), |m| m.after_ops);
        let between: Vec<&LoggedOp> = oplog.ops[..after_ops]
            .iter()
            .filter(|o| origin(o).is_some_and(|i| i > at))
            .collect();
        let rewritten = between.iter().enumerate().any(|(i, o)| match &o.op {
            Op::Write { path, .. } if path == file || !is_sync => between[i + 1..]
                .iter()
                .any(|later| syncs_file(&later.op, path)),
            _ => false,
        });
        // An event of a parallel group whose line was written whole before
        // the failure is acknowledged after it, with the rest of its group.
        // After a failed write it is due its ack once any sync covers it;
        // after a failed sync, only if a sync before the failure did.
        let synced_before = line_written(oplog, life.writes[w].line, &writes)
            .filter(|&i| origin(&oplog.ops[i]).is_some_and(|o| o < at))
            .is_some_and(|i| {
                oplog.ops[i + 1..after_ops]
                    .iter()
                    .any(|o| syncs(&o.op) && (!is_sync || origin(o).is_some_and(|g| g < at)))
            });
        if rewritten || synced_before {
            continue;
        }
        let upto = between.iter().filter_map(|o| origin(o)).max().unwrap_or(at);
        let calls: Vec<String> = sys
            .events
            .iter()
            .filter(|e| e.index > at && e.index <= upto)
            .map(text)
            .collect();
        let write = &life.writes[w];
        let seq = write.acked.unwrap_or_default();
        let call = format!("#{at} {}", event.call_text().replace(&root, "ROOT"));
        out.push(v(
            Invariant::FailedSyncNotAcked,
            &format!("in life {}, after the injected error", life.index),
            if is_sync {
                format!(
                    "no acknowledgement after {call} failed with {errno} until ROOT/{} is written again and synced (the kernel may have dropped its unsynced pages: a retried fsync proves nothing)",
                    file.display()
                )
            } else {
                format!(
                    "no acknowledgement after {call} failed with {errno} until the store writes again and syncs the file it wrote (the write never happened)"
                )
            },
            format!(
                "{} at seq {seq} was acknowledged; in between: {}",
                write.type_name,
                if calls.is_empty() {
                    "no store syscall".to_string()
                } else {
                    calls.join(", ")
                }
            ),
            vec![format!("{call} failed with {errno}"), format!("ack of seq {seq} {}", write.type_name)],
        ));
        return;
    }
}

fn line_diff(want: &[u8], got: &[u8]) -> String {
    let (w, g) = (String::from_utf8_lossy(want), String::from_utf8_lossy(got));
    let (mut wl, mut gl) = (w.lines(), g.lines());
    for n in 1.. {
        match (wl.next(), gl.next()) {
            (Some(a), Some(b)) if a == b => continue,
            (a, b) => {
                return format!(
                    "line {n}: expected {:?}, found {:?}",
                    a.unwrap_or("(end of file)"),
                    b.unwrap_or("(end of file)")
                )
            }
        }
    }
    unreachable!("the loop returns at the first difference")
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
    use crate::history::RecoveryReport;
    use agentchaos_protocol::event::{event_id, Body, Redaction};

    fn obs(events: &[Event]) -> Observation {
        let records: Vec<Record> = events
            .iter()
            .enumerate()
            .map(|(i, e)| Record {
                seq: i as u64,
                id: event_id(i as u64),
                ts: "2026-01-01T00:00:00.000Z".into(),
                redaction: Redaction::Public,
                body: Body::Known(e.clone()),
            })
            .collect();
        Observation {
            fold: None,
            ends: Vec::new(),
            torn: None,
            damage: None,
            bytes: Some(crate::store::LogBytes {
                len: records.len() as u64,
                crc: records.len() as u32,
            }),
            checkpoint: CheckpointView::Absent,
            records,
            blobs: Vec::new(),
            torn_bytes: None,
            quarantine: None,
        }
    }

    fn life(index: u32, writes: &[(&Event, u64)], end: LifeEnd) -> Life {
        Life {
            writes: writes
                .iter()
                .map(|(e, seq)| Append {
                    type_name: e.type_name().into(),
                    fingerprint: crate::agent::wire::fingerprint(e),
                    line: 0,
                    acked: Some(*seq),
                    refused: false,
                })
                .collect(),
            done: end == LifeEnd::Exited(0),
            end,
            ..Life::started(index, None)
        }
    }

    /// A store whose recovery leaves the open run open (or closes it, for the control).
    fn history(recovery_closes_the_run: bool) -> History {
        let created = Event::SessionCreated {
            session_id: "s".into(),
            schema_version: 1,
            workspace: String::new(),
        };
        let started = Event::RunStarted { run_id: "r".into() };
        let interrupted = Event::RunInterrupted { run_id: "r".into() };
        let resumed = Event::RunStarted {
            run_id: "r~1".into(),
        };
        let finished = Event::RunFinished {
            run_id: "r~1".into(),
            status: agentchaos_protocol::event::RunStatus::Completed,
        };
        let killed = obs(&[created.clone(), started.clone()]);
        let mut recovered = vec![created.clone(), started.clone()];
        if recovery_closes_the_run {
            recovered.push(interrupted);
        }
        let after = obs(&recovered);
        let n = recovered.len() as u64;
        recovered.extend([resumed.clone(), finished.clone()]);
        let mut second = life(1, &[(&resumed, n), (&finished, n + 1)], LifeEnd::Exited(0));
        second.recovered = Some(RecoveryReport {
            appended: u64::from(recovery_closes_the_run),
            interrupted: if recovery_closes_the_run {
                vec!["r".into()]
            } else {
                vec![]
            },
            uncertain: vec![],
            block: None,
            contexts: vec![],
            projection: Value::Null,
        });
        second.after_recovery = Some(after.clone());
        second.recovered_again = Some(0);
        second.after_second_recovery = Some(after);
        History {
            lives: vec![life(0, &[(&started, 1)], LifeEnd::Killed), second],
            after_kill: vec![killed],
            power_cut: vec![],
            final_obs: obs(&recovered),
            world: vec![],
            workspace: BTreeMap::new(),
            error: None,
        }
    }

    #[test]
    fn a_rewritten_event_names_the_field_that_changed() {
        let before = obs(&[Event::UserMessage {
            parent: None,
            text: "deploy to staging".into(),
        }]);
        let after = obs(&[Event::UserMessage {
            parent: None,
            text: "deploy to production".into(),
        }]);
        let found = first_divergence(&before.records, &after.records).unwrap();
        assert!(
            found.contains("was rewritten as")
                && found.contains("text: \"deploy to staging\" vs \"deploy to production\""),
            "{found}"
        );
    }

    #[test]
    fn a_refused_append_may_be_absent_but_its_retry_must_not_duplicate_it() {
        let a = Event::UserMessage {
            parent: None,
            text: "a".into(),
        };
        let b = Event::UserMessage {
            parent: None,
            text: "b".into(),
        };
        let refused = |e: &Event| Append {
            type_name: e.type_name().into(),
            fingerprint: crate::agent::wire::fingerprint(e),
            line: 0,
            acked: None,
            refused: true,
        };
        // Announced a, refused; retried a, acknowledged; then b.
        let mut l = life(0, &[(&a, 0), (&b, 1)], LifeEnd::Exited(0));
        l.writes.insert(0, refused(&a));
        let log = |events: &[Event]| obs(events).records;
        assert_eq!(suffix_problem(&log(&[a.clone(), b.clone()]), &l), None);
        let twice = suffix_problem(&log(&[a.clone(), a.clone(), b.clone()]), &l)
            .expect("the kept refused append and its retry are a duplicate");
        assert!(
            twice.ends_with("again: the store refused that user_message with an I/O error, kept it, and the agent's retry added it a second time"),
            "{twice}"
        );
        // Refused for good (the agent gave up): present or absent, both allowed.
        let mut gave_up = life(0, &[], LifeEnd::Exited(1));
        gave_up.writes.push(refused(&a));
        assert_eq!(
            suffix_problem(&log(std::slice::from_ref(&a)), &gave_up),
            None
        );
        assert_eq!(suffix_problem(&[], &gave_up), None);
        assert!(suffix_problem(&log(std::slice::from_ref(&b)), &gave_up).is_some());
    }

    #[test]
    fn acked_durable_says_how_many_acknowledged_events_are_gone_and_which() {
        let created = Event::SessionCreated {
            session_id: "s".into(),
            schema_version: 1,
            workspace: String::new(),
        };
        let messages: Vec<Event> = (0..4)
            .map(|i| Event::UserMessage {
                parent: None,
                text: format!("m{i}"),
            })
            .collect();
        let writes: Vec<(&Event, u64)> = messages.iter().zip(1..).collect();
        let mut h = history(true);
        h.lives = vec![life(0, &writes, LifeEnd::Killed)];
        // A store that rewrote its file and lost everything after session_created.
        h.after_kill = vec![obs(std::slice::from_ref(&created))];
        h.final_obs = obs(std::slice::from_ref(&created));
        let lost: Vec<Violation> = check(&h, None)
            .into_iter()
            .filter(|v| v.invariant == Invariant::AckedDurable)
            .collect();
        assert!(!lost.is_empty());
        assert_eq!(
            lost[0].expected,
            "all 4 acknowledged events in the log at their seqs"
        );
        assert_eq!(
            lost[0].found,
            "4 of them missing or changed: from user_message at seq 1 (acknowledged to life 0) \
             to user_message at seq 4 (acknowledged to life 0); at the first, the log ends \
             before seq 1 (1 event)"
        );
        // One lost event is named alone.
        h.after_kill = vec![obs(&[
            created.clone(),
            messages[0].clone(),
            messages[1].clone(),
            messages[2].clone(),
        ])];
        h.final_obs = h.after_kill[0].clone();
        let one = check(&h, None)
            .into_iter()
            .find(|v| v.invariant == Invariant::AckedDurable)
            .expect("the last ack is gone");
        assert_eq!(
            one.expected,
            "user_message at seq 4 (acknowledged to life 0), acknowledged as durable"
        );
    }

    #[test]
    fn blob_readable_names_the_first_unreadable_blob_and_counts_the_rest() {
        let mut h = history(true);
        let blob = |digest: &str, problem: Option<&str>| crate::store::BlobRead {
            seq: 1,
            reference: agentchaos_protocol::event::BlobRef {
                digest: digest.into(),
                size: 20_000,
            },
            problem: problem.map(str::to_string),
        };
        h.final_obs.blobs = vec![
            blob("aa", None),
            blob("bb", Some("cannot read it: gone")),
            blob("cc", Some("x")),
        ];
        let found: Vec<Violation> = check(&h, None)
            .into_iter()
            .filter(|v| v.invariant == Invariant::BlobReadable)
            .collect();
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].expected.starts_with("blob bb (20000 bytes)"),
            "{}",
            found[0].expected
        );
        assert_eq!(
            found[0].found,
            "cannot read it: gone (and 1 more of 3 referenced blobs)"
        );
        h.final_obs.blobs = vec![blob("aa", None)];
        assert!(check(&h, None)
            .iter()
            .all(|v| v.invariant != Invariant::BlobReadable));
    }

    #[test]
    fn runs_closed_catches_a_recovery_that_leaves_the_run_open() {
        let found = check(&history(false), None);
        let rc: Vec<&Violation> = found
            .iter()
            .filter(|v| v.invariant == Invariant::RunsClosed)
            .collect();
        assert!(!rc.is_empty(), "{found:#?}");
        assert!(
            rc[0].expected.contains("run r had no finish"),
            "{:?}",
            rc[0]
        );
        assert_eq!(rc[0].found, "0 run_interrupted for it");
        assert_eq!(check(&history(true), None), vec![], "the control passes");
    }

    #[test]
    fn the_outcome_of_a_trial_not_carried_out_is_not_judged() {
        let mut h = history(true);
        h.lives[1].end = LifeEnd::Hung;
        h.lives[1].done = false;
        // The crash-free run touched the workspace; the trial never got there.
        let reference = Reference {
            records: h.final_obs.records.clone(),
            world: vec![],
            workspace: BTreeMap::from([("notes.txt".to_string(), b"done\n".to_vec())]),
        };
        let outcome = |h: &History| {
            check(h, Some(&reference))
                .into_iter()
                .filter(|v| v.invariant == Invariant::ExactlyOnceOutcome)
                .count()
        };
        assert_eq!(outcome(&h), 1, "a life that did not finish is judged");
        h.error = Some(crate::history::TrialError {
            message: "life 1 hung".into(),
            store_fault: true,
        });
        assert_eq!(outcome(&h), 0, "the trial's error says it all");
    }

    #[test]
    fn recovery_idempotent_catches_a_recovery_whose_appended_is_untrue() {
        let account = |h: &History| -> Vec<Violation> {
            check(h, None)
                .into_iter()
                .filter(|v| v.invariant == Invariant::RecoveryIdempotent)
                .collect()
        };
        // The control: it appended one run_interrupted and says 1.
        assert_eq!(account(&history(true)), vec![]);
        for lie in [0, 2, u64::MAX] {
            let mut h = history(true);
            h.lives[1].recovered.as_mut().unwrap().appended = lie;
            let found = account(&h);
            assert_eq!(found.len(), 1, "appended {lie}: {found:#?}");
            assert_eq!(found[0].found, format!("it says it appended {lie}"));
            assert!(
                found[0].expected.contains("from 1 "),
                "{}",
                found[0].expected
            );
        }
    }

    #[test]
    fn orphan_marked_uncertain_catches_a_call_reported_uncertain_that_is_not() {
        let mut h = history(true);
        h.lives[1].recovered.as_mut().unwrap().uncertain = vec![crate::agent::wire::ReportedCall {
            call_id: "c9".into(),
            phase: agentchaos_protocol::event::Phase::Started,
        }];
        let found: Vec<Violation> = check(&h, None)
            .into_iter()
            .filter(|v| v.invariant == Invariant::OrphanMarkedUncertain)
            .collect();
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].expected.contains("call c9 is not open"),
            "{}",
            found[0].expected
        );
        assert_eq!(
            found[0].found,
            "it reported call c9 as uncertain, phase started"
        );
    }

    /// Life 0 wrote the log (#0), its fdatasync failed with EIO (#1), then
    /// the store made `after` (as ops at #2, #3, …) and acknowledged.
    fn eio_then(after: Vec<Op>) -> History {
        fail_then(Failed::Fdatasync, after)
    }

    /// Which of life 0's syscall #1 the nemesis failed.
    enum Failed {
        /// An fdatasync of the log, with EIO.
        Fdatasync,
        /// A write (a checkpoint's) of `s/session.db`, with ENOSPC.
        CheckpointWrite,
    }

    /// Life 0 wrote the log (#0), syscall #1 failed, then the store made
    /// `after` (as ops at #2, #3, …) and acknowledged.
    fn fail_then(failed: Failed, after: Vec<Op>) -> History {
        use crate::nemesis::powerloss::{Bytes, OpLog, Origin, OutputMark};
        use crate::nemesis::syscall::{Errno, FaultPlan, FaultReport, SyscallEvent, Sysno};
        let log = std::path::PathBuf::from("/r/s/events.jsonl");
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let (sysno, call, errno) = match failed {
            Failed::Fdatasync => (
                Sysno::Fdatasync,
                Call::Sync {
                    fd: 4,
                    path: log.clone(),
                    data_only: true,
                },
                Errno::EIO,
            ),
            Failed::CheckpointWrite => (
                Sysno::Pwrite64,
                Call::Write {
                    fd: 5,
                    path: "/r/s/session.db".into(),
                    len: 4096,
                    offset: Some(8192),
                },
                Errno::ENOSPC,
            ),
        };
        let failed = SyscallEvent {
            index: 1,
            pid: 1,
            sysno,
            call,
            result: Some(-i64::from(errno.get())),
        };
        let write = Op::Write {
            path: rel,
            offset: 0,
            data: Bytes(b"line\n".to_vec()),
        };
        let ops: Vec<LoggedOp> = std::iter::once(write)
            .chain(after)
            .enumerate()
            .map(|(i, op)| LoggedOp {
                op,
                origin: Some(Origin {
                    pid: 1,
                    syscall: if i == 0 { 0 } else { i as u64 + 1 },
                }),
            })
            .collect();
        let mut h = history(true);
        h.lives[0].syscalls = Some(crate::history::SyscallLife {
            root: "/r".into(),
            events: vec![failed.clone()],
            fault: Some(FaultReport {
                plan: FaultPlan {
                    at: 1,
                    fault: SyscallFault::Fail { errno },
                },
                outcome: FaultOutcome::Injected { event: failed },
                stdout_before: Some(40),
            }),
            oplog: Some(OpLog {
                outputs: vec![OutputMark {
                    after_ops: ops.len(),
                    offset: 40,
                    len: 30,
                    pid: 1,
                }],
                ops,
                gaps: vec![],
            }),
            acks: vec![(0, 40)],
        });
        h
    }

    /// The failed-sync-not-acked violations the checker finds in `h`.
    fn failed_sync(h: &History) -> Vec<Violation> {
        check(h, None)
            .into_iter()
            .filter(|v| v.invariant == Invariant::FailedSyncNotAcked)
            .collect()
    }

    /// Life 0's recorded file operations and stdout marks.
    fn oplog_of(h: &mut History) -> &mut crate::nemesis::powerloss::OpLog {
        h.lives[0]
            .syscalls
            .as_mut()
            .unwrap()
            .oplog
            .as_mut()
            .unwrap()
    }

    /// [`eio_then`]`(after)` with `ops` inserted at `index` of life 0's
    /// ops, all made before the failed call, and the ack printed after them.
    fn eio_with(index: usize, ops: Vec<Op>, after: Vec<Op>) -> History {
        use crate::nemesis::powerloss::Origin;
        let mut h = eio_then(after);
        let oplog = oplog_of(&mut h);
        for (i, op) in ops.into_iter().enumerate() {
            let origin = Some(Origin { pid: 1, syscall: 0 });
            oplog.ops.insert(index + i, LoggedOp { op, origin });
        }
        oplog.outputs[0].after_ops = oplog.ops.len();
        h
    }

    #[test]
    fn failed_sync_not_acked_catches_a_retried_fsync_and_lets_a_rewrite_pass() {
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let mut h = eio_then(vec![Op::Fdatasync { path: rel.clone() }]);
        // The retry (#2) as the tracer saw it, succeeding.
        let sys = h.lives[0].syscalls.as_mut().unwrap();
        let mut retry = sys.events[0].clone();
        retry.index = 2;
        retry.result = Some(0);
        sys.events.push(retry);
        let v = failed_sync(&h);
        assert_eq!(v.len(), 1, "{v:#?}");
        assert!(
            v[0].found.starts_with(
                "run_started at seq 1 was acknowledged; in between: #2 fdatasync(fd 4 = ROOT/s/events.jsonl) = 0"
            ),
            "the calls between the failure and the ack: {:?}",
            v[0]
        );
        let rewritten = vec![
            Op::Write {
                path: rel.clone(),
                offset: 0,
                data: crate::nemesis::powerloss::Bytes(b"line\n".to_vec()),
            },
            Op::Fdatasync { path: rel },
        ];
        assert_eq!(
            check(&eio_then(rewritten), None),
            vec![],
            "a rewrite + sync passes"
        );
    }

    /// Only F's writes since its last sync are at stake when its fsync
    /// fails: a log synced before (by fdatasync or sync()) and left clean,
    /// or followed only by another file's write, loses nothing and a
    /// retried fsync is not judged; a write to F is still at stake after
    /// another file's write.
    #[test]
    fn failed_sync_not_acked_judges_only_the_writes_a_failed_fsync_may_drop() {
        use crate::nemesis::powerloss::Bytes;
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let other = |path: &str| Op::Write {
            path: path.into(),
            offset: 0,
            data: Bytes(b"other\n".to_vec()),
        };
        // Life 0's write of the log (#0), then `ops` (also before the
        // failure), then the failed fdatasync, a retry and the ack.
        let judged = |ops: Vec<Op>| {
            failed_sync(&eio_with(1, ops, vec![Op::Fdatasync { path: rel.clone() }])).len()
        };
        assert_eq!(judged(vec![]), 1, "the log's line was at stake");
        assert_eq!(judged(vec![Op::Fdatasync { path: rel.clone() }]), 0);
        assert_eq!(judged(vec![Op::SyncAll]), 0);
        assert_eq!(
            judged(vec![Op::Fdatasync { path: rel.clone() }, other("s/index")]),
            0,
            "another file's write does not make the log dirty"
        );
        assert_eq!(
            judged(vec![other("s/index")]),
            1,
            "another file's write does not clean the log"
        );
    }

    /// Each ack is judged by what came before it: one printed before the
    /// failure is not judged; a rewrite and sync after the ack does not
    /// earn it, nor (after a failed fsync) another file's write and sync.
    #[test]
    fn failed_sync_not_acked_judges_each_ack_by_what_came_before_it() {
        use crate::nemesis::powerloss::{Bytes, Origin};
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let judged = |h: &History| failed_sync(h).len();
        let mut acked_before = eio_then(vec![]);
        let mut earlier = acked_before.lives[0].writes[0].clone();
        earlier.acked = Some(7);
        acked_before.lives[0].writes.push(earlier);
        let sys = acked_before.lives[0].syscalls.as_mut().unwrap();
        sys.acks.insert(0, (1, 10));
        // One violation per failed call: it must name the ack after it.
        let found: Vec<String> = failed_sync(&acked_before)
            .into_iter()
            .map(|v| v.found)
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("run_started at seq 1 was acknowledged"),
            "only the ack after the failure: {found:?}"
        );

        let mut rewritten_late = eio_then(vec![]);
        let oplog = oplog_of(&mut rewritten_late);
        let rewrite = [
            Op::Write {
                path: rel.clone(),
                offset: 0,
                data: Bytes(b"line\n".to_vec()),
            },
            Op::Fdatasync { path: rel.clone() },
        ];
        for (i, op) in rewrite.into_iter().enumerate() {
            let origin = Some(Origin {
                pid: 1,
                syscall: 2 + i as u64,
            });
            oplog.ops.push(LoggedOp { op, origin });
        }
        assert_eq!(judged(&rewritten_late), 1, "the rewrite came after the ack");

        let wal = std::path::PathBuf::from("s/events.wal");
        let elsewhere = eio_then(vec![
            Op::Write {
                path: wal.clone(),
                offset: 0,
                data: Bytes(b"frame".to_vec()),
            },
            Op::Fsync { path: wal },
        ]);
        assert_eq!(
            judged(&elsewhere),
            1,
            "after EIO only the file's own rewrite"
        );

        // A line the agent printed (at byte 20) before the rewrite does not
        // move the ack (at byte 40) before it.
        let mut printed_between = eio_then(vec![
            Op::Write {
                path: rel.clone(),
                offset: 0,
                data: Bytes(b"line\n".to_vec()),
            },
            Op::Fdatasync { path: rel },
        ]);
        oplog_of(&mut printed_between).outputs.insert(
            0,
            crate::nemesis::powerloss::OutputMark {
                after_ops: 1,
                offset: 20,
                len: 20,
                pid: 1,
            },
        );
        assert_eq!(judged(&printed_between), 0, "rewritten before the ack");
    }

    /// A parallel group: event A's line written (announced at byte 0 of
    /// the agent's stdout), then B's (announced at byte 20), then the log's
    /// fdatasync fails and A is acknowledged (at byte 40). A synced before
    /// the failure passes; synced only by the retry, it does not.
    #[test]
    fn failed_sync_not_acked_lets_a_group_event_synced_before_a_failed_fsync_pass() {
        use crate::nemesis::powerloss::{Bytes, OutputMark};
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let group = |a_synced_first: bool| {
            let mut before_b = vec![];
            if a_synced_first {
                before_b.push(Op::Fdatasync { path: rel.clone() });
            }
            let b_at = 1 + before_b.len();
            before_b.push(Op::Write {
                path: rel.clone(),
                offset: 5,
                data: Bytes(b"b\n".to_vec()),
            });
            let retry = vec![Op::Fdatasync { path: rel.clone() }];
            let mut h = eio_with(1, before_b, retry);
            let oplog = oplog_of(&mut h);
            let mark = |after_ops: usize, offset: u64| OutputMark {
                after_ops,
                offset,
                len: 20,
                pid: 1,
            };
            oplog.outputs.insert(0, mark(b_at, 20));
            oplog.outputs.insert(0, mark(0, 0));
            failed_sync(&h).len()
        };
        assert_eq!(group(true), 0);
        assert_eq!(group(false), 1);
    }

    /// A failed fsync of a file whose unsynced bytes a synced log already
    /// holds (a WAL store's checkpoint) lost nothing: a retried fsync is
    /// then not judged. Unsynced in the log, other bytes in the log, or the
    /// same bytes earlier in the file itself (a second copy is a second
    /// line), it is.
    #[test]
    fn failed_sync_not_acked_lets_pass_a_failed_fsync_of_bytes_synced_elsewhere() {
        use crate::nemesis::powerloss::Bytes;
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let wal = std::path::PathBuf::from("s/events.wal");
        // `bytes` written to `path` (and synced) before life 0's write of
        // the log, whose fdatasync then fails and is retried.
        let copied_to = |path: &std::path::Path, bytes: &[u8], synced: bool| {
            let mut first = vec![Op::Write {
                path: path.to_path_buf(),
                offset: 0,
                data: Bytes(bytes.to_vec()),
            }];
            if synced {
                first.push(Op::Fsync {
                    path: path.to_path_buf(),
                });
            }
            let retry = vec![Op::Fdatasync { path: rel.clone() }];
            failed_sync(&eio_with(0, first, retry)).len()
        };
        assert_eq!(copied_to(&wal, b"line\n", true), 0);
        assert_eq!(copied_to(&wal, b"line\n", false), 1);
        assert_eq!(copied_to(&wal, b"other\n", true), 1);
        assert_eq!(copied_to(&rel, b"line\n", true), 1);
    }

    /// After a checkpoint's write failed, a WAL store's commit writes and
    /// syncs its log, not the file the checkpoint wrote: that earns the
    /// ack. A write nothing synced does not, nor a sync of another file.
    #[test]
    fn failed_sync_not_acked_lets_a_failed_write_be_followed_by_a_synced_write_elsewhere() {
        let wal = std::path::PathBuf::from("s/session.db-wal");
        let frame = || Op::Write {
            path: wal.clone(),
            offset: 0,
            data: crate::nemesis::powerloss::Bytes(b"frame".to_vec()),
        };
        let failed = |after: Vec<Op>| failed_sync(&fail_then(Failed::CheckpointWrite, after));
        assert_eq!(
            failed(vec![frame(), Op::Fsync { path: wal.clone() }]),
            vec![],
            "the log written and synced after the failed checkpoint"
        );
        let unsynced = failed(vec![frame()]);
        assert_eq!(unsynced.len(), 1, "{unsynced:#?}");
        assert!(
            unsynced[0].expected.contains(
                "failed with ENOSPC until the store writes again and syncs the file it wrote"
            ),
            "{:?}",
            unsynced[0]
        );
        let other_synced = failed(vec![
            frame(),
            Op::Fsync {
                path: "s/session.db".into(),
            },
        ]);
        assert_eq!(other_synced.len(), 1, "{other_synced:#?}");
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
                "tail-rules"
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

    #[test]
    fn line_diff_points_at_the_first_different_line() {
        assert_eq!(
            line_diff(b"a\nb\n", b"a\nc\n"),
            "line 2: expected \"b\", found \"c\""
        );
        assert_eq!(
            line_diff(b"a\n", b"a\nx\n"),
            "line 2: expected \"(end of file)\", found \"x\""
        );
    }
}
