//! The PostgreSQL store (`store-pg`, `agentstore-pg adapter`) under the
//! harness, on a private cluster each test starts itself: the kills of a
//! campaign with 0 violations, and its faults caught with their replay
//! commands.
//!
//! The syscall nemesis does not apply: it faults the file-mutating
//! syscalls under the trial's store root, and this store writes no file
//! (its I/O is the database's socket). Power loss models a file system
//! under the store, not a database server.

use std::path::{Path, PathBuf};

use agentstore_pg::cluster::{self, Cluster, ClusterError, ClusterOptions};

use crate::campaign;
use crate::support;

/// A started private cluster, or `None` (a skip) without PostgreSQL on a
/// dev machine; under `CI=true` a missing PostgreSQL fails.
fn private_cluster() -> Option<Cluster> {
    match Cluster::start(ClusterOptions::default()) {
        Ok(c) => Some(c),
        Err(e @ ClusterError::NotInstalled) if !cluster::required() => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("cannot start a private PostgreSQL cluster: {e}"),
    }
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

/// The adapter command line for `cluster`, with `--fault` when given.
fn pg_adapter(cluster: &Cluster, fault: Option<&str>) -> String {
    let bin = support::workspace_bin("agentstore-pg", "agentstore-pg");
    let mut words = vec![
        bin.display().to_string(),
        "adapter".into(),
        "--dsn".into(),
        cluster.dsn(),
    ];
    if let Some(f) = fault {
        words.extend(["--fault".into(), f.to_string()]);
    }
    shlex::try_join(words.iter().map(String::as_str)).expect("no NUL in the command")
}

#[test]
fn the_postgres_store_passes_the_kills_of_a_campaign() {
    let Some(cluster) = private_cluster() else {
        return;
    };
    let adapter = pg_adapter(&cluster, None);
    let (code, report, stdout) =
        campaign::run(&fixture(), &["--adapter", &adapter, "--nemesis", "points"]);
    assert_eq!(code, 0, "the PostgreSQL store must pass:\n{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    assert!(report["trials"].as_u64().unwrap() > 20, "{stdout}");
    let s = &report["scenarios"][0];
    assert_eq!(
        s["crash_points_covered"], s["crash_points_total"],
        "{stdout}"
    );
    for r in ["orphan_marking", "effect_ledger", "checkpoint_projection"] {
        assert_eq!(
            campaign::row(&report, r)["verdict"],
            "pass",
            "{r}:\n{stdout}"
        );
    }
    // Kills between requests cannot land inside the store's writes, and
    // the syscall nemesis has no file of this store to fault: its
    // durability is the database crash's to show (below), never passed here.
    assert_eq!(
        campaign::row(&report, "durable_append")["verdict"],
        "not exercised",
        "{stdout}"
    );
    for r in ["torn_tail_repair", "damage_refusal", "writer_lock"] {
        assert_eq!(
            campaign::row(&report, r)["verdict"],
            "not supported",
            "{r}:\n{stdout}"
        );
    }
}

#[test]
fn a_ledger_without_its_unique_constraint_is_caught_and_replayed() {
    let Some(cluster) = private_cluster() else {
        return;
    };
    let adapter = pg_adapter(&cluster, Some("ledger-without-unique"));
    let (code, report, stdout) =
        campaign::run(&fixture(), &["--adapter", &adapter, "--nemesis", "points"]);
    assert_eq!(
        code, 1,
        "the broken ledger must fail the campaign:\n{stdout}"
    );
    assert_eq!(
        campaign::row(&report, "effect_ledger")["verdict"],
        "fail",
        "{stdout}"
    );
    let v = campaign::first_violation(&report, "ledger-refuses-double-commit");
    let replay = v["replay"].as_str().unwrap();
    assert!(replay.contains("ledger-without-unique"), "{replay}");
    let (code, out) = campaign::replay(replay);
    assert_eq!(code, 1, "the replay reproduces the violation:\n{out}");
    assert!(out.contains("VIOLATION"), "{out}");
}

/// `agentchaos db-crash` with `args`: exit code and stdout. `None` (a
/// skip) without PostgreSQL on a dev machine.
fn db_crash(fault: Option<&str>, args: &[&str]) -> Option<(i32, String)> {
    if cluster::find_bindir().is_none() {
        assert!(
            !cluster::required(),
            "PostgreSQL is not installed (CI=true)"
        );
        eprintln!("skipped: PostgreSQL is not installed");
        return None;
    }
    let bin = support::workspace_bin("agentstore-pg", "agentstore-pg");
    let mut adapter = format!("{} adapter", bin.display());
    if let Some(f) = fault {
        adapter.push_str(&format!(" --fault {f}"));
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(["db-crash", "--adapter", &adapter])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    Some((out.status.code().unwrap_or(-1), format!("{stdout}{stderr}")))
}

#[test]
fn acknowledged_events_survive_every_database_crash() {
    let Some((code, out)) = db_crash(None, &[]) else {
        return;
    };
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "db-crash: 24 trial(s), 108 acknowledged append(s) before the crashes, 0 violation(s)"
        ),
        "{out}"
    );
}

#[test]
fn asynchronous_commit_is_caught_by_a_crash_with_the_wal_writer_frozen() {
    let Some((code, out)) = db_crash(
        Some("synchronous-commit-off"),
        &["--crash", "kill-frozen", "--after", "3"],
    ) else {
        return;
    };
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("VIOLATION acked-durable"), "{out}");
    let replay = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay:   "))
        .unwrap_or_else(|| panic!("no replay line:\n{out}"));
    assert!(
        replay.contains("--fault synchronous-commit-off"),
        "{replay}"
    );
    let (code, again) = campaign::replay(replay);
    assert_eq!(code, 1, "the replay reproduces the loss:\n{again}");
    assert!(again.contains("VIOLATION acked-durable"), "{again}");
}
