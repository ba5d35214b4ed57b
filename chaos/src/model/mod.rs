//! The harness's own reading of a session log, independent of the store's projection.
//!
//! [`Model`] folds records into what the agent needs to resume (open run,
//! the state of every tool call, the history tree and its active leaf) and
//! what the checker needs to judge a recovery (each orphaned call's phase,
//! every mark, commit, approval and run close). It is written from the
//! protocol's definition, not from the store's code, so that the checker
//! does not have to trust the store's own fold. It must never read files.
//!
//! [`crate::model::oracle`] turns it into what a store must serve (its projection
//! and its context).
//!
//! Mark semantics (the protocol of agentstore part 2): a call without a
//! result needs exactly one `tool_recovery` mark after a crash; a
//! `tool_reconciled` resolves the mark; a new `tool_started` (a re-run after
//! `not_applied`) begins a new attempt, which a later crash must mark again.

pub mod oracle;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use agentchaos_protocol::event::{
    event_id, seq_of_event_id, Decision, Effect, Event, Phase, ReconcileOutcome, Record, Seq,
};
use agentchaos_protocol::view::Plan;
use serde_json::Value;

/// Everything the log says about one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallState {
    pub call_id: String,
    /// Seq of its `tool_call`.
    pub seq: Seq,
    pub tool: String,
    pub args: Value,
    pub effect: Effect,
    pub operation_id: Option<String>,
    pub target: Option<String>,
    pub needs_approval: bool,
    /// Every `approval` (seq, decision); more than one is a violation.
    pub approvals: Vec<(Seq, Decision)>,
    /// Seqs of every `tool_started`.
    pub starts: Vec<Seq>,
    /// Every `effect_committed` (seq, external ref).
    pub commits: Vec<(Seq, String)>,
    /// Every `tool_recovery` (seq, phase).
    pub marks: Vec<(Seq, Phase)>,
    /// The mark of the current attempt, if any.
    pub mark: Option<Phase>,
    /// What reconciliation learned since the current mark.
    pub reconciled: Option<ReconcileOutcome>,
    pub result: Option<Seq>,
}

impl CallState {
    /// How far the call got: what a recovery must mark it with now.
    pub fn phase(&self) -> Phase {
        if !self.commits.is_empty() {
            Phase::Committed
        } else if !self.starts.is_empty() {
            Phase::Started
        } else {
            Phase::Requested
        }
    }

    pub fn is_open(&self) -> bool {
        self.result.is_none()
    }

    /// Open and not marked in its current attempt: a recovery must mark it.
    pub fn needs_mark(&self) -> bool {
        self.is_open() && self.mark.is_none()
    }

    /// Marked and not yet reconciled.
    pub fn uncertain(&self) -> Option<Phase> {
        match (self.is_open(), self.mark, self.reconciled) {
            (true, Some(p), None) => Some(p),
            _ => None,
        }
    }

    /// The decision of the first approval, if any.
    pub fn approval(&self) -> Option<Decision> {
        self.approvals.first().map(|&(_, d)| d)
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunClose {
    Finished,
    Interrupted,
}

/// One `run_started` and what closed it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunState {
    pub run_id: String,
    pub seq: Seq,
    pub header: bool,
    /// Every close (seq, how); more than one is a violation.
    pub closes: Vec<(Seq, RunClose)>,
}

/// A node of the history tree.
#[derive(Debug, Clone, PartialEq)]
struct TreeNode {
    parent: Option<Seq>,
    /// For a compaction: the seq of its first kept entry.
    first_kept: Option<Seq>,
    /// Bytes of text the entry contributes (for `tokens_before`).
    weight: u64,
}

/// The fold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Model {
    pub next_seq: Seq,
    /// Operation ids of every `effect_committed`.
    pub committed_ops: BTreeSet<String>,
    /// Runs interrupted since the last `run_started`, in order.
    pub interrupted: Vec<String>,
    /// The last `plan_updated`.
    pub plan: Option<Plan>,
    pub calls: BTreeMap<String, CallState>,
    /// Call ids in call order.
    pub call_order: Vec<String>,
    pub runs: Vec<RunState>,
    /// Index into `runs` of the open run.
    pub open_run: Option<usize>,
    nodes: HashMap<Seq, TreeNode>,
    leaf: Option<Seq>,
}

