//! Each exit code of `agentchaos`, shown on the built binary: 0 clean, 1
//! the store failed (a violation, or an adapter protocol error that is the
//! store's, in a trial or a probe), 2 bad usage or input, 3 the harness
//! itself failed.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;

fn agentchaos(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(args)
        .output()
        .unwrap()
}

fn small() -> String {
    fixture("tests/fixtures/small.json")
}

fn fixture(path: &str) -> String {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    p.display().to_string()
}

fn code_and_stderr(out: &Output) -> (Option<i32>, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A few first-life trials of agentstore on the small fixture.
fn quick_run(extra: &[&str]) -> Output {
    let f = small();
    let mut args = vec![
        "run",
        "--quiet",
        "--scenario",
        &f,
        "--nemesis",
        "points",
        "--restarts",
        "none",
        "--trials",
        "2",
    ];
    args.extend_from_slice(extra);
    agentchaos(&args)
}

#[test]
fn a_clean_run_exits_0() {
    let out = quick_run(&[]);
    let (code, stderr) = code_and_stderr(&out);
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn a_violation_exits_1() {
    // The power cut drops the acknowledged but unsynced event.
    let scenario = fixture("../scenarios/approval-gated.json");
    let out = agentchaos(&[
        "replay",
        "--scenario",
        &scenario,
        "--plan",
        "powercut@20",
        "--store-fault",
        "ack-before-fsync",
    ]);
    let (code, stderr) = code_and_stderr(&out);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("result: 1 violation(s)"));
}

#[test]
fn an_adapter_protocol_error_of_the_store_exits_1() {
    let adapter = faulty_relay("garble-events");
    let out = quick_run(&["--adapter", &adapter]);
    let (code, stderr) = code_and_stderr(&out);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("adapter protocol error") && stderr.contains("reply to events"),
        "{stderr}"
    );
}

/// agentstore's adapter behind `tests/fixtures/faulty_relay.py MODE`.
fn faulty_relay(mode: &str) -> String {
    let relay = fixture("tests/fixtures/faulty_relay.py");
    let agentstore = support::workspace_bin("agentstore");
    let agentstore = agentstore.to_str().expect("a UTF-8 path");
    crate::python::adapter_command(Path::new(&relay), &[mode, agentstore, "adapter"])
}

/// `replay --plan PLAN` of the small fixture through the relay's MODE
/// with `extra` flags: asserts exit 1 and a result line blaming the
/// store; its ERROR line.
fn replay_the_store_fails(plan: &str, mode: &str, extra: &[&str]) -> String {
    let adapter = faulty_relay(mode);
    let scenario = small();
    let mut args = vec![
        "replay",
        "--scenario",
        &scenario,
        "--plan",
        plan,
        "--adapter",
        &adapter,
    ];
    args.extend(extra);
    let out = agentchaos(&args);
    let (code, stderr) = code_and_stderr(&out);
    assert_eq!(code, Some(1), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("result: not carried out, the store's fault"),
        "{stdout}"
    );
    stdout
        .lines()
        .find(|l| l.starts_with("ERROR: "))
        .unwrap_or_else(|| panic!("no ERROR line: {stdout}"))
        .to_string()
}

/// A probe the store's adapter fails (it dies when the lock probe opens
/// the copy of the store) is the store's failure, not the harness's.
#[test]
fn a_probe_the_store_adapter_fails_exits_1_naming_the_store() {
    let error = replay_the_store_fails("probe:lock", "die-on-probe-open", &[]);
    assert!(
        error.contains("the store under test failed")
            && error.contains("first open")
            && error.contains("adapter protocol error")
            && error.contains("the adapter exited"),
        "{error}"
    );
}

/// A probe the store never answers (its adapter hangs when the lock probe
/// opens the copy of the store) is killed after --hang-timeout: the
/// store's failure, said in one line, never a campaign that waits forever.
#[test]
fn a_probe_the_store_hangs_in_is_killed_and_exits_1_naming_the_store() {
    // The crash-free run takes under a second here; eight leave room for a
    // loaded machine: the hang is forever.
    let error =
        replay_the_store_fails("probe:lock", "hang-on-probe-open", &["--hang-timeout", "8"]);
    assert!(
        error.contains("the store under test failed")
            && error.contains("the lock probe hung: no reply from the store in 8 s"),
        "{error}"
    );
}

/// A restarted life the store never answers (its adapter hangs on
/// `recover`) is killed after --hang-timeout: the store's failure, as a
/// hung probe is, never the harness's (exit 3).
#[test]
fn a_life_the_store_hangs_in_is_killed_and_exits_1_naming_the_store() {
    // The crash-free run and the first life take under a second here;
    // eight leave room for a loaded machine: the hang is forever.
    let error = replay_the_store_fails("kill@5", "hang-on-recover", &["--hang-timeout", "8"]);
    assert_eq!(
        error,
        "ERROR: life 1 hung: no end in 8 s (--hang-timeout), killed; the agent was waiting on the store"
    );
}

