//! `agentstore export ROOT SESSION [--redact]`: a shareable JSONL copy.

use std::io::Write;
use std::path::PathBuf;

use agentstore::SessionPaths;

use super::{existing_root, session_id, Failure, Outcome};

/// Write the session's events as plain JSONL on stdout. With --redact,
/// payloads of sensitive events and calls, values of secret-named keys and
/// credentials found in any string are masked, and stderr names each
/// masked value by seq and JSON path (never the secret).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's root directory.
    pub root: PathBuf,
    /// The session to export.
    pub session: String,
    /// Mask sensitive payloads, secret-named keys and credentials (docs/store-cli.md).
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
    let report = match agentstore::export::export(&paths, args.redact, &mut out) {
        Err(agentstore::Error::Io {
            op: "write export",
            source,
            ..
        }) => return Err(super::stdout_error(source)),
        other => other?,
    };
    out.flush().map_err(super::stdout_error)?;
    if args.redact {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "agentstore: exported {} event(s); masked {} value(s) in {} event(s)",
            report.events,
            report.masked.len(),
            report.masked_events()
        );
        for masked in &report.masked {
            let _ = writeln!(err, "  masked {masked}");
        }
    }
    Ok(())
}
