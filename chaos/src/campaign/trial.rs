//! One trial: real agent processes killed by the nemesis, and what the
//! harness observed of them (Jepsen's history).
//!
//! A trial owns a directory (store root, workspace, world socket, sync log,
//! each process's stderr) and a [`World`]. It spawns the agent (life 0),
//! lets the [`Plan`] kill it, applies a power cut if planned, observes the
//! disk, and restarts the agent (life 1, 2, …) until one finishes. While a
//! restarted agent pauses after each of its two recoveries, the harness
//! observes the disk. Every kill must really be a SIGKILL; anything else is
//! an error of the trial. This module records facts; it must never judge
//! them (that is [`crate::check`]).
//!
//! The life a plan faults at a syscall (and in a syscall trace run, the
//! first life the plan does not crash) runs under the ptrace tracer
//! ([`crate::nemesis::syscall`]) with the store root as the trace root; its counted
//! syscalls, the fault report and, for injected errors, the recorded
//! operations with the agent's stdout writes between them go into
//! [`Life::syscalls`]. A crash-point trace run likewise traces the first
//! life its plan does not crash. A process that goes on after an injected
//! error and then gives up (exits non-zero) is restarted like a killed
//! one; a fault that was not injected as planned is an error of the trial.
//!
//! Through an adapter, a life that is not traced and that a crash point
//! kills, or nothing kills, gets its store processes made ahead
//! ([`StoreBackend::life_processes`]: forked by a fork server, protocol
//! version 2, or else started warm) and handed down to the agent; they
//! are SIGKILLed as soon as the agent has ended and reaped once it is
//! (every other life starts its own adapters, as in version 1). A trial
//! that ends right after an observation after a kill reads the disk once
//! for that observation and the final one.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::agent::wire::{parse_line, ChildLine};
use crate::agent::world::World;
use crate::agent::{self, tools};
use crate::history::{
    Append, History, Life, LifeEnd, RecoveryReport, RunKind, SyncLine, SyscallLife,
};
use crate::nemesis::syscall::{
    self, FaultOutcome, FaultPlan, FaultReport, Monitor, TraceConfig, Traced,
};
use crate::nemesis::{self, Crash, Plan};
use crate::store::adapter::backend::LifeAdapters;
use crate::store::{Observation, SessionSpec, StoreBackend};

pub use crate::history::TrialError;

/// No campaign directory: the harness's.
impl From<crate::campaign::scratch::CampaignDirError> for TrialError {
    fn from(e: crate::campaign::scratch::CampaignDirError) -> TrialError {
        TrialError::from(e.to_string())
    }
}

/// A trial the pool could not run (a panic, a signal): the harness's.
impl From<crate::campaign::pool::PoolError> for TrialError {
    fn from(e: crate::campaign::pool::PoolError) -> TrialError {
        TrialError::from(e.to_string())
    }
}

/// An agent life that has neither finished nor died in this long is hung,
/// by default (`--hang-timeout`).
pub const HANG_TIMEOUT: Duration = Duration::from_secs(60);

/// Lives after which a trial gives up (each planned kill adds one).
const MAX_LIVES: u32 = 4;

/// Environment variables the harness controls; never inherited.
const CONTROLLED_ENV: &[&str] = &[
    "AGENTCHAOS_TRACE",
    "AGENTCHAOS_KILL_AT",
    "AGENTCHAOS_TEAR",
    "AGENTCHAOS_SYNC_LOG",
    crate::scenario::interleaving::SCHEDULE_ENV,
    agentstore::fault::FAULT_ENV,
];

/// What is needed to run trials of one scenario.
#[derive(Debug, Clone)]
pub struct TrialSetup<'a> {
    pub backend: &'a dyn StoreBackend,
    /// The `agentchaos` binary (its hidden `agent` subcommand is the child).
    pub agent_exe: &'a Path,
    pub scenario_path: &'a Path,
    pub files: &'a BTreeMap<String, String>,
    /// `AGENTSTORE_FAULT` for the child, if any.
    pub store_fault: Option<&'a str>,
    /// A life that runs this long is hung (killed, the store's failure).
    pub hang_timeout: Duration,
    /// The largest scenario file the agent reads (`--max-input-bytes`).
    pub max_input_bytes: u64,
    /// The parallel appenders' interleaving seed (0: the default schedule).
    pub schedule: u64,
}