/// A probe the harness cannot carry out as planned (a damaged byte past
/// the end of the file) is the harness's failure, whatever the store.
#[test]
fn a_probe_the_harness_cannot_carry_out_exits_3() {
    let out = agentchaos(&[
        "replay",
        "--scenario",
        &small(),
        "--plan",
        "probe:damage@sessions/session/events.jsonl:99999999",
    ]);
    let (code, stderr) = code_and_stderr(&out);
    assert_eq!(code, Some(3), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ERROR: sessions/session/events.jsonl has ")
            && stdout.contains("bytes: no byte offset 99999999"),
        "{stdout}"
    );
    assert!(!stdout.contains("the store under test failed"), "{stdout}");
}

#[test]
fn bad_usage_or_input_exits_2() {
    let f = small();
    for args in [
        vec!["run", "--no-such-flag"],
        vec!["run", "--scenario", "/nonexistent/x.json"],
        vec!["replay", "--scenario", &f, "--plan", "zap@1"],
        vec!["scenarios", "export"],
    ] {
        let (code, stderr) = code_and_stderr(&agentchaos(&args));
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
}

#[test]
fn a_trial_the_harness_cannot_carry_out_exits_3() {
    // A kill at a hit the agent never reaches: the trial did not run as
    // planned, which says nothing about the store.
    let out = agentchaos(&["replay", "--scenario", &small(), "--plan", "kill@100000"]);
    let (code, stderr) = code_and_stderr(&out);
    assert_eq!(code, Some(3), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ERROR: life 0 finished without reaching its hit 100000"),
        "{stdout}"
    );
    assert!(
        stdout.contains("result: not carried out, a harness error"),
        "{stdout}"
    );
}

/// The agent child tells whose failure stopped it: here the harness's (no
/// world socket to run its `remote` tool against), so it exits 3, which
/// makes the life an error of the trial, never a finding about the store.
#[test]
fn an_agent_whose_world_is_gone_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let root = dir.path().join("root").display().to_string();
    let world = dir.path().join("no-world.sock").display().to_string();
    let f = small();
    let out = agentchaos(&[
        "agent",
        "--scenario",
        &f,
        "--root",
        &root,
        "--session",
        "s",
        "--workspace",
        &ws.display().to_string(),
        "--world",
        &world,
        "--life",
        "0",
    ]);
    let (code, stderr) = code_and_stderr(&out);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("agent:"), "{stderr}");
}

/// An agent life or probe whose harness is gone before it tied its life to
/// the harness's (`child::die_with_harness`) exits at once as the harness's
/// failure, never runs on as an orphan.
#[test]
fn a_child_whose_harness_is_gone_exits_as_the_harness_failure() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    for args in [
        vec![
            "agent",
            "--scenario",
            "builtin:approval-gated",
            "--root",
            &root,
            "--session",
            "s",
            "--workspace",
            &root,
            "--world",
            &root,
            "--life",
            "0",
        ],
        vec!["probe", "--what", "lock", "--session", "s", "--root", &root],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentchaos"))
            .args(&args)
            // Not this process's parent: as if the harness had died.
            .env(agentchaos::child::HARNESS_PID_ENV, "1")
            .output()
            .unwrap();
        let (code, stderr) = code_and_stderr(&out);
        assert_eq!(code, Some(3), "{args:?}: {stderr}");
        assert!(
            stderr.contains("the harness died before this process started"),
            "{args:?}: {stderr}"
        );
    }
}

/// A store whose reply never ends fails the harness's limit on one reply
/// line (chaos/PROTOCOL.md): the store's failure, said in one line naming
/// the limit, never a harness that reads until it runs out of memory.
#[test]
fn a_reply_line_over_the_limit_exits_1_naming_the_limit() {
    let adapter = faulty_relay("endless-events");
    let out = quick_run(&["--adapter", &adapter]);
    let (code, stderr) = code_and_stderr(&out);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("adapter protocol error")
            && stderr.contains("(reply to events, request ")
            && stderr.contains(&format!(
                ") is longer than {} bytes",
                agentchaos::store::adapter::client::MAX_REPLY_BYTES
            )),
        "{stderr}"
    );
}

/// A scenario with an event larger than every store must take (a 5 MiB
/// user message; agentstore refuses events over 4 MiB, rightly) is the
/// scenario's problem: refused before it runs, exit 2, one line naming the
/// file, the line and the step, whatever the store. It used to run and be
/// reported as the store's violation (exit 1).
#[test]
fn a_scenario_larger_than_stores_must_take_exits_2_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.json");
    let mut s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(small()).unwrap()).unwrap();
    let steps = s["runs"][0]["steps"].as_array_mut().unwrap();
    steps.insert(
        1,
        serde_json::json!({"do": "user", "text": "x".repeat(5 << 20)}),
    );
    std::fs::write(&path, serde_json::to_string_pretty(&s).unwrap()).unwrap();
    let file = path.display().to_string();
    let agentstore = support::workspace_bin("agentstore");
    let adapter = format!("{} adapter", agentstore.display());
    for extra in [vec![], vec!["--adapter", adapter.as_str()]] {
        let mut args = vec!["run", "--quiet", "--nemesis", "points", "--trials", "2"];
        args.extend(["--scenario", &file]);
        args.extend(&extra);
        let out = agentchaos(&args);
        let (code, stderr) = code_and_stderr(&out);
        assert_eq!(code, Some(2), "{extra:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with(&format!("agentchaos: {file}:")),
            "{stderr}"
        );
        assert!(
            stderr
                .contains("runs[0].steps[1]: this step's user_message would be an event of about")
                && stderr.contains("every store must take"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "ran anyway");
    }
}
