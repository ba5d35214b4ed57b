//! The command line: exit codes, one-line errors, reports, replay, shards.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agentchaos"))
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

#[test]
fn bad_scenarios_exit_2_with_one_line_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\n  \"name\": \"x\",\n  \"runs\": [\n    {\"id\": \"r\", \"steps\": [{\"do\": \"fly\"}]}\n  ]\n}\n").unwrap();
    let out = bin()
        .args(["run", "--quiet", "--scenario"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("{}:4: ", bad.display())), "{err}");
    assert!(err.contains("unknown variant `fly`"), "{err}");
    assert!(out.stdout.is_empty());

    let missing = run(&["run", "--scenario", "/nonexistent/x.json"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("/nonexistent/x.json: cannot read"));
}

#[test]
fn bad_flags_exit_2() {
    let f = fixture();
    let f = f.to_str().unwrap();
    for args in [
        vec!["run", "--scenario", f, "--store-fault", "no-such-fault"],
        vec!["run", "--scenario", f, "--shard", "3/2"],
        vec!["run", "--scenario", f, "--trials", "0"],
        vec!["replay", "--scenario", f, "--plan", "zap@1"],
        // Before any work: a missing adapter program, an unwritable report.
        vec!["run", "--scenario", f, "--adapter", "/nonexistent/adapter"],
        vec!["run", "--scenario", f, "--json", "/nonexistent/dir/r.json"],
        vec!["run", "--scenario", f, "--junit", "/nonexistent/dir/r.xml"],
    ] {
        let out = run(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stderr).lines().count(),
            1,
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn faults_lists_every_fault_profile() {
    let out = run(&["faults"]);
    assert!(out.status.success());
    let listed = text(&out.stdout);
    for (_, name, promise) in agentstore::fault::Fault::ALL {
        assert!(listed.contains(name) && listed.contains(promise), "{name}");
    }
}

#[test]
fn replay_reproduces_a_violation_deterministically() {
    let f = fixture();
    // A kill right after the intent of the remote call is durable: with
    // rerun-uncertain the call runs twice.
    let args = |plan: &str| {
        let mut c = bin();
        c.args([
            "replay",
            "--plan",
            plan,
            "--store-fault",
            "rerun-uncertain",
            "--scenario",
        ])
        .arg(&f);
        c
    };
    let first = args("none").output().unwrap();
    let trace = text(&first.stdout);
    assert!(first.status.success(), "{trace}");
    let hits: usize = trace
        .split("passed ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    let plan = (0..hits)
        .map(|h| format!("kill@{h}"))
        .find(|p| {
            let out = args(p).output().unwrap();
            text(&out.stdout).contains("VIOLATION effect-at-most-once")
        })
        .expect("some kill makes rerun-uncertain apply an effect twice");
    let strip = |o: Output| -> Vec<String> {
        text(&o.stdout)
            .lines()
            .filter(|l| !l.contains("/agentchaos-"))
            .map(str::to_string)
            .collect()
    };
    let a = strip(args(&plan).output().unwrap());
    let b = strip(args(&plan).output().unwrap());
    assert_eq!(a, b);
    assert!(a.iter().any(|l| l.contains(&format!(
        "replay:   agentchaos replay --scenario {} --plan {plan} --store-fault rerun-uncertain",
        f.display()
    ))));
    assert_eq!(args(&plan).output().unwrap().status.code(), Some(1));
}

#[test]
fn reports_shards_and_kept_failures() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    let campaign = |extra: &[&str]| {
        let json = dir.path().join("r.json");
        let out = bin()
            .args([
                "run",
                "--quiet",
                "--trials",
                "12",
                "--nemesis",
                "points",
                "--seed",
                "5",
                "--scenario",
            ])
            .arg(&f)
            .arg("--json")
            .arg(&json)
            .args(extra)
            .output()
            .unwrap();
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        (out, report)
    };
    let (all, report) = campaign(&[]);
    assert!(all.status.success(), "{}", text(&all.stdout));
    assert_eq!(report["trials"], 12);
    let (_, one) = campaign(&["--shard", "1/2"]);
    let (_, two) = campaign(&["--shard", "2/2"]);
    assert_eq!(
        one["trials"].as_u64().unwrap() + two["trials"].as_u64().unwrap(),
        12
    );

    let keep = dir.path().join("kept");
    let junit = dir.path().join("junit.xml");
    let out = bin()
        .args([
            "run",
            "--quiet",
            "--exhaustive",
            // The first life's kills catch it; what is kept and written
            // does not depend on which nemesis or life found the violation.
            "--nemesis",
            "points",
            "--restarts",
            "none",
            "--store-fault",
            "mark-twice",
            "--scenario",
        ])
        .arg(&f)
        .arg("--keep")
        .arg(&keep)
        .arg("--junit")
        .arg(&junit)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    let verdict: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("PASS") || l.starts_with("FAIL"))
        .collect();
    assert_eq!(verdict.len(), 1, "{stdout}");
    assert!(
        verdict[0].starts_with("FAIL: ") && verdict[0].ends_with("(exit 1)"),
        "{stdout}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("name=\"recovery-idempotent\" classname=\"agentchaos.small\">"),
        "{xml}"
    );
    assert!(xml.contains("<failure message="));
    let kept: Vec<_> = std::fs::read_dir(keep.join("small")).unwrap().collect();
    assert!(!kept.is_empty());
    let trial = kept[0].as_ref().unwrap().path();
    assert!(std::fs::read_to_string(trial.join("VIOLATIONS.txt"))
        .unwrap()
        .contains("replay: agentchaos replay"));
    assert!(trial.join("root/sessions/session/events.jsonl").exists());
}