/// Paths inside a trial directory.
#[derive(Debug, Clone)]
pub struct TrialDir {
    pub dir: PathBuf,
}

impl TrialDir {
    /// The store root of the trial's session.
    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }
    pub fn spec(&self) -> SessionSpec {
        SessionSpec {
            root: self.root(),
            session: "session".to_string(),
            workspace: self.dir.join("ws"),
        }
    }
    pub fn world(&self) -> PathBuf {
        self.dir.join("w.sock")
    }
    pub fn sync_log(&self) -> PathBuf {
        self.dir.join("synced")
    }
    pub fn trace(&self) -> PathBuf {
        self.dir.join("trace")
    }
    fn stderr(&self, life: u32) -> PathBuf {
        self.dir.join(format!("life{life}.stderr"))
    }
    /// Where life `life`'s agent records its timings (`--timings`).
    fn timings(&self, life: u32) -> PathBuf {
        self.dir.join(format!("life{life}.timings"))
    }
}

/// Runs one trial in `dir` (created empty by the caller's parent; must not
/// exist); whatever its processes leave running is killed at its end
/// ([`crate::child::within`]).
pub fn run(
    setup: &TrialSetup<'_>,
    plan: Plan,
    dir: &Path,
    kind: RunKind,
) -> Result<History, TrialError> {
    assert!(
        plan.sched == 0 || plan.sched == setup.schedule,
        "the plan {plan} runs on a scenario source of schedule {}",
        setup.schedule
    );
    crate::child::within(
        || {
            let scenario = setup
                .scenario_path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            match kind {
                RunKind::Trial => format!("the trial {plan} of {scenario}"),
                _ => format!("a trace run ({plan}) of {scenario}"),
            }
        },
        || run_marked(setup, plan, dir, kind),
    )
}

fn run_marked(
    setup: &TrialSetup<'_>,
    plan: Plan,
    dir: &Path,
    kind: RunKind,
) -> Result<History, TrialError> {
    let td = TrialDir {
        dir: dir.to_path_buf(),
    };
    let spec = td.spec();
    // Store processes started ahead and not taken die with the trial.
    struct CoolDown<'a>(&'a dyn StoreBackend);
    impl Drop for CoolDown<'_> {
        fn drop(&mut self) {
            self.0.cool_down();
        }
    }
    let _cool_down = CoolDown(setup.backend);
    prepare(setup, &td)?;
    let world = World::start(&td.world()).map_err(|e| format!("cannot start the world: {e}"))?;
    let observe = |what: &str| {
        setup.backend.observe(&spec).map_err(|e| TrialError {
            message: format!("cannot observe the store {what}: {e}"),
            store_fault: e.store_fault(),
        })
    };

    let mut lives: Vec<Life> = Vec::new();
    let mut after_kill = Vec::new();
    let mut power_cut = Vec::new();
    // Whether the trial ends right after an observation after a kill.
    let mut last_is_final = false;
    let error = loop {
        let index = lives.len() as u32;
        let crash = plan.crash_of(index);
        let mut env = life_env(&plan, kind, index, &td);
        env.extend(crate::scenario::interleaving::env(setup.schedule));
        let kill_at = env
            .iter()
            .find(|(k, _)| *k == "AGENTCHAOS_KILL_AT")
            .and_then(|(_, v)| v.parse().ok());
        let timer = match crash {
            Some(Crash::Timer { micros }) => Some(Duration::from_micros(micros)),
            _ => None,
        };
        let mut life = run_life(
            setup,
            &td,
            &LifeSpec {
                index,
                kill_at,
                env: &env,
                timer,
                syscall: trace_config(&plan, kind, index, &spec)?,
                // A kill at a crash point lands between two requests, where
                // a forked store child waits idle for its SIGKILL.
                forkable: forkable(crash),
                warm_next: warm_next(&plan, kind, index),
            },
            &observe,
        )?;
        // Killed by the signal's sweep, not by the plan: no verdict.
        if agentstore::interrupt::requested() {
            return Err(crate::child::INTERRUPTED.to_string().into());
        }
        if env.iter().any(|(k, _)| *k == "AGENTCHAOS_TRACE") {
            life.trace = Some(std::fs::read_to_string(td.trace()).unwrap_or_default());
        }
        let end = life.end;
        let fault_missed = planned_fault_missed(crash, &life);
        let next = next_step(crash, kill_at, index, &life, setup.hang_timeout);
        lives.push(life);
        if let Some(e) = fault_missed {
            if end == LifeEnd::Killed {
                after_kill.push(observe("after the kill")?);
                last_is_final = true;
            }
            break Some(format!("life {index}: {e}").into());
        }
        let planned_power_cut = end == LifeEnd::Killed
            && matches!(crash, Some(Crash::PowerCut { .. }))
            && !matches!(next, Next::Stop(_));
        if planned_power_cut {
            power_cut =
                nemesis::power_cut(&td.sync_log()).map_err(|e| format!("power cut failed: {e}"))?;
        }
        match next {
            Next::Restart { observe: what } => after_kill.push(observe(what)?),
            Next::GiveUp { observe: what, why } => {
                after_kill.push(observe(what)?);
                last_is_final = true;
                break Some(why.into());
            }
            Next::Stop(error) => break error,
        }
    };
    // No process ran since the last observation after a kill: the disk is
    // as that observer read it, and one reading serves as both.
    let final_obs = match after_kill.last() {
        Some(last) if last_is_final => last.clone(),
        _ => observe("at the end")?,
    };
    let workspace = tools::snapshot(&spec.workspace).map_err(|e| {
        format!(
            "cannot read the workspace {}: {e}",
            spec.workspace.display()
        )
    })?;
    Ok(History {
        lives,
        after_kill,
        power_cut,
        final_obs,
        world: world.applications(),
        workspace,
        error,
    })
}

