//! What the child agent tells the harness, one JSON line at a time.
//!
//! The agent writes each line to its stdout and flushes it before going
//! on, so that a line written before a SIGKILL is in the pipe when the
//! process dies: the harness learns of every acknowledgement as it happens,
//! without trusting the store. The harness answers on the child's stdin
//! with an empty line to let a paused child continue. This module owns the
//! line format and the event fingerprint; it must never buffer a line.

use std::io::{BufRead, Write};

use agentchaos_protocol::event::{Event, Phase, Seq};
use serde::{Deserialize, Serialize};

/// An uncertain call as the store's recovery reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedCall {
    pub call_id: String,
    pub phase: Phase,
}

/// One line from the child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
pub enum ChildLine {
    /// The agent is about to append this event (`t`: type, `h`: fingerprint).
    Append { t: String, h: String },
    /// The store acknowledged the last appended event as durable at `seq`.
    Ack { seq: Seq, t: String, h: String },
    /// The store refused the last appended event with an I/O error; the
    /// agent announces it again if it retries.
    Refused { t: String, h: String },
    /// First recovery done: what the store reported, the `<recovery>`
    /// block of the rendered context (None when the context has none), the
    /// contexts it served (unbudgeted first, then with the budgets of
    /// [`crate::model::oracle::budgets`]) and the store's projection.
    /// The child then waits for the harness to look at the disk.
    Recovered {
        appended: u64,
        interrupted: Vec<String>,
        uncertain: Vec<ReportedCall>,
        block: Option<String>,
        contexts: Vec<ServedContext>,
        /// The store's own projection after resuming and recovering.
        projection: serde_json::Value,
    },
    /// The session was closed, reopened and recovered again; the child waits again.
    RecoveredAgain { appended: u64 },
    /// The in-process store reported a successful sync of its log (a
    /// `Batch` store, [`crate::agent::schedule`]): every event below
    /// `next_seq` is durable by its account. Sent before the next answer.
    Synced { next_seq: Seq },
    /// The in-process store reported a failed sync of its log.
    SyncFailed,
    /// The scenario is complete.
    Done,
}

/// A context as the store rendered it, with the budget it was asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServedContext {
    pub budget: Option<u64>,
    pub text: String,
}

/// A fingerprint of an event: CRC32C of its JSON. The agent reports it
/// with each ack; the checker recomputes it from the log.
pub fn fingerprint(event: &Event) -> String {
    let bytes = serde_json::to_vec(event).expect("an event serializes");
    format!("{:08x}", crc32c::crc32c(&bytes))
}

/// The child's side: writes lines, waits for the harness.
#[derive(Debug)]
pub struct Reporter<W: Write> {
    out: W,
    /// Bytes reported so far (the coverage copies are named by it).
    reported: u64,
}

impl<W: Write> Reporter<W> {
    pub fn new(out: W) -> Self {
        Reporter { out, reported: 0 }
    }

    /// Writes one line and flushes it (one `write` for the whole line).
    pub fn send(&mut self, line: &ChildLine) -> Result<(), PipeError> {
        let mut bytes = serde_json::to_vec(line).expect("a child line serializes");
        bytes.push(b'\n');
        self.out
            .write_all(&bytes)
            .and_then(|()| self.out.flush())
            .map_err(|e| PipeError(format!("cannot report to the harness: {e}")))?;
        self.reported += bytes.len() as u64;
        crate::coverage::after_report(self.reported);
        Ok(())
    }
}

/// The pipe between the agent and the harness failed (the harness's side).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PipeError(String);

/// Waits for the harness's go-ahead on stdin (an empty line, or EOF when
/// run by hand).
pub fn wait_for_harness(input: &mut impl BufRead) -> Result<(), PipeError> {
    let mut line = String::new();
    input
        .read_line(&mut line)
        .map(|_| ())
        .map_err(|e| PipeError(format!("cannot read the harness's go-ahead: {e}")))
}

/// A line of the agent's stdout that is not a [`ChildLine`], named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the agent wrote an unreadable line {line:?}: {reason}")]
pub struct UnreadableLine {
    pub line: String,
    pub reason: String,
}

/// Parses one line from the child; the error names the line.
pub fn parse_line(line: &str) -> Result<ChildLine, UnreadableLine> {
    serde_json::from_str(line).map_err(|e| UnreadableLine {
        line: line.to_string(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_fingerprints_are_stable() {
        let line = ChildLine::Ack {
            seq: 3,
            t: "tool_started".into(),
            h: "0badf00d".into(),
        };
        let mut buf = Vec::new();
        Reporter::new(&mut buf).send(&line).unwrap();
        assert!(buf.ends_with(b"\n"));
        assert_eq!(
            parse_line(std::str::from_utf8(&buf).unwrap().trim_end()).unwrap(),
            line
        );
        let e = Event::ToolStarted {
            call_id: "r1-2".into(),
        };
        assert_eq!(fingerprint(&e), fingerprint(&e.clone()));
        assert_ne!(
            fingerprint(&e),
            fingerprint(&Event::ToolStarted {
                call_id: "r1-3".into()
            })
        );
        assert!(parse_line("{\"k\":\"nope\"}").is_err());
    }
}
