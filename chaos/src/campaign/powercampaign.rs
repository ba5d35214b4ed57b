//! The power-loss campaign: record one crash-free run of each scenario with
//! every file operation of the agent and its store, then, for each crash
//! point and persistence model, build every on-disk state the model allows
//! ([`crate::nemesis::powerloss`]), run the store's own recovery on it through its
//! adapter, and judge it with the checker's invariants
//! ([`check::check_recovery`]).
//!
//! Owns: the recording run (the agent and its adapter traced by
//! [`crate::nemesis::syscall`], acks placed between ops by their stdout offsets),
//! the per-state recovery and observation, naming
//! the persistence assumption of a failing state, and replay. Never: judges
//! a state itself (the checker does), or writes outside its directories.
//!
//! Linux x86_64 only (the recorder). Recovery only: no agent resumes the
//! scenario on a crash state, because the world's and the workspace's state
//! at an arbitrary op is not part of the recording; the kill campaign
//! (`agentchaos run`) covers resumed outcomes.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentchaos_protocol::event::Seq;
use serde_json::Value;

use crate::agent::wire::{parse_line, ChildLine, ReportedCall, ServedContext};
use crate::agent::world::World;
use crate::campaign::config::ScenarioSource;
use crate::campaign::powersites::SiteCover;
use crate::check::{self, Invariant, Reference};
use crate::history::{Append, History, Life, LifeEnd, RecoveryReport};
use crate::nemesis::powerloss::{CrashState, Fate, Limits, Loss, Model, OpLog, Simulator, Tree};
use crate::nemesis::syscall::{Exit, TraceConfig, Traced};
use crate::store::adapter::{AdapterBackend, AdapterCommand, Capability, Client, ClientOptions};
use crate::store::{
    Observation, ReferenceBackend, SessionSpec, StoreBackend, StoreError, StoreResult,
};

/// The session every recording writes.
const SESSION: &str = "session";
/// A recording run that has not finished in this long is killed.
const RECORD_WATCHDOG: Duration = Duration::from_secs(120);
/// Variables of the other nemeses: never inherited by the recorded agent.
const CONTROLLED_ENV: &[&str] = &[
    "AGENTCHAOS_TRACE",
    "AGENTCHAOS_KILL_AT",
    "AGENTCHAOS_TEAR",
    "AGENTCHAOS_SYNC_LOG",
    crate::scenario::interleaving::SCHEDULE_ENV,
    agentstore::fault::FAULT_ENV,
];
/// The check a state fails when the store cannot open or recover it.
pub const OPENS: &str = "opens-and-recovers";

/// Everything a power-loss campaign needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The adapter command line (`--adapter`).
    pub adapter: String,
    /// The `agentchaos` binary (its hidden `agent` subcommand is recorded).
    pub agent_exe: PathBuf,
    pub models: Vec<Model>,
    /// States per crash point and model (enumerated up to it, sampled beyond).
    pub max_states: usize,
    /// Crash points per scenario: all when `None` or when there are fewer.
    pub max_points: Option<usize>,
    pub seed: u64,
    pub jobs: usize,
    /// Parent of the campaign directory.
    pub dir: PathBuf,
    pub progress: bool,
    /// The largest scenario file the agent reads (`--max-input-bytes`).
    pub max_input_bytes: u64,
}

impl Config {
    /// The power-loss nemesis of campaign `cfg`: its limits, through the
    /// store's adapter, or agentstore served by this binary.
    pub fn of_campaign(cfg: &crate::campaign::config::Config<'_>) -> Config {
        let adapter = match cfg.backend.adapter_line() {
            Some(line) => line.to_string(),
            None => reference_adapter(
                &cfg.agent_exe,
                cfg.store_fault.as_deref(),
                &cfg.backend.agent_args(),
            ),
        };
        Config {
            adapter,
            agent_exe: cfg.agent_exe.clone(),
            models: cfg.power_loss.models.clone(),
            max_states: cfg.power_loss.max_states,
            max_points: Some(cfg.power_loss.points(cfg.mode)),
            seed: cfg.seed,
            jobs: cfg.jobs,
            dir: cfg.dir.clone(),
            progress: cfg.progress,
            max_input_bytes: cfg.max_input_bytes,
        }
    }
}

/// Why the power-loss nemesis could not judge a scenario (or replay a
/// state), and whose fault that is: a campaign decides its exit code from
/// the variant, never from the message. What the store does with a crash
/// state is never an error: a failed recovery is a finding ([`OPENS`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PowerLossError {
    /// The store under test failed the recording or the harness's look at
    /// it: the recorded agent exited 1 (its store refused or broke the
    /// adapter protocol), the adapter broke the protocol at `hello`, or it
    /// refused, for a reason other than I/O, to serve the recorded
    /// session. The store's failure (exit 1).
    #[error("the store under test failed: {0}")]
    Store(String),
    /// The harness could not: its directories, the world, the tracer
    /// (ptrace), a recording the model cannot express, a state a replay's
    /// choice does not name, an adapter that cannot be started. Exit 3.
    #[error("{0}")]
    Harness(String),
}

