//! The many-workers campaign (`agentchaos workers`): N worker processes
//! (`agentchaos worker`, real children, each with its own store handles)
//! serve M sessions of one store through leases; the nemesis
//! ([`WorkerPlan`]) pauses, kills or cuts off the first session's owner,
//! or crashes the database server under it, and another worker (or the
//! same, after a crash) takes over; the checker
//! ([`crate::check::workers`]) judges what the store accepted.
//!
//! For the PostgreSQL store the campaign starts a private cluster itself
//! ([`Database`]); with network namespaces the database and every worker
//! each get a namespace of their own ([`Partition`]), and the workers
//! reach the database over their own link.
//!
//! The harness is the only scheduler: it sends one command at a time to
//! one worker and waits for its reply, round-robin over the sessions, so
//! the history is the order in which the store served the requests and a
//! plan replays the same. The only wait is for the lease to expire by the
//! store's clock, observed as the next owner's `open` stops being refused
//! with `lease_held`; how long that takes never changes a verdict. This
//! module runs and records; it must never judge.

use std::io::{BufRead, BufReader, Write};
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::agent::worker::{read_effects, AppliedEffect, WorkerCommand, WorkerReply};
use crate::check::workers::{check, WorkerViolation};
use crate::history::{FinalLog, WorkerEvent};
use crate::nemesis::database::DatabaseCrash;
use crate::nemesis::partition::{self, Partition};
use crate::nemesis::workers::{LeaseFault, Needs, Strike, WorkerPlan};
use crate::shell::word;
use crate::store::{SessionSpec, StoreBackend};
use agentchaos_protocol::message::{LeaseGrant, WireRecord};
use agentchaos_protocol::ErrorKind;
use agentstore_pg::cluster::{Cluster, ClusterOptions, Listen};

mod counts;
mod crashpoints;
mod statements;
mod transitions;
use counts::PointCounts;
pub use counts::{close_point_count, strike_point_counts, takeover_point_count};
pub use crashpoints::{
    crash_point_every_plans, crash_point_plans, kill_before_takeover, takeover_every_plans,
};
pub use statements::{
    close_every_plans, leave_before_close, sampled_statement_plans, statement_plans,
    StatementCoverage, StatementUse,
};

/// How long the harness waits for one reply of a worker that is running.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the next owner asks for an expired lease.
const ACQUIRE_POLL: Duration = Duration::from_millis(10);
/// Steps after which a session that never reports done is a harness error.
const MAX_STEPS: usize = 200;

/// The store the workers share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedStore {
    /// agentstore in-process, with a fault of its own (`AGENTSTORE_FAULT`
    /// of every worker).
    InProcess { fault: Option<String> },
    /// The store behind this adapter command.
    Adapter(String),
    /// The PostgreSQL store (`agentstore-pg adapter` at `bin`, with
    /// `--fault` when given) on a private cluster the campaign starts.
    Postgres { bin: PathBuf, fault: Option<String> },
}

/// What a many-workers campaign runs.
#[derive(Debug, Clone)]
pub struct WorkersConfig {
    /// The `agentchaos` binary (the workers are `agentchaos worker`).
    pub exe: PathBuf,
    pub workers: usize,
    pub sessions: usize,
    /// The lease ttl of each worker, by index; the last one for the rest.
    pub ttl_ms: Vec<u64>,
    pub store: SharedStore,
}

impl WorkersConfig {
    /// The lease ttl of worker `index`.
    pub fn ttl_of(&self, index: usize) -> u64 {
        let last = self.ttl_ms.len().saturating_sub(1);
        self.ttl_ms.get(index.min(last)).copied().unwrap_or(0)
    }

    /// The longest lease any worker asks for.
    pub fn longest_ttl(&self) -> u64 {
        self.ttl_ms.iter().copied().max().unwrap_or(0)
    }

    /// The ttls as `--ttl-ms` spells them: `300` or `300,5000`.
    pub fn ttls(&self) -> String {
        let ttls: Vec<String> = self.ttl_ms.iter().map(u64::to_string).collect();
        ttls.join(",")
    }

    /// The one-line command that replays `plan`.
    pub fn replay(&self, plan: &WorkerPlan) -> String {
        let mut line = format!(
            "agentchaos workers --plan {plan} --workers {} --sessions {} --ttl-ms {}",
            self.workers,
            self.sessions,
            self.ttls()
        );
        match &self.store {
            SharedStore::InProcess { fault } => {
                if let Some(f) = fault {
                    line.push_str(&format!(" --store-fault {}", word(f)));
                }
            }
            SharedStore::Adapter(a) => line.push_str(&format!(" --adapter {}", word(a))),
            SharedStore::Postgres { fault, .. } => {
                line.push_str(" --postgres");
                if let Some(f) = fault {
                    line.push_str(&format!(" --store-fault {}", word(f)));
                }
            }
        }
        line
    }
}

/// The private PostgreSQL cluster of a `--postgres` campaign, shared by
/// its trials (each has its own store root, so never a session), and,
/// with network namespaces, the namespaces it and the workers run in.
#[derive(Debug)]
pub struct Database {
    // Dropped in this order: the server stops before its namespace goes.
    cluster: Cluster,
    network: Option<Partition>,
    /// Each worker's proxy, in a trial with statement strikes.
    proxies: Option<statements::Proxies>,
    bin: PathBuf,
    fault: Option<String>,
}

impl Database {
    /// Starts the cluster; `network`: in a namespace of its own, on
    /// [`partition::DATABASE_ADDR`], for the partition strikes.
    pub fn start(bin: &Path, fault: Option<&str>, network: bool) -> Result<Database, WorkersError> {
        let net = if network {
            let tag = format!("acw{}", std::process::id());
            Some(Partition::create(&tag).map_err(net_err)?)
        } else {
            None
        };
        let options = match &net {
            Some(n) => ClusterOptions {
                listen: Listen::Tcp {
                    addr: partition::DATABASE_ADDR,
                    port: 5432,
                },
                netns: Some(n.database_ns()),
                settings: Vec::new(),
            },
            None => ClusterOptions::default(),
        };
        Ok(Database {
            cluster: Cluster::start(options).map_err(cluster_err)?,
            network: net,
            proxies: None,
            bin: bin.to_path_buf(),
            fault: fault.map(str::to_string),
        })
    }

