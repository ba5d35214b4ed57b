//! Each store fault profile must make `agentchaos run` exit 1 naming the
//! invariant it breaks, and the unmodified store must pass: a check that
//! cannot fail is worth nothing.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::campaign;

/// The fixture a fault runs on: `small.json` unless [`FIXTURES`] names another.
fn fixture(fault: Option<&str>) -> PathBuf {
    let name = FIXTURES
        .iter()
        .find(|(f, _)| Some(*f) == fault)
        .map_or("small.json", |(_, n)| *n);
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Runs an exhaustive campaign on the small fixture; returns the exit code
/// and the violation counts by invariant from the JSON report.
fn campaign(fault: Option<&str>) -> (i32, Value, String) {
    // Exactly the nemeses the library says reveal the fault: this test is
    // what makes `agentchaos faults`' "revealed by" column true.
    let nemesis = fault.map_or("points".to_string(), |f| {
        agentchaos::nemesis::revealing(agentstore::fault::Fault::from_name(f).unwrap()).to_string()
    });
    let mut args = vec!["--exhaustive", "--nemesis", &nemesis];
    if let Some(f) = fault {
        args.extend(["--store-fault", f]);
        if BATCH.contains(&f) {
            args.extend(["--durability", "batch"]);
        }
        if !RESTARTED.contains(&f) {
            args.extend(["--restarts", "none"]);
        }
    }
    campaign::run(&fixture(fault), &args)
}

/// Faults only a crash of a restarted life shows (each one's test also
/// shows `--restarts none` hiding it). Every other fault runs with
/// `--restarts none`: the first life's plans are part of the default
/// campaign, so what they catch it catches too, in 86 trials of the small
/// fixture instead of 471. The unmodified store is run with every restart.
const RESTARTED: &[&str] = &[
    "rerun-keeps-old-mark",
    "quarantine-overwrite",
    "read-error-is-eof",
];

/// Faults of Batch mode's group commit, run with `--durability batch`.
const BATCH: &[&str] = &[
    "batch-ack-when-written",
    "batch-follower-early-ack",
    "failed-sync-acks-followers",
    "failed-write-cuts-group",
    "ledger-folded-at-sync",
];

/// Each fault and the invariants that must catch it (the first is the one
/// its promise names; the others are the consequences the checker must see).
const EXPECTED: &[(&str, &[&str])] = &[
    ("ack-before-fsync", &["acked-durable"]),
    ("skip-intent", &["effect-at-most-once", "acked-durable"]),
    (
        "rerun-uncertain",
        &["effect-at-most-once", "orphan-marked-uncertain"],
    ),
    ("non-atomic-snapshot", &["checkpoint-projection"]),
    ("checkpoint-seq-ahead", &["checkpoint-projection"]),
    ("no-torn-tail-repair", &["log-prefix"]),
    ("drop-recovery-block", &["orphan-marked-uncertain"]),
    ("mark-twice", &["recovery-idempotent"]),
    ("skip-damaged-lines", &["damage-refused"]),
    ("fsync-retry", &["failed-sync-not-acked"]),
    ("rewrite-whole-log", &["acked-durable"]),
    ("ledger-per-call", &["ledger-refuses-double-commit"]),
    ("no-writer-lock", &["second-writer-refused"]),
    ("keep-refused-append", &["log-prefix"]),
    ("rerun-keeps-old-mark", &["orphan-marked-uncertain"]),
    ("batch-ack-when-written", &["acked-durable"]),
    ("batch-follower-early-ack", &["acked-after-sync"]),
    (
        "failed-sync-acks-followers",
        &["acked-after-sync", "failed-sync-not-acked", "acked-durable"],
    ),
    ("failed-write-cuts-group", &["acked-durable"]),
    ("ledger-folded-at-sync", &["ledger-refuses-double-commit"]),
    (
        "fold-branch-ignores-compaction",
        &["checkpoint-projection", "context-window"],
    ),
    (
        "fold-wrong-leaf",
        &["checkpoint-projection", "context-window"],
    ),
    (
        "fold-ignores-implicit-branch",
        &["checkpoint-projection", "context-window"],
    ),
    ("read-limit-below-write-limit", &["acked-durable"]),
    ("context-drops-summary", &["context-window"]),
    (
        "context-budget-drops-recovery",
        &["orphan-marked-uncertain"],
    ),
    ("context-budget-drops-newest", &["context-window"]),
    ("skip-operation-id-rule", &["rule-refused"]),
    ("reconcile-reads", &["exactly-once-outcome"]),
    ("skip-parent-rule", &["rule-refused"]),
    ("compaction-anywhere", &["rule-refused"]),
    ("compaction-keeps-anything", &["rule-refused"]),
    ("unrecorded-quarantine", &["quarantine-recorded"]),
    ("quarantine-overwrite", &["quarantine-recorded"]),
    ("tail-bound-exclusive", &["tail-rules"]),
    ("zeros-to-newline-torn", &["damage-refused"]),
    ("append-after-preallocation", &["log-prefix"]),
    ("blob-unchecked-read", &["damage-refused"]),
    ("fused-lines-torn", &["damage-refused"]),
    ("lost-sector-refused", &["tail-rules"]),
    ("zeros-first-run-only", &["tail-rules"]),
    ("unterminated-checksum-damage", &["tail-rules"]),
    ("read-error-is-eof", &["acked-durable"]),
    ("blob-rename-error-ignored", &["blob-readable"]),
    // No invariant: the open never returns, and the hung life fails the run
    // as the store's error.
    ("quarantine-retries-any-error", &[]),
];

/// Faults the small fixture cannot show: it has no compaction, no branch
/// switch. The unmodified store passes these fixtures too
/// (`the_unmodified_store_passes_every_fixture`).
const FIXTURES: &[(&str, &str)] = &[
    ("fold-branch-ignores-compaction", "compaction.json"),
    ("fold-wrong-leaf", "branch.json"),
    ("fold-ignores-implicit-branch", "branch.json"),
    ("context-drops-summary", "compaction.json"),
    ("context-budget-drops-recovery", "compaction.json"),
    ("context-budget-drops-newest", "compaction.json"),
    ("blob-unchecked-read", "blob.json"),
    ("blob-rename-error-ignored", "blob.json"),
    ("reconcile-reads", "blob.json"),
    ("compaction-anywhere", "compaction.json"),
    ("compaction-keeps-anything", "compaction.json"),
    ("batch-follower-early-ack", "parallel.json"),
    ("failed-sync-acks-followers", "parallel.json"),
    ("failed-write-cuts-group", "parallel.json"),
];

/// Runs the fault's campaign, asserts it is caught as [`EXPECTED`] says,
/// and returns the JSON report.
fn assert_caught(fault: &str) -> Value {
    let &(_, invariants) = EXPECTED.iter().find(|(f, _)| *f == fault).unwrap();
    let (code, report, stdout) = campaign(Some(fault));
    assert_eq!(code, 1, "{fault} must fail the campaign:\n{stdout}");
    assert_eq!(
        report["error_count"], 0,
        "{fault}: trials must run as planned:\n{stdout}"
    );
    for inv in invariants {
        assert!(
            campaign::count(&report, inv) > 0,
            "{fault} must be caught by {inv}:\n{stdout}"
        );
        assert!(
            stdout.contains(&format!("VIOLATION {inv} ")),
            "{fault}: the terminal report names {inv}"
        );
    }
    let v = campaign::first_violation(&report, invariants[0]);
    let replay = v["replay"].as_str().unwrap();
    assert!(
        replay.starts_with("agentchaos replay --scenario ")
            && replay.contains(&format!("--store-fault {fault}"))
            && replay.contains("--durability batch") == BATCH.contains(&fault),
        "{replay}"
    );
    for field in ["expected", "found", "crash_point", "when"] {
        assert!(
            !v[field].as_str().unwrap().is_empty(),
            "{field} explains the violation"
        );
    }
    report
}

#[test]
fn the_unmodified_store_passes_every_fixture() {
    for fixture in ["compaction.json", "branch.json", "blob.json"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(fixture);
        // Every crash point of the first life and of the deepest
        // restart's lives: crashing every restarted life as well tripled
        // the trials (1,125 instead of 380 over the three) for paths the
        // small fixture's campaigns already crash.
        let (code, report, stdout) = campaign::run(
            &path,
            &[
                "--exhaustive",
                "--nemesis",
                "points",
                "--restarts",
                "deepest",
            ],
        );
        assert_eq!(code, 0, "{fixture}:\n{stdout}");
        assert_eq!(report["violation_count"], 0, "{fixture}");
    }
}

#[test]
fn the_unmodified_store_passes() {
    let (code, report, stdout) = campaign(None);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["violation_count"], 0);
    let s = &report["scenarios"][0];
    assert!(s["trials"].as_u64().unwrap() > s["crash_points_total"].as_u64().unwrap());
    assert_eq!(
        s["crash_points_covered"], s["crash_points_total"],
        "exhaustive covers every hit"
    );
}

