//! `agentchaos run --timings`: each trial's wall time broken into its
//! parts (process starts by kind, the adapters' hello, round trips, the
//! store's own work, the checker, the agents' own work, the rest), which
//! add up to it within 10 % whatever the machine's speed: each part is
//! measured with its own clock readings, and a part counted twice, or an
//! agent reporting more than its life lasted, breaks the sum.

use crate::campaign;
use crate::support;

use std::path::{Path, PathBuf};

use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

fn part(parts: &Value, name: &str) -> (u64, f64) {
    let p = &parts[name];
    (
        p["count"].as_u64().unwrap_or_else(|| panic!("{name}: {p}")),
        p["seconds"].as_f64().unwrap(),
    )
}

/// Every trial's parts, `other` included and ptrace left out (it overlaps),
/// add up to its wall time within 10 %, and none is negative beyond that.
fn assert_adds_up(report: &Value, stdout: &str) -> Vec<Value> {
    let trials = report["timings"]["trials"].as_array().unwrap_or_else(|| {
        panic!("no timings in the report: {stdout}");
    });
    assert_eq!(
        trials.len() as u64,
        report["trials"].as_u64().unwrap(),
        "one entry per trial"
    );
    for t in trials {
        let wall = t["wall_seconds"].as_f64().unwrap();
        let parts = &t["parts"];
        let mut sum = 0.0;
        for (name, p) in parts.as_object().unwrap() {
            if ["ptrace", "excess", "beside_observations"].contains(&name.as_str()) {
                continue;
            }
            let s = p["seconds"].as_f64().unwrap();
            assert!(s >= -0.1 * wall, "{name} is negative: {t}");
            sum += s;
        }
        // Within 10 %, or 5 ms for a short trial (the harness's
        // HANDOVER_SLACK_MICROS: clock readings of two processes around a
        // hand-over).
        let slack = (0.1 * wall).max(0.005);
        assert!(
            (sum - wall).abs() <= slack,
            "parts add up to {sum} s, the trial took {wall} s: {t}"
        );
        let measured = sum - part(parts, "other").1;
        assert!(measured <= wall + slack, "parts counted twice: {t}");
        // Two processes' clock readings around one hand-over may overlap
        // a little (a process starts running before its spawner has read
        // the clock), never by a tenth of the trial.
        assert!(part(parts, "excess").1 <= slack, "{t}");
        assert_eq!(t["adds_up"], true, "{t}");
    }
    trials.clone()
}

#[test]
fn in_process_trials_add_up_with_the_store_and_checker_inside() {
    let (code, report, stdout) = campaign::run(
        &fixture(),
        &[
            "--trials",
            "4",
            "--restarts",
            "none",
            "--nemesis",
            "points",
            "--timings",
        ],
    );
    assert_eq!(code, 0, "{stdout}");
    let trials = assert_adds_up(&report, &stdout);
    for t in &trials {
        let parts = &t["parts"];
        let lives = part(parts, "agent_start").0;
        assert!(lives >= 1, "{t}");
        assert_eq!(part(parts, "agent").0, lives, "one remainder per life: {t}");
        assert!(part(parts, "store").0 > 0, "the store's calls: {t}");
        assert_eq!(part(parts, "checker").0, 1, "{t}");
        assert_eq!(part(parts, "start_life").0, 0, "in-process: {t}");
        assert_eq!(part(parts, "round_trips").0, 0, "in-process: {t}");
    }
    assert!(stdout.contains("where the trials' time went"), "{stdout}");
    assert!(stdout.contains("top costs: "), "{stdout}");
    // Without the flag, nothing is measured.
    let (_, plain, _) = campaign::run(
        &fixture(),
        &["--trials", "1", "--restarts", "none", "--nemesis", "points"],
    );
    assert_eq!(plain["timings"], Value::Null);
}

#[test]
fn adapter_trials_count_their_processes_by_kind_and_add_up_under_ptrace() {
    let adapter = format!("{} adapter", support::workspace_bin("agentstore").display());
    let (code, report, stdout) = campaign::run(
        &fixture(),
        &[
            "--trials",
            "2",
            "--nemesis",
            "points,syscall",
            "--adapter",
            &adapter,
            "--timings",
        ],
    );
    assert_eq!(code, 0, "{stdout}");
    let trials = assert_adds_up(&report, &stdout);
    let mut traced = 0;
    for t in &trials {
        let parts = &t["parts"];
        // The first life opens once; each observation starts an observer.
        assert!(part(parts, "start_life").0 >= 1, "{t}");
        assert!(part(parts, "hello_life").0 >= 1, "{t}");
        assert!(part(parts, "start_observer").0 >= 1, "{t}");
        assert_eq!(
            part(parts, "start_observer").0,
            part(parts, "hello_observer").0,
            "{t}"
        );
        assert!(part(parts, "round_trips").0 > 0, "{t}");
        assert_eq!(part(parts, "store").0, 0, "the store is the adapter's: {t}");
        if t["plan"].as_str().unwrap().starts_with("sys-") {
            traced += 1;
            assert!(part(parts, "ptrace").0 > 0, "the tracer's stops: {t}");
        } else {
            assert_eq!(part(parts, "ptrace").0, 0, "{t}");
        }
    }
    assert!(traced > 0, "no traced trial: {stdout}");
    let outside = &report["timings"]["outside_trials"];
    assert!(
        part(outside, "start_probe").0 > 0,
        "the probes' processes: {outside}"
    );
}
