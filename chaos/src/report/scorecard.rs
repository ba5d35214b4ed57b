//! The scorecard: one verdict per capability (`Capability::ALL`), plus
//! the end-to-end outcome every store owes, from a campaign's trials and
//! probes.
//!
//! - **pass**: the capability's checks ran at least once (counted) and none failed;
//! - **fail**: with the first violation and its replay command;
//! - **not supported**: the store does not claim it; it is never a pass.
//!   Claims decide how a row is scored, never which faults a store gets:
//!   every store is torn, killed and faulted alike, and what an unclaimed
//!   capability would have caught is judged by the rows every store owes
//!   (a torn write that loses or fuses an event fails `durable_append`);
//! - **not exercised**: claimed, but nothing in this campaign tested it (and why);
//! - **not reached**: claimed, and its probes ran, but none reached the
//!   situation it tests (and why): a setup step failed first. What broke
//!   there is charged to its own promise ([`crate::campaign::probe::Probe::charged`]):
//!   a session that no longer opens fails `durable_append`, never the rule
//!   the probe was about.
//!
//! [`row_of`] is the one table mapping each invariant to the row it is
//! evidence for; [`Evidence`] is what one trial exercised. This module
//! sorts the checker's and the probes' verdicts by capability and counts;
//! it must never judge a trial itself, and never pass an unclaimed capability.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::campaign::config::replay_command;
use crate::campaign::probe::ProbeOutcome;
use crate::campaign::runner::CampaignResult;
use crate::check::evidence::Evidence;
use crate::check::{Invariant, Violation};
use crate::nemesis::Plan;
use crate::report::causes;
use crate::store::adapter::Capability;

/// A scorecard row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Row {
    /// A capability; for `durable_append`, surviving a process crash
    /// (SIGKILL, the page cache kept).
    Capability(Capability),
    /// `durable_append` under a power loss (what the persistence models let
    /// the disk keep): a store without fsync may pass the crash row and
    /// fail this one. Scored under the `durable_append` claim.
    PowerLoss,
    /// What every store owes the agent, whatever it claims: no effect twice,
    /// and the crash-free run's world and workspace after resuming.
    Outcome,
}

impl Row {
    /// Every row, in scorecard order.
    pub fn all() -> Vec<Row> {
        let mut rows = Vec::new();
        for c in Capability::ALL {
            rows.push(Row::Capability(c));
            if c == Capability::DurableAppend {
                rows.push(Row::PowerLoss);
            }
        }
        rows.push(Row::Outcome);
        rows
    }

    pub fn name(self) -> &'static str {
        match self {
            Row::Capability(c) => c.name(),
            Row::PowerLoss => "durable_append: power",
            Row::Outcome => "outcome (every store)",
        }
    }

    /// The row's name in JSON and JUnit.
    pub fn key(self) -> &'static str {
        match self {
            Row::Capability(c) => c.name(),
            Row::PowerLoss => "durable_append_power_loss",
            Row::Outcome => "outcome",
        }
    }

    /// The capability whose claim decides how the row is scored.
    fn claim(self) -> Option<Capability> {
        match self {
            Row::Capability(c) => Some(c),
            Row::PowerLoss => Some(Capability::DurableAppend),
            Row::Outcome => None,
        }
    }
}

/// The one table: which row an invariant's violations count against.
/// Refinements look at the trial and at the events a finding names
/// ([`attribute`]): `log-prefix` about a torn or damaged line in a trial
/// that left a torn tail is `torn_tail_repair`; `checkpoint-projection` in
/// a trial whose resumed projection has another leaf than the fold is
/// `branches`, the same leaf but another branch window `compaction` when
/// the log holds a compaction (else `branches`). `context-window` and
/// `recovery-idempotent` are scored under the capability whose events they
/// found wrong ([`owner`]), never under what the scenario is about:
/// `context-window` is `branches`' in a trial resumed on another leaf, else
/// `compaction`'s when it names a compaction or the log holds one,
/// `branches`' when the log holds a leaf move, and with neither (the
/// context left out or misplaced plain messages its own log holds: a view
/// derived from a stale record) `checkpoint_projection`'s, claimed or not
/// (unclaimed, it is not scored); `recovery-idempotent` is `orphan_marking`'s for a
/// recovery's own marks, and the named events' owner otherwise (records a
/// lost session row took with it: `durable_append`).
pub fn row_of(invariant: Invariant) -> Row {
    use Capability as C;
    match invariant {
        Invariant::AckedDurable
        | Invariant::LogPrefix
        | Invariant::FailedSyncNotAcked
        | Invariant::AckedAfterSync => Row::Capability(C::DurableAppend),
        Invariant::OrphanMarkedUncertain
        | Invariant::RunsClosed
        | Invariant::RecoveryIdempotent => Row::Capability(C::OrphanMarking),
        Invariant::CheckpointProjection => Row::Capability(C::CheckpointProjection),
        // A cut that keeps or records nothing of what it cut is the repair's.
        Invariant::QuarantineRecorded | Invariant::TailRules => Row::Capability(C::TornTailRepair),
        Invariant::DamageRefused => Row::Capability(C::DamageRefusal),
        // The rules the probe tries are those that keep an effect from
        // running twice: the ledger's.
        Invariant::LedgerRefusesDoubleCommit | Invariant::RuleRefused => {
            Row::Capability(C::EffectLedger)
        }
        Invariant::SecondWriterRefused => Row::Capability(C::WriterLock),
        Invariant::BlobReadable => Row::Capability(C::Blobs),
        Invariant::ContextWindow => Row::Capability(C::Compaction),
        Invariant::EffectAtMostOnce | Invariant::ExactlyOnceOutcome => Row::Outcome,
    }
}

