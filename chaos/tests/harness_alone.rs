//! The harness alone, as a test of agentstore: `agentchaos run` with every
//! nemesis this platform runs, on the shipped scenarios, sampled, must pass.
//!
//! It is the test command of the mutation score (`chaos/mutants/score.sh`,
//! chaos/mutants/README.md): cargo-mutants mutates agentstore and runs this
//! file and nothing else, so a mutant is caught only when the harness
//! itself fails the campaign, never because a store unit test did. In the
//! ordinary suite it is a sampled main job; with
//! `AGENTCHAOS_HARNESS_ALONE=full` it runs the unsampled campaign (every
//! plan, every restart), as `chaos/mutants/score.sh --full` asks for the
//! survivors of the sampled one.

use std::path::Path;
use std::process::Command;

/// `agentchaos run` on the shipped scenarios with every nemesis, 12 plans
/// per scenario and nemesis and 12 power-loss crash points (or, full,
/// every plan), and `extra`; asserts a clean pass.
fn assert_passes(extra: &[&str]) {
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let sample: &[&str] = match std::env::var("AGENTCHAOS_HARNESS_ALONE").as_deref() {
        Ok("full") => &["--exhaustive"],
        _ => &["--trials", "12"],
    };
    let mut run = Command::new(env!("CARGO_BIN_EXE_agentchaos"));
    // cargo-mutants kills this test at its timeout (a mutant that loops):
    // the campaign must not run on, taking the cores from the next mutant.
    agentchaos::child::die_with_parent(&mut run);
    let out = run
        .args(["run", "--quiet", "--scenario"])
        .arg(&scenarios)
        .args(sample)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the harness fails the store ({extra:?}):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("0 violation(s), 0 error(s)"), "{stdout}");
}

#[test]
fn the_harness_passes_the_reference_store_on_the_shipped_scenarios() {
    assert_passes(&[]);
}

/// The same against the store's group commit, which Sync never runs, with
/// the plans spent on the deepest restart's lives (a second crash after a
/// re-run, a cut at the offset of an earlier cut): the Sync campaign's
/// plans spread over every restart, and a sample of 12 drawn over the
/// deepest alone missed what a crash after a compaction shows (the
/// context's summary: cargo-mutants' `Projection::compaction -> None`).
#[test]
fn the_harness_passes_the_reference_store_in_batch_mode() {
    assert_passes(&["--durability", "batch", "--restarts", "deepest"]);
}
