//! The many-workers campaign (`agentchaos workers`): each invariant is
//! shown catching a broken store (a fault of agentstore's) and passing on
//! the unmodified store under the same plan, and a printed replay command
//! reproduces its violation.

use std::process::Command;

/// `agentchaos workers ARGS…`: exit code and output (stdout, then stderr).
pub(crate) fn workers(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .arg("workers")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap(), format!("{stdout}{stderr}"))
}

/// [`workers`] with `--json`: its exit code, output and JSON report.
fn workers_report(args: &[&str]) -> (i32, String, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("workers.json");
    let mut all = args.to_vec();
    all.extend(["--json", json.to_str().unwrap()]);
    let (code, out) = workers(&all);
    let report = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| panic!("no JSON report: {out}"));
    (code, out, report)
}

/// The fault is caught under `plan` by `invariant`, with a replay command
/// naming the fault; the unmodified store passes the same plan.
fn caught(fault: &str, plan: &str, invariant: &str, extra: &[&str]) -> String {
    let mut args = vec!["--plan", plan, "--store-fault", fault];
    args.extend_from_slice(extra);
    let (code, out) = workers(&args);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("VIOLATION {invariant} ")), "{out}");
    assert!(
        out.contains(&format!("replay:   agentchaos workers --plan {plan} ")),
        "{out}"
    );
    assert!(out.contains(&format!("--store-fault {fault}")), "{out}");
    let mut clean = vec!["--plan", plan];
    clean.extend_from_slice(extra);
    let (code, passed) = workers(&clean);
    assert_eq!(code, 0, "{passed}");
    assert!(passed.contains("0 violation(s)"), "{passed}");
    out
}

#[test]
fn the_unmodified_store_fences_the_zombie_writer_at_its_next_write() {
    // Paused before its effect (its renewal is refused) and before its commit.
    for plan in ["pause@3", "pause@4"] {
        let (code, out) = workers(&["--plan", plan]);
        assert_eq!(code, 0, "{out}");
        let line = out.lines().find(|l| l.starts_with(plan)).unwrap();
        assert!(line.contains("1 takeover(s), 1 write(s) fenced"), "{out}");
    }
}

#[test]
fn no_epoch_check_is_caught_by_fenced_epoch_refused_and_replays() {
    let out = caught("no-epoch-check", "pause@4", "fenced-epoch-refused", &[]);
    assert!(
        out.contains(
            "found:    the store acknowledged effect_committed at seq 4 for w0 at epoch 1"
        ),
        "{out}"
    );
    let replay = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay:   agentchaos workers "))
        .unwrap();
    let (code, again) = workers(&replay.split(' ').collect::<Vec<_>>());
    assert_eq!(code, 1, "{again}");
    assert!(again.contains("VIOLATION fenced-epoch-refused "), "{again}");
}

#[test]
fn no_epoch_check_is_caught_by_effect_once_across_workers() {
    // Paused between its intent and its effect: the heir reconciles (not
    // applied) and applies it; the zombie's renewal must be refused.
    let out = caught(
        "no-epoch-check",
        "pause@3",
        "effect-once-across-workers",
        &[],
    );
    assert!(out.contains("w1 applied op-s0-0 at epoch 2"), "{out}");
    assert!(out.contains("w0 applied op-s0-0 at epoch 1"), "{out}");
}

#[test]
fn takeover_without_recovery_is_caught_by_takeover_marks_orphans() {
    // Killed after its intent: the call is the orphan the takeover must mark.
    let out = caught(
        "takeover-without-recovery",
        "kill@3",
        "takeover-marks-orphans",
        &[],
    );
    assert!(out.contains("no tool_recovery for call c0"), "{out}");
}

#[test]
fn lease_ignores_expiry_is_caught_by_one_live_owner() {
    // A long lease, renewed right before the pause: the heir asks while it
    // is surely live, however slow the machine.
    caught(
        "lease-ignores-expiry",
        "pause@2",
        "one-live-owner",
        &["--ttl-ms", "5000"],
    );
}

#[test]
fn lease_same_epoch_is_caught_by_one_live_owner() {
    // The heir is granted the paused owner's live lease (5 s, per worker)
    // at its own epoch: two holders of epoch 1, neither fenced.
    let out = caught(
        "lease-same-epoch",
        "pause@2",
        "one-live-owner",
        &["--ttl-ms", "5000,300"],
    );
    assert!(
        out.contains("expected: one holder of epoch 1 of session s0 at a time: w1 granted it only after w0's lease expired"),
        "{out}"
    );
}

