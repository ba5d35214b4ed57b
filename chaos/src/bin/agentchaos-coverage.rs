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
    // The profile runtime writes a profile when any process of this binary
    // exits, into the working directory unless `LLVM_PROFILE_FILE` names
    // one. Unless a parent named one (`run --coverage` does for each agent
    // life), write none: `--help`, a run without `--coverage` and its
    // children leave nothing behind.
    if std::env::var_os("LLVM_PROFILE_FILE").is_none() {
        if let Err(e) = agentchaos::coverage::reexec_without_profile() {
            eprintln!("agentchaos-coverage: {e}");
            return std::process::ExitCode::from(agentchaos::agent::EXIT_HARNESS_FAILED);
        }
    }
    cli_main::main()
}
