//! Earned verdicts: a scorecard row passes only on evidence from the window
//! where it can fail, the default `agentchaos run` brings every nemesis
//! that can produce that evidence, and a store's claims decide how it is
//! scored, never which faults it gets.
//!
//! - A store that truncates its log and rewrites it on every append
//!   (`tests/fixtures/rewriting_store.py`, a 46-line Python adapter, and
//!   agentstore's `rewrite-whole-log` fault through its adapter): with the
//!   crash points alone nothing lands inside its writes, and
//!   `durable_append` says "not exercised" instead of passing; the default
//!   nemeses find the loss, all of it.
//! - A store that never fsyncs (`no-fdatasync`): it survives every process
//!   crash and every failed write, passes the process-crash row and fails
//!   the power-loss row.
//! - A store that does not claim `torn_tail_repair` and appends onto a torn
//!   tail is still torn, and fails `durable_append`.
//! - A store that does not claim `damage_refusal` and skips every line it
//!   cannot parse, as the Pi agent and Codex CLI do
//!   (`tests/fixtures/skipping_store.py`), is still damaged by the probes,
//!   and fails `durable_append` for the acknowledged events it drops.
//! - A store that writes nothing until the session's first assistant
//!   message (`tests/fixtures/lazy_store.py`) loses the creation it
//!   acknowledged, and each of its losses is reported once, as one cause,
//!   however many later crashes repeat it. It refuses the rules probes'
//!   appends rightly, but their sessions are gone when they are opened
//!   again: those probes are "not reached", and the loss is
//!   `durable_append`'s, never the rules' rows.

use crate::campaign;
use crate::python;
use crate::support;

use std::path::{Path, PathBuf};

use crate::campaign::row;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

fn agentstore_adapter(fault: Option<&str>, extra: &str) -> String {
    let bin = support::workspace_bin("agentstore");
    match fault {
        Some(f) => format!("env AGENTSTORE_FAULT={f} {} adapter{extra}", bin.display()),
        None => format!("{} adapter{extra}", bin.display()),
    }
}

/// The issue's own store: a Python adapter that rewrites its file on every
/// append, under the default nemeses (sampled, to keep a Python store's
/// campaign short: 3 plans per nemesis, 3 power-loss crash points).
#[test]
fn a_python_store_that_rewrites_its_file_fails_durable_append_under_the_defaults() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rewriting_store.py");
    let adapter = python::adapter_command(&store, &[]);
    let (code, report, stdout) =
        campaign::run(&fixture(), &["--adapter", &adapter, "--trials", "3"]);
    assert_eq!(code, 1, "{stdout}");
    let durable = row(&report, "durable_append");
    assert_eq!(durable["verdict"], "fail", "{stdout}");
    let first = &durable["first_violation"];
    assert_eq!(first["invariant"], "acked-durable", "{durable}");
    // The size of the loss: every acknowledged event, not just the first
    // (the session's creation among them). How many were acknowledged
    // depends on which plan the sample drew first.
    let line = first["line"].as_str().unwrap();
    let count = |before: &str, after: &str| -> usize {
        let rest = &line[line.find(before).unwrap_or_else(|| panic!("{line}")) + before.len()..];
        rest[..rest.find(after).unwrap_or_else(|| panic!("{line}"))]
            .parse()
            .unwrap_or_else(|_| panic!("{line}"))
    };
    let acknowledged = count("expected all ", " acknowledged events");
    assert!(acknowledged > 1, "{line}");
    assert_eq!(count("found ", " of them missing"), acknowledged, "{line}");
    assert!(line.contains("from session_created at seq 0"), "{line}");
    let (replayed, out) = campaign::replay(first["replay"].as_str().unwrap());
    assert_eq!(replayed, 1, "the replay reproduces the loss:\n{out}");
    assert!(out.contains("VIOLATION acked-durable"), "{out}");
    // It claims nothing else, and is not passed on anything else.
    for key in ["torn_tail_repair", "orphan_marking", "blobs", "writer_lock"] {
        assert_eq!(row(&report, key)["verdict"], "not supported", "{key}");
    }
}

