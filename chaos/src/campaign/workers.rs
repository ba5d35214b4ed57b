//! The many-workers campaign (`agentchaos workers`): N worker processes
//! (`agentchaos worker`, real children, each with its own store handles)
//! serve M sessions of one store through leases; the nemesis
//! ([`WorkerPlan`]) pauses or kills the first session's owner and another
//! worker takes over; the checker ([`crate::check::workers`]) judges what
//! the store accepted.
//!
//! The harness is the only scheduler: it sends one command at a time to
//! one worker and waits for its reply, round-robin over the sessions, so
//! the history is the order in which the store served the requests and a
//! plan replays the same. The only wait is for the lease to expire by the
//! store's clock, observed as the next owner's `open` stops being refused
//! with `lease_held`; how long that takes never changes a verdict. This
//! module runs and records; it must never judge.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::agent::worker::{read_effects, AppliedEffect, WorkerCommand, WorkerReply};
use crate::check::workers::{check, WorkerViolation};
use crate::history::WorkerEvent;
use crate::nemesis::workers::WorkerPlan;
use crate::shell::word;
use crate::store::{SessionSpec, StoreBackend};

/// How long the harness waits for one reply of a worker that is running.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the next owner asks for an expired lease.
const ACQUIRE_POLL: Duration = Duration::from_millis(10);
/// Steps after which a session that never reports done is a harness error.
const MAX_STEPS: usize = 200;

/// What a many-workers campaign runs.
#[derive(Debug, Clone)]
pub struct WorkersConfig {
    /// The `agentchaos` binary (the workers are `agentchaos worker`).
    pub exe: PathBuf,
    pub workers: usize,
    pub sessions: usize,
    pub ttl_ms: u64,
    /// A fault of the reference store (`AGENTSTORE_FAULT` of every worker).
    pub store_fault: Option<String>,
    /// The store behind an adapter, or None for agentstore in-process.
    pub adapter: Option<String>,
}

