//! Violations grouped by cause. A double crash repeats what its first
//! crash left: `kill@5+kill@0`, `kill@5+kill@1`, … each report the loss
//! that `kill@5` alone reports, seen at the same observation after life 0.
//! A violation's cause is its invariant, the crashes that came before the
//! observation it was made at (the plan up to that life; for what the end
//! of the trial shows, up to the first life after which the trial found
//! anything wrong, the whole plan if nothing was; a probe's own plan, or
//! for what a probe's setup broke, that setup) and what was expected and
//! found there: the missing, changed or doubled events. The
//! report and the scorecard show each cause once, with how many trials
//! reached it and the replay of the simplest of them (the fewest crashed
//! lives, then the first plan in order), and the raw counts after. This
//! module groups; it must never judge anything.

use std::collections::HashMap;

use crate::campaign::probe::ProbeOutcome;
use crate::campaign::runner::ScenarioResult;
use crate::check::{Invariant, Violation};
use crate::nemesis::Plan;

/// What makes two violations one cause.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CauseKey {
    pub invariant: Invariant,
    /// The crashes before the observation (`kill@5`), or the probe.
    pub origin: String,
    pub when: String,
    pub expected: String,
    pub found: String,
}

/// How many lives' crashes came before the observation `when` names: the
/// lives before a recovery in life N ("after the first recovery in life
/// 1": 1), up to and including life N after it ended ("after life 0 was
/// killed", "in life 0, after the injected error": 1); none for one that
/// names no life (the end of the trial).
fn lives_before(when: &str) -> Option<usize> {
    let n = when
        .split_once("life ")
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok())?;
    Some(if when.contains("recovery in life ") {
        n
    } else {
        n + 1
    })
}

/// The crashes of `plan` that came before the observation `when` names
/// (`lives_before`). At the end of the trial, those up to the first life
/// after which `trial` (all the trial's violations) found anything wrong:
/// a double crash's end repeats what its first crash left, as its
/// observation after life 0 does; the whole plan when nothing was found
/// before the end.
pub fn origin(plan: &Plan, when: &str, trial: &[Violation]) -> Plan {
    match lives_before(when) {
        Some(n) => plan.prefix(n),
        None => trial
            .iter()
            .filter_map(|v| lives_before(&v.when))
            .min()
            .map_or(*plan, |n| plan.prefix(n)),
    }
}

/// The cause of violation `v` found by a trial of `plan` that found `trial`.
pub fn key(plan: &Plan, v: &Violation, trial: &[Violation]) -> CauseKey {
    keyed(origin(plan, &v.when, trial).to_string(), v)
}

/// The cause of violation `v` found by probe `p`: the probe's own plan, or
/// for what its setup broke before it reached its situation (a session
/// that lost what the store acknowledged in it), that setup: every probe
/// whose setup lost the same events is one cause.
pub fn probe_key(p: &ProbeOutcome, v: &Violation) -> CauseKey {
    if p.skipped {
        keyed(PROBE_SETUP.to_string(), v)
    } else {
        keyed(p.probe.plan(), v)
    }
}

/// The origin of what a probe's setup broke.
pub const PROBE_SETUP: &str = "a probe's setup";

fn keyed(origin: String, v: &Violation) -> CauseKey {
    CauseKey {
        invariant: v.invariant,
        origin,
        when: v.when.clone(),
        expected: v.expected.clone(),
        found: v.found.clone(),
    }
}

/// How simple a plan is: the fewest crashed lives first, then plan order.
pub fn simplicity(plan: &Plan) -> (usize, Plan) {
    (plan.crashed_lives(), *plan)
}

/// One cause of a scenario's violations.
#[derive(Debug, Clone)]
pub struct Cause<'a> {
    pub key: CauseKey,
    /// The simplest plan that reached it (a probe's plan for a probe's),
    /// its crash point and its violation: the one to replay.
    pub plan: String,
    pub crash_point: String,
    pub violation: &'a Violation,
    /// How many trials (or probes) reached it.
    pub trials: usize,
    rank: (usize, Plan),
    /// A probe's cause (its plan is no trial plan).
    probe: bool,
}

impl Cause<'_> {
    /// The simplest trial plan that reached it; none for a probe's cause.
    pub fn trial_plan(&self) -> Option<Plan> {
        (!self.probe).then_some(self.rank.1)
    }
}

