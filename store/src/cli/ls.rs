//! `agentstore ls ROOT`: one line per session, from its `session.json` only.
//! A session whose `session.json` cannot be read (missing, not a regular
//! file, too large, not metadata) is listed with `?` and why, and the
//! command then exits 1.

use std::io::Write;
use std::path::PathBuf;

use agentstore::layout::{list_sessions, SessionPaths};
use agentstore::meta::{SessionMeta, SessionStatus};

use super::{existing_root, stdout_error, Failure, Outcome};

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
    let mut unreadable = 0;
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
            Err(e) => {
                unreadable += 1;
                format!("{:width$}  ?       (unreadable: {e})", id.as_str())
            }
        };
        writeln!(out, "{}", agentstore::error::one_line(&line)).map_err(stdout_error)?;
    }
    if unreadable > 0 {
        return Err(Failure::Reported);
    }
    Ok(())
}
