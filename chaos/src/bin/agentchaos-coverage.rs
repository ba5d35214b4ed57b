//! `agentchaos` with the reference store instrumented for source-based
//! coverage (`agentchaos run --coverage`): the same command line, built by
//! `chaos/coverage/build` (the `coverage` feature and its rustc wrapper).

#[path = "../main.rs"]
mod cli_main;

fn main() -> std::process::ExitCode {
    cli_main::main()
}
