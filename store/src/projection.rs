//! The projection: the fold of the log that resuming a session needs.
//!
//! It holds the open run, the open tool calls with how far each got, the
//! operation ids already committed, the active branch of the history tree
//! (from the latest compaction's first kept entry to the leaf), the plan and
//! the last request header. Its size is bounded by what is open and by the
//! active window, not by the length of the log, so a snapshot of it stays
//! small however long the session runs.
//!
//! This module owns the session rules ([`Projection::check`]) and how each
//! event changes the state ([`Projection::apply`]). It never reads files
//! itself (but for [`replay`] and [`first_rule_violation`], which fold a log
//! from disk with bounded memory): when an event refers to a node outside
//! the active window (a branch switch to an old entry), it asks a
//! [`NodeSource`].

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::nodes::{node_of, node_of_event, CompactionView, Node, NodeSource, SeenNodes};

use crate::error::{Error, Result};
use crate::event::{
    event_id, seq_of_event_id, Body, Decision, Effect, Event, EventId, Phase, ReconcileOutcome,
    Record, Seq,
};
use crate::fault::{self, Fault};
use crate::index::SparseIndex;
use crate::nodes::RecentNodes;
use crate::scan::LogPosition;

/// A tool call that has no result yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenCall {
    pub call_id: String,
    pub seq: Seq,
    pub tool: String,
    pub args: Value,
    pub effect: Effect,
    pub operation_id: Option<String>,
    pub target: Option<String>,
    pub needs_approval: bool,
    pub approval: Option<Decision>,
    /// `tool_started` (the intent) is durable.
    pub started: bool,
    /// `effect_committed` is durable, with the external reference.
    pub committed: Option<String>,
    /// The phase recovery marked it with, if it was orphaned by a crash.
    pub recovery: Option<Phase>,
    /// What reconciliation learned since the mark.
    pub reconciled: Option<ReconcileOutcome>,
}

impl OpenCall {
    /// How far the call got, as recovery would mark it now.
    pub fn phase(&self) -> Phase {
        if self.committed.is_some() {
            Phase::Committed
        } else if self.started {
            Phase::Started
        } else {
            Phase::Requested
        }
    }

    /// Marked uncertain and not yet reconciled.
    pub fn is_uncertain(&self) -> bool {
        self.recovery.is_some() && self.reconciled.is_none()
    }
}

/// The plan as last updated (a protocol type: the projection view carries it).
pub use agentchaos_protocol::view::Plan;

/// What the model was configured with for the current run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestHeader {
    pub run_id: String,
    pub model: String,
    pub system_prompt_hash: String,
    pub tools_hash: String,
}

impl RequestHeader {
    /// What differs from `earlier` (model, system prompt, tools), in words;
    /// empty when a resumed run talks to the same configuration.
    pub fn changes_since(&self, earlier: &RequestHeader) -> Vec<String> {
        let mut changes = Vec::new();
        if self.model != earlier.model {
            changes.push(format!(
                "model changed from {} to {}",
                earlier.model, self.model
            ));
        }
        if self.system_prompt_hash != earlier.system_prompt_hash {
            changes.push("system prompt changed".to_string());
        }
        if self.tools_hash != earlier.tools_hash {
            changes.push("tool definitions changed".to_string());
        }
        changes
    }
}

/// The fold of a session's log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    next_seq: Seq,
    session_id: Option<String>,
    workspace: Option<String>,
    open_run: Option<String>,
    /// The id of the run started last. A new run must not reuse it (the
    /// classic mistake of a restarted agent); older ids are not kept, so the
    /// projection stays small however many runs a session has.
    last_run: Option<String>,
    /// Runs interrupted since the last run started.
    interrupted: Vec<String>,
    calls: BTreeMap<String, OpenCall>,
    committed_ops: BTreeSet<String>,
    /// Active branch, oldest first: from the window's base to the leaf.
    /// Seqs grow along a path, so this is sorted.
    branch: Vec<Seq>,
    compaction: Option<CompactionView>,
    plan: Option<Plan>,
    header: Option<RequestHeader>,
    /// Quarantine files a `tail_quarantined` names (one per torn tail ever
    /// cut: a handful).
    #[serde(default)]
    quarantined: BTreeSet<String>,
}

