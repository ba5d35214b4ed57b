//! `agentstore salvage ROOT SESSION NEW_SESSION`: copy the valid prefix into a new session.

use std::io::Write;
use std::path::PathBuf;

use agentstore::repair::{salvage, WorkspaceSource};

use super::{existing_root, session_id, stdout_error, Outcome};

/// Copy every line before the first damage or torn tail, verbatim, into a
/// new session. The original is left untouched.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's root directory.
    pub root: PathBuf,
    /// The damaged session (only read).
    pub session: String,
    /// The session to create with the valid prefix.
    pub new_session: String,
}

pub fn run(args: Args) -> Outcome {
    existing_root(&args.root)?;
    let id = session_id(&args.session)?;
    let new_id = session_id(&args.new_session)?;
    let report = salvage(&args.root, &id, &new_id)?;
    let mut out = std::io::stdout().lock();
    let stopped = match &report.stopped_at {
        Some(problem) => format!("stopped at {problem}"),
        None => "the whole log was valid".to_string(),
    };
    writeln!(
        out,
        "{new_id}: kept {} event(s) ({} bytes) of {id}; {stopped}; {id} left untouched",
        report.kept, report.kept_bytes
    )
    .map_err(stdout_error)?;
    let note = match report.workspace_from {
        WorkspaceSource::Meta => None,
        WorkspaceSource::FirstEvent => Some(format!(
            "{id}'s session.json is unreadable: workspace taken from its session_created event"
        )),
        WorkspaceSource::Unknown => Some(format!(
            "{id}'s session.json and first event are unreadable: {new_id} has no workspace"
        )),
    };
    if let Some(note) = note {
        writeln!(out, "{new_id}: note: {note}").map_err(stdout_error)?;
    }
    Ok(())
}