fn weight(event: &Event) -> u64 {
    match event {
        Event::UserMessage { text, .. } | Event::AssistantMessage { text, .. } => text.len() as u64,
        Event::ToolCall { args, .. } => args.to_string().len() as u64,
        Event::ToolResult { output, blob, .. } => {
            output.as_ref().map_or(0, |o| o.to_string().len() as u64)
                + blob.as_ref().map_or(0, |_| 80)
        }
        Event::Compaction { summary, .. } => summary.len() as u64,
        _ => 0,
    }
}

impl Model {
    /// Folds records from the start.
    pub fn fold<'a>(records: impl IntoIterator<Item = &'a Record>) -> Model {
        let mut m = Model::default();
        for r in records {
            if let Some(e) = r.event() {
                m.apply(r.seq, e);
            } else {
                m.next_seq = r.seq + 1;
            }
        }
        m
    }

    /// Folds one event at `seq`. Events that break the protocol are folded
    /// as facts (the checker reports them); nothing here refuses.
    pub fn apply(&mut self, seq: Seq, event: &Event) {
        self.next_seq = seq + 1;
        if let Some(parent) = event.parent() {
            let first_kept = match event {
                Event::Compaction { first_kept_id, .. } => seq_of_event_id(first_kept_id),
                _ => None,
            };
            self.nodes.insert(
                seq,
                TreeNode {
                    parent: parent.and_then(|p| seq_of_event_id(p)),
                    first_kept,
                    weight: weight(event),
                },
            );
            self.leaf = Some(seq);
        }
        match event {
            Event::RunStarted { run_id } => {
                self.runs.push(RunState {
                    run_id: run_id.clone(),
                    seq,
                    header: false,
                    closes: Vec::new(),
                });
                self.open_run = Some(self.runs.len() - 1);
                self.interrupted.clear();
            }
            Event::RequestHeader { run_id, .. } => {
                if let Some(r) = self.runs.iter_mut().rev().find(|r| &r.run_id == run_id) {
                    r.header = true;
                }
            }
            Event::RunFinished { run_id, .. } | Event::RunInterrupted { run_id } => {
                let how = if matches!(event, Event::RunFinished { .. }) {
                    RunClose::Finished
                } else {
                    RunClose::Interrupted
                };
                if let Some(i) = self.runs.iter().rposition(|r| &r.run_id == run_id) {
                    self.runs[i].closes.push((seq, how));
                    if self.open_run == Some(i) {
                        self.open_run = None;
                    }
                }
                if how == RunClose::Interrupted {
                    self.interrupted.push(run_id.clone());
                }
            }
            Event::LeafMoved { leaf } => self.leaf = seq_of_event_id(leaf),
            Event::PlanUpdated { goal, steps } => {
                self.plan = Some(Plan {
                    goal: goal.clone(),
                    steps: steps.clone(),
                })
            }
            Event::EffectCommitted { operation_id, .. } => {
                self.committed_ops.insert(operation_id.clone());
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
                if !self.calls.contains_key(call_id) {
                    self.call_order.push(call_id.clone());
                }
                self.calls.insert(
                    call_id.clone(),
                    CallState {
                        call_id: call_id.clone(),
                        seq,
                        tool: tool.clone(),
                        args: args.clone(),
                        effect: *effect,
                        operation_id: operation_id.clone(),
                        target: target.clone(),
                        needs_approval: *needs_approval,
                        approvals: Vec::new(),
                        starts: Vec::new(),
                        commits: Vec::new(),
                        marks: Vec::new(),
                        mark: None,
                        reconciled: None,
                        result: None,
                    },
                );
            }
            _ => {}
        }
        let Some(id) = call_of(event) else { return };
        let Some(c) = self.calls.get_mut(id) else {
            return;
        };
        match event {
            Event::Approval { decision, .. } => c.approvals.push((seq, *decision)),
            Event::ToolStarted { .. } => {
                c.starts.push(seq);
                c.mark = None;
                c.reconciled = None;
            }
            Event::EffectCommitted { external_ref, .. } => {
                c.commits.push((seq, external_ref.clone()))
            }
            Event::ToolResult { .. } => c.result = Some(seq),
            Event::ToolRecovery { phase, .. } => {
                c.marks.push((seq, *phase));
                c.mark = Some(*phase);
                c.reconciled = None;
            }
            Event::ToolReconciled { outcome, .. } => c.reconciled = Some(*outcome),
            _ => {}
        }
    }

    /// The open run's id.
    pub fn open_run_id(&self) -> Option<&str> {
        self.open_run.map(|i| self.runs[i].run_id.as_str())
    }

    /// The open run, if it has its request header.
    pub fn open_run_ready(&self) -> bool {
        self.open_run.is_some_and(|i| self.runs[i].header)
    }

    /// The active leaf's event id.
    pub fn leaf(&self) -> Option<String> {
        self.leaf.map(event_id)
    }

    /// The active branch inside the current compaction window, oldest
    /// first: from the leaf up to the root, or up to the first kept entry
    /// of the nearest compaction on the path.
    pub fn active_branch(&self) -> Vec<Seq> {
        let mut path = Vec::new();
        let mut floor: Option<Seq> = None;
        for seq in self.leaf.map_or_else(Vec::new, |leaf| self.ancestry(leaf)) {
            if floor.is_some_and(|f| seq < f) {
                break;
            }
            if floor.is_none() {
                floor = self.nodes[&seq].first_kept;
            }
            path.push(seq);
        }
        path.reverse();
        path
    }

    /// The entries from `seq` up to the root, `seq` first, across every
    /// compaction (the tree's ancestry, not the context window). The walk
    /// stops at a parent that is not an entry, or not older than its child
    /// (a cycle the checker reports elsewhere).
    pub fn ancestry(&self, seq: Seq) -> Vec<Seq> {
        let mut path = Vec::new();
        let mut cursor = Some(seq);
        while let Some(seq) = cursor {
            let Some(node) = self.nodes.get(&seq) else {
                break;
            };
            path.push(seq);
            cursor = node.parent.filter(|&p| p < seq);
        }
        path
    }

    /// Every entry of the history tree (an event with a parent field), oldest first.
    pub fn entries(&self) -> Vec<Seq> {
        let mut seqs: Vec<Seq> = self.nodes.keys().copied().collect();
        seqs.sort_unstable();
        seqs
    }

    /// The leaf's seq (the last message-like event, or the target of the
    /// last `leaf_moved` after it).
    pub fn leaf_seq(&self) -> Option<Seq> {
        self.leaf
    }

    /// Bytes of text on the active branch, a stand-in for tokens.
    pub fn branch_weight(&self) -> u64 {
        self.active_branch()
            .iter()
            .filter_map(|s| self.nodes.get(s))
            .map(|n| n.weight)
            .sum()
    }

    /// Calls without a result, in call order.
    pub fn open_calls(&self) -> impl Iterator<Item = &CallState> {
        self.call_order
            .iter()
            .filter_map(|id| self.calls.get(id))
            .filter(|c| c.is_open())
    }
}

