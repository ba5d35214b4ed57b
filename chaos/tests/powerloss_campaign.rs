//! `agentchaos run --nemesis powerloss` end to end: agentstore passes every state of every
//! model on a small scenario, and each power-loss mutant is caught naming
//! the persistence assumption it relied on, with a replay that rebuilds the
//! state and fails the same way.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const AGENTCHAOS: &str = env!("CARGO_BIN_EXE_agentchaos");

fn small() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

fn adapter(fault: Option<&str>) -> String {
    let store = support::workspace_bin("agentstore");
    match fault {
        Some(f) => format!("env AGENTSTORE_FAULT={f} {} adapter", store.display()),
        None => format!("{} adapter", store.display()),
    }
}

/// A campaign of the power-loss nemesis alone.
fn powerloss(args: &[&str]) -> (Output, String) {
    let out = Command::new(AGENTCHAOS)
        .args(["run", "--nemesis", "powerloss", "--quiet", "--jobs", "2"])
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

#[test]
fn agentstore_passes_every_state_of_every_model() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let a = adapter(None);
    let (out, text) = powerloss(&[
        "--scenario",
        small().to_str().unwrap(),
        "--adapter",
        &a,
        "--powerloss-points",
        "1000",
        "--powerloss-states",
        "256",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let power = &report["power_loss"];
    let sc = &power["scenarios"][0];
    assert_eq!(sc["error"], serde_json::Value::Null, "{text}");
    assert!(sc["acked"].as_u64().unwrap() >= 8, "{sc}");
    let ops = sc["ops"].as_u64().unwrap();
    for model in ["strict", "ext4-ordered", "weak"] {
        let m = &sc["models"][model];
        assert_eq!(
            m["points"].as_u64(),
            Some(ops + 1),
            "{model}: every crash point"
        );
        assert!(m["states"].as_u64().unwrap() > ops, "{model}: {m}");
        assert_eq!(m["passed"], m["states"], "{model}: {m}\n{text}");
    }
    assert_eq!(sc["models"]["strict"]["sampled_points"], 0);
    assert_eq!(sc["violations"], serde_json::json!([]));
    assert!(power["states_per_second"].as_f64().unwrap() > 0.0);
    assert_eq!(power["recovered_through"], a.as_str());
}

/// Within a budget of crash points below the ops (sites take at most
/// half of it), every (syscall kind, file role) pair the recordings
/// reached gets a crash state right after one of its ops: the log's
/// fdatasyncs, the checkpoint's and the blobs' fsyncs and renames, the
/// directories' fsyncs. A budget below the site count says which sites it
/// left out.
#[test]
fn a_sampled_campaign_reaches_every_durability_site() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let blob = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/large-output-blob.json");
    let (out, text) = powerloss(&[
        "--scenario",
        small().to_str().unwrap(),
        "--scenario",
        blob.to_str().unwrap(),
        "--powerloss-model",
        "strict",
        "--powerloss-states",
        "1",
        "--powerloss-points",
        "24",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let power = &report["power_loss"];
    let sites = power["durability_sites"].as_u64().unwrap();
    assert_eq!(power["durability_sites_reached"], sites, "{power}");
    let mut named = Vec::new();
    for sc in power["scenarios"].as_array().unwrap() {
        assert_eq!(sc["crash_points"], 24, "{sc}");
        assert!(
            sc["ops"].as_u64().unwrap() > 24 * 2,
            "a budget below the ops: {sc}"
        );
        for s in sc["sites"].as_array().unwrap() {
            let k = s["crash_after"].as_u64().expect("every site reached");
            assert!(k >= 1, "{s}");
            named.push(s["site"].as_str().unwrap().to_string());
        }
    }
    for site in [
        "fdatasync log",
        "fsync directory",
        "fsync checkpoint",
        "rename checkpoint",
        "fsync blob",
        "rename blob",
    ] {
        assert!(named.iter().any(|n| n == site), "{site} not in {named:?}");
    }
    assert!(
        text.contains(&format!(
            "power-loss durability sites: {sites} of {sites} reached by a crash state"
        )),
        "{text}"
    );

    let (out, text) = powerloss(&[
        "--scenario",
        blob.to_str().unwrap(),
        "--powerloss-model",
        "strict",
        "--powerloss-states",
        "1",
        "--powerloss-points",
        "3",
    ]);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("; not reached: ") && text.contains("(raise --powerloss-points)"),
        "{text}"
    );
}

/// Runs the mutant on the small scenario and returns the report text.
fn caught(fault: &str, invariant: &str, relies_on: &[&str]) -> String {
    caught_with(fault, &["--powerloss-states", "4"], invariant, relies_on)
}

fn caught_with(fault: &str, bounds: &[&str], invariant: &str, relies_on: &[&str]) -> String {
    let a = adapter(Some(fault));
    let scenario = small();
    let mut args = vec![
        "--scenario",
        scenario.to_str().unwrap(),
        "--adapter",
        &a,
        "--powerloss-model",
        "weak",
    ];
    args.extend(bounds);
    let (out, text) = powerloss(&args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{fault} must be caught:\n{text}"
    );
    assert!(
        text.contains(&format!("VIOLATION {invariant} in small")),
        "{fault}: expected {invariant}:\n{text}"
    );
    // The minimized state names exactly the assumption.
    let named = text
        .lines()
        .filter(|l| l.trim_start().starts_with("relies on"))
        .any(|l| relies_on.iter().all(|part| l.contains(part)));
    assert!(named, "{fault}: no assumption with {relies_on:?}:\n{text}");
    assert!(
        text.contains("replay: agentchaos replay --scenario "),
        "{text}"
    );
    text
}

const LOG: &str = "sessions/session/events.jsonl";

/// With more states, `weak` also leaves garbage before a valid line: a
/// damage refusal that loses acknowledged events is a violation too.
#[test]
fn no_fdatasync_is_caught() {
    let text = caught_with(
        "no-fdatasync",
        &["--powerloss-states", "32", "--powerloss-points", "16"],
        "acked-durable",
        &[
            "relies on write op #",
            &format!("to {LOG} (bytes "),
            &format!("surviving: {LOG} was not fsynced after it"),
        ],
    );
    assert!(
        text.contains("VIOLATION log-prefix in small")
            && text.contains("found: damage: damaged sessions/session/events.jsonl")
            && text.contains("a valid line starts"),
        "{text}"
    );
}

#[test]
fn fdatasync_before_the_write_is_caught() {
    caught(
        "fdatasync-before-write",
        "acked-durable",
        &[
            &format!("to {LOG} (bytes "),
            &format!("surviving: {LOG} was not fsynced after it"),
        ],
    );
}

#[test]
fn ack_before_fsync_is_caught() {
    caught(
        "ack-before-fsync",
        "acked-durable",
        &[
            &format!("to {LOG} (bytes "),
            &format!("surviving: {LOG} was not fsynced after it"),
        ],
    );
}

#[test]
fn snapshot_renamed_without_fsyncing_the_temp_file_is_caught() {
    caught(
        "snapshot-no-fsync",
        "checkpoint-projection",
        &[
            "relies on write op #",
            "to sessions/session/snapshot.tmp (bytes 0..",
            "surviving: sessions/session/snapshot.tmp was not fsynced after it",
        ],
    );
}

#[test]
fn no_directory_fsync_after_creating_the_log_is_caught_and_replays() {
    let text = caught(
        "no-dir-fsync-create",
        "acked-durable",
        &[
            &format!("relies on the directory entry of {LOG} (created by op #"),
            "surviving: directory sessions/session was not fsynced after it",
        ],
    );
    let replay = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("replay: agentchaos "))
        .unwrap();
    let words = shlex::split(replay).unwrap();
    let kept = tempfile::tempdir().unwrap();
    let state = kept.path().join("state");
    let out = Command::new(AGENTCHAOS)
        .args(&words)
        .arg("--keep")
        .arg(&state)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("VIOLATION acked-durable"), "{shown}");
    assert!(
        shown.contains(&format!("relies on the directory entry of {LOG}")),
        "{shown}"
    );
    // The kept state is the one recovery saw: the session directory
    // without its log.
    assert!(state.join("sessions/session").is_dir(), "{shown}");
    assert!(!state.join(LOG).exists(), "{shown}");
}