/// Crash points alone, two plans: no trial reaches the store's writes, so
/// what fails `durable_append` is a damage probe on a store that never
/// claimed to refuse damage.
#[test]
fn a_store_that_skips_unparsable_lines_is_damaged_and_fails_durable_append() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/skipping_store.py");
    let adapter = python::adapter_command(&store, &[]);
    let (code, report, stdout) = campaign::run(
        &fixture(),
        &[
            "--adapter",
            &adapter,
            "--nemesis",
            "points",
            "--trials",
            "2",
        ],
    );
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    let damage = row(&report, "damage_refusal");
    assert_eq!(damage["verdict"], "not supported", "{damage}");
    // Its faults ran all the same, and the row says how many.
    assert!(damage["evidence"].as_u64().unwrap() >= 5, "{damage}");
    let durable = row(&report, "durable_append");
    assert_eq!(durable["verdict"], "fail", "{stdout}");
    let first = &durable["first_violation"];
    assert_eq!(first["invariant"], "acked-durable", "{durable}");
    let line = first["line"].as_str().unwrap();
    assert!(
        line.contains("without refusing") && line.contains("(a silent skip)"),
        "{line}"
    );
    let replay = first["replay"].as_str().unwrap();
    assert!(replay.contains("--plan probe:"), "{replay}");
    let (replayed, out) = campaign::replay(replay);
    assert_eq!(replayed, 1, "the replay reproduces the loss:\n{out}");
    assert!(out.contains("VIOLATION acked-durable"), "{out}");
    assert!(out.contains("does not claim `damage_refusal`"), "{out}");
}

#[test]
fn a_store_that_rewrites_its_log_is_not_passed_by_kills_between_requests() {
    let adapter = agentstore_adapter(Some("rewrite-whole-log"), "");
    let (code, report, stdout) =
        campaign::run(&fixture(), &["--adapter", &adapter, "--nemesis", "points"]);
    assert_eq!(code, 0, "the crash points alone cannot see it:\n{stdout}");
    let durable = row(&report, "durable_append");
    assert_eq!(durable["verdict"], "not exercised", "{stdout}");
    assert!(
        durable["why"]
            .as_str()
            .unwrap()
            .contains("only between requests"),
        "{durable}"
    );
}

#[test]
fn a_store_that_rewrites_its_log_fails_durable_append_under_the_syscall_nemesis() {
    let adapter = agentstore_adapter(Some("rewrite-whole-log"), "");
    let (code, report, stdout) = campaign::run(
        &fixture(),
        &["--adapter", &adapter, "--nemesis", "points,syscall"],
    );
    assert_eq!(code, 1, "{stdout}");
    let durable = row(&report, "durable_append");
    assert_eq!(durable["verdict"], "fail", "{stdout}");
    // Its first violation may be the agent's retry after an ENOSPC fusing
    // onto the rewritten log (log-prefix); the loss itself is acked-durable.
    // Once, in a loaded run, the first acked-durable violation came from a
    // plan that did not start with `sys-`: the syscall nemesis's own find
    // is looked for by its plan.
    let lost = report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| {
            v["invariant"] == "acked-durable" && v["plan"].as_str().unwrap().starts_with("sys-")
        })
        .unwrap_or_else(|| panic!("no acked-durable violation of a syscall fault:\n{stdout}"));
    let replay = lost["replay"].as_str().unwrap();
    assert!(replay.contains("--plan sys-"), "{replay}");
    let (replayed, out) = campaign::replay(replay);
    assert_eq!(replayed, 1, "the replay reproduces the loss:\n{out}");
    assert!(out.contains("VIOLATION acked-durable"), "{out}");
    // A failed write (ENOSPC after the truncate) destroyed the events
    // acknowledged before it: checked after every injected I/O error.
    assert!(
        report["violations"].as_array().unwrap().iter().any(|v| {
            v["invariant"] == "acked-durable"
                && v["plan"].as_str().unwrap().starts_with("sys-enospc@")
        }),
        "{stdout}"
    );
}