/// A power-loss campaign that could not run, blamed as its error is.
impl From<PowerLossError> for crate::campaign::trial::TrialError {
    fn from(e: PowerLossError) -> Self {
        crate::campaign::trial::TrialError {
            store_fault: e.store_fault(),
            message: e.to_string(),
        }
    }
}

impl PowerLossError {
    /// Whether the store under test is to blame ([`PowerLossError::Store`]).
    pub fn store_fault(&self) -> bool {
        matches!(self, PowerLossError::Store(_))
    }

    /// A failure of the adapter's: the store's unless the harness's side
    /// failed ([`crate::store::StoreError::store_fault`]).
    fn of_store(e: &crate::store::StoreError, what: &str) -> PowerLossError {
        let message = format!("{what}: {e}");
        if e.store_fault() {
            PowerLossError::Store(message)
        } else {
            PowerLossError::Harness(message)
        }
    }
}

/// One append of the recorded agent, placed among the ops.
#[derive(Debug, Clone)]
pub struct RecordedAppend {
    pub type_name: String,
    pub fingerprint: String,
    /// The byte offset of its announcement line in the agent's stdout.
    pub line: u64,
    /// Ops completed when the agent announced it (before the store saw it).
    pub announced_after: usize,
    /// Its seq and the ops completed when the agent wrote the ack line.
    pub ack: Option<(Seq, usize)>,
}

/// A scenario's recorded crash-free run.
#[derive(Debug)]
pub struct Recording {
    pub snapshot: Tree,
    pub log: OpLog,
    pub appends: Vec<RecordedAppend>,
    /// The crash-free log, for log-prefix.
    pub reference: Reference,
    /// The workspace the session is bound to (kept for the recoveries).
    pub workspace: PathBuf,
}

/// Runs the agent once, crash-free, under the recorder; whatever its
/// processes leave running is killed at its end ([`crate::child::within`]).
pub fn record(
    cfg: &Config,
    source: &ScenarioSource,
    dir: &Path,
) -> Result<Recording, PowerLossError> {
    crate::child::within(
        || format!("the power-loss recording of {}", source.scenario.name),
        || record_marked(cfg, source, dir),
    )
}

fn record_marked(
    cfg: &Config,
    source: &ScenarioSource,
    dir: &Path,
) -> Result<Recording, PowerLossError> {
    let root = dir.join("root");
    let ws = dir.join("ws");
    std::fs::create_dir_all(&root)
        .map_err(|e| PowerLossError::Harness(format!("cannot create {}: {e}", root.display())))?;
    crate::agent::tools::populate(&ws, &source.scenario.files).map_err(|e| {
        PowerLossError::Harness(format!(
            "cannot populate the workspace {}: {e}",
            ws.display()
        ))
    })?;
    let world = World::start(&dir.join("w.sock"))
        .map_err(|e| PowerLossError::Harness(format!("cannot start the world: {e}")))?;
    let snapshot = Tree::capture(&root).map_err(|e| PowerLossError::Harness(e.to_string()))?;
    let stderr_path = dir.join("agent.stderr");
    let stderr = std::fs::File::create(&stderr_path).map_err(|e| {
        PowerLossError::Harness(format!("cannot create {}: {e}", stderr_path.display()))
    })?;
    let mut cmd = Command::new(&cfg.agent_exe);
    cmd.arg("agent")
        .arg("--scenario")
        .arg(&source.path)
        .arg("--max-input-bytes")
        .arg(cfg.max_input_bytes.to_string())
        .arg("--root")
        .arg(&root)
        .arg("--session")
        .arg(SESSION)
        .arg("--workspace")
        .arg(&ws)
        .arg("--world")
        .arg(world.path())
        .arg("--life")
        .arg("0")
        .arg("--adapter")
        .arg(&cfg.adapter)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr);
    for var in CONTROLLED_ENV {
        cmd.env_remove(var);
    }
    let config = TraceConfig {
        root: root.clone(),
        fault: None,
        record: true,
        seccomp: crate::nemesis::syscall::seccomp_from_env()
            .map_err(|e| PowerLossError::Harness(e.to_string()))?,
        reads: false,
    };
    // The tracer must stay on the thread that spawned the agent.
    let (tx, rx) = mpsc::channel();
    let tracer = std::thread::spawn(move || {
        let mut traced =
            Traced::spawn(cmd, config).map_err(|e| PowerLossError::Harness(e.to_string()))?;
        let _ = tx.send((traced.stdout.take(), traced.monitor()));
        traced
            .run()
            .map_err(|e| PowerLossError::Harness(e.to_string()))
    });
    let mut stdout = Vec::new();
    if let Ok((out, monitor)) = rx.recv() {
        let watchdog = crate::child::Watchdog::arm(RECORD_WATCHDOG, move || monitor.kill());
        if let Some(mut out) = out {
            let _ = out.read_to_end(&mut stdout);
        }
        watchdog.disarm();
    }
    let outcome = tracer
        .join()
        .map_err(|_| PowerLossError::Harness("the tracer thread panicked".into()))??;
    let last_stderr = std::fs::read_to_string(&stderr_path)
        .unwrap_or_default()
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    if outcome.exit != (Exit::Code { code: 0 }) {
        let message = format!(
            "the recorded crash-free run failed ({:?}): {last_stderr}",
            outcome.exit
        );
        // The agent exits 1 when its store failed it, 3 when its harness
        // side did (`agentchaos agent`).
        return Err(if outcome.exit == (Exit::Code { code: 1 }) {
            PowerLossError::Store(message)
        } else {
            PowerLossError::Harness(message)
        });
    }
    let log = outcome
        .oplog
        .ok_or_else(|| PowerLossError::Harness("the tracer returned no op log".into()))?;
    if let Some(g) = log.gaps.first() {
        return Err(PowerLossError::Harness(format!(
            "the recording has {} gap(s) the model cannot express; first: pid {} syscall #{}: {}",
            log.gaps.len(),
            g.pid,
            g.syscall,
            g.what
        )));
    }
    let appends = placed_appends(&stdout, &log)?;
    let spec = SessionSpec {
        root,
        session: SESSION.to_string(),
        workspace: ws.clone(),
    };
    let records = AdapterBackend::forking(&cfg.adapter)
        .map_err(|e| PowerLossError::Harness(format!("--adapter: {e}")))?
        .observe(&spec)
        .map_err(|e| PowerLossError::of_store(&e, "cannot read the recorded session"))?
        .records;
    drop(world);
    Ok(Recording {
        snapshot,
        log,
        appends,
        reference: Reference {
            records,
            world: Vec::new(),
            workspace: BTreeMap::new(),
        },
        workspace: ws,
    })
}