/// Creates the trial directory and fills the scenario's workspace.
fn prepare(setup: &TrialSetup<'_>, td: &TrialDir) -> Result<(), TrialError> {
    std::fs::create_dir_all(&td.dir)
        .map_err(|e| format!("cannot create {}: {e}", td.dir.display()))?;
    let workspace = td.spec().workspace;
    tools::populate(&workspace, setup.files)
        .map_err(|e| format!("cannot populate the workspace {}: {e}", workspace.display()))?;
    Ok(())
}

/// The environment of life `index`: its planned crash and, in a crash-point
/// trace run, the trace of the first life the plan does not crash.
fn life_env(plan: &Plan, kind: RunKind, index: u32, td: &TrialDir) -> Vec<(&'static str, String)> {
    let mut env = plan.env(index, &td.sync_log(), &td.trace());
    if kind == RunKind::TracePoints && index == plan.crashed_lives() as u32 {
        // Hits and syscalls interleaved in one file: the trace knows where the log was unsynced.
        env.push(("AGENTCHAOS_TRACE", td.trace().display().to_string()));
        env.push(("AGENTCHAOS_SYNC_LOG", td.trace().display().to_string()));
    }
    if kind == RunKind::Trial {
        let faulted = plan.crash_of(index).is_some();
        env.extend(crate::coverage::life_env(&td.dir, index, faulted));
    }
    env
}

/// Whether a life ending in `crash` may have its store processes made
/// ahead: a kill at a crash point lands between two requests, where a
/// forked (or warm) store process waits idle for its SIGKILL.
fn forkable(crash: Option<Crash>) -> bool {
    matches!(crash, None | Some(Crash::Kill { .. }))
}

/// How many store processes to start ahead while life `index` runs (an
/// adapter that cannot fork, [`StoreBackend::warm_up`]): the observers of
/// its two pauses after a restart and the one after it ends, and, when the
/// plan kills it, those of the next life if that one can take them.
fn warm_next(plan: &Plan, kind: RunKind, index: u32) -> usize {
    let observers = if index > 0 { 3 } else { 1 };
    let next = index + 1;
    let traced = matches!(plan.crash_of(next), Some(Crash::Syscall { .. }))
        || (kind == RunKind::TraceSyscalls && next == plan.crashed_lives() as u32);
    let restarts = plan.crash_of(index).is_some() && next < MAX_LIVES;
    let next_life = if restarts && forkable(plan.crash_of(next)) && !traced {
        agent::opens(next)
    } else {
        0
    };
    observers + next_life
}