/// A store that never fsyncs its log survives every kill (the page cache
/// keeps its writes) and claims no more: after an injected ENOSPC it writes
/// the agent's retry again and acknowledges it, which is all a store
/// without fsync can do, so it passes the process-crash row under every
/// default nemesis, the syscall faults included; power loss loses
/// acknowledged events, and fails the power row.
#[test]
fn a_store_without_fsync_passes_the_process_crash_row_and_fails_the_power_row() {
    // No restarted life is crashed (`--restarts none`: 206 trials instead
    // of 841): a store without fsync recovers the same in every life, and
    // this is about the two rows, not about recovery.
    let (code, report, stdout) = campaign::run(
        &fixture(),
        &["--store-fault", "no-fdatasync", "--restarts", "none"],
    );
    assert_eq!(code, 1, "{stdout}");
    assert!(
        report["mode"]
            .as_str()
            .unwrap()
            .contains("nemesis points,syscall,powerloss"),
        "the default runs every nemesis: {}",
        report["mode"]
    );
    let durable = row(&report, "durable_append");
    assert_eq!(durable["verdict"], "pass", "{durable}\n{stdout}");
    // No failed write is charged to it.
    assert!(
        report["violations"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["invariant"] != "failed-sync-not-acked"),
        "{stdout}"
    );
    let power = row(&report, "durable_append_power_loss");
    assert_eq!(power["verdict"], "fail", "{stdout}");
    let replay = power["first_violation"]["replay"].as_str().unwrap();
    assert!(
        replay.starts_with("agentchaos replay --scenario ")
            && replay.contains(" --plan powerloss:")
            && replay.contains(" --store-fault no-fdatasync"),
        "{replay}"
    );
    let (replayed, out) = campaign::replay(replay);
    assert_eq!(replayed, 1, "the power-loss replay reproduces it:\n{out}");
    assert!(
        report["power_loss"]["scenarios"][0]["violations"]
            .as_array()
            .is_some_and(|v| !v.is_empty()),
        "the JSON report carries the power-loss findings"
    );
}

#[test]
fn the_reference_store_passes_every_default_nemesis() {
    // The deepest restart's lives, not every restarted life's (592 trials
    // instead of 925): every nemesis still meets a restarted life.
    let (code, report, stdout) = campaign::run(&fixture(), &["--restarts", "deepest"]);
    assert_eq!(code, 0, "{stdout}");
    for key in [
        "durable_append",
        "durable_append_power_loss",
        "torn_tail_repair",
    ] {
        assert_eq!(row(&report, key)["verdict"], "pass", "{key}:\n{stdout}");
    }
    assert!(stdout.contains("power-loss nemesis: "), "{stdout}");
    // Every applicable fault met every syscall the traced run enumerated.
    let s = &report["scenarios"][0];
    let syscalls = s["syscalls_total"].as_u64().unwrap();
    assert!(
        syscalls > 10,
        "the traced run enumerated the store's syscalls"
    );
    assert_eq!(s["syscalls_covered"], syscalls, "every syscall was faulted");
}

#[test]
fn a_store_that_does_not_claim_torn_tail_repair_is_torn_anyway() {
    let claims = " --claims durable_append,damage_refusal,orphan_marking,effect_ledger,checkpoint_projection,branches,compaction";
    let adapter = agentstore_adapter(Some("no-torn-tail-repair"), claims);
    let (code, report, stdout) =
        campaign::run(&fixture(), &["--adapter", &adapter, "--nemesis", "syscall"]);
    assert_eq!(code, 1, "tears reach it and it fuses onto them:\n{stdout}");
    assert_eq!(
        row(&report, "torn_tail_repair")["verdict"],
        "not supported",
        "{stdout}"
    );
    let durable = row(&report, "durable_append");
    assert_eq!(durable["verdict"], "fail", "{stdout}");
    assert!(
        durable["first_violation"]["replay"]
            .as_str()
            .unwrap()
            .contains("sys-tear@"),
        "{durable}"
    );
}