/// The agent's append and ack lines, each placed by the stdout offset of
/// its last byte.
fn placed_appends(stdout: &[u8], log: &OpLog) -> Result<Vec<RecordedAppend>, PowerLossError> {
    let mut out: Vec<RecordedAppend> = Vec::new();
    let mut end = 0u64;
    for line in stdout.split_inclusive(|&b| b == b'\n') {
        let start = end;
        end += line.len() as u64;
        let Some(text) = line.strip_suffix(b"\n") else {
            return Err(PowerLossError::Harness(
                "the recorded agent's last stdout line has no newline".into(),
            ));
        };
        let text = std::str::from_utf8(text).map_err(|_| {
            PowerLossError::Harness("the recorded agent wrote a line that is not UTF-8".into())
        })?;
        let after = log.ops_before_output(end - 1).ok_or_else(|| {
            PowerLossError::Harness(format!(
                "stdout byte {} was not seen by the recorder",
                end - 1
            ))
        })?;
        let line = parse_line(text).map_err(|e| PowerLossError::Harness(e.to_string()))?;
        match line {
            ChildLine::Append { t, h } => out.push(RecordedAppend {
                type_name: t,
                fingerprint: h,
                line: start,
                announced_after: after,
                ack: None,
            }),
            // The first unanswered one: a parallel group has several in flight.
            ChildLine::Ack { seq, t, h } => match out
                .iter_mut()
                .find(|a| a.ack.is_none() && a.fingerprint == h && a.type_name == t)
            {
                Some(a) => a.ack = Some((seq, after)),
                None => {
                    return Err(PowerLossError::Harness(format!(
                        "the recorded agent acked {t} without announcing it"
                    )))
                }
            },
            // The store's account of its syncs: the power cut has its own.
            ChildLine::Done | ChildLine::Synced { .. } | ChildLine::SyncFailed => {}
            other => {
                return Err(PowerLossError::Harness(format!(
                    "unexpected line from a first life: {other:?}"
                )))
            }
        }
    }
    Ok(out)
}

/// One broken promise in one state, as reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The invariant's name, or [`OPENS`].
    pub check: String,
    pub when: String,
    pub expected: String,
    pub found: String,
    pub events: Vec<String>,
}

/// What the store did with one crash state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// It refused to open with `damage`, and every acknowledged event is in
    /// the verified part before the damage: only un-acknowledged bytes were
    /// garbled. Not a violation; counted and reported.
    Refused(String),
    Fail(Vec<Finding>),
}

/// How states are read and recovered.
#[derive(Debug)]
pub struct Judge<'a> {
    pub backend: AdapterBackend,
    /// The adapter says it is agentstore: its files are also read directly
    /// (log bytes, torn tail, snapshot), so a snapshot left unreadable is
    /// seen even though recovery ignores it.
    pub agentstore_files: bool,
    /// The adapter serves a projection (the fold is compared with it).
    pub serves_projection: bool,
    pub recording: &'a Recording,
}