/// A `leaf_moved` to an entry off the active branch makes the store read
/// the log to fold it. With that read failed (EIO), the store must refuse
/// the append with nothing written, so that the agent's retry adds it once;
/// a store that wrote it first and then failed leaves it twice (log-prefix).
#[test]
fn a_failed_read_folding_a_branch_move_refuses_it_unwritten() {
    let (code, out) = campaign::replay(&format!(
        "agentchaos replay --scenario {} --plan sys-eio-read@3",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios/multi-run-compaction-branch.json")
            .display()
    ));
    // The descriptor's number depends on what the test process inherited.
    let injected = out
        .lines()
        .find(|l| l.contains("EIO injected at read 3 of 25: read(fd "))
        .unwrap_or_else(|| panic!("the fault hits the third read:\n{out}"));
    assert!(
        injected.contains(" = ROOT/sessions/session/events.jsonl"),
        "the fault hits the log read of the fold:\n{out}"
    );
    assert!(
        out.contains("40 append(s) announced, 39 acknowledged"),
        "one append refused, then retried:\n{out}"
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("result: no violations"), "{out}");
}

#[test]
fn ack_before_fsync_is_caught_by_acked_durable() {
    assert_caught("ack-before-fsync");
}

#[test]
fn skip_intent_is_caught_by_effect_at_most_once_and_acked_durable() {
    assert_caught("skip-intent");
}

