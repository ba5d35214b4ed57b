//! `agentstore export ROOT SESSION [--redact]`: a shareable JSONL copy.

use std::io::Write;
use std::path::PathBuf;

use agentstore::SessionPaths;

use super::{existing_root, session_id, Failure, Outcome};

/// Write the session's events as plain JSONL on stdout. With --redact,
/// payloads of events marked sensitive are masked, and stderr says which.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's root directory.
    pub root: PathBuf,
    /// The session to export.
    pub session: String,
    /// Mask the payload fields of events marked sensitive.
    #[arg(long)]
    pub redact: bool,
}

pub fn run(args: Args) -> Outcome {
    existing_root(&args.root)?;
    let id = session_id(&args.session)?;
    let paths = SessionPaths::new(&args.root, &id);
    if !paths.events().exists() {
        return Err(Failure::Store(agentstore::Error::NoSuchSession {
            id: id.to_string(),
            root: args.root.clone(),
        }));
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let report = agentstore::export::export(&paths, args.redact, &mut out)?;
    out.flush().map_err(super::stdout_error)?;
    if args.redact {
        let masked: Vec<String> = report
            .masked
            .iter()
            .map(|m| format!("e{} ({})", m.seq, m.fields.join(", ")))
            .collect();
        let summary = if masked.is_empty() {
            "masked nothing: no event is marked sensitive".to_string()
        } else {
            format!("masked {} event(s): {}", masked.len(), masked.join("; "))
        };
        let _ = writeln!(
            std::io::stderr(),
            "agentstore: exported {} event(s); {summary}",
            report.events
        );
    }
    Ok(())
}