/// The row of one violation found in a trial that exercised `e`, for a
/// store claiming `claimed`. A refinement applies only to a claimed
/// capability: a store that does not claim `torn_tail_repair` and loses an
/// event to a torn write fails `durable_append`, which every store owes.
pub fn attribute(v: &Violation, e: &Evidence, claimed: &[Capability]) -> Row {
    let refined = match v.invariant {
        // The checker's torn-line findings (`well_formed`): damage, or a torn tail left after recovery.
        Invariant::LogPrefix
            if e.torn_tail
                && (v.found.starts_with("damage: ") || v.expected.contains("torn tail")) =>
        {
            Some(Capability::TornTailRepair)
        }
        Invariant::CheckpointProjection if e.leaf_differs => Some(Capability::Branches),
        // Resumed on another leaf, the context shows another branch too.
        Invariant::ContextWindow if e.leaf_differs => Some(Capability::Branches),
        Invariant::ContextWindow
            if named(v).any(|t| t == "compaction") || e.log_compaction || e.compaction =>
        {
            Some(Capability::Compaction)
        }
        Invariant::ContextWindow if e.log_leaf_moved || e.leaf_moved => Some(Capability::Branches),
        // Neither: a view the store derives from its log (a stale run
        // record, a stub) that disagrees with it, as a projection would.
        // Its row whether claimed or not: never compaction's by default.
        Invariant::ContextWindow => return Row::Capability(Capability::CheckpointProjection),
        // The first named event that is not a recovery's own mark decides.
        Invariant::RecoveryIdempotent => named(v)
            .map(owner)
            .find(|c| *c != Capability::OrphanMarking),
        Invariant::CheckpointProjection if e.window_differs => Some(if e.compaction {
            Capability::Compaction
        } else {
            Capability::Branches
        }),
        _ => None,
    };
    match refined {
        Some(c) if claimed.contains(&c) => Row::Capability(c),
        _ => row_of(v.invariant),
    }
}

/// The event types a finding names.
fn named(v: &Violation) -> impl Iterator<Item = &str> {
    v.events
        .iter()
        .filter_map(|line| crate::model::described_type(line))
}

/// The capability whose events of type `type_name` are: a recovery's marks
/// `orphan_marking`'s, a compaction `compaction`'s, a leaf move
/// `branches`', a quarantined tail `torn_tail_repair`'s; every other
/// event (the agent's, the creation) is an append `durable_append` keeps.
pub fn owner(type_name: &str) -> Capability {
    match type_name {
        "tool_recovery" | "run_interrupted" => Capability::OrphanMarking,
        "compaction" => Capability::Compaction,
        "leaf_moved" => Capability::Branches,
        "tail_quarantined" => Capability::TornTailRepair,
        _ => Capability::DurableAppend,
    }
}

