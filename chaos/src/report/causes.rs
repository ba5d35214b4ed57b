//! Violations grouped by cause. A double crash repeats what its first
//! crash left: `kill@5+kill@0`, `kill@5+kill@1`, … each report the loss
//! that `kill@5` alone reports, seen at the same observation after life 0.
//! A violation's cause is its invariant, the crashes that came before the
//! observation it was made at (the plan up to that life; the whole plan
//! for what the end of the trial shows; a probe's own plan) and what was
//! expected and found there: the missing, changed or doubled events. The
//! report and the scorecard show each cause once, with how many trials
//! reached it and the replay of the simplest of them (the fewest crashed
//! lives, then the first plan in order), and the raw counts after. This
//! module groups; it must never judge anything.

use std::collections::HashMap;

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

/// The crashes of `plan` that came before the observation `when` names:
/// those of the lives before a recovery in life N ("after the first
/// recovery in life 1": life 0's), up to and including life N's after
/// it ended ("after life 0 was killed", "in life 0, after the injected
/// error"), all of them at the end of the trial.
pub fn origin(plan: &Plan, when: &str) -> Plan {
    let life = when
        .split_once("life ")
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok());
    match life {
        None => *plan,
        Some(n) if when.contains("recovery in life ") => plan.prefix(n),
        Some(n) => plan.prefix(n + 1),
    }
}

/// The cause of violation `v` found by a trial of `plan`.
pub fn key(plan: &Plan, v: &Violation) -> CauseKey {
    keyed(origin(plan, &v.when).to_string(), v)
}

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
    let mut add = |key: CauseKey, plan: String, crash: String, v, rank: (usize, Plan)| {
        let i = *index.entry(key.clone()).or_insert_with(|| {
            causes.push(Cause {
                key,
                plan: plan.clone(),
                crash_point: crash.clone(),
                violation: v,
                trials: 0,
                rank,
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
    for (plan, crash, v) in s.violations() {
        add(
            key(&plan, v),
            plan.to_string(),
            crash.to_string(),
            v,
            simplicity(&plan),
        );
    }
    for (p, v) in s.probe_violations() {
        add(
            keyed(p.plan(), v),
            p.plan(),
            p.crash_point(),
            v,
            simplicity(&Plan::NONE),
        );
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
    /// cause with the single crash; seen after life 1 or at the end, the
    /// second crash is part of it.
    #[test]
    fn a_double_crash_repeats_its_first_crash_cause() {
        let single = Plan::kill(5);
        let double = |at| single.then(Crash::Kill { at });
        let after0 = violation("after life 0 was killed, before recovery");
        assert_eq!(key(&double(0), &after0), key(&single, &after0));
        assert_eq!(key(&double(0), &after0), key(&double(33), &after0));
        assert_eq!(key(&single, &after0).origin, "kill@5");
        let recovered = violation("after the first recovery in life 1");
        assert_eq!(key(&double(7), &recovered), key(&single, &recovered));
        let after1 = violation("after life 1 was killed, before recovery");
        assert_ne!(key(&double(0), &after1), key(&double(1), &after1));
        assert_eq!(key(&double(1), &after1).origin, "kill@5+kill@1");
        let end = violation("at the end of the trial");
        assert_ne!(key(&double(0), &end), key(&double(1), &end));
        let sys = violation("in life 0, after the injected error");
        assert_eq!(key(&double(2), &sys).origin, "kill@5");
        // Another first crash, or another finding, is another cause.
        assert_ne!(key(&Plan::kill(6), &after0), key(&single, &after0));
        let mut other = after0.clone();
        other.found = "1 of them missing or changed".into();
        assert_ne!(key(&single, &other), key(&single, &after0));
    }

    #[test]
    fn the_simplest_plan_has_the_fewest_crashed_lives() {
        let double = Plan::kill(1).then(Crash::Kill { at: 0 });
        assert!(simplicity(&Plan::kill(9)) < simplicity(&double));
        assert!(simplicity(&Plan::kill(5)) < simplicity(&Plan::kill(9)));
    }
}
