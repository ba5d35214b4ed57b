//! The worker: `agentchaos worker …`, one of many processes that serve
//! sessions of one store through leases (`chaos/PROTOCOL.md`, section 9).
//! The nemesis pauses (SIGSTOP) and kills it.
//!
//! It does nothing on its own: the harness sends one [`WorkerCommand`]
//! per line on its stdin and reads one [`WorkerReply`] per line on its
//! stdout (flushed before the next command is read), so the harness
//! decides every interleaving and a plan replays the same. A worker owns
//! a session from the grant of `acquire` until it is fenced; each `step`
//! does the next write of its workload there: a run of [`CALLS`]
//! side-effecting tool calls, each `tool_call`, intent, effect (the lease
//! renewed immediately before it, so a taken-over worker stops there),
//! `effect_committed`, `tool_result`. After a takeover it derives its
//! position from the store's events and recovery alone: an orphan marked
//! `started` is reconciled against the world first. The worker trusts the
//! store; the checker, not the worker, judges what the store accepted.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, Write};
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use agentchaos_protocol::event::{
    event_id, Effect, Event, EventId, Phase, ReconcileOutcome, Record, ResultStatus, RunStatus,
};
use agentchaos_protocol::message::{LeaseGrant, LeaseRequest, RecoveryState, WireRecord};
use agentchaos_protocol::ErrorKind;
use serde::{Deserialize, Serialize};

use crate::store::{SessionSpec, SessionStore, StoreBackend, StoreError};

/// Side-effecting calls in each session's workload.
pub const CALLS: usize = 3;

/// The world file every worker appends its applied effects to.
pub const EFFECTS_FILE: &str = "effects.jsonl";

/// One command from the harness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case")]
pub enum WorkerCommand {
    /// Open `session` with a lease (once: `held` while another lease is live).
    Acquire { session: String },
    /// The next write of `session`'s workload.
    Step { session: String },
    /// Renew the lease of `session`.
    Renew { session: String },
    /// Close `session` now (a fenced worker stops acting for it): its
    /// handle goes, and a live lease of its own is released.
    Close { session: String },
    /// Die (SIGKILL, by its own hand) at the `point`-th crash point its
    /// in-process agentstore passes from now on (1: the next), inside the
    /// next request; none disarms. Crash points are on only when the
    /// harness started it with `AGENTCHAOS_TRACE`.
    KillAt { point: Option<NonZeroU64> },
}

/// One reply to the harness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
pub enum WorkerReply {
    /// The store granted the lease; its recovery and the events after it.
    Granted {
        grant: LeaseGrant,
        recovery: RecoveryState,
        records: Vec<WireRecord>,
    },
    /// `lease_held`: another owner's lease is live.
    Held { message: String },
    /// The store acknowledged this write at `seq` under `epoch`.
    Acked { epoch: u64, seq: u64, what: String },
    /// The lease was renewed (before an effect, or on command).
    Renewed { grant: LeaseGrant },
    /// The effect of `operation_id` was applied to the world under `epoch`,
    /// right after the store renewed the lease (`renewed`).
    Applied {
        epoch: u64,
        operation_id: String,
        renewed: LeaseGrant,
    },
    /// The store refused this write with `fenced`: the worker stops acting
    /// for the session.
    Fenced {
        epoch: u64,
        what: String,
        message: String,
    },
    /// The session's workload is complete.
    Done,
    /// The session was closed.
    Closed,
    /// A kill at a crash point was armed (or disarmed).
    Armed,
    /// The worker cannot go on with the session (a refusal other than
    /// `fenced`, or a position it cannot resume from).
    Failed { what: String, message: String },
}

impl WorkerReply {
    /// The store accepted the step (a write, an effect or a renewal): the
    /// worker has more to do for the session.
    pub fn accepted(&self) -> bool {
        matches!(
            self,
            WorkerReply::Acked { .. } | WorkerReply::Applied { .. } | WorkerReply::Renewed { .. }
        )
    }
}

/// What the worker is told on its command line.
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    pub root: PathBuf,
    pub workspace: PathBuf,
    pub world: PathBuf,
    pub worker_id: String,
    pub ttl_ms: u64,
}

/// One effect as the world recorded it: which worker and epoch applied it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedEffect {
    pub session: String,
    pub operation_id: String,
    pub worker_id: String,
    pub epoch: u64,
}