    /// Whether its workers run in network namespaces (partitions possible).
    pub fn has_network(&self) -> bool {
        self.network.is_some()
    }

    fn command(&self, dsn: String) -> String {
        let mut words = vec![
            self.bin.display().to_string(),
            "adapter".into(),
            "--dsn".into(),
            dsn,
        ];
        if let Some(f) = &self.fault {
            words.extend(["--fault".into(), f.clone()]);
        }
        shlex::try_join(words.iter().map(String::as_str)).expect("no NUL in the command")
    }

    /// The adapter command the harness itself uses (the cluster's Unix
    /// socket, reachable from every namespace).
    pub fn adapter(&self) -> String {
        self.command(self.cluster.dsn())
    }

    /// The adapter command of worker `index`: through its proxy in a
    /// trial with statement strikes, else over its link when the workers
    /// run in namespaces.
    fn worker_adapter(&mut self, index: usize) -> Result<String, WorkersError> {
        let dsn = match &mut self.proxies {
            Some(p) => p.dsn(index)?,
            None => self.cluster.tcp_dsn().unwrap_or_else(|| self.cluster.dsn()),
        };
        Ok(self.command(dsn))
    }
}

/// A failure of the harness's side (exit 3), or of the store outside any
/// check (exit 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkersError {
    #[error("{0}")]
    Harness(String),
    #[error("{0}")]
    Store(String),
}

/// One trial: its plan, what happened, and what broke.
#[derive(Debug, Clone)]
pub struct WorkersTrial {
    pub plan: WorkerPlan,
    /// Each planned strike, in the plan's order: whether it fired.
    pub strikes: Vec<StrikeRecord>,
    pub history: Vec<WorkerEvent>,
    pub effects: Vec<AppliedEffect>,
    pub violations: Vec<WorkerViolation>,
    /// The store's statements it ran and struck (empty without the
    /// proxies: a trial without statement strikes).
    pub statements: StatementCoverage,
}

impl WorkersTrial {
    /// Whether every planned strike fired (a plan without strikes has
    /// nothing to miss).
    pub fn exercised(&self) -> bool {
        self.strikes.iter().all(|s| s.fired)
    }
}

/// What became of one planned strike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrikeRecord {
    pub strike: Strike,
    /// As the plan spells it: `pause@3`.
    pub label: String,
    pub fired: bool,
    /// What it hit when it fired, or why it never did.
    pub what: String,
}

/// Steps in one session's workload, start to finish on one owner.
pub fn steps_per_session() -> usize {
    // run_started, five writes per call, run_finished.
    2 + 5 * crate::agent::worker::CALLS
}

/// Every plan the default campaign runs: a pause and a kill after each
/// step of the first session's owner, then a kill and a pause whose heir
/// is killed in its own second life of the session, three pauses whose
/// zombie wakes while the heir is mid-session, and two restarts.
pub fn every_plan() -> Vec<WorkerPlan> {
    let mut plans: Vec<WorkerPlan> = (0..steps_per_session())
        .flat_map(|k| {
            [
                WorkerPlan::one(Strike::Pause, k),
                WorkerPlan::one(Strike::Kill, k),
            ]
        })
        .collect();
    // Step 3 of an heir after a kill at 3: its intent of the re-run, whose
    // orphan the next takeover must mark again.
    for first in [Strike::Kill, Strike::Pause] {
        plans.push(WorkerPlan::one(first, 3).then(Strike::Kill, 3));
    }
    // Paused before an effect, its commit and a result, woken after the
    // heir's first write (mid-session); restarted under the same id.
    plans.extend((3..6).map(|k| WorkerPlan::one(Strike::PauseUntil(1), k)));
    plans.extend([3, 5].map(|k| WorkerPlan::one(Strike::Restart, k)));
    plans
}

/// The default plans a store behind a database the campaign started adds
/// to [`every_plan`]: each crash model at a few steps (an intent, an
/// effect commit, a result), one of them after a kill; and, with network
/// namespaces (`network`), a partition before an effect, before its
/// commit and before a result.
pub fn database_plans(network: bool) -> Vec<WorkerPlan> {
    let mut plans = vec![
        WorkerPlan::one(Strike::DbCrash(DatabaseCrash::Immediate), 3),
        WorkerPlan::one(Strike::DbCrash(DatabaseCrash::Kill), 4),
        WorkerPlan::one(Strike::DbCrash(DatabaseCrash::Kill), 5),
        WorkerPlan::one(Strike::DbCrash(DatabaseCrash::KillFrozen), 4),
        WorkerPlan::one(Strike::Kill, 3).then(Strike::DbCrash(DatabaseCrash::Immediate), 2),
    ];
    if network {
        plans.extend([
            WorkerPlan::one(Strike::Partition, 3),
            WorkerPlan::one(Strike::Partition, 4),
            WorkerPlan::one(Strike::Partition, 5),
            WorkerPlan::one(Strike::Partition, 3).then(Strike::DbCrash(DatabaseCrash::Kill), 2),
        ]);
    }
    plans
}

struct Worker {
    id: String,
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<std::io::Result<String>>,
    stderr: PathBuf,
    /// Its crash points' trace (`AGENTCHAOS_TRACE`), in a trial with
    /// crash-point strikes.
    trace: Option<PathBuf>,
}