impl<'a> Judge<'a> {
    pub fn new(adapter: &str, recording: &'a Recording) -> Result<Judge<'a>, PowerLossError> {
        let command = AdapterCommand::parse(adapter)
            .map_err(|e| PowerLossError::Harness(format!("--adapter: {e}")))?;
        let client = Client::spawn(command.to_command(), ClientOptions::default())
            .map_err(|e| PowerLossError::of_store(&StoreError::from(e), "--adapter"))?;
        let agentstore_files = client.hello().name == "agentstore";
        let serves_projection = client.claims(Capability::CheckpointProjection);
        let _ = client.shutdown();
        Ok(Judge {
            backend: AdapterBackend::forking(adapter)
                .map_err(|e| PowerLossError::Harness(format!("--adapter: {e}")))?,
            agentstore_files,
            serves_projection,
            recording,
        })
    }

    fn observe(&self, spec: &SessionSpec) -> StoreResult<Observation> {
        if !self.agentstore_files {
            return self.backend.observe(spec);
        }
        let mut obs = ReferenceBackend::default().observe(spec)?;
        // A store that serves no projection has nothing to compare the oracle's with.
        if !self.serves_projection {
            obs.fold = None;
        }
        Ok(obs)
    }

    /// Materializes `state` into `dir` (which must not exist), recovers it
    /// twice through the adapter, observes it before and after, and checks.
    pub fn judge(&self, state: &CrashState, dir: &Path) -> Verdict {
        let mut verdict = self.judge_in(state, dir);
        let _ = std::fs::remove_dir_all(dir);
        // Paths inside the (deleted) state directory, as the store named
        // them, read the same in every run: STATE/sessions/….
        let root = dir.join("root").display().to_string();
        match &mut verdict {
            Verdict::Fail(findings) => {
                for f in findings {
                    f.found = f.found.replace(&root, "STATE");
                }
            }
            Verdict::Refused(why) => *why = why.replace(&root, "STATE"),
            Verdict::Pass => {}
        }
        verdict
    }

    fn judge_in(&self, state: &CrashState, dir: &Path) -> Verdict {
        let root = dir.join("root");
        if let Err(e) = state.materialize(&root) {
            return opens_failure("materializing the state", format!("{e}"));
        }
        let spec = SessionSpec {
            root,
            session: SESSION.to_string(),
            workspace: self.recording.workspace.clone(),
        };
        let k = state.crash_after;
        let life0 = Life {
            writes: self
                .recording
                .appends
                .iter()
                .filter(|a| a.announced_after <= k)
                .map(|a| Append {
                    type_name: a.type_name.clone(),
                    fingerprint: a.fingerprint.clone(),
                    line: a.line,
                    acked: a.ack.filter(|&(_, at)| at <= k).map(|(seq, _)| seq),
                    refused: false,
                })
                .collect(),
            end: LifeEnd::Killed,
            ..Life::started(0, None)
        };
        let before = match self.observe(&spec) {
            Ok(o) => o,
            Err(e) => return opens_failure("reading the state before recovery", e.message),
        };
        if let Some(damage) = before.damage.clone() {
            let h = History {
                lives: vec![life0],
                after_kill: vec![before.clone()],
                power_cut: Vec::new(),
                final_obs: before,
                world: Vec::new(),
                workspace: BTreeMap::new(),
                error: None,
            };
            let found = check::check_recovery(&h, &self.recording.reference);
            let lost_acked = found.iter().any(|v| v.invariant == Invariant::AckedDurable);
            return if lost_acked {
                Verdict::Fail(findings(found))
            } else {
                Verdict::Refused(damage)
            };
        }
        let first = match self.recover(&spec) {
            Ok(r) => r,
            Err(e) => return opens_failure("the first recovery", e.message),
        };
        let after1 = match self.observe(&spec) {
            Ok(o) => o,
            Err(e) => {
                return opens_failure("reading the state after the first recovery", e.message)
            }
        };
        let again = match self.recover(&spec) {
            Ok((r, _, _)) => r.appended,
            Err(e) => return opens_failure("the second recovery", e.message),
        };
        let after2 = match self.observe(&spec) {
            Ok(o) => o,
            Err(e) => {
                return opens_failure("reading the state after the second recovery", e.message)
            }
        };
        let (report, contexts, projection) = first;
        let life1 = Life {
            recovered: Some(RecoveryReport {
                appended: report.appended,
                interrupted: report.interrupted_runs,
                uncertain: report
                    .uncertain
                    .into_iter()
                    .map(|u| ReportedCall {
                        call_id: u.call_id,
                        phase: u.phase,
                    })
                    .collect(),
                block: crate::agent::recovery_block(&contexts[0].text),
                contexts,
                projection,
            }),
            after_recovery: Some(after1),
            recovered_again: Some(again),
            after_second_recovery: Some(after2.clone()),
            ..Life::started(1, None)
        };
        let h = History {
            lives: vec![life0, life1],
            after_kill: vec![before],
            power_cut: Vec::new(),
            final_obs: after2,
            world: Vec::new(),
            workspace: BTreeMap::new(),
            error: None,
        };
        let found = check::check_recovery(&h, &self.recording.reference);
        if found.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Fail(findings(found))
        }
    }

    /// What a restarted agent does first: open (creating the session if
    /// it is gone), recover, render the context, read the projection, close.
    fn recover(
        &self,
        spec: &SessionSpec,
    ) -> StoreResult<(crate::store::Recovered, Vec<ServedContext>, Value)> {
        // Which request failed, in the message: the finding names it.
        let at = |op: &'static str| {
            move |e: StoreError| StoreError {
                message: format!("{op}: {}", e.message),
                ..e
            }
        };
        let mut store = self.backend.open(spec).map_err(at("open"))?;
        let rec = store.recover().map_err(at("recover"))?;
        let contexts = crate::agent::served_contexts(store.as_mut()).map_err(at("context"))?;
        let projection = store.projection().map_err(at("projection"))?;
        store.close().map_err(at("close"))?;
        Ok((rec, contexts, projection))
    }
}

