//! The event vocabulary: what one event of a session can say, in every
//! store and on the wire (`chaos/PROTOCOL.md`, section 3).
//!
//! `Event` is the typed body (tagged by `type`, snake_case). `Record` adds
//! the envelope the store assigns: `seq`, `id`, `ts`. This module owns the
//! shapes only: the rules about which event may follow which are each
//! store's own, and so is how a record is framed on disk.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version of the line schema this build writes and fully understands.
pub const SCHEMA_VERSION: u32 = 1;

/// Position of an event in its session's log: 0, 1, 2, ... contiguous.
pub type Seq = u64;

/// The id of an event (unique within its session). Message-like events are
/// nodes of the history tree and are referred to by this id as `parent`.
pub type EventId = String;

/// The id the store gives the event at `seq`.
pub fn event_id(seq: Seq) -> EventId {
    format!("e{seq}")
}

/// Inverse of [`event_id`]: the seq an id names, if it is a store-made id.
pub fn seq_of_event_id(id: &str) -> Option<Seq> {
    let digits = id.strip_prefix('e')?;
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    digits.parse().ok()
}

/// What a tool call does to the world, which decides what recovery may do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Reads only: safe to run again.
    None,
    /// Running it twice has the same effect as once.
    Idempotent,
    /// Changes the world; must run at most once, keyed by `operation_id`.
    SideEffect,
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResultStatus {
    Ok,
    Error,
}

/// How far an orphaned tool call got before the crash.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Called, never started: safe to run.
    Requested,
    /// Intent durable, outcome unknown: reconcile with the tool by operation id first.
    Started,
    /// The effect happened, the result was lost: must never run again.
    Committed,
}

/// What reconciliation learned from the tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReconcileOutcome {
    Applied,
    NotApplied,
}

/// The status a recovery mark carries. Only one value exists today; it is a
/// type so that the line says it explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryStatus {
    Uncertain,
}

/// A human decision on a gated call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approved,
    Denied,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Completed,
    Failed,
    Cancelled,
}

/// State of one plan step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "status", content = "reason")]
pub enum StepStatus {
    Pending,
    InProgress,
    Done,
    Blocked(String),
}

/// One step of an explicit plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlanStep {
    pub id: String,
    pub title: String,
    #[serde(flatten)]
    pub status: StepStatus,
}

/// A tool output moved to a content-addressed blob file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BlobRef {
    /// Hex digest of the content (the blob's file name).
    pub digest: String,
    pub size: u64,
}

/// How much of an event may leave the machine in an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Redaction {
    /// Shareable as is.
    #[default]
    Public,
    /// Payloads are masked by `export --redact`.
    Sensitive,
}

/// The typed body of one event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    SessionCreated {
        session_id: String,
        schema_version: u32,
        workspace: String,
    },
    RunStarted {
        run_id: String,
    },
    RequestHeader {
        run_id: String,
        model: String,
        system_prompt_hash: String,
        tools_hash: String,
    },
    UserMessage {
        parent: Option<EventId>,
        text: String,
    },
    AssistantMessage {
        parent: Option<EventId>,
        text: String,
    },
    ToolCall {
        parent: Option<EventId>,
        call_id: String,
        tool: String,
        args: Value,
        effect: Effect,
        /// The idempotency key the tool receives; required for `side_effect`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        operation_id: Option<String>,
        /// What the call touches (a path, a service), for humans and recovery.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
        /// A durable approval must precede `tool_started`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        needs_approval: bool,
    },
    ToolStarted {
        call_id: String,
    },
    EffectCommitted {
        call_id: String,
        operation_id: String,
        external_ref: String,
    },
    ToolResult {
        parent: Option<EventId>,
        call_id: String,
        status: ResultStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blob: Option<BlobRef>,
    },
    ToolRecovery {
        call_id: String,
        status: RecoveryStatus,
        phase: Phase,
    },
    ToolReconciled {
        call_id: String,
        outcome: ReconcileOutcome,
        evidence: String,
    },
    PlanUpdated {
        goal: String,
        steps: Vec<PlanStep>,
    },
    Compaction {
        parent: Option<EventId>,
        summary: String,
        first_kept_id: EventId,
        tokens_before: u64,
    },
    LeafMoved {
        leaf: EventId,
    },
    Approval {
        call_id: String,
        decision: Decision,
    },
    RunFinished {
        run_id: String,
        status: RunStatus,
    },
    RunInterrupted {
        run_id: String,
    },
    WorkspaceRebound {
        from: String,
        to: String,
    },
    /// Written by the store after it cut a torn tail: the bytes it cut were
    /// first saved to `file` (a name in the session directory,
    /// `events.jsonl.torn-<offset>`), so the cut is never silent.
    TailQuarantined {
        file: String,
        /// Byte offset in `events.jsonl` the cut bytes started at.
        offset: u64,
        /// How many bytes were cut (the quarantine file's length).
        len: u64,
        /// Why those bytes were a torn tail.
        reason: String,
    },
}