/// How many times a row was exercised in a campaign, and in what unit.
fn exercised(row: Row, result: &CampaignResult) -> (usize, &'static str) {
    let trials = |f: fn(&Evidence) -> bool| {
        result
            .scenarios
            .iter()
            .flat_map(|s| &s.outcomes)
            .filter(|o| o.error.is_none() && f(&o.evidence))
            .count()
    };
    let probes = |c: Capability| count_probes(result, |p| !p.skipped && p.probe.capability() == c);
    use Capability as C;
    match row {
        Row::Capability(C::DurableAppend) => (
            trials(|e| e.in_store_io),
            "crash trials with a fault inside a store write or sync",
        ),
        Row::Capability(C::TornTailRepair) => (trials(|e| e.torn_tail), "trials left a torn tail"),
        Row::Capability(C::DamageRefusal) => (probes(C::DamageRefusal), "damage probes"),
        Row::Capability(C::OrphanMarking) => (trials(|e| e.recovery_work), "recoveries with work"),
        Row::Capability(C::EffectLedger) => {
            (probes(C::EffectLedger), "ledger and session-rule probes")
        }
        Row::Capability(C::CheckpointProjection) => {
            (trials(|e| e.projection), "trials compared projections")
        }
        Row::Capability(C::Branches) => {
            (trials(|e| e.leaf_moved), "trials crashed after a leaf move")
        }
        Row::Capability(C::Compaction) => (
            trials(|e| e.compaction),
            "trials crashed after a compaction",
        ),
        Row::Capability(C::WriterLock) => (probes(C::WriterLock), "second-writer probes"),
        Row::Capability(C::Blobs) => (trials(|e| e.blobs_read), "crash trials read blobs back"),
        // Leases need many workers: `agentchaos workers` scores them, never a trial here.
        Row::Capability(C::Lease) => (0, "lease takeovers"),
        Row::PowerLoss => (
            result.power_loss.as_ref().map_or(0, |p| p.judged()),
            "power-loss states recovered",
        ),
        Row::Outcome => (trials(|e| e.finished), "trials resumed to completion"),
    }
}

/// How many of an unclaimed row's fault probes ran ([`crate::campaign::probe::Probe::is_fault`]):
/// applied whatever the store claims, judged by what every store owes.
fn fault_probes(row: Row, result: &CampaignResult) -> usize {
    let Row::Capability(c) = row else { return 0 };
    count_probes(result, |p| p.probe.is_fault() && p.probe.capability() == c)
}

/// How many of a campaign's probes that were carried out `count` counts.
fn count_probes(result: &CampaignResult, count: impl Fn(&ProbeOutcome) -> bool) -> usize {
    result
        .scenarios
        .iter()
        .flat_map(|s| &s.probes)
        .filter(|p| p.error.is_none() && count(p))
        .count()
}

/// How many of a row's probes stopped short of the situation they test,
/// and the first one's reason: none when every probe of it was carried out.
fn not_reached(row: Row, result: &CampaignResult) -> Option<(usize, String)> {
    let Row::Capability(c) = row else { return None };
    let mut short = result
        .scenarios
        .iter()
        .flat_map(|s| s.probes.iter().map(move |p| (s, p)))
        .filter(|(_, p)| p.error.is_none() && p.skipped && p.probe.capability() == c);
    let (s, first) = short.next()?;
    let why = format!("in {} (probe {}): {}", s.name(), first.probe, first.told);
    Some((1 + short.count(), why))
}

/// Why a claimed row was not exercised.
fn why_not(row: Row, adapter: bool) -> &'static str {
    use Capability as C;
    match row {
        Row::Capability(C::DurableAppend) if adapter => {
            "no fault landed inside the store's own writes or syncs: through an adapter the crash points kill the store only between requests; the syscall nemesis (--nemesis points,syscall, Linux x86_64) reaches them"
        }
        Row::Capability(C::DurableAppend) => {
            "no fault landed inside the store's own writes or syncs (no crash trial at a store write, sync or syscall ran)"
        }
        Row::Capability(C::TornTailRepair) if adapter => {
            "no trial tore a write: through an adapter, tears need the syscall nemesis"
        }
        Row::Capability(C::TornTailRepair) => "no trial left a torn tail",
        Row::Capability(C::DamageRefusal) => {
            "no damage probe ran (no crash-free run, an empty store root, or another --shard runs the probes)"
        }
        Row::Capability(C::OrphanMarking) => {
            "no crash left an open run or a call without its result"
        }
        Row::Capability(C::EffectLedger) => {
            "no scenario commits a side effect, the store refused to replay its own events up to a commit (see the probe notes), or another --shard runs the probes"
        }
        Row::Capability(C::CheckpointProjection) => {
            "no recovery compared a projection and no snapshot was written"
        }
        Row::Capability(C::Branches) => "no scenario moves the leaf (leaf_moved) before a crash",
        Row::Capability(C::Compaction) => "no scenario compacts before a crash",
        Row::Capability(C::WriterLock) => {
            "no second-writer probe ran (no crash-free run, or another --shard runs the probes)"
        }
        Row::Capability(C::Blobs) => "no crash left a log that references a blob",
        Row::Capability(C::Lease) => {
            "leases need many workers: `agentchaos workers` pauses, kills and takes over lease holders (`--postgres` also crashes and partitions the database)"
        }
        Row::PowerLoss => {
            "the power-loss nemesis did not run or judged no state (not in --nemesis, another --shard runs it, or no ptrace on this platform)"
        }
        Row::Outcome => "no trial resumed to completion",
    }
}

