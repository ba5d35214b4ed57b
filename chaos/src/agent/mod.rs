//! The child agent: `agentchaos agent …`, the process the nemesis kills.
//!
//! It runs a scenario against a store with real side effects, following
//! the intent/commit protocol: `tool_call`, `approval`, `tool_started`
//! (durable before the tool runs), the effect, `effect_committed` (side
//! effects), `tool_result`. Every append is reported to the harness before
//! it is attempted and again when acknowledged (see [`crate::agent::wire`]).
//!
//! After a restart (life > 0) it recovers the store, reports what recovery
//! said, and pauses twice so the harness can look at the store (after the
//! first recovery, and after reopening and recovering again), each time
//! with the session closed, so that a fresh adapter can open it.
//! Then it derives its position in the scenario from the store's durable
//! events alone, never from memory, and resumes: an uncertain call is
//! handled by the phase the store reported. `requested` runs; `started` is
//! reconciled with its tool first (`tool_reconciled`), then finished
//! without running (`applied`) or run again with the same operation id
//! (`not_applied`), except a read-only call, which runs again at once (as
//! agents do, and as the session rules allow: a store that asks a read
//! for a reconciliation refuses a legal append); `committed` is never run
//! again. An interrupted run is
//! continued in a new run attempt `<run>~<n>`.
//!
//! The agent trusts the store's recovery report, as a real agent would: a
//! store that reports the wrong phase leads it astray, and the checker, not
//! the agent, catches the consequence. The agent must never write to stdout
//! anything but [`ChildLine`]s.

pub mod schedule;
pub mod tools;
pub mod wire;
pub mod worker;
pub mod world;

use std::collections::{BTreeMap, HashMap};
use std::io::Stdout;
use std::path::PathBuf;

use agentchaos_protocol::event::{
    event_id, BlobRef, Decision, Effect, Event, Phase, ReconcileOutcome, Record, ResultStatus,
    RunStatus, Seq,
};
use agentstore::crashpoint;
use serde_json::Value;

use crate::agent::tools::{Output, ToolContext};
use crate::agent::wire::{
    fingerprint, wait_for_harness, ChildLine, PipeError, ReportedCall, Reporter, ServedContext,
};
use crate::agent::world::WorldClient;
use crate::model::{call_of, describe_event, store_authored, Model};
use crate::scenario::rng::Rng;
use crate::scenario::{self, Op, PlacedOp, Run, Scenario, ToolInvocation};
use crate::store::{
    Ack, Pending, SessionSpec, SessionStore, StoreBackend, StoreError, StoreResult,
};

/// The crash point between a durable intent and the effect.
pub const BEFORE_EFFECT: &str = "agent.before_effect";

/// What the agent process is told on its command line.
#[derive(Debug, Clone)]
pub struct AgentArgs {
    pub scenario: PathBuf,
    pub spec: SessionSpec,
    pub world: PathBuf,
    /// 0 for the first process of a trial; each restart adds one.
    pub life: u32,
    /// The largest scenario file read (the harness's `--max-input-bytes`).
    pub max_input_bytes: u64,
}

