//! The Node adapter kit (`chaos/adapters/node`, package
//! `agentchaos-adapter`): its hello store (an fsync'd JSON-lines file, 74
//! lines, no writer lock) passes a sampled campaign under every default
//! nemesis and the Python kit's self-test, which checks any adapter; a
//! store that logs and writes to `process.stdout` on every call passes the
//! self-test too (the kit keeps the wire); and the kit's unit tests pass.
//!
//! Skipped on a dev machine, with a line on stderr, when `node` or the
//! kit's dependencies are missing; fails under `CI=true`.

use std::path::{Path, PathBuf};

use crate::campaign;
use crate::node;
use crate::python;

fn hello_store() -> PathBuf {
    node::kit_dir().join("examples/hello_store.mjs")
}

/// A sampled campaign (2 plans per nemesis, 2 power-loss crash points) on
/// the small fixture, every default nemesis: every adapter process is a
/// fresh `node` (no fork server), about 70 of them with 4 plans.
#[test]
fn the_hello_store_passes_a_sampled_campaign() {
    if !node::kit_available("the_hello_store_passes_a_sampled_campaign") {
        return;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json");
    let adapter = node::adapter_command(&hello_store());
    let (code, report, stdout) = campaign::run(&fixture, &["--adapter", &adapter, "--trials", "2"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    assert!(report["trials"].as_u64().unwrap() >= 4, "{stdout}");
    campaign::assert_rows(
        &report,
        "pass",
        &[
            "durable_append",
            "durable_append_power_loss",
            "orphan_marking",
            "effect_ledger",
            "outcome",
        ],
        &stdout,
    );
    // What the hello store does not keep, it does not claim; a store
    // without a writer lock is never passed on one.
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

#[test]
fn the_hello_store_passes_the_self_test() {
    if !node::kit_available("the_hello_store_passes_the_self_test")
        || !python::kit_available("the_hello_store_passes_the_self_test")
    {
        return;
    }
    let script = hello_store();
    let out = python::python3()
        .args(["-m", "agentchaos_adapter.selftest", "--", "node"])
        .arg(&script)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("7 passed, 0 failed, 2 skipped"), "{text}");
    assert!(
        text.contains("skip check_a_second_writer_is_locked_out: writer_lock is not claimed"),
        "{text}"
    );
}

/// The noisy store (`examples/noisy_store.mjs`: the hello store calling
/// `console.log`, `.info`, `.debug` and `process.stdout.write` on every
/// call) passes the self-test: what it prints goes to stderr, never among
/// the replies. Its campaign is `node_package.rs`'s, on the kit installed
/// from its tarball (a Node campaign is slow: one process per life).
#[test]
fn a_store_that_prints_passes_the_self_test() {
    if !node::kit_available("a_store_that_prints_passes_the_self_test")
        || !python::kit_available("a_store_that_prints_passes_the_self_test")
    {
        return;
    }
    let out = python::python3()
        .args(["-m", "agentchaos_adapter.selftest", "--", "node"])
        .arg(node::kit_dir().join("examples/noisy_store.mjs"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("7 passed, 0 failed, 2 skipped"), "{text}");
}

/// The kit's own unit tests (`chaos/adapters/node/test`, node:test):
/// failed writes, refusals, schema errors, damage on load, blob checks,
/// bugs, unbacked claims, a store that prints, fd 1 left blocking, and
/// validators.js generated from the current schema.
#[test]
fn the_kit_unit_tests_pass() {
    if !node::kit_available("the_kit_unit_tests_pass") {
        return;
    }
    let out = std::process::Command::new("node")
        .current_dir(node::kit_dir())
        .args(["--test", "test/"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("# pass 11") && text.contains("# fail 0"),
        "{text}"
    );
}