#[test]
fn rerun_uncertain_is_caught_by_effect_at_most_once_and_orphan_marked_uncertain() {
    assert_caught("rerun-uncertain");
}

#[test]
fn non_atomic_snapshot_is_caught_by_checkpoint_projection() {
    assert_caught("non-atomic-snapshot");
}

#[test]
fn checkpoint_seq_ahead_is_caught_by_checkpoint_projection() {
    assert_caught("checkpoint-seq-ahead");
}

#[test]
fn no_torn_tail_repair_is_caught_by_log_prefix() {
    assert_caught("no-torn-tail-repair");
}

#[test]
fn drop_recovery_block_is_caught_by_orphan_marked_uncertain() {
    assert_caught("drop-recovery-block");
}

#[test]
fn mark_twice_is_caught_by_recovery_idempotent() {
    assert_caught("mark-twice");
}

#[test]
fn skip_damaged_lines_is_caught_by_damage_refused() {
    assert_caught("skip-damaged-lines");
}

#[test]
fn fsync_retry_is_caught_by_failed_sync_not_acked() {
    assert_caught("fsync-retry");
}

#[test]
fn rewrite_whole_log_is_caught_by_acked_durable() {
    assert_caught("rewrite-whole-log");
}

/// Only the ledger probe that retries the operation under a new call id
/// sees it: the same call's second commit is still refused.
#[test]
fn ledger_per_call_is_caught_by_ledger_refuses_double_commit() {
    assert_caught("ledger-per-call");
}

/// A store stricter than the session rules refuses a legal append: after
/// a crash while a read runs, the agent runs it again at once (a read needs
/// no reconciliation), the store refuses, and the agent cannot finish.
#[test]
fn reconcile_reads_is_caught_by_exactly_once_outcome() {
    let report = assert_caught("reconcile-reads");
    let v = campaign::first_violation(&report, "exactly-once-outcome");
    assert!(
        v["found"]
            .as_str()
            .unwrap()
            .contains("must be reconciled (outcome not_applied) before it runs again"),
        "{v}"
    );
}

/// Asserts `fault` is caught by rule-refused from the rules probe `probe`
/// alone, and scored under `row`, not the ledger's row.
fn assert_caught_by_tree_rules_probe(fault: &str, probe: &str, row: &str) {
    let report = assert_caught(fault);
    let v = campaign::first_violation(&report, "rule-refused");
    assert!(
        v["replay"]
            .as_str()
            .unwrap()
            .contains(&format!("--plan probe:{probe}@")),
        "{v}"
    );
    assert_eq!(campaign::row(&report, row)["verdict"], "fail");
    assert_eq!(campaign::row(&report, "effect_ledger")["verdict"], "pass");
}

/// The agent always hangs an entry under one that exists: only the rules
/// probe names a parent that does not, and its violation is the history
/// tree's (`branches`), not the ledger's.
#[test]
fn skip_parent_rule_is_caught_by_rule_refused_under_branches() {
    assert_caught_by_tree_rules_probe("skip-parent-rule", "rule-parent-missing", "branches");
}