/// Whether life `index` runs under the syscall tracer, and how: when its
/// crash is a syscall fault, or in a syscall trace run for the first life
/// the plan does not crash.
fn trace_config(
    plan: &Plan,
    kind: RunKind,
    index: u32,
    spec: &SessionSpec,
) -> Result<Option<TraceConfig>, TrialError> {
    let fault = match plan.crash_of(index) {
        Some(Crash::Syscall { at, fault }) => Some((at, fault)),
        _ => None,
    };
    let traced_life = plan.crashed_lives() as u32;
    if fault.is_none() && !(kind == RunKind::TraceSyscalls && index == traced_life) {
        return Ok(None);
    }
    // The tracer's root must exist before the traced process starts.
    std::fs::create_dir_all(&spec.root)
        .map_err(|e| format!("cannot create {}: {e}", spec.root.display()))?;
    Ok(Some(TraceConfig {
        root: spec.root.clone(),
        fault: fault.map(|(at, f)| FaultPlan {
            at,
            fault: f.to_syscall(),
        }),
        record: fault.is_some_and(|(_, f)| !f.kills()),
        seccomp: syscall::seccomp_from_env().map_err(|e| TrialError::from(e.to_string()))?,
        // A trace run enumerates the reads a read fault may be planned at.
        reads: kind == RunKind::TraceSyscalls,
    }))
}

/// Why a planned syscall fault did not land in `life`, if it did not.
fn planned_fault_missed(crash: Option<Crash>, life: &Life) -> Option<String> {
    let Some(Crash::Syscall { .. }) = crash else {
        return None;
    };
    match &life.syscalls {
        None => Some("the process did not run under the tracer".to_string()),
        Some(sys) => match &sys.fault {
            Some(FaultReport {
                outcome: FaultOutcome::Injected { .. },
                ..
            }) => None,
            Some(r) => Some(format!("the planned fault was not injected: {r}")),
            None => Some("the tracer made no fault report".to_string()),
        },
    }
}

/// What the trial does after a life ended.
enum Next {
    /// Observe the disk (`observe` says when) and start the next life.
    Restart { observe: &'static str },
    /// Observe the disk, then stop: the trial cannot go on as planned.
    GiveUp { observe: &'static str, why: String },
    /// Stop, with the error of the trial if any.
    Stop(Option<TrialError>),
}

fn next_step(
    crash: Option<Crash>,
    kill_at: Option<u64>,
    index: u32,
    life: &Life,
    hang_timeout: Duration,
) -> Next {
    let sys_fault = match crash {
        Some(Crash::Syscall { fault, .. }) => Some(fault),
        _ => None,
    };
    let planned_kill = kill_at.is_some()
        || matches!(crash, Some(Crash::Timer { .. }))
        || sys_fault.is_some_and(|f| f.kills());
    // An injected error that the process went on from.
    let went_on = sys_fault.is_some_and(|f| !f.kills());
    match life.end {
        LifeEnd::Exited(c) if c == i32::from(agent::EXIT_HARNESS_FAILED) => Next::Stop(Some(
            format!("life {index} failed on the harness's side: {}", life.stderr).into(),
        )),
        LifeEnd::Killed if planned_kill && index + 1 >= MAX_LIVES => Next::GiveUp {
            observe: "after the kill",
            why: format!("the agent was still not done after {MAX_LIVES} lives"),
        },
        LifeEnd::Killed if planned_kill => Next::Restart {
            observe: "after the kill",
        },
        // After an injected error the agent may give up: restart it.
        LifeEnd::Exited(c) if went_on && c != 0 => Next::Restart {
            observe: "after the process gave up",
        },
        LifeEnd::Exited(0) => Next::Stop(crash.and_then(|c| c.hit()).map(|at| {
            format!(
                "life {index} finished without reaching its hit {at} (the scenario's crash points are not deterministic?)"
            )
            .into()
        })),
        LifeEnd::Killed => Next::Stop(Some(
            format!("life {index} died of SIGKILL without a planned kill").into(),
        )),
        // The agent waits only on the store: a store that never answers
        // hangs it, as it hangs a probe (the store's failure, exit 1).
        LifeEnd::Hung => Next::Stop(Some(TrialError {
            message: format!(
                "life {index} hung: no end in {} s (--hang-timeout), killed; the agent was waiting on the store",
                hang_timeout.as_secs()
            ),
            store_fault: true,
        })),
        // A failing agent is a finding for the checker (it could not finish).
        LifeEnd::Exited(_) | LifeEnd::Signaled(_) => Next::Stop(None),
    }
}

/// How to kill a running first process: the child and the store
/// processes it started, all at once ([`crate::child::kill_tree`]), or
/// every process the tracer follows.
#[derive(Clone)]
enum Killer {
    Child(Arc<Mutex<Child>>),
    Traced(Monitor),
}

impl Killer {
    fn kill(&self) {
        match self {
            Killer::Child(c) => {
                // Held: the child is not reaped (its pid not reused) meanwhile.
                let child = c.lock().unwrap_or_else(|p| p.into_inner());
                crate::child::kill_tree(child.id());
            }
            Killer::Traced(m) => m.kill(),
        }
    }
}

/// How one agent process is started.
struct LifeSpec<'a> {
    index: u32,
    kill_at: Option<u64>,
    env: &'a [(&'static str, String)],
    /// SIGKILL from the harness after this long.
    timer: Option<Duration>,
    /// Run it under the syscall tracer.
    syscall: Option<TraceConfig>,
    /// Its store processes may be forked ahead (when it is not traced).
    forkable: bool,
    /// Store processes to start ahead for the trial's next observations
    /// and life once its agent has started ([`warm_next`]).
    warm_next: usize,
}

