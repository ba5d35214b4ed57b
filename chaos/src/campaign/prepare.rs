//! Preparing a scenario for trials: its crash-free trace run (which
//! crash points and syscalls it passes, the reference outcome), and the
//! traces of restarted lives that plans for later lives are counted in.

use crate::campaign::config::{Config, ScenarioSource};
use std::path::Path;

use crate::campaign::trial::{self, TrialError, TrialSetup};
use crate::check::{self, Reference, Violation};
use crate::history::{History, RunKind};
use crate::model::Model;
use crate::nemesis::{self, LaterTrace, Plan, Restarts, SyscallTrace, Trace};

/// A scenario after its trace run.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub source: ScenarioSource,
    pub reference: Reference,
    pub trace: Trace,
    /// The syscall nemesis's crash-free traced run (when it is on).
    pub syscalls: Option<SyscallTrace>,
    /// How many times the tracer stopped that run's first process (and its
    /// children): what tracing one life of the session costs.
    pub syscall_stops: Option<u64>,
    /// The traced restarted lives. A restart whose trace run did not finish
    /// is left out here: the trial of its first kill reports why.
    pub later: Vec<LaterTrace>,
    /// Violations of the crash-free run itself.
    pub trace_violations: Vec<Violation>,
    /// The crash-free run's timeline, when it has violations (HTML report).
    pub trace_timeline: Option<Box<crate::timeline::Timeline>>,
    /// Why crash trials cannot run (the crash-free run did not complete),
    /// and whose fault that is.
    pub unusable: Option<TrialError>,
}

pub fn setup<'a>(cfg: &'a Config<'_>, source: &'a ScenarioSource) -> TrialSetup<'a> {
    TrialSetup {
        backend: cfg.backend,
        agent_exe: &cfg.agent_exe,
        scenario_path: &source.path,
        files: &source.scenario.files,
        store_fault: cfg.store_fault.as_deref(),
        hang_timeout: cfg.hang_timeout,
        max_input_bytes: cfg.max_input_bytes,
        schedule: source.schedule,
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
    let mut syscall_stops = None;
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
            sys_unusable = Some(TrialError {
                message: format!("the crash-free run under the syscall tracer: {e}"),
                store_fault: e.store_fault,
            });
        } else if !first.done {
            sys_unusable = Some(TrialError::from(format!(
                "the crash-free run under the syscall tracer did not complete: {}",
                first.stderr
            )));
        }
        syscall_stops = first.syscalls.as_ref().map(|s| s.stops);
        first
            .syscalls
            .as_ref()
            .map(|s| SyscallTrace::of(&s.events, &s.reads, &s.root))
    } else {
        None
    };
    let trace_violations = check::check(&history, None);
    let life = history.last();
    let records = &history.final_obs.records;
    let trace_timeline = (!trace_violations.is_empty()).then(|| {
        Box::new(crate::timeline::Timeline::of(
            &history,
            &Plan::NONE,
            &[],
            records,
        ))
    });
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
        (None, false) => Some(TrialError::from(format!(
            "the crash-free run did not complete: {}",
            life.stderr
        ))),
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
        syscall_stops,
        trace_violations,
        trace_timeline,
        unusable,
    })
}

impl Prepared {
    /// The traced restarted life that comes after the crashes `before`.
    /// The plan of its crash-free run, named with its schedule.
    pub fn crash_free(&self) -> Plan {
        Plan::NONE.scheduled(self.source.schedule)
    }

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
/// restart's at every point); with the points nemesis and every restart,
/// life 1 after [`nemesis::tear_restart`], torn again through its
/// recovery; with the syscall nemesis, the deepest restart's life 1 under
/// the tracer too; and the life 2 after a kill in the middle of that life
/// 1, at every point.
fn trace_restarts(
    cfg: &Config<'_>,
    source: &ScenarioSource,
    trace: &Trace,
    dir: &Path,
) -> Result<Vec<LaterTrace>, TrialError> {
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
    // Torn, cut, and torn again at the record of the cut: the next open
    // cuts at the same offset (quarantine-recorded sees the second cut keep
    // the first's bytes).
    let torn = match cfg.restarts {
        Restarts::All if cfg.nemesis.points => nemesis::tear_restart(trace),
        _ => None,
    };
    // Its syscalls too, with the syscall nemesis: the full-disk plans fill
    // the disk at each call of its open, the torn tail's save among them.
    if let Some(before) = torn {
        let dir = dir.with_extension("later-torn");
        out.extend(
            trace_later(cfg, source, before, cfg.nemesis.syscall, &dir)?.map(|t| LaterTrace {
                every_point: false,
                torn_again: true,
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
) -> Result<Option<LaterTrace>, TrialError> {
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
            .map(|s| SyscallTrace::of(&s.events, &s.reads, &s.root))
    } else {
        None
    };
    Ok(Some(LaterTrace {
        before,
        hits,
        syscalls,
        every_point: true,
        torn_again: false,
    }))
}
