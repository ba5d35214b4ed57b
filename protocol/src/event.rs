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

/// The typed body of one event. Closed: a field that is not in its schema,
/// at any depth but inside `args` and `output`, is refused (naming the
/// field), so nothing a writer sent is dropped silently.
// `deny_unknown_fields` here; the nested plan steps and blob reference
// through `closed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
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
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "closed::blob"
        )]
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
        #[serde(deserialize_with = "closed::steps")]
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

/// The values nested in an event, read as strictly as the event: an
/// unknown field is refused. [`PlanStep`] and [`BlobRef`] themselves stay
/// as they are where they are not part of an event (a projection reply's
/// plan, a `get_blob` request, which servers read with its `id` beside it).
mod closed {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer};

    use super::{BlobRef, PlanStep, StepStatus};

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct ClosedBlobRef {
        digest: String,
        size: u64,
    }

    pub(super) fn blob<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BlobRef>, D::Error> {
        Ok(Option::<ClosedBlobRef>::deserialize(d)?
            .map(|ClosedBlobRef { digest, size }| BlobRef { digest, size }))
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Status {
        Pending,
        InProgress,
        Done,
        Blocked,
    }

    /// A plan step as written: `status`, and `reason` with `blocked` only
    /// (what `#[serde(flatten)]` of [`StepStatus`] writes; flatten itself
    /// cannot refuse unknown fields).
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct ClosedPlanStep {
        id: String,
        title: String,
        status: Status,
        #[serde(default)]
        reason: Option<String>,
    }

    pub(super) fn steps<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PlanStep>, D::Error> {
        Vec::<ClosedPlanStep>::deserialize(d)?
            .into_iter()
            .map(|step| {
                let status = match (step.status, step.reason) {
                    (Status::Blocked, Some(reason)) => StepStatus::Blocked(reason),
                    (Status::Blocked, None) => {
                        return Err(D::Error::missing_field("reason"));
                    }
                    (_, Some(_)) => {
                        return Err(D::Error::custom(
                            "field `reason` is only for a step whose status is `blocked`",
                        ));
                    }
                    (Status::Pending, None) => StepStatus::Pending,
                    (Status::InProgress, None) => StepStatus::InProgress,
                    (Status::Done, None) => StepStatus::Done,
                };
                Ok(PlanStep {
                    id: step.id,
                    title: step.title,
                    status,
                })
            })
            .collect()
    }
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

    /// One event of every type, each optional field set, nested values included.
    fn one_of_each() -> Vec<Event> {
        let p = || Some("e1".to_string());
        let events = vec![
            Event::SessionCreated {
                session_id: "s1".into(),
                schema_version: SCHEMA_VERSION,
                workspace: "/w".into(),
            },
            Event::RunStarted { run_id: "r".into() },
            Event::RequestHeader {
                run_id: "r".into(),
                model: "m".into(),
                system_prompt_hash: "h".into(),
                tools_hash: "t".into(),
            },
            Event::UserMessage {
                parent: p(),
                text: "t".into(),
            },
            Event::AssistantMessage {
                parent: p(),
                text: "t".into(),
            },
            Event::ToolCall {
                parent: p(),
                call_id: "c".into(),
                tool: "bash".into(),
                args: serde_json::json!({"cmd": "ls", "nested": {"any": "keys"}}),
                effect: Effect::SideEffect,
                operation_id: Some("op".into()),
                target: Some("a".into()),
                needs_approval: true,
            },
            Event::ToolStarted {
                call_id: "c".into(),
            },
            Event::EffectCommitted {
                call_id: "c".into(),
                operation_id: "op".into(),
                external_ref: "x".into(),
            },
            Event::ToolResult {
                parent: p(),
                call_id: "c".into(),
                status: ResultStatus::Ok,
                output: Some(serde_json::json!({"free": "form"})),
                blob: Some(BlobRef {
                    digest: "ab".into(),
                    size: 2,
                }),
            },
            Event::ToolRecovery {
                call_id: "c".into(),
                status: RecoveryStatus::Uncertain,
                phase: Phase::Started,
            },
            Event::ToolReconciled {
                call_id: "c".into(),
                outcome: ReconcileOutcome::NotApplied,
                evidence: "e".into(),
            },
            Event::PlanUpdated {
                goal: "g".into(),
                steps: vec![
                    PlanStep {
                        id: "1".into(),
                        title: "a".into(),
                        status: StepStatus::InProgress,
                    },
                    PlanStep {
                        id: "2".into(),
                        title: "b".into(),
                        status: StepStatus::Blocked("why".into()),
                    },
                ],
            },
            Event::Compaction {
                parent: p(),
                summary: "s".into(),
                first_kept_id: "e1".into(),
                tokens_before: 9,
            },
            Event::LeafMoved { leaf: "e1".into() },
            Event::Approval {
                call_id: "c".into(),
                decision: Decision::Approved,
            },
            Event::RunFinished {
                run_id: "r".into(),
                status: RunStatus::Failed,
            },
            Event::RunInterrupted { run_id: "r".into() },
            Event::WorkspaceRebound {
                from: "/a".into(),
                to: "/b".into(),
            },
            Event::TailQuarantined {
                file: "events.jsonl.torn-9".into(),
                offset: 9,
                len: 1,
                reason: "r".into(),
            },
        ];
        let mut covered: Vec<&str> = events.iter().map(Event::type_name).collect();
        covered.sort_unstable();
        let mut all = Event::TYPE_NAMES.to_vec();
        all.sort_unstable();
        assert_eq!(covered, all, "one event of every type");
        events
    }

    fn refusal(value: Value) -> String {
        match serde_json::from_value::<Event>(value.clone()) {
            Ok(e) => panic!("accepted {value}: {e:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn an_unknown_field_is_refused_in_every_event_type_and_named() {
        for event in one_of_each() {
            let json = serde_json::to_value(&event).unwrap();
            assert_eq!(
                serde_json::from_value::<Event>(json.clone()).unwrap(),
                event
            );
            let mut extra = json.clone();
            extra["bogus"] = 1.into();
            let why = refusal(extra);
            assert!(
                why.contains("unknown field `bogus`"),
                "{}: {why}",
                event.type_name()
            );
            // Also through a text parse, the way a stored line or a request is read.
            let mut text = serde_json::to_string(&json).unwrap();
            text.insert_str(1, r#""bogus":null,"#);
            let why = serde_json::from_str::<Event>(&text)
                .unwrap_err()
                .to_string();
            assert!(
                why.contains("unknown field `bogus`"),
                "{}: {why}",
                event.type_name()
            );
        }
    }

    #[test]
    fn an_unknown_field_nested_in_an_event_is_refused_and_named() {
        let events = one_of_each();
        let of = |t: &str| {
            let e = events.iter().find(|e| e.type_name() == t).unwrap();
            serde_json::to_value(e).unwrap()
        };
        let mut blob = of("tool_result");
        blob["blob"]["bogus"] = 1.into();
        assert!(refusal(blob).contains("unknown field `bogus`"));
        for step in 0..2 {
            let mut plan = of("plan_updated");
            plan["steps"][step]["bogus"] = 1.into();
            assert!(
                refusal(plan).contains("unknown field `bogus`"),
                "step {step}"
            );
        }
        let mut reason = of("plan_updated");
        reason["steps"][0]["reason"] = "x".into();
        assert!(refusal(reason).contains("`reason` is only for"));
        let mut blocked = of("plan_updated");
        blocked["steps"][1]
            .as_object_mut()
            .unwrap()
            .remove("reason");
        assert!(refusal(blocked).contains("missing field `reason`"));
        // Free-form JSON stays free: any keys in args and output.
        let mut args = of("tool_call");
        args["args"]["more"] = 1.into();
        serde_json::from_value::<Event>(args).unwrap();
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
