//! `agentstore checkpoint ROOT SESSION`: persist the projection.

use std::io::Write;
use std::path::PathBuf;

use agentstore::{Session, SessionOptions};

use super::{existing_root, session_id, stdout_error, Outcome};

/// Write snapshot.json: the projection with the seq and byte offset it
/// covers, replaced atomically. Resuming then replays only the tail.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's root directory.
    pub root: PathBuf,
    /// The session to checkpoint.
    pub session: String,
}

pub fn run(args: Args) -> Outcome {
    existing_root(&args.root)?;
    let id = session_id(&args.session)?;
    let (mut session, _) = Session::open(&args.root, &id, SessionOptions::default())?;
    let cp = session.checkpoint()?;
    writeln!(
        std::io::stdout(),
        "{id}: snapshot covers {} event(s), {} byte(s) of log ({} byte snapshot)",
        cp.next_seq,
        cp.offset,
        cp.bytes
    )
    .map_err(stdout_error)
}