/// How a rendered context shows the crash: agentstore's
/// `<recovery>…</recovery>` block if it has one, else (an adapter's own
/// layout, `chaos/PROTOCOL.md`) the lines naming a `call` with its `phase`
/// or a `run` as `interrupted`. None when it shows nothing.
pub fn recovery_block(context: &str) -> Option<String> {
    if let Some(start) = context.find("<recovery>") {
        let end = context[start..].find("</recovery>")? + start + "</recovery>".len();
        return Some(context[start..end].to_string());
    }
    let lines: Vec<&str> = context
        .lines()
        .filter(|l| {
            (l.contains("call ") && l.contains("phase "))
                || (l.contains("run ") && l.contains("interrupted"))
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// The contexts the harness judges after a recovery: unbudgeted, then
/// with each of [`crate::model::oracle::budgets`].
pub fn served_contexts(store: &mut dyn SessionStore) -> StoreResult<Vec<ServedContext>> {
    let full = store.context(None)?;
    let block = recovery_block(&full);
    let mut out = vec![ServedContext {
        budget: None,
        text: full.clone(),
    }];
    for b in crate::model::oracle::budgets(&full, block.as_deref()) {
        out.push(ServedContext {
            budget: Some(b),
            text: store.context(Some(b))?,
        });
    }
    Ok(out)
}

fn hash_hex(s: &str) -> String {
    format!("{:08x}", crc32c::crc32c(s.as_bytes()))
}

fn close(store: Box<dyn SessionStore>) -> Result<(), AgentError> {
    store
        .close()
        .map_err(|e| AgentError::Store(format!("cannot close the session: {e}")))
}

/// How many times life `life` opens the session: once in the first life;
/// after a restart three times (the recovery, the second recovery, the
/// resumed work), each time with a fresh adapter. The harness forks that
/// many store processes ahead for a life it can fork for.
pub fn opens(life: u32) -> usize {
    if life == 0 {
        1
    } else {
        3
    }
}

/// Runs the agent to completion (or until the nemesis kills it).
pub fn run(args: &AgentArgs, backend: &dyn StoreBackend) -> Result<(), AgentError> {
    let scenario = scenario::load(&args.scenario, args.max_input_bytes)
        .map_err(|e| AgentError::Harness(e.to_string()))?;
    let sched = crate::scenario::interleaving::from_env()
        .map_err(|e| AgentError::Harness(e.to_string()))?;
    let stdout = std::io::stdout();
    let mut reporter = Reporter::new(stdout);
    let open = || {
        backend
            .open(&args.spec)
            .map_err(|e| AgentError::Store(format!("cannot open the session: {e}")))
    };
    let mut store = open()?;
    let mut uncertain = BTreeMap::new();
    if args.life > 0 {
        let first = store
            .recover()
            .map_err(|e| AgentError::Store(format!("recovery failed: {e}")))?;
        let contexts = served_contexts(store.as_mut())
            .map_err(|e| AgentError::Store(format!("cannot render the context: {e}")))?;
        let projection = store
            .projection()
            .map_err(|e| AgentError::Store(format!("cannot read the projection: {e}")))?;
        reporter.send(&ChildLine::Recovered {
            appended: first.appended,
            interrupted: first.interrupted_runs.clone(),
            uncertain: first
                .uncertain
                .iter()
                .map(|u| ReportedCall {
                    call_id: u.call_id.clone(),
                    phase: u.phase,
                })
                .collect(),
            block: recovery_block(&contexts[0].text),
            contexts,
            projection,
        })?;
        // The session is released while the harness looks: a store seen
        // only through a fresh adapter of its own must be able to open it.
        crate::timing::beside_the_harness(|| close(store))?;
        let stdin = std::io::stdin();
        wait_for_harness(&mut stdin.lock())?;
        store = open()?;
        let again = store
            .recover()
            .map_err(|e| AgentError::Store(format!("second recovery failed: {e}")))?;
        reporter.send(&ChildLine::RecoveredAgain {
            appended: again.appended,
        })?;
        crate::timing::beside_the_harness(|| close(store))?;
        wait_for_harness(&mut stdin.lock())?;
        store = open()?;
        uncertain = again
            .uncertain
            .into_iter()
            .map(|u| (u.call_id, u.phase))
            .collect();
    }
    let records = store
        .events(None)
        .map_err(|e| AgentError::Store(format!("cannot read the session's events: {e}")))?;
    let ops = scenario.ops();
    let mut agent = Agent {
        scenario: &scenario,
        ops: &ops,
        store,
        reporter,
        model: Model::default(),
        labels: HashMap::new(),
        uncertain,
        world: WorldClient::new(&args.world),
        workspace: args.spec.workspace.clone(),
        life: args.life,
        sched,
    };
    let start = agent.position(&records)?;
    for i in start..ops.len() {
        agent.execute(i)?;
    }
    agent.reporter.send(&ChildLine::Done)?;
    close(agent.store)
}

/// Why the agent stopped short of the end of its scenario, and whose
/// failure that is: the agent process exits 1 for the store's, and
/// [`EXIT_HARNESS_FAILED`] for the harness's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// The store failed or refused, or what it keeps does not follow the
    /// scenario: a finding about the store, for the checker to judge.
    #[error("{0}")]
    Store(String),
    /// The harness's side failed: the scenario, the pipe to the harness,
    /// the world, a tool in the workspace. Not the store's fault.
    #[error("{0}")]
    Harness(String),
}

impl From<tools::ToolError> for AgentError {
    fn from(e: tools::ToolError) -> AgentError {
        AgentError::Harness(e.to_string())
    }
}

impl From<PipeError> for AgentError {
    fn from(e: PipeError) -> AgentError {
        AgentError::Harness(e.to_string())
    }
}

/// The agent's exit code when the harness's side failed (the harness's
/// own "harness failed" exit code): such a life is an error of the trial,
/// never a finding about the store.
pub const EXIT_HARNESS_FAILED: u8 = 3;

/// How often the agent tries an append the store refuses with an I/O error.
pub const APPEND_ATTEMPTS: u32 = 3;

struct Agent<'a> {
    scenario: &'a Scenario,
    ops: &'a [PlacedOp],
    store: Box<dyn SessionStore>,
    reporter: Reporter<Stdout>,
    /// The agent's own fold of the session, kept current with every ack.
    model: Model,
    /// Message labels of the scenario -> seq of the message.
    labels: HashMap<String, Seq>,
    /// The store's report: uncertain calls and their phases.
    uncertain: BTreeMap<String, Phase>,
    world: WorldClient,
    workspace: PathBuf,
    life: u32,
    /// The plan's interleaving seed (`,sched:S`; 0: the default schedule).
    sched: u64,
}

impl Agent<'_> {
    /// Folds the durable events and returns the index of the first op
    /// they do not complete. The events must follow the scenario.
    fn position(&mut self, records: &[Record]) -> Result<usize, AgentError> {
        let mut next = 0;
        for rec in records {
            let Some(event) = rec.event() else {
                continue;
            };
            self.model.apply(rec.seq, event);
            let plumbing = store_authored(event)
                || matches!(event, Event::RequestHeader { .. })
                || matches!(event, Event::RunStarted { run_id } if run_id.contains('~'));
            if plumbing {
                continue;
            }
            while matches!(
                self.ops.get(next),
                Some(PlacedOp {
                    op: Op::Checkpoint,
                    ..
                })
            ) {
                next += 1;
            }
            let diverge = |expected: String| {
                format!(
                    "the log does not follow the scenario: seq {} is {}, the scenario expects {expected}",
                    rec.seq,
                    describe_event(event)
                )
            };
            let Some(placed) = self.ops.get(next) else {
                return Err(AgentError::Store(diverge("nothing more".into())));
            };
            let complete = match (&placed.op, event) {
                (Op::RunStart { run }, Event::RunStarted { run_id }) => {
                    if *run_id != self.scenario.runs[*run].id {
                        return Err(AgentError::Store(diverge(placed.op.to_string())));
                    }
                    true
                }
                (Op::User { .. }, Event::UserMessage { .. })
                | (Op::Assistant { .. }, Event::AssistantMessage { .. }) => {
                    if let Some(label) = &placed.label {
                        self.labels.insert(label.clone(), rec.seq);
                    }
                    true
                }
                (Op::Plan { .. }, Event::PlanUpdated { .. })
                | (Op::Compact { .. }, Event::Compaction { .. })
                | (Op::SwitchTo { .. }, Event::LeafMoved { .. })
                | (Op::RunEnd { .. }, Event::RunFinished { .. }) => true,
                (Op::Tool(t), e) if call_of(e) == Some(t.call_id.as_str()) => {
                    matches!(e, Event::ToolResult { .. })
                }
                (Op::Parallel { calls, .. }, e)
                    if calls.iter().any(|c| call_of(e) == Some(c.call_id.as_str())) =>
                {
                    calls.iter().all(|c| self.finished(&c.call_id))
                }
                _ => return Err(AgentError::Store(diverge(placed.op.to_string()))),
            };
            if complete {
                next += 1;
            }
        }
        Ok(next)
    }

    /// Appends one event, reporting it before and after. An I/O refusal is
    /// retried (each attempt announced anew), as real agents do, up to
    /// [`APPEND_ATTEMPTS`] attempts: a store must not let a retry duplicate
    /// the refused event, nor acknowledge what a failed sync may have lost.
    fn append(&mut self, event: Event) -> Result<Seq, AgentError> {
        let t = event.type_name().to_string();
        let h = fingerprint(&event);
        let mut attempt = 1;
        let ack = loop {
            self.reporter.send(&ChildLine::Append {
                t: t.clone(),
                h: h.clone(),
            })?;
            match self.store.append(&event) {
                Ok(ack) => break ack,
                Err(e) => {
                    let refused = self.refused(&event, &e)?;
                    if attempt == APPEND_ATTEMPTS {
                        return Err(AgentError::Store(format!("{refused} ({attempt} attempts)")));
                    }
                    attempt += 1;
                }
            }
        };
        answer(&mut self.reporter, &ChildLine::Ack { seq: ack.seq, t, h })?;
        self.model.apply(ack.seq, &event);
        Ok(ack.seq)
    }

    /// Reports the store's I/O refusal of `event` and says what it was; any
    /// other refusal ends the agent.
    fn refused(&mut self, event: &Event, e: &StoreError) -> Result<String, AgentError> {
        let refused = format!("the store refused {}: {e}", describe_event(event));
        if !e.io {
            return Err(AgentError::Store(refused));
        }
        answer(
            &mut self.reporter,
            &ChildLine::Refused {
                t: event.type_name().to_string(),
                h: fingerprint(event),
            },
        )?;
        Ok(refused)
    }

    /// Appends `n` events as parallel appenders do: each announced and
    /// written in order (event `i`'s parent, for the events that have one,
    /// is event `i - 1`; the first's is the active leaf), then each waited
    /// for by a thread of its own ([`SessionStore::group_waiter`]), under
    /// the harness's schedule drawn from `rng` ([`schedule`]): which waiter
    /// waits next, when a `Batch` store's group leader syncs, and the order
    /// the answers are reported in. A store that acknowledges as it writes
    /// (every adapter) has its ack reported at once, as for any append.
    /// A refused write ends the group; whatever the group did not get
    /// acknowledged is then appended one at a time by [`Agent::append`],
    /// with its retries.
    fn append_group(
        &mut self,
        n: usize,
        rng: Rng,
        build: impl Fn(usize, Option<String>) -> Event,
    ) -> Result<(), AgentError> {
        // (index in the group, event) of each write whose wait is deferred.
        let mut written: Vec<(usize, Event)> = Vec::new();
        // For each of them, the earlier deferred write its parent names: a
        // pipelined request sent before its parent was answered (section
        // 10 of chaos/PROTOCOL.md), refused for want of it if that was.
        let mut after: Vec<Option<usize>> = Vec::new();
        let mut pending = Vec::new();
        let mut acked = vec![false; n];
        let mut parent = self.model.leaf();
        for (i, done) in acked.iter_mut().enumerate() {
            let event = build(i, parent.clone());
            let (t, h) = (event.type_name().to_string(), fingerprint(&event));
            self.reporter.send(&ChildLine::Append {
                t: t.clone(),
                h: h.clone(),
            })?;
            match self.store.write(&event) {
                Ok(p) => {
                    if event.parent().is_some() {
                        parent = Some(event_id(p.seq));
                    }
                    if let Some(ack) = p.acknowledged() {
                        answer(&mut self.reporter, &ChildLine::Ack { seq: ack.seq, t, h })?;
                        self.model.apply(ack.seq, &event);
                        *done = true;
                    } else {
                        after.push(event.parent().flatten().and_then(|parent| {
                            pending
                                .iter()
                                .position(|q: &Pending| event_id(q.seq) == *parent)
                        }));
                        written.push((i, event));
                        pending.push(p);
                    }
                }
                Err(e) => {
                    self.refused(&event, &e)?;
                    break;
                }
            }
        }
        let mut results: Vec<Option<StoreResult<Ack>>> = written.iter().map(|_| None).collect();
        if !pending.is_empty() {
            let waiter = self.store.group_waiter().ok_or_else(|| {
                AgentError::Harness("the store deferred a wait and gives no waiter".into())
            })?;
            let waiter = &waiter;
            let jobs: Vec<_> = pending
                .into_iter()
                .map(|p| move || waiter.wait(p))
                .collect();
            let reporter = &mut self.reporter;
            schedule::run(rng, jobs, |k, result: StoreResult<Ack>| {
                let event = &written[k].1;
                let (t, h) = (event.type_name().to_string(), fingerprint(event));
                match &result {
                    Ok(ack) => answer(reporter, &ChildLine::Ack { seq: ack.seq, t, h })?,
                    Err(e) if e.io || after[k].is_some() => {
                        answer(reporter, &ChildLine::Refused { t, h })?
                    }
                    Err(_) => {} // Ends the agent below.
                }
                results[k] = Some(result);
                Ok::<(), PipeError>(())
            })?;
        }
        let ok: Vec<bool> = results.iter().map(|r| matches!(r, Some(Ok(_)))).collect();
        // The model folds the answers in write order, whatever order they came in.
        for (k, ((i, event), result)) in written.iter().zip(results).enumerate() {
            match result.expect("the schedule reports every waiter") {
                Ok(ack) => {
                    self.model.apply(ack.seq, event);
                    acked[*i] = true;
                }
                // Refused for want of a parent the store refused too: it is
                // appended again below, under the parent as it is then.
                Err(_) if after[k].is_some_and(|j| !ok[j]) => {}
                Err(e) if !e.io => {
                    let refused = format!("the store refused {}: {e}", describe_event(event));
                    return Err(AgentError::Store(refused));
                }
                Err(_) => {}
            }
        }
        for (i, _) in acked.iter().enumerate().filter(|(_, acked)| !**acked) {
            self.append(build(i, self.model.leaf()))?;
        }
        Ok(())
    }

    fn execute(&mut self, i: usize) -> Result<(), AgentError> {
        let placed = &self.ops[i];
        let run = &self.scenario.runs[placed.run];
        match &placed.op {
            Op::RunStart { .. } => {
                self.append(Event::RunStarted {
                    run_id: run.id.clone(),
                })?;
                self.header(run)
            }
            Op::Checkpoint => self
                .store
                .checkpoint()
                .map_err(|e| AgentError::Store(format!("checkpoint failed: {e}"))),
            op => {
                self.ensure_run(run)?;
                match op {
                    Op::User { text, reply_to } | Op::Assistant { text, reply_to } => {
                        let parent = match reply_to {
                            Some(label) => Some(event_id(self.labelled(label)?)),
                            None => self.model.leaf(),
                        };
                        let text = text.clone();
                        let event = if matches!(op, Op::User { .. }) {
                            Event::UserMessage { parent, text }
                        } else {
                            Event::AssistantMessage { parent, text }
                        };
                        let seq = self.append(event)?;
                        if let Some(label) = &placed.label {
                            self.labels.insert(label.clone(), seq);
                        }
                        Ok(())
                    }
                    Op::Plan { goal, steps } => self
                        .append(Event::PlanUpdated {
                            goal: goal.clone(),
                            steps: steps.clone(),
                        })
                        .map(drop),
                    Op::Tool(inv) => self.tool(inv),
                    Op::Parallel { calls, schedule } => self.parallel(calls, *schedule),
                    Op::Compact { summary, keep } => self.compact(summary, *keep),
                    Op::SwitchTo { label } => {
                        let seq = self.labelled(label)?;
                        self.append(Event::LeafMoved {
                            leaf: event_id(seq),
                        })
                        .map(drop)
                    }
                    Op::RunEnd { .. } => {
                        let run_id = self
                            .model
                            .open_run_id()
                            .ok_or(AgentError::Store("no open run to finish".into()))?
                            .to_string();
                        self.append(Event::RunFinished {
                            run_id,
                            status: RunStatus::Completed,
                        })
                        .map(drop)
                    }
                    Op::RunStart { .. } | Op::Checkpoint => unreachable!("handled above"),
                }
            }
        }
    }

    /// The seq of the message that carries `label`.
    fn labelled(&self, label: &str) -> Result<Seq, AgentError> {
        self.labels.get(label).copied().ok_or_else(|| {
            AgentError::Store(format!("label {label:?} names no message in the log"))
        })
    }

    fn header(&mut self, run: &Run) -> Result<(), AgentError> {
        let run_id = self
            .model
            .open_run_id()
            .ok_or(AgentError::Store("no open run".into()))?
            .to_string();
        let tools = crate::scenario::ToolKind::ALL
            .map(crate::scenario::ToolKind::name)
            .join(",");
        self.append(Event::RequestHeader {
            run_id,
            model: run.model.clone(),
            system_prompt_hash: hash_hex(&run.system_prompt),
            tools_hash: hash_hex(&tools),
        })
        .map(drop)
    }

    /// Makes sure a run is open with its header: after a crash the
    /// interrupted run continues as a new attempt `<run>~<n>`.
    fn ensure_run(&mut self, run: &Run) -> Result<(), AgentError> {
        if self.model.open_run_ready() {
            return Ok(());
        }
        if self.model.open_run.is_none() {
            let prefix = format!("{}~", run.id);
            let attempts = self
                .model
                .runs
                .iter()
                .filter(|r| r.run_id == run.id || r.run_id.starts_with(&prefix))
                .count();
            self.append(Event::RunStarted {
                run_id: format!("{}{attempts}", prefix),
            })?;
        }
        self.header(run)
    }

    fn compact(&mut self, summary: &str, keep: usize) -> Result<(), AgentError> {
        let branch = self.model.active_branch();
        if branch.is_empty() {
            return Err(AgentError::Store(
                "compaction with an empty active branch".into(),
            ));
        }
        let first_kept = branch[branch.len() - keep.min(branch.len())];
        let tokens_before = self.model.branch_weight().div_ceil(4);
        self.append(Event::Compaction {
            parent: self.model.leaf(),
            summary: summary.to_string(),
            first_kept_id: event_id(first_kept),
            tokens_before,
        })
        .map(drop)
    }

    fn ctx(&mut self) -> ToolContext<'_> {
        ToolContext {
            workspace: &self.workspace,
            world: &mut self.world,
            tests: &self.scenario.tests,
            life: self.life,
        }
    }

    fn tool(&mut self, inv: &ToolInvocation) -> Result<(), AgentError> {
        if !self.model.calls.contains_key(&inv.call_id) {
            self.append(tool_call(inv, self.model.leaf()))?;
        }
        match self.uncertain.remove(&inv.call_id) {
            Some(Phase::Requested) => self.attempt(inv),
            Some(Phase::Started) if inv.kind.effect() == Effect::None => self.attempt(inv),
            Some(Phase::Started) => self.reconcile(inv),
            Some(Phase::Committed) => {
                let call = &self.model.calls[&inv.call_id];
                let reference = call.commits.last().map_or("unknown", |(_, r)| r.as_str());
                let msg =
                    format!("effect committed before the crash as {reference}; not run again");
                self.result(inv, ResultStatus::Ok, Output::Inline(Value::String(msg)))
            }
            None => match self.model.calls[&inv.call_id].reconciled {
                Some(ReconcileOutcome::Applied) => self.finish_applied(inv, None),
                Some(ReconcileOutcome::NotApplied) | None => self.attempt(inv),
            },
        }
    }

    /// Whether the log holds the result of `call_id`.
    fn finished(&self, call_id: &str) -> bool {
        self.model
            .calls
            .get(call_id)
            .is_some_and(|c| c.result.is_some())
    }

    /// A `parallel` step: the calls' `tool_call`s as one group, their
    /// `tool_started`s as another (through the store's plain write, not
    /// its intent API: the group is waited for before any effect runs),
    /// each effect in order after its crash point, then the commits and
    /// the results as groups. Once the log holds any of its calls (a
    /// crash inside the step), each unfinished call resumes alone, as
    /// [`Agent::tool`] resumes any call.
    fn parallel(&mut self, calls: &[ToolInvocation], schedule: u64) -> Result<(), AgentError> {
        let sched = self.sched;
        let group = |g: u64| crate::scenario::interleaving::group_rng(sched, schedule, g);
        if calls
            .iter()
            .any(|c| self.model.calls.contains_key(&c.call_id))
        {
            for inv in calls {
                if !self.finished(&inv.call_id) {
                    self.tool(inv)?;
                }
            }
            return Ok(());
        }
        self.append_group(calls.len(), group(0), |i, parent| {
            tool_call(&calls[i], parent)
        })?;
        self.append_group(calls.len(), group(1), |i, _| Event::ToolStarted {
            call_id: calls[i].call_id.clone(),
        })?;
        let mut ran = Vec::new();
        for inv in calls {
            crashpoint::hit(BEFORE_EFFECT);
            let op = inv.operation_id.as_deref();
            ran.push(tools::run(&mut self.ctx(), inv.kind, &inv.args, op)?);
        }
        let mut commits = Vec::new();
        for (inv, ran) in calls.iter().zip(&ran) {
            commits.extend(commit_of(inv, ran)?);
        }
        self.append_group(commits.len(), group(2), |i, _| commits[i].clone())?;
        let mut results = Vec::new();
        for (inv, ran) in calls.iter().zip(ran) {
            let (output, blob) = self.output(ran.output)?;
            results.push((inv.call_id.clone(), ran.status, output, blob));
        }
        self.append_group(results.len(), group(3), |i, parent| {
            let (call_id, status, output, blob) = results[i].clone();
            Event::ToolResult {
                parent,
                call_id,
                status,
                output,
                blob,
            }
        })
    }

    /// Runs the call: approval (asked at most once), intent, effect, commit, result.
    fn attempt(&mut self, inv: &ToolInvocation) -> Result<(), AgentError> {
        if let Some(scripted) = inv.approval {
            let decision = match self.model.calls[&inv.call_id].approval() {
                Some(durable) => durable,
                None => {
                    self.append(Event::Approval {
                        call_id: inv.call_id.clone(),
                        decision: scripted,
                    })?;
                    scripted
                }
            };
            if decision == Decision::Denied {
                let msg = Value::String("denied by the user; not run".into());
                return self.result(inv, ResultStatus::Error, Output::Inline(msg));
            }
        }
        self.append(Event::ToolStarted {
            call_id: inv.call_id.clone(),
        })?;
        crashpoint::hit(BEFORE_EFFECT);
        let op = inv.operation_id.as_deref();
        let ran = tools::run(&mut self.ctx(), inv.kind, &inv.args, op)?;
        if let Some(commit) = commit_of(inv, &ran)? {
            self.append(commit)?;
        }
        self.result(inv, ran.status, ran.output)
    }

    /// Asks the tool whether the uncertain call happened, records the answer, acts on it.
    fn reconcile(&mut self, inv: &ToolInvocation) -> Result<(), AgentError> {
        let op = inv.operation_id.as_deref();
        let found =
            tools::reconcile(&mut self.ctx(), inv.kind, &inv.args, op).map_err(AgentError::from)?;
        self.append(Event::ToolReconciled {
            call_id: inv.call_id.clone(),
            outcome: found.outcome,
            evidence: found.evidence,
        })?;
        match found.outcome {
            ReconcileOutcome::Applied => self.finish_applied(inv, found.external_ref),
            ReconcileOutcome::NotApplied => self.attempt(inv),
        }
    }

    /// The effect happened before the crash: commit it (once) and give the result.
    fn finish_applied(
        &mut self,
        inv: &ToolInvocation,
        external_ref: Option<String>,
    ) -> Result<(), AgentError> {
        let committed = !self.model.calls[&inv.call_id].commits.is_empty();
        if let (Some(op), Effect::SideEffect, false) =
            (&inv.operation_id, inv.kind.effect(), committed)
        {
            let external_ref = match external_ref {
                Some(r) => r,
                None => tools::reconcile(&mut self.ctx(), inv.kind, &inv.args, Some(op))
                    .map_err(AgentError::from)?
                    .external_ref
                    // The store's durable record says applied; the world disagrees.
                    .ok_or_else(|| {
                        AgentError::Store(format!(
                            "the log says {op} was applied; the tool does not report it"
                        ))
                    })?,
            };
            self.append(Event::EffectCommitted {
                call_id: inv.call_id.clone(),
                operation_id: op.clone(),
                external_ref,
            })?;
        }
        let msg = Value::String(
            "applied before the crash (verified with the tool); not run again".into(),
        );
        self.result(inv, ResultStatus::Ok, Output::Inline(msg))
    }

    /// A tool's output as a result carries it: inline, or stored as a blob.
    fn output(&mut self, output: Output) -> Result<(Option<Value>, Option<BlobRef>), AgentError> {
        Ok(match output {
            Output::Inline(v) => (Some(v), None),
            Output::Blob(bytes) => {
                let blob = self
                    .store
                    .put_blob(&bytes)
                    .map_err(|e| AgentError::Store(format!("cannot store a blob: {e}")))?;
                (
                    Some(Value::String(format!(
                        "{} bytes, stored as a blob",
                        bytes.len()
                    ))),
                    Some(blob),
                )
            }
        })
    }

    fn result(
        &mut self,
        inv: &ToolInvocation,
        status: ResultStatus,
        output: Output,
    ) -> Result<(), AgentError> {
        let (output, blob) = self.output(output)?;
        self.append(Event::ToolResult {
            parent: self.model.leaf(),
            call_id: inv.call_id.clone(),
            status,
            output,
            blob,
        })
        .map(drop)
    }
}

