//! Campaigns: trace runs, trial plans, parallel trials, results.
//!
//! For each scenario the runner first makes a crash-free trace run (which
//! counts every crash-point hit and becomes the [`Reference`]) and, for the
//! syscall nemesis, a crash-free run under the tracer (which enumerates the
//! first process's store syscalls). Then it traces restarted lives
//! ([`LaterTrace`]): after each first kill of [`nemesis::restarts`], what
//! life 1 does, and after a kill in the middle of the deepest restart's
//! life 1, what life 2 does (under the tracer too, for the syscall
//! nemesis). Then it plans trials ([`nemesis::exhaustive`] or
//! [`nemesis::sample`], [`SyscallTrace::exhaustive`] or
//! [`SyscallTrace::sample`], and every point or syscall of each traced
//! restarted life, [`LaterTrace::point_plans`] and
//! [`LaterTrace::syscall_plans`]), keeps this
//! shard's share, and runs them on `jobs` worker threads, each trial in its
//! own directory under the campaign directory (on `/dev/shm` by default).
//! A trial directory is deleted once checked, or moved to
//! `--keep-failures` when it found a violation. The runner owns
//! scheduling and bookkeeping; it must never judge a trial itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::campaign::probe::{self, ProbeOutcome, ProbeSetup};
use crate::campaign::trial::{self, History, RunKind, TrialDir, TrialError, TrialSetup};
use crate::check::model::{describe_record, Model};
use crate::check::{self, Invariant, Reference, Violation};
use crate::nemesis::syscall::{FaultOutcome, FaultReport};
use crate::nemesis::{
    self, Crash, LaterTrace, Nemeses, Plan, Restarts, SysFault, SyscallTrace, Trace, TracedCall,
    ADAPTER_APPEND, ADAPTER_APPEND_REPLIED, LOG_WRITE,
};
use crate::report::scorecard::Evidence;
use crate::scenario::rng::Rng;
use crate::scenario::Scenario;
use crate::store::adapter::Capability;
use crate::store::StoreBackend;

/// How many trials per scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every hit killed, every write torn, every unsynced point power-cut;
    /// every hit of each traced restarted life killed and every write torn.
    Exhaustive,
    /// This many trials per scenario, sampled from the seed.
    Sampled(usize),
}

/// A scenario to test and where its file is (the child reads the file).
#[derive(Debug, Clone)]
pub struct ScenarioSource {
    pub path: PathBuf,
    pub scenario: Scenario,
    /// For generated scenarios: the seed that generated it.
    pub random_seed: Option<u64>,
}

/// Everything a campaign needs.
#[derive(Debug)]
pub struct Config<'a> {
    pub backend: &'a dyn StoreBackend,
    pub agent_exe: PathBuf,
    pub store_fault: Option<String>,
    pub mode: Mode,
    /// Which nemeses plan the trials.
    pub nemesis: Nemeses,
    /// Which restarted lives are traced and crashed.
    pub restarts: Restarts,
    pub seed: u64,
    pub jobs: usize,
    /// `(k, n)`: run only trials whose index is `k-1` modulo `n`.
    pub shard: Option<(usize, usize)>,
    /// Parent of the campaign directory.
    pub dir: PathBuf,
    pub keep_failures: Option<PathBuf>,
    pub progress: bool,
}

/// `n` generated scenarios (seeded from `seed`), written to `dir` so the
/// child agents and replay commands can read them.
pub fn random_sources(dir: &Path, seed: u64, n: usize) -> Result<Vec<ScenarioSource>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    (0..n)
        .map(|i| {
            let seed = seed.wrapping_mul(1_000_003).wrapping_add(i as u64);
            let scenario = crate::scenario::generate::random_scenario(seed, 6);
            let path = dir.join(format!("{}.json", scenario.name));
            std::fs::write(&path, scenario.to_json())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(ScenarioSource {
                path,
                scenario,
                random_seed: Some(seed),
            })
        })
        .collect()
}

/// The default place for trial directories: tmpfs when there is one.
/// A SIGKILL keeps the page cache, so kill trials lose nothing to tmpfs;
/// power cuts are modelled explicitly (see `nemesis`).
pub fn default_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && can_write(shm).is_ok() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn can_write(dir: &Path) -> std::io::Result<()> {
    let p = dir.join(format!(".agentchaos-probe-{}", std::process::id()));
    std::fs::write(&p, b"")?;
    std::fs::remove_file(&p)
}

