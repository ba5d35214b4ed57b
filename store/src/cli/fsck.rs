//! `agentstore fsck ROOT [SESSION]`: verify every line; one line per problem.

use std::io::Write;
use std::path::{Path, PathBuf};

use agentstore::fsck::{fsck_root, fsck_session, LogProblem, Problem, SessionCheck};

use super::{existing_root, session_id, stdout_error, Failure, Outcome};

/// Verify sessions (every line, checksum, seq contiguity, the session
/// rules, every blob the log references, session.json, snapshot.json,
/// lease.json). Exit 0 when clean; 1 with one line per problem.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The store's root directory.
    pub root: PathBuf,
    /// Check only this session (default: all, and stray entries).
    pub session: Option<String>,
}

pub fn run(args: Args) -> Outcome {
    existing_root(&args.root)?;
    let mut out = std::io::stdout().lock();
    let (sessions, strays) = match &args.session {
        Some(id) => (
            vec![fsck_session(&args.root, &session_id(id)?)?],
            Vec::new(),
        ),
        None => {
            let check = fsck_root(&args.root)?;
            (check.sessions, check.strays)
        }
    };
    let mut problems = 0;
    for stray in &strays {
        problems += 1;
        let line = format!("sessions/{}: {}", stray.name, stray.reason);
        writeln!(out, "{}", agentstore::error::one_line(&line)).map_err(stdout_error)?;
    }
    for session in &sessions {
        for problem in &session.problems {
            problems += 1;
            // One line each, however long what it quotes from a file.
            let line = agentstore::error::one_line(&describe(&args.root, session, problem));
            writeln!(out, "{line}").map_err(stdout_error)?;
        }
    }
    if problems > 0 {
        return Err(Failure::Reported);
    }
    let events: u64 = sessions.iter().map(|s| s.events).sum();
    writeln!(
        out,
        "ok: {} session(s), {events} event(s) verified",
        sessions.len()
    )
    .map_err(stdout_error)
}

fn describe(root: &Path, session: &SessionCheck, problem: &Problem) -> String {
    let id = &session.id;
    let root = root.display();
    let hint = match problem {
        Problem::Log(LogProblem::TornTail(_)) => {
            format!("repairable: agentstore repair {root} {id}")
        }
        Problem::Log(LogProblem::Damage { .. }) => format!(
            "not repairable: agentstore salvage {root} {id} NEW_SESSION keeps the {} event(s) before it",
            session.events
        ),
        Problem::Log(LogProblem::UnknownType { .. }) => format!(
            "needs a newer agentstore, or agentstore salvage {root} {id} NEW_SESSION keeps the {} event(s) before it",
            session.events
        ),
        Problem::Log(LogProblem::Rule { seq, .. }) => format!(
            "not repairable: agentstore salvage {root} {id} NEW_SESSION keeps the {seq} event(s) before it"
        ),
        Problem::Meta(_) | Problem::Lease(_) | Problem::Blob { .. } | Problem::File(_) => {
            return format!("{id}: {problem}")
        }
        Problem::Snapshot(_) => format!(
            "never trusted; the next `agentstore checkpoint {root} {id}` replaces it"
        ),
    };
    format!("{id}: {problem}; {hint}")
}