/// Sends an answer to an append (an ack or a refusal), after the syncs
/// the store reported since the last answer ([`schedule::take_syncs`]), so
/// that the pipe shows which syncs came before it.
fn answer(reporter: &mut Reporter<Stdout>, line: &ChildLine) -> Result<(), PipeError> {
    for sync in schedule::take_syncs() {
        reporter.send(&match sync {
            Some(next_seq) => ChildLine::Synced { next_seq },
            None => ChildLine::SyncFailed,
        })?;
    }
    reporter.send(line)
}

/// The `tool_call` of `inv`, hung under `parent`.
fn tool_call(inv: &ToolInvocation, parent: Option<String>) -> Event {
    Event::ToolCall {
        parent,
        call_id: inv.call_id.clone(),
        tool: inv.kind.name().to_string(),
        args: inv.args.clone(),
        effect: inv.kind.effect(),
        operation_id: inv.operation_id.clone(),
        target: Some(inv.target.clone()),
        needs_approval: inv.approval.is_some(),
    }
}

/// The `effect_committed` a side effect's run owes (none for other
/// effects); a side effect that left no external reference is the
/// harness's failure (its tools always leave one).
fn commit_of(inv: &ToolInvocation, ran: &tools::Ran) -> Result<Option<Event>, AgentError> {
    let (Some(op), Effect::SideEffect) = (&inv.operation_id, inv.kind.effect()) else {
        return Ok(None);
    };
    let external_ref = ran.external_ref.clone().ok_or_else(|| {
        AgentError::Harness(format!("{} left no external reference", inv.call_id))
    })?;
    Ok(Some(Event::EffectCommitted {
        call_id: inv.call_id.clone(),
        operation_id: op.clone(),
        external_ref,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_recovery_block() {
        let ctx = "[user] hi\n<recovery>\n- call c1 ...\n</recovery>\n";
        assert_eq!(
            recovery_block(ctx).as_deref(),
            Some("<recovery>\n- call c1 ...\n</recovery>")
        );
        assert_eq!(recovery_block("[user] hi\n"), None);
        let own =
            "[user] hi\nRECOVERY:\n  call c2 (deploy): phase started\n  run r1 was interrupted\n";
        assert_eq!(
            recovery_block(own).as_deref(),
            Some("  call c2 (deploy): phase started\n  run r1 was interrupted")
        );
    }
}