fn opens_failure(during: &str, error: String) -> Verdict {
    Verdict::Fail(vec![Finding {
        check: OPENS.to_string(),
        when: during.to_string(),
        expected: "the store opens and recovers every state the model allows (refusing with damage only where no acknowledged event is lost)".into(),
        found: error,
        events: Vec::new(),
    }])
}

fn findings(violations: Vec<check::Violation>) -> Vec<Finding> {
    violations
        .into_iter()
        .map(|v| Finding {
            check: v.invariant.name().to_string(),
            when: v
                .when
                .replace("after life 0 was killed", "after the power loss")
                .replace("in life 1", "")
                .replace("  ", " ")
                .trim()
                .to_string(),
            expected: v.expected.replace(
                "acknowledged to life 0",
                "acknowledged before the power loss",
            ),
            found: v.found.replace(
                "acknowledged to life 0",
                "acknowledged before the power loss",
            ),
            events: v.events,
        })
        .collect()
}

/// A state that failed, with everything needed to explain and replay it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub model: Model,
    pub crash_after: usize,
    pub choice: Vec<u32>,
    /// The last op applied before the power loss, in words.
    pub after_op: Option<String>,
    pub losses: Vec<Loss>,
    pub findings: Vec<Finding>,
    /// What the state did with every un-synced item (kept, dropped, torn,
    /// garbled), or why the simulator could not tell (shared: a failure
    /// is cloned into the report).
    pub fates: Result<Vec<Fate>, std::sync::Arc<crate::nemesis::powerloss::Error>>,
}

/// The states of one model at one crash point.
#[derive(Debug, Clone, Default)]
pub struct PointStats {
    pub states: usize,
    pub exhaustive: bool,
    pub passed: usize,
    pub refused: usize,
    pub failed: usize,
}

/// Per scenario and model.
#[derive(Debug, Clone, Default)]
pub struct ModelStats {
    pub points: usize,
    pub states: usize,
    pub sampled_points: usize,
    pub passed: usize,
    pub refused: usize,
    pub failed: usize,
}

/// One scenario's campaign.
#[derive(Debug)]
pub struct ScenarioReport {
    pub source: ScenarioSource,
    pub ops: usize,
    pub acked: usize,
    pub crash_points: usize,
    /// The recording's durability sites and the crash point that reached
    /// each ([`crate::campaign::powersites`]).
    pub sites: Vec<SiteCover>,
    pub models: Vec<(Model, ModelStats)>,
    /// The first failing state (lowest crash point) of each broken
    /// invariant, minimized.
    pub failures: Vec<Failure>,
    /// States judged (distinct trees per crash point; shared across models).
    pub judged: usize,
    pub refusals: Vec<String>,
    pub error: Option<PowerLossError>,
    pub record_time: Duration,
    pub check_time: Duration,
}

/// The whole campaign.
#[derive(Debug)]
pub struct CampaignReport {
    pub scenarios: Vec<ScenarioReport>,
    pub elapsed: Duration,
    /// The models the states were built under.
    pub models: Vec<Model>,
    /// At most this many states per crash point and model.
    pub max_states: usize,
    /// The adapter command line the states were recovered through.
    pub adapter: String,
}

impl CampaignReport {
    pub fn failures(&self) -> usize {
        self.scenarios.iter().map(|s| s.failures.len()).sum()
    }
    pub fn errors(&self) -> usize {
        self.scenarios.iter().filter(|s| s.error.is_some()).count()
    }
    /// The errors that are the store's fault ([`PowerLossError::Store`]).
    pub fn store_errors(&self) -> usize {
        let store = |s: &&ScenarioReport| s.error.as_ref().is_some_and(|e| e.store_fault());
        self.scenarios.iter().filter(store).count()
    }
    pub fn states(&self) -> usize {
        self.scenarios
            .iter()
            .flat_map(|s| &s.models)
            .map(|(_, m)| m.states)
            .sum()
    }
    pub fn judged(&self) -> usize {
        self.scenarios.iter().map(|s| s.judged).sum()
    }
    /// Every durability site of the recordings, once, in the order first
    /// seen, and whether a crash state of any scenario reached it.
    pub fn durability_sites(&self) -> Vec<(&crate::campaign::powersites::Site, bool)> {
        let mut out: Vec<(&crate::campaign::powersites::Site, bool)> = Vec::new();
        for c in self.scenarios.iter().flat_map(|s| &s.sites) {
            let reached = c.crash_after.is_some();
            match out.iter_mut().find(|(s, _)| **s == c.site) {
                Some((_, r)) => *r |= reached,
                None => out.push((&c.site, reached)),
            }
        }
        out
    }
}