impl Worker {
    fn start(
        cfg: &WorkersConfig,
        dirs: &Dirs,
        db: Option<&mut Database>,
        index: usize,
    ) -> Result<Worker, WorkersError> {
        let id = format!("w{index}");
        let stderr_path = dirs.scratch.join(format!("{id}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).map_err(|e| {
            WorkersError::Harness(format!("cannot create {}: {e}", stderr_path.display()))
        })?;
        let mut args: Vec<String> = vec!["worker".into(), "--root".into()];
        args.push(dirs.root.display().to_string());
        args.push("--workspace".into());
        args.push(dirs.workspace.display().to_string());
        args.push("--world".into());
        args.push(dirs.world.display().to_string());
        args.extend(["--worker-id".into(), id.clone()]);
        args.extend(["--ttl-ms".into(), cfg.ttl_of(index).to_string()]);
        let mut db = db;
        let adapter = match (&cfg.store, &mut db) {
            (SharedStore::Adapter(a), _) => Some(a.clone()),
            (_, Some(db)) => Some(db.worker_adapter(index)?),
            _ => None,
        };
        if let Some(a) = adapter {
            args.extend(["--adapter".into(), a]);
        }
        let exe = cfg.exe.display().to_string();
        let mut cmd = match db.and_then(|d| d.network.as_mut()) {
            Some(net) => {
                net.add_worker(index).map_err(|e| {
                    WorkersError::Harness(format!("cannot make worker {id}'s namespace: {e}"))
                })?;
                net.in_worker(index, &exe, &args)
            }
            None => {
                let mut c = Command::new(&cfg.exe);
                c.args(&args);
                c
            }
        };
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .env_remove(agentstore::fault::FAULT_ENV);
        if let SharedStore::InProcess { fault: Some(f) } = &cfg.store {
            cmd.env(agentstore::fault::FAULT_ENV, f);
        }
        let trace = dirs.crash_points.then(|| {
            (1..)
                .map(|n| dirs.scratch.join(format!("{id}.{n}.trace")))
                .find(|p| !p.exists())
                .expect("a free trace name")
        });
        if let Some(t) = &trace {
            cmd.env("AGENTCHAOS_TRACE", t);
        }
        let mut child = crate::child::spawn(&mut cmd)
            .map_err(|e| WorkersError::Harness(format!("cannot start worker {id}: {e}")))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Worker {
            id,
            child,
            stdin,
            lines,
            stderr: stderr_path,
            trace,
        })
    }

    /// Closes its stdin and waits for it to exit (it closes its sessions
    /// first), killing it if it has not within [`REPLY_TIMEOUT`].
    fn shut_down(self) {
        let Worker {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let deadline = Instant::now() + REPLY_TIMEOUT;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(ACQUIRE_POLL);
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// SIGKILL (a stopped worker sees it too) and reap.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    fn signal(&self, signal: Signal) -> Result<(), WorkersError> {
        kill(self.pid(), signal).map_err(|e| {
            WorkersError::Harness(format!("cannot send {signal} to worker {}: {e}", self.id))
        })
    }

    fn broken(&self, what: String) -> WorkersError {
        WorkersError::Harness(format!(
            "worker {}: {what}; its stderr ends: {}",
            self.id,
            last_line(&self.stderr)
        ))
    }

    /// Sends `command` without waiting for its reply ([`Worker::receive`]).
    fn send(&mut self, command: &WorkerCommand) -> Result<(), WorkersError> {
        let mut line = serde_json::to_vec(command).expect("a command serializes");
        line.push(b'\n');
        if let Err(e) = self
            .stdin
            .write_all(&line)
            .and_then(|()| self.stdin.flush())
        {
            return Err(self.broken(format!("cannot send {command:?}: {e}")));
        }
        Ok(())
    }

    /// The reply to `command`, sent before.
    fn receive(&mut self, command: &WorkerCommand) -> Result<WorkerReply, WorkersError> {
        let reply = match self.lines.recv_timeout(REPLY_TIMEOUT) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => return Err(self.broken(format!("cannot read its reply: {e}"))),
            Err(RecvTimeoutError::Timeout) => {
                return Err(self.broken(format!(
                    "no reply to {command:?} within {}s",
                    REPLY_TIMEOUT.as_secs()
                )))
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(self.broken(format!("it exited before replying to {command:?}")))
            }
        };
        serde_json::from_str(&reply)
            .map_err(|e| self.broken(format!("unreadable reply {reply:?}: {e}")))
    }

    /// A reply already there: a request in flight was answered.
    fn answered(&mut self) -> Option<String> {
        match self.lines.try_recv() {
            Ok(Ok(line)) => Some(line),
            Ok(Err(e)) => Some(format!("(unreadable: {e})")),
            Err(_) => None,
        }
    }

    fn call(&mut self, command: &WorkerCommand) -> Result<WorkerReply, WorkersError> {
        self.send(command)?;
        self.receive(command)
    }
}

fn last_line(path: &Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.lines().last().map(str::to_string))
        .unwrap_or_default()
}

struct Dirs {
    scratch: PathBuf,
    root: PathBuf,
    workspace: PathBuf,
    world: PathBuf,
    /// Whether the workers trace their crash points (a trial with
    /// crash-point strikes).
    crash_points: bool,
}

fn session_name(i: usize) -> String {
    format!("s{i}")
}

/// A session and who serves it now.
struct Served {
    name: String,
    owner: usize,
    /// Steps its current owner has taken.
    steps: usize,
    finished: bool,
}

/// What one reply to an acquire means ([`Run::answer_to_acquire`]).
enum AcquireAnswer {
    Granted,
    /// `lease_held` while waiting: ask again.
    Held(String),
    /// A refusal other than `lease_held` (or `lease_held` when not waiting).
    Refused(WorkerReply),
}

/// How a worker's acquire of a lease ended ([`Run::try_acquire`]).
enum Acquired {
    Granted,
    /// A refusal other than `lease_held` (or `lease_held` when not waiting).
    Refused(WorkerReply),
    /// The worker died at the point armed for its try.
    Killed,
}

/// Where a kill is armed in each try of an acquire: at a crash point of
/// agentstore in-process (the worker kills itself there), or before a
/// statement of a `--postgres` worker (its proxy holds it and the harness
/// kills the worker and its store process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KillAt {
    CrashPoint(NonZeroU64),
    Statement(usize),
}

/// Where a strike is armed in the heir's takeover (`ACTION@take.Q`): a
/// kill at a crash point of agentstore in-process, or a fault at a
/// statement of a `--postgres` heir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TakeoverAt {
    CrashPoint(NonZeroU64),
    Statement(LeaseFault, usize),
}

/// Whom a strike hits: the first session's owner of the moment, and where
/// that owner is in the session.
struct Target {
    /// The owner's index among the workers.
    victim: usize,
    /// The session's name.
    name: String,
    /// The owner's worker id.
    id: String,
    /// Requests (steps) the owner has taken in the session since its grant.
    steps: usize,
}