#[test]
fn failing_random_scenarios_are_shrunk_to_a_replayable_minimum() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("kept");
    let out = bin()
        .args([
            "run", "--quiet", "--random", "3", "--trials", "30", "--seed", "1",
        ])
        // The shrinker tries each candidate with plans of the failing
        // plan's kind; the first life's kills catch this fault, in a
        // seventh of the time every nemesis and restart take.
        .args(["--nemesis", "points", "--restarts", "none"])
        .args([
            "--store-fault",
            "rerun-uncertain",
            "--shrink-budget",
            "30",
            "--scenario",
        ])
        .arg(fixture())
        .arg("--keep")
        .arg(&keep)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    let replay = stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("replay: agentchaos replay "))
        .find(|l| l.contains("-shrunk.json"))
        .unwrap_or_else(|| panic!("no shrunk replay command in:\n{stdout}"));
    let args: Vec<&str> = std::iter::once("replay").chain(replay.split(' ')).collect();
    let again = run(&args);
    assert_eq!(
        again.status.code(),
        Some(1),
        "the shrunk scenario still fails:\n{}",
        text(&again.stdout)
    );
    let shrunk = args[args.iter().position(|a| *a == "--scenario").unwrap() + 1];
    assert!(shrunk.starts_with(keep.to_str().unwrap()));
    let s = agentchaos::scenario::load(Path::new(shrunk), u64::MAX).unwrap();
    assert!(s.step_count() <= 2, "{}", s.to_json());
}

/// Runs `cmd` to its end, or kills it after two minutes and fails: a
/// command that blocks (opening a FIFO) fails the test, never hangs it.
fn output_within(mut cmd: Command) -> Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still runs after 120 s: it blocked");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Asserts exit 2 with one line on stderr holding every one of `says`.
fn refused(out: &Output, says: &[&str]) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}{}", text(&out.stdout));
    assert_eq!(err.lines().count(), 1, "{err}");
    for s in says {
        assert!(err.contains(s), "{s:?} not in {err}");
    }
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The small fixture under another `name`, written to `dir/file`.
fn renamed(dir: &Path, file: &str, name: &str) -> PathBuf {
    let mut s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture()).unwrap()).unwrap();
    s["name"] = name.into();
    let path = dir.join(file);
    std::fs::write(&path, s.to_string()).unwrap();
    path
}

