//! The Python adapter kit (`chaos/adapters/python`, package
//! `agentchaos_adapter`): its hello store (an fsync'd JSON-lines file, 79
//! lines) passes a sampled campaign under every default nemesis and the
//! kit's self-test; the self-test catches a store that breaks the protocol;
//! the kit's unit tests pass; a claim the store cannot back stops the
//! adapter with one line; a store that prints, logs and writes to fd 1 on
//! every call passes the self-test and a campaign (the kit keeps the wire);
//! and, in CI, the kit pip installed is the one that ships the committed
//! schema.
//!
//! Skipped on a dev machine, with a line on stderr, when `python3` cannot
//! import the kit (it needs `jsonschema`); fails under `CI=true`.

use crate::campaign;
use crate::python;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn hello_store() -> PathBuf {
    python::kit_dir().join("examples/hello_store.py")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// `python3 -m agentchaos_adapter.selftest -- ADAPTER…`.
fn selftest(adapter: &[&str]) -> (Output, String) {
    let out = python::python3()
        .args(["-m", "agentchaos_adapter.selftest", "--"])
        .args(adapter)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// A sampled campaign (4 plans per nemesis, 4 power-loss crash points) on
/// the small fixture, every default nemesis: about 20 s on two cores.
#[test]
fn the_hello_store_passes_a_sampled_campaign() {
    if !python::kit_available("the_hello_store_passes_a_sampled_campaign") {
        return;
    }
    let adapter = python::adapter_command(&hello_store(), &[]);
    let (code, report, stdout) = campaign::run(
        &fixture("small.json"),
        &["--adapter", &adapter, "--trials", "4"],
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    assert!(report["trials"].as_u64().unwrap() >= 8, "{stdout}");
    campaign::assert_rows(
        &report,
        "pass",
        &[
            "durable_append",
            "durable_append_power_loss",
            "orphan_marking",
            "effect_ledger",
            "writer_lock",
            "outcome",
        ],
        &stdout,
    );
    // What the hello store does not keep, it does not claim.
    campaign::assert_rows(
        &report,
        "not supported",
        &["damage_refusal", "checkpoint_projection", "blobs"],
        &stdout,
    );
}

/// The noisy store (`examples/noisy_store.py`: the hello store printing,
/// logging on a stdout handler set up before the kit's import, writing to
/// fd 1 and through C's `printf` on every call) passes the self-test (an
/// adapter started per process, protocol version 1) and a campaign whose
/// lives and observers are children of its fork server: the kit keeps its
/// stdout for the replies in both, and its children's.
#[test]
fn a_store_that_prints_keeps_a_clean_wire() {
    if !python::kit_available("a_store_that_prints_keeps_a_clean_wire") {
        return;
    }
    let script = python::kit_dir().join("examples/noisy_store.py");
    let (out, text) = selftest(&[
        python::python3_path().to_str().unwrap(),
        script.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("8 passed, 0 failed, 1 skipped"), "{text}");

    let adapter = python::adapter_command(&script, &[]);
    let (code, report, stdout) = campaign::run(
        &fixture("small.json"),
        &[
            "--adapter",
            &adapter,
            "--nemesis",
            "points",
            "--trials",
            "2",
        ],
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    assert!(
        report["adapter_processes"]["forked"].as_u64().unwrap() > 0,
        "{stdout}"
    );
    campaign::assert_rows(
        &report,
        "pass",
        &["orphan_marking", "effect_ledger", "writer_lock", "outcome"],
        &stdout,
    );
}

#[test]
fn the_hello_store_passes_the_self_test() {
    if !python::kit_available("the_hello_store_passes_the_self_test") {
        return;
    }
    let script = hello_store();
    let (out, text) = selftest(&[
        python::python3_path().to_str().unwrap(),
        script.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(" 0 failed, 1 skipped"), "{text}");
    assert!(
        text.contains(
            "skip check_projection_is_the_fold_of_the_events: checkpoint_projection is not claimed"
        ),
        "{text}"
    );
}

/// The self-test passes the reference store (so its checks are the
/// protocol's, not the kit's) and fails a hand-written store that accepts
/// protocol 3 (a version no adapter speaks), a session id escaping its
/// root and `events` before `open`.
#[test]
fn the_self_test_passes_agentstore_and_catches_a_sloppy_store() {
    if !python::kit_available("the_self_test_passes_agentstore_and_catches_a_sloppy_store") {
        return;
    }
    let agentstore = support::workspace_bin("agentstore");
    let (out, text) = selftest(&[agentstore.to_str().unwrap(), "adapter"]);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("9 passed, 0 failed, 0 skipped"), "{text}");

    let sloppy = fixture("rewriting_store.py");
    let (out, text) = selftest(&[
        python::python3_path().to_str().unwrap(),
        sloppy.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for line in [
        "FAIL check_hello_names_the_store_and_known_claims: hello {'protocol': 3} was accepted",
        "FAIL check_open_answers_not_found_exists_and_invalid: open {",
        "FAIL check_bad_requests_are_refused_and_write_nothing: events {} was accepted",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
}

/// The kit's own unit tests (`chaos/adapters/python/tests`, stdlib
/// unittest): failed writes, refusals, damage on load, blob checks, bugs,
/// and the compiled schema checks against jsonschema.
#[test]
fn the_kit_unit_tests_pass() {
    if !python::kit_available("the_kit_unit_tests_pass") {
        return;
    }
    let out = python::python3()
        .args(["-B", "-m", "unittest", "discover", "-s"])
        .arg(python::kit_dir().join("tests"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Ran 13 tests"), "{text}");
}

#[test]
fn bad_usage_and_unbacked_claims_are_one_line_and_exit_2() {
    if !python::kit_available("bad_usage_and_unbacked_claims_are_one_line_and_exit_2") {
        return;
    }
    let (out, text) = selftest(&["no-such-adapter-program"]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert_eq!(
        text.trim(),
        "selftest: cannot run the adapter: 'no-such-adapter-program' is not an executable"
    );

    let store = "import sys\n\
        from agentchaos_adapter import Store, serve\n\
        class S(Store):\n    claims = ('blobs', 'teleport')\n\
        sys.exit(serve(S()))\n";
    let out = python::python3().args(["-c", store]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing but replies on stdout");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "python-store adapter: unknown capability 'teleport'; claims blobs (needs put_blob, get_blob)"
    );
}

/// What `.ci/run` installed (`pip install ./chaos/adapters/python`) is
/// importable without the repository on the path and ships the committed
/// schema as package data. Only under CI: a dev machine need not install it.
#[test]
fn in_ci_the_installed_kit_ships_the_committed_schema() {
    if !python::in_ci() {
        eprintln!("SKIP in_ci_the_installed_kit_ships_the_committed_schema: only under CI=true");
        return;
    }
    // Importing the kit takes stdout for an adapter's replies; this
    // process is no adapter and reports on it.
    let probe = "import agentchaos_adapter, pathlib, sys\n\
        agentchaos_adapter.wire.release()\n\
        d = pathlib.Path(agentchaos_adapter.__file__).parent\n\
        sys.stdout.write(str(d) + '\\n' + (d / 'protocol.schema.json').read_text())";
    let out = Command::new("python3")
        .current_dir(std::env::temp_dir())
        .env_remove("PYTHONPATH")
        .args(["-c", probe])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "CI=true and the kit is not installed (python3 -m pip install ./chaos/adapters/python): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (dir, schema) = text.split_once('\n').unwrap();
    assert!(
        !Path::new(dir).starts_with(python::kit_dir()),
        "imported from the source, not an installed copy: {dir}"
    );
    let committed =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../protocol/schema/protocol.schema.json");
    assert!(
        schema == std::fs::read_to_string(&committed).unwrap(),
        "the installed kit ({dir}) ships another schema than {}: reinstall it",
        committed.display()
    );
}
