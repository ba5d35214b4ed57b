//! The `agentstore` command line: a thin layer over the library.
//!
//! Each subcommand lives in `cli::<name>` with its clap arguments and a
//! `run(args)`. Errors are one line on stderr and a non-zero exit.

mod cli;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "agentstore", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the agentchaos adapter protocol (chaos/PROTOCOL.md) on stdin/stdout.
    Adapter(cli::adapter::AdapterArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Adapter(args) => cli::adapter::run(args),
    };
    if let Err(e) = result {
        eprintln!("agentstore: {e}");
        std::process::exit(1);
    }
}
