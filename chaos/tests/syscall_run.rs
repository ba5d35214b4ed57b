//! `agentchaos run --nemesis syscall`: faults at the store's own syscalls,
//! with no instrumentation in the store. The mutants that only a syscall-level nemesis can show
//! must fail naming the invariant their broken promise belongs to; and a
//! real EIO must meet agentstore's poison path. Linux x86_64 only.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use crate::campaign;
use crate::support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agentchaos::nemesis::syscall::{
    Call, Errno, FaultOutcome, FaultPlan, Outcome, SyscallFault, TraceConfig, Traced,
};
use serde_json::{json, Value};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

fn agentstore() -> PathBuf {
    support::workspace_bin("agentstore")
}

fn sqlite_adapter(mutant: Option<&str>) -> String {
    let bin = support::workspace_bin("agentchaos-sqlite-adapter");
    match mutant {
        None => bin.display().to_string(),
        Some(m) => format!("{} --mutant {m}", bin.display()),
    }
}

/// A campaign on the small fixture with `args`: exit code, JSON report, stdout.
fn campaign(args: &[&str]) -> (i32, Value, String) {
    campaign::run(&fixture(), args)
}

/// Fails the campaign (exit 1, no trial errors) with violations of
/// `invariant`; returns the report.
fn assert_caught(args: &[&str], invariant: &str) -> Value {
    let (code, report, stdout) = campaign(args);
    assert_eq!(code, 1, "{args:?} must fail:\n{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    assert!(
        campaign::count(&report, invariant) > 0,
        "{args:?} must be caught by {invariant}:\n{stdout}"
    );
    report
}

/// The first violation of `invariant` with a plan of `kind` (`sys-tear@`…).
fn violation<'a>(report: &'a Value, invariant: &str, kind: &str) -> &'a Value {
    report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["invariant"] == invariant && v["plan"].as_str().unwrap().starts_with(kind))
        .unwrap_or_else(|| panic!("no {invariant} violation under {kind}"))
}

// The clean stores' syscall campaigns (every fault at every enumerated
// syscall, nothing found) run once, with the other nemeses: in-process in
// earned_verdicts.rs (`the_reference_store_passes_every_default_nemesis`),
// through the adapters in adapter_run.rs.

/// A torn write the store did not choose, then an append that fuses with
/// the fragment: the restarted life's log is damaged.
#[test]
fn a_store_that_appends_onto_a_torn_tail_is_caught_through_its_adapter() {
    let adapter = format!(
        "env AGENTSTORE_FAULT=no-torn-tail-repair {} adapter",
        agentstore().display()
    );
    let report = assert_caught(
        &["--nemesis", "syscall", "--adapter", &adapter],
        "log-prefix",
    );
    let v = violation(&report, "log-prefix", "sys-tear@");
    let crash = v["crash_point"].as_str().unwrap();
    assert!(
        crash.starts_with("torn write") && crash.contains("ROOT/sessions/session/events.jsonl"),
        "the crash names the syscall and the file: {crash}"
    );
    let command = v["replay"].as_str().unwrap();
    assert!(
        command.contains("--plan sys-tear@")
            && command.contains("AGENTSTORE_FAULT=no-torn-tail-repair"),
        "{command}"
    );
    let (code, stdout) = campaign::replay(command);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("VIOLATION log-prefix"), "{stdout}");
}

/// A snapshot written in place: a kill between its truncating open and its
/// write leaves it unreadable. (Through the adapter the store's snapshot
/// is not visible, and agentstore refuses a bad snapshot and replays the
/// log, so the mutant is harmless there; in-process the harness reads it.)
#[test]
fn a_snapshot_written_in_place_is_caught_at_its_syscalls() {
    let report = assert_caught(
        &[
            "--nemesis",
            "syscall",
            "--store-fault",
            "non-atomic-snapshot",
        ],
        "checkpoint-projection",
    );
    let v = violation(&report, "checkpoint-projection", "sys-kill-");
    assert!(
        v["crash_point"].as_str().unwrap().contains("snapshot.json"),
        "{v}"
    );
}

/// The reply flushed before the COMMIT: a kill at the WAL write or sync
/// after it loses an acknowledged event. (The ack races with the crash, two
/// processes apart, so which trials catch it can vary; a sample catches it.)
#[test]
fn sqlite_acking_before_the_commit_is_caught_by_acked_durable() {
    let adapter = sqlite_adapter(Some("ack-before-write"));
    assert_caught(
        &[
            "--nemesis",
            "syscall",
            "--trials",
            "24",
            "--adapter",
            &adapter,
        ],
        "acked-durable",
    );
}

/// Runs `agentstore adapter` under the tracer with `requests` on its stdin;
/// returns its replies and the trace.
fn converse(root: &Path, fault: Option<FaultPlan>, requests: &[Value]) -> (Vec<Value>, Outcome) {
    let mut cmd = Command::new(agentstore());
    cmd.arg("adapter")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let config = TraceConfig {
        root: root.to_path_buf(),
        fault,
        record: false,
        seccomp: true,
        reads: false,
    };
    let mut traced = Traced::spawn(cmd, config).unwrap();
    let mut stdin = traced.stdin.take().unwrap();
    let mut stdout = traced.stdout.take().unwrap();
    let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let outcome = traced.run().unwrap();
    writer.join().unwrap().unwrap();
    let replies = reader
        .join()
        .unwrap()
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (replies, outcome)
}