impl Target {
    /// Where a strike between two requests hits, in words.
    fn between_requests(&self) -> String {
        format!("{} after its step {} of {}", self.id, self.steps, self.name)
    }
}

/// Runs one trial of `plan` in a fresh scratch directory under `scratch`;
/// `db`: the cluster of a `--postgres` campaign, which the database
/// strikes crash and cut off.
pub fn trial(
    cfg: &WorkersConfig,
    backend: &dyn StoreBackend,
    plan: WorkerPlan,
    scratch: &Path,
    db: Option<&mut Database>,
) -> Result<WorkersTrial, WorkersError> {
    if cfg.workers < 2 || cfg.sessions < 1 {
        return Err(WorkersError::Harness(
            "a takeover needs at least 2 workers and 1 session".into(),
        ));
    }
    let has = match &db {
        None => Needs::Processes,
        Some(d) if d.has_network() => Needs::Network,
        Some(_) => Needs::Database,
    };
    if plan.needs() > has {
        return Err(WorkersError::Harness(match plan.needs() {
            Needs::Network if has == Needs::Database => format!(
                "plan {plan}: a partition needs network namespaces (root and iproute2)"
            ),
            _ => format!(
                "plan {plan}: a database strike needs a database server the harness started (agentchaos workers --postgres)"
            ),
        }));
    }
    if plan.strikes_crash_points() && !matches!(cfg.store, SharedStore::InProcess { .. }) {
        return Err(WorkersError::Harness(format!(
            "plan {plan}: kill@K.P strikes at agentstore's own crash points, in-process only (not through an adapter or --postgres)"
        )));
    }
    let dir = crate::campaign::scratch::campaign_dir(scratch)
        .map_err(|e| WorkersError::Harness(e.to_string()))?;
    let outcome = trial_in(cfg, backend, plan, &dir, db, false);
    let _ = std::fs::remove_dir_all(&dir);
    outcome.map(|(trial, _)| trial)
}

fn cluster_err(e: agentstore_pg::cluster::ClusterError) -> WorkersError {
    WorkersError::Harness(format!("the database server: {e}"))
}

fn net_err(e: partition::PartitionError) -> WorkersError {
    WorkersError::Harness(format!("the network: {e}"))
}

/// Before the first write the next `kill-frozen` crash would lose:
/// freezes the server's background writers (the other models need nothing).
fn prepare(db: Option<&Database>, next: Option<Strike>) -> Result<(), WorkersError> {
    if let (Some(db), Some(Strike::DbCrash(model))) = (db, next) {
        model.prepare(&db.cluster).map_err(cluster_err)?;
    }
    Ok(())
}

fn first_crash(strikes: &[(Strike, usize)]) -> Option<Strike> {
    strikes
        .iter()
        .map(|&(s, _)| s)
        .find(|s| matches!(s, Strike::DbCrash(_)))
}

/// A trial, and with `count` what it counted ([`PointCounts`]).
fn trial_in(
    cfg: &WorkersConfig,
    backend: &dyn StoreBackend,
    plan: WorkerPlan,
    dir: &Path,
    mut db: Option<&mut Database>,
    count: bool,
) -> Result<(WorkersTrial, PointCounts), WorkersError> {
    if let Some(net) = db.as_deref().and_then(|d| d.network.as_ref()) {
        net.heal_all().map_err(net_err)?;
    }
    let statements = count
        || plan
            .strikes()
            .iter()
            .any(|(s, _)| matches!(s, Strike::Statement(_) | Strike::CloseStatement(..)));
    if let Some(d) = db.as_deref_mut() {
        d.proxies = statements.then(|| statements::Proxies::new(&d.cluster));
    }
    prepare(db.as_deref(), first_crash(plan.strikes()))?;
    let dirs = Dirs {
        scratch: dir.to_path_buf(),
        root: dir.join("root"),
        workspace: dir.join("workspace"),
        world: dir.join("world"),
        // A count without a database counts agentstore's crash points.
        crash_points: plan.strikes_crash_points() || (count && db.is_none()),
    };
    for d in [&dirs.root, &dirs.workspace, &dirs.world] {
        std::fs::create_dir_all(d)
            .map_err(|e| WorkersError::Harness(format!("cannot create {}: {e}", d.display())))?;
    }
    // The sessions exist before any worker: created by a plain open.
    for i in 0..cfg.sessions {
        let spec = SessionSpec {
            root: dirs.root.clone(),
            session: session_name(i),
            workspace: dirs.workspace.clone(),
        };
        let store = backend.open(&spec).map_err(|e| {
            WorkersError::Store(format!("cannot create session {}: {e}", spec.session))
        })?;
        store.close().map_err(|e| {
            WorkersError::Store(format!("cannot close session {}: {e}", spec.session))
        })?;
    }
    let workers = (0..cfg.workers)
        .map(|i| Worker::start(cfg, &dirs, db.as_deref_mut(), i))
        .collect::<Result<Vec<_>, _>>()?;
    let mut run = Run {
        cfg,
        dirs: &dirs,
        db,
        history: Vec::new(),
        states: vec![State::Running; workers.len()],
        workers,
        struck: Vec::new(),
        held: Vec::new(),
        counts: count.then(PointCounts::default),
        struck_statements: Vec::new(),
    };
    let result = run.drive(&plan);
    let counts = run.counts.take().unwrap_or_default();
    let strikes = std::mem::take(&mut run.struck);
    let mut history = std::mem::take(&mut run.history);
    let states = std::mem::take(&mut run.states);
    for (w, state) in std::mem::take(&mut run.workers).into_iter().zip(states) {
        if result.is_ok() && state == State::Running {
            // Shut down as a service does: EOF, and it releases its leases.
            w.shut_down();
        } else {
            w.kill();
        }
    }
    let mut statements = StatementCoverage::default();
    if let Some(d) = run.db.as_deref_mut() {
        if let Some(proxies) = d.proxies.take() {
            statements = proxies.coverage(&run.struck_statements);
        }
    }
    result?;
    for i in 0..cfg.sessions {
        history.push(final_log(cfg, backend, &dirs, &session_name(i)));
    }
    let effects = read_effects(&dirs.world)
        .map_err(|e| WorkersError::Harness(format!("cannot read the world's effects: {e}")))?;
    let violations = check(&history, &effects);
    let trial = WorkersTrial {
        plan,
        strikes,
        history,
        effects,
        violations,
        statements,
    };
    Ok((trial, counts))
}