/// The agent compacts under the active leaf: only the rules probe hangs a
/// compaction elsewhere, scored under `compaction`.
#[test]
fn compaction_anywhere_is_caught_by_rule_refused_under_compaction() {
    assert_caught_by_tree_rules_probe(
        "compaction-anywhere",
        "rule-compaction-off-leaf",
        "compaction",
    );
}

/// The agent keeps entries of the active branch: only the rules probe
/// keeps one off it, scored under `compaction`.
#[test]
fn compaction_keeps_anything_is_caught_by_rule_refused_under_compaction() {
    assert_caught_by_tree_rules_probe(
        "compaction-keeps-anything",
        "rule-compaction-kept-off-branch",
        "compaction",
    );
}

/// No scenario writes an event as large as the writer takes: only the
/// limit probe does, and the store no longer opens its session.
#[test]
fn read_limit_below_write_limit_is_caught_by_the_limit_probe() {
    let report = assert_caught("read-limit-below-write-limit");
    let v = campaign::first_violation(&report, "acked-durable");
    assert!(
        v["replay"].as_str().unwrap().contains("--plan probe:limit"),
        "{v}"
    );
    assert!(
        v["found"]
            .as_str()
            .unwrap()
            .contains("refused with `damage`"),
        "{v}"
    );
    assert_eq!(campaign::row(&report, "durable_append")["verdict"], "fail");
}

/// The agent never sends a side effect without an operation id: only the
/// rules probe tries one.
#[test]
fn skip_operation_id_rule_is_caught_by_rule_refused() {
    let report = assert_caught("skip-operation-id-rule");
    let v = campaign::first_violation(&report, "rule-refused");
    assert!(
        v["replay"]
            .as_str()
            .unwrap()
            .contains("--plan probe:rule-no-operation-id@"),
        "{v}"
    );
    assert!(
        v["found"]
            .as_str()
            .unwrap()
            .contains("a side effect needs an operation id"),
        "{v}"
    );
    assert_eq!(
        campaign::count(&report, "rule-refused"),
        1,
        "only that rule"
    );
}

#[test]
fn unrecorded_quarantine_is_caught_by_quarantine_recorded() {
    assert_caught("unrecorded-quarantine");
}

/// Only two cuts at one offset show it: the life after a tear is torn
/// again at the record of its cut, and the next open cuts at the same
/// offset. Without restarted lives no trial cuts twice.
#[test]
fn quarantine_overwrite_is_caught_only_by_a_second_tear_at_the_same_offset() {
    let report = assert_caught("quarantine-overwrite");
    let v = campaign::first_violation(&report, "quarantine-recorded");
    assert!(v["found"].as_str().unwrap().contains("other bytes"), "{v}");
    let replay = v["replay"].as_str().unwrap();
    assert!(
        replay.contains(":4294967295+tear@"),
        "a tear, then a tear of the restarted life: {replay}"
    );
    assert_hidden_without_it(
        "quarantine-overwrite",
        "without restarted-life tears no cut lands twice at one offset",
    );
}

/// The one violation of `invariant` in `report`, from the probe whose
/// replay names `plan`; its `found`.
fn only_probe_violation(report: &Value, invariant: &str, plan: &str) -> String {
    assert_eq!(campaign::count(report, invariant), 1, "only that probe");
    let v = campaign::first_violation(report, invariant);
    assert!(
        v["replay"]
            .as_str()
            .unwrap()
            .contains(&format!("--plan probe:{plan}")),
        "{v}"
    );
    v["found"].as_str().unwrap().to_string()
}

/// No crash tears a whole group of lines: only the tail probe appends
/// exactly 64 torn lines (and the one with 65 still passes).
#[test]
fn tail_bound_exclusive_is_caught_by_tail_rules() {
    let report = assert_caught("tail-bound-exclusive");
    let found = only_probe_violation(&report, "tail-rules", "tail@sessions/");
    assert!(found.contains("`damage` refusal at open"), "{found}");
}

/// The damage probe's zeros over the last three lines are refused either
/// way; only the last line zeroed alone, newline kept, is cut as torn.
#[test]
fn zeros_to_newline_torn_is_caught_by_damage_refused() {
    let report = assert_caught("zeros-to-newline-torn");
    let found = only_probe_violation(&report, "damage-refused", "zeros@sessions/");
    assert!(found.contains("is gone (a silent skip)"), "{found}");
}

