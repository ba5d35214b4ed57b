//! `agentchaos` with the reference store instrumented for source-based
//! coverage (`agentchaos run --coverage`): the same command line, built by
//! `chaos/coverage/build` (the `coverage` feature and its rustc wrapper).

// Its instrumented link brings in the profiler runtime; without it the
// counters would never be written.
#[cfg(not(agentstore_coverage))]
compile_error!("agentchaos-coverage is built by chaos/coverage/build, which instruments it");

#[path = "../main.rs"]
mod cli_main;

fn main() -> std::process::ExitCode {
    cli_main::main()
}
