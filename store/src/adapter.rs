//! The agentchaos adapter protocol (version 1, `chaos/PROTOCOL.md`) served
//! on top of [`Session`]: what `agentstore adapter` runs.
//!
//! One JSON request per input line, one JSON reply per output line, flushed
//! before the next request is read, except inside a pipelined batch
//! (`chaos/PROTOCOL.md`, section 10): its `append` and `start_tool`
//! requests are written as they are read and answered together once the
//! batch's last one is, so that one sync of a `Batch` session covers them
//! all. The shapes are the protocol crate's
//! (`agentchaos_protocol`); this module owns the mapping from protocol
//! operations to the session API, from [`Error`] to protocol error kinds,
//! and from agentstore's [`Projection`] to the protocol's view
//! ([`projection_view`]). It must never reply to `append` or `start_tool` before the
//! session acknowledged the event (the reply *is* the durable ack), and
//! never write anything but replies to the output.

use std::io::{self, BufRead, Write};
use std::path::Path;

use agentchaos_protocol::message::{
    from_hex, to_hex, Ack, BlobBytes, CheckpointReply, Closed, ContextReply, EventsReply, Hello,
    IntentAck, Opened, ReplyLine, TornTailReport, WireRecord,
};
use agentchaos_protocol::view::{CallView, ProjectionView};
use agentchaos_protocol::{
    Capability, ErrorKind, Refusal, Request, FORK_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use serde::Serialize;
use serde_json::Value;

use crate::durability::Durability;
use crate::error::{one_line, quote, Error, Result};
use crate::event::{event_id, Event, Seq};
use crate::fault::{self, Fault};
use crate::layout::SessionId;
use crate::projection::{OpenCall, Projection};
use crate::scan::{Scanner, TornTail};
use crate::session::{Session, SessionOptions};

impl From<Error> for Refusal {
    fn from(e: Error) -> Refusal {
        let kind = match &e {
            Error::Io { .. } | Error::Read { .. } | Error::Poisoned { .. } => ErrorKind::Io,
            Error::Damage { .. } | Error::UnknownEventType { .. } | Error::Foreign { .. } => {
                ErrorKind::Damage
            }
            Error::SessionLocked { .. } => ErrorKind::Locked,
            Error::IncompleteSession { .. } if fault::active(Fault::RefuseIncompleteSession) => {
                ErrorKind::Invalid
            }
            // Nothing of it is durable: to the harness it does not exist
            // yet, and `open` with `create` finishes it.
            Error::NoSuchSession { .. } | Error::IncompleteSession { .. } => ErrorKind::NotFound,
            Error::SessionExists { .. } => ErrorKind::Exists,
            Error::Rule(_) => ErrorKind::Rule,
            Error::InvalidSessionId { .. } | Error::EventTooLarge { .. } | Error::Invalid(_) => {
                ErrorKind::Invalid
            }
            Error::LeaseHeld { .. } => ErrorKind::LeaseHeld,
            Error::Fenced { .. } => ErrorKind::Fenced,
        };
        Refusal::new(kind, e.to_string())
    }
}

/// The adapter's state: at most one open session, and how it serves.
#[derive(Debug)]
struct Server {
    session: Option<Session>,
    claims: Vec<Capability>,
    durability: Durability,
    pipeline: bool,
    /// The pipelined batch read so far: each request's id and its write
    /// (not waited for yet) or refusal, in request order.
    batch: Vec<(Option<u64>, std::result::Result<BatchWrite, Refusal>)>,
}

/// One write of a pipelined batch, waiting for the sync that covers it.
#[derive(Debug)]
struct BatchWrite {
    written: crate::durability::Written,
    /// `start_tool`'s: the call's operation id, for its reply.
    intent: Option<Option<String>>,
}

/// The longest request line the adapter reads, newline included: the same
/// as the longest reply line `chaos/PROTOCOL.md` allows.
pub const MAX_REQUEST_LINE: usize = 64 << 20;

/// How the adapter serves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// What `hello` claims: a subset of [`Capability::ALL`]; the store behaves
    /// the same. For seeing how the harness scores a store that claims
    /// less: claims decide how a capability is scored, never which faults
    /// the store gets.
    pub claims: Vec<Capability>,
    /// Request lines are capped at this many bytes, newline included. A
    /// longer line is read to its newline without being kept, and answered
    /// with one `bad_request` reply (its id is unknown: null).
    pub request_cap: usize,
    /// The durability every session is opened with (`Batch`: group commit).
    pub durability: Durability,
    /// Take pipelined batches (`hello` says `pipeline`): the only way a
    /// harness's parallel appends reach a `Batch` session's group commit
    /// together. Off: one request at a time, `more` ignored.
    pub pipeline: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            claims: Capability::ALL.to_vec(),
            request_cap: MAX_REQUEST_LINE,
            durability: Durability::Sync,
            pipeline: true,
        }
    }
}