/// A scenario after its trace run.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub source: ScenarioSource,
    pub reference: Reference,
    pub trace: Trace,
    /// The syscall nemesis's crash-free traced run (when it is on).
    pub syscalls: Option<SyscallTrace>,
    /// The traced restarted lives. A restart whose trace run did not finish
    /// is left out here: the trial of its first kill reports why.
    pub later: Vec<LaterTrace>,
    /// Violations of the crash-free run itself.
    pub trace_violations: Vec<Violation>,
    /// Why crash trials cannot run (the crash-free run did not complete).
    pub unusable: Option<String>,
    /// The probes run on the crash-free run's store (campaigns only).
    pub probes: Vec<ProbeOutcome>,
}

pub fn setup<'a>(cfg: &'a Config<'_>, source: &'a ScenarioSource) -> TrialSetup<'a> {
    TrialSetup {
        backend: cfg.backend,
        agent_exe: &cfg.agent_exe,
        scenario_path: &source.path,
        files: &source.scenario.files,
        store_fault: cfg.store_fault.as_deref(),
    }
}

/// The crash-free trace run: counts hits, records the reference outcome;
/// with the syscall nemesis on, a second crash-free run under the tracer
/// enumerates the first process's syscalls.
pub fn prepare(
    cfg: &Config<'_>,
    source: ScenarioSource,
    dir: &Path,
) -> Result<Prepared, TrialError> {
    let prepared = prepare_keeping(cfg, source, dir);
    let _ = std::fs::remove_dir_all(dir);
    prepared
}

/// [`prepare`], leaving the crash-free run's directory (its store) in
/// `dir` for probes; the caller removes it.
pub fn prepare_keeping(
    cfg: &Config<'_>,
    source: ScenarioSource,
    dir: &Path,
) -> Result<Prepared, TrialError> {
    let history = trial::run(&setup(cfg, &source), Plan::NONE, dir, RunKind::TracePoints)?;
    let mut sys_unusable = None;
    let syscalls = if cfg.nemesis.syscall {
        let sys_dir = dir.with_extension("sys");
        let traced = trial::run(
            &setup(cfg, &source),
            Plan::NONE,
            &sys_dir,
            RunKind::TraceSyscalls,
        )?;
        let _ = std::fs::remove_dir_all(&sys_dir);
        let first = &traced.lives[0];
        if let Some(e) = &traced.error {
            sys_unusable = Some(format!("the crash-free run under the syscall tracer: {e}"));
        } else if !first.done {
            sys_unusable = Some(format!(
                "the crash-free run under the syscall tracer did not complete: {}",
                first.stderr
            ));
        }
        first
            .syscalls
            .as_ref()
            .map(|s| SyscallTrace::of(&s.events, &s.root))
    } else {
        None
    };
    let trace_violations = check::check(&history, None);
    let life = history.last();
    let records = &history.final_obs.records;
    let mut work_after = Vec::with_capacity(records.len() + 1);
    let mut model = Model::default();
    work_after.push(0);
    for r in records {
        if let Some(e) = r.event() {
            model.apply(r.seq, e);
        }
        let calls = model.open_calls().filter(|c| c.needs_mark()).count();
        work_after.push(usize::from(model.open_run.is_some()) + calls);
    }
    let trace = Trace::from_log(
        life.trace.as_deref().unwrap_or_default(),
        &history.final_obs.ends,
        &work_after,
        life.micros,
    );
    let unusable = match (&history.error, life.done) {
        (Some(e), _) => Some(e.clone()),
        (None, false) => Some(format!(
            "the crash-free run did not complete: {}",
            life.stderr
        )),
        (None, true) => sys_unusable,
    };
    let later = match unusable {
        None => trace_restarts(cfg, &source, &trace, dir)?,
        Some(_) => Vec::new(),
    };
    Ok(Prepared {
        later,
        reference: Reference {
            records: records.clone(),
            world: history.world.clone(),
            workspace: history.workspace.clone(),
        },
        source,
        trace,
        syscalls,
        trace_violations,
        unusable,
        probes: Vec::new(),
    })
}

impl Prepared {
    /// The traced restarted life that comes after the crashes `before`.
    pub fn later_of(&self, before: Plan) -> Option<&LaterTrace> {
        self.later.iter().find(|t| t.before == before)
    }

    /// The syscall trace a syscall fault of `plan` was planned from.
    pub fn syscalls_for(&self, plan: &Plan) -> Option<&SyscallTrace> {
        match plan.syscall_fault()? {
            (0, _, _) => self.syscalls.as_ref(),
            (life, _, _) => self.later_of(plan.prefix(life as usize))?.syscalls.as_ref(),
        }
    }
}

