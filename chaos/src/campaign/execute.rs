//! One trial of a prepared scenario, run and judged: the trial's
//! processes ([`crate::campaign::trial`]), then the invariants
//! ([`crate::check`]) and what the trial exercised
//! ([`crate::check::evidence`]).

use crate::campaign::config::{replay_command, Config};
use crate::campaign::describe::{describe_crash, describe_crashes, syscall_mismatch};
use crate::campaign::prepare::{setup, Prepared};
use crate::campaign::scratch::keep_trial;
use std::path::Path;
use std::time::Instant;

use crate::campaign::trial::{self, TrialDir, TrialError};
use crate::check::evidence::Evidence;
use crate::check::{self, Violation};
use crate::coverage::{FaultedLife, Window};
use crate::history::{History, RunKind};
use crate::nemesis::{Crash, Plan};
use crate::timeline::Timeline;
use crate::timing::{self, Part, TrialTimings};

/// The result of one trial.
#[derive(Debug, Clone)]
pub struct TrialOutcome {
    pub scenario: usize,
    pub plan: Plan,
    pub crash_point: String,
    pub violations: Vec<Violation>,
    /// The trial could not be carried out as planned, and whose fault that is.
    pub error: Option<TrialError>,
    /// The first process's crash hit, for coverage.
    pub covered_hit: Option<u64>,
    /// What the trial exercised, for the scorecard.
    pub evidence: Evidence,
    /// What the trial's lives did, for the HTML report: kept for a trial
    /// with violations only, so a clean campaign's memory does not grow.
    pub timeline: Option<Box<Timeline>>,
    pub started: Instant,
    pub finished: Instant,
    /// Where its wall time went (`--timings`).
    pub timings: Option<TrialTimings>,
}

/// Runs one trial and checks it.
pub fn run_trial(
    cfg: &Config<'_>,
    prepared: &Prepared,
    scenario: usize,
    plan: Plan,
    dir: &Path,
) -> TrialOutcome {
    let started = Instant::now();
    let (mut outcome, counts) =
        timing::collect(|| run_and_check(cfg, prepared, scenario, plan, dir, started));
    outcome.timings = counts.map(|counts| TrialTimings {
        wall_micros: outcome.finished.duration_since(started).as_micros() as u64,
        counts,
    });
    outcome
}

fn run_and_check(
    cfg: &Config<'_>,
    prepared: &Prepared,
    scenario: usize,
    plan: Plan,
    dir: &Path,
    started: Instant,
) -> TrialOutcome {
    let result = trial::run(&setup(cfg, &prepared.source), plan, dir, RunKind::Trial);
    let evidence = result
        .as_ref()
        .map(|h| Evidence::of(h, &plan, &prepared.trace.hits))
        .unwrap_or_default();
    let (violations, mut error, crash_point, covered_hit, timeline) = match &result {
        Ok(h) => {
            let covered = match plan.crash {
                Some(Crash::Timer { .. }) => h.lives[0]
                    .trace
                    .as_deref()
                    .and_then(|t| t.lines().count().checked_sub(1))
                    .filter(|_| h.lives[0].end == crate::history::LifeEnd::Killed)
                    .map(|n| n as u64),
                c => c.and_then(|c| c.hit()),
            };
            let root = TrialDir { dir: dir.into() }.root();
            let violations = timing::timed(Part::Checker, || {
                check::check_rooted(h, &prepared.reference, &root)
            });
            let timeline = (!violations.is_empty()).then(|| {
                Box::new(Timeline::of(
                    h,
                    &plan,
                    &describe_crashes(&plan, prepared, Some(h)),
                    &prepared.reference.records,
                ))
            });
            (
                violations,
                h.error
                    .clone()
                    .or_else(|| syscall_mismatch(&plan, prepared, h).map(TrialError::from)),
                describe_crash(&plan, prepared, Some(h)),
                covered,
                timeline,
            )
        }
        Err(e) => (
            Vec::new(),
            Some(e.clone()),
            describe_crash(&plan, prepared, None),
            None,
            None,
        ),
    };
    if let (Ok(h), true) = (&result, crate::coverage::enabled()) {
        let faulted = faulted_lives(&plan, h, error.is_none());
        if let Err(e) = crate::coverage::tally(dir, h.lives.len() as u32, &faulted) {
            error.get_or_insert_with(|| TrialError::from(e.to_string()));
        }
    }
    // A trial the signal's sweep cut short is no failure to keep.
    let failed = (!violations.is_empty() || error.is_some()) && !agentstore::interrupt::requested();
    if let (Some(keep), true) = (&cfg.keep_failures, failed) {
        let replay = replay_command(
            &prepared.source.path,
            &plan,
            cfg.store_fault.as_deref(),
            &cfg.backend.agent_args(),
        );
        let kept = keep_trial(
            keep,
            dir,
            &prepared.source,
            &plan,
            &violations,
            error.as_ref().map(|e| e.message.as_str()),
            &replay,
        );
        match kept {
            // This run kept the same plan already (sampled twice).
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => eprintln!(
                "agentchaos: cannot keep the failing trial {plan} of {} in {}: {e}",
                prepared.source.scenario.name,
                keep.display()
            ),
            Ok(_) => {}
        }
    }
    let _ = std::fs::remove_dir_all(dir);
    TrialOutcome {
        scenario,
        plan,
        crash_point,
        violations,
        error,
        covered_hit,
        evidence,
        timeline,
        started,
        finished: Instant::now(),
        timings: None,
    }
}

/// The lives of a trial its plan faulted, for coverage: how each fault's
/// window ends, and whether the store was observed after it in a trial
/// carried out as planned.
fn faulted_lives(plan: &Plan, h: &History, as_planned: bool) -> Vec<FaultedLife> {
    (0..h.lives.len() as u32)
        .filter_map(|index| {
            let crash = plan.crash_of(index)?;
            let window = match crash {
                Crash::Syscall { fault, .. } if !fault.kills() => Window::Survived {
                    reported: h.lives[index as usize]
                        .syscalls
                        .as_ref()
                        .and_then(|s| s.fault.as_ref())
                        .and_then(|f| f.stdout_before)
                        .unwrap_or(0),
                },
                _ => Window::UntilDeath,
            };
            Some(FaultedLife {
                index,
                window,
                observed: as_planned && h.after_kill.len() > index as usize,
            })
        })
        .collect()
}
