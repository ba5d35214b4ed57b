//! The protocol's JSON Schema, derived from this crate's types: the
//! normative shape of every line (`chaos/PROTOCOL.md` explains what the
//! fields mean). Committed at `protocol/schema/protocol.schema.json`; a
//! test fails when the committed file is not what [`document`] generates.

use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

use crate::message::{
    Ack, BlobBytes, CheckpointReply, Closed, ContextReply, EventsReply, Forked, Hello, IntentAck,
    LeaseGrant, Opened, Reaped, RecoveryState, ReplyLine, Request, RequestLine,
};
use crate::view::ProjectionView;
use crate::{BlobRef, FORK_PROTOCOL_VERSION, PROTOCOL_VERSION};

/// Where the committed schema lives, relative to this crate's root.
pub const COMMITTED_PATH: &str = "schema/protocol.schema.json";

/// The schema document: `$defs` holds every type; `RequestLine` is one
/// request line, `ReplyLine` one reply line, and `replies` maps each
/// operation to the `$defs` entry its `ok` body must fit.
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    let request = generator.subschema_for::<RequestLine>();
    let reply = generator.subschema_for::<ReplyLine>();
    // The reply bodies, in the order of `Request::REPLIES`: registered in
    // `$defs` under their type names.
    generator.subschema_for::<Hello>();
    generator.subschema_for::<Opened>();
    generator.subschema_for::<Ack>();
    generator.subschema_for::<IntentAck>();
    generator.subschema_for::<RecoveryState>();
    generator.subschema_for::<EventsReply>();
    generator.subschema_for::<ContextReply>();
    generator.subschema_for::<CheckpointReply>();
    generator.subschema_for::<ProjectionView>();
    generator.subschema_for::<BlobRef>();
    generator.subschema_for::<BlobBytes>();
    generator.subschema_for::<Closed>();
    generator.subschema_for::<LeaseGrant>();
    generator.subschema_for::<Forked>();
    generator.subschema_for::<Reaped>();
    let defs: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    let replies: Map<String, Value> = Request::REPLIES
        .iter()
        .map(|(op, def)| (op.to_string(), json!({ "$ref": format!("#/$defs/{def}") })))
        .collect();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": format!("agentchaos adapter protocol, versions {PROTOCOL_VERSION} and {FORK_PROTOCOL_VERSION}"),
        "description": "Generated from the crate agentchaos-protocol (UPDATE_SCHEMA=1 cargo test -p agentchaos-protocol); chaos/PROTOCOL.md explains the semantics. A request line fits $defs/RequestLine, a reply line $defs/ReplyLine, and the ok body of a reply fits the entry of `replies` named by the request's op.",
        "anyOf": [request, reply],
        "replies": replies,
        "$defs": defs,
    })
}