#[test]
fn through_the_adapter_the_same_store_passes_and_its_fault_is_caught() {
    let exe = env!("CARGO_BIN_EXE_agentchaos");
    let adapter = format!("{exe} reference-adapter");
    let (code, out) = workers(&["--plan", "pause@4", "--adapter", &adapter]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 write(s) fenced"), "{out}");
    let broken = format!("env AGENTSTORE_FAULT=no-epoch-check {adapter}");
    let (code, out) = workers(&["--plan", "pause@4", "--adapter", &broken]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("VIOLATION fenced-epoch-refused "), "{out}");
}

#[test]
fn a_takeover_after_the_heir_was_killed_in_its_second_life_marks_its_orphans_again() {
    // The first owner is killed after its intent; the heir reconciles the
    // call (not applied), writes the intent of its re-run and is killed
    // there; a fresh worker takes both sessions over.
    let out = caught(
        "takeover-without-recovery",
        "kill@3+kill@3",
        "takeover-marks-orphans",
        &[],
    );
    assert!(out.contains("before w1 acts at epoch 2"), "{out}");
    let (code, passed) = workers(&["--plan", "kill@3+kill@3"]);
    assert_eq!(code, 0, "{passed}");
    // s0 twice (epochs 2 and 3), and s1 once when its owner, the heir, dies.
    assert!(passed.contains("kill@3+kill@3 3 takeover(s)"), "{passed}");
}

#[test]
fn takeover_truncates_tail_is_caught_by_acked_survive_takeover_and_replays() {
    // Killed right after its effect commit: the takeover cuts that line.
    let out = caught(
        "takeover-truncates-tail",
        "kill@5",
        "acked-survive-takeover",
        &[],
    );
    assert!(
        out.contains("expected: effect_committed at seq 4, acknowledged to w0 at epoch 1"),
        "{out}"
    );
    let replay = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay:   "))
        .unwrap();
    let (code, again) = crate::campaign::replay(replay);
    assert_eq!(code, 1, "{again}");
    assert!(
        again.contains("VIOLATION acked-survive-takeover "),
        "{again}"
    );
}

#[test]
fn a_store_that_refuses_every_leased_write_fails_work_completes() {
    // No strike needed: the first owner is refused from its first write on.
    let out = caught("refuse-leased-writes", "none", "work-completes", &[]);
    assert!(
        out.contains("found:    the store refused w0's run_started with fenced, no one else holding the session; 0 of 3 effects applied (op-s0-0, op-s0-1, op-s0-2 missing)"),
        "{out}"
    );
    assert!(
        out.contains("expected: session s0's workload finished by its final owner w0 (epoch 1)"),
        "{out}"
    );
}

#[test]
fn a_strike_that_never_fires_is_not_exercised_never_a_pass() {
    // A session's workload is 17 writes and its done: step 40 never comes.
    let (code, out) = workers(&["--plan", "pause@40", "--sessions", "1"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("NOT EXERCISED pause@40: pause@40 never fired: session s0 ended after 18 step(s) of its owner w0, before its step 40"),
        "{out}"
    );
    assert!(out.contains("strikes fired/planned: pause 0/1"), "{out}");
    assert!(out.contains("0 violation(s), 1 not exercised"), "{out}");
    let last = out.trim().lines().last().unwrap();
    assert!(
        last.starts_with("agentchaos: workers: no plan was exercised"),
        "{out}"
    );
    // A second strike after one that never fired is named as such.
    let (code, out) = workers(&["--plan", "kill@30+kill@1"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(
            "NOT EXERCISED kill@30+kill@1: kill@1 never fired: kill@30 before it never fired"
        ),
        "{out}"
    );
}

#[test]
fn each_strike_records_what_it_hit_in_the_scorecard_and_the_json_report() {
    let (code, out, report) = workers_report(&["--plan", "kill@3+pause@2"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("strikes fired 2/2"), "{out}");
    assert!(
        out.contains("strikes fired/planned: kill 1/1 · pause 1/1"),
        "{out}"
    );
    let trial = &report["trials"][0];
    assert_eq!(trial["verdict"], "pass", "{report}");
    assert_eq!(trial["strikes"][0]["strike"], "kill@3", "{report}");
    assert_eq!(trial["strikes"][0]["fired"], true, "{report}");
    assert_eq!(
        trial["strikes"][0]["what"],
        "killed w0 after its step 3 of s0; w1 took its 1 session(s) over",
        "{report}"
    );
    assert_eq!(
        trial["strikes"][1]["what"], "paused w1 after its step 2 of s0; w2 took it over",
        "{report}"
    );
    assert_eq!(report["strikes"]["pause"]["fired"], 1, "{report}");
    assert_eq!(report["not_exercised"], 0, "{report}");
}

#[test]
fn a_kill_at_a_crash_point_names_the_point_and_a_request_without_it_is_not_exercised() {
    // Inside the owner's renewal before its first effect (after its temp
    // file was written), then inside the heir's renewal before the effect
    // it runs again.
    let plan = "kill@3.2+kill@3.1";
    let (code, out, report) = workers_report(&["--plan", plan]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("strikes fired/planned: crash-point-kill 2/2"),
        "{out}"
    );
    let strikes = &report["trials"][0]["strikes"];
    assert_eq!(strikes[0]["kind"], "crash-point-kill", "{report}");
    assert_eq!(
        strikes[0]["what"],
        "killed w0 at crash point 2 of its request 3 of s0 (lease.fsync); w1 took its 1 session(s) over",
        "{report}"
    );
    assert_eq!(
        strikes[1]["what"],
        "killed w1 at crash point 1 of its request 3 of s0 (lease.write); w2 took its 2 session(s) over",
        "{report}"
    );
    // A write passes two crash points (its log write and fdatasync).
    let (code, out) = workers(&["--plan", "kill@1.3"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("NOT EXERCISED kill@1.3: kill@1.3 never fired: w0 at crash point 3 of its request 1 of s0: the request passed 2 crash point(s)"),
        "{out}"
    );
}

#[test]
fn a_kill_inside_the_heirs_takeover_names_its_point_and_a_third_worker_takes_over() {
    // The owner dies writing its renewal; the heir dies inside its
    // recovery, its orphan's mark written, not synced; a fresh worker
    // takes over both workers' sessions.
    let plan = "kill@3.1+kill@take.12";
    let (code, out, report) = workers_report(&["--plan", plan]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("crash-point-kill 1/1 · takeover-crash-point-kill 1/1"),
        "{out}"
    );
    let strikes = &report["trials"][0]["strikes"];
    assert_eq!(
        strikes[0]["what"],
        "killed w0 at crash point 1 of its request 3 of s0 (lease.write); w2 took its 2 session(s) over",
        "{report}"
    );
    assert_eq!(strikes[1]["kind"], "takeover-crash-point-kill", "{report}");
    assert_eq!(
        strikes[1]["what"],
        "killed w1 at crash point 12 of its takeover of s0 (log.fdatasync); w2 takes over",
        "{report}"
    );
    // The takeover passes 13 crash points: a 14th never comes.
    let (code, out) = workers(&["--plan", "kill@3.1+kill@take.14"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("kill@take.14 never fired: w1's takeover of s0 passed 13 crash point(s), none the 14-th"),
        "{out}"
    );
    // It names the heir of a crash-point kill, and nothing else.
    let (code, out) = workers(&["--plan", "kill@3+kill@take.1"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("worker plan \"kill@3+kill@take.1\""), "{out}");
}

#[test]
fn every_point_kills_at_each_counted_crash_point_and_each_one_fires() {
    // A strike-free trial counts the crash points of each request of the
    // first session's owner, a second one those of the heir's takeover
    // after kill@3.1; a plan per point runs, and none is left
    // unexercised: the counts are what the kills meet.
    let count = |out: &str, prefix: &str| -> usize {
        let line = out
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("{out}"));
        let n = line[prefix.len()..]
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(line.ends_with(&format!(" {n} strike plan(s)")), "{line}");
        n
    };
    // The unmodified store's campaign and the broken one's (below) run at
    // once: each has its own scratch directories, and both mostly wait
    // out leases.
    let clean_args = ["--every-point", "--sessions", "1", "--ttl-ms", "100"];
    let broken_args = [&clean_args[..], &["--store-fault", "mark-twice"]].concat();
    let ((code, out), (broken_code, broken_out)) = std::thread::scope(|s| {
        let broken = s.spawn(|| workers(&broken_args));
        (workers(&clean_args), broken.join().unwrap())
    });
    assert_eq!(code, 0, "{out}");
    let requests = count(&out, "crash points: ");
    assert!(requests > 18, "more than one point per request: {out}");
    // The lease record's 4 points, then the recovery's.
    let takeover = count(&out, "takeover crash points: ");
    assert!(takeover > 4, "{out}");
    assert!(
        out.contains(&format!("takeover-crash-point-kill {takeover}/{takeover}")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "total: {} trial(s), 0 violation(s), 0 not exercised",
            requests + takeover
        )),
        "{out}"
    );
    // A recovery that marks again what a dead heir marked is found by the
    // enumerated takeover points, with no plan picked for it: from the
    // point the first mark is written on.
    assert_eq!(broken_code, 1, "{broken_out}");
    let caught: Vec<&str> = broken_out
        .lines()
        .filter_map(|l| l.strip_prefix("  plan:     "))
        .collect();
    assert!(!caught.is_empty(), "{broken_out}");
    assert!(
        caught.iter().all(|p| p.starts_with("kill@3.1+kill@take.")),
        "only takeover kills find it: {caught:?}"
    );
    assert!(
        broken_out.contains("VIOLATION takeover-marks-orphans "),
        "{broken_out}"
    );
    let (code, out) = workers(&["--every-point", "--postgres"]);
    assert_eq!(code, 2, "{out}");
}

#[test]
fn a_recovery_that_marks_twice_is_caught_after_a_takeover_that_died_halfway() {
    // The heir's recovery marked c0, then died; the next takeover must go
    // on from that mark, not mark c0 again.
    let plan = "kill@3.1+kill@take.12";
    let out = caught("mark-twice", plan, "takeover-marks-orphans", &[]);
    assert!(
        out.contains("found:    call c0 marked at seq 5 and again at seq 6, no event of the call between them"),
        "{out}"
    );
    let (code, out) = workers(&[
        "--plan",
        plan,
        "--store-fault",
        "mark-twice",
        "--repeat",
        "10",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("{plan}: failed 10 of 10 runs")),
        "{out}"
    );
    // A takeover whose heir was never killed inside it marks once: the
    // fault hides.
    let (code, out) = workers(&["--plan", "kill@3.1", "--store-fault", "mark-twice"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn an_overlapping_pause_wakes_the_zombie_while_the_heir_is_mid_session() {
    // Paused before its commit; it wakes after the heir's first write. The
    // heir's lease is long (5 s, per worker), so the zombie, fenced and
    // closed early, is refused when it asks for the session again.
    let ttls = ["--ttl-ms", "300,5000"];
    let (code, out) = workers(&["--plan", "pause@4~1", ttls[0], ttls[1]]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("pause@4~1 1 takeover(s), 1 write(s) fenced"),
        "{out}"
    );
    let out = caught("no-epoch-check", "pause@4~1", "fenced-epoch-refused", &ttls);
    assert!(out.contains("--ttl-ms 300,5000"), "{out}");
    // A fenced close that ends the heir's live lease lets the zombie in.
    let out = caught(
        "fenced-close-releases",
        "pause@4~1",
        "one-live-owner",
        &ttls,
    );
    assert!(out.contains("w0 holds epoch 3"), "{out}");
}

#[test]
fn a_restarted_worker_takes_its_session_back_under_the_same_id() {
    let out = caught(
        "takeover-without-recovery",
        "restart@3",
        "takeover-marks-orphans",
        &[],
    );
    assert!(out.contains("before w0 acts at epoch 2"), "{out}");
    let (code, passed) = workers(&["--plan", "restart@3"]);
    assert_eq!(code, 0, "{passed}");
    assert!(passed.contains("restart@3 1 takeover(s)"), "{passed}");
}

#[test]
fn bad_usage_is_one_line_and_exit_2() {
    for (args, says) in [
        (vec!["--plan", "stop@1"], "--plan: worker plan \"stop@1\""),
        (
            vec!["--postgres", "--plan", "db-crash@3"],
            "--plan: worker plan \"db-crash@3\"",
        ),
        (
            vec!["--postgres", "--plan", "db-crash:stop@3"],
            "MODEL: immediate, kill or kill-frozen",
        ),
        (vec!["--postgres", "--plan", "partition@x"], "partition@K"),
        (
            vec!["--plan", "partition@2"],
            "--plan partition@2: database crashes, partitions and statement strikes need",
        ),
        (
            vec!["--plan", "pause@3.1"],
            "--plan pause@3.1: database crashes, partitions and statement strikes need",
        ),
        (vec!["--postgres", "--plan", "pause@3.0"], "ACTION@K.S"),
        (
            vec!["--plan", "kill@3.1r"],
            "only kill@K.P strikes (at its crash points)",
        ),
        (
            vec!["--adapter", "x", "--plan", "kill@3.1"],
            "--plan kill@3.1: kill@K.P strikes at agentstore's own crash points, so only in-process",
        ),
        (vec!["--every-statement"], "--postgres"),
        (
            vec!["--postgres", "--store-fault", "no-fdatasync"],
            "names no fault of the PostgreSQL store",
        ),
        (vec!["--postgres", "--adapter", "x"], "cannot be used with"),
        (vec!["--workers", "1"], "--workers must be at least 2"),
        (
            vec!["--ttl-ms", "300,x"],
            "--ttl-ms \"300,x\": not milliseconds",
        ),
        (
            vec!["--plan", "kill@3~1"],
            "--plan: worker plan \"kill@3~1\"",
        ),
        (
            vec!["--json", "/nonexistent/dir/w.json"],
            "--json /nonexistent/dir/w.json: cannot create",
        ),
        (
            vec!["--store-fault", "nope"],
            "--store-fault \"nope\" names no fault",
        ),
    ] {
        let (code, out) = workers(&args);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(out.contains(says), "{args:?}: {out}");
        assert_eq!(out.trim().lines().count(), 1, "{out}");
    }
}
