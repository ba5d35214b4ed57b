//! The wire shapes of the adapter protocol, version 1 (`chaos/PROTOCOL.md`).
//!
//! Requests are serialized from [`Request`]; every reply body is parsed into
//! the `*Reply` type of its operation, so a reply that does not fit is caught
//! by serde and reported as a protocol error. [`ProjectionView`] is the
//! comparable projection: adapters send it, the oracle computes it from the
//! events (`crate::check::oracle`), and [`ProjectionView::of`] converts the
//! reference store's own projection to it. This module holds shapes and
//! conversions only; it never does I/O.

use std::fmt;
use std::path::PathBuf;

use agentstore::event::{event_id, Decision, Effect, Event, EventId, Phase, ReconcileOutcome, Seq};
use agentstore::projection::{OpenCall, Plan, Projection};
use agentstore::recovery::{RecoveryState, TornTailReport, UncertainCall};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version this harness speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// What a store promises. The scorecard scores each claimed capability and
/// reports the others as not supported, never as passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// An acknowledged append survives a crash.
    DurableAppend,
    /// A torn final record is cut on open; the next append does not fuse with it.
    TornTailRepair,
    /// Damage before the tail makes open fail (kind `damage`), never a silent skip.
    DamageRefusal,
    /// Recovery marks every call without a result once, with its phase, and closes open runs.
    OrphanMarking,
    /// A second commit of an operation id is refused (kind `rule`).
    EffectLedger,
    /// `checkpoint` and `projection` are served and agree with the events.
    CheckpointProjection,
    /// The active leaf is durable (`leaf_moved`).
    Branches,
    /// `compaction` windows the context without deleting history.
    Compaction,
    /// While one process holds a session open, a second `open` is refused (`locked`).
    WriterLock,
    /// `put_blob` stores bytes durably and `get_blob` serves them back.
    Blobs,
}

impl Capability {
    /// Every capability of version 1, in scorecard order.
    pub const ALL: [Capability; 10] = [
        Capability::DurableAppend,
        Capability::TornTailRepair,
        Capability::DamageRefusal,
        Capability::OrphanMarking,
        Capability::EffectLedger,
        Capability::CheckpointProjection,
        Capability::Branches,
        Capability::Compaction,
        Capability::WriterLock,
        Capability::Blobs,
    ];

    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            Capability::DurableAppend => "durable_append",
            Capability::TornTailRepair => "torn_tail_repair",
            Capability::DamageRefusal => "damage_refusal",
            Capability::OrphanMarking => "orphan_marking",
            Capability::EffectLedger => "effect_ledger",
            Capability::CheckpointProjection => "checkpoint_projection",
            Capability::Branches => "branches",
            Capability::Compaction => "compaction",
            Capability::WriterLock => "writer_lock",
            Capability::Blobs => "blobs",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an adapter refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// A session rule refused the event; nothing was written.
    Rule,
    /// An I/O call failed; the event is not acknowledged.
    Io,
    /// Stored data is damaged; the store refuses to load it.
    Damage,
    /// Another writer holds the session.
    Locked,
    /// No such session (open without create).
    NotFound,
    /// The session already exists (open with create).
    Exists,
    /// The request is well formed but its content is unusable (a bad session id, a moved workspace).
    Invalid,
    /// The request does not fit the protocol (unknown op, missing field, no session open).
    BadRequest,
    /// The store does not implement this operation or protocol version.
    Unsupported,
}

impl ErrorKind {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Rule => "rule",
            ErrorKind::Io => "io",
            ErrorKind::Damage => "damage",
            ErrorKind::Locked => "locked",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Exists => "exists",
            ErrorKind::Invalid => "invalid",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::Unsupported => "unsupported",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which session to open, and whether to create it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenArgs {
    pub root: PathBuf,
    pub session: String,
    /// Required with `create`; on a plain open, rebinds the session when it differs.
    pub workspace: Option<PathBuf>,
    pub create: bool,
}

/// One request, without its id.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request<'a> {
    Hello {
        protocol: u64,
    },
    Open(&'a OpenArgs),
    Append {
        event: &'a Event,
    },
    StartTool {
        call_id: &'a str,
    },
    Recover,
    Events {
        #[serde(skip_serializing_if = "Option::is_none")]
        after: Option<Seq>,
        #[serde(skip_serializing_if = "Option::is_none")]
        limit: Option<u64>,
    },
    Context {
        #[serde(skip_serializing_if = "Option::is_none")]
        budget: Option<u64>,
    },
    Checkpoint,
    Projection,
    PutBlob {
        hex: String,
    },
    GetBlob {
        digest: &'a str,
        size: u64,
    },
    Close,
}

impl Request<'_> {
    /// The operation name.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "hello",
            Request::Open(_) => "open",
            Request::Append { .. } => "append",
            Request::StartTool { .. } => "start_tool",
            Request::Recover => "recover",
            Request::Events { .. } => "events",
            Request::Context { .. } => "context",
            Request::Checkpoint => "checkpoint",
            Request::Projection => "projection",
            Request::PutBlob { .. } => "put_blob",
            Request::GetBlob { .. } => "get_blob",
            Request::Close => "close",
        }
    }
}