/// The first cause of a row's violations, with the replay command of the
/// simplest trial that reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstViolation {
    pub scenario: String,
    /// The invariant's name (or the power-loss campaign's `opens-and-recovers`).
    pub invariant: String,
    /// One line: expected and found.
    pub line: String,
    pub replay: String,
    /// How many trials (or probes, or power-loss findings) reached it.
    pub trials: usize,
}

/// One row's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass {
        count: usize,
        unit: &'static str,
        /// Probes of the row that stopped short of their situation (not evidence).
        not_reached: usize,
    },
    Fail {
        violations: usize,
        /// Distinct causes of the violations ([`crate::report::causes`]).
        causes: usize,
        first: FirstViolation,
    },
    /// Not claimed: not scored. `violations` found against it anyway are
    /// still violations of the campaign; `fault_probes` of its faults ran
    /// all the same, judged by what every store owes.
    NotSupported {
        violations: usize,
        fault_probes: usize,
    },
    NotExercised {
        why: &'static str,
    },
    /// Claimed, and `probes` of its probes ran, but none reached the
    /// situation it tests: `why` is the first one's reason (what broke
    /// on the way is charged to its own promise).
    NotReached {
        probes: usize,
        why: String,
    },
}

impl Verdict {
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Pass { .. } => "pass",
            Verdict::Fail { .. } => "fail",
            Verdict::NotSupported { .. } => "not supported",
            Verdict::NotExercised { .. } => "not exercised",
            Verdict::NotReached { .. } => "not reached",
        }
    }
}

/// The scorecard of a campaign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scorecard {
    pub claimed: Vec<Capability>,
    pub rows: Vec<(Row, Verdict)>,
}

/// One violation as the scorecard counts it.
struct Found {
    row: Row,
    scenario: String,
    invariant: String,
    line: String,
    replay: String,
    /// Its cause ([`causes::key`]), with its scenario, as one string.
    cause: String,
    /// How simple the plan that found it is ([`causes::simplicity`]).
    rank: (usize, Plan),
}

fn one_line(v: &Violation) -> String {
    format!(
        "{}: expected {}; found {}",
        v.invariant, v.expected, v.found
    )
    .replace('\n', " ")
}

