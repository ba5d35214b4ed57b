//! Writes a generated session (the benches' shape: rule-following turns, a
//! compaction every 100 turns) for measuring the `agentstore` CLI on long
//! logs, e.g. peak memory with `/usr/bin/time -v` (benches/README.md):
//!
//! `cargo run --release -p agentbench --example make_session -- ROOT SESSION EVENTS [CHECKPOINT_AT|- [COMPACT_EVERY_TURNS]]`
//!
//! With `CHECKPOINT_AT`, a checkpoint is taken at the first turn boundary at
//! or after that many events (`-`: none). `COMPACT_EVERY_TURNS` (default
//! 100; 0: never, the active branch then holds every message). The
//! workspace is ROOT itself.

use std::path::Path;
use std::process::ExitCode;

use agentbench::{build_session, SessionShape};
use agentstore::SessionId;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: make_session ROOT SESSION EVENTS [CHECKPOINT_AT|- [COMPACT_EVERY_TURNS]]";
    let (root, name, events, checkpoint_at, compact_every_turns) = match args.as_slice() {
        [root, name, events, rest @ ..] if rest.len() <= 2 => {
            let number = |what: &str, s: &str| {
                s.parse::<u64>()
                    .map_err(|e| format!("make_session: {what} {s:?} is not a count: {e}"))
            };
            let parsed = number("EVENTS", events).and_then(|n| {
                let at = match rest.first().map(String::as_str) {
                    None | Some("-") => None,
                    Some(s) => Some(number("CHECKPOINT_AT", s)?),
                };
                let every = match rest.get(1) {
                    None => 100,
                    Some(s) => number("COMPACT_EVERY_TURNS", s)?,
                };
                Ok((n, at, every))
            });
            match parsed {
                Ok((n, at, every)) => (Path::new(root), name.as_str(), n, at, every),
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
            compact_every_turns,
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
