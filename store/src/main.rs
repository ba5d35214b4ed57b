//! The `agentstore` command line: a thin layer over the library.
//!
//! Each subcommand lives in `cli/<name>.rs` with its `Args` and `run`; this
//! file only parses and dispatches. Errors are one line on stderr and an
//! exit code (see `cli::Failure`), never a panic.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A durable, self-checking JSONL session store for AI agents.
#[derive(Debug, Parser)]
#[command(name = "agentstore", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Ls(cli::ls::Args),
    Append(cli::append::Args),
    Show(cli::show::Args),
    Fsck(cli::fsck::Args),
    Repair(cli::repair::Args),
    Salvage(cli::salvage::Args),
    Recover(cli::recover::Args),
    Context(cli::context::Args),
    Checkpoint(cli::checkpoint::Args),
    Export(cli::export::Args),
    Adapter(cli::adapter::Args),
    Bench(cli::bench::Args),
}

fn main() -> ExitCode {
    let command = match Cli::try_parse() {
        Ok(cli) => cli.command,
        Err(e) => return cli::usage_error(e),
    };
    cli::finish(match command {
        Command::Ls(args) => cli::ls::run(args),
        Command::Append(args) => cli::append::run(args),
        Command::Show(args) => cli::show::run(args),
        Command::Fsck(args) => cli::fsck::run(args),
        Command::Repair(args) => cli::repair::run(args),
        Command::Salvage(args) => cli::salvage::run(args),
        Command::Recover(args) => cli::recover::run(args),
        Command::Context(args) => cli::context::run(args),
        Command::Checkpoint(args) => cli::checkpoint::run(args),
        Command::Export(args) => cli::export::run(args),
        Command::Adapter(args) => cli::adapter::run(args),
        Command::Bench(args) => cli::bench::run(args),
    })
}