/// `session`'s log once every worker is gone: a plain open, asked again
/// while the last owner's lease is live by the store's clock. A refusal
/// is recorded, for the checker: the log is what the store owes.
fn final_log(
    cfg: &WorkersConfig,
    backend: &dyn StoreBackend,
    dirs: &Dirs,
    session: &str,
) -> WorkerEvent {
    let spec = SessionSpec {
        root: dirs.root.clone(),
        session: session.to_string(),
        workspace: dirs.workspace.clone(),
    };
    let deadline = Instant::now() + Duration::from_millis(cfg.longest_ttl()) + REPLY_TIMEOUT;
    let final_log = |log| WorkerEvent::Final {
        session: session.to_string(),
        log,
    };
    let mut store = loop {
        match backend.open(&spec) {
            Ok(store) => break store,
            Err(e) if e.kind == Some(ErrorKind::NotFound) => return final_log(FinalLog::Missing),
            Err(_) if agentstore::interrupt::requested() => {
                return final_log(FinalLog::Unreadable(crate::child::INTERRUPTED.to_string()))
            }
            Err(e) if e.kind == Some(ErrorKind::LeaseHeld) && Instant::now() < deadline => {
                std::thread::sleep(ACQUIRE_POLL)
            }
            Err(e) => return final_log(FinalLog::Unreadable(format!("open: {e}"))),
        }
    };
    let log = match store.events(None) {
        Ok(records) => FinalLog::Served(records),
        Err(e) => FinalLog::Unreadable(format!("events: {e}")),
    };
    let _ = store.close();
    final_log(log)
}

/// Where a worker process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Paused,
    Killed,
}

struct Run<'a> {
    cfg: &'a WorkersConfig,
    dirs: &'a Dirs,
    db: Option<&'a mut Database>,
    history: Vec<WorkerEvent>,
    workers: Vec<Worker>,
    states: Vec<State>,
    /// The plan's strikes so far, and at the end those that never fired.
    struck: Vec<StrikeRecord>,
    /// Workers held inside a request by a statement strike.
    held: Vec<statements::HeldStatement>,
    /// In a counting trial: what it counted.
    counts: Option<PointCounts>,
    /// Each fired statement strike's SQL text, and whether it was after
    /// the statement's reply.
    struck_statements: Vec<(String, bool)>,
}

