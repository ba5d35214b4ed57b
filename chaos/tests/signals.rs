//! Ctrl-C and SIGTERM: `agentchaos run` and `replay` stop wherever they
//! are (reading inputs, tracing, a trial, a probe, a power-loss recording,
//! shrinking): every process they started is killed, their scratch
//! directories (`agentchaos-*` under --dir, `agentchaos-random-*` under
//! the temp dir) removed, exit 128 + the signal. Synchronised on the
//! scratch directory's existence or on a fixture adapter that stalls in
//! the phase under test, never on time. And a daemon an adapter leaves
//! behind is killed and named in the report.
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

/// Processes still running that the harness `pid` started, directly or
/// not: their environment carries its pid (the agents, probes and what
/// they start) or one of its trial marks (adapters and their daemons).
fn left_behind(pid: u32) -> Vec<String> {
    let marks = [
        format!("AGENTCHAOS_HARNESS_PID={pid}"),
        format!("AGENTCHAOS_TRIAL={pid}-"),
    ];
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.parse::<u32>().is_err() {
            continue;
        }
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let marked = env
            .split(|&b| b == 0)
            .map(String::from_utf8_lossy)
            .any(|v| marks.iter().any(|m| v.starts_with(m.as_str())));
        if marked {
            let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            out.push(format!(
                "{name}: {}",
                String::from_utf8_lossy(&cmd).replace('\0', " ")
            ));
        }
    }
    out
}

/// The descendants of `pid` now (pid and start time, from /proc).
fn descendants(pid: u32) -> Vec<(u32, String)> {
    let stat = |p: &str| -> Option<(u32, u32, String)> {
        let text = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
        Some((
            p.parse().ok()?,
            fields.get(1)?.parse().ok()?,
            fields.get(19)?.to_string(),
        ))
    };
    let all: Vec<(u32, u32, String)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| stat(&e.file_name().to_string_lossy()))
        .collect();
    let mut out = Vec::new();
    let mut next = vec![pid];
    while let Some(parent) = next.pop() {
        for (p, _, start) in all.iter().filter(|(_, pp, _)| *pp == parent) {
            next.push(*p);
            out.push((*p, start.clone()));
        }
    }
    out
}

/// Which of `before` still run (the same pid with the same start time, not a zombie).
fn still_running(before: &[(u32, String)]) -> Vec<u32> {
    before
        .iter()
        .filter(|(pid, start)| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|t| {
                let f: Vec<&str> = t[t.rfind(')').unwrap() + 1..].split_whitespace().collect();
                f[0] != "Z" && f[19] == start
            })
        })
        .map(|(pid, _)| *pid)
        .collect()
}

fn stalling_adapter() -> String {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stalling_store.py");
    format!(
        "{} {}",
        crate::python::python3_path().display(),
        fixture.display()
    )
}

fn small() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

/// A harness started on the stalling adapter, its scratch places, and the
/// file its adapter writes when it stalls.
struct Stalled {
    child: Child,
    dir: tempfile::TempDir,
    tmp: tempfile::TempDir,
    marker: std::path::PathBuf,
}

/// Starts `agentchaos ARGS` with the stalling adapter, which stalls in an
/// `open` whose store root contains `stall_root` (see
/// tests/fixtures/stalling_store.py).
fn start_stalling(args: &[&str], stall_root: &str) -> Stalled {
    start_stalling_with(args, stall_root, &[])
}

/// [`start_stalling`] with more environment for the adapter.
fn start_stalling_with(args: &[&str], stall_root: &str, env: &[(&str, &str)]) -> Stalled {
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("stalled");
    let child = Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(args)
        .arg("--adapter")
        .arg(stalling_adapter())
        .arg("--dir")
        .arg(dir.path())
        .args(["--hang-timeout", "600"])
        .env("TMPDIR", tmp.path())
        .env("STALL_ROOT", stall_root)
        .env("STALL_MARKER", &marker)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Stalled {
        child,
        dir,
        tmp,
        marker,
    }
}