/// A request line: the id and the request.
#[derive(Debug, Serialize)]
pub struct Envelope<'a> {
    pub id: u64,
    #[serde(flatten)]
    pub request: &'a Request<'a>,
}

/// The body of an error reply.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WireError {
    pub kind: ErrorKind,
    pub message: String,
}

/// `hello`: who the adapter is and what it claims.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Hello {
    pub name: String,
    #[serde(default)]
    pub version: Option<String>,
    pub protocol: u64,
    pub capabilities: Vec<Capability>,
}

/// `open`: where the log continues.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Opened {
    /// The seq the next appended event gets.
    pub next_seq: Seq,
    /// A torn tail the store cut while opening.
    #[serde(default)]
    pub repaired: Option<TornTailWire>,
}

/// A torn tail as reported by the adapter.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TornTailWire {
    pub offset: u64,
    pub len: u64,
    pub line: u64,
    pub reason: String,
    /// Where the store saved the cut bytes (agentstore names it; others may not).
    #[serde(default)]
    pub quarantine: Option<String>,
}

impl From<TornTailWire> for TornTailReport {
    fn from(t: TornTailWire) -> Self {
        TornTailReport {
            offset: t.offset,
            len: t.len,
            line: t.line,
            reason: t.reason,
            quarantine: t.quarantine,
        }
    }
}

/// `append`: the durable ack.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Ack {
    pub seq: Seq,
    pub id: EventId,
}

/// `start_tool`: the durable ack of the intent; the tool may run now.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct IntentAck {
    pub seq: Seq,
    pub id: EventId,
    /// The idempotency key the tool must receive.
    #[serde(default)]
    pub operation_id: Option<String>,
}

/// `recover`, as sent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RecoverReply {
    #[serde(default)]
    pub repaired: Option<TornTailWire>,
    pub interrupted_runs: Vec<String>,
    pub uncertain: Vec<UncertainWire>,
    pub appended: u64,
}

/// One uncertain call, as sent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct UncertainWire {
    pub call_id: String,
    pub tool: String,
    #[serde(default)]
    pub target: Option<String>,
    pub phase: Phase,
    pub effect: Effect,
    #[serde(default)]
    pub operation_id: Option<String>,
    #[serde(default)]
    pub args: Value,
    #[serde(default)]
    pub external_ref: Option<String>,
}

impl From<RecoverReply> for RecoveryState {
    fn from(r: RecoverReply) -> Self {
        RecoveryState {
            repaired: r.repaired.map(TornTailReport::from),
            interrupted_runs: r.interrupted_runs,
            uncertain: r
                .uncertain
                .into_iter()
                .map(|u| UncertainCall {
                    call_id: u.call_id,
                    tool: u.tool,
                    target: u.target,
                    phase: u.phase,
                    effect: u.effect,
                    operation_id: u.operation_id,
                    args: u.args,
                    external_ref: u.external_ref,
                })
                .collect(),
            appended: r.appended,
        }
    }
}

/// `events`: records in seq order.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct EventsReply {
    pub records: Vec<WireRecord>,
}

/// One record as sent: the envelope and the event (`type` + fields).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct WireRecord {
    pub seq: Seq,
    pub id: EventId,
    #[serde(default)]
    pub ts: Option<String>,
    pub event: Value,
}

/// `context`: the model's view.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ContextReply {
    pub text: String,
}

/// `checkpoint`: what the checkpoint covers (events `0..next_seq`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CheckpointReply {
    pub next_seq: Seq,
}

/// `get_blob`: the bytes, in hex.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BlobBytes {
    pub hex: String,
}

/// Lowercase hex of `bytes`, as blobs travel.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string; `None` unless it is pairs of hex digits.
pub fn from_hex(hex: &str) -> Option<Vec<u8>> {
    let digits = hex.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    let nibble = |d: u8| (d as char).to_digit(16).map(|v| v as u8);
    digits
        .chunks(2)
        .map(|pair| Some((nibble(pair[0])? << 4) | nibble(pair[1])?))
        .collect()
}

/// `close`: an empty object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Closed {}

/// The projection every adapter serves and the harness computes from its
/// own fold: what resuming a session needs, in a form two independent
/// stores can agree on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectionView {
    /// The seq the next event gets.
    pub next_seq: Seq,
    /// The run started and neither finished nor interrupted.
    pub open_run: Option<String>,
    /// Runs interrupted since the last `run_started`.
    pub interrupted_runs: Vec<String>,
    /// The active leaf of the history tree.
    pub leaf: Option<EventId>,
    /// The active branch, oldest first: the path from the root to the leaf,
    /// starting at the first kept entry of the nearest compaction on it.
    pub branch: Vec<EventId>,
    /// Calls without a result, in the order of their `tool_call`.
    pub open_calls: Vec<CallView>,
    /// Operation ids with a durable `effect_committed`, sorted.
    pub committed_operations: Vec<String>,
    /// The last `plan_updated`.
    pub plan: Option<Plan>,
}