/// A scenario's violations by cause.
#[derive(Debug, Clone)]
pub struct Causes<'a> {
    /// In the order their first violation appears in the report.
    pub causes: Vec<Cause<'a>>,
    /// The cause of each violation, in the order of
    /// [`ScenarioResult::violations`] then [`ScenarioResult::probe_violations`].
    pub of: Vec<usize>,
}

impl Causes<'_> {
    /// Where shrinking starts: the first cause that a deterministic trial
    /// plan reached, with the simplest such plan and its invariant.
    pub fn to_shrink(&self) -> Option<(Plan, Invariant)> {
        self.causes.iter().find_map(|c| {
            let plan = c.trial_plan().filter(Plan::deterministic)?;
            Some((plan, c.key.invariant))
        })
    }

    /// The causes of `invariant`'s violations, and how many violations they are.
    pub fn of_invariant(&self, invariant: Invariant) -> (Vec<&Cause<'_>>, usize) {
        let causes: Vec<&Cause<'_>> = self
            .causes
            .iter()
            .filter(|c| c.key.invariant == invariant)
            .collect();
        let violations = causes.iter().map(|c| c.trials).sum();
        (causes, violations)
    }
}

/// Groups a scenario's trial and probe violations by cause.
pub fn of_scenario(s: &ScenarioResult) -> Causes<'_> {
    let mut causes: Vec<Cause<'_>> = Vec::new();
    let mut of = Vec::new();
    let mut index: HashMap<CauseKey, usize> = HashMap::new();
    let mut add = |key: CauseKey, plan: String, crash: String, v, rank: Option<(usize, Plan)>| {
        // A probe's cause has no trial plan: it ranks as the crash-free run.
        let probe = rank.is_none();
        let rank = rank.unwrap_or_else(|| simplicity(&Plan::NONE));
        let i = *index.entry(key.clone()).or_insert_with(|| {
            causes.push(Cause {
                key,
                plan: plan.clone(),
                crash_point: crash.clone(),
                violation: v,
                trials: 0,
                rank,
                probe,
            });
            causes.len() - 1
        });
        let c = &mut causes[i];
        c.trials += 1;
        if rank < c.rank {
            (c.plan, c.crash_point, c.violation, c.rank) = (plan, crash, v, rank);
        }
        of.push(i);
    };
    // In the order of `ScenarioResult::violations`, then `probe_violations`.
    let trace = &s.prepared.trace_violations;
    let trials = s
        .outcomes
        .iter()
        .map(|o| (o.plan, o.crash_point.as_str(), &o.violations[..]));
    for (plan, crash, found) in [(
        s.prepared.crash_free(),
        "none (the crash-free run)",
        &trace[..],
    )]
    .into_iter()
    .chain(trials)
    {
        for v in found {
            add(
                key(&plan, v, found),
                plan.to_string(),
                crash.to_string(),
                v,
                Some(simplicity(&plan)),
            );
        }
    }
    for p in &s.probes {
        for v in &p.violations {
            add(
                probe_key(p, v),
                p.probe.plan(),
                p.probe.crash_point(),
                v,
                None,
            );
        }
    }
    Causes { causes, of }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::Crash;

    fn violation(when: &str) -> Violation {
        Violation {
            invariant: Invariant::AckedDurable,
            when: when.into(),
            expected: "all 6 acknowledged events in the log at their seqs".into(),
            found: "6 of them missing or changed".into(),
            events: vec![],
        }
    }

    /// A double crash's loss seen after life 0 is its first crash's: one
    /// cause with the single crash; seen after life 1, the second crash is
    /// part of it; at the end, it is only when nothing was seen before.
    #[test]
    fn a_double_crash_repeats_its_first_crash_cause() {
        let single = Plan::kill(5);
        let double = |at| single.then(Crash::Kill { at });
        let after0 = violation("after life 0 was killed, before recovery");
        assert_eq!(key(&double(0), &after0, &[]), key(&single, &after0, &[]));
        assert_eq!(
            key(&double(0), &after0, &[]),
            key(&double(33), &after0, &[])
        );
        assert_eq!(key(&single, &after0, &[]).origin, "kill@5");
        let recovered = violation("after the first recovery in life 1");
        assert_eq!(
            key(&double(7), &recovered, &[]),
            key(&single, &recovered, &[])
        );
        let after1 = violation("after life 1 was killed, before recovery");
        assert_ne!(key(&double(0), &after1, &[]), key(&double(1), &after1, &[]));
        assert_eq!(key(&double(1), &after1, &[]).origin, "kill@5+kill@1");
        // At the end of the trial: the whole plan when nothing was found
        // before the end; up to the first life after which the trial found
        // anything when something was (the first crash's loss, repeated).
        let end = violation("at the end of the trial");
        assert_ne!(key(&double(0), &end, &[]), key(&double(1), &end, &[]));
        assert_eq!(key(&double(1), &end, &[]).origin, "kill@5+kill@1");
        let lost = [after0.clone(), end.clone()];
        assert_eq!(key(&double(0), &end, &lost), key(&double(33), &end, &lost));
        assert_eq!(key(&double(0), &end, &lost).origin, "kill@5");
        let lost_later = [after1.clone(), end.clone()];
        assert_eq!(
            key(&double(1), &end, &lost_later).origin,
            "kill@5+kill@1",
            "found only after life 1: both crashes"
        );
        let sys = violation("in life 0, after the injected error");
        assert_eq!(key(&double(2), &sys, &[]).origin, "kill@5");
        // Another first crash, or another finding, is another cause.
        assert_ne!(
            key(&Plan::kill(6), &after0, &[]),
            key(&single, &after0, &[])
        );
        let mut other = after0.clone();
        other.found = "1 of them missing or changed".into();
        assert_ne!(key(&single, &other, &[]), key(&single, &after0, &[]));
    }

    /// Two probes whose setup lost the same acknowledged events are one
    /// cause (their setup's); a probe's own finding is its own.
    #[test]
    fn a_probe_setups_loss_is_one_cause_whichever_probe_met_it() {
        use crate::campaign::probe::{Probe, ProbeOutcome, RuleCase};
        let lost = Violation {
            invariant: Invariant::AckedDurable,
            when: "after the crash-free run, in a fresh session a probe replayed its events into"
                .into(),
            expected: "the 4 event(s) the store acknowledged in that session served when the session was opened again".into(),
            found: "open refused with `not_found`: no session".into(),
            events: vec![],
        };
        let probe = |case, skipped| ProbeOutcome {
            probe: Probe::Rule {
                case,
                operation: "op".into(),
            },
            told: String::new(),
            violations: vec![lost.clone()],
            error: None,
            skipped,
        };
        let a = probe(RuleCase::NoOperationId, true);
        let b = probe(RuleCase::ParentMissing, true);
        assert_eq!(probe_key(&a, &lost), probe_key(&b, &lost));
        assert_eq!(probe_key(&a, &lost).origin, PROBE_SETUP);
        let reached = probe(RuleCase::NoOperationId, false);
        assert_eq!(probe_key(&reached, &lost).origin, reached.probe.plan());
    }

    /// Shrinking starts from the simplest plan of the first cause a
    /// deterministic trial reached: not from a probe's, not from a timer's.
    #[test]
    fn shrinking_starts_from_the_simplest_plan_of_the_first_trial_cause() {
        let v = violation("after life 0 was killed, before recovery");
        let cause = |plan: Plan, probe| Cause {
            key: key(&plan, &v, &[]),
            plan: plan.to_string(),
            crash_point: String::new(),
            violation: &v,
            trials: 2,
            rank: simplicity(&plan),
            probe,
        };
        let timer = Plan::first(Crash::Timer { micros: 5_000 });
        let simplest = Plan::kill(5);
        let causes = Causes {
            causes: vec![
                cause(Plan::NONE, true),
                cause(timer, false),
                cause(simplest, false),
            ],
            of: vec![],
        };
        assert_eq!(
            causes.to_shrink(),
            Some((simplest, Invariant::AckedDurable))
        );
        assert_eq!(causes.causes[0].trial_plan(), None);
    }

    #[test]
    fn the_simplest_plan_has_the_fewest_crashed_lives() {
        let double = Plan::kill(1).then(Crash::Kill { at: 0 });
        assert!(simplicity(&Plan::kill(9)) < simplicity(&double));
        assert!(simplicity(&Plan::kill(5)) < simplicity(&Plan::kill(9)));
    }
}
