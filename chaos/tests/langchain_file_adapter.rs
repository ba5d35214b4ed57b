//! LangChain's `FileChatMessageHistory` (PyPI `langchain-community`,
//! pinned in `chaos/adapters/langchain_file/requirements.txt`) through its
//! adapter on the Python kit. `add_message` rewrites the whole file in
//! place (a truncating open, then one write) and never fsyncs, so a
//! sampled campaign under every default nemesis fails `durable_append`'s
//! process-crash row, its power row and the outcome, each with a replay;
//! one SIGKILL after the truncating open of the last `add_message` loses
//! every acknowledged message; and the findings' standalone reproductions
//! still reproduce, so README.md's Findings stay true.
//!
//! Skipped on a dev machine, with a line on stderr, when the packages are
//! missing; fails under `CI=true`, where `.ci/run` installs them.

use std::path::{Path, PathBuf};

use crate::campaign::{self, row};
use crate::python;

fn adapter_dir() -> PathBuf {
    python::store_adapter_dir("langchain_file")
}

fn available(test: &str) -> bool {
    python::store_available(
        test,
        "langchain_file",
        "import langchain_community.chat_message_histories",
    )
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

/// Two plans per nemesis, two power-loss crash points, four states per
/// point and model, on the small fixture, every default nemesis.
#[test]
fn a_sampled_campaign_fails_the_crash_and_power_rows() {
    if !available("a_sampled_campaign_fails_the_crash_and_power_rows") {
        return;
    }
    let adapter = python::adapter_command(&adapter_dir().join("adapter.py"), &[]);
    let (code, report, stdout) = campaign::run(
        &fixture(),
        &[
            "--adapter",
            &adapter,
            "--trials",
            "2",
            "--powerloss-states",
            "4",
        ],
    );
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    for key in ["durable_append", "durable_append_power_loss", "outcome"] {
        let failing = row(&report, key);
        assert_eq!(failing["verdict"], "fail", "{key}: {stdout}");
        assert!(
            failing["first_violation"]["replay"]
                .as_str()
                .is_some_and(|r| r.contains("--plan ") && r.contains("langchain_file")),
            "{failing}"
        );
    }
    assert!(stdout.contains("the history does not parse"), "{stdout}");
    assert!(stdout.contains("was not fsynced after it"), "{stdout}");
    // The summary counts failing states, not the findings printed (the
    // first per broken invariant): the same number as the models' table.
    let failed: u64 = report["power_loss"]["scenarios"][0]["models"]
        .as_object()
        .unwrap()
        .values()
        .map(|m| m["failed"].as_u64().unwrap())
        .sum();
    assert!(failed > 2, "{stdout}");
    assert!(
        stdout.contains(&format!("model: {failed} failing state(s) (")),
        "{stdout}"
    );
    campaign::assert_rows(
        &report,
        "pass",
        &["orphan_marking", "effect_ledger"],
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

/// The small fixture's first life makes 32 store syscalls; the 30th is the
/// truncating open of the `add_message` that writes its thirteenth record.
/// A SIGKILL right after it leaves an empty file: the twelve records
/// acknowledged before are all gone, and the next life cannot open the
/// session.
#[test]
fn a_kill_after_the_truncating_open_loses_every_acknowledged_message() {
    if !available("a_kill_after_the_truncating_open_loses_every_acknowledged_message") {
        return;
    }
    let adapter = python::adapter_command(&adapter_dir().join("adapter.py"), &[]);
    let (code, stdout) = campaign::replay_plan(&fixture(), "sys-kill-after@30", &adapter);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("openat(ROOT/session.json, O_WRONLY|O_CREAT|O_TRUNC"),
        "{stdout}"
    );
    assert!(stdout.contains("12 acknowledged"), "{stdout}");
    assert!(stdout.contains("VIOLATION acked-durable"), "{stdout}");
    assert!(
        stdout.contains("disk after it was killed: 0 event(s)"),
        "{stdout}"
    );
}

/// `findings/truncate_then_write.py` and `findings/no_fsync.py`: each
/// exits 1 while its finding reproduces on the pinned version.
#[test]
fn the_findings_reproduce() {
    if !available("the_findings_reproduce") {
        return;
    }
    for (script, says) in [
        (
            "truncate_then_write.py",
            "after a SIGKILL inside add_message, .messages raised JSONDecodeError",
        ),
        (
            "no_fsync.py",
            "add_message returned after 0 fsync/fdatasync/sync calls",
        ),
    ] {
        let mut cmd = python::python3();
        cmd.arg(adapter_dir().join("findings").join(script));
        campaign::assert_finding_reproduces(cmd, says);
    }
}
