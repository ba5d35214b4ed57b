//! The agentchaos adapter protocol, version 1 (`chaos/PROTOCOL.md`), over a
//! [`PgStore`]: one request line in, one reply line out, flushed.
//!
//! It must never reply to `append` or `start_tool` before the transaction
//! committed, and never write anything but replies to its output.

use std::io::{BufRead, Write};

use agentchaos_protocol::event::{event_id, Event};
use agentchaos_protocol::message::{
    from_hex, to_hex, Ack, BlobBytes, CheckpointReply, Closed, ContextReply, EventsReply, Hello,
    IntentAck, OpenArgs, Opened, ReplyLine, WireRecord,
};
use agentchaos_protocol::{Capability, ErrorKind, Refusal, Request, PROTOCOL_VERSION};
use agentstore::adapter::projection_view;
use serde::Serialize;
use serde_json::Value;

use crate::error::StoreError;
use crate::store::PgStore;

/// What this store claims. Not claimed: `torn_tail_repair` and
/// `damage_refusal` (the store has no files of its own; PostgreSQL's WAL
/// and page checksums are the server's, not tested here), `writer_lock`
/// (two processes may write one session: the session row serializes
/// their appends, each checked against the other's; ownership is the
/// lease's, `lease`).
pub const CAPABILITIES: &[Capability] = &[
    Capability::DurableAppend,
    Capability::OrphanMarking,
    Capability::EffectLedger,
    Capability::CheckpointProjection,
    Capability::Branches,
    Capability::Compaction,
    Capability::Blobs,
    Capability::Lease,
];

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Self {
        Refusal::new(e.kind(), e.to_string())
    }
}

fn bad(message: &str) -> Refusal {
    Refusal::bad_request(message)
}

fn body(reply: &impl Serialize) -> Result<Value, Refusal> {
    Ok(serde_json::to_value(reply).expect("a reply body serializes"))
}

/// Serves the protocol on `dsn` until `input` ends. Fails only when a
/// stream does.
pub fn serve(dsn: &str, input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    let mut store: Option<PgStore> = None;
    for line in input.lines() {
        let line = line?;
        let (id, result) = match serde_json::from_str::<Value>(&line) {
            Err(e) => (None, Err(bad(&format!("request is not JSON: {e}")))),
            Ok(request) => {
                let id = request.get("id").and_then(Value::as_u64);
                let result = match serde_json::from_value::<Request>(request) {
                    Ok(op) => handle(dsn, &mut store, op),
                    Err(e) => Err(bad(&format!("request does not fit: {e}"))),
                };
                (id, result)
            }
        };
        let reply = match result {
            Ok(ok) => ReplyLine::ok(id, &ok),
            Err(refusal) => ReplyLine::refused(id, refusal),
        };
        output.write_all(reply.to_line().as_bytes())?;
        output.flush()?;
    }
    Ok(())
}

fn open_store(store: &mut Option<PgStore>) -> Result<&mut PgStore, Refusal> {
    store
        .as_mut()
        .ok_or_else(|| bad("no session is open (send open first)"))
}

fn handle(dsn: &str, store: &mut Option<PgStore>, request: Request) -> Result<Value, Refusal> {
    let req_op = request.op();
    match request {
        Request::Hello { protocol } => {
            if protocol != PROTOCOL_VERSION {
                return Err(Refusal::new(
                    ErrorKind::Unsupported,
                    format!("protocol {protocol} is not spoken here (only {PROTOCOL_VERSION})"),
                ));
            }
            body(&Hello {
                name: "agentstore-pg".to_string(),
                version: Some(env!("CARGO_PKG_VERSION").to_string()),
                protocol: PROTOCOL_VERSION,
                capabilities: CAPABILITIES.to_vec(),
                fork: false,
                pipeline: false,
            })
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
            let (opened, takeover) = if create {
                let ws = workspace.ok_or_else(|| bad("open with create needs a workspace"))?;
                PgStore::create(dsn, &root, &session, &ws, lease.as_ref())?
            } else {
                PgStore::open(dsn, &root, &session, workspace.as_deref(), lease.as_ref())?
            };
            let next_seq = opened.projection().next_seq();
            *store = Some(opened);
            let (lease, recovery) = match takeover {
                Some(t) => (Some(t.grant), Some(t.recovery)),
                None => (None, None),
            };
            body(&Opened {
                next_seq,
                repaired: None,
                lease,
                recovery,
            })
        }
        Request::Append { event } => {
            if matches!(event, Event::ToolStarted { .. }) {
                return Err(bad("the intent (tool_started) is written by start_tool"));
            }
            if matches!(event, Event::SessionCreated { .. }) {
                return Err(bad("session_created is written by open with create"));
            }
            let seq = open_store(store)?.append(&event)?;
            body(&Ack {
                seq,
                id: event_id(seq),
            })
        }
        Request::StartTool { call_id } => {
            let (seq, operation_id) = open_store(store)?.start_tool(&call_id)?;
            body(&IntentAck {
                seq,
                id: event_id(seq),
                operation_id,
            })
        }
        Request::Recover => body(&open_store(store)?.recover()?),
        Request::Events { after, limit } => {
            let records = open_store(store)?
                .events(after, limit)?
                .into_iter()
                .map(|e| {
                    let event = serde_json::from_str(&e.json).map_err(|err| {
                        StoreError::Damage(format!("event {} is not JSON: {err}", e.seq))
                    })?;
                    Ok(WireRecord {
                        seq: e.seq,
                        id: event_id(e.seq),
                        ts: Some(e.ts),
                        event,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            body(&EventsReply { records })
        }
        Request::Context { budget } => {
            let s = open_store(store)?;
            s.refresh()?;
            let text = crate::context::render(s.projection(), s.held_events(), budget);
            body(&ContextReply { text })
        }
        Request::Checkpoint => {
            let next_seq = open_store(store)?.checkpoint()?;
            body(&CheckpointReply { next_seq })
        }
        Request::Projection => {
            let s = open_store(store)?;
            s.refresh()?;
            body(&projection_view(s.projection()))
        }
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
            open_store(store)?.release_lease()?;
            *store = None;
            body(&Closed {})
        }
        Request::RenewLease => {
            let s = open_store(store)?;
            if s.lease_grant().is_none() {
                return Err(bad("renew_lease on a session opened without a lease"));
            }
            body(&s.renew_lease()?)
        }
        Request::Fork | Request::Reap { .. } => Err(Refusal::new(
            ErrorKind::Unsupported,
            format!("{req_op} is protocol 2; this adapter speaks protocol {PROTOCOL_VERSION}"),
        )),
    }
}