/// The tracer's thread: how tracing ended, and the CPU time the thread spent on it.
type TracerThread = std::thread::JoinHandle<(Result<syscall::Outcome, syscall::Error>, Duration)>;

/// What to wait for at the end of a life.
enum Running {
    Child(Arc<Mutex<Child>>),
    Traced(TracerThread),
}

/// Starts `cmd` under the tracer on a thread of its own (ptrace requests
/// must come from the thread that spawned the tracee).
fn spawn_traced(
    cmd: Command,
    config: TraceConfig,
) -> Result<(Option<ChildStdin>, ChildStdout, Monitor, TracerThread), TrialError> {
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let cpu = crate::timing::thread_cpu();
        let mut traced = match Traced::spawn(cmd, config) {
            Ok(t) => t,
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
                return (Err(e), Duration::ZERO);
            }
        };
        let pipes = (traced.stdin.take(), traced.stdout.take(), traced.monitor());
        let _ = tx.send(Ok(pipes));
        let outcome = traced.run();
        (outcome, crate::timing::thread_cpu().saturating_sub(cpu))
    });
    match rx.recv() {
        Ok(Ok((stdin, Some(stdout), monitor))) => Ok((stdin, stdout, monitor, thread)),
        Ok(Ok((_, None, monitor))) => {
            monitor.kill();
            let _ = thread.join();
            Err(TrialError::from(
                "the traced agent has no stdout pipe".to_string(),
            ))
        }
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(TrialError::from(e))
        }
        Err(_) => Err(TrialError::from(match thread.join() {
            Err(_) => "the tracer thread panicked".to_string(),
            Ok((r, _)) => format!("the tracer stopped before the agent started: {r:?}"),
        })),
    }
}