/// A store that does not claim `blobs` is not given a scenario that stores
/// one: the scenario is reported as skipped, never failed as an outcome.
#[test]
fn a_scenario_that_needs_blobs_is_skipped_for_a_store_without_them() {
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/large-output-blob.json");
    let claims = " --claims durable_append,torn_tail_repair,damage_refusal,orphan_marking,effect_ledger,checkpoint_projection,branches,compaction,writer_lock";
    let adapter = agentstore_adapter(None, claims);
    let (code, report, stdout) =
        campaign::run(&scenario, &["--adapter", &adapter, "--nemesis", "points"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["trials"], 0, "{stdout}");
    let skipped = &report["skipped_scenarios"][0];
    assert_eq!(skipped["name"], "large-output-blob", "{report}");
    assert!(
        skipped["why"]
            .as_str()
            .unwrap()
            .contains("does not claim `blobs`"),
        "{skipped}"
    );
    assert!(
        stdout.contains("SKIPPED scenario large-output-blob"),
        "{stdout}"
    );
    assert_eq!(
        row(&report, "blobs")["verdict"],
        "not supported",
        "{stdout}"
    );
}

/// A store that writes nothing until the session's first assistant message
/// (`tests/fixtures/lazy_store.py`) loses every event acknowledged before
/// it to a kill between requests, its creation first: acked-durable counts
/// the creation the open acknowledged. Every restarted life crashed after
/// that kill finds the same loss after life 0 again, and the same at the
/// end of the trial: one cause each, reached by all of those trials,
/// replayed by the single kill. With `--rules` it claims `effect_ledger`
/// and `branches` and refuses the rules probes' appends with `rule`; their
/// sessions, replayed up to before the first assistant message, are gone
/// when they are opened again: each such probe is not reached, its rows
/// never fail, and `durable_append` carries the loss, one cause for the
/// probes that lost the same events.
#[test]
fn a_store_that_writes_late_loses_its_creation_and_each_loss_is_one_cause() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lazy_store.py");
    let adapter = python::adapter_command(&store, &["--rules"]);
    let (code, report, stdout) = campaign::run(
        &fixture(),
        &[
            "--adapter",
            &adapter,
            "--nemesis",
            "points",
            "--restarts",
            "deepest",
            // A sample keeps the Python store's campaign short; this seed's
            // 12 trials hold double crashes after one first crash, as did
            // those of seeds 1 to 4 at 12 and 16 trials.
            "--trials",
            "12",
            "--seed",
            "2",
        ],
    );
    assert_eq!(code, 1, "{stdout}");
    let durable = row(&report, "durable_append");
    assert_eq!(durable["verdict"], "fail", "{stdout}");
    let violations = report["violations"].as_array().unwrap();
    let causes = report["causes"].as_array().unwrap();
    let lost: Vec<&serde_json::Value> = violations
        .iter()
        .filter(|v| {
            v["invariant"] == "acked-durable"
                && v["when"] == "after life 0 was killed, before recovery"
        })
        .collect();
    assert!(
        lost.iter().any(|v| v["found"]
            .as_str()
            .unwrap()
            .contains("from session_created at seq 0 (acknowledged to life 0)")),
        "{stdout}"
    );
    let doubles: Vec<&&serde_json::Value> = lost
        .iter()
        .filter(|v| v["plan"].as_str().unwrap().contains('+'))
        .collect();
    assert!(!doubles.is_empty(), "{stdout}");
    let mut collapsed = false;
    for d in doubles {
        let cause = &causes[d["cause"].as_u64().unwrap() as usize];
        let first = d["plan"].as_str().unwrap().split('+').next().unwrap();
        assert_eq!(cause["origin"], first, "{d}\n{cause}");
        // The replay is the simplest sampled plan with that first crash.
        let replay = cause["plan"].as_str().unwrap();
        assert!(
            replay == first || replay.starts_with(&format!("{first}+")),
            "the simplest replay: {cause}"
        );
        collapsed |= cause["trials"].as_u64().unwrap() > 1;
    }
    assert!(collapsed, "no two double crashes shared a cause: {stdout}");
    let acked_causes = causes
        .iter()
        .filter(|c| c["invariant"] == "acked-durable")
        .count();
    let acked_violations = violations
        .iter()
        .filter(|v| v["invariant"] == "acked-durable")
        .count();
    assert!(
        acked_causes < acked_violations,
        "{acked_causes} causes of {acked_violations} violations"
    );
    assert!(
        durable["causes"].as_u64().unwrap() < durable["violations"].as_u64().unwrap(),
        "{durable}"
    );
    // The terminal shows the causes most trials reached first.
    assert!(
        stdout.contains("distinct cause(s) of")
            && stdout.contains("before the same observation; the replay is the simplest"),
        "{stdout}"
    );
    // What the end of a double crash shows after its first crash's loss is
    // that first crash's cause too.
    let mut ends = 0;
    for v in violations.iter().filter(|v| {
        v["when"] == "at the end of the trial" && v["plan"].as_str().unwrap().contains('+')
    }) {
        let lost_first = violations.iter().any(|w| {
            w["plan"] == v["plan"] && w["when"] == "after life 0 was killed, before recovery"
        });
        if lost_first {
            let first = v["plan"].as_str().unwrap().split('+').next().unwrap();
            let cause = &causes[v["cause"].as_u64().unwrap() as usize];
            assert_eq!(cause["origin"], first, "{v}\n{cause}");
            ends += 1;
        }
    }
    assert!(
        ends > 0,
        "no double crash's end followed a first loss: {stdout}"
    );

    // The rules probes: refused rightly, their sessions gone on reopening.
    assert_eq!(
        violations
            .iter()
            .filter(|v| v["invariant"] == "rule-refused")
            .count(),
        0,
        "{stdout}"
    );
    let short = report["scenarios"][0]["probes_not_carried_out"]
        .as_array()
        .unwrap();
    let lost_sessions: Vec<&serde_json::Value> = short
        .iter()
        .filter(|p| p["charged_to"] == serde_json::json!(["durable_append"]))
        .collect();
    for probe in [
        "probe:rule-no-operation-id@",
        "probe:rule-call-committed-operation@",
        "probe:rule-commit-before-intent@",
        "probe:rule-parent-missing@",
    ] {
        let p = lost_sessions
            .iter()
            .find(|p| p["probe"].as_str().unwrap().starts_with(probe))
            .unwrap_or_else(|| panic!("{probe} not charged to durable_append: {short:?}"));
        assert!(
            p["why"]
                .as_str()
                .unwrap()
                .contains("open refused with `not_found`"),
            "{p}"
        );
    }
    assert!(
        stdout.contains("NOT REACHED in small (probe rule-parent-missing@")
            && stdout.contains("charged to durable_append (its violation above), not to branches"),
        "{stdout}"
    );
    let branches = row(&report, "branches");
    assert_eq!(branches["verdict"], "not reached", "{branches}");
    assert!(
        branches["why"].as_str().unwrap().contains("not_found"),
        "{branches}"
    );
    // The ledger probes reached theirs and passed; the rules did not count.
    let ledger = row(&report, "effect_ledger");
    assert_eq!(ledger["verdict"], "pass", "{ledger}");
    assert!(
        ledger["probes_not_reached"].as_u64().unwrap() >= 3,
        "{ledger}"
    );
    // Two probes that lost the same four events are one cause.
    let setup: Vec<&serde_json::Value> = causes
        .iter()
        .filter(|c| c["origin"] == "a probe's setup")
        .collect();
    let probe_losses = violations
        .iter()
        .filter(|v| v["plan"].as_str().unwrap().starts_with("probe:rule-"))
        .count();
    assert!(!setup.is_empty() && setup.len() < probe_losses, "{setup:?}");
    assert!(setup.iter().all(|c| c["invariant"] == "acked-durable"));
}