/// No crash fuses two lines: only the damage probe that flips the newline
/// before the last line and drops the last one finds the lost newline
/// unseen, two acknowledged events cut as a torn tail.
#[test]
fn fused_lines_torn_is_caught_by_damage_refused() {
    let report = assert_caught("fused-lines-torn");
    let found = only_probe_violation(&report, "damage-refused", "fused@sessions/");
    assert!(found.contains("is gone (a silent skip)"), "{found}");
    // Its offset names the same newline in the replay's own crash-free run
    // (the trial directories' names are as long as the campaign's).
    let v = campaign::first_violation(&report, "damage-refused");
    let (code, stdout) = campaign::replay(v["replay"].as_str().unwrap());
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains(&format!("found:    {found}")), "{stdout}");
}

/// No kill loses a sector: only the tail probe's group write with whole
/// sectors of zeros is within the rules and refused.
#[test]
fn lost_sector_refused_is_caught_by_tail_rules() {
    let report = assert_caught("lost-sector-refused");
    let found = only_probe_violation(&report, "tail-rules", "tail@sessions/");
    assert!(found.contains("`damage` refusal at open"), "{found}");
}

/// No crash writes zeros inside a torn line: only the tail probe with a
/// lost sector and, later in the line, three written zeros is damage the
/// fault cuts as a torn tail.
#[test]
fn zeros_first_run_only_is_caught_by_tail_rules() {
    let report = assert_caught("zeros-first-run-only");
    let found = only_probe_violation(&report, "tail-rules", "tail@sessions/");
    assert!(
        found.contains("cut the appended bytes as a torn tail"),
        "{found}"
    );
    let v = campaign::first_violation(&report, "tail-rules");
    assert!(
        v["replay"]
            .as_str()
            .unwrap()
            .ends_with(":misplaced-zeros --store-fault zeros-first-run-only"),
        "{v}"
    );
}

/// Every torn line a crash leaves ends in pre-allocated zeros, which hide
/// its header: only the tail probe's unterminated line with a whole header
/// and no zeros, at the line limit, is refused by the fault.
#[test]
fn unterminated_checksum_damage_is_caught_by_tail_rules() {
    let report = assert_caught("unterminated-checksum-damage");
    let found = only_probe_violation(&report, "tail-rules", "tail@sessions/");
    assert!(found.contains("`damage` refusal at open"), "{found}");
    let v = campaign::first_violation(&report, "tail-rules");
    assert!(
        v["replay"]
            .as_str()
            .unwrap()
            .contains(":unterminated-4194304 "),
        "{v}"
    );
}

/// A restart after a kill finds the zeros pre-allocated past the last
/// line and appends after them: the next reader finds zeros fused to a
/// valid line, damage, where every acknowledged line should be whole.
#[test]
fn append_after_preallocation_is_caught_by_log_prefix() {
    let report = assert_caught("append-after-preallocation");
    let v = campaign::first_violation(&report, "log-prefix");
    let found = v["found"].as_str().unwrap();
    assert!(found.contains("a valid line starts"), "{found}");
}

/// Only the damage probe flips a blob's bytes; the store serves them
/// changed, and the harness's own digest says so.
#[test]
fn blob_unchecked_read_is_caught_by_damage_refused() {
    let report = assert_caught("blob-unchecked-read");
    let v = campaign::first_violation(&report, "damage-refused");
    let found = v["found"].as_str().unwrap();
    assert!(
        found.contains("served a damaged blob without refusing"),
        "{found}"
    );
    assert!(v["replay"].as_str().unwrap().contains("/blobs/"), "{v}");
}

/// Two commits of one operation written into one Batch group, before a
/// sync covers either: only the `ledger-race` probe writes them, and only
/// a Batch write returns before its sync. In Sync mode every write is
/// acknowledged, its commit in the ledger, before the next one, and the
/// same broken store passes.
#[test]
fn ledger_folded_at_sync_is_caught_only_by_two_commits_in_one_group() {
    let report = assert_caught("ledger-folded-at-sync");
    for v in report["violations"].as_array().unwrap() {
        assert!(
            v["replay"]
                .as_str()
                .unwrap()
                .contains("--plan probe:ledger-race@"),
            "{v}"
        );
    }
    assert_hidden_without_it(
        "ledger-folded-at-sync",
        "in Sync mode a commit is in the ledger before the next write",
    );
}

#[test]
fn no_writer_lock_is_caught_by_second_writer_refused() {
    assert_caught("no-writer-lock");
}

