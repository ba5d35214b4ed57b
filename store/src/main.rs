//! The `agentstore` command line: a thin layer over the library.
//!
//! Each subcommand lives in `cli::<name>` and returns the process exit code;
//! errors are one line on stderr, never a panic.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "agentstore",
    version,
    about = "A durable JSONL session store for AI agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure this disk's sync latency and the store's overhead on top of it.
    Bench(cli::bench::Args),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Bench(args) => cli::bench::run(args),
    }
}