fn run_life(
    setup: &TrialSetup<'_>,
    td: &TrialDir,
    life_spec: &LifeSpec<'_>,
    observe: &dyn Fn(&str) -> Result<Observation, TrialError>,
) -> Result<Life, TrialError> {
    let LifeSpec {
        index,
        kill_at,
        timer,
        ref syscall,
        ..
    } = *life_spec;
    let stderr_path = td.stderr(index);
    let adapters = if life_spec.forkable && syscall.is_none() {
        let opens = agent::opens(index);
        setup
            .backend
            .life_processes(opens)
            .map_err(|e| TrialError {
                message: format!("cannot fork or start the store processes of life {index}: {e}"),
                store_fault: e.store_fault(),
            })?
    } else {
        None
    };
    let clock = crate::timing::life_started();
    let cmd = agent_command(setup, td, life_spec, &stderr_path, adapters.as_ref())?;
    let started = Instant::now();
    let Started {
        mut stdin,
        stdout,
        killer,
        running,
    } = crate::timing::timed(crate::timing::Part::AgentStart, || {
        start(cmd, syscall.clone(), setup.agent_exe)
    })?;
    // They load while this life runs.
    crate::timing::as_role(crate::timing::Role::Observer, || {
        setup.backend.warm_up(life_spec.warm_next)
    });
    let store_killer = match (&adapters, &running) {
        (Some(adapters), Running::Child(child)) => {
            let agent = child.lock().unwrap_or_else(|p| p.into_inner()).id();
            match adapters.kill_with(agent) {
                Ok(thread) => Some(thread),
                Err(e) => {
                    killer.kill();
                    let _ = wait(
                        running,
                        None,
                        &mut Life::started(index, kill_at),
                        Vec::new(),
                    );
                    return Err(format!("cannot watch the agent of life {index}: {e}").into());
                }
            }
        }
        _ => None,
    };
    // The agent is reaped only after it is disarmed (the tracer forgets a
    // pid before it reaps it), so its SIGKILL never reaches a recycled pid.
    let timer_killer = killer.clone();
    let watchdog = crate::child::Watchdog::arm(timer.unwrap_or(setup.hang_timeout), move || {
        timer_killer.kill()
    });
    let mut life = Life::started(index, kill_at);
    // Before each observation while the agent pauses, the store process
    // that served the recovery (the life's first, then its second) is dead.
    let closed = |i: usize| {
        if let Some(adapters) = &adapters {
            adapters.wait_ended(i, setup.hang_timeout);
        }
    };
    let reading = follow(stdout, &mut stdin, &mut life, &closed, observe);
    if reading.failure.is_some() {
        // Never leave a paused agent behind.
        killer.kill();
    }
    let timer_fired = watchdog.disarm();
    let (code, signal) = wait(running, syscall.as_ref(), &mut life, reading.acks)?;
    // The agent is gone, and so are its store processes (SIGKILLed as it
    // ended, idle, their pipes held open here): reap them.
    if let Some(thread) = store_killer {
        let _ = thread.join();
    }
    drop(adapters);
    life.micros = started.elapsed().as_micros() as u64;
    if let Some(clock) = clock {
        crate::timing::life_ended(clock, &td.timings(index));
    }
    life.end = match (code, signal) {
        (_, Some(9)) if timer_fired && timer.is_none() => LifeEnd::Hung,
        (_, Some(9)) => LifeEnd::Killed,
        (Some(code), _) => LifeEnd::Exited(code),
        (None, Some(sig)) => LifeEnd::Signaled(sig),
        (None, None) => LifeEnd::Exited(-1),
    };
    life.stderr = std::fs::read_to_string(&stderr_path)
        .unwrap_or_default()
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    if let Some(e) = reading
        .failure
        .or(reading.protocol_error.map(TrialError::from))
    {
        return Err(e);
    }
    Ok(life)
}

/// The agent process of one life: the hidden `agent` subcommand, with the
/// harness's environment only (never an inherited crash or fault variable).
fn agent_command(
    setup: &TrialSetup<'_>,
    td: &TrialDir,
    life_spec: &LifeSpec<'_>,
    stderr_path: &Path,
    adapters: Option<&LifeAdapters>,
) -> Result<Command, TrialError> {
    let spec = td.spec();
    let stderr = std::fs::File::create(stderr_path)
        .map_err(|e| format!("cannot create {}: {e}", stderr_path.display()))?;
    let mut cmd = Command::new(setup.agent_exe);
    // Started and waited for on one thread (the trial's, or the tracer's):
    // a harness killed mid-trial takes its agent along.
    crate::child::tell_to_die_with_harness(&mut cmd);
    cmd.arg("agent")
        .arg("--scenario")
        .arg(setup.scenario_path)
        .arg("--max-input-bytes")
        .arg(setup.max_input_bytes.to_string())
        .arg("--root")
        .arg(&spec.root)
        .arg("--session")
        .arg(&spec.session)
        .arg("--workspace")
        .arg(&spec.workspace)
        .arg("--world")
        .arg(td.world())
        .arg("--life")
        .arg(life_spec.index.to_string())
        .args(
            crate::timing::collecting()
                .then(|| ["--timings".into(), td.timings(life_spec.index)])
                .into_iter()
                .flatten(),
        )
        .args(setup.backend.agent_args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr);
    for var in CONTROLLED_ENV {
        cmd.env_remove(var);
    }
    if let Some(fault) = setup.store_fault {
        cmd.env(agentstore::fault::FAULT_ENV, fault);
    }
    for (k, v) in life_spec.env {
        cmd.env(k, v);
    }
    if let Some(adapters) = adapters {
        adapters
            .hand_down(&mut cmd)
            .map_err(|e| TrialError::from(e.to_string()))?;
    }
    Ok(cmd)
}