/// The points campaign in Sync mode with `--restarts none` lets `fault`
/// through: what catches it is what the caller's test adds (`why`).
fn assert_hidden_without_it(fault: &str, why: &str) {
    let (code, report, stdout) = campaign::run(
        &fixture(None),
        &[
            "--exhaustive",
            "--nemesis",
            "points",
            "--restarts",
            "none",
            "--store-fault",
            fault,
        ],
    );
    assert_eq!(code, 0, "{fault}: {why}:\n{stdout}");
    assert_eq!(report["violation_count"], 0);
}

/// Only an open reads the whole log to find its end: a failed read there
/// (in a restarted life's recovery) taken for the end cuts or appends over
/// acknowledged lines. The first life's reads (the agent reading its
/// session back) end no log: faulted, they show nothing.
#[test]
fn read_error_is_eof_is_caught_only_by_faulting_a_recovery_read() {
    let report = assert_caught("read-error-is-eof");
    let v = campaign::first_violation(&report, "acked-durable");
    let plan = v["plan"].as_str().unwrap();
    assert!(
        plan.contains("+sys-eio-read@") || plan.contains("+sys-short-read@"),
        "a read fault of a restarted life: {v}"
    );
    assert!(
        v["crash_point"]
            .as_str()
            .unwrap()
            .contains("restarted life 1: "),
        "{v}"
    );
    let (replayed, out) = campaign::replay(v["replay"].as_str().unwrap());
    assert_eq!(replayed, 1, "the replay reproduces the loss:\n{out}");
    assert!(out.contains("VIOLATION acked-durable"), "{out}");
    for first_life in ["sys-eio-read@0", "sys-short-read@0:8"] {
        let (code, out) = campaign::replay(&format!(
            "agentchaos replay --scenario {} --plan {first_life} --store-fault read-error-is-eof",
            fixture(None).display()
        ));
        assert_eq!(code, 0, "{first_life} ends no log:\n{out}");
    }
}

/// A store that ignores a failed rename of a blob into place acknowledges
/// the event that references it: only a rename the syscall nemesis fails
/// (EIO or ENOSPC) shows it, and the same replay passes on the unmodified
/// store, which refuses that append.
#[test]
fn blob_rename_error_ignored_is_caught_only_by_failing_a_rename() {
    let report = assert_caught("blob-rename-error-ignored");
    let v = campaign::first_violation(&report, "blob-readable");
    let plan = v["plan"].as_str().unwrap();
    assert!(
        plan.starts_with("sys-eio@") || plan.starts_with("sys-enospc@"),
        "a failed call: {v}"
    );
    assert!(v["crash_point"].as_str().unwrap().contains("rename"), "{v}");
    let replay = v["replay"].as_str().unwrap();
    let (replayed, out) = campaign::replay(replay);
    assert_eq!(replayed, 1, "the replay reproduces it:\n{out}");
    assert!(out.contains("VIOLATION blob-readable"), "{out}");
    let unmodified = replay.replace(" --store-fault blob-rename-error-ignored", "");
    assert_ne!(unmodified, replay);
    let (code, out) = campaign::replay(&unmodified);
    assert_eq!(code, 0, "the unmodified store refuses the append:\n{out}");
}

/// Only a crash of a restarted life during its re-run of a reconciled call
/// shows it: the first life's crashes never reach a re-run.
#[test]
fn rerun_keeps_old_mark_is_caught_only_by_crashing_a_restarted_life() {
    assert_caught("rerun-keeps-old-mark");
    assert_hidden_without_it(
        "rerun-keeps-old-mark",
        "without restarted-life crashes it hides",
    );
}

/// A group commit that acknowledges what is only written: the power cut
/// (SIGKILL, then the log cut back to its last synced length) loses the
/// acknowledged event. Inert in Sync mode: only a Batch campaign sees it.
#[test]
fn batch_ack_when_written_is_caught_only_by_a_batch_campaign() {
    assert_caught("batch-ack-when-written");
    assert_hidden_without_it(
        "batch-ack-when-written",
        "in Sync mode the fault never runs",
    );
}

/// A follower of a group commit acknowledged while its leader's sync is
/// still in flight: the schedule holds the leader before its fdatasync
/// and lets the follower wait, which returns at once. Only parallel
/// appenders have followers, and only Batch mode groups them.
#[test]
fn batch_follower_early_ack_is_caught_by_acked_after_sync() {
    assert_caught("batch-follower-early-ack");
}

