//! The agentchaos adapter protocol, version 1 (`chaos/PROTOCOL.md`), over
//! a [`SqliteStore`]: one request line in, one reply line out, flushed.
//!
//! This is written from the protocol document, not shared with the
//! reference store's adapter, so the two implementations check each other.
//! It must never reply to `append` or `start_tool` before the transaction
//! committed, and never write anything but replies to its output.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use agentstore::event::{BlobRef, Event};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::StoreError;
use crate::mutant::{self, Mutant};
use crate::store::SqliteStore;
use crate::view;

/// The protocol version spoken here.
pub const PROTOCOL: u64 = 1;

/// What this store claims. Not claimed: `torn_tail_repair` (SQLite's WAL
/// discards a partly written frame itself; the store never sees a torn
/// record) and `damage_refusal` (without page checksums a flipped byte
/// inside a row goes unnoticed).
pub const CAPABILITIES: &[&str] = &[
    "durable_append",
    "orphan_marking",
    "effect_ledger",
    "checkpoint_projection",
    "branches",
    "compaction",
    "writer_lock",
    "blobs",
];

#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Op {
    Hello {
        protocol: u64,
    },
    Open {
        root: PathBuf,
        session: String,
        workspace: Option<PathBuf>,
        create: bool,
    },
    Append {
        event: Value,
    },
    StartTool {
        call_id: String,
    },
    Recover,
    Events {
        after: Option<u64>,
        limit: Option<u64>,
    },
    Context {
        budget: Option<u64>,
    },
    Checkpoint,
    Projection,
    PutBlob {
        hex: String,
    },
    GetBlob {
        digest: String,
        size: u64,
    },
    Close,
}