/// Traces the restarted lives the nemeses crash: with the points nemesis,
/// life 1 after every first kill of [`nemesis::restarts`] (crashed through
/// its recovery and the [`nemesis::RESUMED_HITS`] after it; the deepest
/// restart's at every point); with the syscall nemesis, the deepest
/// restart's life 1 under the tracer too; and the life 2 after a kill in
/// the middle of that life 1, at every point.
fn trace_restarts(
    cfg: &Config<'_>,
    source: &ScenarioSource,
    trace: &Trace,
    dir: &Path,
) -> Result<Vec<LaterTrace>, String> {
    let deepest = nemesis::deepest_restart(trace);
    let befores: Vec<Plan> = match cfg.restarts {
        _ if !cfg.nemesis.points && !cfg.nemesis.syscall => Vec::new(),
        Restarts::None => Vec::new(),
        Restarts::All if cfg.nemesis.points => nemesis::restarts(trace),
        Restarts::All | Restarts::Deepest => deepest.into_iter().collect(),
    };
    let mut out = Vec::new();
    for (j, &before) in befores.iter().enumerate() {
        let deepest = Some(before) == deepest;
        let dir = dir.with_extension(format!("later{j}"));
        let syscalls = cfg.nemesis.syscall && deepest;
        out.extend(
            trace_later(cfg, source, before, syscalls, &dir)?.map(|t| LaterTrace {
                every_point: deepest,
                ..t
            }),
        );
    }
    let third = deepest
        .and_then(|d| out.iter().find(|t| t.before == d))
        .and_then(LaterTrace::next_restart);
    if let Some(before) = third {
        let dir = dir.with_extension("later-third");
        out.extend(trace_later(cfg, source, before, cfg.nemesis.syscall, &dir)?);
    }
    Ok(out)
}

/// Runs `before` and traces the life after its crashes (its crash points,
/// and its syscalls if `syscalls`), to be crashed at every point. `None`
/// when that life did not finish.
pub fn trace_later(
    cfg: &Config<'_>,
    source: &ScenarioSource,
    before: Plan,
    syscalls: bool,
    dir: &Path,
) -> Result<Option<LaterTrace>, String> {
    let life = before.crashed_lives();
    let finished =
        |h: &History| h.error.is_none() && h.lives.len() == life + 1 && h.lives[life].done;
    let h = trial::run(&setup(cfg, source), before, dir, RunKind::TracePoints);
    let _ = std::fs::remove_dir_all(dir);
    let h = h?;
    if !finished(&h) {
        return Ok(None);
    }
    let hits = h.lives[life]
        .trace
        .as_deref()
        .unwrap_or_default()
        .lines()
        .filter(|l| nemesis::parse_sync_line(l).is_none())
        .map(str::to_string)
        .collect();
    let syscalls = if syscalls {
        let sys_dir = dir.with_extension("sys");
        let h = trial::run(
            &setup(cfg, source),
            before,
            &sys_dir,
            RunKind::TraceSyscalls,
        );
        let _ = std::fs::remove_dir_all(&sys_dir);
        let h = h?;
        if !finished(&h) {
            return Ok(None);
        }
        h.lives[life]
            .syscalls
            .as_ref()
            .map(|s| SyscallTrace::of(&s.events, &s.root))
    } else {
        None
    };
    Ok(Some(LaterTrace {
        before,
        hits,
        syscalls,
        every_point: true,
    }))
}

/// How probes reach the crash-free run's store, left in `dir` by [`prepare_keeping`].
pub fn probe_setup<'a>(
    cfg: &'a Config<'_>,
    prepared: &'a Prepared,
    spec: &'a crate::store::SessionSpec,
) -> ProbeSetup<'a> {
    ProbeSetup {
        backend: cfg.backend,
        agent_exe: &cfg.agent_exe,
        store_fault: cfg.store_fault.as_deref(),
        spec,
        reference: &prepared.reference.records,
    }
}

/// Runs the probes of a store claiming `claimed` on the crash-free run left in `dir`.
fn run_probes(
    cfg: &Config<'_>,
    prepared: &Prepared,
    claimed: &[Capability],
    dir: &Path,
) -> Vec<ProbeOutcome> {
    let spec = TrialDir {
        dir: dir.to_path_buf(),
    }
    .spec();
    let mut rng = Rng::derive(cfg.seed, &prepared.source.scenario.name, 1);
    let probes = match probe::plan(claimed, &spec.root, &prepared.reference.records, &mut rng) {
        Ok(p) => p,
        Err(e) => {
            return vec![ProbeOutcome {
                probe: probe::Probe::Ledger {
                    operation: String::new(),
                    another_call: false,
                },
                told: String::new(),
                violations: Vec::new(),
                error: Some(format!("cannot plan the probes: {e}")),
                skipped: false,
            }]
        }
    };
    let setup = probe_setup(cfg, prepared, &spec);
    // After SIGINT or SIGTERM no new probe starts (the campaign is over).
    probes
        .iter()
        .enumerate()
        .take_while(|_| !agentstore::interrupt::requested())
        .map(|(i, p)| {
            let scratch = dir.join(format!("probe{i}"));
            let outcome = probe::run(&setup, p, &scratch);
            let _ = std::fs::remove_dir_all(&scratch);
            outcome
        })
        .collect()
}

