//! Subcommands of the `agentstore` binary, one module each.

pub mod bench;