/// Scores `result`; `store_fault` and `store_args` go into replay commands.
pub fn score(
    result: &CampaignResult,
    store_fault: Option<&str>,
    store_args: &[String],
) -> Scorecard {
    let adapter = !store_args.is_empty();
    // Every violation with its row, scenario, invariant, line and replay command, in report order.
    let mut found: Vec<Found> = Vec::new();
    let mut add = |row: Row, scenario: &str, v: &Violation, replay: String, cause, rank| {
        found.push(Found {
            row,
            scenario: scenario.to_string(),
            invariant: v.invariant.name().to_string(),
            line: one_line(v),
            replay,
            cause: format!("{scenario}\n{cause:?}"),
            rank,
        });
    };
    for s in &result.scenarios {
        let path = &s.prepared.source.path;
        for v in &s.prepared.trace_violations {
            let crash_free = s.prepared.crash_free();
            let replay = replay_command(path, &crash_free, store_fault, store_args);
            let row = attribute(v, &Evidence::default(), &result.capabilities);
            let cause = causes::key(&crash_free, v, &s.prepared.trace_violations);
            let rank = causes::simplicity(&Plan::NONE);
            add(row, s.name(), v, replay, cause, rank);
        }
        for o in &s.outcomes {
            for v in &o.violations {
                let replay = replay_command(path, &o.plan, store_fault, store_args);
                add(
                    attribute(v, &o.evidence, &result.capabilities),
                    s.name(),
                    v,
                    replay,
                    causes::key(&o.plan, v, &o.violations),
                    causes::simplicity(&o.plan),
                );
            }
        }
        for p in &s.probes {
            for v in &p.violations {
                let replay = replay_command(path, &p.probe.plan(), store_fault, store_args);
                // A probe is evidence for one capability (the rules probe's
                // cases belong to the ledger, the tree or the compaction; a
                // fault on a store that does not claim it, to what every
                // store owes).
                // (a setup step's violation to the promise it broke:
                // `Probe::charged`).
                let row = Row::Capability(p.probe.charged(v, &result.capabilities));
                let cause = causes::probe_key(p, v);
                add(
                    row,
                    s.name(),
                    v,
                    replay,
                    cause,
                    causes::simplicity(&Plan::NONE),
                );
            }
        }
    }
    let store_flags = crate::campaign::config::store_flags(store_fault, store_args);
    for (sc, f, x) in result.power_loss_findings() {
        let id = crate::campaign::powercampaign::StateId {
            model: f.model,
            crash_after: f.crash_after,
            choice: f.choice.clone(),
        };
        // What a power loss loses (acknowledged events, referenced blobs,
        // a store that no longer opens) is the power row's; what recovery
        // then gets wrong belongs where it would in a crash trial.
        let row = match Invariant::from_name(&x.check).map(row_of) {
            Some(Row::Capability(Capability::DurableAppend | Capability::Blobs)) | None => {
                Row::PowerLoss
            }
            Some(other) => other,
        };
        let replay =
            crate::campaign::powercampaign::replay_command(&sc.source.path, &store_flags, &id);
        found.push(Found {
            row,
            scenario: sc.source.scenario.name.to_string(),
            invariant: x.check.clone(),
            line: format!(
                "{} (model {}): expected {}; found {}",
                x.check, f.model, x.expected, x.found
            )
            .replace('\n', " "),
            // Each power-loss finding is the first of its invariant in its
            // scenario: a cause of its own.
            cause: replay.clone(),
            replay,
            rank: causes::simplicity(&Plan::NONE),
        });
    }
    let rows = Row::all()
        .into_iter()
        .map(|row| {
            let mine: Vec<_> = found.iter().filter(|f| f.row == row).collect();
            let claimed = row.claim().is_none_or(|c| result.capabilities.contains(&c));
            let verdict = if !claimed {
                Verdict::NotSupported {
                    violations: mine.len(),
                    fault_probes: fault_probes(row, result),
                }
            } else if let Some(first) = mine.first() {
                // The first cause, shown by the simplest trial that reached it.
                let reached: Vec<&&Found> =
                    mine.iter().filter(|f| f.cause == first.cause).collect();
                let simplest = reached
                    .iter()
                    .min_by_key(|f| f.rank)
                    .expect("the first violation reached its cause");
                let distinct: std::collections::HashSet<&str> =
                    mine.iter().map(|f| f.cause.as_str()).collect();
                Verdict::Fail {
                    violations: mine.len(),
                    causes: distinct.len(),
                    first: FirstViolation {
                        scenario: simplest.scenario.clone(),
                        invariant: simplest.invariant.clone(),
                        line: simplest.line.clone(),
                        replay: simplest.replay.clone(),
                        trials: reached.len(),
                    },
                }
            } else {
                match (exercised(row, result), not_reached(row, result)) {
                    ((0, _), Some((probes, why))) => Verdict::NotReached { probes, why },
                    ((0, _), None) => Verdict::NotExercised {
                        why: why_not(row, adapter),
                    },
                    ((count, unit), short) => Verdict::Pass {
                        count,
                        unit,
                        not_reached: short.map_or(0, |(n, _)| n),
                    },
                }
            };
            (row, verdict)
        })
        .collect();
    Scorecard {
        claimed: result.capabilities.clone(),
        rows,
    }
}

/// The scorecard for the terminal.
pub fn text(card: &Scorecard) -> String {
    let mut out = format!(
        "scorecard ({} of {} capabilities claimed):\n",
        card.claimed.len(),
        Capability::ALL.len()
    );
    for (row, verdict) in &card.rows {
        let mut detail = verdict.detail();
        if let Verdict::Fail { first, .. } = verdict {
            let _ = write!(detail, "\n{:>27}replay:   {}", "", first.replay);
        }
        let _ = writeln!(
            out,
            "  {:<23}  {:<13}  {detail}",
            row.name(),
            verdict.word()
        );
    }
    out
}

impl Verdict {
    /// The row's detail on one line (a failing row's replay command aside).
    pub fn detail(&self) -> String {
        match self {
            Verdict::Pass {
                count,
                unit,
                not_reached: 0,
            } => format!("{count} {unit}"),
            Verdict::Pass {
                count,
                unit,
                not_reached,
            } => format!(
                "{count} {unit}; {not_reached} more probe(s) did not reach the situation they test (not evidence)"
            ),
            Verdict::Fail {
                violations,
                causes,
                first,
            } => format!(
                "{causes} distinct cause(s) of {violations} violation(s); first in {}{}: {}",
                first.scenario,
                if first.trials > 1 {
                    format!(" (reached by {} trials)", first.trials)
                } else {
                    String::new()
                },
                first.line
            ),
            Verdict::NotSupported {
                violations: 0,
                fault_probes: 0,
            } => "the store does not claim it: not checked, not passed".to_string(),
            Verdict::NotSupported {
                violations: 0,
                fault_probes,
            } => format!(
                "the store does not claim it: not scored; its {fault_probes} fault probe(s) ran all the same, judged under durable_append"
            ),
            Verdict::NotSupported { violations, .. } => format!(
                "the store does not claim it: not scored ({violations} violation(s) of its invariants found anyway)"
            ),
            Verdict::NotExercised { why } => (*why).to_string(),
            Verdict::NotReached { probes, why } => format!(
                "{probes} probe(s) ran, none reached the situation it tests; the first {why}"
            ),
        }
    }
}

