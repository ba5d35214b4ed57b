//! Ctrl-C and SIGTERM: `agentchaos run` (trials, and power loss alone) stop
//! taking trials, wait for the ones running, remove their scratch
//! directories (`agentchaos-*` under --dir, `agentchaos-random-*` under
//! the temp dir) and exit 128 + the signal. Synchronised on the scratch
//! directory's existence, never on time.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn scenarios() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

fn entries(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// Polls (bounded) until `dir` holds an entry starting with `prefix`;
/// panics if `child` exits first.
fn wait_for_entry(child: &mut Child, dir: &Path, prefix: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while entries(dir, prefix).is_empty() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "exited ({status}) before creating {prefix}* in {}",
                dir.display()
            );
        }
        assert!(
            Instant::now() < deadline,
            "no {prefix}* in {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Starts `agentchaos ARGS --dir D` with its temp dir in T, signals it once
/// `agentchaos-*` exists in D, and checks the exit code and that D and T
/// hold no scratch directory afterwards.
fn interrupt(args: &[&str], signal: Signal, code: i32) {
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(args)
        .arg("--quiet")
        .arg("--dir")
        .arg(dir.path())
        .arg("--scenario")
        .arg(scenarios())
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_entry(&mut child, dir.path(), "agentchaos-");
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?} {signal}: {stderr}");
    assert!(
        stderr.contains(&format!("agentchaos: interrupted by {signal}")),
        "{stderr}"
    );
    assert_eq!(entries(dir.path(), ""), Vec::<String>::new(), "--dir");
    assert_eq!(
        entries(tmp.path(), "agentchaos-"),
        Vec::<String>::new(),
        "TMPDIR"
    );
}

#[test]
fn ctrl_c_stops_a_run_and_removes_its_directories() {
    interrupt(&["run", "--random", "2"], Signal::SIGINT, 130);
}

#[test]
fn sigterm_stops_a_run_and_removes_its_directories() {
    interrupt(&["run", "--random", "2"], Signal::SIGTERM, 143);
}

#[test]
fn sigterm_stops_a_power_loss_campaign_and_removes_its_directory() {
    interrupt(&["run", "--nemesis", "powerloss"], Signal::SIGTERM, 143);
}