impl WorkersConfig {
    /// The one-line command that replays `plan`.
    pub fn replay(&self, plan: WorkerPlan) -> String {
        let mut line = format!(
            "agentchaos workers --plan {plan} --workers {} --sessions {} --ttl-ms {}",
            self.workers, self.sessions, self.ttl_ms
        );
        if let Some(f) = &self.store_fault {
            line.push_str(&format!(" --store-fault {}", word(f)));
        }
        if let Some(a) = &self.adapter {
            line.push_str(&format!(" --adapter {}", word(a)));
        }
        line
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
    pub history: Vec<WorkerEvent>,
    pub effects: Vec<AppliedEffect>,
    pub violations: Vec<WorkerViolation>,
}

/// Steps in one session's workload, start to finish on one owner.
pub fn steps_per_session() -> usize {
    // run_started, five writes per call, run_finished.
    2 + 5 * crate::agent::worker::CALLS
}

/// Every plan the default campaign runs: a pause and a kill after each
/// step of the first session's owner.
pub fn every_plan() -> Vec<WorkerPlan> {
    (0..steps_per_session())
        .flat_map(|k| {
            [
                WorkerPlan::Pause { after_step: k },
                WorkerPlan::Kill { after_step: k },
            ]
        })
        .collect()
}

struct Worker {
    id: String,
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<std::io::Result<String>>,
    stderr: PathBuf,
}

impl Worker {
    fn start(cfg: &WorkersConfig, dirs: &Dirs, index: usize) -> Result<Worker, WorkersError> {
        let id = format!("w{index}");
        let stderr_path = dirs.scratch.join(format!("{id}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).map_err(|e| {
            WorkersError::Harness(format!("cannot create {}: {e}", stderr_path.display()))
        })?;
        let mut cmd = Command::new(&cfg.exe);
        cmd.arg("worker")
            .arg("--root")
            .arg(&dirs.root)
            .arg("--workspace")
            .arg(&dirs.workspace)
            .arg("--world")
            .arg(&dirs.world)
            .args(["--worker-id", &id, "--ttl-ms", &cfg.ttl_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .env_remove(agentstore::fault::FAULT_ENV);
        if let Some(a) = &cfg.adapter {
            cmd.args(["--adapter", a]);
        }
        if let Some(f) = &cfg.store_fault {
            cmd.env(agentstore::fault::FAULT_ENV, f);
        }
        let mut child = cmd
            .spawn()
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
        })
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    fn signal(&self, signal: Signal) -> Result<(), WorkersError> {
        kill(self.pid(), signal).map_err(|e| {
            WorkersError::Harness(format!("cannot send {signal} to worker {}: {e}", self.id))
        })
    }

    fn call(&mut self, command: &WorkerCommand) -> Result<WorkerReply, WorkersError> {
        let mut line = serde_json::to_vec(command).expect("a command serializes");
        line.push(b'\n');
        let (id, stderr) = (self.id.clone(), self.stderr.clone());
        let broken = move |what: String| {
            WorkersError::Harness(format!(
                "worker {id}: {what}; its stderr ends: {}",
                last_line(&stderr)
            ))
        };
        if let Err(e) = self
            .stdin
            .write_all(&line)
            .and_then(|()| self.stdin.flush())
        {
            return Err(broken(format!("cannot send {command:?}: {e}")));
        }
        let reply = match self.lines.recv_timeout(REPLY_TIMEOUT) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => return Err(broken(format!("cannot read its reply: {e}"))),
            Err(RecvTimeoutError::Timeout) => {
                return Err(broken(format!(
                    "no reply to {command:?} within {}s",
                    REPLY_TIMEOUT.as_secs()
                )))
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(broken(format!("it exited before replying to {command:?}")))
            }
        };
        serde_json::from_str(&reply).map_err(|e| broken(format!("unreadable reply {reply:?}: {e}")))
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

/// Runs one trial of `plan` in a fresh scratch directory under `scratch`.
pub fn trial(
    cfg: &WorkersConfig,
    backend: &dyn StoreBackend,
    plan: WorkerPlan,
    scratch: &Path,
) -> Result<WorkersTrial, WorkersError> {
    if cfg.workers < 2 || cfg.sessions < 1 {
        return Err(WorkersError::Harness(
            "a takeover needs at least 2 workers and 1 session".into(),
        ));
    }
    let dir = crate::campaign::scratch::campaign_dir(scratch).map_err(WorkersError::Harness)?;
    let outcome = trial_in(cfg, backend, plan, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

fn trial_in(
    cfg: &WorkersConfig,
    backend: &dyn StoreBackend,
    plan: WorkerPlan,
    dir: &Path,
) -> Result<WorkersTrial, WorkersError> {
    let dirs = Dirs {
        scratch: dir.to_path_buf(),
        root: dir.join("root"),
        workspace: dir.join("workspace"),
        world: dir.join("world"),
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
    let mut workers = (0..cfg.workers)
        .map(|i| Worker::start(cfg, &dirs, i))
        .collect::<Result<Vec<_>, _>>()?;
    let mut run = Run {
        history: Vec::new(),
        workers: &mut workers,
    };
    let result = run.drive(cfg, plan);
    let history = std::mem::take(&mut run.history);
    for w in &mut workers {
        // A stopped worker must see its SIGKILL; a live one its EOF.
        let _ = w.child.kill();
        let _ = w.child.wait();
    }
    result?;
    let effects = read_effects(&dirs.world)
        .map_err(|e| WorkersError::Harness(format!("cannot read the world's effects: {e}")))?;
    let violations = check(&history, &effects);
    Ok(WorkersTrial {
        plan,
        history,
        effects,
        violations,
    })
}

struct Run<'a> {
    history: Vec<WorkerEvent>,
    workers: &'a mut Vec<Worker>,
}

impl Run<'_> {
    fn acquire(
        &mut self,
        worker: usize,
        session: &str,
        wait: bool,
        ttl_ms: u64,
    ) -> Result<(), WorkersError> {
        let deadline = Instant::now() + Duration::from_millis(ttl_ms) + REPLY_TIMEOUT;
        loop {
            let w = &mut self.workers[worker];
            let reply = w.call(&WorkerCommand::Acquire {
                session: session.to_string(),
            })?;
            match reply {
                WorkerReply::Granted {
                    grant,
                    recovery: _,
                    records,
                } => {
                    let records = records
                        .into_iter()
                        .map(|r| r.into_record())
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| WorkersError::Store(format!("worker {}: the store served a record that does not fit: {e}", w.id)))?;
                    self.history.push(WorkerEvent::Granted {
                        worker: w.id.clone(),
                        session: session.to_string(),
                        grant,
                        records,
                    });
                    return Ok(());
                }
                WorkerReply::Held { message } if wait => {
                    if Instant::now() >= deadline {
                        return Err(WorkersError::Store(format!(
                            "worker {}: session {session} still refused lease_held {}s after its lease should have expired: {message}",
                            w.id,
                            REPLY_TIMEOUT.as_secs()
                        )));
                    }
                    std::thread::sleep(ACQUIRE_POLL);
                }
                other => {
                    return Err(WorkersError::Store(format!(
                        "worker {}: the store did not grant session {session} a lease at the start: {other:?}",
                        w.id
                    )))
                }
            }
        }
    }

    /// One step of `session` by `worker`: true while it has more to do.
    fn step(&mut self, worker: usize, session: &str) -> Result<bool, WorkersError> {
        let w = &mut self.workers[worker];
        let reply = w.call(&WorkerCommand::Step {
            session: session.to_string(),
        })?;
        let more = matches!(
            reply,
            WorkerReply::Acked { .. } | WorkerReply::Applied { .. } | WorkerReply::Renewed { .. }
        );
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

    fn drive(&mut self, cfg: &WorkersConfig, plan: WorkerPlan) -> Result<(), WorkersError> {
        let mut sessions: Vec<Served> = (0..cfg.sessions)
            .map(|i| Served {
                name: session_name(i),
                owner: i % cfg.workers,
                steps: 0,
                finished: false,
            })
            .collect();
        for s in &sessions {
            self.acquire(s.owner, &s.name, false, cfg.ttl_ms)?;
        }
        let mut struck = plan.after_step().is_none();
        let mut rounds = 0;
        while sessions.iter().any(|s| !s.finished) {
            rounds += 1;
            if rounds > MAX_STEPS {
                return Err(WorkersError::Harness(format!(
                    "the sessions did not finish within {MAX_STEPS} rounds"
                )));
            }
            for i in 0..sessions.len() {
                if sessions[i].finished {
                    continue;
                }
                if i == 0 && !struck && Some(sessions[0].steps) == plan.after_step() {
                    struck = true;
                    self.strike(cfg, plan, &mut sessions)?;
                    continue;
                }
                let (owner, name) = (sessions[i].owner, sessions[i].name.clone());
                let more = self.step(owner, &name)?;
                sessions[i].steps += 1;
                sessions[i].finished = !more;
            }
        }
        Ok(())
    }

    /// Carries out the nemesis on the first session's owner.
    fn strike(
        &mut self,
        cfg: &WorkersConfig,
        plan: WorkerPlan,
        sessions: &mut [Served],
    ) -> Result<(), WorkersError> {
        let victim = sessions[0].owner;
        let heir = (victim + 1) % cfg.workers;
        let name = sessions[0].name.clone();
        match plan {
            WorkerPlan::None => Ok(()),
            WorkerPlan::Pause { .. } => {
                // Renewed now, so the lease is surely live when the heir first asks.
                let reply = self.workers[victim].call(&WorkerCommand::Renew {
                    session: name.clone(),
                })?;
                self.history.push(WorkerEvent::Replied {
                    worker: self.workers[victim].id.clone(),
                    session: name.clone(),
                    reply,
                });
                self.workers[victim].signal(Signal::SIGSTOP)?;
                self.history.push(WorkerEvent::Paused {
                    worker: self.workers[victim].id.clone(),
                });
                self.acquire(heir, &name, true, cfg.ttl_ms)?;
                self.finish(heir, &name)?;
                self.workers[victim].signal(Signal::SIGCONT)?;
                self.history.push(WorkerEvent::Resumed {
                    worker: self.workers[victim].id.clone(),
                });
                // The zombie writer goes on where it was paused.
                self.finish(victim, &name)?;
                sessions[0].finished = true;
                Ok(())
            }
            WorkerPlan::Kill { .. } => {
                let w = &mut self.workers[victim];
                w.signal(Signal::SIGKILL)?;
                let _ = w.child.wait();
                self.history.push(WorkerEvent::Killed {
                    worker: w.id.clone(),
                });
                for s in sessions
                    .iter_mut()
                    .filter(|s| s.owner == victim && !s.finished)
                {
                    self.acquire(heir, &s.name, true, cfg.ttl_ms)?;
                    s.owner = heir;
                    s.steps = 0;
                }
                Ok(())
            }
        }
    }
}