/// A failed group sync that wakes its followers as acknowledged: the
/// syscall nemesis fails the leader's fdatasync (EIO) while the schedule
/// has the followers waiting for it. Their acks come after no sync that
/// covers them, the log is cut back to its durable length, and the next
/// life does not find them.
#[test]
fn failed_sync_acks_followers_is_caught_by_acked_after_sync() {
    assert_caught("failed-sync-acks-followers");
}

/// A failed write that cuts the log back to its durable length, not to
/// where its own line starts: the syscall nemesis fails the second write
/// of a parallel group (ENOSPC), which cuts the first appender's line;
/// the group sync then acknowledges it, and the next life does not find
/// it. With no parallel group (the small fixture's steps append alone,
/// even in Batch mode) the durable length is where each line starts, and
/// the same campaign passes.
#[test]
fn failed_write_cuts_group_is_caught_only_with_parallel_appenders() {
    let report = assert_caught("failed-write-cuts-group");
    let v = campaign::first_violation(&report, "acked-durable");
    assert!(
        v["plan"].as_str().unwrap().contains("sys-enospc@")
            || v["plan"].as_str().unwrap().contains("sys-full@"),
        "a failed write: {v}"
    );
    let (code, report, stdout) = campaign::run(
        &fixture(None),
        &[
            "--exhaustive",
            "--nemesis",
            "syscall",
            "--restarts",
            "none",
            "--durability",
            "batch",
            "--store-fault",
            "failed-write-cuts-group",
        ],
    );
    assert_eq!(code, 0, "no parallel group, nothing cut:\n{stdout}");
    assert_eq!(report["violation_count"], 0);
}

#[test]
fn the_unmodified_store_passes_every_nemesis_in_batch_mode() {
    // The deepest restart's lives only, as the shipped scenarios' batch
    // campaign (harness_alone.rs): 592 trials instead of 925.
    let (code, report, stdout) = campaign::run(
        &fixture(None),
        &["--durability", "batch", "--restarts", "deepest"],
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    assert!(
        report["store"].as_str().unwrap().contains("batch"),
        "{}",
        report["store"]
    );
    assert_eq!(
        campaign::row(&report, "durable_append_power_loss")["verdict"],
        "pass",
        "the power-loss nemesis recovered the batch store: {stdout}"
    );
}

/// Parallel tool calls in Batch mode: each group of events written in
/// order, then waited for from one thread per call, so one sync covers the
/// group and each waiter reports its own ack. The unmodified store passes
/// every nemesis on them; an ack given once the line is written, before
/// any sync, is caught there as on sequential calls.
#[test]
fn parallel_calls_in_batch_mode_pass_and_an_ack_before_the_group_sync_is_caught() {
    let parallel = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parallel.json");
    let (code, report, stdout) =
        campaign::run(&parallel, &["--durability", "batch", "--trials", "12"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    let (code, report, stdout) = campaign::run(
        &parallel,
        &[
            "--durability",
            "batch",
            "--exhaustive",
            "--nemesis",
            "points",
            "--store-fault",
            "batch-ack-when-written",
        ],
    );
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    assert!(campaign::count(&report, "acked-durable") > 0, "{stdout}");
}

/// Only because the agent retries an append refused with an I/O error:
/// the refused copy is still in the log, and the retry adds it again.
#[test]
fn keep_refused_append_is_caught_by_log_prefix_when_the_agent_retries() {
    assert_caught("keep-refused-append");
}

// The next five break agentstore's own fold or context. The old oracle
// compared the store with `agentstore::projection::fold` and checked only
// the recovery block of an unbudgeted context. It saw the two fold faults
// only because the fault switch is off in the harness's process: the same
// bug in the fold's code would have been in the oracle too and compared
// equal. It never saw the three context faults: the summary, the window
// and budgeted contexts were not looked at. The harness's own model
// (`agentchaos::model::oracle`) sees each.

/// The projection's branch starts at the root after a compaction: the
/// served projection and the context show entries before the window.
#[test]
fn fold_branch_ignores_compaction_is_caught_by_checkpoint_projection_and_context_window() {
    assert_caught("fold-branch-ignores-compaction");
}

/// A crash right after a `leaf_moved` resumes on the last branch written.
#[test]
fn fold_wrong_leaf_is_caught_by_checkpoint_projection_and_context_window() {
    assert_caught("fold-wrong-leaf");
}

/// A message hung under an earlier one (no `leaf_moved`) is served as more
/// of the branch the leaf was on.
#[test]
fn fold_ignores_implicit_branch_is_caught_by_checkpoint_projection_and_context_window() {
    assert_caught("fold-ignores-implicit-branch");
}

#[test]
fn context_drops_summary_is_caught_by_context_window() {
    assert_caught("context-drops-summary");
}

/// Only a budgeted context shows it: the unbudgeted one keeps the block.
#[test]
fn context_budget_drops_recovery_is_caught_by_orphan_marked_uncertain_under_a_budget() {
    let report = assert_caught("context-budget-drops-recovery");
    let expected: Vec<&str> = report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["expected"].as_str().unwrap())
        .collect();
    assert!(
        expected
            .iter()
            .all(|e| e.contains("rendered with a budget of")),
        "only budgeted contexts lose the block: {expected:?}"
    );
}

#[test]
fn context_budget_drops_newest_is_caught_by_context_window() {
    let report = assert_caught("context-budget-drops-newest");
    assert!(report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["expected"]
            .as_str()
            .unwrap()
            .contains("to drop the oldest messages first")));
}

#[test]
fn a_fault_the_nemeses_cannot_reveal_is_said_to_pass_unseen() {
    let (code, _, stdout) = campaign::run(
        &fixture(None),
        &[
            "--trials",
            "2",
            "--nemesis",
            "points",
            "--store-fault",
            "no-fdatasync",
        ],
    );
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.lines().next().unwrap().contains(
            "--store-fault no-fdatasync: only the powerloss nemesis reveals this fault and this campaign runs points"
        ),
        "{stdout}"
    );
    let (_, _, stdout) = campaign::run(&fixture(None), &["--trials", "2", "--nemesis", "points"]);
    assert!(!stdout.contains("reveals this fault"), "{stdout}");
}

