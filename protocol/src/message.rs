//! Requests, replies and refusals: what travels on an adapter's stdin and
//! stdout, one JSON object per line (`chaos/PROTOCOL.md`, sections 1, 2 and 4).
//!
//! A request line is a [`RequestLine`] (the id and a [`Request`]); a reply
//! line is a [`ReplyLine`]: the id and either the `ok` body of the
//! operation (its type is named with each [`Request`] variant) or a
//! [`Refusal`]. Servers serialize these types and the harness's client
//! deserializes them, so a field added here is added for both.

use std::fmt;
use std::path::PathBuf;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{BlobRef, Body, Effect, Event, EventId, Phase, Record, Redaction, Seq};

/// The protocol version every adapter speaks (version 1).
pub const PROTOCOL_VERSION: u64 = 1;

/// Version 2: version 1 plus the optional fork server (`fork`, `reap`;
/// `chaos/PROTOCOL.md`, section 8). Negotiated in `hello`: an adapter that
/// answers `hello` 2 with `unsupported` speaks version 1 only.
pub const FORK_PROTOCOL_VERSION: u64 = 2;

/// What a store promises. The scorecard scores each claimed capability and
/// reports the others as not supported, never as passed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
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
    /// A run is owned through a lease (`open` with `lease`, `renew_lease`):
    /// a taken-over owner's appends are refused (kind `fenced`).
    Lease,
}

impl Capability {
    /// Every capability of version 1, in scorecard order.
    pub const ALL: [Capability; 11] = [
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
        Capability::Lease,
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
            Capability::Lease => "lease",
        }
    }

    /// The capability a wire name names, if any.
    pub fn from_name(name: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.name() == name)
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an adapter refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
    /// Another owner's lease on the session is live: `open` with a lease
    /// (or a plain `open`) must wait until it expires by the store's clock.
    LeaseHeld,
    /// The session's lease epoch moved past this connection's: another
    /// owner took over, and nothing of this request was written.
    Fenced,
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
            ErrorKind::LeaseHeld => "lease_held",
            ErrorKind::Fenced => "fenced",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which session to open, and whether to create it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OpenArgs {
    /// A directory the store may create and own.
    pub root: PathBuf,
    /// ASCII letters, digits, `-`, `_`, `.`; not starting with `.`; at most 128 bytes.
    pub session: String,
    /// Required with `create`; on a plain open, rebinds the session when it differs.
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    pub create: bool,
    /// Open as a lease owner (`chaos/PROTOCOL.md`, "Leases and fencing"):
    /// refused with `lease_held` while another owner's lease is live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseRequest>,
}

/// What an owner asks for when it opens a session with a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LeaseRequest {
    /// Who asks: stable for a worker process, unique among the workers.
    pub worker_id: String,
    /// How long the lease lasts from each grant or renewal, in milliseconds
    /// of the store's clock.
    pub ttl_ms: u64,
}

/// A lease the store granted or renewed. Times are the store's clock
/// (milliseconds since the Unix epoch), never the worker's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LeaseGrant {
    pub worker_id: String,
    /// 1 for the session's first owner; each takeover adds one.
    pub epoch: u64,
    /// The store's clock when it granted or renewed this lease.
    pub granted_at_ms: u64,
    /// `granted_at_ms` + the requested ttl: after this instant (by the
    /// store's clock) another worker may take the session over.
    pub expires_at_ms: u64,
}

