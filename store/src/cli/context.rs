//! `agentstore context ROOT SESSION [--budget TOKENS]`: the model's view.

use std::io::Write;
use std::path::PathBuf;

use agentstore::{Session, SessionOptions, SessionView};

use super::{existing_root, session_id, stdout_error, Outcome};

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
    let text = match args.workspace {
        Some(workspace) => {
            let options = SessionOptions {
                workspace: Some(workspace),
                ..SessionOptions::default()
            };
            Session::open(&args.root, &id, options)?
                .0
                .context(args.budget)?
        }
        None => SessionView::open(&args.root, &id)?.context(args.budget)?,
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(stdout_error)
}
