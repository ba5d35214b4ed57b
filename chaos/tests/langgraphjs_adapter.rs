//! LangGraph.js's SQLite checkpointer (npm
//! `@langchain/langgraph-checkpoint-sqlite`, pinned in
//! `chaos/adapters/langgraphjs/package-lock.json`) through its adapter on
//! the Node kit. Its commits survive a process crash, so a sampled campaign
//! under the kills and the syscall nemesis passes every claimed row that
//! runs; they are not synced (WAL with better-sqlite3's default
//! `synchronous=NORMAL`), so one power-loss state loses acknowledged
//! checkpoints; and the finding's standalone reproduction still
//! reproduces, so README.md's Findings stay true.
//!
//! Skipped on a dev machine, with a line on stderr, without `node` or
//! without `npm ci --prefix chaos/adapters/langgraphjs`; fails under
//! `CI=true`, where `.ci/run` installs them.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::campaign;
use crate::node;

fn adapter_dir() -> PathBuf {
    node::store_adapter_dir("langgraphjs")
}

fn available(test: &str) -> bool {
    node::store_available(
        test,
        "langgraphjs",
        "require('better-sqlite3'); require('@langchain/langgraph-checkpoint-sqlite')",
    )
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

/// One plan per nemesis on the small fixture, kills and syscall faults
/// (every Node process imports LangChain: power loss is the next test's,
/// on the one state that shows the finding).
#[test]
fn a_sampled_campaign_passes_the_crash_rows() {
    if !available("a_sampled_campaign_passes_the_crash_rows") {
        return;
    }
    let adapter = node::adapter_command(&adapter_dir().join("adapter.mjs"));
    let (code, report, stdout) = campaign::run(
        &fixture(),
        &[
            "--adapter",
            &adapter,
            "--nemesis",
            "points,syscall",
            "--trials",
            "1",
        ],
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    campaign::assert_rows(
        &report,
        "pass",
        &[
            "durable_append",
            "orphan_marking",
            "effect_ledger",
            "outcome",
        ],
        &stdout,
    );
    campaign::assert_rows(
        &report,
        "not supported",
        &[
            "torn_tail_repair",
            "writer_lock",
            "damage_refusal",
            "checkpoint_projection",
            "blobs",
        ],
        &stdout,
    );
}

/// Power lost after the small fixture's 53rd file operation (a write into
/// the WAL): in the strict model, unsynced writes are lost, and no
/// commit was synced, so the four acknowledged events (the session's
/// creation among them) are gone.
#[test]
fn a_power_cut_loses_acknowledged_checkpoints() {
    if !available("a_power_cut_loses_acknowledged_checkpoints") {
        return;
    }
    let adapter = node::adapter_command(&adapter_dir().join("adapter.mjs"));
    let (code, stdout) = campaign::replay_plan(&fixture(), "powerloss:strict:53:1.1", &adapter);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("VIOLATION acked-durable"), "{stdout}");
    assert!(
        stdout.contains("checkpoints.sqlite-wal was not fsynced after them"),
        "{stdout}"
    );
    assert!(stdout.contains("all 4 acknowledged events"), "{stdout}");
}

/// `findings/wal_without_sync.mjs` exits 1 while the saver's connection
/// commits in WAL mode with `synchronous=NORMAL` on the pinned versions.
#[test]
fn the_finding_reproduces() {
    if !available("the_finding_reproduces") {
        return;
    }
    let mut cmd = Command::new("node");
    cmd.arg(adapter_dir().join("findings/wal_without_sync.mjs"))
        .current_dir(adapter_dir());
    campaign::assert_finding_reproduces(
        cmd,
        "put resolved with journal_mode=wal and synchronous=1 (NORMAL)",
    );
}