/// The syscall a fault in life `life` targets, as the crash-free traced
/// run saw it; for a trial, as the fault report says it really was.
fn syscall_text(
    life: u32,
    at: u64,
    syscalls: Option<&SyscallTrace>,
    history: Option<&History>,
) -> String {
    let injected = history
        .and_then(|h| h.lives.get(life as usize))
        .and_then(|l| l.syscalls.as_ref())
        .and_then(|s| match &s.fault {
            Some(FaultReport {
                outcome: FaultOutcome::Injected { event },
                ..
            }) => Some(TracedCall::new(event, &s.root).text),
            _ => None,
        });
    let n = syscalls.map_or(0, |t| t.len());
    let call = injected
        .or_else(|| {
            syscalls
                .and_then(|t| t.calls.get(at as usize))
                .map(|c| c.text.clone())
        })
        .unwrap_or_else(|| format!("beyond the {n} syscalls of the traced run"));
    format!("syscall {at} of {n}: {call}")
}

/// Did a syscall fault land on the call the traced run had at its index?
/// `None` when it did (or the plan is not a syscall plan); else why not.
pub fn syscall_mismatch(plan: &Plan, prepared: &Prepared, h: &History) -> Option<String> {
    let (life, at, _) = plan.syscall_fault()?;
    let sys = h.lives.get(life as usize)?.syscalls.as_ref()?;
    let Some(FaultReport {
        outcome: FaultOutcome::Injected { event },
        ..
    }) = &sys.fault
    else {
        return None;
    };
    let hit = TracedCall::new(event, &sys.root);
    let planned = prepared
        .syscalls_for(plan)
        .and_then(|t| t.calls.get(at as usize));
    match planned {
        Some(p) if p.key == hit.key => None,
        Some(p) => Some(format!(
            "the fault planned for syscall {at} of life {life}, {}, landed on {} (the store's syscalls are not the same from run to run: several threads or processes racing?)",
            p.text, hit.text
        )),
        None => Some(format!(
            "the fault planned for syscall {at} of life {life} landed on {}, which the traced run never made",
            hit.text
        )),
    }
}

/// Where, in words, a plan crashes the agent, life by life.
pub fn describe_crash(plan: &Plan, prepared: &Prepared, history: Option<&History>) -> String {
    let trace = &prepared.trace;
    let reference = &prepared.reference.records;
    let point = |h: u64| -> String {
        let Some(name) = trace.hits.get(h as usize) else {
            return format!("hit {h} (beyond the {} hits of the trace)", trace.len());
        };
        let k = trace.appends_before[h as usize];
        let rec = |i: usize| {
            reference
                .get(i)
                .map(describe_record)
                .unwrap_or_else(|| format!("seq {i}"))
        };
        let context = if name == LOG_WRITE || name == ADAPTER_APPEND {
            format!("appending {}", rec(k))
        } else if name == ADAPTER_APPEND_REPLIED && k > 0 {
            format!("the adapter has answered the append of {}", rec(k - 1))
        } else if name == "log.fdatasync" && k > 0 {
            format!("syncing {}", rec(k - 1))
        } else if k > 0 {
            format!("after {}", rec(k - 1))
        } else {
            "before the first event".to_string()
        };
        format!("hit {h} of {}: {name} ({context})", trace.len())
    };
    let mut s = match plan.crash {
        None => "none (the crash-free run)".to_string(),
        Some(Crash::Kill { at }) => format!("SIGKILL at {}", point(at)),
        Some(Crash::Tear { at, bytes }) => {
            format!("{} at {}, then SIGKILL", torn(bytes), point(at))
        }
        Some(Crash::PowerCut { at }) => format!(
            "SIGKILL at {}, then a power cut (the log's unsynced tail dropped)",
            point(at)
        ),
        Some(Crash::Timer { micros }) => {
            let last = history
                .and_then(|h| h.lives.first())
                .and_then(|l| l.trace.as_deref())
                .and_then(|t| {
                    let n = t.lines().count();
                    t.lines()
                        .last()
                        .map(|l| format!("; last crash point passed: hit {} {l}", n - 1))
                })
                .unwrap_or_default();
            format!("SIGKILL by timer after {micros} µs{last}")
        }
        Some(Crash::Syscall { at, fault }) => sys_fault_text(
            fault,
            &syscall_text(0, at, prepared.syscalls.as_ref(), history),
        ),
    };
    for life in 1..=plan.later.len() as u32 {
        let Some(crash) = plan.crash_of(life) else {
            break;
        };
        let later = prepared.later_of(plan.prefix(life as usize));
        // In its recovery: before it reported its recovery (as the trial
        // saw it), or at a hit before the traced life's last recovery hit.
        let in_recovery = |at: u64| {
            history
                .and_then(|h| h.lives.get(life as usize))
                .map(|l| l.recovered_again.is_none())
                .or_else(|| {
                    later.and_then(|t| {
                        let last = t.hits.iter().rposition(|h| h.contains("recover"))?;
                        Some(at as usize <= last)
                    })
                })
        };
        let point = |at: u64| {
            let name = later
                .and_then(|t| {
                    t.hits
                        .get(at as usize)
                        .map(|n| format!(" of {}: {n}", t.hits.len()))
                })
                .unwrap_or_default();
            let phase = match in_recovery(at) {
                Some(true) => " (in its recovery)",
                Some(false) => " (after its recovery)",
                None => "",
            };
            format!("its hit {at}{name}{phase}")
        };
        let text = match crash {
            Crash::Kill { at } => format!("killed at {}", point(at)),
            Crash::Tear { at, bytes } => format!("{} at {}, then killed", torn(bytes), point(at)),
            Crash::Syscall { at, fault } => sys_fault_text(
                fault,
                &syscall_text(life, at, later.and_then(|t| t.syscalls.as_ref()), history),
            ),
            Crash::PowerCut { .. } | Crash::Timer { .. } => {
                unreachable!("the plan parser refuses {crash} in a restarted life")
            }
        };
        s.push_str(&format!("; restarted life {life}: {text}"));
    }
    s
}

