//! `agentstore bench` through the real binary: usage errors are one line and
//! exit code 2; a (very short) run writes its JSON and SVG and leaves its
//! directory as it found it. No timing is asserted.

use std::path::Path;
use std::process::{Command, Output};

fn agentstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentstore"))
        .args(args)
        .output()
        .expect("the agentstore binary runs")
}

fn scratch() -> tempfile::TempDir {
    // On the real disk, not tmpfs: the suite measures O_DIRECT and fsync.
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn assert_usage_error(out: &Output, expect: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.contains(expect), "{stderr:?} lacks {expect:?}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn an_unwritable_dir_is_one_line_and_exit_2() {
    // /sys refuses new entries even for root, so this holds in any container.
    let out = agentstore(&["bench", "--dir", "/sys", "--seconds", "0.01"]);
    assert_usage_error(
        &out,
        "agentstore: cannot benchmark in /sys: cannot create a scratch directory in it",
    );
}

#[test]
fn a_missing_dir_or_file_is_one_line_and_exit_2() {
    let d = scratch();
    let missing = d.path().join("missing");
    let out = agentstore(&["bench", "--dir", missing.to_str().unwrap()]);
    assert_usage_error(&out, "missing: no such directory");
    let file = d.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let out = agentstore(&["bench", "--dir", file.to_str().unwrap()]);
    assert_usage_error(&out, "file: not a directory");
}

#[test]
fn an_output_in_a_missing_directory_is_refused_before_running() {
    let d = scratch();
    let json = d.path().join("no/such/dir/report.json");
    let out = agentstore(&[
        "bench",
        "--dir",
        d.path().to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_usage_error(&out, "is not a directory");
    assert_eq!(
        std::fs::read_dir(d.path()).unwrap().count(),
        0,
        "nothing ran"
    );
}

#[test]
fn bad_seconds_are_refused() {
    for bad in ["0", "-1", "nan", "soon"] {
        let out = agentstore(&["bench", "--seconds", bad]);
        assert_eq!(out.status.code(), Some(2), "--seconds {bad}");
    }
}

#[test]
fn a_short_run_reports_json_and_svg_and_cleans_up() {
    let d = scratch();
    let work = d.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let json = d.path().join("bench.json");
    let svg = d.path().join("bench.svg");
    let out = agentstore(&[
        "bench",
        "--dir",
        work.to_str().unwrap(),
        "--seconds",
        "0.02",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for section in [
        "Sync methods, 200 B appends",
        "Sync methods, 8 KiB writes",
        "The store",
        "Group commit",
        "Ratios, from this run",
    ] {
        assert!(
            stdout.contains(section),
            "{section} missing from:\n{stdout}"
        );
    }
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["format"], 4);
    assert_eq!(report["methods"].as_array().unwrap().len(), 12);
    assert_eq!(report["ratios"].as_array().unwrap().len(), 5);
    // Figures and ratios for the user's own judgement: no verdicts.
    assert!(report.get("goals").is_none());
    for verdict in ["Goals", "NOT MET", "\nmet "] {
        assert!(!stdout.contains(verdict), "{verdict:?} in:\n{stdout}");
    }
    assert!(report["machine"]["kernel"]
        .as_str()
        .unwrap()
        .starts_with("Linux"));
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("<polyline"));
    assert_eq!(leftovers(&work), Vec::<String>::new());
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Waits (polling, bounded) until `dir` holds an entry whose name starts
/// with `prefix`, while `child` runs; panics if it exits first.
fn wait_for_entry(child: &mut std::process::Child, dir: &Path, prefix: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let found = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(prefix));
        if found {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "exited ({status}) before creating {prefix}* in {}",
                dir.display()
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {prefix}* in {} after 120 s",
            dir.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn a_signal_removes_the_scratch_directory_and_exits_128_plus_its_number() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    for (signal, code) in [(Signal::SIGINT, 130), (Signal::SIGTERM, 143)] {
        let d = scratch();
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentstore"))
            .args([
                "bench",
                "--dir",
                d.path().to_str().unwrap(),
                "--seconds",
                "60",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_entry(&mut child, d.path(), ".agentstore-bench-");
        kill(Pid::from_raw(child.id() as i32), signal).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{signal}: {stderr}");
        assert!(
            stderr.contains(&format!("agentstore: interrupted by {signal}")),
            "{stderr}"
        );
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().collect();
        assert!(left.is_empty(), "{signal} left {left:?}");
    }
}
