//! Google ADK's `DatabaseSessionService` on SQLite (PyPI `google-adk`,
//! pinned in `chaos/adapters/adk/requirements.txt`, in its own virtual
//! environment) through its adapter on the Python kit. The commit of its
//! rollback journal (an unlink) is never synced, so a power cut after the
//! last one rolls an acknowledged event back; a kill inside its table
//! creation wedges the database; and the findings' standalone
//! reproductions still reproduce, so README.md's Findings stay true.
//!
//! Skipped on a dev machine, with a line on stderr, without the virtual
//! environment; fails under `CI=true`, where `.ci/run` makes it.

use std::path::{Path, PathBuf};

use crate::campaign::{self, row};
use crate::python;

fn adapter_dir() -> PathBuf {
    python::store_adapter_dir("adk")
}

fn available(test: &str) -> bool {
    python::store_available_in_venv(test, "adk", "import google.adk.sessions, aiosqlite")
}

/// Two plans per nemesis, two power-loss crash points (the first and the
/// last file operation), two states per point and model, on the small
/// fixture, every default nemesis. The last operation is the unlink of
/// the journal that commits the last event.
#[test]
fn a_sampled_campaign_fails_the_power_row() {
    if !available("a_sampled_campaign_fails_the_power_row") {
        return;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json");
    let adapter = python::adapter_command_with(
        &python::venv_python("adk"),
        &adapter_dir().join("adapter.py"),
        &[],
    );
    let (code, report, stdout) = campaign::run(
        &fixture,
        &[
            "--adapter",
            &adapter,
            "--trials",
            "2",
            "--powerloss-states",
            "2",
        ],
    );
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    let power = row(&report, "durable_append_power_loss");
    assert_eq!(power["verdict"], "fail", "{stdout}");
    assert!(
        power["first_violation"]["replay"]
            .as_str()
            .is_some_and(|r| r.contains("--plan powerloss:") && r.contains("adk")),
        "{power}"
    );
    assert!(
        stdout.contains("relies on the removal of sessions.db-journal"),
        "{stdout}"
    );
    // The crash rows are left out: which syscalls the sample faults is
    // the sample's, and one of them (the next test's) wedges the database.
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

/// The small fixture's first life makes 557 store syscalls; the 19th
/// syncs the root directory inside the first `prepare_tables`, after the
/// tables' transaction and before the schema version's. A SIGKILL there
/// leaves tables without a version, and every later open raises.
#[test]
fn a_kill_inside_table_creation_wedges_the_database() {
    if !available("a_kill_inside_table_creation_wedges_the_database") {
        return;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json");
    let adapter = python::adapter_command_with(
        &python::venv_python("adk"),
        &adapter_dir().join("adapter.py"),
        &[],
    );
    let (code, stdout) = campaign::replay_plan(&fixture, "sys-kill-before@19", &adapter);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("VIOLATION exactly-once-outcome"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Schema version not found in adk_internal_metadata"),
        "{stdout}"
    );
}

/// `findings/journal_unlink_not_synced.py` exits 1 while the service
/// commits in DELETE mode with `synchronous=FULL`, and
/// `findings/interrupted_table_creation.py` while a kill between the two
/// transactions of `prepare_tables` wedges the database, on the pinned
/// versions.
#[test]
fn the_findings_reproduce() {
    if !available("the_findings_reproduce") {
        return;
    }
    for (script, says) in [
        (
            "journal_unlink_not_synced.py",
            "append_event committed with journal_mode=delete and synchronous=2 (FULL)",
        ),
        (
            "interrupted_table_creation.py",
            "after a SIGKILL inside the first create_session, every call raises",
        ),
    ] {
        let mut cmd = python::python(python::venv_python("adk"));
        cmd.arg(adapter_dir().join("findings").join(script));
        campaign::assert_finding_reproduces(cmd, says);
    }
}