#[test]
fn every_fault_the_store_offers_has_an_expectation() {
    let listed: Vec<&str> = agentstore::fault::Fault::ALL
        .iter()
        // The power-loss faults are powerloss_campaign.rs's, the lease faults workers.rs's.
        .filter(|(f, _, _)| {
            !agentstore::fault::Fault::POWER_LOSS.contains(f)
                && !agentstore::fault::Fault::LEASE.contains(f)
        })
        .map(|(_, n, _)| *n)
        .collect();
    let expected: Vec<&str> = EXPECTED.iter().map(|(f, _)| *f).collect();
    assert_eq!(
        listed, expected,
        "every fault profile has a row in EXPECTED and a test here"
    );
}

/// A store that retries its torn tail's save after any error, not only a
/// taken name, never returns from an open on a full disk: only a full-disk
/// plan reaches it (a tear, then a disk that fills inside the next life's
/// open, before the save), and the run fails on the hung life, the store's
/// error (exit 1), with a replay that hangs again; the same replay passes
/// on the unmodified store, whose open refuses with ENOSPC.
#[test]
fn quarantine_retries_any_error_is_caught_as_an_open_that_hangs_on_a_full_disk() {
    let fault = "quarantine-retries-any-error";
    let nemesis =
        agentchaos::nemesis::revealing(agentstore::fault::Fault::from_name(fault).unwrap())
            .to_string();
    assert_eq!(nemesis, "points,syscall");
    let args = [
        "--trials",
        "8",
        "--nemesis",
        &nemesis,
        "--hang-timeout",
        "5",
        "--store-fault",
        fault,
    ];
    let (code, report, stdout) = campaign::run(&fixture(None), &args);
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(report["violation_count"], 0, "{stdout}");
    let hung = report["scenarios"][0]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["error"].as_str().unwrap().starts_with("life 1 hung"))
        .unwrap_or_else(|| panic!("a hung restarted life:\n{stdout}"));
    let plan = hung["plan"].as_str().unwrap();
    assert!(
        plan.starts_with("tear@") && plan.contains("+sys-full@"),
        "{plan}"
    );
    let replay = format!(
        "agentchaos replay --scenario {} --plan {plan} --hang-timeout 5",
        fixture(None).display()
    );
    assert!(
        stdout.contains(&format!(
            "  replay: agentchaos replay --scenario {} --plan {plan} --store-fault {fault}",
            fixture(None).display()
        )),
        "{stdout}"
    );
    let (code, out) = campaign::replay(&format!("{replay} --store-fault {fault}"));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ERROR: life 1 hung"), "{out}");
    assert!(
        out.contains("the disk full from syscall ") && out.contains(".torn-"),
        "the description names the save the full disk failed:\n{out}"
    );
    let (code, out) = campaign::replay(&replay);
    assert_eq!(
        code, 0,
        "the unmodified store refuses the open and recovers after:\n{out}"
    );
    assert!(out.contains("No space left on device"), "{out}");
}
