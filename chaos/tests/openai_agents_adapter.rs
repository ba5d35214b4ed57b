//! The OpenAI Agents SDK's `SQLiteSession` (PyPI `openai-agents`, pinned
//! in `chaos/adapters/openai_agents/requirements.txt`) through its adapter
//! on the Python kit: a sampled campaign under every default nemesis
//! scores what it claims and never passes what it does not; and the
//! finding's standalone reproduction (a damaged row silently dropped by
//! `get_items`) still reproduces, so README.md's Findings stay true.
//!
//! Skipped on a dev machine, with a line on stderr, when the packages are
//! missing; fails under `CI=true`, where `.ci/run` installs them.

use std::path::{Path, PathBuf};

use crate::campaign::{self, row};
use crate::python;

fn adapter_dir() -> PathBuf {
    python::store_adapter_dir("openai_agents")
}

fn available(test: &str) -> bool {
    python::store_available(test, "openai_agents", "import agents.memory")
}

/// One plan per nemesis and one power-loss crash point on the small
/// fixture, under the kills and power loss: every adapter process
/// imports the whole SDK (about a second). Not the syscall nemesis: the
/// SDK runs each call on `asyncio.to_thread`'s pool, which opens a SQLite
/// connection per pool thread, and whether a call gets a new thread is a
/// race, so its syscalls differ from run to run and a syscall plan cannot
/// be placed (the harness reports that as a trial error, naming the
/// syscall it expected and the one it found). So process crashes inside
/// its writes are not exercised, and `durable_append` says so.
#[test]
fn a_sampled_campaign_scores_what_it_claims() {
    if !available("a_sampled_campaign_scores_what_it_claims") {
        return;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json");
    let adapter = python::adapter_command(&adapter_dir().join("adapter.py"), &[]);
    let (code, report, stdout) = campaign::run(
        &fixture,
        &[
            "--adapter",
            &adapter,
            "--nemesis",
            "points,powerloss",
            "--trials",
            "1",
            "--powerloss-states",
            "2",
        ],
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    campaign::assert_rows(
        &report,
        "pass",
        &[
            "durable_append_power_loss",
            "orphan_marking",
            "effect_ledger",
            "outcome",
        ],
        &stdout,
    );
    assert_eq!(
        row(&report, "durable_append")["verdict"],
        "not exercised",
        "{stdout}"
    );
    campaign::assert_rows(
        &report,
        "not supported",
        &[
            "writer_lock",
            "damage_refusal",
            "torn_tail_repair",
            "checkpoint_projection",
            "blobs",
        ],
        &stdout,
    );
}

/// `findings/skipped_row.py`: exit 1 while `get_items` drops a row whose
/// JSON does not parse, and says how many items came back.
#[test]
fn the_skipped_row_finding_reproduces() {
    if !available("the_skipped_row_finding_reproduces") {
        return;
    }
    let out = python::python3()
        .arg(adapter_dir().join("findings/skipped_row.py"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the finding no longer reproduces (update README.md's Findings): {text}"
    );
    assert!(
        text.starts_with("get_items returned 1 of 2 committed items, without an error"),
        "{text}"
    );
}