/// Polls (bounded) until `path` is a non-empty file; panics if `child`
/// exits first.
fn wait_for_file(child: &mut Child, path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while std::fs::metadata(path).map_or(true, |m| m.len() == 0) {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err);
            panic!("exited ({status}) before {}: {err}", path.display());
        }
        assert!(Instant::now() < deadline, "no {}", path.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Signals the harness, and checks that it exits 128 + the signal within
/// 10 s (the requirement is 1 s: the time is printed, for the record)
/// with one line on stderr, leaving no process and no scratch directory.
fn stop(mut s: Stalled, phase: &str, signal: Signal) -> Duration {
    let pid = s.child.id();
    let before = descendants(pid);
    let sent = Instant::now();
    kill(Pid::from_raw(pid as i32), signal).unwrap();
    let deadline = sent + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = s.child.kill();
            panic!("{phase}: still running 10 s after {signal}");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let took = sent.elapsed();
    eprintln!("stop latency, {phase}, {signal}: {} ms", took.as_millis());
    let out = s.child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = 128 + signal as i32;
    assert_eq!(status.code(), Some(code), "{phase}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{phase}: {stderr}");
    assert!(
        stderr.starts_with(&format!("agentchaos: interrupted by {signal}")),
        "{phase}: {stderr}"
    );
    assert_eq!(left_behind(pid), Vec::<String>::new(), "{phase}");
    assert_eq!(still_running(&before), Vec::<u32>::new(), "{phase}");
    assert_eq!(
        entries(s.dir.path(), ""),
        Vec::<String>::new(),
        "{phase}: --dir"
    );
    assert_eq!(
        entries(s.tmp.path(), "agentchaos-"),
        Vec::<String>::new(),
        "{phase}: TMPDIR"
    );
    took
}

const POINTS: &[&str] = &[
    "run",
    "--scenario",
    "SMALL",
    "--nemesis",
    "points",
    "--trials",
    "2",
    "--quiet",
];

/// A phase that restarted lives do not reach is reached sooner, and a
/// campaign ends sooner, without crashing them.
const NO_RESTARTS: &[&str] = &["--restarts", "none"];

fn points(extra: &[&str]) -> Vec<String> {
    let small = small();
    POINTS
        .iter()
        .chain(extra)
        .map(|a| match *a {
            "SMALL" => small.display().to_string(),
            a => a.to_string(),
        })
        .collect()
}

fn stop_in(phase: &str, args: &[String], stall_root: &str, signal: Signal) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut s = start_stalling(&args, stall_root);
    let marker = s.marker.clone();
    wait_for_file(&mut s.child, &marker);
    stop(s, phase, signal);
}

#[test]
fn a_signal_stops_the_crash_free_trace_run() {
    stop_in(
        "crash-free trace",
        &points(NO_RESTARTS),
        "crash-free/",
        Signal::SIGINT,
    );
}

#[test]
fn a_signal_stops_the_traces_of_restarted_lives() {
    stop_in(
        "restarted-life trace",
        &points(&[]),
        ".later",
        Signal::SIGTERM,
    );
}

#[test]
fn a_signal_stops_a_probe() {
    stop_in("probe", &points(NO_RESTARTS), "/probe", Signal::SIGINT);
}

#[test]
fn a_signal_stops_a_trial() {
    // Trial directories are NNNNNN-NNNNNNNNNN, trace runs' NNNNNN-crash-free.
    stop_in("trial", &points(NO_RESTARTS), "-00000000", Signal::SIGINT);
}

#[test]
fn a_signal_stops_shrinking() {
    // The random scenario fails on this store (it marks nothing at
    // recovery): shrinking runs its trials in a campaign directory of
    // its own, where the adapter stalls.
    // Seed 6's scenario stores no blob (which this store does not claim)
    // and makes two side-effecting calls in two steps.
    let args = points(&["--random", "1", "--seed", "6", "--restarts", "none"]);
    stop_in("shrinking", &args, "@later", Signal::SIGINT);
}

#[test]
fn a_signal_stops_a_power_loss_recording() {
    let small = small().display().to_string();
    let args: Vec<String> = [
        "run",
        "--scenario",
        &small,
        "--nemesis",
        "powerloss",
        "--quiet",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    stop_in("power-loss recording", &args, "/rec/", Signal::SIGINT);
}

#[test]
fn a_signal_stops_a_replay() {
    let small = small().display().to_string();
    let args: Vec<String> = ["replay", "--scenario", &small, "--plan", "kill@5"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    stop_in("replay", &args, "agentchaos-", Signal::SIGTERM);
}

/// Before any trial: the harness asks the store's adapter for its
/// `hello` (its claims decide the campaign), and this one never answers.
/// (Reading the scenario files cannot block: a FIFO or a device is refused
/// unopened, `cli::scenario_files_that_are_not_regular_or_too_large_are_refused_unread`.)
#[test]
fn a_signal_stops_the_start_up() {
    let small = small().display().to_string();
    let mut s = start_stalling_with(
        &["run", "--scenario", &small, "--quiet"],
        "never",
        &[("STALL_HELLO", "1")],
    );
    let marker = s.marker.clone();
    wait_for_file(&mut s.child, &marker);
    stop(s, "start-up (the adapter's hello)", Signal::SIGINT);
}

#[test]
fn a_daemon_an_adapter_leaves_behind_is_killed_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let child = Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(points(NO_RESTARTS))
        .arg("--adapter")
        .arg(stalling_adapter())
        .arg("--dir")
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .env("LEAK_DAEMON", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("LEAKED PROCESSES: the store's adapter left"),
        "{stdout}"
    );
    assert!(stdout.contains(": sleep 1000"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let leaked = report["leaked_processes"].as_array().unwrap();
    assert!(!leaked.is_empty());
    // `setsid` execs `sleep` unless caught before it did.
    assert!(
        leaked
            .iter()
            .all(|l| l["command"].as_str().unwrap().ends_with("sleep 1000")),
        "{leaked:?}"
    );
    // Killed, not merely named: no daemon of this run is alive.
    assert_eq!(left_behind(pid), Vec::<String>::new());
}

#[test]
fn a_signal_stops_many_workers() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(["workers", "--dir"])
        .arg(dir.path())
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A trial's scratch directory exists while its workers run.
    wait_for_entry(&mut child, dir.path(), "agentchaos-");
    let s = Stalled {
        child,
        dir,
        tmp,
        marker: std::path::PathBuf::new(),
    };
    stop(s, "workers", Signal::SIGINT);
}