/// One request, without its id. Each variant names the body of its `ok` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The first request of every process. Reply: [`Hello`].
    Hello {
        /// The version the harness speaks.
        protocol: u64,
    },
    /// Reply: [`Opened`].
    Open(OpenArgs),
    /// Any event but `tool_started` and `session_created`. Reply: [`Ack`], the durable ack.
    Append { event: Event },
    /// Writes the intent (`tool_started`). Reply: [`IntentAck`].
    StartTool { call_id: String },
    /// The store's own recovery. Reply: [`RecoveryState`].
    Recover,
    /// Reply: [`EventsReply`].
    Events {
        /// Records after this seq (from the start when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<Seq>,
        /// At most this many records (no limit when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u64>,
    },
    /// Reply: [`ContextReply`].
    Context {
        /// Tokens, estimated as 4 bytes each.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<u64>,
    },
    /// Reply: [`CheckpointReply`].
    Checkpoint,
    /// Reply: [`crate::view::ProjectionView`].
    Projection,
    /// Reply: [`BlobRef`], once the bytes are durable.
    PutBlob {
        /// The payload's bytes, two lowercase or uppercase hex digits each.
        hex: String,
    },
    /// Reply: [`BlobBytes`].
    GetBlob(BlobRef),
    /// Reply: [`Closed`]. On a leased connection, also ends the lease
    /// (it expires now), so that another worker may take over at once.
    Close,
    /// Extends this connection's lease by its ttl. Reply: [`LeaseGrant`],
    /// or `fenced` when another owner took the session over.
    RenewLease,
    /// Version 2, a fork server only: forks a fresh adapter process whose
    /// stdin, stdout and stderr are the three descriptors sent with this
    /// line (`SCM_RIGHTS` on the server's stdin, a Unix socket). Reply: [`Forked`].
    Fork,
    /// Version 2, a fork server only: waits for a forked process to end
    /// (the harness has killed it) and releases its pid. Reply: [`Reaped`].
    Reap { pid: u32 },
}

impl Request {
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
            Request::GetBlob(_) => "get_blob",
            Request::Close => "close",
            Request::RenewLease => "renew_lease",
            Request::Fork => "fork",
            Request::Reap { .. } => "reap",
        }
    }

    /// Every operation, each with the name of its `ok` body's type (the
    /// schema's `$defs` key), in the order of `chaos/PROTOCOL.md`.
    pub const REPLIES: [(&'static str, &'static str); 15] = [
        ("hello", "Hello"),
        ("open", "Opened"),
        ("append", "Ack"),
        ("start_tool", "IntentAck"),
        ("recover", "RecoveryState"),
        ("events", "EventsReply"),
        ("context", "ContextReply"),
        ("checkpoint", "CheckpointReply"),
        ("projection", "ProjectionView"),
        ("put_blob", "BlobRef"),
        ("get_blob", "BlobBytes"),
        ("close", "Closed"),
        ("renew_lease", "LeaseGrant"),
        ("fork", "Forked"),
        ("reap", "Reaped"),
    ];
}

/// A request line: the id (1 for a process's first request, then 2, 3, …) and the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RequestLine {
    pub id: u64,
    /// Pipelining (section 10): another `append` or `start_tool` of the
    /// same batch follows at once, so the adapter may hold this one's
    /// answer until it has read the batch's last request (the first
    /// without `more`). Only sent to an adapter whose `hello` said
    /// `pipeline`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
    #[serde(flatten)]
    pub request: Request,
}

/// The body of an error reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Refusal {
    pub kind: ErrorKind,
    /// One line saying what and where.
    pub message: String,
}

impl Refusal {
    /// A refusal of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Refusal {
        Refusal {
            kind,
            message: message.into(),
        }
    }

    /// The request does not fit the protocol.
    pub fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal::new(ErrorKind::BadRequest, message)
    }
}

/// What a reply says: the operation's result, or why it was refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The `ok` body of the request's operation (see [`Request::REPLIES`]).
    Ok(Value),
    Error(Refusal),
}

/// A reply line: the id of the request it answers (null when the request
/// had none that could be read), then `ok` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReplyLine {
    pub id: Option<u64>,
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl ReplyLine {
    /// A reply carrying `body`.
    pub fn ok(id: Option<u64>, body: &impl Serialize) -> ReplyLine {
        ReplyLine {
            id,
            outcome: Outcome::Ok(serde_json::to_value(body).expect("a reply body serializes")),
        }
    }

    /// A refusal.
    pub fn refused(id: Option<u64>, refusal: Refusal) -> ReplyLine {
        ReplyLine {
            id,
            outcome: Outcome::Error(refusal),
        }
    }

    /// The line as sent, with its newline.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).expect("a reply line serializes");
        line.push('\n');
        line
    }
}