/// Every effect in the world's file, in the order applied.
pub fn read_effects(world: &Path) -> std::io::Result<Vec<AppliedEffect>> {
    let text = match std::fs::read_to_string(world.join(EFFECTS_FILE)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    text.lines()
        .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
        .collect()
}

/// Appends one applied effect to the world, durably, in one write
/// (`O_APPEND`: lines of concurrent workers never interleave).
fn apply(world: &Path, effect: &AppliedEffect) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(effect).expect("an effect serializes");
    line.push(b'\n');
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(world.join(EFFECTS_FILE))?;
    file.write_all(&line)?;
    file.sync_data()
}

/// The call ids and operation ids of a session's workload.
fn call_id(i: usize) -> String {
    format!("c{i}")
}

fn operation_id(session: &str, i: usize) -> String {
    format!("op-{session}-{i}")
}

/// The operation ids of `session`'s workload, each to be applied to the
/// world once.
pub fn workload_operations(session: &str) -> Vec<String> {
    (0..CALLS).map(|i| operation_id(session, i)).collect()
}

/// One write of the workload.
#[derive(Debug, Clone, PartialEq)]
enum Action {
    Append(Event),
    /// A `tool_result` under the call's `tool_call`, whose id is known once acked.
    Result(String),
    Intent(String),
    /// Renew, then apply the effect to the world.
    Effect(usize),
    Commit(usize),
    /// Look the operation up in the world and record what was found.
    Reconcile(usize),
}

/// A session this worker owns.
struct Owned {
    store: Box<dyn SessionStore>,
    epoch: u64,
    todo: VecDeque<Action>,
    /// Event id of each call's `tool_call`.
    calls: BTreeMap<String, EventId>,
    /// Why nothing more is sent: fenced, failed, or a position this
    /// worker cannot resume from.
    stopped: Option<String>,
}

/// A session this worker cannot resume: the store's recovery left a run
/// open or a call unmarked. Why it stops sending, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct NotResumable(String);

/// The actions left of a session's workload, from its events (a fresh
/// session, or one the recovery of this takeover just marked).
fn plan(
    session: &str,
    records: &[Record],
    epoch: u64,
    calls: &mut BTreeMap<String, EventId>,
) -> Result<VecDeque<Action>, NotResumable> {
    let view = crate::model::oracle::projection(records);
    let mut results = std::collections::BTreeSet::new();
    for r in records {
        match r.event() {
            Some(Event::ToolCall { call_id, .. }) => {
                calls.insert(call_id.clone(), event_id(r.seq));
            }
            Some(Event::ToolResult { call_id, .. }) => {
                results.insert(call_id.clone());
            }
            _ => {}
        }
    }
    let mut todo = VecDeque::new();
    if let Some(run) = &view.open_run {
        return Err(NotResumable(format!(
            "run {run} is still open after the grant: the store's recovery did not close it"
        )));
    }
    todo.push_back(Action::Append(Event::RunStarted {
        run_id: format!("r{epoch}"),
    }));
    for i in 0..CALLS {
        let id = call_id(i);
        if results.contains(&id) {
            continue;
        }
        match view.open_calls.iter().find(|c| c.call_id == id) {
            None => {
                todo.push_back(Action::Append(Event::ToolCall {
                    parent: None,
                    call_id: id.clone(),
                    tool: "deploy".into(),
                    args: serde_json::json!({ "step": i }),
                    effect: Effect::SideEffect,
                    operation_id: Some(operation_id(session, i)),
                    target: Some("prod".into()),
                    needs_approval: false,
                }));
                todo.extend([
                    Action::Intent(id.clone()),
                    Action::Effect(i),
                    Action::Commit(i),
                    Action::Result(id),
                ]);
            }
            Some(call) => match call.recovery {
                None => {
                    return Err(NotResumable(format!(
                        "call {id} has no result and no recovery mark after the grant: the store's recovery did not mark it"
                    )))
                }
                Some(Phase::Requested) => todo.extend([
                    Action::Intent(id.clone()),
                    Action::Effect(i),
                    Action::Commit(i),
                    Action::Result(id),
                ]),
                // Reconciled under this mark by an owner that lost the
                // session before it went on: what it learned stands.
                Some(Phase::Started) => match call.reconciled {
                    None => todo.push_back(Action::Reconcile(i)),
                    Some(ReconcileOutcome::Applied) => todo.push_back(Action::Result(id)),
                    Some(ReconcileOutcome::NotApplied) => todo.extend([
                        Action::Intent(id.clone()),
                        Action::Effect(i),
                        Action::Commit(i),
                        Action::Result(id),
                    ]),
                },
                Some(Phase::Committed) => todo.push_back(Action::Result(id)),
            },
        }
    }
    todo.push_back(Action::Append(Event::RunFinished {
        run_id: format!("r{epoch}"),
        status: RunStatus::Completed,
    }));
    Ok(todo)
}

