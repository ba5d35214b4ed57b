//! The example transcript of `chaos/PROTOCOL.md` (section 6) fits the
//! protocol's types: every request line parses as a `RequestLine`, every
//! reply body as its operation's reply type, and each serializes back to
//! the same JSON. A change to the types or to the document that breaks
//! the other fails here.

use std::collections::HashMap;
use std::path::Path;

use agentchaos_protocol::message::{
    Ack, BlobBytes, CheckpointReply, Closed, ContextReply, EventsReply, Hello, IntentAck, Opened,
    Outcome, RecoveryState, ReplyLine, RequestLine,
};
use agentchaos_protocol::{BlobRef, ProjectionView, Refusal};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// `value` with every object field that is null left out: the protocol
/// treats an omitted optional field and a null one alike.
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

fn round_trip<T: DeserializeOwned + Serialize>(what: &str, value: &Value) {
    let typed: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{what} does not fit its type: {e}: {value}"));
    let back = serde_json::to_value(&typed).expect("it serializes");
    assert_eq!(
        without_nulls(back),
        without_nulls(value.clone()),
        "{what} does not serialize back the same"
    );
}

fn body_fits(op: &str, body: &Value) {
    let what = format!("the {op} reply");
    match op {
        "hello" => round_trip::<Hello>(&what, body),
        "open" => round_trip::<Opened>(&what, body),
        "append" => round_trip::<Ack>(&what, body),
        "start_tool" => round_trip::<IntentAck>(&what, body),
        "recover" => round_trip::<RecoveryState>(&what, body),
        "events" => round_trip::<EventsReply>(&what, body),
        "context" => round_trip::<ContextReply>(&what, body),
        "checkpoint" => round_trip::<CheckpointReply>(&what, body),
        "projection" => round_trip::<ProjectionView>(&what, body),
        "put_blob" => round_trip::<BlobRef>(&what, body),
        "get_blob" => round_trip::<BlobBytes>(&what, body),
        "close" => round_trip::<Closed>(&what, body),
        other => panic!("no reply type for op {other}"),
    }
}

#[test]
fn the_documented_transcript_fits_the_types() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../chaos/PROTOCOL.md");
    let doc = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut ops: HashMap<u64, String> = HashMap::new();
    let (mut requests, mut replies) = (0, 0);
    for line in doc.lines() {
        if let Some(text) = line.strip_prefix("> ") {
            let value: Value = serde_json::from_str(text).expect("a request line is JSON");
            let request: RequestLine = serde_json::from_value(value.clone())
                .unwrap_or_else(|e| panic!("request does not fit: {e}: {text}"));
            ops.insert(request.id, request.request.op().to_string());
            let back = serde_json::to_value(&request).expect("it serializes");
            assert_eq!(
                without_nulls(back),
                without_nulls(value),
                "request does not serialize back the same"
            );
            requests += 1;
        } else if let Some(text) = line.strip_prefix("< ") {
            let reply: ReplyLine = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("reply line does not fit: {e}: {text}"));
            let id = reply.id.expect("a documented reply has an id");
            let op = ops.get(&id).expect("a reply follows its request");
            match &reply.outcome {
                Outcome::Ok(body) => body_fits(op, body),
                Outcome::Error(refusal) => {
                    round_trip::<Refusal>("an error", &serde_json::to_value(refusal).unwrap())
                }
            }
            replies += 1;
        }
    }
    assert!(
        requests >= 10 && requests == replies,
        "{requests} requests, {replies} replies"
    );
}
