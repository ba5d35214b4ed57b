//! Campaigns: trace runs, trial plans, parallel trials, results.
//!
//! For each scenario the runner first makes a crash-free trace run (which
//! counts every crash-point hit and becomes the [`crate::check::Reference`]) and, for the
//! syscall nemesis, a crash-free run under the tracer (which enumerates the
//! first process's store syscalls). Then it traces restarted lives
//! ([`crate::nemesis::LaterTrace`]): after each first kill of [`nemesis::restarts`], what
//! life 1 does, and after a kill in the middle of the deepest restart's
//! life 1, what life 2 does (under the tracer too, for the syscall
//! nemesis). Then it plans trials ([`nemesis::exhaustive`] or
//! [`nemesis::sample`], [`crate::nemesis::SyscallTrace::exhaustive`] or
//! [`crate::nemesis::SyscallTrace::sample`], and every point or syscall of each traced
//! restarted life, [`crate::nemesis::LaterTrace::point_plans`] and
//! [`crate::nemesis::LaterTrace::syscall_plans`]; the read faults of every
//! traced life, [`crate::nemesis::SyscallTrace::read_plans`] and
//! [`crate::nemesis::LaterTrace::read_plans`]: all of them, or a quarter
//! of `--trials N` more), keeps this
//! shard's share, and runs them on `jobs` worker threads, each trial in its
//! own directory under the campaign directory (on `/dev/shm` by default).
//! A trial directory is deleted once checked, or moved to
//! `--keep` when it found a violation. The runner owns
//! scheduling and bookkeeping; it must never judge a trial itself.

use crate::campaign::config::{Config, Mode, ScenarioSource};
use crate::campaign::describe::describe_crash;
use crate::campaign::execute::{run_trial, TrialOutcome};
use crate::campaign::pool::{parallel, Progress, NOT_RUN};
use crate::campaign::prepare::{prepare_keeping, Prepared};
use crate::campaign::scratch::campaign_dir;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::campaign::probe::{self, probe_setup, ProbeOutcome};
use crate::campaign::trial::{TrialDir, TrialError};
use crate::check::evidence::Evidence;
use crate::check::{Invariant, Violation};
use crate::nemesis::{self, LaterTrace, Plan};
use crate::scenario::rng::Rng;
use crate::store::adapter::Capability;

/// Runs the probes of a store claiming `claimed` on the crash-free run
/// left in `dir`; the probes of the store as a whole (the limit, the
/// lock) only when `store_wide`, in one scenario of the campaign.
fn run_probes(
    cfg: &Config<'_>,
    prepared: &Prepared,
    claimed: &[Capability],
    dir: &Path,
    store_wide: bool,
) -> Vec<ProbeOutcome> {
    let spec = TrialDir {
        dir: dir.to_path_buf(),
    }
    .spec();
    let mut rng = Rng::derive(cfg.seed, &prepared.source.scenario.name, 1);
    // The tail and cut probes know agentstore's files: in-process only.
    let agentstore = cfg
        .backend
        .adapter_line()
        .is_none()
        .then(|| probe::agentstore_files(&spec))
        .flatten();
    let planned = probe::plan(
        claimed,
        &spec.root,
        agentstore.as_ref(),
        &prepared.reference.records,
        &mut rng,
        store_wide,
    );
    let probes = match planned {
        Ok(p) => p,
        Err(e) => {
            return vec![ProbeOutcome {
                probe: probe::Probe::Ledger {
                    operation: String::new(),
                    second: probe::SecondCommit::SameCall,
                },
                told: String::new(),
                violations: Vec::new(),
                error: Some(probe::ProbeError::Harness(format!(
                    "cannot plan the probes: {e}"
                ))),
                skipped: false,
            }]
        }
    };
    let setup = probe_setup(cfg, prepared, &spec, claimed);
    // After SIGINT or SIGTERM no new probe starts (the campaign is over).
    probes
        .iter()
        .enumerate()
        .take_while(|_| !agentstore::interrupt::requested())
        .map(|(i, p)| {
            let scratch = dir.join(format!("probe{i}"));
            let mut outcome = crate::child::within(
                || format!("the probe {p} of {}", prepared.source.scenario.name),
                || probe::run(&setup, p, &scratch),
            );
            if crate::coverage::enabled() {
                let judged = outcome.error.is_none() && !outcome.skipped;
                if let Err(e) = crate::coverage::tally_probe(&scratch, p.is_fault(), judged) {
                    outcome
                        .error
                        .get_or_insert(probe::ProbeError::Harness(e.to_string()));
                }
            }
            let _ = std::fs::remove_dir_all(&scratch);
            outcome
        })
        .collect()
}