/// A started agent process: its pipes, how to kill it, what to wait for.
struct Started {
    stdin: Option<ChildStdin>,
    stdout: ChildStdout,
    killer: Killer,
    running: Running,
}

fn start(
    mut cmd: Command,
    syscall: Option<TraceConfig>,
    agent_exe: &Path,
) -> Result<Started, TrialError> {
    match syscall {
        None => {
            let mut child: Child = crate::child::spawn(&mut cmd)
                .map_err(|e| format!("cannot start the agent {}: {e}", agent_exe.display()))?;
            let stdin = child.stdin.take();
            let stdout = child.stdout.take().expect("stdout is piped");
            let child = Arc::new(Mutex::new(child));
            Ok(Started {
                stdin,
                stdout,
                killer: Killer::Child(Arc::clone(&child)),
                running: Running::Child(child),
            })
        }
        Some(config) => {
            let (stdin, stdout, monitor, thread) = spawn_traced(cmd, config)?;
            Ok(Started {
                stdin,
                stdout,
                killer: Killer::Traced(monitor),
                running: Running::Traced(thread),
            })
        }
    }
}

/// What following an agent's stdout to its end left over.
struct Reading {
    /// A line the agent's wire protocol does not allow.
    protocol_error: Option<String>,
    /// A failure of the harness itself while the child waited for it.
    failure: Option<TrialError>,
    /// Each ack: its index in [`Life::writes`] and its line's byte offset.
    acks: Vec<(usize, u64)>,
}

/// Records the agent's stdout lines into `life` until the agent closes it,
/// observing the disk while the agent pauses after each recovery.
fn follow(
    stdout: ChildStdout,
    stdin: &mut Option<ChildStdin>,
    life: &mut Life,
    closed: &dyn Fn(usize),
    observe: &dyn Fn(&str) -> Result<Observation, TrialError>,
) -> Reading {
    let mut reading = Reading {
        protocol_error: None,
        failure: None,
        acks: Vec::new(),
    };
    // Byte offset of the next line in the agent's stdout.
    let mut offset = 0u64;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let at = offset;
        offset += line.len() as u64 + 1;
        let parsed = match parse_line(&line) {
            Ok(p) => p,
            Err(e) => {
                reading.protocol_error = Some(e.to_string());
                continue;
            }
        };
        let paused = match parsed {
            ChildLine::Append { t, h } => {
                life.writes.push(Append {
                    type_name: t,
                    fingerprint: h,
                    line: at,
                    acked: None,
                    refused: false,
                });
                None
            }
            ChildLine::Refused { t, h } => {
                match announced(life, &t, &h) {
                    Some(i) => life.writes[i].refused = true,
                    None => {
                        reading.protocol_error = Some(format!(
                            "the agent reported a refusal of {t} without announcing it"
                        ))
                    }
                }
                None
            }
            ChildLine::Ack { seq, t, h } => {
                match announced(life, &t, &h) {
                    Some(i) => {
                        life.writes[i].acked = Some(seq);
                        life.syncs.push(SyncLine::Acked { write: i, seq });
                        reading.acks.push((i, at));
                    }
                    None => {
                        reading.protocol_error = Some(format!(
                            "the agent reported an ack of {t} without announcing it"
                        ))
                    }
                }
                None
            }
            ChildLine::Recovered {
                appended,
                interrupted,
                uncertain,
                block,
                contexts,
                projection,
            } => {
                life.recovered = Some(RecoveryReport {
                    appended,
                    interrupted,
                    uncertain,
                    block,
                    contexts,
                    projection,
                });
                closed(0);
                Some(observe("after the first recovery").map(|o| life.after_recovery = Some(o)))
            }
            ChildLine::RecoveredAgain { appended } => {
                life.recovered_again = Some(appended);
                closed(1);
                Some(
                    observe("after the second recovery")
                        .map(|o| life.after_second_recovery = Some(o)),
                )
            }
            ChildLine::Synced { next_seq } => {
                life.syncs.push(SyncLine::Synced(next_seq));
                None
            }
            ChildLine::SyncFailed => {
                life.syncs.push(SyncLine::SyncFailed);
                None
            }
            ChildLine::Done => {
                life.done = true;
                None
            }
        };
        match paused {
            Some(Err(e)) => {
                reading.failure = Some(e);
                break;
            }
            Some(Ok(())) => go_on(stdin),
            None => {}
        }
    }
    reading
}