fn torn(bytes: u64) -> String {
    if bytes >= u64::from(u32::MAX) {
        "torn write (all but the last byte)".to_string()
    } else {
        format!("torn write (first {bytes} bytes)")
    }
}

fn sys_fault_text(fault: SysFault, call: &str) -> String {
    match fault {
        SysFault::KillBefore => format!("SIGKILL before {call}"),
        SysFault::KillAfter => format!("SIGKILL after {call}"),
        SysFault::Tear { bytes } => {
            format!("torn write (first {bytes} bytes), then SIGKILL, at {call}")
        }
        SysFault::Enospc => format!("ENOSPC injected at {call}; the process went on"),
        SysFault::Eio => format!("EIO injected at {call}; the process went on"),
    }
}

/// The one-line command that reruns a trial (or a probe: its `plan` is
/// `probe:…`); `store_args` are the flags that choose the store
/// (`--adapter 'CMD'`), as the agent gets them.
pub fn replay_command(
    path: &Path,
    plan: &dyn std::fmt::Display,
    store_fault: Option<&str>,
    store_args: &[String],
) -> String {
    let mut cmd = format!(
        "agentchaos replay --scenario {} --plan {plan}",
        crate::shell::word(&path.display().to_string())
    );
    if let Some(f) = store_fault {
        cmd.push_str(&format!(" --store-fault {f}"));
    }
    for a in store_args {
        cmd.push(' ');
        cmd.push_str(&crate::shell::word(a));
    }
    cmd
}

/// The flags a replay command passes to choose the campaign's store:
/// `--store-fault NAME` and/or the backend's (`--adapter 'LINE'`).
pub fn store_flags(store_fault: Option<&str>, store_args: &[String]) -> Vec<String> {
    store_fault
        .iter()
        .flat_map(|f| ["--store-fault".to_string(), f.to_string()])
        .chain(store_args.iter().cloned())
        .collect()
}

/// The result of one trial.
#[derive(Debug, Clone)]
pub struct TrialOutcome {
    pub scenario: usize,
    pub plan: Plan,
    pub crash_point: String,
    pub violations: Vec<Violation>,
    /// The trial could not be carried out as planned.
    pub error: Option<String>,
    /// The error is the store's fault, not the harness's
    /// ([`trial::TrialError::store_fault`]).
    pub store_fault: bool,
    /// The first process's crash hit, for coverage.
    pub covered_hit: Option<u64>,
    /// What the trial exercised, for the scorecard.
    pub evidence: Evidence,
    pub started: Instant,
    pub finished: Instant,
}

