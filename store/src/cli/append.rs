//! `agentstore append ROOT SESSION`: events as JSON lines on stdin, one ack per line out.
//!
//! Each input line is an object with `type` and the event's fields (and
//! optionally `"redaction":"sensitive"`); the store assigns seq, id, ts and
//! the checksum, so those fields are refused, and so is any field the
//! event's schema does not have (never dropped). Every event goes through the
//! session rules, as the library's and the adapter's appends do (a
//! `tool_started` is the call's intent, `Session::start_tool`); the first
//! refused line stops the command, with its line number, and nothing of it
//! is written. An ack is printed only once its event is durable, so what
//! this prints is a durability promise.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use agentstore::event::Redaction;
use agentstore::framing::MAX_LINE_BYTES;
use agentstore::meta::SessionMeta;
use agentstore::{Event, Session, SessionId, SessionOptions, SessionPaths};

use super::{existing_root, session_id, Failure, Outcome};

/// Append events read as JSON lines on stdin (`{"type":"run_started","run_id":"r1"}`),
/// creating the session if needed; print one ack per durable event.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's root directory.
    pub root: PathBuf,
    /// The session to append to (created if it does not exist).
    pub session: String,
    /// The workspace of a session being created (default: the current directory).
    #[arg(long, value_name = "PATH")]
    pub workspace: Option<PathBuf>,
}

/// One ack line: `{"seq":3,"id":"e3","type":"tool_call","offset":812,"end":990}`.
#[derive(Serialize)]
struct AckLine<'a> {
    seq: u64,
    id: &'a str,
    #[serde(rename = "type")]
    type_name: &'a str,
    offset: u64,
    end: u64,
}

pub fn run(args: Args) -> Outcome {
    existing_root(&args.root)?;
    let id = session_id(&args.session)?;
    let paths = SessionPaths::new(&args.root, &id);
    let mut out = std::io::stdout().lock();
    let mut session = open_or_create(&args, &id, &paths, &mut out)?;
    let mut input = std::io::stdin().lock();
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        // Bounded: a line without end must not eat all memory.
        let n = (&mut input)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| Failure::Problem(format!("reading stdin: {e}")))?;
        if n == 0 {
            return Ok(());
        }
        number += 1;
        if n > MAX_LINE_BYTES {
            return Err(Failure::Usage(format!(
                "stdin line {number}: longer than {MAX_LINE_BYTES} bytes (store large payloads as blobs)"
            )));
        }
        let text = std::str::from_utf8(&line)
            .map_err(|e| Failure::Usage(format!("stdin line {number}: not UTF-8: {e}")))?;
        if text.trim().is_empty() {
            continue;
        }
        let (event, redaction) = parse_event(text)
            .map_err(|why| Failure::Usage(format!("stdin line {number}: {why}")))?;
        let type_name = event.type_name();
        let before = session.log().end();
        let refused = |e: agentstore::Error| {
            Failure::Problem(format!(
                "stdin line {number}: {type_name} refused, nothing written: {e}"
            ))
        };
        match event {
            Event::ToolStarted { call_id } => {
                session.start_tool(&call_id).map_err(refused)?;
            }
            event => {
                session.append_redacted(event, redaction).map_err(refused)?;
            }
        }
        let after = session.log().end();
        print_ack(&mut out, before.seq, before.offset, after.offset, type_name)?;
    }
}

fn open_or_create(
    args: &Args,
    id: &SessionId,
    paths: &SessionPaths,
    out: &mut impl Write,
) -> Result<Session, Failure> {
    if let (Some(wanted), true) = (&args.workspace, paths.events().exists()) {
        let wanted = workspace(Some(wanted))?;
        if let Ok(meta) = SessionMeta::read(paths) {
            if meta.workspace != wanted {
                return Err(Failure::Usage(format!(
                    "session {id} exists with workspace {}; --workspace {wanted} does not match",
                    meta.workspace
                )));
            }
        }
    }
    let ws = workspace(args.workspace.as_deref())?;
    let (session, report) =
        Session::open_or_create(&args.root, id, Path::new(&ws), SessionOptions::default())?;
    match report {
        // Created now (or a creation a crash cut short, finished now).
        None => {
            let end = session.log().end();
            print_ack(out, 0, 0, end.offset, "session_created")?;
        }
        Some(r) => {
            if let Some(torn) = r.repaired {
                let _ = writeln!(std::io::stderr(), "agentstore: {id}: cut {torn}");
            }
        }
    }
    Ok(session)
}

