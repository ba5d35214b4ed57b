//! `agentstore show ROOT SESSION`: print events, optionally following new ones.
//!
//! Human format, one event per line: `  seq  ts  type  {fields}`. `--json`
//! prints each event as one JSON object (envelope and fields, no checksum):
//! for a known type, the verified line as stored, without building the
//! event (checksum, seq, id and type are checked; `fsck` checks the fields).
//! Reading takes no lock; a line still being written is shown once complete.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use agentstore::event::{Body, Redaction};
use agentstore::framing::TypeName;
use agentstore::{Event, LogReader, Query, Record, SessionPaths};

use super::{existing_root, session_id, stdout_error, Failure, Outcome};

/// How often `--follow` looks for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Print a session's events.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's root directory.
    pub root: PathBuf,
    /// The session to show.
    pub session: String,
    /// Only events with a seq greater than SEQ.
    #[arg(long, value_name = "SEQ")]
    pub after: Option<u64>,
    /// Only events of this type (repeat or separate with commas).
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',')]
    pub types: Vec<String>,
    /// One JSON object per event instead of the human format.
    #[arg(long)]
    pub json: bool,
    /// Keep running and print events as they are appended (like tail -f).
    #[arg(long)]
    pub follow: bool,
}

pub fn run(args: Args) -> Outcome {
    existing_root(&args.root)?;
    let id = session_id(&args.session)?;
    for t in &args.types {
        if !Event::TYPE_NAMES.contains(&t.as_str()) {
            return Err(Failure::Usage(format!(
                "--type {} is not an event type (known: {})",
                agentstore::error::quote(t),
                Event::TYPE_NAMES.join(", ")
            )));
        }
    }
    let reader = LogReader::open(&SessionPaths::new(&args.root, &id))?;
    let mut query = match args.after {
        Some(seq) => Query::after(seq),
        None => Query::all(),
    };
    if !args.types.is_empty() {
        query = query.types(args.types.iter().cloned());
    }
    let mut out = std::io::stdout().lock();
    let mut events = reader.events(&query)?;
    loop {
        while let Some(frame) = events.next_frame()? {
            if args.json && matches!(frame.type_name, TypeName::Known(_)) {
                // The verified line as stored, without its checksum: no
                // event is built (its fields are fsck's to check).
                frame
                    .write_without_checksum(&mut out)
                    .map_err(stdout_error)?;
                out.write_all(b"\n").map_err(stdout_error)?;
                continue;
            }
            let rec = frame.record()?;
            let line = if args.json { json(&rec) } else { human(&rec) };
            writeln!(out, "{line}").map_err(stdout_error)?;
        }
        out.flush().map_err(stdout_error)?;
        if !args.follow {
            return Ok(());
        }
        std::thread::sleep(FOLLOW_POLL);
        events = reader.events_from(events.position(), &query)?;
    }
}

/// `   3  2026-11-29T08:00:00.000Z  tool_call  {"call_id":"c1",...}`
fn human(rec: &Record) -> String {
    let sensitive = match rec.redaction {
        Redaction::Public => "",
        Redaction::Sensitive => "  (sensitive)",
    };
    format!(
        "{:>4}  {}  {:<17}  {}{sensitive}",
        rec.seq,
        rec.ts,
        rec.body.type_name(),
        fields_of(&rec.body)
    )
}

/// `{"seq":3,"id":"e3","ts":"...","type":"tool_call","call_id":"c1",...}`:
/// the stored line without its checksum, fields in stored order.
fn json(rec: &Record) -> String {
    let mut line = format!(
        "{{\"seq\":{},\"id\":{},\"ts\":{}",
        rec.seq,
        Value::from(rec.id.as_str()),
        Value::from(rec.ts.as_str())
    );
    if rec.redaction == Redaction::Sensitive {
        line.push_str(",\"redaction\":\"sensitive\"");
    }
    line.push_str(",\"type\":");
    line.push_str(&Value::from(rec.body.type_name()).to_string());
    let fields = fields_of(&rec.body);
    let inner = &fields[1..fields.len() - 1];
    if !inner.is_empty() {
        line.push(',');
        line.push_str(inner);
    }
    line.push('}');
    line
}

/// The body's fields as one JSON object, in stored order, without `type`.
fn fields_of(body: &Body) -> String {
    let event = match body {
        Body::Known(event) => event,
        Body::Ignorable { fields, .. } => return fields.to_string(),
    };
    let json = serde_json::to_string(event).expect("an event serializes");
    // Serde writes the tag of an internally tagged enum first.
    let tag = format!("{{\"type\":{}", Value::from(event.type_name()));
    match json.strip_prefix(&tag) {
        Some(rest) => format!("{{{}", rest.strip_prefix(',').unwrap_or(rest)),
        None => json,
    }
}
