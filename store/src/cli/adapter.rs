//! `agentstore adapter`: the reference store behind the agentchaos adapter
//! protocol (`chaos/PROTOCOL.md`), on stdin and stdout.

use super::{Failure, Outcome};

/// Serve the agentchaos adapter protocol (JSON lines) on stdin/stdout until
/// stdin ends. The harness drives everything through the protocol; faults
/// (`AGENTSTORE_FAULT`) and crash points come from the environment.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Outcome {
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    agentstore::adapter::serve(stdin, stdout).map_err(Failure::Store)
}