/// The scorecard as JSON: one object per row.
pub fn json(card: &Scorecard) -> Value {
    let rows: Vec<Value> = card
        .rows
        .iter()
        .map(|(row, verdict)| {
            let mut o = json!({
                "capability": row.key(),
                "claimed": !matches!(verdict, Verdict::NotSupported { .. }),
                "verdict": verdict.word(),
            });
            match verdict {
                Verdict::Pass {
                    count,
                    unit,
                    not_reached,
                } => {
                    o["evidence"] = json!(count);
                    o["evidence_unit"] = json!(unit);
                    if *not_reached > 0 {
                        o["probes_not_reached"] = json!(not_reached);
                    }
                }
                Verdict::Fail {
                    violations,
                    causes,
                    first,
                } => {
                    o["causes"] = json!(causes);
                    o["violations"] = json!(violations);
                    o["first_violation"] = json!({
                        "scenario": first.scenario,
                        "invariant": first.invariant,
                        "line": first.line,
                        "replay": first.replay,
                        "trials": first.trials,
                    });
                }
                Verdict::NotSupported {
                    violations,
                    fault_probes,
                } => {
                    o["violations"] = json!(violations);
                    if *fault_probes > 0 {
                        o["evidence"] = json!(fault_probes);
                        o["evidence_unit"] = json!("fault probes judged under durable_append");
                    }
                }
                Verdict::NotExercised { why } => o["why"] = json!(why),
                Verdict::NotReached { probes, why } => {
                    o["why"] = json!(why);
                    o["probes_not_reached"] = json!(probes);
                }
            }
            o
        })
        .collect();
    Value::Array(rows)
}

/// The scorecard as one JUnit test suite: fail is a failure, not
/// supported and not exercised are skipped.
pub fn junit(card: &Scorecard) -> quick_junit::TestSuite {
    use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus, TestSuite};
    let mut suite = TestSuite::new("scorecard");
    for (row, verdict) in &card.rows {
        let status = match verdict {
            Verdict::Pass { .. } => TestCaseStatus::success(),
            Verdict::Fail {
                violations,
                causes,
                first,
            } => {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                st.set_message(format!(
                    "{causes} distinct cause(s) of {violations} violation(s)"
                ));
                st.set_description(format!("{}\nreplay: {}", first.line, first.replay));
                st
            }
            Verdict::NotExercised { why } => {
                let mut st = TestCaseStatus::skipped();
                st.set_message(format!("not exercised: {why}"));
                st
            }
            Verdict::NotReached { why, .. } => {
                let mut st = TestCaseStatus::skipped();
                st.set_message(format!("not reached: {why}"));
                st
            }
            Verdict::NotSupported { .. } => {
                let mut st = TestCaseStatus::skipped();
                st.set_message("not supported: the store does not claim it");
                st
            }
        };
        let mut case = TestCase::new(row.name(), status);
        case.set_classname("agentchaos.scorecard");
        suite.add_test_case(case);
    }
    suite
}

#[cfg(test)]
mod tests {
    use super::*;

    fn violation(invariant: Invariant, found: &str) -> Violation {
        Violation {
            invariant,
            when: "w".into(),
            expected: "e".into(),
            found: found.into(),
            events: vec![],
        }
    }

    #[test]
    fn every_invariant_has_a_row_and_every_capability_is_evidenced() {
        let rows: Vec<Row> = Invariant::ALL.into_iter().map(row_of).collect();
        for c in Capability::ALL {
            // Torn tails, branches and compaction are reached by attribute's
            // refinements; leases by the many-workers campaign's own checks.
            let refined = [
                Capability::TornTailRepair,
                Capability::Branches,
                Capability::Compaction,
                Capability::Lease,
            ];
            assert!(
                rows.contains(&Row::Capability(c)) || refined.contains(&c),
                "{c} has no invariant"
            );
        }
    }