/// Per-scenario results.
#[derive(Debug, Clone)]
pub struct ScenarioResult {
    pub prepared: Prepared,
    /// The probes run on the crash-free run's store (none on later shards).
    pub probes: Vec<ProbeOutcome>,
    pub outcomes: Vec<TrialOutcome>,
    /// Wall time from this scenario's first trial start to its last finish.
    pub wall: Duration,
}

impl ScenarioResult {
    pub fn name(&self) -> &str {
        &self.prepared.source.scenario.name
    }

    pub fn covered_hits(&self) -> usize {
        self.outcomes
            .iter()
            .filter_map(|o| o.covered_hit)
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Trials that crashed a restarted life as planned, and the distinct
    /// (restart, point or syscall) they crashed it at.
    pub fn covered_later(&self) -> (usize, usize) {
        let later: Vec<Plan> = self
            .outcomes
            .iter()
            .filter(|o| o.error.is_none() && o.plan.later[0].is_some())
            .map(|o| o.plan)
            .collect();
        let distinct = later
            .iter()
            .map(|p| {
                (
                    p.prefix(p.crashed_lives() - 1),
                    p.crash_of(p.crashed_lives() as u32 - 1),
                )
            })
            .collect::<BTreeSet<_>>()
            .len();
        (later.len(), distinct)
    }

    /// File-mutating syscalls of the traced run that a trial faulted as planned.
    pub fn covered_syscalls(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.error.is_none())
            .filter_map(|o| match o.plan.syscall_fault() {
                Some((0, at, fault)) if !fault.is_read() => Some(at),
                _ => None,
            })
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Violations of every trial, with the crash-free run's first.
    pub fn violations(&self) -> impl Iterator<Item = (Plan, &str, &Violation)> {
        let trace = self
            .prepared
            .trace_violations
            .iter()
            .map(|v| (self.prepared.crash_free(), "none (the crash-free run)", v));
        trace.chain(self.outcomes.iter().flat_map(|o| {
            o.violations
                .iter()
                .map(move |v| (o.plan, o.crash_point.as_str(), v))
        }))
    }

    /// The probes' violations, with the probe that found each.
    pub fn probe_violations(&self) -> impl Iterator<Item = (&probe::Probe, &Violation)> {
        self.probes
            .iter()
            .flat_map(|p| p.violations.iter().map(move |v| (&p.probe, v)))
    }

    /// Probes that could not be carried out.
    pub fn probe_errors(&self) -> impl Iterator<Item = (&probe::Probe, &probe::ProbeError)> {
        self.probes
            .iter()
            .filter_map(|p| p.error.as_ref().map(|e| (&p.probe, e)))
    }

    /// Violations by invariant, the probes' included.
    pub fn by_invariant(&self) -> BTreeMap<Invariant, usize> {
        let mut m = BTreeMap::new();
        for (_, _, v) in self.violations() {
            *m.entry(v.invariant).or_default() += 1;
        }
        for (_, v) in self.probe_violations() {
            *m.entry(v.invariant).or_default() += 1;
        }
        m
    }

    pub fn errors(&self) -> Vec<(Plan, &str)> {
        let mut e: Vec<(Plan, &str)> = self
            .outcomes
            .iter()
            .filter_map(|o| o.error.as_ref().map(|e| (o.plan, e.message.as_str())))
            .collect();
        if let Some(u) = &self.prepared.unusable {
            e.insert(0, (self.prepared.crash_free(), u.message.as_str()));
        }
        e
    }
}

/// A whole campaign's results.
#[derive(Debug)]
pub struct CampaignResult {
    pub scenarios: Vec<ScenarioResult>,
    /// The trials' and probes' time (the power-loss nemesis has its own).
    pub elapsed: Duration,
    pub trials: usize,
    /// What the store claims (scored on the scorecard; the rest is not supported).
    pub capabilities: Vec<Capability>,
    /// The power-loss nemesis, when it ran.
    pub power_loss: Option<crate::campaign::powercampaign::CampaignReport>,
    /// Scenarios not run on this store, and why.
    pub skipped: Vec<(ScenarioSource, String)>,
    /// The adapter processes the harness itself started (observations,
    /// probes, power-loss recoveries; each life is its agent's own).
    pub adapter_processes: crate::store::adapter::ProcessCounts,
    /// Processes the store's adapters left running after a trial (killed).
    pub leaked: Vec<crate::child::Leak>,
    /// With `--timings`: the costs of the probes and the power-loss
    /// recoveries (each trial's are its outcome's).
    pub outside_trials: Option<crate::timing::Counts>,
}

impl CampaignResult {
    /// Wall time from the campaign's first trial start to its last
    /// trial's end (the crash-free runs and probes before them excluded),
    /// as each scenario's [`ScenarioResult::wall`] is its own trials'.
    pub fn trial_wall(&self) -> Duration {
        let outcomes = || self.scenarios.iter().flat_map(|s| &s.outcomes);
        match (
            outcomes().map(|o| o.started).min(),
            outcomes().map(|o| o.finished).max(),
        ) {
            (Some(a), Some(b)) => b - a,
            _ => Duration::ZERO,
        }
    }