/// `n` sampled plans: a fifth from the restarted lives' plans `later`
/// (when there are any), the rest from `first(k, rng)`, the first life's.
fn sample_with_later(
    n: usize,
    later: Vec<Plan>,
    rng: &mut Rng,
    first: impl FnOnce(usize, &mut Rng) -> Vec<Plan>,
) -> Vec<Plan> {
    let k = if later.is_empty() { 0 } else { n / 5 };
    let mut plans = first(n - k, rng);
    plans.extend((0..k).map(|_| *rng.pick(&later)));
    plans
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
    let result = trial::run(&setup(cfg, &prepared.source), plan, dir, RunKind::Trial);
    let evidence = result
        .as_ref()
        .map(|h| Evidence::of(h, &plan, &prepared.trace.hits))
        .unwrap_or_default();
    let (violations, error, crash_point, covered_hit) = match &result {
        Ok(h) => {
            let covered = match plan.crash {
                Some(Crash::Timer { .. }) => h.lives[0]
                    .trace
                    .as_deref()
                    .and_then(|t| t.lines().count().checked_sub(1))
                    .filter(|_| h.lives[0].end == trial::LifeEnd::Killed)
                    .map(|n| n as u64),
                c => c.and_then(|c| c.hit()),
            };
            (
                check::check(h, Some(&prepared.reference)),
                h.error
                    .clone()
                    .or_else(|| syscall_mismatch(&plan, prepared, h)),
                describe_crash(&plan, prepared, Some(h)),
                covered,
            )
        }
        Err(e) => (
            Vec::new(),
            Some(e.message.clone()),
            describe_crash(&plan, prepared, None),
            None,
        ),
    };
    let store_fault = result.as_ref().is_err_and(|e| e.store_fault);
    let failed = !violations.is_empty() || error.is_some();
    if let (Some(keep), true) = (&cfg.keep_failures, failed) {
        let replay = replay_command(
            &prepared.source.path,
            &plan,
            cfg.store_fault.as_deref(),
            &cfg.backend.agent_args(),
        );
        keep_trial(
            keep,
            dir,
            &prepared.source,
            &plan,
            &violations,
            error.as_deref(),
            &replay,
        );
    }
    let _ = std::fs::remove_dir_all(dir);
    TrialOutcome {
        scenario,
        plan,
        crash_point,
        violations,
        error,
        store_fault,
        covered_hit,
        evidence,
        started,
        finished: Instant::now(),
    }
}

/// Copies a directory tree (trial directories hold only files and directories).
pub fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let ty = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if ty.is_dir() {
            copy_dir(&entry.path(), &dest)?;
        } else if ty.is_file() {
            std::fs::copy(entry.path(), dest)?;
        }
    }
    Ok(())
}

fn keep_trial(
    keep: &Path,
    dir: &Path,
    source: &ScenarioSource,
    plan: &Plan,
    violations: &[Violation],
    error: Option<&str>,
    replay: &str,
) {
    let dest = keep.join(&source.scenario.name).join(plan.to_string());
    let _ = std::fs::remove_dir_all(&dest);
    if copy_dir(dir, &dest).is_err() {
        return;
    }
    let mut notes = format!(
        "scenario: {}\nplan: {plan}\nreplay: {replay}\n",
        source.path.display(),
    );
    if let Some(e) = error {
        notes.push_str(&format!("error: {e}\n"));
    }
    for v in violations {
        notes.push_str(&format!(
            "\n{} ({})\n  expected: {}\n  found: {}\n  events: {}\n",
            v.invariant,
            v.when,
            v.expected,
            v.found,
            v.events.join(", ")
        ));
    }
    let _ = std::fs::write(dest.join("VIOLATIONS.txt"), notes);
}

/// Per-scenario results.
#[derive(Debug, Clone)]
pub struct ScenarioResult {
    pub prepared: Prepared,
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