/// Runs the campaign over `sources`.
pub fn run(cfg: &Config, sources: Vec<ScenarioSource>) -> Result<CampaignReport, PowerLossError> {
    let started = Instant::now();
    let dir = crate::campaign::scratch::campaign_dir(&cfg.dir)
        .map_err(|e| PowerLossError::Harness(e.to_string()))?;
    let mut scenarios = Vec::new();
    for (i, source) in sources.into_iter().enumerate() {
        if agentstore::interrupt::requested() {
            break;
        }
        scenarios.push(run_scenario(
            cfg,
            source,
            &crate::campaign::scratch::trace_dir(&dir, i),
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    if agentstore::interrupt::requested() {
        return Err(PowerLossError::Harness(
            crate::campaign::pool::NOT_RUN.into(),
        ));
    }
    Ok(CampaignReport {
        scenarios,
        elapsed: started.elapsed(),
        models: cfg.models.clone(),
        max_states: cfg.max_states,
        adapter: cfg.adapter.clone(),
    })
}

fn empty_report(
    source: ScenarioSource,
    error: PowerLossError,
    record_time: Duration,
) -> ScenarioReport {
    ScenarioReport {
        source,
        ops: 0,
        acked: 0,
        crash_points: 0,
        sites: Vec::new(),
        models: Vec::new(),
        failures: Vec::new(),
        judged: 0,
        refusals: Vec::new(),
        error: Some(error),
        record_time,
        check_time: Duration::ZERO,
    }
}

/// The outcome of one crash point, all models.
struct PointOutcome {
    stats: Vec<(Model, PointStats)>,
    failures: Vec<Failure>,
    refusals: Vec<String>,
    judged: usize,
}

fn run_scenario(cfg: &Config, source: ScenarioSource, dir: &Path) -> ScenarioReport {
    let t0 = Instant::now();
    let recording = match record(cfg, &source, &dir.join("rec")) {
        Ok(r) => r,
        Err(e) => return empty_report(source, e, t0.elapsed()),
    };
    let record_time = t0.elapsed();
    let judge = match Judge::new(&cfg.adapter, &recording) {
        Ok(j) => j,
        Err(e) => return empty_report(source, e, record_time),
    };
    let t1 = Instant::now();
    let ops = recording.log.ops.len();
    let plan = crate::campaign::powersites::plan(
        &recording.log,
        cfg.max_points,
        cfg.seed,
        &source.scenario.name,
    );
    let points = plan.points;
    let limits = Limits {
        max_states: cfg.max_states,
        seed: cfg.seed,
    };
    let progress = crate::campaign::pool::Progress::start(
        cfg.progress,
        points.len(),
        &format!("crash points of {}", source.scenario.name),
    );
    let results = crate::campaign::pool::parallel(cfg.jobs, points.len(), |i| {
        let r = crate::timing::outside_trials(crate::timing::Role::Recovery, || {
            check_point(
                &judge,
                &cfg.models,
                &limits,
                points[i],
                &dir.join(format!("p{i}")),
            )
        });
        if let Some(p) = &progress {
            p.inc(r.as_ref().map_or(0, |o| o.failures.len()));
        }
        r
    });
    if let Some(p) = progress {
        p.finish();
    }
    let mut report = ScenarioReport {
        ops,
        acked: recording.appends.iter().filter(|a| a.ack.is_some()).count(),
        crash_points: points.len(),
        sites: plan.sites,
        models: cfg
            .models
            .iter()
            .map(|&m| (m, ModelStats::default()))
            .collect(),
        failures: Vec::new(),
        judged: 0,
        refusals: Vec::new(),
        error: None,
        record_time,
        check_time: Duration::ZERO,
        source,
    };
    let mut seen: Vec<String> = Vec::new();
    for r in results {
        let r = r.map_err(|e| PowerLossError::Harness(e.to_string()));
        let outcome = match r.and_then(|x| x) {
            Ok(o) => o,
            Err(e) => {
                report.error.get_or_insert(e);
                continue;
            }
        };
        report.judged += outcome.judged;
        for (model, s) in outcome.stats {
            let Some((_, m)) = report.models.iter_mut().find(|(x, _)| *x == model) else {
                continue;
            };
            m.points += 1;
            m.states += s.states;
            m.sampled_points += usize::from(!s.exhaustive);
            m.passed += s.passed;
            m.refused += s.refused;
            m.failed += s.failed;
        }
        report.refusals.extend(outcome.refusals);
        for f in outcome.failures {
            // One failing state per broken invariant: the first crash point.
            if !seen.contains(&f.findings[0].check) {
                seen.push(f.findings[0].check.clone());
                report.failures.push(f);
            }
        }
    }
    report.refusals.sort();
    report.refusals.dedup();
    // Name the assumption precisely: keep only the losses the failure needs.
    let minimized: Vec<Failure> = report
        .failures
        .iter()
        .enumerate()
        .map(|(i, f)| minimize(&judge, f, &dir.join(format!("min{i}"))))
        .collect();
    report.failures = minimized;
    report.check_time = t1.elapsed();
    report
}

/// Every model's states at crash point `k`; a tree judged once per point
/// is not judged again for another model (each model contains the one
/// before it, so most trees repeat).
fn check_point(
    judge: &Judge<'_>,
    models: &[Model],
    limits: &Limits,
    k: usize,
    dir: &Path,
) -> Result<PointOutcome, PowerLossError> {
    let mut sim = Simulator::new(&judge.recording.snapshot, &judge.recording.log);
    sim.advance_to(k)
        .map_err(|e| PowerLossError::Harness(e.to_string()))?;
    let mut cache: HashMap<u64, Vec<(Tree, Verdict)>> = HashMap::new();
    let mut out = PointOutcome {
        stats: Vec::new(),
        failures: Vec::new(),
        refusals: Vec::new(),
        judged: 0,
    };
    for &model in models {
        let states = sim.crash_states(model, limits);
        let mut stats = PointStats {
            states: states.states.len(),
            exhaustive: states.exhaustive,
            ..PointStats::default()
        };
        // The checks already reported at this point for this model.
        let mut reported: Vec<String> = Vec::new();
        for (i, state) in states.states.iter().enumerate() {
            // A state through a slow adapter takes seconds, a point dozens
            // of them: SIGINT or SIGTERM stops here, not after the point.
            if agentstore::interrupt::requested() {
                return Err(PowerLossError::Harness(
                    crate::campaign::pool::NOT_RUN.into(),
                ));
            }
            let mut h = std::collections::hash_map::DefaultHasher::new();
            state.tree.hash(&mut h);
            let bucket = cache.entry(h.finish()).or_default();
            let verdict = match bucket.iter().find(|(t, _)| *t == state.tree) {
                Some((_, v)) => v.clone(),
                None => {
                    out.judged += 1;
                    let v = judge.judge(state, &dir.join(format!("{}-{i}", model.name())));
                    bucket.push((state.tree.clone(), v.clone()));
                    v
                }
            };
            match verdict {
                Verdict::Pass => stats.passed += 1,
                Verdict::Refused(why) => {
                    stats.refused += 1;
                    out.refusals.push(why);
                }
                Verdict::Fail(mut findings) => {
                    stats.failed += 1;
                    // The first state to break each check, with that check
                    // first (it is what the failure is reported and
                    // minimized for).
                    if let Some(n) = findings.iter().position(|f| !reported.contains(&f.check)) {
                        reported.push(findings[n].check.clone());
                        findings.swap(0, n);
                        out.failures.push(Failure {
                            model,
                            crash_after: k,
                            choice: state.choice.clone(),
                            after_op: last_op(&judge.recording.log, k),
                            losses: state.losses.clone(),
                            findings,
                            fates: sim.fates(model, &state.choice).map_err(std::sync::Arc::new),
                        });
                    }
                }
            }
        }
        out.stats.push((model, stats));
    }
    Ok(out)
}

/// Turns back to "kept" every choice the failure does not need (one pass):
/// what remains are the losses the store relied on not happening.
fn minimize(judge: &Judge<'_>, f: &Failure, dir: &Path) -> Failure {
    let mut sim = Simulator::new(&judge.recording.snapshot, &judge.recording.log);
    if sim.advance_to(f.crash_after).is_err() || f.model == Model::Strict {
        return f.clone();
    }
    let key = (&f.findings[0].check, &f.findings[0].expected);
    let mut best = f.clone();
    for i in 0..best.choice.len() {
        if best.choice[i] == 0 {
            continue;
        }
        let mut c = best.choice.clone();
        c[i] = 0;
        let Ok(state) = sim.state(f.model, &c) else {
            continue;
        };
        if let Verdict::Fail(mut findings) = judge.judge(&state, &dir.join(i.to_string())) {
            if let Some(n) = findings.iter().position(|x| (&x.check, &x.expected) == key) {
                findings.swap(0, n);
                best = Failure {
                    model: f.model,
                    crash_after: f.crash_after,
                    fates: sim.fates(f.model, &c).map_err(std::sync::Arc::new),
                    choice: c,
                    after_op: f.after_op.clone(),
                    losses: state.losses,
                    findings,
                };
            }
        }
    }
    best
}

/// `MODEL:K:CHOICE`, the state a replay rebuilds (CHOICE: the alternative
/// at each choice point, dot-separated; `-` for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateId {
    pub model: Model,
    pub crash_after: usize,
    pub choice: Vec<u32>,
}

impl std::fmt::Display for StateId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let choice: Vec<String> = self.choice.iter().map(u32::to_string).collect();
        let choice = if choice.is_empty() {
            "-".to_string()
        } else {
            choice.join(".")
        };
        write!(f, "{}:{}:{choice}", self.model, self.crash_after)
    }
}

