//! Pipelined batches (`chaos/PROTOCOL.md`, section 10): the `append` and
//! `start_tool` requests of a parallel group sent in one write, every line
//! but the last saying `more`, to an adapter whose `hello` said `pipeline`;
//! their replies read back in whatever order the adapter wrote them, and
//! handed out by id.
//!
//! Every reply is checked as a lone request's is, and more: its id must be
//! that of a request of a batch not answered yet (a reply twice, or to no
//! request, is a protocol error naming the line).

use agentchaos_protocol::event::Seq;
use agentchaos_protocol::message::{Ack, IntentAck};
use agentchaos_protocol::Request;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Client, ClientError, Problem, RequestRef, StdoutLine};

impl Client {
    /// Whether the adapter takes pipelined batches (its `hello` said `pipeline`).
    pub fn pipelines(&self) -> bool {
        self.hello.pipeline
    }

    /// Sends `requests` (each `append` or `start_tool`) as one batch, in
    /// one write to the adapter's stdin; returns their ids, in order. Their
    /// replies are taken with [`Client::take_seq`].
    ///
    /// # Panics
    /// When the adapter does not pipeline, `requests` is empty or holds
    /// another operation: the caller's mistake, not the adapter's.
    pub fn send_batch(&mut self, requests: Vec<Request>) -> Result<Vec<u64>, ClientError> {
        assert!(
            self.pipelines(),
            "a batch sent to an adapter that does not pipeline"
        );
        assert!(!requests.is_empty(), "an empty batch");
        if let Some(e) = &self.failed {
            return Err(e.clone().into());
        }
        let n = requests.len();
        let mut bytes = Vec::new();
        let mut ids = Vec::with_capacity(n);
        let mut last = None;
        for (k, request) in requests.into_iter().enumerate() {
            let op = request.op();
            assert!(
                matches!(op, "append" | "start_tool"),
                "{op} is never pipelined"
            );
            let id = self.next_id;
            self.next_id += 1;
            bytes.extend(self.encode(id, k + 1 < n, request)?);
            self.pipelined.insert(id, (op, None));
            ids.push(id);
            last = Some(RequestRef { id, op });
        }
        self.send(last.expect("a batch has a request"), &bytes, &[])?;
        Ok(ids)
    }

    /// The seq the adapter acknowledged pipelined request `id` at (an
    /// `append`'s or a `start_tool`'s), or its refusal.
    pub fn take_seq(&mut self, id: u64) -> Result<Seq, ClientError> {
        let op = match self.pipelined.get(&id) {
            Some(("start_tool", _)) => "start_tool",
            _ => "append",
        };
        let (seq, event_id) = crate::timing::timed(crate::timing::Part::RoundTrip, || {
            if op == "start_tool" {
                self.take_reply::<IntentAck>(id).map(|a| (a.seq, a.id))
            } else {
                self.take_reply::<Ack>(id).map(|a| (a.seq, a.id))
            }
        })?;
        self.check_id(op, seq, &event_id)?;
        let misplaced = self
            .pipelined_seqs
            .iter()
            .find(|&&(other, other_seq)| (other < id) != (other_seq < seq));
        if let Some(&(other, other_seq)) = misplaced {
            let reason = format!(
                "seq {seq} for request {id}, and seq {other_seq} for request {other}: pipelined events take seqs in request order (chaos/PROTOCOL.md, section 10)"
            );
            return Err(self.shape_after_the_fact(op, reason).into());
        }
        self.pipelined_seqs.push((id, seq));
        Ok(seq)
    }

    /// The reply body of pipelined request `id`: reads the adapter's stdout
    /// until that reply came, keeping the others of its batches for later.
    fn take_reply<T: DeserializeOwned>(&mut self, id: u64) -> Result<T, ClientError> {
        if let Some(e) = &self.failed {
            return Err(e.clone().into());
        }
        let Some(&(op, _)) = self.pipelined.get(&id) else {
            panic!("request {id} is not pipelined, or its reply was taken");
        };
        let req = RequestRef { id, op };
        let line = loop {
            if let Some((_, Some(_))) = self.pipelined.get(&id) {
                let (_, line) = self.pipelined.remove(&id).expect("just found");
                break line.expect("just found");
            }
            let line = self.next_line(req.clone())?;
            match reply_id(&line) {
                Some(found) if found == id => {
                    self.pipelined.remove(&id);
                    break line;
                }
                Some(found) if matches!(self.pipelined.get(&found), Some((_, None))) => {
                    if let Some(entry) = self.pipelined.get_mut(&found) {
                        entry.1 = Some(line);
                    }
                }
                Some(found) => {
                    let found = format!("{found}, which names no unanswered request of the batch");
                    return Err(self.fail(req, Problem::WrongId { line, found }).into());
                }
                // Not JSON, or no id: said as for a lone request.
                None => break line,
            }
        };
        self.reply_body(req, line)
    }
}

/// The id a reply line carries, if it is a JSON object with a numeric id.
fn reply_id(line: &StdoutLine) -> Option<u64> {
    serde_json::from_str::<Value>(&line.text)
        .ok()?
        .get("id")?
        .as_u64()
}
