//! `agentstore ls ROOT`: one line per session, from its `session.json` only.

use std::io::Write;
use std::path::PathBuf;

use agentstore::layout::{list_sessions, SessionPaths};
use agentstore::meta::{SessionMeta, SessionStatus};

use super::{existing_root, stdout_error, Outcome};

/// List the sessions under ROOT (id, status, last update, workspace).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's root directory.
    pub root: PathBuf,
}

pub fn run(args: Args) -> Outcome {
    existing_root(&args.root)?;
    let ids = list_sessions(&args.root)?;
    let width = ids.iter().map(|id| id.as_str().len()).max().unwrap_or(0);
    let mut out = std::io::stdout().lock();
    for id in ids {
        let paths = SessionPaths::new(&args.root, &id);
        let line = match SessionMeta::read(&paths) {
            Ok(meta) => {
                let status = match meta.status {
                    SessionStatus::Active => "active",
                    SessionStatus::Closed => "closed",
                };
                format!(
                    "{:width$}  {status:6}  {}  {}",
                    id.as_str(),
                    meta.updated,
                    meta.workspace
                )
            }
            Err(e) => format!("{:width$}  ?       (unreadable: {e})", id.as_str()),
        };
        writeln!(out, "{line}").map_err(stdout_error)?;
    }
    Ok(())
}