/// `hello`: who the adapter is and what it claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Hello {
    pub name: String,
    /// The store's own version string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Equal to the request's.
    pub protocol: u64,
    pub capabilities: Vec<Capability>,
    /// Version 2: this process is a fork server (it serves `fork` and `reap`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fork: bool,
    /// Either version: this process takes pipelined batches of `append`
    /// and `start_tool` requests and answers each by its id, in any order
    /// (section 10). Absent: one request in flight at a time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pipeline: bool,
}

/// `fork`: the forked process, leader of its own process group; its pid
/// names it until the server is asked to `reap` it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Forked {
    pub pid: u32,
}

/// `reap`: how the forked process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Reaped {
    /// The raw wait status (`waitpid`).
    pub status: i32,
}

/// `open`: where the log continues.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Opened {
    /// The seq the next appended event gets.
    pub next_seq: Seq,
    /// A torn tail the store cut while opening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repaired: Option<TornTailReport>,
    /// With a lease request: the grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseGrant>,
    /// With a lease request: the recovery the store ran under the new
    /// epoch before it replied (durable), as `recover` would report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryState>,
}

/// A torn tail a store cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TornTailReport {
    /// Byte offset the cut bytes started at.
    pub offset: u64,
    /// How many bytes were cut.
    pub len: u64,
    /// The 1-based line they started.
    pub line: u64,
    pub reason: String,
    /// Where the store saved the cut bytes (agentstore names it; others may not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<String>,
}

/// `append`: the durable ack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Ack {
    pub seq: Seq,
    /// `e<seq>`.
    pub id: EventId,
}

/// `start_tool`: the durable ack of the intent; the tool may run now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IntentAck {
    pub seq: Seq,
    /// `e<seq>`.
    pub id: EventId,
    /// The idempotency key the tool must receive.
    #[serde(default)]
    pub operation_id: Option<String>,
}

/// `recover`: what the store's recovery found and recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecoveryState {
    /// The torn tail cut off when the session was opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repaired: Option<TornTailReport>,
    /// Runs interrupted since the last `run_started` (marked now or earlier).
    pub interrupted_runs: Vec<String>,
    /// Calls marked uncertain and not yet reconciled, in the order of their `tool_call`.
    pub uncertain: Vec<UncertainCall>,
    /// Events this recovery appended (0 when it had nothing left to do).
    pub appended: u64,
}

/// A tool call whose outcome is uncertain after a crash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UncertainCall {
    pub call_id: String,
    pub tool: String,
    #[serde(default)]
    pub target: Option<String>,
    /// As marked.
    pub phase: Phase,
    pub effect: Effect,
    #[serde(default)]
    pub operation_id: Option<String>,
    #[serde(default)]
    pub args: Value,
    /// For `committed`: the external reference its `effect_committed` left.
    #[serde(default)]
    pub external_ref: Option<String>,
}

/// `events`: records in seq order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventsReply {
    pub records: Vec<WireRecord>,
}

/// One record as sent: the envelope and the event (`type` + fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WireRecord {
    pub seq: Seq,
    /// `e<seq>`.
    pub id: EventId,
    /// RFC 3339 timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<String>,
    /// Kept as JSON so that an event that does not fit is reported with
    /// its seq ([`WireRecord::into_record`]), never dropped.
    #[schemars(schema_with = "wire_event_schema")]
    pub event: Value,
}

/// A known event, or an unknown type that marks itself `"ignorable": true`.
fn wire_event_schema(generator: &mut SchemaGenerator) -> Schema {
    let event = generator.subschema_for::<Event>();
    json_schema!({
        "anyOf": [
            event,
            {
                "description": "A record of a type this version does not define, kept and skipped by readers.",
                "type": "object",
                "required": ["type", "ignorable"],
                "properties": {
                    "type": { "type": "string", "not": { "enum": Event::TYPE_NAMES } },
                    "ignorable": { "const": true }
                }
            }
        ]
    })
}