fn rule(msg: String) -> Result<()> {
    Err(Error::Rule(msg))
}

impl Projection {
    /// The seq the next event gets.
    pub fn next_seq(&self) -> Seq {
        self.next_seq
    }
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }
    pub fn workspace(&self) -> Option<&str> {
        self.workspace.as_deref()
    }
    /// Whether a `tail_quarantined` names the quarantine file `name`.
    pub fn is_quarantine_recorded(&self, name: &str) -> bool {
        self.quarantined.contains(name)
    }
    /// The run that has started and not finished.
    pub fn open_run(&self) -> Option<&str> {
        self.open_run.as_deref()
    }
    /// Runs interrupted by a crash since the last run started.
    pub fn interrupted_runs(&self) -> &[String] {
        &self.interrupted
    }
    /// Tool calls without a result, by call id.
    pub fn open_calls(&self) -> &BTreeMap<String, OpenCall> {
        &self.calls
    }
    /// Operation ids whose effect is committed.
    pub fn committed_operations(&self) -> &BTreeSet<String> {
        &self.committed_ops
    }
    /// The `ledger-folded-at-sync` fault only: takes `operation` out of
    /// the ledger (its commit is written, no sync covers it yet) or puts it
    /// back.
    pub(crate) fn set_committed_for_fault(&mut self, operation: &str, committed: bool) {
        if committed {
            self.committed_ops.insert(operation.to_string());
        } else {
            self.committed_ops.remove(operation);
        }
    }
    /// The active leaf.
    pub fn leaf(&self) -> Option<EventId> {
        self.branch.last().map(|&s| event_id(s))
    }
    /// Seqs of the active branch inside the window, oldest first.
    pub fn branch(&self) -> &[Seq] {
        &self.branch
    }
    /// The latest compaction on the active branch.
    pub fn compaction(&self) -> Option<&CompactionView> {
        self.compaction.as_ref()
    }
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }
    pub fn request_header(&self) -> Option<&RequestHeader> {
        self.header.as_ref()
    }
    /// Calls marked uncertain and not reconciled, ordered by call seq.
    pub fn uncertain_calls(&self) -> Vec<&OpenCall> {
        let mut v: Vec<&OpenCall> = self.calls.values().filter(|c| c.is_uncertain()).collect();
        v.sort_by_key(|c| c.seq);
        v
    }

    fn open_call(&self, call_id: &str, what: &str) -> Result<&OpenCall> {
        self.calls.get(call_id).ok_or_else(|| {
            Error::Rule(format!(
                "{what} for call {call_id:?}, which is unknown or already has a result"
            ))
        })
    }

    /// Resolves `parent` to a seq that exists and is message-like.
    fn check_parent(&self, parent: Option<&EventId>, nodes: &mut dyn NodeSource) -> Result<()> {
        let Some(p) = parent else { return Ok(()) };
        if fault::active(Fault::SkipParentRule) {
            return Ok(()); // Broken on purpose: any parent will do.
        }
        let seq = seq_of_event_id(p)
            .filter(|&s| s < self.next_seq)
            .ok_or_else(|| Error::Rule(format!("parent {p:?} does not exist")))?;
        if self.branch.binary_search(&seq).is_ok() || nodes.node(seq)?.is_some() {
            Ok(())
        } else {
            rule(format!("parent {p:?} is not a message-like entry"))
        }
    }

    /// Checks that `event` may be appended now; the error names the rule.
    pub fn check(&self, event: &Event, nodes: &mut dyn NodeSource) -> Result<()> {
        match event {
            Event::SessionCreated { .. } => {
                if self.next_seq != 0 {
                    return rule("session_created must be the first event".into());
                }
            }
            Event::RunStarted { run_id } => {
                if let Some(open) = &self.open_run {
                    return rule(format!("run {run_id:?} started while run {open:?} is open"));
                }
                if self.last_run.as_deref() == Some(run_id) {
                    return rule(format!(
                        "run id {run_id:?} is the previous run's id; a new run needs a new id"
                    ));
                }
            }
            Event::RunFinished { run_id, .. } | Event::RunInterrupted { run_id } => {
                if self.open_run.as_deref() != Some(run_id) {
                    return rule(format!(
                        "{} for run {run_id:?}, which is not the open run (finished twice, or never started)",
                        event.type_name()
                    ));
                }
            }
            Event::RequestHeader { run_id, .. } => {
                if self.open_run.as_deref() != Some(run_id) {
                    return rule(format!(
                        "request_header for run {run_id:?}, which is not open"
                    ));
                }
            }
            Event::UserMessage { parent, .. } | Event::AssistantMessage { parent, .. } => {
                self.check_parent(parent.as_ref(), nodes)?
            }
            Event::ToolCall {
                parent,
                call_id,
                effect,
                operation_id,
                ..
            } => {
                self.check_parent(parent.as_ref(), nodes)?;
                if self.calls.contains_key(call_id) {
                    return rule(format!("call id {call_id:?} is already open"));
                }
                match (effect, operation_id) {
                    // skip-operation-id-rule: broken on purpose, the arm is skipped.
                    (Effect::SideEffect, None) if !fault::active(Fault::SkipOperationIdRule) => {
                        return rule(format!(
                            "side-effecting call {call_id:?} needs an operation_id"
                        ))
                    }
                    (_, Some(op)) if self.committed_ops.contains(op) => {
                        return rule(format!("operation {op:?} is already committed"))
                    }
                    _ => {}
                }
            }
            Event::Approval { call_id, .. } => {
                let call = self.open_call(call_id, "approval")?;
                if !call.needs_approval {
                    return rule(format!("call {call_id:?} does not need approval"));
                }
                if let Some(d) = call.approval {
                    return rule(format!(
                        "call {call_id:?} already has a durable approval decision ({d:?}); never ask twice"
                    ));
                }
            }
            Event::ToolStarted { call_id } => {
                let call = self.open_call(call_id, "tool_started")?;
                if call.needs_approval && call.approval != Some(Decision::Approved) {
                    return rule(format!(
                        "call {call_id:?} needs a durable approval before it starts"
                    ));
                }
                if call.committed.is_some() {
                    return rule(format!(
                        "call {call_id:?} already committed its effect; it must never run again"
                    ));
                }
                if call.started {
                    let may_rerun = match call.recovery {
                        None => false,
                        // reconcile-reads: broken on purpose, reads are reconciled too.
                        Some(_)
                            if call.effect != Effect::SideEffect
                                && !fault::active(Fault::ReconcileReads) =>
                        {
                            true
                        }
                        Some(Phase::Requested) => true,
                        Some(_) => call.reconciled == Some(ReconcileOutcome::NotApplied),
                    };
                    if !may_rerun {
                        return rule(format!(
                            "call {call_id:?} already started; after a crash it must be reconciled (outcome not_applied) before it runs again"
                        ));
                    }
                }
            }
            Event::EffectCommitted {
                call_id,
                operation_id,
                ..
            } => {
                let call = self.open_call(call_id, "effect_committed")?;
                let committed = if crate::fault::active(crate::fault::Fault::LedgerPerCall) {
                    // Broken on purpose: only this call's own commit counts.
                    call.committed.is_some()
                } else {
                    self.committed_ops.contains(operation_id)
                };
                if committed {
                    return rule(format!(
                        "operation {operation_id:?} is already committed (second commit)"
                    ));
                }
                if call.operation_id.as_deref() != Some(operation_id) {
                    return rule(format!(
                        "effect_committed for call {call_id:?} names operation {operation_id:?}, the call has {:?}",
                        call.operation_id
                    ));
                }
                if !call.started {
                    return rule(format!(
                        "effect_committed for call {call_id:?} before its tool_started (the intent)"
                    ));
                }
            }
            Event::ToolResult {
                parent, call_id, ..
            } => {
                self.check_parent(parent.as_ref(), nodes)?;
                self.open_call(call_id, "tool_result")?;
            }
            Event::ToolRecovery { call_id, .. } => {
                let call = self.open_call(call_id, "tool_recovery")?;
                if call.recovery.is_some() && call.reconciled.is_none() {
                    return rule(format!("call {call_id:?} is already marked uncertain"));
                }
            }
            Event::ToolReconciled { call_id, .. } => {
                let call = self.open_call(call_id, "tool_reconciled")?;
                if call.recovery.is_none() {
                    return rule(format!(
                        "tool_reconciled for call {call_id:?}, which recovery never marked uncertain"
                    ));
                }
                if call.reconciled.is_some() {
                    return rule(format!("call {call_id:?} is already reconciled"));
                }
            }
            Event::Compaction {
                parent,
                first_kept_id,
                ..
            } => {
                self.check_parent(parent.as_ref(), nodes)?;
                let kept = seq_of_event_id(first_kept_id);
                let on_branch = kept.is_some_and(|k| self.branch.binary_search(&k).is_ok());
                let leaf = self.branch.last().copied();
                // compaction-anywhere: broken on purpose, this half is skipped.
                if parent.as_ref().and_then(|p| seq_of_event_id(p)) != leaf
                    && !fault::active(Fault::CompactionAnywhere)
                {
                    return rule(format!(
                        "compaction must hang under the active leaf ({}), not under {parent:?}",
                        leaf.map_or_else(|| "none".to_string(), event_id)
                    ));
                }
                // compaction-keeps-anything: broken on purpose, this half is skipped.
                if !on_branch && !fault::active(Fault::CompactionKeepsAnything) {
                    return rule(format!(
                        "compaction must keep an entry of the active branch ({first_kept_id:?} is not on it)"
                    ));
                }
            }
            Event::LeafMoved { leaf } => self.check_parent(Some(leaf), nodes)?,
            Event::PlanUpdated { .. }
            | Event::WorkspaceRebound { .. }
            | Event::TailQuarantined { .. } => {}
        }
        Ok(())
    }

    /// Folds one record into the projection. The record must be the next
    /// one (`rec.seq == next_seq`); rules are not re-checked here, since a
    /// record on disk is a fact, not a request.
    pub fn apply(&mut self, rec: &Record, nodes: &mut dyn NodeSource) -> Result<()> {
        match &rec.body {
            Body::Known(event) => self.apply_event(rec.seq, event, nodes),
            Body::Ignorable { .. } => {
                self.next_seq = rec.seq + 1;
                Ok(())
            }
        }
    }

    /// Folds the known event at `seq` (the next one) into the projection.
    /// On an error the projection is unchanged.
    pub fn apply_event(
        &mut self,
        seq: Seq,
        event: &Event,
        nodes: &mut dyn NodeSource,
    ) -> Result<()> {
        let fold = self.prepare(event, nodes)?;
        self.apply_prepared(seq, event, fold);
        Ok(())
    }

    /// Works out how folding `event` as the next one moves the active
    /// branch: the only part of a fold that may read the log (through
    /// `nodes`). A writer calls it before it writes the event, so that a
    /// failed read refuses the append with nothing written, and then folds
    /// with [`Projection::apply_prepared`], which cannot fail.
    pub fn prepare(&self, event: &Event, nodes: &mut dyn NodeSource) -> Result<Fold> {
        let switch = match (event.parent(), event) {
            (Some(parent), _) => match parent.and_then(|p| seq_of_event_id(p)) {
                None => Some(Switch::Root),
                // fold-ignores-implicit-branch: broken on purpose, every entry extends the branch.
                Some(p)
                    if self.branch.last() == Some(&p)
                        || fault::active(Fault::FoldIgnoresImplicitBranch) =>
                {
                    None
                }
                Some(p) => Some(self.path_to(p, nodes)?),
            },
            (None, Event::LeafMoved { leaf }) => {
                // Broken on purpose: the leaf stays the last entry written.
                let ignored = fault::active(Fault::FoldWrongLeaf);
                match (seq_of_event_id(leaf), ignored) {
                    (Some(seq), false) => Some(self.path_to(seq, nodes)?),
                    _ => None,
                }
            }
            (None, _) => None,
        };
        Ok(Fold { switch })
    }

    /// Folds the known event at `seq` (the next one), with the branch move
    /// [`Projection::prepare`] worked out for it in this state.
    pub fn apply_prepared(&mut self, seq: Seq, event: &Event, fold: Fold) {
        assert_eq!(seq, self.next_seq, "events are folded in order");
        self.next_seq = seq + 1;
        match fold.switch {
            None => {}
            Some(Switch::Root) => {
                self.branch.clear();
                self.compaction = None;
            }
            Some(Switch::Truncate(len)) => self.branch.truncate(len),
            Some(Switch::Path { branch, compaction }) => {
                self.branch = branch;
                self.compaction = compaction;
            }
        }
        if event.parent().is_some() {
            self.branch.push(seq);
        }
        match event {
            Event::SessionCreated {
                session_id,
                workspace,
                ..
            } => {
                self.session_id = Some(session_id.clone());
                self.workspace = Some(workspace.clone());
            }
            Event::WorkspaceRebound { to, .. } => self.workspace = Some(to.clone()),
            Event::TailQuarantined { file, .. } => {
                self.quarantined.insert(file.clone());
            }
            Event::RunStarted { run_id } => {
                self.open_run = Some(run_id.clone());
                self.last_run = Some(run_id.clone());
                self.interrupted.clear();
            }
            Event::RunFinished { .. } => self.open_run = None,
            Event::RunInterrupted { run_id } => {
                self.open_run = None;
                self.interrupted.push(run_id.clone());
            }
            Event::RequestHeader {
                run_id,
                model,
                system_prompt_hash,
                tools_hash,
            } => {
                self.header = Some(RequestHeader {
                    run_id: run_id.clone(),
                    model: model.clone(),
                    system_prompt_hash: system_prompt_hash.clone(),
                    tools_hash: tools_hash.clone(),
                })
            }
            Event::ToolCall {
                call_id,
                tool,
                args,
                effect,
                operation_id,
                target,
                needs_approval,
                ..
            } => {
                self.calls.insert(
                    call_id.clone(),
                    OpenCall {
                        call_id: call_id.clone(),
                        seq,
                        tool: tool.clone(),
                        args: args.clone(),
                        effect: *effect,
                        operation_id: operation_id.clone(),
                        target: target.clone(),
                        needs_approval: *needs_approval,
                        approval: None,
                        started: false,
                        committed: None,
                        recovery: None,
                        reconciled: None,
                    },
                );
            }
            Event::Approval { call_id, decision } => {
                if let Some(c) = self.calls.get_mut(call_id) {
                    c.approval = Some(*decision);
                }
            }
            Event::ToolStarted { call_id } => {
                if let Some(c) = self.calls.get_mut(call_id) {
                    c.started = true;
                    // A new attempt after a crash: its outcome is a new question.
                    if !fault::active(Fault::RerunKeepsOldMark) {
                        c.recovery = None;
                        c.reconciled = None;
                    }
                }
            }
            Event::EffectCommitted {
                call_id,
                operation_id,
                external_ref,
            } => {
                self.committed_ops.insert(operation_id.clone());
                if let Some(c) = self.calls.get_mut(call_id) {
                    c.committed = Some(external_ref.clone());
                }
            }
            Event::ToolResult { call_id, .. } => {
                self.calls.remove(call_id);
            }
            Event::ToolRecovery { call_id, phase, .. } => {
                if let Some(c) = self.calls.get_mut(call_id) {
                    c.recovery = Some(*phase);
                    c.reconciled = None;
                }
            }
            Event::ToolReconciled {
                call_id, outcome, ..
            } => {
                if let Some(c) = self.calls.get_mut(call_id) {
                    c.reconciled = Some(*outcome);
                }
            }
            Event::PlanUpdated { goal, steps } => {
                self.plan = Some(Plan {
                    goal: goal.clone(),
                    steps: steps.clone(),
                })
            }
            // The branch moved above, as prepared.
            Event::LeafMoved { .. }
            | Event::UserMessage { .. }
            | Event::AssistantMessage { .. }
            | Event::Compaction { .. } => {}
        }
        if let Event::Compaction {
            summary,
            first_kept_id,
            tokens_before,
            ..
        } = event
        {
            let first_kept = seq_of_event_id(first_kept_id).unwrap_or(seq);
            self.compaction = Some(CompactionView {
                seq,
                summary: summary.clone(),
                first_kept,
                tokens_before: *tokens_before,
            });
            // Broken on purpose: the window is never applied to the branch.
            if !crate::fault::active(crate::fault::Fault::FoldBranchIgnoresCompaction) {
                let cut = self.branch.partition_point(|&s| s < first_kept);
                self.branch.drain(..cut);
            }
        }
    }

    /// How making `leaf` the active leaf changes the branch: the path to it.
    fn path_to(&self, leaf: Seq, nodes: &mut dyn NodeSource) -> Result<Switch> {
        if let Ok(i) = self.branch.binary_search(&leaf) {
            let still_compacted = self.compaction.as_ref().is_some_and(|c| c.seq <= leaf);
            if still_compacted || self.compaction.is_none() {
                return Ok(Switch::Truncate(i + 1));
            }
        }
        // Walk up from the leaf through the log until the root, or until the
        // first kept entry of the nearest compaction on the path.
        let mut path = Vec::new();
        let mut compaction: Option<CompactionView> = None;
        let mut cursor = Some(leaf);
        while let Some(seq) = cursor {
            if compaction.as_ref().is_some_and(|c| seq < c.first_kept) {
                break;
            }
            let node = nodes.node(seq)?.ok_or_else(|| {
                Error::Invalid(format!(
                    "history tree refers to {} which is not an entry",
                    event_id(seq)
                ))
            })?;
            if compaction.is_none() {
                compaction = node.compaction.clone();
            }
            path.push(seq);
            cursor = node.parent;
        }
        path.reverse();
        Ok(Switch::Path {
            branch: path,
            compaction,
        })
    }
}