/// The reply to `hello` at `protocol` (1; or 2, in a child of the fork
/// server, which sets `fork` on its own reply).
pub fn hello(claims: &[Capability], protocol: u64, pipeline: bool) -> Hello {
    Hello {
        name: "agentstore".to_string(),
        version: Some(env!("CARGO_PKG_VERSION").to_string()),
        protocol,
        capabilities: claims.to_vec(),
        fork: false,
        pipeline,
    }
}

/// Serves requests from `input` until it ends, writing one flushed reply
/// line per request to `output`. Only I/O on the two streams fails it.
pub fn serve(input: impl BufRead, output: impl Write) -> Result<()> {
    serve_with(input, output, &ServeOptions::default())
}

/// [`serve`], as `options` say.
pub fn serve_with(
    mut input: impl BufRead,
    mut output: impl Write,
    options: &ServeOptions,
) -> Result<()> {
    let cap = options.request_cap;
    let mut server = Server {
        session: None,
        claims: options.claims.clone(),
        durability: options.durability,
        pipeline: options.pipeline,
        batch: Vec::new(),
    };
    let mut line = Vec::new();
    loop {
        let read = read_line_capped(&mut input, &mut line, cap)
            .map_err(Error::io("read request from", "stdin"))?;
        let replies = match read {
            Line::End => return Ok(()),
            Line::TooLong { len } => server.answer_alone(refused(
                None,
                Refusal::bad_request(format!(
                    "request line of {len} bytes exceeds the limit of {cap} bytes (newline included); discarded"
                )),
            )),
            Line::Complete => match std::str::from_utf8(&line) {
                Ok(text) => server.handle(text),
                Err(e) => server.answer_alone(refused(
                    None,
                    Refusal::bad_request(format!("request is not UTF-8: {e}")),
                )),
            },
        };
        let text: String = replies.iter().map(ReplyLine::to_line).collect();
        output
            .write_all(text.as_bytes())
            .and_then(|()| output.flush())
            .map_err(Error::io("write reply to", "stdout"))?;
    }
}

/// What [`read_line_capped`] found.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// The input ended before another line.
    End,
    /// A line is in the buffer, without its line ending.
    Complete,
    /// A line of `len` bytes (newline included) was longer than the cap;
    /// it was consumed but not kept.
    TooLong { len: u64 },
}

/// Reads one line into `buf`, never holding more than `cap` bytes of it: a
/// longer line is consumed to its newline (or the end of the input) chunk
/// by chunk, as the reader buffers it, and only its length is kept.
fn read_line_capped(input: &mut impl BufRead, buf: &mut Vec<u8>, cap: usize) -> io::Result<Line> {
    buf.clear();
    let mut len = 0u64;
    let mut too_long = false;
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let (take, ends) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None if chunk.is_empty() && len == 0 => return Ok(Line::End),
            None => (chunk.len(), chunk.is_empty()),
        };
        len += take as u64;
        if !too_long && len > cap as u64 {
            too_long = true;
            *buf = Vec::new();
        }
        if !too_long {
            buf.extend_from_slice(&chunk[..take]);
        }
        input.consume(take);
        if ends {
            if too_long {
                return Ok(Line::TooLong { len });
            }
            if buf.last() == Some(&b'\n') {
                buf.pop();
                if buf.last() == Some(&b'\r') {
                    buf.pop();
                }
            }
            return Ok(Line::Complete);
        }
    }
}