    /// Trials per second of [`CampaignResult::trial_wall`]; `None` without trials.
    pub fn trials_per_second(&self) -> Option<f64> {
        let wall = self.trial_wall();
        (!wall.is_zero()).then(|| self.trials as f64 / wall.as_secs_f64())
    }
    pub fn violation_count(&self) -> usize {
        self.scenarios
            .iter()
            .map(|s| s.violations().count() + s.probe_violations().count())
            .sum::<usize>()
            + self.power_loss_findings().count()
    }
    pub fn error_count(&self) -> usize {
        self.scenarios
            .iter()
            .map(|s| s.errors().len() + s.probe_errors().count())
            .sum::<usize>()
            + self.power_loss.as_ref().map_or(0, |p| p.errors())
    }
    /// The trial, probe and power-loss errors that are the store's fault:
    /// it broke the adapter protocol, or refused the harness's observation
    /// or what a probe asks of any store. They fail a run like violations
    /// (exit 1); the other errors are the harness's (exit 3).
    pub fn store_error_count(&self) -> usize {
        let crash_free = self
            .scenarios
            .iter()
            .filter(|s| s.prepared.unusable.as_ref().is_some_and(|u| u.store_fault))
            .count();
        let trials = self
            .scenarios
            .iter()
            .flat_map(|s| &s.outcomes)
            .filter(|o| o.error.as_ref().is_some_and(|e| e.store_fault))
            .count();
        let probes = self
            .scenarios
            .iter()
            .flat_map(|s| s.probe_errors())
            .filter(|(_, e)| e.store_fault())
            .count();
        let power_loss = self.power_loss.as_ref().map_or(0, |p| p.store_errors());
        crash_free + trials + probes + power_loss
    }
    /// Every power-loss finding: the first failing state of each broken
    /// invariant per scenario, with its findings.
    pub fn power_loss_findings(
        &self,
    ) -> impl Iterator<
        Item = (
            &crate::campaign::powercampaign::ScenarioReport,
            &crate::campaign::powercampaign::Failure,
            &crate::campaign::powercampaign::Finding,
        ),
    > {
        self.power_loss.iter().flat_map(|p| {
            p.scenarios.iter().flat_map(|sc| {
                sc.failures
                    .iter()
                    .flat_map(move |f| f.findings.iter().map(move |x| (sc, f, x)))
            })
        })
    }
}

/// Runs a campaign over `sources`.
/// An error says whether the store under test caused it (an adapter that
/// cannot answer `hello`) or the harness did.
pub fn run(cfg: &Config<'_>, sources: Vec<ScenarioSource>) -> Result<CampaignResult, TrialError> {
    let started = Instant::now();
    let capabilities = cfg.backend.capabilities().map_err(|e| TrialError {
        message: format!("cannot learn what the store claims: {e}"),
        store_fault: e.store_fault(),
    })?;
    // A store that does not claim blobs is not given scenarios that store
    // one: they are reported as skipped, never failed as an outcome.
    let (sources, skipped): (Vec<_>, Vec<_>) = sources
        .into_iter()
        .partition(|s| capabilities.contains(&Capability::Blobs) || !s.scenario.uses_blobs());
    let skipped = skipped
        .into_iter()
        .map(|s| {
            let why = "it stores a large tool output as a blob, and the store does not claim `blobs`: not run, not passed".to_string();
            (s, why)
        })
        .collect();
    let dir = campaign_dir(&cfg.dir)?;
    // Power loss runs once per campaign, like the probes: on the first shard.
    let power_sources =
        (cfg.nemesis.powerloss && cfg.shard.is_none_or(|(k, _)| k == 1)).then(|| sources.clone());
    let schedules = crate::campaign::interleavings::seeds(cfg.seed, cfg.schedules);
    let sources = crate::campaign::interleavings::expand(sources, &schedules);
    let result = run_in(cfg, sources, &capabilities, &dir);
    // Every worker has stopped and waited for its children: nothing
    // recreates the directory after this.
    let _ = std::fs::remove_dir_all(&dir);
    if agentstore::interrupt::requested() {
        return Err(NOT_RUN.to_string().into());
    }
    let (scenarios, trials) = result?;
    let elapsed = started.elapsed();
    let power_loss = match power_sources {
        Some(sources) => Some(crate::campaign::powercampaign::run(
            &crate::campaign::powercampaign::Config::of_campaign(cfg),
            sources,
        )?),
        None => None,
    };
    Ok(CampaignResult {
        scenarios,
        elapsed,
        trials,
        capabilities,
        power_loss,
        skipped,
        adapter_processes: crate::store::adapter::process_counts(),
        leaked: {
            crate::child::sweep_orphans("the campaign (outside any trial)");
            crate::child::take_leaks()
        },
        outside_trials: crate::timing::enabled().then(crate::timing::outside_trials_counts),
    })
}

/// Every trial plan of one prepared scenario, in a fixed order: the crash
/// points' (first lives, then the restarted lives'), then the syscall
/// nemesis's; each nemesis draws from its own seeded stream, so adding one
/// never changes another's plans.
fn plans_of(cfg: &Config<'_>, p: &Prepared) -> Vec<Plan> {
    let mut plans = Vec::new();
    if cfg.nemesis.points {
        let mut rng = Rng::derive(cfg.seed, &p.source.scenario.name, 0);
        let later: Vec<Plan> = p
            .later
            .iter()
            .flat_map(|t| t.point_plans(&mut rng))
            .collect();
        // The torn-again life's first tear (of the record of its cut) is
        // the only plan that makes an open cut twice at one offset, where
        // the quarantine file's name collides: one among thousands, so a
        // sample takes it every time.
        let second_cut = p.later.iter().find(|t| t.torn_again).and_then(|t| {
            later
                .iter()
                .copied()
                .find(|plan| plan.prefix(t.life()) == t.before)
        });
        plans.extend(match cfg.mode {
            Mode::Exhaustive => nemesis::exhaustive(&p.trace, &mut rng)
                .into_iter()
                .chain(later)
                .collect(),
            Mode::Sampled(n) => sample_with_later(n, later, second_cut, &mut rng, |k, rng| {
                nemesis::sample(&p.trace, k, rng)
            }),
        });
    }
    if let (true, Some(sys)) = (cfg.nemesis.syscall, &p.syscalls) {
        let mut rng = Rng::derive(cfg.seed, &p.source.scenario.name, 2);
        let later: Vec<Plan> = p
            .later
            .iter()
            .flat_map(|t| t.syscall_plans(&mut rng))
            .collect();
        plans.extend(match cfg.mode {
            Mode::Exhaustive => sys.exhaustive(&mut rng).into_iter().chain(later).collect(),
            Mode::Sampled(n) => {
                sample_with_later(n, later, None, &mut rng, |k, rng| sys.sample(k, rng))
            }
        });
        // The read faults, first life's and restarted lives' (recovery
        // reads the log), from a generator of their own: they change no
        // other plan. Sampled: a quarter more.
        let mut rng = Rng::derive(cfg.seed, &p.source.scenario.name, 3);
        let reads: Vec<Plan> = sys
            .read_plans(&mut rng)
            .into_iter()
            .chain(p.later.iter().flat_map(|t| t.read_plans(&mut rng)))
            .collect();
        plans.extend(match cfg.mode {
            Mode::Exhaustive => reads,
            Mode::Sampled(_) if reads.is_empty() => Vec::new(),
            Mode::Sampled(n) => (0..n / 4).map(|_| *rng.pick(&reads)).collect(),
        });
        // A disk that fills and stays full, from a generator of its own
        // too: the first life at every call that may need space, or an
        // eighth of N of them; each traced restarted life at its open's.
        let mut rng = Rng::derive(cfg.seed, &p.source.scenario.name, 4);
        plans.extend(match cfg.mode {
            Mode::Exhaustive => sys.disk_full_plans(),
            Mode::Sampled(n) => sys.disk_full_sample(n / 8, &mut rng),
        });
        plans.extend(p.later.iter().flat_map(LaterTrace::disk_full_plans));
    }
    let sched = p.source.schedule;
    plans
        .into_iter()
        .map(|plan| plan.scheduled(sched))
        .collect()
}

fn run_in(
    cfg: &Config<'_>,
    sources: Vec<ScenarioSource>,
    claimed: &[Capability],
    dir: &Path,
) -> Result<(Vec<ScenarioResult>, usize), TrialError> {
    let (prepared, probes) = prepare_all(cfg, sources, claimed, dir)?;
    let mut jobs: Vec<(usize, Plan)> = Vec::new();
    for (s, p) in prepared.iter().enumerate() {
        if p.unusable.is_none() {
            jobs.extend(plans_of(cfg, p).into_iter().map(|plan| (s, plan)));
        }
    }
    if let Some((k, n)) = cfg.shard {
        jobs = jobs
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % n == k - 1)
            .map(|(_, j)| j)
            .collect();
    }
    let outcomes = run_jobs(cfg, &prepared, &jobs, dir);
    let trials = outcomes.len();
    Ok((by_scenario(prepared, probes, outcomes), trials))
}

