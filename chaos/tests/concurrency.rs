//! Parallel appenders under the harness's schedule: a broken group commit
//! is caught on a shipped scenario by the same plan every time, with the
//! same findings, and the unbroken store passes the same plan every time.
//! A plan's `,sched:S` names the interleaving: the same seed replays the
//! same operation order, another seed changes it, and a campaign over
//! several schedules catches what one schedule misses. Nothing depends on
//! which thread the OS runs first.

use std::path::{Path, PathBuf};
use std::process::Command;

use agentchaos::campaign::trial::{self, TrialSetup};
use agentchaos::history::{RunKind, SyncLine};
use agentchaos::nemesis::Plan;
use agentchaos::store::ReferenceBackend;
use agentstore::Durability;

use crate::campaign;

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
    findings(cmd)
}

/// The exit code of a replay and its report from the first violation on.
fn findings(mut replay: Command) -> (i32, String) {
    let out = replay.output().unwrap();
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
/// fdatasync), EIO on the fdatasync of the parallel calls' first
/// group while both followers wait for it (`agentchaos run --durability
/// batch --nemesis syscall --store-fault failed-sync-acks-followers`
/// finds it if the store's syscalls change), a disk full from the second
/// write of that group on (the first appender's line, cut with the failed
/// one, is acknowledged by the group's sync and lost), and the ledger
/// probe that
/// writes two commits of one operation into one group (a ledger that
/// takes in a commit only once a sync covers it accepts the second).
const BROKEN: &[(&str, &str, &str)] = &[
    ("batch-follower-early-ack", "none", "acked-after-sync"),
    (
        "failed-sync-acks-followers",
        "sys-eio@27",
        "acked-after-sync",
    ),
    ("failed-write-cuts-group", "sys-full@25", "acked-durable"),
    (
        "ledger-folded-at-sync",
        "probe:ledger-race@op-triage-1.1",
        "ledger-refuses-double-commit",
    ),
];

/// About 8 s: 80 replays of one trial or probe each.
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

/// `agentchaos replay` of `plan` on the shipped scenario through
/// `agentstore adapter --durability batch`, with `AGENTSTORE_FAULT=fault`.
fn replay_through_adapter(plan: &str, fault: Option<&str>) -> (i32, String) {
    let bin = crate::support::workspace_bin("agentstore");
    let env = fault.map_or(String::new(), |f| format!("env AGENTSTORE_FAULT={f} "));
    let adapter = format!("{env}{} adapter --durability batch", bin.display());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentchaos"));
    cmd.args(["replay", "--scenario"])
        .arg(shipped())
        .args(["--plan", plan, "--adapter", &adapter]);
    findings(cmd)
}

/// Through an adapter that pipelines (`chaos/PROTOCOL.md`, section 10):
/// the parallel calls' group reaches `agentstore adapter`'s Batch session
/// as one batch of requests, written together and synced once. A failed
/// write that cuts the lines of the group written before it (the fault),
/// whose group sync then acknowledges them, is caught by the same plan
/// every time, and the unbroken store passes it every time. One request
/// at a time (`--no-pipeline`) no group has two unsynced lines, and the
/// fault never shows (measured: `agentchaos run --nemesis syscall
/// --exhaustive` passes). About 4 s.
#[test]
fn through_a_pipelining_adapter_a_group_cut_by_a_failed_write_is_caught_every_time() {
    let (fault, plan) = ("failed-write-cuts-group", "sys-enospc@25");
    let first = replay_through_adapter(plan, Some(fault));
    assert_eq!(first.0, 1, "{fault} with {plan}:\n{}", first.1);
    assert!(
        first.1.contains("VIOLATION acked-durable "),
        "the lost line is an acknowledged event:\n{}",
        first.1
    );
    for _ in 1..5 {
        assert_eq!(replay_through_adapter(plan, Some(fault)), first);
    }
    for _ in 0..5 {
        let (code, findings) = replay_through_adapter(plan, None);
        assert_eq!(code, 0, "the unbroken store with {plan}:\n{findings}");
    }
}

/// The order of operations of the unbroken Batch store's crash-free run
/// of the shipped scenario under schedule `sched`: every ack and sync the
/// agent's pipe showed, in its order, each ack with the append it answers.
fn operation_order(sched: u64) -> Vec<String> {
    let path = shipped();
    let scenario =
        agentchaos::scenario::load(&path, agentchaos::scenario::DEFAULT_MAX_INPUT_BYTES).unwrap();
    let backend = ReferenceBackend {
        durability: Durability::batch(),
    };
    let setup = TrialSetup {
        backend: &backend,
        agent_exe: Path::new(env!("CARGO_BIN_EXE_agentchaos")),
        scenario_path: &path,
        files: &scenario.files,
        store_fault: None,
        hang_timeout: agentchaos::campaign::trial::HANG_TIMEOUT,
        max_input_bytes: agentchaos::scenario::DEFAULT_MAX_INPUT_BYTES,
        schedule: sched,
    };
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan::NONE.scheduled(sched);
    let h = trial::run(&setup, plan, &dir.path().join("t"), RunKind::Trial).unwrap();
    let life = &h.lives[0];
    assert!(life.done, "{plan}: {}", life.stderr);
    life.syncs
        .iter()
        .map(|s| match *s {
            SyncLine::Synced(seq) => format!("synced below {seq}"),
            SyncLine::SyncFailed => "sync failed".to_string(),
            SyncLine::Acked { write, seq } => {
                let w = &life.writes[write];
                format!("ack {} {} at {seq}", w.type_name, w.fingerprint)
            }
        })
        .collect()
}

/// About 1 s: the same `sched:S` gives the same operation order in every
/// run, and two seeds give two orders.
#[test]
fn a_schedule_seed_replays_its_operation_order_and_another_seed_changes_it() {
    let first = operation_order(1);
    assert!(first.iter().any(|l| l.starts_with("synced")), "{first:?}");
    for _ in 0..2 {
        assert_eq!(operation_order(1), first, "sched:1 again");
    }
    assert_ne!(operation_order(2), first, "sched:2 interleaves otherwise");
}

/// A follower acknowledged while its leader's sync is in flight is seen
/// only by an interleaving that lets a follower wait while its leader is
/// held before its fdatasync: schedule 18's crash-free run never does,
/// schedule 1's does. A campaign over four schedules catches it, and the
/// unbroken store passes the same campaign. About 1 s.
#[test]
fn an_early_follower_ack_is_missed_by_one_schedule_and_caught_over_four() {
    let fault = "batch-follower-early-ack";
    let (code, findings) = replay("none,sched:18", Some(fault));
    assert_eq!(code, 0, "schedule 18 misses it:\n{findings}");
    let (code, findings) = replay("none,sched:1", Some(fault));
    assert_eq!(code, 1, "schedule 1 shows it:\n{findings}");
    let args = [
        "--durability",
        "batch",
        "--schedules",
        "4",
        "--nemesis",
        "points",
        "--trials",
        "2",
        "--restarts",
        "none",
    ];
    let (code, report, stdout) =
        campaign::run(&shipped(), &[&args[..], &["--store-fault", fault]].concat());
    assert_eq!(code, 1, "{stdout}");
    let rows: Vec<&str> = report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert_eq!(rows[0], "parallel-tool-calls");
    assert!(
        rows[1..]
            .iter()
            .all(|r| r.starts_with("parallel-tool-calls.sched-")),
        "{rows:?}"
    );
    let caught = report["violations"].as_array().unwrap();
    assert!(
        caught.iter().any(|v| v["invariant"] == "acked-after-sync"),
        "{stdout}"
    );
    for v in caught {
        let (row, plan) = (v["scenario"].as_str().unwrap(), v["plan"].as_str().unwrap());
        let sched = row.strip_prefix("parallel-tool-calls.sched-");
        assert_eq!(
            plan.split_once(",sched:").map(|(_, s)| s),
            sched,
            "{row} replays as {plan}"
        );
    }
    let (code, _, stdout) = campaign::run(&shipped(), &args);
    assert_eq!(code, 0, "the unbroken store:\n{stdout}");
}
