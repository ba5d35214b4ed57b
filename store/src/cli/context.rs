//! `agentstore context ROOT SESSION [--budget TOKENS]`: the model's view.

use std::io::Write;
use std::path::PathBuf;

use agentstore::{Error, Session, SessionOptions, SessionView};

use super::{existing_root, session_id, stdout_error, Failure, Outcome};

/// Print the model's view of the active branch: the latest compaction
/// summary, the plan, the kept entries and the recovery block (never
/// trimmed by the budget). Reads without the writer lock and writes
/// nothing, so it works while an agent writes; only --workspace, which
/// records the move, takes the lock.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's root directory.
    pub root: PathBuf,
    /// The session to render.
    pub session: String,
    /// Drop the oldest entries until the context fits this many tokens (4 bytes each).
    #[arg(long, value_name = "TOKENS")]
    pub budget: Option<u64>,
    /// Rebind the session to this workspace (it moved); takes the writer lock.
    #[arg(long, value_name = "PATH")]
    pub workspace: Option<PathBuf>,
}

pub fn run(args: Args) -> Outcome {
    existing_root(&args.root)?;
    let id = session_id(&args.session)?;
    // Streamed: an uncompacted branch is never held whole in memory.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = match args.workspace {
        Some(workspace) => {
            let options = SessionOptions {
                workspace: Some(workspace),
                ..SessionOptions::default()
            };
            Session::open(&args.root, &id, options)?
                .0
                .write_context(&mut out, args.budget)
        }
        None => SessionView::open(&args.root, &id)?.write_context(&mut out, args.budget),
    };
    match written {
        Err(Error::Io { path, source, .. }) if path.as_os_str() == "<context output>" => {
            Err(stdout_error(source))
        }
        other => other.map_err(Failure::Store),
    }?;
    out.flush().map_err(stdout_error)
}