impl WireRecord {
    /// How `rec` is sent.
    pub fn of(rec: &Record) -> WireRecord {
        let event = match &rec.body {
            Body::Known(e) => serde_json::to_value(e).expect("an event serializes"),
            Body::Ignorable { type_name, fields } => {
                let mut obj = match fields {
                    Value::Object(m) => m.clone(),
                    _ => serde_json::Map::new(),
                };
                obj.insert("type".into(), Value::String(type_name.clone()));
                Value::Object(obj)
            }
        };
        WireRecord {
            seq: rec.seq,
            id: rec.id.clone(),
            ts: Some(rec.ts.clone()),
            event,
        }
    }

    /// The record it carries; why not, in one line, when its event fits
    /// no known type and does not mark itself ignorable.
    pub fn into_record(self) -> Result<Record, String> {
        let seq = self.seq;
        let body = match serde_json::from_value::<Event>(self.event.clone()) {
            Ok(e) => Body::Known(e),
            Err(e) => {
                let Value::Object(mut fields) = self.event else {
                    return Err(format!("record {seq}: event is not an object"));
                };
                let type_name = match fields.remove("type") {
                    Some(Value::String(t)) => t,
                    _ => return Err(format!("record {seq}: event has no string \"type\"")),
                };
                let ignorable = fields.get("ignorable") == Some(&Value::Bool(true));
                if Event::TYPE_NAMES.contains(&type_name.as_str()) || !ignorable {
                    return Err(format!("record {seq}: {type_name} event does not fit: {e}"));
                }
                Body::Ignorable {
                    type_name,
                    fields: Value::Object(fields),
                }
            }
        };
        Ok(Record {
            seq,
            id: self.id,
            ts: self.ts.unwrap_or_default(),
            redaction: Redaction::default(),
            body,
        })
    }
}

/// `context`: the model's view of the active branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ContextReply {
    pub text: String,
}

/// `checkpoint`: what the checkpoint covers (events `0..next_seq`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointReply {
    pub next_seq: Seq,
}

/// `get_blob`: the bytes, in hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BlobBytes {
    pub hex: String,
}

