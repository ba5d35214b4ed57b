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
    /// Never serve as a fork server, even when stdin is a Unix socket: a
    /// version 1 process per life and per observation, for comparing the
    /// two (`chaos/PROTOCOL.md`, section 8).
    #[arg(long)]
    no_fork: bool,
    /// Answer one request at a time: never say `pipeline` in `hello`, so
    /// the harness's parallel appends arrive one by one, each synced
    /// alone even in `batch` (`chaos/PROTOCOL.md`, section 10).
    #[arg(long)]
    no_pipeline: bool,
}

pub fn run(args: Args) -> Outcome {
    use agentchaos_protocol::Capability;
    use agentstore::adapter::ServeOptions;
    let mut options = ServeOptions {
        durability: args.durability,
        pipeline: !args.no_pipeline,
        ..ServeOptions::default()
    };
    let fork = !args.no_fork;
    let Some(list) = args.claims else {
        return serve(&options, fork);
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
    serve(&options, fork)
}

/// Serves on stdin and stdout; when stdin is a Unix socket (and `fork`),
/// as version 2's fork server (`chaos/PROTOCOL.md`, section 8), each
/// forked child serving as a plain process does.
fn serve(options: &agentstore::adapter::ServeOptions, fork: bool) -> Outcome {
    use agentchaos_protocol::{fork_server, FORK_PROTOCOL_VERSION};
    if !fork || !fork_server::stdin_is_socket() {
        return serve_stdio(options);
    }
    let hello = || agentstore::adapter::hello(&options.claims, FORK_PROTOCOL_VERSION, false);
    // A child's exit code, as `finish` gives it for a plain process: only
    // I/O on its streams fails `serve_with`.
    let child = || match serve_stdio(options) {
        Ok(()) => 0,
        Err(Failure::Store(e)) => {
            eprintln!(
                "agentstore: {}",
                agentstore::error::one_line(&e.to_string())
            );
            1
        }
        Err(_) => 1,
    };
    fork_server::serve(&hello, &child).map_err(|e| {
        Failure::Store(agentstore::error::Error::io(
            "serve the fork server on",
            "stdin",
        )(e))
    })
}

fn serve_stdio(options: &agentstore::adapter::ServeOptions) -> Outcome {
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    agentstore::adapter::serve_with(stdin, stdout, options).map_err(Failure::Store)
}