/// The call id an event is about, if any.
pub fn call_of(event: &Event) -> Option<&str> {
    match event {
        Event::ToolCall { call_id, .. }
        | Event::ToolStarted { call_id }
        | Event::EffectCommitted { call_id, .. }
        | Event::ToolResult { call_id, .. }
        | Event::ToolRecovery { call_id, .. }
        | Event::ToolReconciled { call_id, .. }
        | Event::Approval { call_id, .. } => Some(call_id),
        _ => None,
    }
}

/// Is this an event only the store writes (creation, recovery, the record
/// of a torn tail it cut), never the agent?
pub fn store_authored(event: &Event) -> bool {
    matches!(
        event,
        Event::SessionCreated { .. }
            | Event::RunInterrupted { .. }
            | Event::ToolRecovery { .. }
            | Event::WorkspaceRebound { .. }
            | Event::TailQuarantined { .. }
    )
}

/// A short human description of an event: `tool_started r1-3`.
pub fn describe_event(event: &Event) -> String {
    let t = event.type_name();
    match event {
        Event::ToolRecovery { call_id, phase, .. } => {
            format!("{t} {call_id} phase {}", phase_name(*phase))
        }
        Event::ToolReconciled {
            call_id, outcome, ..
        } => format!(
            "{t} {call_id} {}",
            match outcome {
                ReconcileOutcome::Applied => "applied",
                ReconcileOutcome::NotApplied => "not_applied",
            }
        ),
        Event::EffectCommitted {
            call_id,
            operation_id,
            ..
        } => format!("{t} {call_id} ({operation_id})"),
        Event::ToolCall { call_id, tool, .. } => format!("{t} {call_id} {tool}"),
        _ => match call_of(event) {
            Some(c) => format!("{t} {c}"),
            None => match event {
                Event::RunStarted { run_id }
                | Event::RunFinished { run_id, .. }
                | Event::RunInterrupted { run_id }
                | Event::RequestHeader { run_id, .. } => format!("{t} {run_id}"),
                _ => t.to_string(),
            },
        },
    }
}