/// A scenario named `..` would keep its failing trials in `keep/../PLAN`,
/// beside `keep`: it is refused before anything runs, and the directory
/// of that name beside `keep` stays as it was.
#[test]
fn a_scenario_named_dotdot_is_refused_and_nothing_beside_keep_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    renamed(dir.path(), "dotdot.json", "..");
    std::fs::create_dir(dir.path().join("keep")).unwrap();
    std::fs::create_dir(dir.path().join("powercut@24")).unwrap();
    std::fs::write(dir.path().join("powercut@24/data"), "precious").unwrap();
    let out = bin()
        .current_dir(dir.path())
        .args(["run", "--quiet", "--nemesis", "points", "--trials", "4"])
        .args(["--scenario", "dotdot.json", "--keep", "keep"])
        .args(["--store-fault", "ack-before-fsync"])
        .output()
        .unwrap();
    refused(&out, &["dotdot.json:", "\"..\"", "not \".\" or \"..\""]);
    assert_eq!(listing(dir.path()), ["dotdot.json", "keep", "powercut@24"]);
    assert!(listing(&dir.path().join("keep")).is_empty());
    assert_eq!(listing(&dir.path().join("powercut@24")), ["data"]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("powercut@24/data")).unwrap(),
        "precious"
    );
}

/// `run --keep` and `replay --keep` fill a new or empty directory only:
/// one that holds anything is refused up front, and what it holds is left
/// as it was (a kept trial used to replace `DIR/NAME/PLAN` whole).
#[test]
fn a_keep_directory_that_is_not_new_or_empty_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("keep");
    std::fs::create_dir_all(keep.join("small/kill@3")).unwrap();
    std::fs::write(keep.join("small/kill@3/mine"), "mine").unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "mine").unwrap();
    let f = fixture();
    // `run --keep` (and its old spelling), `replay --keep`.
    for (command, flag, target, says) in [
        ("run", "--keep-failures", &keep, "exists and is not empty"),
        ("run", "--keep", &keep, "exists and is not empty"),
        ("replay", "--keep", &keep, "exists and is not empty"),
        ("run", "--keep", &file, "exists and is not a directory"),
    ] {
        let mut cmd = bin();
        if command == "replay" {
            cmd.args(["replay", "--plan", "kill@3"]);
        } else {
            cmd.args(["run", "--quiet", "--nemesis", "points", "--trials", "2"]);
            cmd.args(["--store-fault", "mark-twice"]);
        }
        let out = cmd
            .arg("--scenario")
            .arg(&f)
            .arg(flag)
            .arg(target)
            .output()
            .unwrap();
        refused(&out, &["--keep ", &target.display().to_string(), says]);
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    }
    assert_eq!(listing(&keep), ["small"]);
    assert_eq!(listing(&keep.join("small")), ["kill@3"]);
    assert_eq!(listing(&keep.join("small/kill@3")), ["mine"]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}

/// A scenario path that names a FIFO, a device or a directory holding a
/// FIFO is refused without opening it (opening a FIFO blocks until a writer
/// comes; /dev/zero never ends), and a file larger than --max-input-bytes
/// is refused without reading it: exit 2, one line naming the file.
#[test]
fn scenario_files_that_are_not_regular_or_too_large_are_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("f.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let run_on = |scenario: &Path, extra: &[&str]| {
        let mut cmd = bin();
        cmd.args(["run", "--quiet", "--nemesis", "points", "--trials", "1"])
            .arg("--scenario")
            .arg(scenario)
            .args(extra);
        output_within(cmd)
    };
    let f = fifo.display().to_string();
    refused(
        &run_on(&fifo, &[]),
        &[&format!("{f}: is a FIFO, not a regular file")],
    );
    // In a directory of scenarios, after a good one.
    renamed(dir.path(), "a.json", "a");
    refused(&run_on(dir.path(), &[]), &[&format!("{f}: is a FIFO")]);
    refused(
        &run_on(Path::new("/dev/zero"), &[]),
        &["/dev/zero: is a character device, not a regular file"],
    );
    // 300 MB, sparse: refused on its size, never read.
    let big = dir.path().join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(300_000_000)
        .unwrap();
    refused(
        &run_on(&big, &[]),
        &[&format!(
            "{}: is 300000000 bytes, larger than the limit of {} bytes (--max-input-bytes raises it)",
            big.display(),
            agentchaos::scenario::DEFAULT_MAX_INPUT_BYTES
        )],
    );
    let small = fixture();
    let size = std::fs::metadata(&small).unwrap().len();
    refused(
        &run_on(&small, &["--max-input-bytes", &(size - 1).to_string()]),
        &[&format!(
            "is {size} bytes, larger than the limit of {} bytes",
            size - 1
        )],
    );
}