impl Run<'_> {
    /// Whom a strike at this moment hits ([`Target`]).
    fn target(&self, sessions: &[Served]) -> Target {
        let first = &sessions[0];
        Target {
            victim: first.owner,
            name: first.name.clone(),
            id: self.workers[first.owner].id.clone(),
            steps: first.steps,
        }
    }

    /// `worker` takes `session`'s lease; a refusal other than `lease_held`
    /// (or `lease_held` when not `wait`ing) is the store's failure.
    fn acquire(
        &mut self,
        worker: usize,
        session: &str,
        wait: bool,
        ttl_ms: u64,
    ) -> Result<(), WorkersError> {
        self.acquire_or_refused(worker, session, wait, ttl_ms)?
            .map_err(|other| self.not_granted(worker, session, &other))
    }

    /// The store's failure: it refused `worker` `session`'s lease with
    /// `reply`, which is neither a grant nor `lease_held`.
    fn not_granted(&self, worker: usize, session: &str, reply: &WorkerReply) -> WorkersError {
        WorkersError::Store(format!(
            "worker {}: the store did not grant session {session} a lease: {reply:?}",
            self.workers[worker].id
        ))
    }

    /// What `reply`, `worker`'s answer to an acquire of `session`, means:
    /// a grant is recorded with the records it served; `lease_held` is
    /// worth asking again only while `wait`ing; anything else is recorded
    /// and returned as a refusal.
    fn answer_to_acquire(
        &mut self,
        worker: usize,
        session: &str,
        reply: WorkerReply,
        wait: bool,
    ) -> Result<AcquireAnswer, WorkersError> {
        Ok(match reply {
            WorkerReply::Granted {
                grant,
                recovery: _,
                records,
            } => {
                self.record_grant(worker, session, grant, records)?;
                AcquireAnswer::Granted
            }
            WorkerReply::Held { message } if wait => AcquireAnswer::Held(message),
            other => {
                self.history.push(WorkerEvent::Replied {
                    worker: self.workers[worker].id.clone(),
                    session: session.to_string(),
                    reply: other.clone(),
                });
                AcquireAnswer::Refused(other)
            }
        })
    }

    /// Records `worker`'s grant of `session` and the records it was served.
    fn record_grant(
        &mut self,
        worker: usize,
        session: &str,
        grant: LeaseGrant,
        records: Vec<WireRecord>,
    ) -> Result<(), WorkersError> {
        let id = self.workers[worker].id.clone();
        let records = records
            .into_iter()
            .map(|r| r.into_record())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                WorkersError::Store(format!(
                    "worker {id}: the store served a record that does not fit: {e}"
                ))
            })?;
        self.history.push(WorkerEvent::Granted {
            worker: id,
            session: session.to_string(),
            grant,
            records,
        });
        Ok(())
    }

    /// As [`Run::acquire`], a refusal other than `lease_held` returned
    /// (and recorded) instead: after a database crash a store that lost
    /// the session refuses it, and the final log says what was lost.
    fn acquire_or_refused(
        &mut self,
        worker: usize,
        session: &str,
        wait: bool,
        ttl_ms: u64,
    ) -> Result<Result<(), WorkerReply>, WorkersError> {
        match self.try_acquire(worker, session, wait, ttl_ms, None)? {
            Acquired::Granted => Ok(Ok(())),
            Acquired::Refused(reply) => Ok(Err(reply)),
            Acquired::Killed => unreachable!("no kill was armed"),
        }
    }

    /// SIGKILL of `victim` with its store process, so that neither reads
    /// EOF first and shuts down as a service does, releasing its leases.
    fn kill_with_its_store(&mut self, victim: usize) {
        let w = &mut self.workers[victim];
        crate::child::kill_tree(w.child.id());
        let _ = w.child.wait();
        self.states[victim] = State::Killed;
        self.history.push(WorkerEvent::Killed {
            worker: w.id.clone(),
        });
    }

    /// `worker` asks for `session`'s lease, and while `wait`ing asks again
    /// as long as it is held (at most `ttl_ms` and [`REPLY_TIMEOUT`]: then
    /// the store's failure). With `kill`, a kill is armed at that point of
    /// each try, again before each one: a refused try passes the same
    /// points each time, so the kill lands at the same one whatever the
    /// clock. A grant is recorded with the records it served, and so is a
    /// refusal other than `lease_held`.
    fn try_acquire(
        &mut self,
        worker: usize,
        session: &str,
        wait: bool,
        ttl_ms: u64,
        kill: Option<KillAt>,
    ) -> Result<Acquired, WorkersError> {
        let deadline = Instant::now() + Duration::from_millis(ttl_ms) + REPLY_TIMEOUT;
        let command = WorkerCommand::Acquire {
            session: session.to_string(),
        };
        loop {
            let w = &mut self.workers[worker];
            let reply = match kill {
                None => w.call(&command)?,
                Some(KillAt::Statement(s)) => {
                    match self.killed_before_statement(worker, s, &command)? {
                        Some(reply) => reply,
                        None => return Ok(Acquired::Killed),
                    }
                }
                Some(KillAt::CrashPoint(point)) => {
                    w.kill_at(Some(point))?;
                    w.send(&command)?;
                    let Some(reply) = w.reply_or_killed(&command)? else {
                        return Ok(Acquired::Killed);
                    };
                    w.kill_at(None)?;
                    reply
                }
            };
            match self.answer_to_acquire(worker, session, reply, wait)? {
                AcquireAnswer::Granted => return Ok(Acquired::Granted),
                AcquireAnswer::Held(_) if agentstore::interrupt::requested() => {
                    return Err(WorkersError::Harness(crate::child::INTERRUPTED.to_string()));
                }
                AcquireAnswer::Held(message) => {
                    if Instant::now() >= deadline {
                        return Err(WorkersError::Store(format!(
                            "worker {}: session {session} still refused lease_held {}s after its lease should have expired: {message}",
                            self.workers[worker].id,
                            REPLY_TIMEOUT.as_secs()
                        )));
                    }
                    std::thread::sleep(ACQUIRE_POLL);
                }
                AcquireAnswer::Refused(other) => return Ok(Acquired::Refused(other)),
            }
        }
    }

    /// One step of `session` by `worker`: true while it has more to do.
    fn step(&mut self, worker: usize, session: &str) -> Result<bool, WorkersError> {
        let w = &mut self.workers[worker];
        let reply = w.call(&WorkerCommand::Step {
            session: session.to_string(),
        })?;
        let more = reply.accepted();
        self.history.push(WorkerEvent::Replied {
            worker: w.id.clone(),
            session: session.to_string(),
            reply,
        });
        Ok(more)
    }

    /// Steps `session` by `worker` until it is done, fenced or failed.
    fn finish(&mut self, worker: usize, session: &str) -> Result<(), WorkersError> {
        for _ in 0..MAX_STEPS {
            if !self.step(worker, session)? {
                return Ok(());
            }
        }
        Err(WorkersError::Harness(format!(
            "session {session} did not finish within {MAX_STEPS} steps of worker w{worker}"
        )))
    }

    fn drive(&mut self, plan: &WorkerPlan) -> Result<(), WorkersError> {
        let ttl_ms = self.cfg.longest_ttl();
        let mut sessions: Vec<Served> = (0..self.cfg.sessions)
            .map(|i| Served {
                name: session_name(i),
                owner: i % self.cfg.workers,
                steps: 0,
                finished: false,
            })
            .collect();
        for s in &sessions {
            self.acquire(s.owner, &s.name, false, ttl_ms)?;
        }
        let planned = plan.strikes();
        // Paused owners of the first session: woken after the J-th step of
        // the owner of the moment (`pause@K~J`), else once it is finished.
        let mut zombies: Vec<(usize, Option<usize>)> = Vec::new();
        let mut rounds = 0;
        while sessions.iter().any(|s| !s.finished) {
            rounds += 1;
            if rounds > MAX_STEPS {
                return Err(WorkersError::Harness(format!(
                    "the sessions did not finish within {MAX_STEPS} rounds"
                )));
            }
            for i in 0..sessions.len() {
                // A paused worker's other sessions wait for it.
                if sessions[i].finished || self.states[sessions[i].owner] != State::Running {
                    continue;
                }
                if i == 0 && zombies.iter().any(|&(_, j)| j == Some(sessions[0].steps)) {
                    // The paused owner wakes while the heir is mid-session.
                    let (due, rest) = zombies
                        .into_iter()
                        .partition(|&(_, j)| j == Some(sessions[0].steps));
                    zombies = rest;
                    for (zombie, _) in due {
                        self.wake(zombie, true, &mut sessions)?;
                    }
                }
                let next = planned.get(self.struck.len()).copied();
                if let Some((strike, _)) = next.filter(|&(_, k)| i == 0 && sessions[0].steps == k) {
                    let label = plan.label(self.struck.len());
                    // An `ACTION@take.Q` next is carried out by this strike's heir.
                    let next = self.struck.len() + 1;
                    let (at_statement, at_crash_point) = match planned.get(next) {
                        Some(&(Strike::TakeoverStatement(fault, q), _)) => {
                            (Some((fault, q, plan.label(next))), None)
                        }
                        Some(&(Strike::TakeoverCrashPoint(q), _)) => {
                            (None, Some((q, plan.label(next))))
                        }
                        _ => (None, None),
                    };
                    if let Strike::Statement(s) = strike {
                        let records =
                            self.statement_strike(s, label, at_statement, &mut sessions)?;
                        self.struck.extend(records);
                        continue;
                    }
                    if strike == Strike::Leave {
                        // A close strike next is carried out in this leave's close.
                        let close = match planned.get(next) {
                            Some(&(Strike::CloseStatement(fault, q), _)) => {
                                Some((fault, q, plan.label(next)))
                            }
                            _ => None,
                        };
                        let records = self.leave(label, close, &mut sessions)?;
                        self.struck.extend(records);
                        continue;
                    }
                    if let Strike::CrashPoint(p) = strike {
                        let records =
                            self.crash_point_strike(p, label, at_crash_point, &mut sessions)?;
                        self.struck.extend(records);
                        continue;
                    }
                    let later = first_crash(&planned[self.struck.len() + 1..]);
                    let (zombie, hit) = self.strike(strike, &label, later, &mut sessions)?;
                    let wake = match strike {
                        Strike::PauseUntil(j) => Some(j),
                        _ => None,
                    };
                    zombies.extend(zombie.map(|z| (z, wake)));
                    self.struck.push(StrikeRecord {
                        strike,
                        label,
                        fired: true,
                        what: hit,
                    });
                    continue;
                }
                let (owner, name) = (sessions[i].owner, sessions[i].name.clone());
                let counting = i == 0 && self.counts.is_some();
                let baseline = if counting { self.count_next(owner)? } else { 0 };
                let more = self.step(owner, &name)?;
                if counting {
                    let n = self.counted(owner, baseline)?;
                    self.counts
                        .get_or_insert_with(Default::default)
                        .requests
                        .push(n);
                }
                sessions[i].steps += 1;
                sessions[i].finished = !more;
                if i == 0 && !more {
                    self.let_go()?;
                    // The zombie writers go on where they were paused.
                    for (zombie, wake) in std::mem::take(&mut zombies) {
                        self.wake(zombie, wake.is_some(), &mut sessions)?;
                    }
                }
            }
        }
        // The strikes left never fired: the session ended first.
        let ended = format!(
            "session {} ended after {} step(s) of its owner {}",
            sessions[0].name, sessions[0].steps, self.workers[sessions[0].owner].id
        );
        let first_missed = self.struck.len();
        for (i, &(strike, k)) in planned.iter().enumerate().skip(first_missed) {
            let what = if i == first_missed {
                format!("{ended}, before its step {k}")
            } else {
                format!("{} before it never fired", plan.label(first_missed))
            };
            self.struck.push(StrikeRecord {
                strike,
                label: plan.label(i),
                fired: false,
                what,
            });
        }
        Ok(())
    }

    /// SIGCONTs a paused owner of the first session: the zombie writes on
    /// there until the store stops it; `close_early` (`pause@K~J`): once
    /// fenced, it closes the session and asks for it again at once.
    fn wake(
        &mut self,
        zombie: usize,
        close_early: bool,
        sessions: &mut [Served],
    ) -> Result<(), WorkersError> {
        let session = sessions[0].name.clone();
        self.workers[zombie].signal(Signal::SIGCONT)?;
        self.states[zombie] = State::Running;
        self.history.push(WorkerEvent::Resumed {
            worker: self.workers[zombie].id.clone(),
        });
        self.finish(zombie, &session)?;
        if close_early {
            self.close_if_fenced(zombie, sessions)?;
        }
        Ok(())
    }

    /// A worker whose last reply for the first session was `fenced` closes
    /// it at once (it stops acting there) and asks for it again without
    /// waiting: while the owner of the moment holds a live lease the store
    /// refuses (`lease_held`); a grant (that lease expired by the store's
    /// clock) makes it the session's owner, to finish the workload.
    fn close_if_fenced(
        &mut self,
        worker: usize,
        sessions: &mut [Served],
    ) -> Result<(), WorkersError> {
        let session = sessions[0].name.clone();
        let id = self.workers[worker].id.clone();
        let fenced = self.history.iter().rev().find_map(|e| match e {
            WorkerEvent::Replied {
                worker: w,
                session: s,
                reply,
            } if *w == id && *s == session => Some(matches!(reply, WorkerReply::Fenced { .. })),
            _ => None,
        });
        if fenced != Some(true) {
            return Ok(());
        }
        let reply = self.workers[worker].call(&WorkerCommand::Close {
            session: session.clone(),
        })?;
        self.history.push(WorkerEvent::Replied {
            worker: id,
            session: session.clone(),
            reply,
        });
        let ttl_ms = self.cfg.longest_ttl();
        if let Ok(()) = self.acquire_or_refused(worker, &session, false, ttl_ms)? {
            sessions[0].owner = worker;
            sessions[0].steps = 0;
            sessions[0].finished = false;
        }
        Ok(())
    }

    /// The worker that takes over from `victim`: the next one running, or
    /// a fresh process when none is.
    fn heir(&mut self, victim: usize) -> Result<usize, WorkersError> {
        let n = self.workers.len();
        if let Some(h) = (1..n)
            .map(|d| (victim + d) % n)
            .find(|&h| self.states[h] == State::Running)
        {
            return Ok(h);
        }
        let fresh = Worker::start(self.cfg, self.dirs, self.db.as_deref_mut(), n)?;
        self.workers.push(fresh);
        self.states.push(State::Running);
        Ok(n)
    }

    /// Carries out one strike (`label`, as the plan spells it) on the
    /// first session's owner: a paused owner, to be woken once the session
    /// is finished, and what the strike hit, in words.
    /// `later`: the next database crash of the plan after this strike.
    fn strike(
        &mut self,
        strike: Strike,
        label: &str,
        later: Option<Strike>,
        sessions: &mut [Served],
    ) -> Result<(Option<usize>, String), WorkersError> {
        let ttl_ms = self.cfg.longest_ttl();
        let target = self.target(sessions);
        let at = target.between_requests();
        let Target { victim, name, .. } = target;
        match strike {
            Strike::Pause | Strike::PauseUntil(_) => {
                // Renewed now, so the lease is surely live when the heir first asks.
                self.renew(victim, &name)?;
                self.workers[victim].signal(Signal::SIGSTOP)?;
                self.states[victim] = State::Paused;
                self.history.push(WorkerEvent::Paused {
                    worker: self.workers[victim].id.clone(),
                });
                let heir = self.heir(victim)?;
                self.acquire(heir, &name, true, ttl_ms)?;
                sessions[0].owner = heir;
                sessions[0].steps = 0;
                let hit = format!("paused {at}; {} took it over", self.workers[heir].id);
                Ok((Some(victim), hit))
            }
            Strike::Kill => {
                self.kill_with_its_store(victim);
                let heir = self.heir(victim)?;
                let mut taken = 0;
                for s in sessions
                    .iter_mut()
                    .filter(|s| s.owner == victim && !s.finished)
                {
                    self.acquire(heir, &s.name, true, ttl_ms)?;
                    s.owner = heir;
                    s.steps = 0;
                    taken += 1;
                }
                let hit = format!(
                    "killed {at}; {} took its {taken} session(s) over",
                    self.workers[heir].id
                );
                Ok((None, hit))
            }
            Strike::Restart => {
                let id = self.workers[victim].id.clone();
                let w = &mut self.workers[victim];
                crate::child::kill_tree(w.child.id());
                let _ = w.child.wait();
                self.history
                    .push(WorkerEvent::Killed { worker: id.clone() });
                // The same worker id in a new process: it waits out its
                // predecessor's lease like any other worker.
                let fresh = Worker::start(self.cfg, self.dirs, self.db.as_deref_mut(), victim)?;
                self.workers[victim] = fresh;
                self.history
                    .push(WorkerEvent::Restarted { worker: id.clone() });
                let mut taken = 0;
                for s in sessions
                    .iter_mut()
                    .filter(|s| s.owner == victim && !s.finished)
                {
                    self.acquire(victim, &s.name, true, ttl_ms)?;
                    s.steps = 0;
                    taken += 1;
                }
                let hit = format!(
                    "restarted {at} under the same id; it took its {taken} session(s) back"
                );
                Ok((None, hit))
            }
            Strike::Slow => Ok((None, self.slow(victim, &at, sessions)?)),
            Strike::Lapse => Ok((None, self.lapse(victim, &at, sessions)?)),
            Strike::DbCrash(model) => {
                let db = self
                    .db
                    .as_deref_mut()
                    .expect("checked: a database strike has one");
                model.apply(&mut db.cluster).map_err(cluster_err)?;
                db.cluster.restart().map_err(cluster_err)?;
                prepare(Some(db), later)?;
                self.history.push(WorkerEvent::DatabaseCrashed {
                    model: model.name().to_string(),
                });
                let hit = format!(
                    "crashed the database server ({}) and restarted it, {at}",
                    model.describe()
                );
                // Every connection died with the server: each owner's next
                // write shows it, and the owner asks for its session again.
                let mut lost = 0;
                for s in sessions.iter_mut() {
                    if s.finished || self.states[s.owner] != State::Running {
                        continue;
                    }
                    if self.step(s.owner, &s.name)? {
                        // A store that reconnected by itself goes on.
                        s.steps += 1;
                        continue;
                    }
                    match self.acquire_or_refused(s.owner, &s.name, true, ttl_ms)? {
                        Ok(()) => s.steps = 0,
                        // The store lost the session: nothing more to do there.
                        Err(reply) => {
                            s.finished = true;
                            lost += 1;
                            self.history.push(WorkerEvent::GaveUp {
                                session: s.name.clone(),
                                strike: label.to_string(),
                                why: format!(
                                    "after the crash the store refused {} the session: {reply:?}",
                                    self.workers[s.owner].id
                                ),
                            });
                        }
                    }
                }
                let hit = match lost {
                    0 => hit,
                    n => format!("{hit}; the store refused {n} session(s) after it"),
                };
                Ok((None, hit))
            }
            Strike::Statement(_)
            | Strike::CrashPoint(_)
            | Strike::TakeoverCrashPoint(_)
            | Strike::TakeoverStatement(..)
            | Strike::CloseStatement(..)
            | Strike::Leave => Err(WorkersError::Harness(format!(
                "{label}: a strike at a point inside a request, or with one in its request, is carried out there"
            ))),
            Strike::Partition => {
                self.renew(victim, &name)?;
                let victim_id = self.workers[victim].id.clone();
                self.network()?.cut(victim).map_err(net_err)?;
                self.history.push(WorkerEvent::Partitioned {
                    worker: victim_id.clone(),
                });
                // Cut off, the owner keeps writing: its next write (a
                // renewal first, before an effect) stays in flight, every
                // packet of it dropped, while another worker takes over.
                let write = WorkerCommand::Step {
                    session: name.clone(),
                };
                self.workers[victim].send(&write)?;
                self.history.push(WorkerEvent::InFlight {
                    worker: victim_id.clone(),
                    session: name.clone(),
                });
                let heir = self.heir(victim)?;
                self.acquire(heir, &name, true, ttl_ms)?;
                if let Some(reply) = self.workers[victim].answered() {
                    return Err(WorkersError::Harness(format!(
                        "the cut did not act: {victim_id}'s write was answered while its link was down: {reply}"
                    )));
                }
                self.network()?.heal(victim).map_err(net_err)?;
                self.history.push(WorkerEvent::Healed {
                    worker: victim_id.clone(),
                });
                // Its old connection delivers the write now, after the
                // takeover: judged as any write (it must be fenced).
                let reply = self.workers[victim].receive(&write)?;
                let more = reply.accepted();
                self.history.push(WorkerEvent::Replied {
                    worker: victim_id,
                    session: name.clone(),
                    reply,
                });
                // A write the store accepted: the cut-off owner writes on.
                if more {
                    self.finish(victim, &name)?;
                }
                sessions[0].owner = heir;
                sessions[0].steps = 0;
                let hit = format!(
                    "cut the link of {at} with its next write in flight; {} took it over",
                    self.workers[heir].id
                );
                Ok((None, hit))
            }
        }
    }

    fn network(&self) -> Result<&Partition, WorkersError> {
        self.db
            .as_deref()
            .and_then(|d| d.network.as_ref())
            .ok_or_else(|| WorkersError::Harness("a partition needs the network namespaces".into()))
    }

    /// `worker` renews its lease of `session` (recorded).
    fn renew(&mut self, worker: usize, session: &str) -> Result<(), WorkersError> {
        let reply = self.workers[worker].call(&WorkerCommand::Renew {
            session: session.to_string(),
        })?;
        self.history.push(WorkerEvent::Replied {
            worker: self.workers[worker].id.clone(),
            session: session.to_string(),
            reply,
        });
        Ok(())
    }
}