    /// Syscalls of the traced run that a trial faulted as planned.
    pub fn covered_syscalls(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.error.is_none())
            .filter_map(|o| match o.plan.syscall_fault() {
                Some((0, at, _)) => Some(at),
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
            .map(|v| (Plan::NONE, "none (the crash-free run)", v));
        trace.chain(self.outcomes.iter().flat_map(|o| {
            o.violations
                .iter()
                .map(move |v| (o.plan, o.crash_point.as_str(), v))
        }))
    }

    /// The probes' violations, with the probe that found each.
    pub fn probe_violations(&self) -> impl Iterator<Item = (&probe::Probe, &Violation)> {
        self.prepared
            .probes
            .iter()
            .flat_map(|p| p.violations.iter().map(move |v| (&p.probe, v)))
    }

    /// Probes that could not be carried out.
    pub fn probe_errors(&self) -> impl Iterator<Item = (&probe::Probe, &str)> {
        self.prepared
            .probes
            .iter()
            .filter_map(|p| p.error.as_deref().map(|e| (&p.probe, e)))
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
            .filter_map(|o| o.error.as_deref().map(|e| (o.plan, e)))
            .collect();
        if let Some(u) = &self.prepared.unusable {
            e.insert(0, (Plan::NONE, u));
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
}

impl CampaignResult {
    pub fn trials_per_second(&self) -> f64 {
        self.trials as f64 / self.elapsed.as_secs_f64().max(1e-9)
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
    /// The trial errors that are the store's fault: it broke the adapter
    /// protocol or refused the harness's observation. They fail a run like
    /// violations (exit 1); the other errors are the harness's (exit 3).
    pub fn store_error_count(&self) -> usize {
        self.scenarios
            .iter()
            .flat_map(|s| &s.outcomes)
            .filter(|o| o.error.is_some() && o.store_fault)
            .count()
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

/// A fresh, unique campaign directory under `base`.
pub fn campaign_dir(base: &Path) -> Result<PathBuf, String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    // Fixed width: the workspace path is in `session_created`, so a replay
    // writes the same bytes as the campaign only if its path is as long.
    let dir = base.join(format!("agentchaos-{:010}-{nanos:08x}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create the trial directory {}: {e}", dir.display()))?;
    Ok(dir)
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
            &power_loss_config(cfg),
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
    })
}

/// States per crash point and model when power loss runs inside `run`
/// (enumerated up to it, sampled beyond; `agentchaos powerloss` defaults
/// to 256): enough to reach every ordering of a few unsynced writes.
pub const RUN_POWER_LOSS_STATES: usize = 64;

/// Crash points per scenario when power loss runs inside an exhaustive
/// `run` (seeded, always the first and the last op; `agentchaos powerloss`
/// takes every op): through an adapter every state costs a store process,
/// and this keeps the nemesis within about what the trials cost.
pub const RUN_POWER_LOSS_POINTS: usize = 48;

/// The power-loss nemesis of a `run`: every persistence model,
/// [`RUN_POWER_LOSS_POINTS`] crash points per scenario (`--trials N`: N),
/// through the store's adapter, or agentstore served by this binary.
fn power_loss_config(cfg: &Config<'_>) -> crate::campaign::powercampaign::Config {
    let adapter = match cfg.backend.adapter_line() {
        Some(line) => line.to_string(),
        None => crate::campaign::powercampaign::reference_adapter(
            &cfg.agent_exe,
            cfg.store_fault.as_deref(),
            &cfg.backend.agent_args(),
        ),
    };
    crate::campaign::powercampaign::Config {
        adapter,
        agent_exe: cfg.agent_exe.clone(),
        models: crate::nemesis::powerloss::Model::ALL.to_vec(),
        max_states: RUN_POWER_LOSS_STATES,
        max_points: Some(match cfg.mode {
            Mode::Exhaustive => RUN_POWER_LOSS_POINTS,
            Mode::Sampled(n) => n,
        }),
        seed: cfg.seed,
        jobs: cfg.jobs,
        dir: cfg.dir.clone(),
        progress: cfg.progress,
    }
}

fn run_in(
    cfg: &Config<'_>,
    sources: Vec<ScenarioSource>,
    claimed: &[Capability],
    dir: &Path,
) -> Result<(Vec<ScenarioResult>, usize), TrialError> {
    // Trace runs, in parallel too: they are trials like any other. The
    // probes then work on copies of each crash-free run's store.
    let prepared = parallel(cfg.jobs, sources.len(), |i| {
        let trace = dir.join(format!("trace{i}"));
        let prepared = prepare_keeping(cfg, sources[i].clone(), &trace).map(|mut p| {
            // Probes are not trials: with --shard, the first shard runs them all.
            if p.unusable.is_none() && cfg.shard.is_none_or(|(k, _)| k == 1) {
                p.probes = run_probes(cfg, &p, claimed, &trace);
            }
            p
        });
        let _ = std::fs::remove_dir_all(&trace);
        prepared
    });
    let prepared: Vec<Prepared> = prepared
        .into_iter()
        .map(|r| r.map_err(TrialError::from).and_then(|p| p))
        .collect::<Result<_, _>>()?;
    let mut jobs: Vec<(usize, Plan)> = Vec::new();
    for (s, p) in prepared.iter().enumerate() {
        if p.unusable.is_some() {
            continue;
        }
        let mut rng = Rng::derive(cfg.seed, &p.source.scenario.name, 0);
        let mut plans = Vec::new();
        if cfg.nemesis.points {
            let later: Vec<Plan> = p
                .later
                .iter()
                .flat_map(|t| t.point_plans(&mut rng))
                .collect();
            plans.extend(match cfg.mode {
                Mode::Exhaustive => nemesis::exhaustive(&p.trace, &mut rng)
                    .into_iter()
                    .chain(later)
                    .collect(),
                Mode::Sampled(n) => sample_with_later(n, later, &mut rng, |k, rng| {
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
                    sample_with_later(n, later, &mut rng, |k, rng| sys.sample(k, rng))
                }
            });
        }
        jobs.extend(plans.into_iter().map(|plan| (s, plan)));
    }
    if let Some((k, n)) = cfg.shard {
        jobs = jobs
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % n == k - 1)
            .map(|(_, j)| j)
            .collect();
    }
    let bar = progress_bar(cfg.progress, jobs.len());
    let outcomes = parallel(cfg.jobs, jobs.len(), |i| {
        let (s, plan) = jobs[i];
        let o = run_trial(cfg, &prepared[s], s, plan, &dir.join(format!("{s}-{i}")));
        if let Some(b) = &bar {
            b.inc(1);
        }
        o
    });
    let outcomes: Vec<TrialOutcome> = outcomes
        .into_iter()
        .zip(&jobs)
        .map(|(o, &(s, plan))| {
            o.unwrap_or_else(|e| {
                let now = Instant::now();
                TrialOutcome {
                    scenario: s,
                    plan,
                    crash_point: describe_crash(&plan, &prepared[s], None),
                    violations: Vec::new(),
                    error: Some(e),
                    store_fault: false,
                    covered_hit: None,
                    evidence: Evidence::default(),
                    started: now,
                    finished: now,
                }
            })
        })
        .collect();
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let trials = outcomes.len();
    let mut per: Vec<Vec<TrialOutcome>> = vec![Vec::new(); prepared.len()];
    for o in outcomes {
        per[o.scenario].push(o);
    }
    let results = prepared
        .into_iter()
        .zip(per)
        .map(|(prepared, outcomes)| {
            let wall = match (
                outcomes.iter().map(|o| o.started).min(),
                outcomes.iter().map(|o| o.finished).max(),
            ) {
                (Some(a), Some(b)) => b - a,
                _ => Duration::ZERO,
            };
            ScenarioResult {
                prepared,
                outcomes,
                wall,
            }
        })
        .collect();
    Ok((results, trials))
}

fn progress_bar(enabled: bool, total: usize) -> Option<indicatif::ProgressBar> {
    if !enabled {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} trials  {per_sec}  eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}

/// Why an index of [`parallel`] has no result: SIGINT or SIGTERM arrived
/// before it started.
pub const NOT_RUN: &str = "not run: interrupted by a signal";

/// Runs `f(0..n)` on `jobs` threads; results in index order. A panic in
/// `f` (a harness bug) becomes that index's `Err`, never a crash of the
/// campaign. Once SIGINT or SIGTERM arrived ([`agentstore::interrupt`]), no
/// thread starts another index (those that run finish, their children
/// waited for) and each index not started is `Err(NOT_RUN)`.
pub fn parallel<T: Send>(
    jobs: usize,
    n: usize,
    f: impl Fn(usize) -> T + Sync,
) -> Vec<Result<T, String>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<T, String>>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, n.max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n || agentstore::interrupt::requested() {
                    break;
                }
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i))).map_err(|p| {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_else(|| "unknown panic".to_string());
                        format!("harness bug (panic): {msg}")
                    });
                results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(NOT_RUN.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_keeps_order_and_runs_everything() {
        let out = parallel(3, 20, |i| i * 2);
        assert_eq!(out, (0..20).map(|i| Ok(i * 2)).collect::<Vec<_>>());
        assert!(parallel(2, 0, |i| i).is_empty());
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let out = parallel(2, 3, |i| if i == 1 { panic!("boom") } else { i });
        std::panic::set_hook(hook);
        assert_eq!(out[0], Ok(0));
        assert!(out[1].as_ref().unwrap_err().contains("boom"));
    }

    #[test]
    fn replay_commands_quote_odd_paths() {
        let p = Plan::kill(3);
        assert_eq!(
            replay_command(Path::new("scenarios/a.json"), &p, Some("mark-twice"), &[]),
            "agentchaos replay --scenario scenarios/a.json --plan kill@3 --store-fault mark-twice"
        );
        assert!(
            replay_command(Path::new("my dir/a.json"), &p, None, &[]).contains("'my dir/a.json'")
        );
        let adapter = ["--adapter".to_string(), "/bin/store adapter".to_string()];
        assert!(replay_command(Path::new("a.json"), &p, None, &adapter)
            .ends_with("--plan kill@3 --adapter '/bin/store adapter'"));
    }
}
