//! `agentstore repair ROOT SESSION`: cut a torn tail; refuse damage.

use std::io::Write;
use std::path::PathBuf;

use agentstore::repair::repair;
use agentstore::Error;

use super::{existing_root, session_id, stdout_error, Failure, Outcome};

/// Cut a torn tail off a session's log (never a complete line). Damage is
/// refused with its line and byte offset: use `salvage` for that.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's root directory.
    pub root: PathBuf,
    /// The session to repair.
    pub session: String,
}

pub fn run(args: Args) -> Outcome {
    existing_root(&args.root)?;
    let id = session_id(&args.session)?;
    let report = repair(&args.root, &id).map_err(|e| match e {
        e @ Error::Damage { .. } => Failure::Problem(format!(
            "{e}; repair never removes damage: `agentstore salvage {} {id} NEW_SESSION` copies the lines before it into a new session",
            args.root.display()
        )),
        e => Failure::Store(e),
    })?;
    let line = match report.cut {
        Some(torn) => format!(
            "{id}: cut {torn}; recorded as event {}, tail_quarantined; the log now ends after {} event(s) at byte offset {}",
            report.end.seq.saturating_sub(1), report.end.seq, report.end.offset
        ),
        None => format!(
            "{id}: nothing to repair ({} event(s), no torn tail)",
            report.end.seq
        ),
    };
    writeln!(std::io::stdout(), "{line}").map_err(stdout_error)
}
