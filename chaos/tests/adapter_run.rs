//! `agentchaos run --adapter`: the harness drives a store through its
//! adapter. The reference store's adapter and the SQLite store must pass;
//! SQLite mutants must fail naming the invariant their broken promise
//! belongs to; and the report must say which checks did not apply.

use crate::campaign;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

fn agentstore_adapter() -> String {
    let bin = support::workspace_bin("agentstore");
    format!("{} adapter", bin.display())
}

fn sqlite_adapter(mutant: Option<&str>) -> String {
    let bin = support::workspace_bin("agentchaos-sqlite-adapter");
    match mutant {
        None => bin.display().to_string(),
        Some(m) => format!("{} --mutant {m}", bin.display()),
    }
}

/// An exhaustive campaign on the small fixture through `adapter` with
/// `nemesis` (power loss through adapters is `powerloss_campaign.rs`'s):
/// the exit code, the JSON report and stdout.
fn campaign(adapter: &str, nemesis: &str, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec!["--adapter", adapter, "--nemesis", nemesis];
    args.extend(extra);
    campaign::run(&fixture(), &args)
}

/// A clean store passes kills and syscall faults alike.
fn assert_clean(adapter: &str, extra: &[&str]) -> Value {
    let (code, report, stdout) = campaign(adapter, "points,syscall", extra);
    assert_eq!(code, 0, "{adapter} must pass:\n{stdout}");
    assert_eq!(report["error_count"], 0);
    assert!(report["trials"].as_u64().unwrap() > 20, "{stdout}");
    // Every planned kill point was reached: the agent-level points are there.
    let s = &report["scenarios"][0];
    assert_eq!(s["crash_points_covered"], s["crash_points_total"]);
    // Every applicable fault met every syscall the traced run enumerated.
    let syscalls = s["syscalls_total"].as_u64().unwrap();
    assert!(
        syscalls > 10,
        "the traced run enumerated the store's syscalls"
    );
    assert_eq!(s["syscalls_covered"], syscalls, "every syscall was faulted");
    // What an opaque store cannot be judged on is said, never passed.
    let na: Vec<&str> = report["not_applicable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["invariant"].as_str().unwrap())
        .collect();
    for inv in ["log-prefix", "recovery-idempotent", "checkpoint-projection"] {
        assert!(
            na.contains(&inv),
            "{inv} not listed as not applicable: {na:?}"
        );
    }
    assert!(stdout.contains("not applicable to this store"), "{stdout}");
    report
}

/// A mutant fails the campaign with violations of each of `invariants`;
/// returns the first violation's replay command, which names the same adapter.
/// The kills alone catch each of these mutants (40 trials, where adding
/// the syscall nemesis makes 650 through an adapter that starts about eight
/// processes a trial); what only syscall faults catch is
/// `earned_verdicts.rs`'s.
fn assert_caught(mutant: &str, invariants: &[&str]) -> String {
    let adapter = sqlite_adapter(Some(mutant));
    let (code, report, stdout) = campaign(&adapter, "points", &[]);
    assert_eq!(code, 1, "mutant {mutant} must fail the campaign:\n{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    for invariant in invariants {
        assert!(
            campaign::count(&report, invariant) > 0,
            "mutant {mutant} must be caught by {invariant}:\n{stdout}"
        );
    }
    let replay = report["violations"][0]["replay"].as_str().unwrap();
    assert!(
        replay.contains("--adapter") && replay.contains(mutant),
        "{replay}"
    );
    replay.to_string()
}

/// With the deepest restart's life 1 and the life 2 after it crashed at
/// every point and faulted at every syscall: the tracer follows a
/// restarted agent's adapter child as it does the first one's.
#[test]
fn the_reference_store_passes_through_its_adapter() {
    let report = assert_clean(&agentstore_adapter(), &["--restarts", "deepest"]);
    let s = &report["scenarios"][0];
    assert_eq!(s["restarted_lives_traced"], 2, "{s}");
    assert_eq!(s["restarted_lives_syscall_traced"], 2, "{s}");
    assert!(s["restarted_life_trials"].as_u64().unwrap() > 40, "{s}");
}

/// Also the mutant corpus's SQLite control (`mutants.rs` runs the
/// reference one): it claims neither torn-tail repair nor damage refusal
/// and is not passed on them; what it claims and the small fixture
/// exercises passes.
#[test]
fn the_sqlite_store_passes() {
    let report = assert_clean(&sqlite_adapter(None), &[]);
    for r in ["torn_tail_repair", "damage_refusal"] {
        assert_eq!(campaign::row(&report, r)["verdict"], "not supported", "{r}");
        assert_eq!(campaign::row(&report, r)["claimed"], false, "{r}");
    }
    for r in ["durable_append", "orphan_marking", "effect_ledger"] {
        assert_eq!(campaign::row(&report, r)["verdict"], "pass", "{r}");
    }
}

#[test]
fn a_store_that_reruns_uncertain_calls_is_caught_and_replayed() {
    let replay = assert_caught(
        "rerun-uncertain",
        &["effect-at-most-once", "orphan-marked-uncertain"],
    );
    // The replay command reproduces the violation through the same adapter.
    let (code, stdout) = campaign::replay(&replay);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("VIOLATION"), "{stdout}");
}

#[test]
fn a_second_recovery_that_appends_is_caught_on_the_events() {
    // The log's bytes are not visible through an adapter: the check runs on events.
    assert_caught("mark-twice", &["recovery-idempotent"]);
}

#[test]
fn an_intent_acknowledged_but_never_written_is_caught() {
    assert_caught("lose-intent", &["acked-durable"]);
}

#[test]
fn a_bad_adapter_command_is_bad_input() {
    let out = Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(["run", "--quiet", "--scenario"])
        .arg(fixture())
        .args(["--adapter", "'unbalanced"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--adapter"), "{stderr}");
}

/// A SIGKILL of the agent is a SIGKILL of its adapter: an adapter that
/// never reads its stdin again (here: it answers `hello` and `open`, then sleeps) must
/// not outlive the agent.
#[test]
fn killing_the_agent_kills_its_adapter() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("adapter.pid");
    let script = dir.path().join("adapter.sh");
    let hello = r#"{"id":1,"ok":{"name":"sleeper","protocol":1,"capabilities":[]}}"#;
    let opened = r#"{"id":2,"ok":{"next_seq":1}}"#;
    std::fs::write(
        &script,
        format!(
            "echo $$ > '{}'\nread line\necho '{hello}'\nread line\necho '{opened}'\nexec sleep 1000\n",
            pid_file.display()
        ),
    )
    .unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // Hit 0 is adapter.open, hit 1 adapter.open.replied: the agent dies
    // with the open answered and the adapter never to read its stdin again.
    let out = Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .arg("agent")
        .arg("--scenario")
        .arg(fixture())
        .arg("--root")
        .arg(dir.path().join("root"))
        .args(["--session", "s", "--workspace"])
        .arg(&ws)
        .arg("--world")
        .arg(dir.path().join("w.sock"))
        .args(["--life", "0", "--adapter"])
        .arg(format!("sh {}", script.display()))
        .env("AGENTCHAOS_KILL_AT", "1")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(9), "{out:?}");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let stat = format!("/proc/{}/stat", pid.trim());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        // Gone, or a zombie waiting for init: either way it runs no more.
        let alive = std::fs::read_to_string(&stat).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        });
        if !alive {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the adapter (pid {}) outlived the killed agent",
            pid.trim()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