/// --max-input-bytes raises the limit for the agents too: they read the
/// same scenario file.
#[test]
fn a_raised_input_limit_reaches_the_agents() {
    let dir = tempfile::tempdir().unwrap();
    let padded = dir.path().join("padded.json");
    let limit = agentchaos::scenario::DEFAULT_MAX_INPUT_BYTES as usize;
    let mut json = std::fs::read_to_string(fixture()).unwrap();
    json.push_str(&" ".repeat(limit + 1 - json.len()));
    std::fs::write(&padded, json).unwrap();
    let replay = |extra: &[&str]| {
        bin()
            .args(["replay", "--plan", "kill@3", "--scenario"])
            .arg(&padded)
            .args(extra)
            .output()
            .unwrap()
    };
    refused(&replay(&[]), &["larger than the limit"]);
    let out = replay(&["--max-input-bytes", &(limit + 1).to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("result: no violations"));
}

/// A --json or --junit target that cannot be written (a directory, a
/// device, a place no file can be created) is refused before the campaign
/// runs, not after it.
#[test]
fn report_targets_that_cannot_be_written_are_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    let d = dir.path().display().to_string();
    for (flag, target, says) in [
        ("--json", d.as_str(), "exists and is not a regular file"),
        ("--junit", "/dev/full", "exists and is not a regular file"),
        ("--json", "/proc/agentchaos-report.json", "cannot create"),
        ("--junit", "/nonexistent/dir/r.xml", "cannot create"),
    ] {
        let out = bin()
            .args(["run", "--quiet", "--nemesis", "points", "--trials", "2"])
            .arg("--scenario")
            .arg(&f)
            .args([flag, target])
            .output()
            .unwrap();
        refused(&out, &[flag, target, says]);
        assert!(out.stdout.is_empty(), "ran anyway: {}", text(&out.stdout));
    }
    // A report file made up front and never written is not left behind.
    let json = dir.path().join("r.json");
    let out = bin()
        .args([
            "run",
            "--quiet",
            "--scenario",
            "/nonexistent/x.json",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    refused(&out, &["/nonexistent/x.json: cannot read"]);
    assert!(!json.exists());
}

/// The options `--help` lists, each with whether a description follows.
fn options_of(help: &str) -> Vec<(String, bool)> {
    let lines: Vec<&str> = help.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if !t.starts_with('-') || !line.starts_with("  ") {
            continue;
        }
        let name = t
            .split([',', ' '])
            .find(|w| w.starts_with("--"))
            .unwrap_or(t)
            .to_string();
        // `--opt <V>  Description`, or the description indented on the next line.
        let same_line = t
            .split_once("  ")
            .is_some_and(|(_, d)| !d.trim().is_empty());
        let next_line = lines.get(i + 1).is_some_and(|n| {
            let d = n.trim_start();
            !d.is_empty() && !d.starts_with('-') && n.len() - d.len() > line.len() - t.len()
        });
        out.push((name, same_line || next_line));
    }
    out
}

#[test]
fn every_option_of_run_replay_and_workers_is_described_with_examples() {
    for (command, must_list) in [
        (
            "run",
            &[
                "--seed",
                "--keep",
                "--dir",
                "--quiet",
                "--adapter",
                "--jobs",
            ][..],
        ),
        ("replay", &["--scenario", "--plan", "--keep", "--dir"][..]),
        ("workers", &["--plan", "--dir", "--postgres"][..]),
    ] {
        let out = run(&[command, "--help"]);
        assert_eq!(out.status.code(), Some(0));
        let help = text(&out.stdout);
        let options = options_of(&help);
        let undescribed: Vec<&String> = options
            .iter()
            .filter(|(_, described)| !described)
            .map(|(name, _)| name)
            .collect();
        assert!(
            undescribed.is_empty(),
            "{command}: {undescribed:?} in\n{help}"
        );
        for name in must_list {
            assert!(
                options.iter().any(|(n, _)| n == name),
                "{command} --help lacks {name}:\n{help}"
            );
        }
        // The old spellings still work (below) but are not advertised.
        assert!(!options
            .iter()
            .any(|(n, _)| n == "--keep-failures" || n == "--scratch"));
        let examples = help.split_once("Examples").map_or("", |(_, e)| e);
        let shown = examples
            .lines()
            .filter(|l| l.starts_with("  agentchaos "))
            .count();
        assert!(shown >= 2, "{command}: {shown} example(s) in\n{help}");
        // Grouped under headings, not one list of Options.
        assert!(
            help.contains("\nStore under test:\n")
                || command == "replay" && help.contains("\nOutput:\n"),
            "{help}"
        );
    }
}

#[test]
fn the_old_spellings_of_keep_and_dir_still_work() {
    // --keep-failures is --keep: the same directory is made (here it cannot be).
    let out = run(&["run", "--keep-failures", "/dev/null/kept", "--scenario"]
        .into_iter()
        .chain([fixture().to_str().unwrap()])
        .collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("--keep /dev/null/kept"), "{err}");
    // workers --scratch is workers --dir: parsed, then the next check speaks.
    for flag in ["--scratch", "--dir"] {
        let out = run(&["workers", flag, "/tmp", "--workers", "1"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            text(&out.stderr).contains("--workers must be at least 2"),
            "{}",
            text(&out.stderr)
        );
    }
}

/// A short clean campaign, stderr to a pipe (no terminal).
fn short_campaign(extra: &[&str], period_ms: Option<&str>) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = bin();
    cmd.args([
        "run",
        "--nemesis",
        "points",
        "--restarts",
        "none",
        "--trials",
        "4",
    ])
    .arg("--scenario")
    .arg(fixture())
    .arg("--dir")
    .arg(dir.path())
    .args(extra);
    if let Some(ms) = period_ms {
        cmd.env("AGENTCHAOS_PROGRESS_PERIOD_MS", ms);
    }
    cmd.output().unwrap()
}

fn progress_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("agentchaos: ") && l.contains(" trials, "))
        .collect()
}