/// The worker: owned sessions and how to reach the store.
pub struct Worker<'a> {
    args: &'a WorkerArgs,
    backend: &'a dyn StoreBackend,
    owned: BTreeMap<String, Owned>,
}

impl std::fmt::Debug for Worker<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("worker_id", &self.args.worker_id)
            .field("sessions", &self.owned.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn refused(what: &str, epoch: u64, e: StoreError) -> WorkerReply {
    if e.kind == Some(ErrorKind::Fenced) {
        WorkerReply::Fenced {
            epoch,
            what: what.to_string(),
            message: e.message,
        }
    } else {
        WorkerReply::Failed {
            what: what.to_string(),
            message: e.message,
        }
    }
}

impl<'a> Worker<'a> {
    pub fn new(args: &'a WorkerArgs, backend: &'a dyn StoreBackend) -> Worker<'a> {
        Worker {
            args,
            backend,
            owned: BTreeMap::new(),
        }
    }

    /// Serves commands until stdin ends, then closes every session it
    /// still owns (releasing its leases, as a worker shutting down does).
    pub fn serve(&mut self, input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
        self.serve_commands(input, &mut output)?;
        for (_, owned) in std::mem::take(&mut self.owned) {
            // A fenced or dead connection has nothing to release.
            let _ = owned.store.close();
        }
        Ok(())
    }

    fn serve_commands(
        &mut self,
        input: impl BufRead,
        mut output: impl Write,
    ) -> std::io::Result<()> {
        for line in input.lines() {
            let line = line?;
            let reply = match serde_json::from_str::<WorkerCommand>(&line) {
                Ok(command) => self.handle(command),
                Err(e) => WorkerReply::Failed {
                    what: "command".into(),
                    message: format!("unreadable command {line:?}: {e}"),
                },
            };
            let mut bytes = serde_json::to_vec(&reply).expect("a reply serializes");
            bytes.push(b'\n');
            output.write_all(&bytes)?;
            output.flush()?;
        }
        Ok(())
    }

    fn handle(&mut self, command: WorkerCommand) -> WorkerReply {
        match command {
            WorkerCommand::Acquire { session } => self.acquire(session),
            WorkerCommand::Step { session } => self.step(&session),
            WorkerCommand::Close { session } => match self.owned.remove(&session) {
                Some(o) => match o.store.close() {
                    Ok(()) => WorkerReply::Closed,
                    Err(e) => refused("close", o.epoch, e),
                },
                None => WorkerReply::Failed {
                    what: "close".into(),
                    message: format!("this worker does not own session {session}"),
                },
            },
            WorkerCommand::KillAt { point } => {
                if agentstore::crashpoint::kill_in(point) {
                    WorkerReply::Armed
                } else {
                    WorkerReply::Failed {
                        what: "kill_at".into(),
                        message: "crash points are off in this worker: only an agentstore in-process started with AGENTCHAOS_TRACE has them".into(),
                    }
                }
            }
            WorkerCommand::Renew { session } => match self.owned.get_mut(&session) {
                Some(o) => match o.store.renew_lease() {
                    Ok(grant) => WorkerReply::Renewed { grant },
                    Err(e) => {
                        let reply = refused("renew_lease", o.epoch, e);
                        o.stopped = Some(format!("{reply:?}"));
                        reply
                    }
                },
                None => WorkerReply::Failed {
                    what: "renew_lease".into(),
                    message: format!("this worker does not own session {session}"),
                },
            },
        }
    }

    fn acquire(&mut self, session: String) -> WorkerReply {
        let spec = SessionSpec {
            root: self.args.root.clone(),
            session: session.clone(),
            workspace: self.args.workspace.clone(),
        };
        let request = LeaseRequest {
            worker_id: self.args.worker_id.clone(),
            ttl_ms: self.args.ttl_ms,
        };
        let opened = match self.backend.open_leased(&spec, &request) {
            Ok(o) => o,
            Err(e) if e.kind == Some(ErrorKind::LeaseHeld) => {
                return WorkerReply::Held { message: e.message }
            }
            Err(e) => return refused("open", 0, e),
        };
        let mut store = opened.store;
        let epoch = opened.grant.epoch;
        let records = match store.events(None) {
            Ok(r) => r,
            Err(e) => return refused("events", epoch, e),
        };
        let mut calls = BTreeMap::new();
        let (todo, stopped) = match plan(&session, &records, epoch, &mut calls) {
            Ok(todo) => (todo, None),
            Err(why) => (VecDeque::new(), Some(why.to_string())),
        };
        let reply = WorkerReply::Granted {
            grant: opened.grant,
            recovery: opened.recovery,
            records: records.iter().map(WireRecord::of).collect(),
        };
        self.owned.insert(
            session,
            Owned {
                store,
                epoch,
                todo,
                calls,
                stopped,
            },
        );
        reply
    }

    fn step(&mut self, session: &str) -> WorkerReply {
        let world = self.args.world.clone();
        let worker_id = self.args.worker_id.clone();
        let Some(o) = self.owned.get_mut(session) else {
            return WorkerReply::Failed {
                what: "step".into(),
                message: format!("this worker does not own session {session}"),
            };
        };
        if let Some(why) = &o.stopped {
            return WorkerReply::Failed {
                what: "step".into(),
                message: format!("session {session} is stopped: {why}"),
            };
        }
        let Some(action) = o.todo.pop_front() else {
            return WorkerReply::Done;
        };
        let reply = o.run(action, session, &world, &worker_id);
        if matches!(
            reply,
            WorkerReply::Fenced { .. } | WorkerReply::Failed { .. }
        ) {
            o.stopped = Some(format!("{reply:?}"));
        }
        reply
    }
}

