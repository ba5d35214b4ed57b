//! What each recovery must do and report, judged after the first recovery
//! of a life: orphans marked once with their phase and reported
//! (orphan-marked-uncertain), the open run closed (runs-closed), the
//! context it serves (context-window), the projection it resumed
//! (checkpoint-projection), a true `appended` and a second recovery that
//! changes nothing (recovery-idempotent). What was open at the crash comes
//! from the harness's model of the log before recovery, never from the
//! store.

use agentchaos_protocol::event::{Event, Record};

use crate::check::{events, first_diff, tail, v, Invariant, Violation};
use crate::history::{History, Life, RecoveryReport};
use crate::model::oracle::{self, Shown};
use crate::model::{call_of, describe_record, phase_name, Model};
use crate::store::Observation;

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
pub(super) fn recovery(h: &History, i: usize, life: &Life, out: &mut Vec<Violation>) {
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
    // A log that lost records across the recovery (a lost session row)
    // grew by nothing: the lost ones are what the finding is about.
    let lost = lost_records(&f.base.records, &f.after.records);
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
        let found = format!("it says it appended {claimed}");
        let (found, events) = if lost.is_empty() {
            (found, f.region.iter().map(describe_record).collect())
        } else {
            (
                format!(
                    "{found}; {} of the records the log held at the crash are gone after it",
                    lost.len()
                ),
                lost,
            )
        };
        out.push(v(
            Invariant::RecoveryIdempotent,
            &f.when,
            format!(
                "the recovery's `appended` to count what it appended: from {low} (its run_interrupted and tool_recovery events) to {grown} (all the log grew by since the crash)"
            ),
            found,
            events,
        ));
    }
}

/// The records of `before` that `after`, a later observation of the same
/// log, no longer holds at their seq with the same content (timestamps
/// aside), described: a recovery only appends.
fn lost_records(before: &[Record], after: &[Record]) -> Vec<String> {
    before
        .iter()
        .filter(|r| {
            after
                .iter()
                .find(|a| a.seq == r.seq)
                .is_none_or(|a| a.body != r.body)
        })
        .map(describe_record)
        .collect()
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
            // What the second recovery appended, or, when it lost records
            // of the first's log (a lost session row), those.
            let lost = lost_records(&after.records, &b.records);
            let size = |o: &Observation| match o.bytes {
                Some(x) => format!("{} bytes ({})", x.len, events(o.records.len())),
                None => events(o.records.len()),
            };
            let found = format!(
                "the store says it appended {again}; the log has {}",
                size(b)
            );
            let (found, extra) = if lost.is_empty() {
                let extra = b
                    .records
                    .get(after.records.len()..)
                    .unwrap_or_default()
                    .iter()
                    .map(describe_record)
                    .collect();
                (found, extra)
            } else {
                (
                    format!(
                        "{found}, without {} of the records the first recovery left",
                        lost.len()
                    ),
                    lost,
                )
            };
            out.push(v(
                Invariant::RecoveryIdempotent,
                &format!("after the second recovery in life {i}"),
                format!("nothing appended: the log stays at {}", size(after)),
                found,
                extra,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check;
    use crate::check::fixture::history;

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

    /// A second recovery that finds the session's row gone (a database
    /// store that lost it) is no double mark: the finding names the lost
    /// records, so the scorecard charges it to the promise whose events
    /// they are; one that marks again names the marks.
    #[test]
    fn recovery_idempotent_names_the_records_a_lost_session_lost() {
        let idempotence = |h: &History| -> Vec<Violation> {
            check(h, None)
                .into_iter()
                .filter(|v| v.invariant == Invariant::RecoveryIdempotent)
                .collect()
        };
        let mut h = history(true);
        h.lives[1].after_second_recovery = Some(crate::check::fixture::obs(&[]));
        let found = idempotence(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].found.contains("without 3 of the records"),
            "{}",
            found[0].found
        );
        assert_eq!(
            found[0].events,
            [
                "seq 0 session_created",
                "seq 1 run_started r",
                "seq 2 run_interrupted r"
            ]
        );
        let mut twice = history(true);
        twice.lives[1].recovered_again = Some(1);
        let mut marked = twice.lives[1].after_recovery.clone().unwrap();
        let again = crate::check::fixture::obs(&[Event::RunInterrupted { run_id: "r".into() }]);
        marked.records.push(Record {
            seq: 3,
            ..again.records[0].clone()
        });
        twice.lives[1].after_second_recovery = Some(marked);
        let found = idempotence(&twice);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].events, ["seq 3 run_interrupted r"]);
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
}