#[test]
fn without_a_terminal_progress_is_a_line_on_stderr_and_the_verdict_ends_the_scorecard() {
    let out = short_campaign(&[], Some("1"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let lines = progress_lines(&stderr);
    assert!(!lines.is_empty(), "{stderr}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains(" violation(s) so far, ") && l.ends_with("s elapsed")),
        "{stderr}"
    );
    assert!(
        lines
            .last()
            .unwrap()
            .contains(" 4/4 trials, 0 violation(s) so far"),
        "{stderr}"
    );
    // Nothing else on stderr: the report is stdout's.
    assert_eq!(stderr.lines().count(), lines.len(), "{stderr}");

    let stdout = text(&out.stdout);
    let verdicts: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("PASS") || l.starts_with("FAIL"))
        .collect();
    assert_eq!(
        verdicts,
        ["PASS: no violations, every trial carried out (exit 0)"],
        "{stdout}"
    );
    // One scenario: its rate and the total's divide the same trials by the same time.
    let row = stdout.lines().find(|l| l.starts_with("small ")).unwrap();
    let total = stdout.lines().find(|l| l.starts_with("total ")).unwrap();
    let row_rate = row.split_whitespace().nth(3).unwrap();
    let total_rate = total.split_whitespace().nth(2).unwrap();
    assert_eq!(row_rate, total_rate, "{stdout}");

    // --quiet silences it; the period's default (10 s) still prints the last line.
    let quiet = short_campaign(&["--quiet"], Some("1"));
    assert!(progress_lines(&text(&quiet.stderr)).is_empty());
    let default = short_campaign(&[], None);
    let stderr = text(&default.stderr);
    assert!(
        progress_lines(&stderr)
            .last()
            .is_some_and(|l| l.contains(" 4/4 trials, ")),
        "{stderr}"
    );
}