/// A power-loss state's name that is not one (`--plan powerloss:…`): bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadStateId(String);

impl std::str::FromStr for StateId {
    type Err = BadStateId;
    fn from_str(s: &str) -> Result<StateId, BadStateId> {
        let bad = || BadStateId(format!("{s:?} is not MODEL:K:CHOICE (e.g. weak:12:0.1.0)"));
        let mut parts = s.splitn(3, ':');
        let (Some(m), Some(k), Some(c)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let model: Model = m.parse::<Model>().map_err(|e| BadStateId(e.to_string()))?;
        let crash_after = k.parse().map_err(|_| bad())?;
        let choice = if c == "-" {
            Vec::new()
        } else {
            c.split('.')
                .map(|x| x.parse().map_err(|_| bad()))
                .collect::<Result<_, _>>()?
        };
        Ok(StateId {
            model,
            crash_after,
            choice,
        })
    }
}

/// How `agentchaos replay --plan` names one power-loss state:
/// `powerloss:MODEL:K:CHOICE`.
pub const PLAN_PREFIX: &str = "powerloss:";

/// The one-line command that rebuilds a failing state and recovers it;
/// `store_flags` choose the store as the campaign's command line did
/// (`--adapter 'LINE'`, `--store-fault NAME`, or nothing for agentstore).
pub fn replay_command(path: &Path, store_flags: &[String], id: &StateId) -> String {
    crate::campaign::config::replay_command(path, &format!("{PLAN_PREFIX}{id}"), None, store_flags)
}

/// The adapter command line of the reference store, served by the
/// `agentchaos` binary `exe` (its hidden `reference-adapter` command),
/// with a fault profile if any, and `store_args` (the in-process backend's
/// [`StoreBackend::agent_args`]: `--durability batch`).
pub fn reference_adapter(exe: &Path, fault: Option<&str>, store_args: &[String]) -> String {
    let word = crate::shell::word;
    let mut serve = format!("{} reference-adapter", word(&exe.display().to_string()));
    for a in store_args {
        serve.push(' ');
        serve.push_str(&word(a));
    }
    match fault {
        Some(f) => format!("env {}={} {serve}", agentstore::fault::FAULT_ENV, word(f)),
        None => serve,
    }
}

/// The result of a replay.
#[derive(Debug)]
pub struct Replayed {
    pub state: CrashState,
    pub op: Option<String>,
    pub verdict: Verdict,
    /// What the state did with every un-synced item.
    pub fates: Vec<Fate>,
}

/// Records the scenario again, rebuilds state `id` and judges it. With
/// `keep`, the state (before recovery) is also written there.
pub fn replay(
    cfg: &Config,
    source: &ScenarioSource,
    id: &StateId,
    keep: Option<&Path>,
) -> Result<Replayed, PowerLossError> {
    let dir = crate::campaign::scratch::campaign_dir(&cfg.dir)
        .map_err(|e| PowerLossError::Harness(e.to_string()))?;
    let result = (|| {
        // As long a path as the campaign's: the same bytes at the same offsets.
        let scenario_dir = crate::campaign::scratch::trace_dir(&dir, 0);
        let recording = record(cfg, source, &scenario_dir.join("rec"))?;
        let judge = Judge::new(&cfg.adapter, &recording)?;
        let mut sim = Simulator::new(&recording.snapshot, &recording.log);
        sim.advance_to(id.crash_after)
            .map_err(|e| PowerLossError::Harness(e.to_string()))?;
        let state = sim.state(id.model, &id.choice).map_err(|e| {
            PowerLossError::Harness(format!(
                "{e} (the recorded run made {} ops; a replay needs the same run)",
                recording.log.ops.len()
            ))
        })?;
        if let Some(k) = keep {
            state
                .materialize(k)
                .map_err(|e| PowerLossError::Harness(e.to_string()))?;
        }
        let fates = sim
            .fates(id.model, &id.choice)
            .map_err(|e| PowerLossError::Harness(e.to_string()))?;
        let verdict = judge.judge(&state, &dir.join("state"));
        let op = last_op(&recording.log, id.crash_after);
        Ok(Replayed {
            state,
            op,
            verdict,
            fates,
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// `op #K-1 (write …)`: the last op applied at crash point `k`.
fn last_op(log: &OpLog, k: usize) -> Option<String> {
    let i = k.checked_sub(1)?;
    log.ops.get(i).map(|o| format!("op #{i} ({})", o.op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adapter_failure_is_the_stores_unless_it_is_io_or_the_harnesss() {
        let broke = StoreError::other("adapter protocol error: not JSON".into());
        let io = StoreError {
            io: true,
            ..broke.clone()
        };
        let spawn = StoreError {
            harness: true,
            ..broke.clone()
        };
        let blame = |e: &StoreError| PowerLossError::of_store(e, "hello").store_fault();
        assert!(blame(&broke));
        assert!(!blame(&io));
        assert!(!blame(&spawn));
        assert_eq!(
            PowerLossError::of_store(&broke, "hello").to_string(),
            "the store under test failed: hello: adapter protocol error: not JSON"
        );
    }

    #[test]
    fn state_ids_round_trip_and_bad_ones_say_why() {
        for s in ["weak:12:0.1.0.7", "strict:0:-", "ext4-ordered:3:1"] {
            let id: StateId = s.parse().unwrap();
            assert_eq!(id.to_string(), s);
        }
        let id: StateId = "weak:12:0.1".parse().unwrap();
        assert_eq!(
            (id.model, id.crash_after, id.choice),
            (Model::Weak, 12, vec![0, 1])
        );
        for bad in ["weak", "weak:x:0", "weak:1:0.a", "fast:1:0"] {
            assert!(bad.parse::<StateId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn findings_speak_of_the_power_loss_not_of_lives() {
        let v = check::Violation {
            invariant: Invariant::AckedDurable,
            when: "after life 0 was killed, before recovery".into(),
            expected: "all 3 acknowledged events in the log at their seqs".into(),
            found: "2 of them missing or changed: from run_started at seq 1 (acknowledged to life 0) to user_message at seq 2 (acknowledged to life 0); at the first, the log ends before seq 1 (1 event)".into(),
            events: vec![],
        };
        let f = &findings(vec![v])[0];
        assert_eq!(f.when, "after the power loss, before recovery");
        assert!(!f.found.contains("life 0"), "{}", f.found);
        assert!(f.found.contains("(acknowledged before the power loss)"));
    }
}