/// How folding one event moves the active branch, worked out by
/// [`Projection::prepare`] before the event is written.
#[derive(Debug)]
pub struct Fold {
    switch: Option<Switch>,
}

/// A move of the active branch.
#[derive(Debug)]
enum Switch {
    /// A new root: the branch starts again, with no compaction.
    Root,
    /// The branch keeps its first entries, this many.
    Truncate(usize),
    /// The branch becomes this path from the window's start, under this
    /// compaction.
    Path {
        branch: Vec<Seq>,
        compaction: Option<CompactionView>,
    },
}

/// Marks a call started without a logged intent. Only the `skip-intent`
/// fault uses this, to behave like a store that never persists intents.
impl Projection {
    pub(crate) fn mark_started_unlogged(&mut self, call_id: &str) {
        if let Some(c) = self.calls.get_mut(call_id) {
            c.started = true;
        }
    }
}

/// Folds a whole log from disk, read-only and without the writer lock. A
/// torn tail ends the fold (it is returned); damage is an error.
pub fn replay(
    paths: &crate::layout::SessionPaths,
) -> Result<(Projection, Option<crate::scan::TornTail>)> {
    let mut p = Projection::default();
    let events = paths.events();
    let mut index = SparseIndex::default();
    let mut seen = RecentNodes::default();
    let verified = crate::scan::verify(&events, LogPosition::START, |offset, rec| {
        index.note(LogPosition {
            offset,
            seq: rec.seq,
        });
        seen.observe(rec);
        p.apply(rec, &mut seen.with_log(&events, &index))
    })?;
    Ok((p, verified.torn))
}

