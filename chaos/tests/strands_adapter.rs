//! Strands Agents' `FileSessionManager` (PyPI `strands-agents`, pinned in
//! `chaos/adapters/strands/requirements.txt`) through its adapter on the
//! Python kit. It never fsyncs, so a sampled campaign under every default
//! nemesis passes `durable_append`'s process-crash row and fails its
//! power row (acknowledged messages lost or unreadable after a power
//! cut), and a kill inside a session's creation fails the outcome, each
//! with a replay; and the findings' standalone reproductions (no fsync in
//! `create_message`; a session wedged by an interrupted creation) still
//! reproduce, so README.md's Findings stay true.
//!
//! Skipped on a dev machine, with a line on stderr, when the packages are
//! missing; fails under `CI=true`, where `.ci/run` installs them.

use std::path::{Path, PathBuf};

use crate::campaign::{self, row};
use crate::python;

fn adapter_dir() -> PathBuf {
    python::store_adapter_dir("strands")
}

fn available(test: &str) -> bool {
    python::store_available(
        test,
        "strands",
        "import strands.session.file_session_manager",
    )
}

/// Two plans per nemesis, two power-loss crash points (the first and the
/// last operation), four states per point and model, on the small
/// fixture, every default nemesis. Strands names its temporary files with
/// `mkstemp`; the syscall nemesis leaves the random part of such a name
/// out when it checks that a fault hit the planned call, so its faults
/// land (before that, every plan past the first message was a trial
/// error).
#[test]
fn a_sampled_campaign_fails_the_power_row_and_the_outcome() {
    if !available("a_sampled_campaign_fails_the_power_row_and_the_outcome") {
        return;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json");
    let adapter = python::adapter_command(&adapter_dir().join("adapter.py"), &[]);
    let (code, report, stdout) = campaign::run(
        &fixture,
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
    let power = row(&report, "durable_append_power_loss");
    assert_eq!(power["verdict"], "fail", "{stdout}");
    assert!(
        power["first_violation"]["replay"]
            .as_str()
            .is_some_and(|r| r.contains("--plan powerloss:") && r.contains("strands")),
        "{power}"
    );
    assert!(stdout.contains("was not fsynced after it"), "{stdout}");
    // A kill inside the session's creation wedges its id.
    let outcome = row(&report, "outcome");
    assert_eq!(outcome["verdict"], "fail", "{stdout}");
    assert!(
        stdout.contains("Session session already exists"),
        "{stdout}"
    );
    campaign::assert_rows(
        &report,
        "pass",
        &["durable_append", "orphan_marking", "effect_ledger"],
        &stdout,
    );
    campaign::assert_rows(
        &report,
        "not supported",
        &[
            "writer_lock",
            "damage_refusal",
            "checkpoint_projection",
            "blobs",
        ],
        &stdout,
    );
}

/// `findings/no_fsync.py` and `findings/wedged_session.py`: each exits 1
/// while its finding reproduces on the pinned version.
#[test]
fn the_findings_reproduce() {
    if !available("the_findings_reproduce") {
        return;
    }
    for (script, says) in [
        (
            "no_fsync.py",
            "create_message returned after 0 fsync/fdatasync/sync calls",
        ),
        (
            "wedged_session.py",
            "FileSessionManager('conversation') raised: Session conversation already exists",
        ),
    ] {
        let mut cmd = python::python3();
        cmd.arg(adapter_dir().join("findings").join(script));
        campaign::assert_finding_reproduces(cmd, says);
    }
}