/// A call without a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallView {
    pub call_id: String,
    pub tool: String,
    pub args: Value,
    pub effect: Effect,
    pub operation_id: Option<String>,
    pub target: Option<String>,
    pub needs_approval: bool,
    pub approval: Option<Decision>,
    /// How far it got: `committed` with an `effect_committed`, else `started`
    /// with a `tool_started`, else `requested`.
    pub phase: Phase,
    /// The `external_ref` of its `effect_committed`.
    pub external_ref: Option<String>,
    /// The phase of its recovery mark since it last started, if any.
    pub recovery: Option<Phase>,
    /// The outcome of its reconciliation since that mark, if any.
    pub reconciled: Option<ReconcileOutcome>,
}

impl CallView {
    fn of(c: &OpenCall) -> CallView {
        CallView {
            call_id: c.call_id.clone(),
            tool: c.tool.clone(),
            args: c.args.clone(),
            effect: c.effect,
            operation_id: c.operation_id.clone(),
            target: c.target.clone(),
            needs_approval: c.needs_approval,
            approval: c.approval,
            phase: c.phase(),
            external_ref: c.committed.clone(),
            recovery: c.recovery,
            reconciled: c.reconciled,
        }
    }
}

impl ProjectionView {
    /// The view of agentstore's own projection: how the reference store's
    /// output (served or snapshotted) is compared. Never an expected value:
    /// that is `crate::check::oracle::projection`.
    pub fn of(p: &Projection) -> ProjectionView {
        let mut calls: Vec<&OpenCall> = p.open_calls().values().collect();
        calls.sort_by_key(|c| c.seq);
        ProjectionView {
            next_seq: p.next_seq(),
            open_run: p.open_run().map(str::to_string),
            interrupted_runs: p.interrupted_runs().to_vec(),
            leaf: p.leaf(),
            branch: p.branch().iter().map(|&s| event_id(s)).collect(),
            open_calls: calls.into_iter().map(CallView::of).collect(),
            committed_operations: p.committed_operations().iter().cloned().collect(),
            plan: p.plan().cloned(),
        }
    }

    /// The fields where `self` (expected) and `found` differ, one line each:
    /// `field: expected X, found Y`. Empty when they agree.
    pub fn differences(&self, found: &ProjectionView) -> Vec<String> {
        let (Value::Object(a), Value::Object(b)) = (
            serde_json::to_value(self).expect("a view serializes"),
            serde_json::to_value(found).expect("a view serializes"),
        ) else {
            unreachable!("a struct serializes to an object")
        };
        a.iter()
            .filter(|(k, v)| b.get(*k) != Some(*v))
            .map(|(k, v)| format!("{k}: expected {v}, found {}", b[k]))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_serialize_as_documented() {
        let line = |request: &Request| serde_json::to_string(&Envelope { id: 7, request }).unwrap();
        assert_eq!(
            line(&Request::Hello { protocol: 1 }),
            r#"{"id":7,"op":"hello","protocol":1}"#
        );
        assert_eq!(line(&Request::Recover), r#"{"id":7,"op":"recover"}"#);
        assert_eq!(
            line(&Request::Events {
                after: Some(3),
                limit: None
            }),
            r#"{"id":7,"op":"events","after":3}"#
        );
        let open = OpenArgs {
            root: "/r".into(),
            session: "s".into(),
            workspace: None,
            create: false,
        };
        assert_eq!(
            line(&Request::Open(&open)),
            r#"{"id":7,"op":"open","root":"/r","session":"s","workspace":null,"create":false}"#
        );
        let ev = Event::ToolStarted {
            call_id: "c".into(),
        };
        assert_eq!(
            line(&Request::Append { event: &ev }),
            r#"{"id":7,"op":"append","event":{"type":"tool_started","call_id":"c"}}"#
        );
    }

    #[test]
    fn hex_round_trips_and_refuses_odd_input() {
        let bytes = [0u8, 1, 0x7f, 0x80, 0xff];
        assert_eq!(to_hex(&bytes), "00017f80ff");
        assert_eq!(from_hex("00017F80ff").unwrap(), bytes);
        for bad in ["0", "0g", "+1", "é1"] {
            assert_eq!(from_hex(bad), None, "{bad}");
        }
    }

    #[test]
    fn capability_names_match_serde() {
        for c in Capability::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), json!(c.name()));
        }
        for k in [ErrorKind::NotFound, ErrorKind::BadRequest] {
            assert_eq!(serde_json::to_value(k).unwrap(), json!(k.name()));
        }
    }

    #[test]
    fn differences_name_each_field() {
        let a = ProjectionView::of(&Projection::default());
        let mut b = a.clone();
        assert!(a.differences(&b).is_empty());
        b.next_seq = 4;
        b.leaf = Some("e3".into());
        assert_eq!(
            a.differences(&b),
            [
                "leaf: expected null, found \"e3\"",
                "next_seq: expected 0, found 4"
            ]
        );
    }
}