/// The first event of the log at `paths` that breaks a session rule, as
/// `(seq, why)`: the fold `fsck` runs, read-only, every event checked as
/// an append would be before it is folded, and given to `visit` once it is
/// (`fsck` checks the blobs it references there). Damage is an error; a
/// torn tail ends the fold.
pub fn first_rule_violation(
    paths: &crate::layout::SessionPaths,
    mut visit: impl FnMut(&Record) -> Result<()>,
) -> Result<Option<(Seq, String)>> {
    let mut p = Projection::default();
    let events = paths.events();
    let mut index = SparseIndex::default();
    let mut seen = RecentNodes::default();
    let mut found = None;
    let verified = crate::scan::verify(&events, LogPosition::START, |offset, rec| {
        index.note(LogPosition {
            offset,
            seq: rec.seq,
        });
        seen.observe(rec);
        let mut nodes = seen.with_log(&events, &index);
        let checked = match rec.event() {
            Some(event) => p.check(event, &mut nodes),
            None => Ok(()),
        };
        checked
            .and_then(|()| p.apply(rec, &mut nodes))
            .inspect_err(|e| {
                found = Some((rec.seq, e.to_string()));
            })?;
        visit(rec)
    });
    match (found, verified) {
        (Some(f), _) => Ok(Some(f)),
        (None, Err(e)) => Err(e),
        (None, Ok(_)) => Ok(None),
    }
}