/// The index of the first write the agent announced as `t`/`h` and has
/// not yet answered (acked or refused). Several are in flight at once only
/// in a parallel group, whose answers come in write order.
fn announced(life: &Life, t: &str, h: &str) -> Option<usize> {
    life.writes
        .iter()
        // Answered writes are all but the last few: test that first.
        .position(|w| w.acked.is_none() && !w.refused && w.fingerprint == h && w.type_name == t)
}

/// Reaps the agent (or joins its tracer, recording what it saw into
/// `life`): its exit code or the signal that ended it.
fn wait(
    running: Running,
    syscall: Option<&TraceConfig>,
    life: &mut Life,
    acks: Vec<(usize, u64)>,
) -> Result<(Option<i32>, Option<i32>), TrialError> {
    match running {
        Running::Child(child) => {
            let status = child
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .wait()
                .map_err(|e| format!("cannot wait for the agent: {e}"))?;
            Ok((status.code(), status.signal()))
        }
        Running::Traced(thread) => {
            let (outcome, cpu) = thread
                .join()
                .map_err(|_| "the tracer thread panicked".to_string())?;
            let outcome = outcome.map_err(|e| format!("tracing the agent failed: {e}"))?;
            crate::timing::record_ptrace(outcome.stops, cpu);
            let exit = match &outcome.exit {
                syscall::Exit::Code { code } => (Some(*code), None),
                syscall::Exit::Signal { signal } => (
                    None,
                    Some(
                        signal
                            .parse::<nix::sys::signal::Signal>()
                            .map_or(-1, |s| s as i32),
                    ),
                ),
            };
            let root = syscall.map(|c| c.root.clone()).unwrap_or_default();
            life.syscalls = Some(SyscallLife {
                root: std::fs::canonicalize(&root).unwrap_or(root),
                events: outcome.events,
                reads: outcome.reads,
                fault: outcome.fault,
                oplog: outcome.oplog,
                acks,
                stops: outcome.stops,
            });
            Ok(exit)
        }
    }
}

/// Lets a paused agent continue (it may already be dead: ignore a broken pipe).
fn go_on(stdin: &mut Option<std::process::ChildStdin>) {
    if let Some(s) = stdin.as_mut() {
        let _ = s.write_all(b"\n").and_then(|()| s.flush());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(end: LifeEnd, stderr: &str) -> Life {
        Life {
            end,
            stderr: stderr.to_string(),
            ..Life::started(0, None)
        }
    }

    #[test]
    fn an_agent_that_failed_on_the_harness_side_is_an_error_not_a_finding() {
        let harness = ended(
            LifeEnd::Exited(i32::from(agent::EXIT_HARNESS_FAILED)),
            "agentchaos: agent: cannot reach the world",
        );
        match next_step(None, None, 0, &harness, HANG_TIMEOUT) {
            Next::Stop(Some(e)) => {
                assert!(e.message.contains("cannot reach the world"), "{e}");
                assert!(!e.store_fault);
            }
            _ => panic!("a harness failure must stop the trial with an error"),
        }
        // The store's failure ends the life for the checker to judge.
        let store = ended(LifeEnd::Exited(1), "agentchaos: agent: the store refused");
        assert!(matches!(
            next_step(None, None, 0, &store, HANG_TIMEOUT),
            Next::Stop(None)
        ));
    }

    #[test]
    fn a_hung_life_is_the_stores_failure_as_a_hung_probe_is() {
        let hung = ended(LifeEnd::Hung, "");
        match next_step(None, None, 1, &hung, Duration::from_secs(7)) {
            Next::Stop(Some(e)) => {
                assert!(e.store_fault, "{e}");
                assert!(
                    e.message
                        .contains("life 1 hung: no end in 7 s (--hang-timeout)"),
                    "{e}"
                );
            }
            _ => panic!("a hung life must stop the trial with the store's error"),
        }
    }
}
