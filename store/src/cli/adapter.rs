//! `agentstore adapter`: the reference store behind the agentchaos adapter
//! protocol (`chaos/PROTOCOL.md`), on stdin and stdout.

use super::{Failure, Outcome};

/// Serve the agentchaos adapter protocol (JSON lines) on stdin/stdout until
/// stdin ends. The harness drives everything through the protocol; faults
/// (`AGENTSTORE_FAULT`) and crash points come from the environment.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Claim only these capabilities in `hello`, comma-separated (default:
    /// all). The store behaves the same; this shows how the harness scores
    /// a store that claims less.
    #[arg(long, value_name = "CAP,CAP…")]
    claims: Option<String>,
    /// Open every session with this durability: `sync` (one fdatasync per
    /// append) or `batch` (group commit: concurrent appends share one).
    #[arg(long, value_name = "sync|batch", default_value = "sync")]
    durability: agentstore::Durability,
}

pub fn run(args: Args) -> Outcome {
    use agentchaos_protocol::Capability;
    use agentstore::adapter::ServeOptions;
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    let mut options = ServeOptions {
        durability: args.durability,
        ..ServeOptions::default()
    };
    let Some(list) = args.claims else {
        return agentstore::adapter::serve_with(stdin, stdout, &options).map_err(Failure::Store);
    };
    options.claims = list
        .split(',')
        .filter(|c| !c.is_empty())
        .map(|c| {
            Capability::from_name(c).ok_or_else(|| {
                let known: Vec<&str> = Capability::ALL.iter().map(|k| k.name()).collect();
                Failure::Usage(format!(
                    "--claims: {} is not a capability (known: {})",
                    agentstore::error::quote(c),
                    known.join(", ")
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    agentstore::adapter::serve_with(stdin, stdout, &options).map_err(Failure::Store)
}