/// Folds records from the start, remembering nodes as it goes.
pub fn fold<'a>(records: impl IntoIterator<Item = &'a Record>) -> Result<Projection> {
    let mut p = Projection::default();
    let mut seen = SeenNodes::default();
    for rec in records {
        seen.observe(rec);
        p.apply(rec, &mut seen)?;
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log whose every read fails, as under an injected EIO.
    struct FailingReads;

    impl NodeSource for FailingReads {
        fn node(&mut self, _: Seq) -> Result<Option<Node>> {
            Err(Error::Read {
                path: "events.jsonl".into(),
                offset: 0,
                source: std::io::Error::from_raw_os_error(5),
            })
        }
    }

    fn user(parent: Option<Seq>) -> Event {
        Event::UserMessage {
            parent: parent.map(event_id),
            text: "hello".into(),
        }
    }

    /// A branch move to an entry off the branch reads the log. The read
    /// happens while preparing the fold, before anything changes: a failed
    /// read leaves the projection as it was (a writer prepares before it
    /// writes, so the refused event is not in the log either).
    #[test]
    fn a_failed_read_while_moving_the_leaf_changes_nothing() {
        let mut p = Projection::default();
        let mut seen = SeenNodes::default();
        // e0 <- e1, and e0 <- e2: the branch is e0, e2.
        for (seq, event) in [(0, user(None)), (1, user(Some(0))), (2, user(Some(0)))] {
            p.apply_event(seq, &event, &mut seen).unwrap();
            seen.observe(&Record {
                seq,
                id: event_id(seq),
                ts: String::new(),
                redaction: crate::event::Redaction::Public,
                body: Body::Known(event),
            });
        }
        assert_eq!(p.branch(), [0, 2]);
        let before = p.clone();
        let to_e1 = Event::LeafMoved { leaf: event_id(1) };
        assert!(p.prepare(&to_e1, &mut FailingReads).is_err());
        assert!(p.apply_event(3, &to_e1, &mut FailingReads).is_err());
        assert_eq!(p, before, "a failed read changed the projection");
        let fold = p.prepare(&to_e1, &mut seen).unwrap();
        p.apply_prepared(3, &to_e1, fold);
        assert_eq!(p.branch(), [0, 1]);
        assert_eq!(p.next_seq(), 4);
    }
}
