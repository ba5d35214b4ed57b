//! Parallel appenders under the harness's schedule: a broken group commit
//! is caught on a shipped scenario by the same plan every time, with the
//! same findings, and the unbroken store passes the same plan every time.
//! Nothing depends on which thread the OS runs first.

use std::path::PathBuf;
use std::process::Command;

/// The shipped scenario with parallel tool calls.
fn shipped() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios/parallel-tool-calls.json")
}

/// `agentchaos replay` of `plan` on the shipped scenario in Batch mode:
/// its exit code and its report from the first violation on (pids, the
/// one thing that differs between two runs, left out).
fn replay(plan: &str, fault: Option<&str>) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentchaos"));
    cmd.args(["replay", "--scenario"]).arg(shipped()).args([
        "--plan",
        plan,
        "--durability",
        "batch",
    ]);
    if let Some(f) = fault {
        cmd.args(["--store-fault", f]);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let findings = stdout
        .find("VIOLATION")
        .map_or("", |at| &stdout[at..])
        .to_string();
    (out.status.code().unwrap_or(-1), findings)
}

/// Each broken group commit, the plan that shows it on the shipped
/// scenario and the invariant that names it: `none` (the crash-free run:
/// the schedule lets a follower wait while its leader is held before its
/// fdatasync), and EIO on the fdatasync of the parallel calls' first
/// group while both followers wait for it (`agentchaos run --durability
/// batch --nemesis syscall --store-fault failed-sync-acks-followers`
/// finds it if the store's syscalls change).
const BROKEN: &[(&str, &str, &str)] = &[
    ("batch-follower-early-ack", "none", "acked-after-sync"),
    (
        "failed-sync-acks-followers",
        "sys-eio@27",
        "acked-after-sync",
    ),
];

/// About 4 s: 40 replays of one trial each.
#[test]
fn a_broken_group_commit_fails_ten_replays_of_ten_and_the_store_passes_ten_of_ten() {
    for &(fault, plan, invariant) in BROKEN {
        let first = replay(plan, Some(fault));
        assert_eq!(first.0, 1, "{fault} with {plan}:\n{}", first.1);
        assert!(
            first.1.contains(&format!("VIOLATION {invariant} ")),
            "{fault}: {invariant} names it:\n{}",
            first.1
        );
        for _ in 1..10 {
            assert_eq!(
                replay(plan, Some(fault)),
                first,
                "{fault} with {plan}: the same findings every time"
            );
        }
        for _ in 0..10 {
            let (code, findings) = replay(plan, None);
            assert_eq!(code, 0, "the unbroken store with {plan}:\n{findings}");
        }
    }
}