/// A real EIO on the fdatasync of an append: no ack, the log refuses every
/// later append (poisoned), and a new process opens the session cleanly
/// without the unacknowledged event and appends again.
#[test]
fn a_failed_fdatasync_poisons_the_log_and_the_next_process_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let script = |root: &Path| {
        vec![
            json!({"id": 1, "op": "hello", "protocol": 1}),
            json!({"id": 2, "op": "open", "root": root, "session": "s", "workspace": ws, "create": true}),
            json!({"id": 3, "op": "append", "event": {"type": "run_started", "run_id": "r1"}}),
            json!({"id": 4, "op": "append", "event": {"type": "run_started", "run_id": "r2"}}),
            json!({"id": 5, "op": "close"}),
        ]
    };
    // A crash-free run finds the fdatasync of the first append's line.
    let clean = dir.path().join("clean");
    std::fs::create_dir_all(&clean).unwrap();
    let (replies, trace) = converse(&clean, None, &script(&clean));
    assert_eq!(replies[2]["ok"]["seq"], 1, "{replies:?}");
    let is_log = |p: &Path| p.ends_with("sessions/s/events.jsonl");
    // The lines, not the zeros pre-allocated before the first of them.
    let zero_fill = agentstore::log::PREALLOC_MIN_STEP;
    let log_writes: Vec<u64> = trace
        .events
        .iter()
        .filter(|e| matches!(&e.call, Call::Write { path, len, .. } if is_log(path) && *len != zero_fill))
        .map(|e| e.index)
        .collect();
    let sync = trace
        .events
        .iter()
        .find(|e| {
            e.index > log_writes[1]
                && matches!(&e.call, Call::Sync { path, data_only: true, .. } if is_log(path))
        })
        .expect("the first append is synced")
        .index;

    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let plan = FaultPlan {
        at: sync,
        fault: SyscallFault::Fail { errno: Errno::EIO },
    };
    let (replies, outcome) = converse(&root, Some(plan), &script(&root));
    let report = outcome.fault.unwrap();
    assert!(
        matches!(&report.outcome, FaultOutcome::Injected { event } if event.result == Some(-5)),
        "{report}"
    );
    assert_eq!(replies[2]["error"]["kind"], "io", "no ack: {replies:?}");
    let poisoned = replies[3]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        poisoned.contains("fdatasync failed"),
        "later appends are refused: {replies:?}"
    );
    // A new process: the unacknowledged event is gone, appends work again.
    let (replies, _) = converse(
        &root,
        None,
        &[
            json!({"id": 1, "op": "hello", "protocol": 1}),
            json!({"id": 2, "op": "open", "root": root, "session": "s", "workspace": null, "create": false}),
            json!({"id": 3, "op": "events", "after": null}),
            json!({"id": 4, "op": "append", "event": {"type": "run_started", "run_id": "r3"}}),
            json!({"id": 5, "op": "close"}),
        ],
    );
    assert_eq!(replies[1]["ok"]["next_seq"], 1, "{replies:?}");
    let records = replies[2]["ok"]["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "only session_created: {records:?}");
    assert_eq!(replies[3]["ok"]["seq"], 1, "{replies:?}");
}

/// Replays `plan` on the small fixture, with `--store-fault fault` if any:
/// the exit code and stdout.
fn replay(plan: &str, fault: Option<&str>) -> (i32, String) {
    let fault = fault.map_or(String::new(), |f| format!(" --store-fault {f}"));
    campaign::replay(&format!(
        "agentchaos replay --scenario {} --plan {plan}{fault}",
        fixture().display()
    ))
}

/// A failed, a short and an interrupted read of the log in the restarted
/// life's recovery (the life after the deepest restart, `kill@43`): the
/// reference store refuses the failed one in one line naming the file and
/// the byte offset and then recovers in the next life, and reads on
/// through the others; a store that takes a failed or short read for the
/// end of its log loses acknowledged events, each time.
#[test]
fn a_failed_or_short_read_in_recovery_is_refused_or_read_on_never_taken_for_the_end() {
    // The descriptor's number is left out: it depends on what the test
    // process inherited (a wrapper's open file shifts it).
    let log_read = " = ROOT/sessions/session/events.jsonl, 262144 bytes)";
    for plan in [
        "kill@43+sys-eio-read@4",
        "kill@43+sys-short-read@19:260",
        "kill@43+sys-eintr-read@4",
    ] {
        let (code, out) = replay(plan, None);
        assert_eq!(code, 0, "{plan}: the reference store passes:\n{out}");
        assert!(
            out.contains("restarted life 1: ") && out.contains(log_read) || plan.contains("short"),
            "{plan} faults a read of the log in recovery (the fixture or the store's reads changed?):\n{out}"
        );
    }
    let (_, out) = replay("kill@43+sys-eio-read@4", None);
    let refusal = out
        .lines()
        .find(|l| l.starts_with("life 1: exited with status 1: "))
        .unwrap_or_else(|| panic!("life 1 refuses the failed read:\n{out}"));
    assert!(
        refusal.contains("events.jsonl at byte offset ")
            && refusal.contains("Input/output error")
            && refusal.contains("a failed read is not the end of the log"),
        "{refusal}"
    );
    for plan in ["kill@43+sys-eio-read@4", "kill@43+sys-short-read@19:260"] {
        for _ in 0..2 {
            let (code, out) = replay(plan, Some("read-error-is-eof"));
            assert_eq!(code, 1, "{plan} catches the store:\n{out}");
            assert!(out.contains("VIOLATION acked-durable"), "{plan}:\n{out}");
        }
    }
    let (code, out) = replay("kill@43+sys-eintr-read@4", Some("read-error-is-eof"));
    assert_eq!(code, 0, "the fault leaves EINTR to the runtime:\n{out}");
}