/// `close`: an empty object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Closed {}

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(id: u64, request: Request) -> String {
        serde_json::to_string(&RequestLine {
            id,
            more: false,
            request,
        })
        .unwrap()
    }

    #[test]
    fn requests_serialize_as_documented_and_parse_back() {
        let open = OpenArgs {
            root: "/r".into(),
            session: "s".into(),
            workspace: None,
            create: false,
            lease: None,
        };
        let leased = OpenArgs {
            lease: Some(LeaseRequest {
                worker_id: "w1".into(),
                ttl_ms: 500,
            }),
            ..open.clone()
        };
        let cases = [
            (
                Request::Hello { protocol: 1 },
                r#"{"id":7,"op":"hello","protocol":1}"#,
            ),
            (Request::Recover, r#"{"id":7,"op":"recover"}"#),
            (
                Request::Events {
                    after: Some(3),
                    limit: None,
                },
                r#"{"id":7,"op":"events","after":3}"#,
            ),
            (
                Request::Open(open),
                r#"{"id":7,"op":"open","root":"/r","session":"s","workspace":null,"create":false}"#,
            ),
            (
                Request::Open(leased),
                r#"{"id":7,"op":"open","root":"/r","session":"s","workspace":null,"create":false,"lease":{"worker_id":"w1","ttl_ms":500}}"#,
            ),
            (Request::RenewLease, r#"{"id":7,"op":"renew_lease"}"#),
            (
                Request::Append {
                    event: Event::RunStarted { run_id: "r".into() },
                },
                r#"{"id":7,"op":"append","event":{"type":"run_started","run_id":"r"}}"#,
            ),
            (
                Request::GetBlob(BlobRef {
                    digest: "ab".into(),
                    size: 1,
                }),
                r#"{"id":7,"op":"get_blob","digest":"ab","size":1}"#,
            ),
        ];
        for (request, text) in cases {
            assert_eq!(line(7, request.clone()), text);
            let back: RequestLine = serde_json::from_str(text).unwrap();
            assert_eq!(back.request, request, "{text}");
        }
        // Optional fields may be omitted.
        let open: Request = serde_json::from_value(
            json!({"op": "open", "root": "/r", "session": "s", "create": false}),
        )
        .unwrap();
        assert!(matches!(
            open,
            Request::Open(OpenArgs {
                workspace: None,
                ..
            })
        ));
    }

    #[test]
    fn every_operation_names_its_reply() {
        let ops: Vec<&str> = Request::REPLIES.iter().map(|(op, _)| *op).collect();
        let requests = [
            Request::Hello { protocol: 1 },
            Request::Open(OpenArgs {
                root: "/".into(),
                session: "s".into(),
                workspace: None,
                create: true,
                lease: None,
            }),
            Request::Append {
                event: Event::RunStarted { run_id: "r".into() },
            },
            Request::StartTool {
                call_id: "c".into(),
            },
            Request::Recover,
            Request::Events {
                after: None,
                limit: None,
            },
            Request::Context { budget: None },
            Request::Checkpoint,
            Request::Projection,
            Request::PutBlob { hex: String::new() },
            Request::GetBlob(BlobRef {
                digest: String::new(),
                size: 0,
            }),
            Request::Close,
            Request::RenewLease,
            Request::Fork,
            Request::Reap { pid: 1 },
        ];
        let named: Vec<&str> = requests.iter().map(Request::op).collect();
        assert_eq!(named, ops);
    }

    #[test]
    fn reply_lines_put_the_id_first() {
        let ack = Ack {
            seq: 1,
            id: "e1".into(),
        };
        assert_eq!(
            ReplyLine::ok(Some(3), &ack).to_line(),
            "{\"id\":3,\"ok\":{\"id\":\"e1\",\"seq\":1}}\n"
        );
        let refused = ReplyLine::refused(None, Refusal::bad_request("no"));
        assert_eq!(
            refused.to_line(),
            "{\"id\":null,\"error\":{\"kind\":\"bad_request\",\"message\":\"no\"}}\n"
        );
        let back: ReplyLine = serde_json::from_str(refused.to_line().trim_end()).unwrap();
        assert_eq!(back, refused);
    }

    #[test]
    fn wire_records_round_trip_known_and_ignorable_events() {
        let known = WireRecord {
            seq: 1,
            id: "e1".into(),
            ts: Some("t".into()),
            event: json!({"type": "run_started", "run_id": "r"}),
        };
        let rec = known.clone().into_record().unwrap();
        assert_eq!(rec.event(), Some(&Event::RunStarted { run_id: "r".into() }));
        assert_eq!(WireRecord::of(&rec), known);
        let ignorable = WireRecord {
            event: json!({"type": "future_thing", "ignorable": true, "x": 1}),
            ..known.clone()
        };
        let rec = ignorable.clone().into_record().unwrap();
        assert_eq!(rec.body.type_name(), "future_thing");
        assert_eq!(WireRecord::of(&rec), ignorable);
        for (event, why) in [
            (
                json!({"type": "future_thing"}),
                "record 1: future_thing event does not fit",
            ),
            (
                json!({"type": "run_started"}),
                "record 1: run_started event does not fit",
            ),
            (json!([1]), "record 1: event is not an object"),
            (
                json!({"ignorable": true}),
                "record 1: event has no string \"type\"",
            ),
        ] {
            let bad = WireRecord {
                event,
                ..known.clone()
            };
            let e = bad.into_record().unwrap_err();
            assert!(e.starts_with(why), "{e}");
        }
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
    fn names_match_serde() {
        for c in Capability::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), json!(c.name()));
            assert_eq!(Capability::from_name(c.name()), Some(c));
        }
        assert_eq!(Capability::from_name("telepathy"), None);
        for k in [
            ErrorKind::NotFound,
            ErrorKind::BadRequest,
            ErrorKind::LeaseHeld,
            ErrorKind::Fenced,
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), json!(k.name()));
        }
    }
}
