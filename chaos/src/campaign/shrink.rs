//! Shrinking: a failing scenario reduced to a minimal scenario and crash point.
//!
//! It starts where its caller says: the report's causes give the first
//! cause a deterministic trial reached, at the simplest plan that reached
//! it (the fewest crashed lives), never whichever double crash came first.
//! Greedy delta debugging over the scenario's structure: try dropping a
//! whole run, then each step (a `parallel` step: made sequential, or one
//! call fewer), then each approval; keep any smaller
//! scenario that still violates the same invariant under some plan of the
//! same kind (searched with the fewest crashed lives first, then in hit
//! order, so the crash found is the simplest and earliest); repeat until
//! nothing smaller fails or the time budget is spent. A scenario with a
//! parallel step is tried under the schedules 0, 1 and 2 before the
//! failing plan's own (`,sched:S`), which it keeps if none of those fails. Each candidate costs a trace run plus up to one trial per hit,
//! which is why random scenarios are kept small. This module must never
//! report a shrunk result it has not seen fail.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::campaign::config::{Config, ScenarioSource};
use crate::campaign::interleavings;
use crate::campaign::pool::parallel;
use crate::campaign::runner;
use crate::campaign::trial::TrialError;
use crate::check::Invariant;
use crate::nemesis::{self, Crash, Plan};
use crate::scenario::rng::Rng;
use crate::scenario::{Scenario, Step};

/// The smallest failing scenario found.
#[derive(Debug, Clone)]
pub struct Shrunk {
    pub scenario: Scenario,
    pub path: PathBuf,
    pub plan: Plan,
    pub steps_before: usize,
    pub candidates_tried: usize,
    /// The budget ran out before no smaller candidate failed.
    pub budget_exhausted: bool,
}

/// Every scenario one edit smaller than `s`.
fn candidates(s: &Scenario) -> Vec<Scenario> {
    let mut out = Vec::new();
    if s.runs.len() > 1 {
        for r in 0..s.runs.len() {
            let mut c = s.clone();
            c.runs.remove(r);
            out.push(c);
        }
    }
    for r in 0..s.runs.len() {
        for i in 0..s.runs[r].steps.len() {
            if s.runs[r].steps.len() > 1 {
                let mut c = s.clone();
                c.runs[r].steps.remove(i);
                out.push(c);
            }
            if let Step::Parallel { calls, .. } = &s.runs[r].steps[i] {
                // The calls made one after another; then with one call fewer.
                let mut c = s.clone();
                c.runs[r].steps.splice(i..=i, calls.iter().cloned());
                out.push(c);
                for k in 0..calls.len() {
                    let mut c = s.clone();
                    if let Step::Parallel { calls, .. } = &mut c.runs[r].steps[i] {
                        calls.remove(k);
                    }
                    out.push(c);
                }
            }
            let mut c = s.clone();
            let dropped = match &mut c.runs[r].steps[i] {
                Step::ReadFile { approval, .. }
                | Step::RunTests { approval }
                | Step::WriteFile { approval, .. }
                | Step::AppendLine { approval, .. }
                | Step::Remote { approval, .. }
                | Step::LargeOutput { approval, .. } => approval.take().is_some(),
                _ => false,
            };
            if dropped {
                out.push(c);
            }
        }
    }
    out.retain(|c| c.validate().is_ok());
    out
}

fn same_kind(original: &Plan, p: &Plan) -> bool {
    match original.crash {
        None => p.crash.is_none(),
        // A timer's death point is some hit: search every kill.
        Some(Crash::Timer { .. }) => p.kind() == "kill",
        Some(_) => p.kind() == original.kind(),
    }
}

/// The plans like `original` a candidate is tried under: a single crash
/// before any double, each in hit order.
fn search_order(mut plans: Vec<Plan>, original: &Plan) -> Vec<Plan> {
    plans.retain(|p| same_kind(original, p));
    plans.sort_by_key(Plan::crashed_lives);
    plans
}