impl Server {
    /// The replies owed once `line` is read: none while a pipelined batch
    /// goes on, every answer of the batch once its last request is read.
    fn handle(&mut self, line: &str) -> Vec<ReplyLine> {
        let parsed: std::result::Result<Value, _> = serde_json::from_str(line);
        let v = match parsed {
            Ok(v) => v,
            Err(e) => {
                let r = Refusal::bad_request(format!("request is not JSON: {e}"));
                return self.answer_alone(refused(None, r));
            }
        };
        let id = v.get("id").and_then(Value::as_u64);
        let more = self.pipeline && v.get("more").and_then(Value::as_bool).unwrap_or(false);
        let request = match serde_json::from_value::<Request>(v) {
            Ok(request) => request,
            Err(e) => {
                let r = Refusal::bad_request(format!("request does not fit: {e}"));
                return self.answer_alone(refused(id, r));
            }
        };
        let batched = matches!(request, Request::Append { .. } | Request::StartTool { .. });
        if batched && (more || !self.batch.is_empty()) {
            let write = self.write(request);
            self.batch.push((id, write));
            return if more { Vec::new() } else { self.end_batch() };
        }
        let outcome = if more {
            Err(Refusal::bad_request(format!(
                "{}: only append and start_tool are pipelined (\"more\"); not served",
                request.op()
            )))
        } else {
            self.dispatch(request)
        };
        let reply = match outcome {
            Ok(ok) => ReplyLine::ok(id, &ok),
            Err(r) => refused(id, r),
        };
        self.answer_alone(reply)
    }

    /// `reply`, after the answers of a batch the client left open (its
    /// last request said `more`, and something else came).
    fn answer_alone(&mut self, reply: ReplyLine) -> Vec<ReplyLine> {
        let mut replies = self.end_batch();
        replies.push(reply);
        replies
    }

    /// Writes a batched `append` or `start_tool` without waiting for its sync.
    fn write(&mut self, request: Request) -> std::result::Result<BatchWrite, Refusal> {
        let session = self.session()?;
        let (event, intent) = match request {
            Request::Append {
                event: Event::ToolStarted { .. },
            } => {
                return Err(Refusal::bad_request(
                    "tool_started is the intent: send start_tool, not append",
                ))
            }
            Request::Append { event } => (event, None),
            Request::StartTool { call_id } => {
                let operation_id = session
                    .projection()
                    .open_calls()
                    .get(&call_id)
                    .and_then(|c| c.operation_id.clone());
                (Event::ToolStarted { call_id }, Some(operation_id))
            }
            other => unreachable!("{} is never batched", other.op()),
        };
        let written = session.write(event)?;
        Ok(BatchWrite { written, intent })
    }

    /// Waits for every write of the batch, in request order (the first
    /// wait syncs what the batch wrote), and answers each.
    fn end_batch(&mut self) -> Vec<ReplyLine> {
        let batch = std::mem::take(&mut self.batch);
        batch
            .into_iter()
            .map(|(id, write)| {
                let answer = write.and_then(|w| {
                    let session = self.session()?;
                    let acked = session.wait(w.written)?;
                    let seq = acked.seq();
                    Ok(match w.intent {
                        Some(operation_id) => body(&IntentAck {
                            seq,
                            id: event_id(seq),
                            operation_id,
                        })?,
                        None => body(&Ack {
                            seq,
                            id: acked.id().to_string(),
                        })?,
                    })
                });
                match answer {
                    Ok(ok) => ReplyLine::ok(id, &ok),
                    Err(r) => refused(id, r),
                }
            })
            .collect()
    }

    fn session(&mut self) -> std::result::Result<&mut Session, Refusal> {
        self.session
            .as_mut()
            .ok_or_else(|| Refusal::bad_request("no session is open (send open first)"))
    }