/// `seq 12 tool_started r1-3`.
pub fn describe_record(rec: &Record) -> String {
    match rec.event() {
        Some(e) => format!("seq {} {}", rec.seq, describe_event(e)),
        None => format!("seq {} {} (ignorable)", rec.seq, rec.body.type_name()),
    }
}

/// The event type a [`describe_record`] line names (`tool_started` in
/// `seq 12 tool_started r1-3`), for a report that sorts findings by the
/// events they name.
pub fn described_type(line: &str) -> Option<&str> {
    let mut words = line.split(' ');
    (words.next() == Some("seq")).then_some(())?;
    words.next()?.parse::<u64>().ok()?;
    words.next()
}

pub fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::Requested => "requested",
        Phase::Started => "started",
        Phase::Committed => "committed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentchaos_protocol::event::RecoveryStatus;

    fn call(id: &str) -> Event {
        Event::ToolCall {
            parent: None,
            call_id: id.into(),
            tool: "remote".into(),
            args: Value::Null,
            effect: Effect::SideEffect,
            operation_id: Some(format!("op-{id}")),
            target: None,
            needs_approval: false,
        }
    }

    #[test]
    fn described_type_reads_back_what_describe_record_wrote() {
        let r = Record {
            seq: 12,
            id: agentchaos_protocol::event::event_id(12),
            ts: "2026-01-01T00:00:00.000Z".into(),
            redaction: agentchaos_protocol::event::Redaction::Public,
            body: agentchaos_protocol::event::Body::Known(call("c")),
        };
        assert_eq!(described_type(&describe_record(&r)), Some("tool_call"));
        assert_eq!(
            described_type("seq 0 session_created"),
            Some("session_created")
        );
        assert_eq!(described_type("the log ends"), None);
        assert_eq!(described_type("seq x tool_call"), None);
    }

    #[test]
    fn phases_marks_and_new_attempts() {
        let mut m = Model::default();
        m.apply(0, &call("c"));
        assert_eq!(
            (m.calls["c"].phase(), m.calls["c"].needs_mark()),
            (Phase::Requested, true)
        );
        m.apply(
            1,
            &Event::ToolStarted {
                call_id: "c".into(),
            },
        );
        m.apply(
            2,
            &Event::ToolRecovery {
                call_id: "c".into(),
                status: RecoveryStatus::Uncertain,
                phase: Phase::Started,
            },
        );
        let c = &m.calls["c"];
        assert_eq!(
            (c.phase(), c.needs_mark(), c.uncertain()),
            (Phase::Started, false, Some(Phase::Started))
        );
        m.apply(
            3,
            &Event::ToolReconciled {
                call_id: "c".into(),
                outcome: ReconcileOutcome::NotApplied,
                evidence: String::new(),
            },
        );
        assert_eq!(
            (m.calls["c"].needs_mark(), m.calls["c"].uncertain()),
            (false, None)
        );
        // A re-run is a new attempt: a crash now needs a new mark.
        m.apply(
            4,
            &Event::ToolStarted {
                call_id: "c".into(),
            },
        );
        assert!(m.calls["c"].needs_mark());
        m.apply(
            5,
            &Event::EffectCommitted {
                call_id: "c".into(),
                operation_id: "op-c".into(),
                external_ref: "x".into(),
            },
        );
        assert_eq!(m.calls["c"].phase(), Phase::Committed);
    }

    #[test]
    fn active_branch_follows_the_leaf_and_the_compaction_window() {
        let msg = |parent: Option<Seq>| Event::UserMessage {
            parent: parent.map(event_id),
            text: "t".into(),
        };
        let mut m = Model::default();
        m.apply(0, &msg(None));
        m.apply(1, &msg(Some(0)));
        m.apply(2, &msg(Some(1)));
        assert_eq!(m.active_branch(), vec![0, 1, 2]);
        m.apply(3, &Event::LeafMoved { leaf: event_id(0) });
        m.apply(4, &msg(Some(0)));
        assert_eq!(m.active_branch(), vec![0, 4]);
        m.apply(
            5,
            &Event::Compaction {
                parent: Some(event_id(4)),
                summary: "s".into(),
                first_kept_id: event_id(4),
                tokens_before: 1,
            },
        );
        assert_eq!(m.active_branch(), vec![4, 5]);
    }
}