/// opens-and-recovers: the store must open what a crash inside its own
/// creation leaves (an empty events.jsonl), with nothing lost at all.
#[test]
fn refusing_an_interrupted_creation_is_caught() {
    let a = adapter(Some("refuse-incomplete-session"));
    let (out, text) = powerloss(&[
        "--scenario",
        small().to_str().unwrap(),
        "--adapter",
        &a,
        "--powerloss-model",
        "strict",
    ]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("VIOLATION opens-and-recovers in small (model strict, power lost after op #")
            && text.contains("(create sessions/session/events.jsonl))"),
        "{text}"
    );
    assert!(
        text.contains(
            "found: open: adapter refused open (invalid): session \"session\" is incomplete"
        ),
        "{text}"
    );
    assert!(text.contains("relies on: nothing lost"), "{text}");
}

/// Power-loss states include the blob files: a blob renamed into place
/// without its data fsynced is read back short after the power loss, while
/// the tool_result that references it survived (`blob-readable`).
#[test]
fn a_blob_renamed_without_fsyncing_its_data_is_caught() {
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/large-output-blob.json");
    let (out, text) = powerloss(&[
        "--scenario",
        scenario.to_str().unwrap(),
        "--store-fault",
        "blob-no-fsync",
        "--powerloss-model",
        "ext4-ordered",
        "--powerloss-states",
        "4",
    ]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("VIOLATION blob-readable in large-output-blob"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.contains("relies on write op #")
            && l.contains("sessions/session/blobs/")
            && l.contains(".tmp was not fsynced after it")),
        "{text}"
    );
    assert!(
        text.contains("replay: agentchaos replay --scenario ")
            && text.contains(" --plan powerloss:")
            && text.contains(" --store-fault blob-no-fsync"),
        "{text}"
    );
}

#[test]
fn every_power_loss_fault_has_a_test_here() {
    let names: Vec<&str> = agentstore::fault::Fault::POWER_LOSS
        .iter()
        .map(|f| f.name())
        .collect();
    assert_eq!(
        names,
        [
            "no-fdatasync",
            "fdatasync-before-write",
            "no-dir-fsync-create",
            "snapshot-no-fsync",
            "refuse-incomplete-session",
            "blob-no-fsync"
        ],
        "each power-loss fault has a *_is_caught test in this file"
    );
}

#[test]
fn bad_arguments_are_one_line_and_exit_2() {
    for args in [
        &["--powerloss-model", "ext5"][..],
        &["--powerloss-states", "0"],
        &["--powerloss-points", "0"],
    ] {
        let (out, text) = powerloss(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
    }
    let out = Command::new(AGENTCHAOS)
        .args(["replay", "--scenario"])
        .arg(small())
        .args(["--plan", "powerloss:weak:x:0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
}