/// The workspace as an absolute, canonical UTF-8 path.
fn workspace(given: Option<&Path>) -> Result<String, Failure> {
    let given = given.unwrap_or(Path::new("."));
    let path = std::fs::canonicalize(given)
        .map_err(|e| Failure::Usage(format!("workspace {}: {e}", given.display())))?;
    path.into_os_string()
        .into_string()
        .map_err(|p| Failure::Usage(format!("workspace {p:?} is not valid UTF-8")))
}

/// Prints the ack of the durable event `seq`, whose line is `offset..end`.
fn print_ack(
    out: &mut impl Write,
    seq: u64,
    offset: u64,
    end: u64,
    type_name: &str,
) -> Result<(), Failure> {
    let id = agentstore::event::event_id(seq);
    let line = AckLine {
        seq,
        id: &id,
        type_name,
        offset,
        end,
    };
    let json = serde_json::to_string(&line).expect("an ack serializes");
    writeln!(out, "{json}")
        .and_then(|()| out.flush())
        .map_err(|e| {
            Failure::Problem(format!(
                "cannot print the ack of durable event {seq} ({e}); stopped reading stdin"
            ))
        })
}

/// Parses one input line into an event, refusing the fields the store assigns.
fn parse_event(text: &str) -> Result<(Event, Redaction), String> {
    let mut value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let obj = value
        .as_object_mut()
        .ok_or("not a JSON object (expected {\"type\": ..., fields})")?;
    for field in ["seq", "id", "ts", "crc"] {
        if obj.contains_key(field) {
            return Err(format!(
                "field {field:?} is assigned by the store; leave it out"
            ));
        }
    }
    let redaction = match obj.remove("redaction") {
        None => Redaction::Public,
        Some(r) => serde_json::from_value(r)
            .map_err(|_| "\"redaction\" must be \"public\" or \"sensitive\"".to_string())?,
    };
    let type_name = match obj.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(_) => return Err("\"type\" is not a string".into()),
        None => return Err("missing \"type\"".into()),
    };
    if type_name == "session_created" {
        return Err("session_created is written by the store when it creates the session".into());
    }
    if type_name == "tail_quarantined" {
        return Err("tail_quarantined is written by the store when it cuts a torn tail".into());
    }
    if !Event::TYPE_NAMES.contains(&type_name.as_str()) {
        return Err(format!(
            "unknown event type {type_name:?} (known: {})",
            Event::TYPE_NAMES.join(", ")
        ));
    }
    let event = serde_json::from_value(value).map_err(|e| format!("{type_name}: {e}"))?;
    Ok((event, redaction))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields_and_refuses_what_the_store_assigns() {
        let (ev, red) = parse_event(r#"{"type":"run_started","run_id":"r1"}"#).unwrap();
        assert_eq!(
            ev,
            Event::RunStarted {
                run_id: "r1".into()
            }
        );
        assert_eq!(red, Redaction::Public);
        let (_, red) =
            parse_event(r#"{"type":"run_started","run_id":"r1","redaction":"sensitive"}"#).unwrap();
        assert_eq!(red, Redaction::Sensitive);
        for (input, wanted) in [
            (
                r#"{"type":"run_started","run_id":"r","seq":4}"#,
                "\"seq\" is assigned",
            ),
            (r#"{"run_id":"r"}"#, "missing \"type\""),
            (r#"{"type":"nope"}"#, "unknown event type \"nope\""),
            (
                r#"{"type":"run_started"}"#,
                "run_started: missing field `run_id`",
            ),
            (r#"[1]"#, "not a JSON object"),
            (r#"{"type":"session_created"}"#, "written by the store"),
            (r#"{"type":"tail_quarantined"}"#, "when it cuts a torn tail"),
            ("{", "not JSON"),
        ] {
            let err = parse_event(input).unwrap_err();
            assert!(err.contains(wanted), "{input}: {err}");
        }
    }
}