/// Every scenario's crash-free trace run and its probes, in parallel too:
/// they are trials like any other. The probes work on copies of each
/// crash-free run's store.
fn prepare_all(
    cfg: &Config<'_>,
    sources: Vec<ScenarioSource>,
    claimed: &[Capability],
    dir: &Path,
) -> Result<(Vec<Prepared>, Vec<Vec<ProbeOutcome>>), TrialError> {
    let prepared = parallel(cfg.jobs, sources.len(), |i| {
        let trace = crate::campaign::scratch::trace_dir(dir, i);
        let prepared = prepare_keeping(cfg, sources[i].clone(), &trace).map(|p| {
            // Probes are not trials: with --shard, the first shard runs them
            // all; those of the store as a whole, with the first scenario.
            // A scenario's probes run once, with its default schedule.
            let probes = if p.unusable.is_none()
                && p.source.schedule == 0
                && cfg.shard.is_none_or(|(k, _)| k == 1)
            {
                crate::timing::outside_trials(crate::timing::Role::Probe, || {
                    run_probes(cfg, &p, claimed, &trace, i == 0)
                })
            } else {
                Vec::new()
            };
            (p, probes)
        });
        let _ = std::fs::remove_dir_all(&trace);
        prepared
    });
    Ok(prepared
        .into_iter()
        .map(|r| r.map_err(TrialError::from).and_then(|p| p))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .unzip())
}