impl Owned {
    fn append(&mut self, event: Event) -> WorkerReply {
        let what = event.type_name().to_string();
        match self.store.append(&event) {
            Ok(ack) => {
                if let Event::ToolCall { call_id, .. } = &event {
                    self.calls.insert(call_id.clone(), event_id(ack.seq));
                }
                WorkerReply::Acked {
                    epoch: self.epoch,
                    seq: ack.seq,
                    what,
                }
            }
            Err(e) => refused(&what, self.epoch, e),
        }
    }

    fn run(&mut self, action: Action, session: &str, world: &Path, worker_id: &str) -> WorkerReply {
        match action {
            Action::Append(event) => self.append(event),
            Action::Intent(call_id) => self.append(Event::ToolStarted { call_id }),
            Action::Result(call_id) => {
                let parent = self.calls.get(&call_id).cloned();
                self.append(Event::ToolResult {
                    parent,
                    call_id,
                    status: ResultStatus::Ok,
                    output: Some(serde_json::json!("deployed")),
                    blob: None,
                })
            }
            Action::Commit(i) => self.append(Event::EffectCommitted {
                call_id: call_id(i),
                operation_id: operation_id(session, i),
                external_ref: format!("{worker_id}/{}", self.epoch),
            }),
            Action::Effect(i) => {
                // The lease is renewed right before the effect: a worker
                // that was taken over is fenced here, before it acts.
                let renewed = match self.store.renew_lease() {
                    Ok(grant) => grant,
                    Err(e) => return refused("renew_lease", self.epoch, e),
                };
                let effect = AppliedEffect {
                    session: session.to_string(),
                    operation_id: operation_id(session, i),
                    worker_id: worker_id.to_string(),
                    epoch: self.epoch,
                };
                match apply(world, &effect) {
                    Ok(()) => WorkerReply::Applied {
                        epoch: self.epoch,
                        operation_id: effect.operation_id,
                        renewed,
                    },
                    Err(e) => WorkerReply::Failed {
                        what: "effect".into(),
                        message: format!("cannot record the effect in the world: {e}"),
                    },
                }
            }
            Action::Reconcile(i) => {
                let op = operation_id(session, i);
                let applied = match read_effects(world) {
                    Ok(effects) => effects.iter().any(|e| e.operation_id == op),
                    Err(e) => {
                        return WorkerReply::Failed {
                            what: "reconcile".into(),
                            message: format!("cannot read the world: {e}"),
                        }
                    }
                };
                let (outcome, then) = if applied {
                    (ReconcileOutcome::Applied, vec![Action::Result(call_id(i))])
                } else {
                    (
                        ReconcileOutcome::NotApplied,
                        vec![
                            Action::Intent(call_id(i)),
                            Action::Effect(i),
                            Action::Commit(i),
                            Action::Result(call_id(i)),
                        ],
                    )
                };
                for a in then.into_iter().rev() {
                    self.todo.push_front(a);
                }
                self.append(Event::ToolReconciled {
                    call_id: call_id(i),
                    outcome,
                    evidence: format!("world lookup of {op}"),
                })
            }
        }
    }
}