    #[test]
    fn refinements_follow_the_trial() {
        let torn = Evidence {
            torn_tail: true,
            ..Evidence::default()
        };
        let mut fused = violation(Invariant::LogPrefix, "damage: line 7 ...");
        assert_eq!(
            attribute(&fused, &torn, &Capability::ALL),
            Row::Capability(Capability::TornTailRepair)
        );
        assert_eq!(
            attribute(&fused, &Evidence::default(), &Capability::ALL),
            Row::Capability(Capability::DurableAppend)
        );
        fused.found = "seq 5 tool_call was rewritten".into();
        assert_eq!(
            attribute(&fused, &torn, &Capability::ALL),
            Row::Capability(Capability::DurableAppend)
        );
        let cp = violation(
            Invariant::CheckpointProjection,
            "they differ at projection.branch",
        );
        let moved = Evidence {
            leaf_differs: true,
            compaction: true,
            ..Evidence::default()
        };
        assert_eq!(
            attribute(&cp, &moved, &Capability::ALL),
            Row::Capability(Capability::Branches)
        );
        let windowed = Evidence {
            window_differs: true,
            compaction: true,
            ..Evidence::default()
        };
        assert_eq!(
            attribute(&cp, &windowed, &Capability::ALL),
            Row::Capability(Capability::Compaction)
        );
        // The context: another branch when the leaf moved, else the window.
        let ctx = violation(Invariant::ContextWindow, "it shows it");
        assert_eq!(
            attribute(&ctx, &moved, &Capability::ALL),
            Row::Capability(Capability::Branches)
        );
        assert_eq!(
            attribute(&ctx, &windowed, &Capability::ALL),
            Row::Capability(Capability::Compaction)
        );
        assert_eq!(
            attribute(&cp, &Evidence::default(), &Capability::ALL),
            Row::Capability(Capability::CheckpointProjection)
        );
    }

    #[test]
    fn every_verdict_renders_in_text_json_and_junit() {
        let card = Scorecard {
            claimed: vec![
                Capability::DurableAppend,
                Capability::EffectLedger,
                Capability::Compaction,
            ],
            rows: vec![
                (
                    Row::Capability(Capability::DurableAppend),
                    Verdict::Pass {
                        count: 7,
                        unit: "crash trials",
                        not_reached: 0,
                    },
                ),
                (
                    Row::Capability(Capability::EffectLedger),
                    Verdict::Fail {
                        violations: 3,
                        causes: 2,
                        first: FirstViolation {
                            scenario: "small".into(),
                            invariant: Invariant::LedgerRefusesDoubleCommit.name().into(),
                            line: "expected <refusal>; found accepted".into(),
                            replay: "agentchaos replay --plan probe:ledger@op".into(),
                            trials: 2,
                        },
                    },
                ),
                (
                    Row::Capability(Capability::DamageRefusal),
                    Verdict::NotSupported {
                        violations: 0,
                        fault_probes: 0,
                    },
                ),
                (
                    Row::Capability(Capability::Compaction),
                    Verdict::NotExercised {
                        why: "no scenario compacts before a crash",
                    },
                ),
                (
                    Row::Capability(Capability::TornTailRepair),
                    Verdict::NotSupported {
                        violations: 0,
                        fault_probes: 8,
                    },
                ),
                (
                    Row::Capability(Capability::Branches),
                    Verdict::NotReached {
                        probes: 1,
                        why: "in small (probe rule-parent-missing@op): the session lost the 4 event(s)".into(),
                    },
                ),
            ],
        };
        let t = text(&card);
        assert!(
            t.contains(
                "not scored; its 8 fault probe(s) ran all the same, judged under durable_append"
            ),
            "{t}"
        );
        assert!(
            t.contains("scorecard (3 of 11 capabilities claimed)"),
            "{t}"
        );
        assert!(
            t.contains("durable_append           pass           7 crash trials"),
            "{t}"
        );
        assert!(
            t.contains("replay:   agentchaos replay --plan probe:ledger@op"),
            "{t}"
        );
        assert!(
            t.contains("not supported  the store does not claim it"),
            "{t}"
        );
        assert!(
            t.contains("fail           2 distinct cause(s) of 3 violation(s); first in small (reached by 2 trials): expected <refusal>"),
            "{t}"
        );
        assert!(
            t.contains("branches                 not reached    1 probe(s) ran, none reached the situation it tests; the first in small (probe rule-parent-missing@op)"),
            "{t}"
        );
        let j = json(&card);
        assert_eq!(j[5]["verdict"], "not reached");
        assert_eq!(j[5]["probes_not_reached"], 1);
        assert!(j[5]["why"]
            .as_str()
            .unwrap()
            .contains("lost the 4 event(s)"));
        assert_eq!(j[1]["verdict"], "fail");
        assert_eq!(j[1]["causes"], 2);
        assert_eq!(j[1]["violations"], 3);
        assert_eq!(j[1]["first_violation"]["trials"], 2);
        assert_eq!(
            j[1]["first_violation"]["invariant"],
            "ledger-refuses-double-commit"
        );
        assert_eq!(j[2]["claimed"], false);
        assert_eq!(j[3]["why"], "no scenario compacts before a crash");
        assert_eq!(j[4]["evidence"], 8);
        assert!(j[2].get("evidence").is_none());
        let mut report = quick_junit::Report::new("t");
        report.add_test_suite(junit(&card));
        let x = report.to_string().unwrap();
        assert!(
            x.contains("tests=\"6\"")
                && x.contains("failures=\"1\"")
                && x.contains("skipped=\"4\""),
            "{x}"
        );
        assert!(x.contains("not reached: in small"), "{x}");
        assert!(
            x.contains("expected &lt;refusal&gt;; found accepted"),
            "{x}"
        );
        assert_eq!(x.matches("<skipped").count(), 4, "{x}");
    }

