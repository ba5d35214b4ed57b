//! Writes a generated session (the benches' shape: rule-following turns, a
//! compaction every 100 turns) for measuring the `agentstore` CLI on long
//! logs, e.g. peak memory with `/usr/bin/time -v` (benches/README.md):
//!
//! `cargo run --release -p agentbench --example make_session -- ROOT SESSION EVENTS [CHECKPOINT_AT]`
//!
//! With `CHECKPOINT_AT`, a checkpoint is taken at the first turn boundary at
//! or after that many events. The workspace is ROOT itself.

use std::path::Path;
use std::process::ExitCode;

use agentbench::{build_session, SessionShape};
use agentstore::SessionId;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: make_session ROOT SESSION EVENTS [CHECKPOINT_AT]";
    let (root, name, events, checkpoint_at) = match args.as_slice() {
        [root, name, events, rest @ ..] if rest.len() <= 1 => {
            let number = |what: &str, s: &str| {
                s.parse::<u64>()
                    .map_err(|e| format!("make_session: {what} {s:?} is not a count: {e}"))
            };
            let parsed = number("EVENTS", events).and_then(|n| {
                let at = rest
                    .first()
                    .map(|s| number("CHECKPOINT_AT", s))
                    .transpose()?;
                Ok((n, at))
            });
            match parsed {
                Ok((n, at)) => (Path::new(root), name.as_str(), n, at),
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = SessionId::new(name) {
        eprintln!("make_session: SESSION: {e}");
        return ExitCode::from(2);
    }
    if root.join("sessions").join(name).exists() {
        eprintln!(
            "make_session: session {name} already exists in {}",
            root.display()
        );
        return ExitCode::from(2);
    }
    if let Err(e) = std::fs::create_dir_all(root) {
        eprintln!("make_session: cannot create {}: {e}", root.display());
        return ExitCode::from(2);
    }
    let session = build_session(
        root,
        root,
        name,
        SessionShape {
            events,
            compact_every_turns: 100,
            checkpoint_at,
        },
    );
    println!(
        "{name}: {} events, {} bytes",
        session.projection().next_seq(),
        session.log().end().offset
    );
    ExitCode::SUCCESS
}