/// Runs `jobs` (scenario index, plan) on the worker pool, in job order; a
/// trial that could not be carried out becomes an outcome with its error.
fn run_jobs(
    cfg: &Config<'_>,
    prepared: &[Prepared],
    jobs: &[(usize, Plan)],
    dir: &Path,
) -> Vec<TrialOutcome> {
    let progress = Progress::start(cfg.progress, jobs.len(), "trials");
    let outcomes = parallel(cfg.jobs, jobs.len(), |i| {
        let (s, plan) = jobs[i];
        let o = run_trial(
            cfg,
            &prepared[s],
            s,
            plan,
            &crate::campaign::scratch::trial_dir(dir, s, i),
        );
        if let Some(p) = &progress {
            p.inc(o.violations.len());
        }
        o
    });
    if let Some(p) = progress {
        p.finish();
    }
    outcomes
        .into_iter()
        .zip(jobs)
        .map(|(o, &(s, plan))| {
            o.unwrap_or_else(|e| {
                let now = Instant::now();
                TrialOutcome {
                    scenario: s,
                    plan,
                    crash_point: describe_crash(&plan, &prepared[s], None),
                    violations: Vec::new(),
                    error: Some(e.into()),
                    covered_hit: None,
                    evidence: Evidence::default(),
                    timeline: None,
                    started: now,
                    finished: now,
                    timings: None,
                }
            })
        })
        .collect()
}