impl Event {
    /// The `type` tag this event is written with.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::SessionCreated { .. } => "session_created",
            Event::RunStarted { .. } => "run_started",
            Event::RequestHeader { .. } => "request_header",
            Event::UserMessage { .. } => "user_message",
            Event::AssistantMessage { .. } => "assistant_message",
            Event::ToolCall { .. } => "tool_call",
            Event::ToolStarted { .. } => "tool_started",
            Event::EffectCommitted { .. } => "effect_committed",
            Event::ToolResult { .. } => "tool_result",
            Event::ToolRecovery { .. } => "tool_recovery",
            Event::ToolReconciled { .. } => "tool_reconciled",
            Event::PlanUpdated { .. } => "plan_updated",
            Event::Compaction { .. } => "compaction",
            Event::LeafMoved { .. } => "leaf_moved",
            Event::Approval { .. } => "approval",
            Event::RunFinished { .. } => "run_finished",
            Event::RunInterrupted { .. } => "run_interrupted",
            Event::WorkspaceRebound { .. } => "workspace_rebound",
            Event::TailQuarantined { .. } => "tail_quarantined",
        }
    }

    /// Every type name this build knows.
    pub const TYPE_NAMES: &'static [&'static str] = &[
        "session_created",
        "run_started",
        "request_header",
        "user_message",
        "assistant_message",
        "tool_call",
        "tool_started",
        "effect_committed",
        "tool_result",
        "tool_recovery",
        "tool_reconciled",
        "plan_updated",
        "compaction",
        "leaf_moved",
        "approval",
        "run_finished",
        "run_interrupted",
        "workspace_rebound",
        "tail_quarantined",
    ];

    /// The parent of a message-like event (a node of the history tree).
    /// Outer `None`: the event is not message-like.
    pub fn parent(&self) -> Option<Option<&EventId>> {
        match self {
            Event::UserMessage { parent, .. }
            | Event::AssistantMessage { parent, .. }
            | Event::ToolCall { parent, .. }
            | Event::ToolResult { parent, .. }
            | Event::Compaction { parent, .. } => Some(parent.as_ref()),
            _ => None,
        }
    }
}

/// The body of a line as read back: a known event, or an unknown type that
/// marked itself ignorable (kept verbatim so that it is never lost).
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Known(Event),
    Ignorable { type_name: String, fields: Value },
}

impl Body {
    /// The known event, if this build understands the line.
    pub fn event(&self) -> Option<&Event> {
        match self {
            Body::Known(e) => Some(e),
            Body::Ignorable { .. } => None,
        }
    }
    /// The `type` tag.
    pub fn type_name(&self) -> &str {
        match self {
            Body::Known(e) => e.type_name(),
            Body::Ignorable { type_name, .. } => type_name,
        }
    }
}

/// One event as stored: the envelope plus the body.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub seq: Seq,
    pub id: EventId,
    /// RFC 3339 UTC timestamp with milliseconds, set by the store at append.
    pub ts: String,
    pub redaction: Redaction,
    pub body: Body,
}

impl Record {
    /// The known event, if any.
    pub fn event(&self) -> Option<&Event> {
        self.body.event()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_match_serde_tags() {
        let samples = vec![
            Event::RunStarted { run_id: "r".into() },
            Event::ToolStarted {
                call_id: "c".into(),
            },
            Event::WorkspaceRebound {
                from: "a".into(),
                to: "b".into(),
            },
            Event::TailQuarantined {
                file: "events.jsonl.torn-10".into(),
                offset: 10,
                len: 3,
                reason: "r".into(),
            },
        ];
        for e in samples {
            let v = serde_json::to_value(&e).unwrap();
            assert_eq!(v["type"], e.type_name());
            assert!(Event::TYPE_NAMES.contains(&e.type_name()));
        }
    }

    #[test]
    fn event_ids_round_trip() {
        for seq in [0, 1, 9, 10, 123_456_789] {
            assert_eq!(seq_of_event_id(&event_id(seq)), Some(seq));
        }
        for bad in ["", "e", "e01", "x1", "e-1", "e1x"] {
            assert_eq!(seq_of_event_id(bad), None, "{bad}");
        }
    }
}