/// An error reply's kind and message.
type Failure = (&'static str, String);

impl From<StoreError> for (&'static str, String) {
    fn from(e: StoreError) -> Self {
        (e.kind(), e.to_string())
    }
}

fn bad(message: &str) -> Failure {
    ("bad_request", message.to_string())
}

/// Serves the protocol until `input` ends. Fails only when a stream does.
pub fn serve(input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    let mut store: Option<SqliteStore> = None;
    for line in input.lines() {
        let line = line?;
        // Set when a reply already went out (only the ack-before-write mutant).
        let mut replied = false;
        let (id, result) = match serde_json::from_str::<Value>(&line) {
            Err(e) => (Value::Null, Err(bad(&format!("request is not JSON: {e}")))),
            Ok(request) => {
                let id = request.get("id").cloned().unwrap_or(Value::Null);
                let result = match serde_json::from_value::<Op>(request) {
                    Ok(op) => {
                        let mut early = |ok: &Value| {
                            replied = true;
                            writeln!(output, "{{\"id\":{id},\"ok\":{ok}}}")?;
                            output.flush()
                        };
                        handle(&mut store, op, &mut early)
                    }
                    Err(e) => Err(bad(&format!("request does not fit: {e}"))),
                };
                (id, result)
            }
        };
        if replied {
            continue;
        }
        // Built by hand so that the id comes first on the line.
        let body = match result {
            Ok(ok) => format!("\"ok\":{ok}"),
            Err((kind, message)) => {
                format!("\"error\":{}", json!({ "kind": kind, "message": message }))
            }
        };
        writeln!(output, "{{\"id\":{id},{body}}}")?;
        output.flush()?;
    }
    Ok(())
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    let digits = hex.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    let nibble = |d: u8| (d as char).to_digit(16).map(|v| v as u8);
    digits
        .chunks(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

fn open_store(store: &mut Option<SqliteStore>) -> Result<&mut SqliteStore, Failure> {
    store
        .as_mut()
        .ok_or_else(|| bad("no session is open (send open first)"))
}

/// `early` sends a reply before the request is done (only the
/// ack-before-write mutant uses it).
fn handle(
    store: &mut Option<SqliteStore>,
    op: Op,
    early: &mut dyn FnMut(&Value) -> std::io::Result<()>,
) -> Result<Value, Failure> {
    match op {
        Op::Hello { protocol } => {
            if protocol != PROTOCOL {
                return Err((
                    "unsupported",
                    format!("protocol {protocol} is not spoken here (only {PROTOCOL})"),
                ));
            }
            Ok(json!({
                "name": "agentchaos-sqlite-store",
                "version": env!("CARGO_PKG_VERSION"),
                "protocol": PROTOCOL,
                "capabilities": CAPABILITIES,
            }))
        }
        Op::Open {
            root,
            session,
            workspace,
            create,
        } => {
            if store.is_some() {
                return Err(bad("a session is already open; close it first"));
            }
            let opened = if create {
                let ws = workspace.ok_or_else(|| bad("open with create needs a workspace"))?;
                SqliteStore::create(&root, &session, &ws)?
            } else {
                SqliteStore::open(&root, &session, workspace.as_deref())?
            };
            let next_seq = view::next_seq(opened.conn())?;
            *store = Some(opened);
            Ok(json!({ "next_seq": next_seq }))
        }
        Op::Append { event } => {
            let event: Event = serde_json::from_value(event)
                .map_err(|e| bad(&format!("event does not fit: {e}")))?;
            if matches!(event, Event::ToolStarted { .. }) {
                return Err(bad("the intent (tool_started) is written by start_tool"));
            }
            let reply = |seq: u64| json!({ "seq": seq, "id": format!("e{seq}") });
            let store = open_store(store)?;
            let seq = if mutant::active(Mutant::AckBeforeWrite) {
                store.append_acking_first(&event, |seq| early(&reply(seq)))?
            } else {
                store.append(&event)?
            };
            Ok(reply(seq))
        }
        Op::StartTool { call_id } => {
            let (seq, operation_id) = open_store(store)?.start_tool(&call_id)?;
            Ok(json!({ "seq": seq, "id": format!("e{seq}"), "operation_id": operation_id }))
        }
        Op::Recover => {
            let r = open_store(store)?.recover()?;
            let uncertain: Vec<Value> = r
                .uncertain
                .iter()
                .map(|c| {
                    json!({
                        "call_id": c.call_id,
                        "tool": c.tool,
                        "target": c.target,
                        "phase": c.recovery,
                        "effect": c.effect,
                        "operation_id": c.operation_id,
                        "args": c.args,
                        "external_ref": c.external_ref,
                    })
                })
                .collect();
            Ok(json!({
                "interrupted_runs": r.interrupted_runs,
                "uncertain": uncertain,
                "appended": r.appended,
            }))
        }
        Op::Events { after, limit } => {
            let records: Vec<Value> = open_store(store)?
                .events(after, limit)?
                .into_iter()
                .map(|e| json!({ "seq": e.seq, "id": format!("e{}", e.seq), "ts": e.ts, "event": e.event }))
                .collect();
            Ok(json!({ "records": records }))
        }
        Op::Context { budget } => {
            let text = view::context(open_store(store)?.conn(), budget)?;
            Ok(json!({ "text": text }))
        }
        Op::Checkpoint => {
            let next_seq = open_store(store)?.checkpoint()?;
            Ok(json!({ "next_seq": next_seq }))
        }
        Op::Projection => Ok(view::projection(open_store(store)?.conn())?),
        Op::PutBlob { hex } => {
            let bytes =
                decode_hex(&hex).ok_or_else(|| bad("put_blob: hex must be pairs of hex digits"))?;
            let blob = open_store(store)?.put_blob(&bytes)?;
            Ok(json!({ "digest": blob.digest, "size": blob.size }))
        }
        Op::GetBlob { digest, size } => {
            let bytes = open_store(store)?.get_blob(&BlobRef { digest, size })?;
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            Ok(json!({ "hex": hex }))
        }
        Op::Close => {
            open_store(store)?;
            *store = None;
            Ok(json!({}))
        }
    }
}
