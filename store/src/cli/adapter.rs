//! `agentstore adapter`: the reference store behind the agentchaos adapter
//! protocol, on stdin and stdout (see `agentstore::adapter`).

use agentstore::Result;

/// Arguments of `agentstore adapter` (none: the harness drives everything
/// through the protocol; faults and crash points come from the environment).
#[derive(Debug, clap::Args)]
pub struct AdapterArgs {}

/// Serves the protocol until stdin ends.
pub fn run(_args: AdapterArgs) -> Result<()> {
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    agentstore::adapter::serve(stdin, stdout)
}
