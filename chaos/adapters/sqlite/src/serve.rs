//! The agentchaos adapter protocol, version 1 (`chaos/PROTOCOL.md`), over
//! a [`SqliteStore`]: one request line in, one reply line out, flushed.
//!
//! The shapes are the protocol crate's (`agentchaos_protocol`); what is
//! served is written from the protocol document, not shared with the
//! reference store's adapter, so the two implementations check each other.
//! It must never reply to `append` or `start_tool` before the transaction
//! committed, and never write anything but replies to its output.

use std::io::{BufRead, Write};

use agentchaos_protocol::event::{event_id, Event};
use agentchaos_protocol::message::{
    from_hex, to_hex, Ack, BlobBytes, CheckpointReply, Closed, ContextReply, EventsReply, Hello,
    IntentAck, OpenArgs, Opened, RecoveryState, ReplyLine, UncertainCall, WireRecord,
};
use agentchaos_protocol::{
    Capability, ErrorKind, Refusal, Request, FORK_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use serde::Serialize;
use serde_json::Value;

use crate::error::StoreError;
use crate::mutant::{self, Mutant};
use crate::store::SqliteStore;
use crate::view;

/// What this store claims. Not claimed: `torn_tail_repair` (SQLite's WAL
/// discards a partly written frame itself; the store never sees a torn
/// record) and `damage_refusal` (without page checksums a flipped byte
/// inside a row goes unnoticed).
pub const CAPABILITIES: &[Capability] = &[
    Capability::DurableAppend,
    Capability::OrphanMarking,
    Capability::EffectLedger,
    Capability::CheckpointProjection,
    Capability::Branches,
    Capability::Compaction,
    Capability::WriterLock,
    Capability::Blobs,
];

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Self {
        Refusal::new(e.kind(), e.to_string())
    }
}

fn bad(message: &str) -> Refusal {
    Refusal::bad_request(message)
}

/// An `ok` body as JSON.
fn body(reply: &impl Serialize) -> Result<Value, Refusal> {
    Ok(serde_json::to_value(reply).expect("a reply body serializes"))
}

