//! `agentchaos run` as the campaign tests drive it.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// `agentchaos run --quiet --scenario SCENARIO ARGS… --json FILE`: the exit
/// code, the JSON report and stdout. No report is a test failure that shows
/// what the harness printed.
///
/// A campaign through an adapter runs `--restarts none` unless ARGS say
/// otherwise: crashing the restarted lives multiplies the trials about
/// sevenfold, and each adapter trial starts about eight processes. The
/// tests of the restarted lives say `--restarts` themselves.
pub fn run(scenario: &Path, args: &[impl AsRef<OsStr>]) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let has = |flag: &str| args.iter().any(|a| a.as_ref() == OsStr::new(flag));
    let restarts: &[&str] = if has("--adapter") && !has("--restarts") {
        &["--restarts", "none"]
    } else {
        &[]
    };
    let out = Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(["run", "--quiet", "--scenario"])
        .arg(scenario)
        .args(args)
        .args(restarts)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let report: Value = match std::fs::read(&json) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap(),
        Err(e) => panic!(
            "no report ({e}); stdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    };
    (out.status.code().unwrap_or(-1), report, stdout)
}

/// The scorecard row whose JSON key is `key` (a capability,
/// `durable_append_power_loss`, or `outcome`).
pub fn row<'a>(report: &'a Value, key: &str) -> &'a Value {
    report["scorecard"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["capability"] == key)
        .unwrap_or_else(|| panic!("no scorecard row {key}"))
}

/// Asserts that the scorecard row of each of `keys` reads `verdict`
/// (`pass`, `fail`, `not supported`, `not exercised`), showing `stdout`
/// when one does not.
pub fn assert_rows(report: &Value, verdict: &str, keys: &[&str], stdout: &str) {
    for key in keys {
        assert_eq!(row(report, key)["verdict"], verdict, "{key}:\n{stdout}");
    }
}

/// The first violation of `invariant` in `report`; a test failure naming
/// the invariant when there is none.
pub fn first_violation<'a>(report: &'a Value, invariant: &str) -> &'a Value {
    report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["invariant"] == invariant)
        .unwrap_or_else(|| panic!("no {invariant} violation in the report"))
}

/// Violations of `invariant` in the first scenario of `report`.
pub fn count(report: &Value, invariant: &str) -> u64 {
    report["scenarios"][0]["violations_by_invariant"][invariant]
        .as_u64()
        .unwrap()
}

/// Runs a printed replay command (`agentchaos replay …`) with this build's
/// binary: the exit code and stdout.
pub fn replay(command: &str) -> (i32, String) {
    let words = shlex::split(command).unwrap();
    assert_eq!(words[0], "agentchaos", "{command}");
    let out = Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(&words[1..])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `agentchaos replay --scenario SCENARIO --plan PLAN --adapter ADAPTER`
/// with this build's binary: the exit code and stdout.
pub fn replay_plan(scenario: &Path, plan: &str, adapter: &str) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .arg("replay")
        .arg("--scenario")
        .arg(scenario)
        .args(["--plan", plan, "--adapter", adapter])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Runs a finding's standalone reproduction (`cmd`, the script and its
/// interpreter) and asserts it still reproduces: exit code 1 and a first
/// line starting with `says`.
pub fn assert_finding_reproduces(mut cmd: Command, says: &str) {
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{cmd:?} no longer reproduces its finding (update README.md's Findings): {text}"
    );
    assert!(text.starts_with(says), "{cmd:?}: {text}");
}
