//! The `agentchaos` subcommands that have a file of their own. `main.rs`
//! parses and dispatches, and holds what they share: [`crate::Failure`]
//! and the exit codes, the store under test (`backend`).

pub mod workers;