/// Serves the protocol until `input` ends. Fails only when a stream does.
pub fn serve(input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    let mut store: Option<SqliteStore> = None;
    for line in input.lines() {
        let line = line?;
        // Set when a reply already went out (only the ack-before-write mutant).
        let mut replied = false;
        let (id, result) = match serde_json::from_str::<Value>(&line) {
            Err(e) => (None, Err(bad(&format!("request is not JSON: {e}")))),
            Ok(request) => {
                let id = request.get("id").and_then(Value::as_u64);
                let result = match serde_json::from_value::<Request>(request) {
                    Ok(op) => {
                        let mut early = |ok: &Value| {
                            replied = true;
                            output.write_all(ReplyLine::ok(id, ok).to_line().as_bytes())?;
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
        let reply = match result {
            Ok(ok) => ReplyLine::ok(id, &ok),
            Err(refusal) => ReplyLine::refused(id, refusal),
        };
        output.write_all(reply.to_line().as_bytes())?;
        output.flush()?;
    }
    Ok(())
}

fn open_store(store: &mut Option<SqliteStore>) -> Result<&mut SqliteStore, Refusal> {
    store
        .as_mut()
        .ok_or_else(|| bad("no session is open (send open first)"))
}

/// The reply to `hello` at `protocol` (1, or 2 in a forked child); the
/// fork server sets `fork` on its own.
pub fn hello(protocol: u64) -> Hello {
    Hello {
        name: "agentchaos-sqlite-store".to_string(),
        version: Some(env!("CARGO_PKG_VERSION").to_string()),
        protocol,
        capabilities: CAPABILITIES.to_vec(),
        fork: false,
        pipeline: false,
    }
}

/// `early` sends a reply before the request is done (only the
/// ack-before-write mutant uses it).
fn handle(
    store: &mut Option<SqliteStore>,
    request: Request,
    early: &mut dyn FnMut(&Value) -> std::io::Result<()>,
) -> Result<Value, Refusal> {
    let req_op = request.op();
    match request {
        Request::Hello { protocol } => {
            if protocol != PROTOCOL_VERSION && protocol != FORK_PROTOCOL_VERSION {
                return Err(Refusal::new(
                    ErrorKind::Unsupported,
                    format!(
                        "protocol {protocol} is not spoken here (only {PROTOCOL_VERSION} and {FORK_PROTOCOL_VERSION})"
                    ),
                ));
            }
            body(&hello(protocol))
        }
        Request::Open(OpenArgs {
            root,
            session,
            workspace,
            create,
            lease,
        }) => {
            if store.is_some() {
                return Err(bad("a session is already open; close it first"));
            }
            if lease.is_some() {
                return Err(Refusal::new(
                    ErrorKind::Unsupported,
                    "this store has no leases (it does not claim `lease`)",
                ));
            }
            let opened = if create {
                let ws = workspace.ok_or_else(|| bad("open with create needs a workspace"))?;
                SqliteStore::create(&root, &session, &ws)?
            } else {
                SqliteStore::open(&root, &session, workspace.as_deref())?
            };
            let next_seq = view::next_seq(opened.conn())?;
            *store = Some(opened);
            body(&Opened {
                next_seq,
                repaired: None,
                lease: None,
                recovery: None,
            })
        }
        Request::Append { event } => {
            if matches!(event, Event::ToolStarted { .. }) {
                return Err(bad("the intent (tool_started) is written by start_tool"));
            }
            let ack = |seq: u64| Ack {
                seq,
                id: event_id(seq),
            };
            let store = open_store(store)?;
            let seq = if mutant::active(Mutant::AckBeforeWrite) {
                store.append_acking_first(&event, |seq| {
                    early(&serde_json::to_value(ack(seq)).expect("an ack serializes"))
                })?
            } else {
                store.append(&event)?
            };
            body(&ack(seq))
        }
        Request::StartTool { call_id } => {
            let (seq, operation_id) = open_store(store)?.start_tool(&call_id)?;
            body(&IntentAck {
                seq,
                id: event_id(seq),
                operation_id,
            })
        }
        Request::Recover => {
            let r = open_store(store)?.recover()?;
            let uncertain = r
                .uncertain
                .into_iter()
                .map(|c| UncertainCall {
                    phase: c.recovery.unwrap_or(c.phase()),
                    call_id: c.call_id,
                    tool: c.tool,
                    target: c.target,
                    effect: c.effect,
                    operation_id: c.operation_id,
                    args: c.args,
                    external_ref: c.external_ref,
                })
                .collect();
            body(&RecoveryState {
                repaired: None,
                interrupted_runs: r.interrupted_runs,
                uncertain,
                appended: r.appended,
            })
        }
        Request::Events { after, limit } => {
            let records = open_store(store)?
                .events(after, limit)?
                .into_iter()
                .map(|e| WireRecord {
                    seq: e.seq,
                    id: event_id(e.seq),
                    ts: Some(e.ts),
                    event: e.event,
                })
                .collect();
            body(&EventsReply { records })
        }
        Request::Context { budget } => {
            let text = view::context(open_store(store)?.conn(), budget)?;
            body(&ContextReply { text })
        }
        Request::Checkpoint => {
            let next_seq = open_store(store)?.checkpoint()?;
            body(&CheckpointReply { next_seq })
        }
        Request::Projection => body(&view::projection(open_store(store)?.conn())?),
        Request::PutBlob { hex } => {
            let bytes =
                from_hex(&hex).ok_or_else(|| bad("put_blob: hex must be pairs of hex digits"))?;
            body(&open_store(store)?.put_blob(&bytes)?)
        }
        Request::GetBlob(reference) => {
            let bytes = open_store(store)?.get_blob(&reference)?;
            body(&BlobBytes {
                hex: to_hex(&bytes),
            })
        }
        Request::Close => {
            open_store(store)?;
            *store = None;
            body(&Closed {})
        }
        Request::RenewLease => Err(Refusal::new(
            ErrorKind::Unsupported,
            "this store has no leases (it does not claim `lease`)",
        )),
        Request::Fork | Request::Reap { .. } => Err(Refusal::new(
            ErrorKind::Unsupported,
            format!("{req_op}: this process is not a fork server (its stdin is not a Unix socket)"),
        )),
    }
}
