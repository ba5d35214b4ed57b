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
