//! The shipped scenarios are built into the binary: an installed
//! `agentchaos` lists, exports and runs them from any directory.

use std::process::{Command, Output};

fn agentchaos(cwd: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn scenarios_lists_and_exports_the_shipped_files() {
    let cwd = tempfile::tempdir().unwrap();
    let out = agentchaos(cwd.path(), &["scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&shipped).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "json") {
            names.push(path);
        }
    }
    assert_eq!(listed.lines().count(), names.len(), "{listed}");

    let out = agentchaos(cwd.path(), &["scenarios", "export", "out"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for path in &names {
        let name = path.file_name().unwrap();
        let exported = std::fs::read(cwd.path().join("out").join(name)).unwrap();
        assert_eq!(exported, std::fs::read(path).unwrap(), "{name:?}");
        let stem = path.file_stem().unwrap().to_str().unwrap();
        assert!(listed.lines().any(|l| l.starts_with(stem)), "{listed}");
    }
    // Again: identical files are left as they are.
    let out = agentchaos(cwd.path(), &["scenarios", "export", "out"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_built_in_scenario_runs_and_replays_from_any_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let out = agentchaos(
        cwd.path(),
        &[
            "run",
            "--quiet",
            "--scenario",
            "builtin:approval-gated",
            "--nemesis",
            "points",
            "--restarts",
            "none",
            "--trials",
            "1",
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("approval-gated"), "{stdout}");
    let replay = agentchaos(
        cwd.path(),
        &[
            "replay",
            "--scenario",
            "builtin:approval-gated",
            "--plan",
            "powercut@20",
            "--store-fault",
            "ack-before-fsync",
        ],
    );
    assert_eq!(replay.status.code(), Some(1), "{}", text(&replay.stderr));
    assert!(text(&replay.stdout).contains("scenario approval-gated (builtin:approval-gated)"));

    let unknown = agentchaos(cwd.path(), &["run", "--scenario", "builtin:nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown.stderr).contains("builtin:nope: no such built-in scenario"));
}