    fn dispatch(&mut self, req: Request) -> std::result::Result<Value, Refusal> {
        let req_op = req.op();
        match req {
            Request::Hello { protocol } => {
                if protocol != PROTOCOL_VERSION && protocol != FORK_PROTOCOL_VERSION {
                    return Err(Refusal::new(
                        ErrorKind::Unsupported,
                        format!(
                            "this adapter speaks protocols {PROTOCOL_VERSION} and {FORK_PROTOCOL_VERSION}, not {protocol}"
                        ),
                    ));
                }
                body(&hello(&self.claims, protocol, self.pipeline))
            }
            Request::Open(agentchaos_protocol::message::OpenArgs {
                root,
                session,
                workspace,
                create,
                lease,
            }) => {
                if self.session.is_some() {
                    return Err(Refusal::bad_request(
                        "a session is already open; close it first",
                    ));
                }
                let id = SessionId::new(&session)?;
                let options = SessionOptions {
                    workspace: workspace.clone(),
                    durability: self.durability,
                };
                let (s, repaired, takeover) = match (create, &lease) {
                    (true, _) => {
                        let workspace = workspace.ok_or_else(|| {
                            Refusal::bad_request("open with create needs a workspace")
                        })?;
                        let (mut s, repaired) =
                            create_or_finish(&root, &id, &workspace, self.durability)?;
                        let takeover = match &lease {
                            Some(request) => Some(s.acquire_lease(request)?),
                            None => None,
                        };
                        (s, repaired, takeover)
                    }
                    (false, Some(request)) => {
                        let (s, report, takeover) =
                            Session::open_leased(&root, &id, options, request)?;
                        (s, report.repaired, Some(takeover))
                    }
                    (false, None) => {
                        let (s, report) = Session::open(&root, &id, options)?;
                        (s, report.repaired, None)
                    }
                };
                let (lease, recovery) = match takeover {
                    Some(t) => (Some(t.grant), Some(t.recovery)),
                    None => (None, None),
                };
                let reply = Opened {
                    next_seq: s.projection().next_seq(),
                    repaired: repaired.as_ref().map(TornTailReport::from),
                    lease,
                    recovery,
                };
                self.session = Some(s);
                body(&reply)
            }
            Request::Append { event } => {
                if let Event::ToolStarted { .. } = event {
                    return Err(Refusal::bad_request(
                        "tool_started is the intent: send start_tool, not append",
                    ));
                }
                let ack = self.session()?.append(event)?;
                body(&Ack {
                    seq: ack.seq(),
                    id: ack.id().to_string(),
                })
            }
            Request::StartTool { call_id } => {
                let session = self.session()?;
                let intent = session.start_tool(&call_id)?;
                // Without an ack (only under the skip-intent fault) the store
                // claims the seq the intent would have had: a lie the harness catches.
                let seq = intent
                    .ack()
                    .map_or(session.projection().next_seq(), |a| a.seq());
                body(&IntentAck {
                    seq,
                    id: event_id(seq),
                    operation_id: intent.operation_id().map(str::to_string),
                })
            }
            Request::Recover => {
                let state = self.session()?.recover()?;
                body(&state)
            }
            Request::Events { after, limit } => {
                let records = read_records(self.session()?, after, limit)?;
                body(&EventsReply { records })
            }
            Request::Context { budget } => {
                let text = self.session()?.context(budget)?;
                body(&ContextReply { text })
            }
            Request::Checkpoint => {
                let c = self.session()?.checkpoint()?;
                body(&CheckpointReply {
                    next_seq: c.next_seq,
                })
            }
            Request::Projection => body(&projection_view(self.session()?.projection())),
            Request::PutBlob { hex } => {
                let bytes = from_hex(&hex).ok_or_else(|| {
                    Refusal::bad_request("put_blob: hex is not an even number of hex digits")
                })?;
                let blob = self.session()?.put_blob(&bytes)?;
                body(&blob)
            }
            Request::GetBlob(reference) => {
                let session = self.session()?;
                if !crate::blob::is_digest(&reference.digest)
                    || !session.paths().blobs().join(&reference.digest).is_file()
                {
                    return Err(Refusal::new(
                        ErrorKind::NotFound,
                        format!("no blob {}", quote(&reference.digest)),
                    ));
                }
                let bytes = session.get_blob(&reference)?;
                body(&BlobBytes {
                    hex: to_hex(&bytes),
                })
            }
            Request::Close => {
                self.session()?.release_lease()?;
                self.session = None;
                body(&Closed {})
            }
            Request::RenewLease => {
                let session = self.session()?;
                if session.lease_grant().is_none() {
                    return Err(Refusal::bad_request(
                        "renew_lease on a session opened without a lease",
                    ));
                }
                let grant = session.renew_lease()?;
                body(&grant)
            }
            Request::Fork | Request::Reap { .. } => Err(Refusal::new(
                ErrorKind::Unsupported,
                format!(
                    "{req_op}: this process is not a fork server (its stdin is not a Unix socket)"
                ),
            )),
        }
    }
}

