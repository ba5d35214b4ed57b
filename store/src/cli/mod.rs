//! Shared plumbing of the subcommands: exit codes, error lines, stdout.
//!
//! Exit codes: 0 success; 1 problems found or an operation failed; 2 bad
//! usage or input (arguments, session ids, stdin). Every failure prints
//! exactly one line, `agentstore: <what is wrong and where>`, on stderr.

pub mod adapter;
pub mod append;
pub mod bench;
pub mod checkpoint;
pub mod context;
pub mod export;
pub mod fsck;
pub mod ls;
pub mod recover;
pub mod repair;
pub mod salvage;
pub mod show;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use agentstore::{Error, SessionId};

/// Problems found, or an operation that failed.
pub const EXIT_PROBLEMS: u8 = 1;
/// Bad usage or bad input.
pub const EXIT_USAGE: u8 = 2;

/// Why a subcommand did not succeed.
#[derive(Debug)]
pub enum Failure {
    /// An error from the store; its exit code depends on its kind.
    Store(Error),
    /// Bad arguments or input (exit 2).
    Usage(String),
    /// A problem found or an operation refused, already phrased (exit 1).
    Problem(String),
    /// Problems were already printed on stdout: exit 1 without another line.
    Reported,
    /// Whoever read stdout went away (`show | head`): stop quietly.
    StdoutClosed,
    /// SIGINT or SIGTERM stopped the command after it cleaned up: exit
    /// 128 + the signal.
    Interrupted,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Store(e)
    }
}

/// What every `run` returns.
pub type Outcome = Result<(), Failure>;

/// Prints the failure line, if any, and picks the exit code.
pub fn finish(outcome: Outcome) -> ExitCode {
    let (code, line) = match outcome {
        Ok(()) | Err(Failure::StdoutClosed) => return ExitCode::SUCCESS,
        Err(Failure::Reported) => return ExitCode::from(EXIT_PROBLEMS),
        Err(Failure::Usage(line)) => (EXIT_USAGE, line),
        Err(Failure::Problem(line)) => (EXIT_PROBLEMS, line),
        Err(Failure::Store(e)) => (store_exit_code(&e), e.to_string()),
        Err(Failure::Interrupted) => (
            agentstore::interrupt::exit_code().unwrap_or(EXIT_PROBLEMS),
            format!(
                "interrupted by {}; scratch files removed",
                agentstore::interrupt::signal_name().unwrap_or("a signal")
            ),
        ),
    };
    let _ = writeln!(
        std::io::stderr(),
        "agentstore: {}",
        agentstore::error::one_line(&line)
    );
    ExitCode::from(code)
}

fn store_exit_code(e: &Error) -> u8 {
    match e {
        Error::InvalidSessionId { .. }
        | Error::NoSuchSession { .. }
        | Error::SessionExists { .. }
        | Error::EventTooLarge { .. } => EXIT_USAGE,
        _ => EXIT_PROBLEMS,
    }
}

/// Reports a command-line parse failure as one line (help and version go to stdout).
pub fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = write!(std::io::stderr(), "{}", e.render());
            ExitCode::from(EXIT_USAGE)
        }
        _ => {
            // clap's first paragraph, folded into one line.
            let rendered = e.render().to_string();
            let paragraph: Vec<&str> = rendered
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let text = paragraph.join(" ");
            let text = text.strip_prefix("error: ").unwrap_or(&text);
            let _ = writeln!(
                std::io::stderr(),
                "agentstore: {} (see agentstore --help)",
                agentstore::error::one_line(text)
            );
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Maps a failed write to stdout.
pub fn stdout_error(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::StdoutClosed
    } else {
        Failure::Store(Error::io("write", "<stdout>")(e))
    }
}

/// Validates a session id given on the command line.
pub fn session_id(id: &str) -> Result<SessionId, Failure> {
    Ok(SessionId::new(id)?)
}

/// Checks that ROOT exists before reading under it.
pub fn existing_root(root: &Path) -> Result<(), Failure> {
    if root.is_dir() {
        Ok(())
    } else {
        Err(Failure::Usage(format!(
            "ROOT {} is not a directory",
            root.display()
        )))
    }
}