/// Does `scenario` (written to `path`) violate `inv` under some plan like
/// `original`? Returns the earliest such plan. With a parallel step, the
/// schedules 0, 1 and 2 (the simplest replays) are tried before the
/// original plan's own.
fn reproduce(
    cfg: &Config<'_>,
    scenario: &Scenario,
    path: &Path,
    original: &Plan,
    inv: Invariant,
    dir: &Path,
) -> Result<Option<Plan>, TrialError> {
    std::fs::write(path, scenario.to_json())
        .map_err(|e| TrialError::from(format!("cannot write {}: {e}", path.display())))?;
    let schedules = if interleavings::has_parallel(scenario) {
        interleavings::shrink_order(original.sched)
    } else {
        vec![0]
    };
    for sched in schedules {
        let source = ScenarioSource {
            path: path.to_path_buf(),
            scenario: scenario.clone(),
            random_seed: None,
            schedule: sched,
        };
        if let Some(p) = reproduce_in(cfg, source, original, inv, dir)? {
            return Ok(Some(p.scheduled(sched)));
        }
    }
    Ok(None)
}

/// [`reproduce`] under `source`'s schedule.
fn reproduce_in(
    cfg: &Config<'_>,
    source: ScenarioSource,
    original: &Plan,
    inv: Invariant,
    dir: &Path,
) -> Result<Option<Plan>, TrialError> {
    let prepared = crate::campaign::prepare::prepare(
        cfg,
        source,
        &crate::campaign::scratch::trace_dir(dir, 0),
    )?;
    if prepared.trace_violations.iter().any(|v| v.invariant == inv) {
        return Ok(Some(Plan::NONE));
    }
    if prepared.unusable.is_some() || original.crash.is_none() {
        return Ok(None);
    }
    let rng = &mut Rng::new(0);
    let mut plans: Vec<Plan> = nemesis::exhaustive(&prepared.trace, rng);
    plans.extend(prepared.syscalls.iter().flat_map(|t| t.exhaustive(rng)));
    plans.extend(prepared.syscalls.iter().flat_map(|t| t.read_plans(rng)));
    for later in &prepared.later {
        plans.extend(later.point_plans(rng));
        plans.extend(later.syscall_plans(rng));
        plans.extend(later.read_plans(rng));
    }
    let plans = search_order(plans, original);
    let batch = cfg.jobs.max(1) * 2;
    for chunk in plans.chunks(batch) {
        let found = parallel(cfg.jobs, chunk.len(), |i| {
            let o = crate::campaign::execute::run_trial(
                cfg,
                &prepared,
                0,
                chunk[i],
                &crate::campaign::scratch::trial_dir(dir, 0, i),
            );
            o.violations
                .iter()
                .any(|v| v.invariant == inv)
                .then_some(chunk[i])
        });
        if let Some(p) = found.into_iter().flatten().flatten().next() {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

/// Shrinks every generated scenario of `result` that failed a deterministic
/// plan, from the plan and invariant `start` picks for it (none: not
/// shrunk), writing each minimal scenario to `dir/<name>-shrunk.json`. A
/// scenario run under several schedules is shrunk once, from its first
/// failing row.
pub fn shrink_failing_random(
    cfg: &Config<'_>,
    result: &runner::CampaignResult,
    dir: &Path,
    budget: Duration,
    start: impl Fn(&runner::ScenarioResult) -> Option<(Plan, Invariant)>,
) -> Vec<(String, Result<Shrunk, TrialError>)> {
    let mut out = Vec::new();
    let mut shrunk_files = Vec::new();
    for s in &result.scenarios {
        if s.prepared.source.random_seed.is_none() || shrunk_files.contains(&s.prepared.source.path)
        {
            continue;
        }
        let Some((plan, invariant)) = start(s).filter(|(p, _)| p.deterministic()) else {
            continue;
        };
        shrunk_files.push(s.prepared.source.path.clone());
        let path = dir.join(format!("{}-shrunk.json", s.name()));
        let shrunk = shrink(
            cfg,
            &s.prepared.source.scenario,
            plan,
            invariant,
            &path,
            budget,
        );
        out.push((s.name().to_string(), shrunk));
    }
    out
}

/// Shrinks `scenario`, which violates `inv` under `plan`. The result is
/// written to `out` (a JSON scenario file).
pub fn shrink(
    cfg: &Config<'_>,
    scenario: &Scenario,
    plan: Plan,
    inv: Invariant,
    out: &Path,
    budget: Duration,
) -> Result<Shrunk, TrialError> {
    let started = Instant::now();
    let dir = crate::campaign::scratch::campaign_dir(&cfg.dir)?;
    let work = dir.join("candidate.json");
    let mut best = scenario.clone();
    let mut best_plan = plan;
    let mut tried = 0;
    let mut exhausted = false;
    let result = (|| -> Result<(), TrialError> {
        'outer: loop {
            for c in candidates(&best) {
                if started.elapsed() > budget {
                    exhausted = true;
                    break 'outer;
                }
                if agentstore::interrupt::requested() {
                    return Err(crate::child::INTERRUPTED.to_string().into());
                }
                tried += 1;
                if let Some(p) = reproduce(cfg, &c, &work, &best_plan, inv, &dir)? {
                    best = c;
                    best_plan = p;
                    continue 'outer;
                }
            }
            break;
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    best.description = format!(
        "shrunk from {} ({} steps) to a minimal scenario that still violates {inv}",
        scenario.name,
        scenario.step_count()
    );
    best.name = crate::scenario::SafeName::new(format!("{}-shrunk", scenario.name))
        .map_err(|e| TrialError::from(format!("cannot name the shrunk scenario: {e}")))?;
    std::fs::write(out, best.to_json())
        .map_err(|e| TrialError::from(format!("cannot write {}: {e}", out.display())))?;
    Ok(Shrunk {
        scenario: best,
        path: out.to_path_buf(),
        plan: best_plan,
        steps_before: scenario.step_count(),
        candidates_tried: tried,
        budget_exhausted: exhausted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::generate::random_scenario;

    /// A double crash's plans come after every single crash, each kind in
    /// hit order; another kind is not tried.
    #[test]
    fn single_crashes_are_tried_before_double_ones() {
        let double = |first, at| Plan::kill(first).then(Crash::Kill { at });
        let tear = Plan::first(Crash::Tear { at: 1, bytes: 3 });
        let plans = vec![
            double(1, 0),
            Plan::kill(1),
            tear,
            Plan::kill(2),
            double(0, 4),
        ];
        assert_eq!(
            search_order(plans.clone(), &Plan::kill(9)),
            [Plan::kill(1), Plan::kill(2)]
        );
        assert_eq!(
            search_order(plans, &double(3, 3)),
            [double(1, 0), double(0, 4)]
        );
    }

    #[test]
    fn candidates_are_valid_and_each_one_edit_smaller() {
        let approvals = |s: &Scenario| format!("{s:?}").matches("approval: Some").count();
        let mut parallel = 0;
        for seed in 0..40 {
            let s = random_scenario(seed, 5);
            let n = s.step_count();
            for c in candidates(&s) {
                assert!(c.validate().is_ok());
                assert!(c.step_count() < n || approvals(&c) < approvals(&s));
            }
            let parallels = |s: &Scenario| format!("{s:?}").matches("Parallel").count();
            let made_sequential =
                |c: &Scenario| c.step_count() == n - 1 && parallels(c) < parallels(&s);
            if parallels(&s) > 0 {
                parallel += 1;
                assert!(candidates(&s).iter().any(made_sequential), "seed {seed}");
            }
        }
        assert!(parallel > 0, "no random scenario has a parallel step");
    }
}