/// Each scenario with its probes and its trials' outcomes, and the wall
/// time from its first trial's start to its last one's end.
fn by_scenario(
    prepared: Vec<Prepared>,
    mut probes: Vec<Vec<ProbeOutcome>>,
    outcomes: Vec<TrialOutcome>,
) -> Vec<ScenarioResult> {
    let mut per: Vec<Vec<TrialOutcome>> = vec![Vec::new(); prepared.len()];
    for o in outcomes {
        per[o.scenario].push(o);
    }
    prepared
        .into_iter()
        .zip(per)
        .enumerate()
        .map(|(i, (prepared, outcomes))| {
            let wall = match (
                outcomes.iter().map(|o| o.started).min(),
                outcomes.iter().map(|o| o.finished).max(),
            ) {
                (Some(a), Some(b)) => b - a,
                _ => Duration::ZERO,
            };
            ScenarioResult {
                prepared,
                probes: std::mem::take(&mut probes[i]),
                outcomes,
                wall,
            }
        })
        .collect()
}

/// `n` sampled plans: a fifth from the restarted lives' plans `later`
/// (when there are any), the first of them `always` when there is one,
/// the rest from `first(k, rng)`, the first life's.
fn sample_with_later(
    n: usize,
    later: Vec<Plan>,
    always: Option<Plan>,
    rng: &mut Rng,
    first: impl FnOnce(usize, &mut Rng) -> Vec<Plan>,
) -> Vec<Plan> {
    let k = if later.is_empty() { 0 } else { n / 5 };
    let mut plans = first(n - k, rng);
    let always = always.filter(|_| k > 0);
    plans.extend(always);
    plans.extend((always.is_some() as usize..k).map(|_| *rng.pick(&later)));
    plans
}
