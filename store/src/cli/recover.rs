//! `agentstore recover ROOT SESSION`: what really happened before the crash.

use std::io::Write;
use std::path::PathBuf;

use agentstore::{Error, Session, SessionOptions};

use super::{existing_root, session_id, stdout_error, Failure, Outcome};

/// Recover a session after a crash: verify every line of the log (even
/// under a snapshot), cut a torn tail, close runs that have no finish, and mark every tool call without a result as uncertain with
/// how far it got. Idempotent: a second run appends nothing.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's root directory.
    pub root: PathBuf,
    /// The session to recover.
    pub session: String,
    /// Rebind the session to this workspace (it moved).
    #[arg(long, value_name = "PATH")]
    pub workspace: Option<PathBuf>,
    /// Print the recovery state as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Outcome {
    existing_root(&args.root)?;
    let id = session_id(&args.session)?;
    let options = SessionOptions {
        workspace: args.workspace,
        ..SessionOptions::default()
    };
    let (mut session, _) = Session::open(&args.root, &id, options)?;
    let state = session.recover().map_err(|e| match e {
        e @ Error::Damage { .. } => Failure::Problem(format!(
            "{e}; recovery appends nothing to a damaged log: `agentstore salvage {} {id} NEW_SESSION` copies the lines before it into a new session",
            args.root.display()
        )),
        e => Failure::Store(e),
    })?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let json = serde_json::to_string_pretty(&state).expect("recovery state serializes");
        return writeln!(out, "{json}").map_err(stdout_error);
    }
    let mut text = String::new();
    if let Some(t) = &state.repaired {
        text.push_str(&format!(
            "repaired: cut a torn tail of {} byte(s) at byte offset {} (line {}): {}\n",
            t.len, t.offset, t.line, t.reason
        ));
        if let Some(q) = &t.quarantine {
            text.push_str(&format!("repaired: the cut bytes were saved to {q}\n"));
        }
    }
    for run in &state.interrupted_runs {
        text.push_str(&format!("interrupted run: {run}\n"));
    }
    for c in &state.uncertain {
        let phase = serde_json::to_value(c.phase).expect("phase serializes");
        text.push_str(&format!(
            "uncertain call: {} tool={} target={} operation={} phase={}\n",
            c.call_id,
            c.tool,
            c.target.as_deref().unwrap_or("-"),
            c.operation_id.as_deref().unwrap_or("-"),
            phase.as_str().unwrap_or("?"),
        ));
    }
    text.push_str(&format!(
        "{id}: recovery appended {} event(s)\n",
        state.appended
    ));
    out.write_all(text.as_bytes()).map_err(stdout_error)
}