    fn naming(invariant: Invariant, events: &[&str]) -> Violation {
        Violation {
            events: events.iter().map(|e| e.to_string()).collect(),
            ..violation(invariant, "f")
        }
    }

    /// A context that leaves out a message in a trial whose log holds no
    /// compaction and no leaf move (a store that renders it from a stale
    /// run record) is no compaction's failure: a derived view disagrees
    /// with the log, `checkpoint_projection`'s, claimed or not. One that
    /// leaves out the summary names the compaction.
    #[test]
    fn the_context_window_is_scored_under_the_events_it_found_wrong() {
        let all = &Capability::ALL;
        let message = naming(Invariant::ContextWindow, &["seq 5 assistant_message"]);
        let plain = Evidence::default();
        assert_eq!(
            attribute(&message, &plain, all),
            Row::Capability(Capability::CheckpointProjection)
        );
        let compacted = Evidence {
            log_compaction: true,
            ..Evidence::default()
        };
        assert_eq!(
            attribute(&message, &compacted, all),
            Row::Capability(Capability::Compaction)
        );
        let branched = Evidence {
            log_leaf_moved: true,
            ..Evidence::default()
        };
        assert_eq!(
            attribute(&message, &branched, all),
            Row::Capability(Capability::Branches)
        );
        let summary = naming(Invariant::ContextWindow, &["seq 9 compaction"]);
        assert_eq!(
            attribute(&summary, &plain, all),
            Row::Capability(Capability::Compaction)
        );
        // Unclaimed, still not compaction's (and not scored).
        assert_eq!(
            attribute(&message, &plain, &[Capability::Compaction]),
            Row::Capability(Capability::CheckpointProjection)
        );
        assert_eq!(
            attribute(&message, &compacted, &[Capability::DurableAppend]),
            row_of(Invariant::ContextWindow)
        );
    }

    /// A second recovery that finds the session's records gone is
    /// durable_append's; one that marks again is orphan_marking's.
    #[test]
    fn recovery_idempotence_is_scored_under_the_events_it_found_wrong() {
        let all = &Capability::ALL;
        let e = Evidence::default();
        let lost = naming(
            Invariant::RecoveryIdempotent,
            &[
                "seq 0 session_created",
                "seq 1 run_started r",
                "seq 2 run_interrupted r",
            ],
        );
        assert_eq!(
            attribute(&lost, &e, all),
            Row::Capability(Capability::DurableAppend)
        );
        let lost_marks = naming(Invariant::RecoveryIdempotent, &["seq 2 run_interrupted r"]);
        let marked_twice = naming(
            Invariant::RecoveryIdempotent,
            &["seq 3 tool_recovery c phase started"],
        );
        let miscounted = naming(Invariant::RecoveryIdempotent, &[]);
        for v in [lost_marks, marked_twice, miscounted] {
            assert_eq!(
                attribute(&v, &e, all),
                Row::Capability(Capability::OrphanMarking),
                "{v:?}"
            );
        }
        let quarantined = naming(Invariant::RecoveryIdempotent, &["seq 7 tail_quarantined"]);
        assert_eq!(
            attribute(&quarantined, &e, all),
            Row::Capability(Capability::TornTailRepair)
        );
    }

    #[test]
    fn an_unclaimed_refinement_falls_to_the_row_every_store_owes() {
        let torn = Evidence {
            torn_tail: true,
            ..Evidence::default()
        };
        let fused = violation(Invariant::LogPrefix, "damage: line 7 ...");
        let no_tears: Vec<Capability> = Capability::ALL
            .into_iter()
            .filter(|c| *c != Capability::TornTailRepair)
            .collect();
        assert_eq!(
            attribute(&fused, &torn, &no_tears),
            Row::Capability(Capability::DurableAppend)
        );
        let cp = violation(
            Invariant::CheckpointProjection,
            "they differ at projection.branch",
        );
        let moved = Evidence {
            leaf_differs: true,
            ..Evidence::default()
        };
        assert_eq!(
            attribute(&cp, &moved, &[Capability::CheckpointProjection]),
            Row::Capability(Capability::CheckpointProjection)
        );
    }
}