/// `open` with `create`: a new session, or one whose creation a crash
/// interrupted before `session_created` was durable (finished now, its torn
/// tail cut); a complete session is refused with `exists`.
fn create_or_finish(
    root: &Path,
    id: &SessionId,
    workspace: &Path,
    durability: Durability,
) -> Result<(Session, Option<TornTail>)> {
    let options = || SessionOptions {
        durability,
        ..SessionOptions::default()
    };
    match Session::create(root, id, workspace, options()) {
        Ok(s) => Ok((s, None)),
        Err(exists @ Error::SessionExists { .. })
            if !fault::active(Fault::RefuseIncompleteSession) =>
        {
            match Session::open(root, id, options()) {
                Err(Error::IncompleteSession { .. }) => {
                    let (s, report) = Session::open_or_create(root, id, workspace, options())?;
                    Ok((s, report.and_then(|r| r.repaired)))
                }
                Ok(_) => Err(exists),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// A refusal's reply line, its message on one line.
fn refused(id: Option<u64>, r: Refusal) -> ReplyLine {
    let message = one_line(&r.message);
    ReplyLine::refused(id, Refusal { message, ..r })
}

/// An `ok` body as JSON.
fn body(reply: &impl Serialize) -> std::result::Result<Value, Refusal> {
    Ok(serde_json::to_value(reply).expect("a reply body serializes"))
}

/// Records with seq greater than `after` (all when `None`), at most `limit`.
fn read_records(
    session: &Session,
    after: Option<Seq>,
    limit: Option<u64>,
) -> Result<Vec<WireRecord>> {
    let from = after.map_or(0, |a| a + 1);
    let limit = limit.unwrap_or(u64::MAX);
    let mut out = Vec::new();
    let mut scanner = Scanner::open(&session.paths().events(), session.index().seek(from))?;
    while (out.len() as u64) < limit {
        let Some((_, rec)) = scanner.next_record()? else {
            break;
        };
        if rec.seq >= from {
            out.push(WireRecord::of(&rec));
        }
    }
    Ok(out)
}

fn call_view(c: &OpenCall) -> CallView {
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

/// The projection as protocol version 1 defines it: what `projection`
/// serves, and how the harness reads the reference store's own fold.
pub fn projection_view(p: &Projection) -> ProjectionView {
    let mut calls: Vec<&OpenCall> = p.open_calls().values().collect();
    calls.sort_by_key(|c| c.seq);
    ProjectionView {
        next_seq: p.next_seq(),
        open_run: p.open_run().map(str::to_string),
        interrupted_runs: p.interrupted_runs().to_vec(),
        leaf: p.leaf(),
        branch: p.branch().iter().map(|&s| event_id(s)).collect(),
        open_calls: calls.into_iter().map(call_view).collect(),
        committed_operations: p.committed_operations().iter().cloned().collect(),
        plan: p.plan().cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(requests: &[Value]) -> Vec<Value> {
        let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
        serve_lines(input.as_bytes(), MAX_REQUEST_LINE)
    }

    /// Found by the power-loss campaign: a power loss right after
    /// events.jsonl was created leaves an empty log. `open` used to refuse
    /// it as `invalid` without `create` and as `exists` with it, so no
    /// restart through the protocol could ever finish the session.
    #[test]
    fn open_finishes_a_creation_a_crash_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let id = SessionId::new("s").unwrap();
        let paths = crate::layout::SessionPaths::new(&root, &id);
        drop(crate::log::EventLog::create(&paths, crate::durability::Durability::Sync).unwrap());
        let ws = dir.path();
        let open = |id: u64, create: bool| json!({"id": id, "op": "open", "root": root, "session": "s", "workspace": ws, "create": create});
        let replies = run(&[
            json!({"id": 1, "op": "hello", "protocol": 1}),
            open(2, false),
            open(3, true),
            json!({"id": 4, "op": "events"}),
            json!({"id": 5, "op": "close"}),
            open(6, true),
        ]);
        assert_eq!(replies[1]["error"]["kind"], "not_found", "{}", replies[1]);
        assert_eq!(replies[2]["ok"], json!({"next_seq": 1}), "{}", replies[2]);
        assert_eq!(
            replies[3]["ok"]["records"][0]["event"]["type"],
            "session_created"
        );
        assert_eq!(replies[5]["error"]["kind"], "exists", "{}", replies[5]);
    }

    #[test]
    fn a_session_through_the_protocol() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let ws = dir.path();
        let digest = crate::blob::digest(b"hi\n");
        let replies = run(&[
            json!({"id": 1, "op": "hello", "protocol": 1}),
            json!({"id": 2, "op": "open", "root": root, "session": "s", "workspace": ws, "create": true}),
            json!({"id": 3, "op": "append", "event": {"type": "run_started", "run_id": "r1"}}),
            json!({"id": 4, "op": "append", "event": {"type": "tool_call", "parent": null, "call_id": "c1",
                   "tool": "deploy", "args": {}, "effect": "side_effect", "operation_id": "op1"}}),
            json!({"id": 5, "op": "start_tool", "call_id": "c1"}),
            json!({"id": 6, "op": "append", "event": {"type": "tool_started", "call_id": "c1"}}),
            json!({"id": 7, "op": "recover"}),
            json!({"id": 8, "op": "events", "after": 2}),
            json!({"id": 9, "op": "projection"}),
            json!({"id": 10, "op": "put_blob", "hex": "68690a"}),
            json!({"id": 11, "op": "get_blob", "size": 3, "digest": digest}),
            json!({"id": 12, "op": "get_blob", "size": 3, "digest": "00".repeat(32)}),
            json!({"id": 13, "op": "close"}),
            json!({"id": 14, "op": "context"}),
        ]);
        assert_eq!(replies[0]["ok"]["protocol"], 1);
        assert_eq!(replies[1]["ok"], json!({"next_seq": 1}));
        assert_eq!(replies[2]["ok"], json!({"seq": 1, "id": "e1"}));
        assert_eq!(
            replies[4]["ok"],
            json!({"seq": 3, "id": "e3", "operation_id": "op1"})
        );
        assert_eq!(replies[5]["error"]["kind"], "bad_request");
        assert_eq!(replies[6]["ok"]["interrupted_runs"], json!(["r1"]));
        assert_eq!(replies[6]["ok"]["uncertain"][0]["phase"], "started");
        assert_eq!(replies[6]["ok"]["appended"], 2);
        let types: Vec<&str> = replies[7]["ok"]["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["event"]["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["tool_started", "run_interrupted", "tool_recovery"]);
        assert_eq!(replies[8]["ok"]["open_calls"][0]["recovery"], "started");
        assert_eq!(replies[9]["ok"], json!({"digest": digest, "size": 3}));
        assert_eq!(replies[10]["ok"], json!({"hex": "68690a"}));
        assert_eq!(replies[11]["error"]["kind"], "not_found");
        assert_eq!(replies[12]["ok"], json!({}));
        assert_eq!(replies[13]["error"]["kind"], "bad_request");
        for (i, r) in replies.iter().enumerate() {
            assert_eq!(r["id"], i as u64 + 1);
        }
    }

    /// A pipelined batch (section 10) in Batch mode: nothing is answered
    /// until its last request is read, then every request is, in request
    /// order, with seqs in request order; a request that is not `append` or
    /// `start_tool` is refused unserved when it says `more`, and it ends
    /// the batch before it.
    #[test]
    fn a_pipelined_batch_is_answered_once_its_last_request_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let ws = dir.path();
        let mut server = Server {
            session: None,
            claims: Capability::ALL.to_vec(),
            durability: Durability::batch(),
            pipeline: true,
            batch: Vec::new(),
        };
        let mut send = |v: Value| server.handle(&v.to_string());
        let hello = send(json!({"id": 1, "op": "hello", "protocol": 1}));
        assert!(hello[0].to_line().contains("\"pipeline\":true"));
        send(
            json!({"id": 2, "op": "open", "root": root, "session": "s", "workspace": ws, "create": true}),
        );
        let call = |id: &str| {
            json!({"type": "tool_call", "parent": null, "call_id": id,
                   "tool": "deploy", "args": {}, "effect": "side_effect", "operation_id": format!("op-{id}")})
        };
        assert!(
            send(json!({"id": 3, "op": "append", "more": true, "event": call("c1")})).is_empty()
        );
        assert!(
            send(json!({"id": 4, "op": "append", "more": true, "event": call("c2")})).is_empty()
        );
        assert!(
            send(json!({"id": 5, "op": "start_tool", "more": true, "call_id": "c1"})).is_empty()
        );
        let replies: Vec<Value> = send(json!({"id": 6, "op": "start_tool", "call_id": "c9"}))
            .iter()
            .map(|r| serde_json::from_str(&r.to_line()).unwrap())
            .collect();
        assert_eq!(replies.len(), 4, "{replies:?}");
        assert_eq!(replies[0]["ok"], json!({"seq": 1, "id": "e1"}));
        assert_eq!(replies[1]["ok"], json!({"seq": 2, "id": "e2"}));
        assert_eq!(
            replies[2]["ok"],
            json!({"seq": 3, "id": "e3", "operation_id": "op-c1"})
        );
        assert_eq!(replies[3]["id"], 6);
        assert_eq!(replies[3]["error"]["kind"], "rule", "{replies:?}");

        assert!(
            send(json!({"id": 7, "op": "append", "more": true, "event": call("c3")})).is_empty()
        );
        let replies = send(json!({"id": 8, "op": "close", "more": true}));
        assert_eq!(replies.len(), 2);
        assert!(
            replies[0].to_line().contains("\"seq\":4"),
            "{}",
            replies[0].to_line()
        );
        assert!(replies[1].to_line().contains("bad_request"));
        let still_open = send(json!({"id": 9, "op": "start_tool", "call_id": "c2"}));
        assert!(
            still_open[0].to_line().contains("\"seq\":5"),
            "{}",
            still_open[0].to_line()
        );
    }

    fn serve_lines(input: &[u8], cap: usize) -> Vec<Value> {
        let mut out = Vec::new();
        // A small reader buffer, so that a long line arrives in many chunks.
        let options = ServeOptions {
            request_cap: cap,
            ..ServeOptions::default()
        };
        serve_with(io::BufReader::with_capacity(16, input), &mut out, &options).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// A 100 MB request line took 260 MB of memory: lines are capped now,
    /// and an over-long one gets one bad_request reply; the next line is
    /// served as usual.
    #[test]
    fn an_over_long_request_line_is_refused_and_skipped() {
        let hello = |id: u64, pad: usize| {
            let line = format!(
                r#"{{"id":{id},"op":"hello","protocol":1,"pad":"{}"}}"#,
                "x".repeat(pad)
            );
            line + "\n"
        };
        let cap = hello(1, 100).len(); // exactly at the cap, newline included
        let input = [hello(1, 100), hello(2, 101), hello(3, 5000), hello(4, 0)].concat();
        let replies = serve_lines(input.as_bytes(), cap);
        assert_eq!(replies.len(), 4, "{replies:?}");
        assert_eq!(replies[0]["id"], 1);
        assert_eq!(replies[0]["ok"]["protocol"], 1);
        for (r, len) in [(&replies[1], cap + 1), (&replies[2], cap + 4900)] {
            assert_eq!(r["id"], Value::Null);
            assert_eq!(r["error"]["kind"], "bad_request");
            let message = r["error"]["message"].as_str().unwrap();
            assert_eq!(
                message,
                format!("request line of {len} bytes exceeds the limit of {cap} bytes (newline included); discarded")
            );
        }
        assert_eq!(replies[3]["id"], 4);
        assert_eq!(replies[3]["ok"]["protocol"], 1);
        assert_eq!(MAX_REQUEST_LINE, 64 * 1024 * 1024);
    }

    #[test]
    fn a_long_line_is_never_held_whole() {
        let input = format!("{}\nnext\r\nlast", "y".repeat(10_000));
        let mut reader = io::BufReader::with_capacity(64, input.as_bytes());
        let mut buf = Vec::new();
        let first = read_line_capped(&mut reader, &mut buf, 100).unwrap();
        assert_eq!(first, Line::TooLong { len: 10_001 });
        assert!(buf.capacity() <= 100, "{}", buf.capacity());
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, 100).unwrap(),
            Line::Complete
        );
        assert_eq!(buf, b"next");
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, 100).unwrap(),
            Line::Complete
        );
        assert_eq!(buf, b"last");
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, 100).unwrap(),
            Line::End
        );
    }

    /// A 10 000 character session id, one with a newline, and a lock file
    /// full of foreign bytes were echoed whole into error messages.
    #[test]
    fn messages_quote_user_input_and_file_contents_short_and_on_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let ws = dir.path();
        let long = "x".repeat(10_000);
        let id = SessionId::new("s").unwrap();
        let _writer = Session::create(&root, &id, ws, SessionOptions::default()).unwrap();
        let paths = crate::layout::SessionPaths::new(&root, &id);
        let foreign = format!("{}\nnot a pid\n", "\u{1b}[31mevil ".repeat(2_000));
        std::fs::write(paths.lock(), &foreign).unwrap();
        let replies = run(&[
            json!({"id": 1, "op": "open", "root": root, "session": long, "create": false}),
            json!({"id": 2, "op": "open", "root": root, "session": "a\nb", "create": false}),
            json!({"id": 3, "op": "open", "root": root, "session": "s", "create": false}),
            json!({"id": 4, "op": long, "x": 1}),
        ]);
        for r in &replies {
            let message = r["error"]["message"].as_str().unwrap();
            assert!(message.chars().count() < 1200, "{} chars", message.len());
            assert!(!message.chars().any(char::is_control), "{message:?}");
        }
        let m = |i: usize| replies[i]["error"]["message"].as_str().unwrap().to_string();
        assert_eq!(replies[0]["error"]["kind"], "invalid");
        assert!(
            m(0).starts_with(&format!(
                "invalid session id \"{}…\" (10000 chars): ",
                "x".repeat(80)
            )),
            "{}",
            m(0)
        );
        assert!(m(0).len() < 200, "{}", m(0));
        assert!(
            m(1).starts_with(r#"invalid session id "a\nb": "#),
            "{}",
            m(1)
        );
        assert_eq!(replies[2]["error"]["kind"], "locked");
        assert!(
            m(2).contains(r#"(pid "\u{1b}[31mevil "#) && m(2).contains("…\" (20010 chars)"),
            "{}",
            m(2)
        );
        assert!(m(2).len() < 400, "{}", m(2));
        assert_eq!(replies[3]["error"]["kind"], "bad_request");
        assert!(m(3).contains("(10"), "{}", m(3));
    }

    #[test]
    fn an_event_with_a_field_the_schema_does_not_know_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let ws = dir.path();
        let replies = run(&[
            json!({"id": 1, "op": "open", "root": root, "session": "s", "workspace": ws, "create": true}),
            json!({"id": 2, "op": "append", "event": {"type": "user_message", "parent": null, "text": "x", "bogus": 1}}),
            json!({"id": 3, "op": "append", "event": {"type": "plan_updated", "goal": "g",
                   "steps": [{"id": "1", "title": "t", "status": "blocked", "reason": "r", "bogus": 1}]}}),
            json!({"id": 4, "op": "events"}),
        ]);
        for reply in &replies[1..3] {
            assert_eq!(reply["error"]["kind"], "bad_request", "{reply}");
            let message = reply["error"]["message"].as_str().unwrap();
            assert!(message.contains("unknown field `bogus`"), "{message}");
        }
        let records = replies[3]["ok"]["records"].as_array().unwrap();
        assert_eq!(records.len(), 1, "only session_created: {}", replies[3]);
    }

    #[test]
    fn bad_requests_get_an_error_reply_not_a_crash() {
        let replies = run(&[
            json!({"id": 1, "op": "hello", "protocol": 3}),
            json!({"id": 2, "op": "fly"}),
            json!({"id": 3, "op": "append", "event": {"type": "nope"}}),
        ]);
        assert_eq!(replies[0]["error"]["kind"], "unsupported");
        assert_eq!(replies[1]["error"]["kind"], "bad_request");
        assert_eq!(replies[2]["error"]["kind"], "bad_request");
        let mut out = Vec::new();
        serve("{not json\n".as_bytes(), &mut out).unwrap();
        let reply: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(reply["id"], Value::Null);
        assert_eq!(reply["error"]["kind"], "bad_request");
        // Not UTF-8: a reply, where it used to end the server with an I/O error.
        let replies = serve_lines(b"{\"id\":1,\xff}\n{\"id\":2,\"op\":\"close\"}\n", 1024);
        assert_eq!(replies[0]["error"]["kind"], "bad_request");
        assert!(replies[0]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("request is not UTF-8"));
        assert_eq!(replies[1]["id"], 2);
    }
}
