//! The mutant corpus (`chaos/mutants/README.md`), each caught by a real
//! `agentchaos run`: exit code 1, its expected invariant violated, and the
//! scorecard row of the capability it breaks is `fail`, while the rows of
//! capabilities it does not touch are not. The SQLite mutants run through
//! `--adapter`, the agentstore faults in-process (`--store-fault`), all on
//! the small fixture (exhaustive), or the branch fixture for a mutant whose
//! capability needs a leaf move. The unmodified stores' scorecards are the
//! control. (agentstore's other faults are caught in `tests/faults.rs`.)

use crate::campaign;
use crate::support;

use std::path::{Path, PathBuf};

use crate::campaign::row;
use serde_json::Value;

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.json"))
}

/// Which store, broken how.
#[derive(Clone, Copy)]
enum Store {
    Reference,
    Fault(&'static str),
    /// The SQLite store with this mutant.
    Sqlite(&'static str),
}

fn store_args(store: Store) -> Vec<String> {
    match store {
        Store::Reference => vec![],
        Store::Fault(f) => vec!["--store-fault".into(), f.into()],
        Store::Sqlite(m) => {
            let bin = support::workspace_bin("agentchaos-sqlite-adapter");
            vec![
                "--adapter".into(),
                format!("{} --mutant {m}", bin.display()),
            ]
        }
    }
}

/// `agentchaos run --quiet --scenario S --nemesis points --json FILE`
/// (exhaustive): exit code, the JSON report, stdout. The mutants run under
/// the crash points (each is caught there; the defaults are
/// `earned_verdicts.rs`'s). In-process, the restarted lives of the deepest
/// restart only (`--restarts deepest`): each of these faults is caught in
/// a first life or its first restart, and crashing every restarted life
/// took three times the trials (452 instead of 133 for `ack-before-fsync`);
/// through an adapter `campaign::run` crashes no restarted life.
fn campaign(store: Store, scenario_name: &str) -> (i32, Value, String) {
    let mut args = store_args(store);
    args.extend(["--nemesis".to_string(), "points".to_string()]);
    if !matches!(store, Store::Sqlite(_)) {
        args.extend(["--restarts".to_string(), "deepest".to_string()]);
    }
    campaign::run(&scenario(scenario_name), &args)
}

const ALL_ROWS: [&str; 11] = [
    "durable_append",
    "torn_tail_repair",
    "damage_refusal",
    "orphan_marking",
    "effect_ledger",
    "checkpoint_projection",
    "branches",
    "compaction",
    "writer_lock",
    "blobs",
    "outcome",
];

/// One mutant and what must catch it.
struct Expect<'a> {
    store: Store,
    scenario: &'static str,
    invariant: &'static str,
    fails: &'static str,
    /// Rows the mutant does not touch: never `fail`.
    untouched: &'a [&'static str],
}

/// Runs the campaign and checks it; returns the report.
fn caught(e: &Expect<'_>) -> Value {
    let (code, report, stdout) = campaign(e.store, e.scenario);
    let name = match e.store {
        Store::Fault(f) => f,
        Store::Sqlite(m) => m,
        _ => unreachable!("a mutant"),
    };
    assert_eq!(code, 1, "{name} must fail the campaign:\n{stdout}");
    assert_eq!(
        report["error_count"], 0,
        "{name}: trials run as planned:\n{stdout}"
    );
    assert!(
        campaign::count(&report, e.invariant) > 0,
        "{name} must be caught by {}:\n{stdout}",
        e.invariant
    );
    let r = row(&report, e.fails);
    assert_eq!(
        r["verdict"], "fail",
        "{name}: scorecard row {}:\n{stdout}",
        e.fails
    );
    let replay = r["first_violation"]["replay"].as_str().unwrap();
    assert!(
        replay.starts_with("agentchaos replay --scenario ") && replay.contains(name),
        "{replay}"
    );
    for other in e.untouched {
        assert_ne!(
            row(&report, other)["verdict"],
            "fail",
            "{name} does not touch {other}:\n{stdout}"
        );
    }
    report
}

#[test]
fn sqlite_double_commit_fails_effect_ledger_and_its_probe_replays() {
    let report = caught(&Expect {
        store: Store::Sqlite("double-commit"),
        scenario: "small",
        invariant: "ledger-refuses-double-commit",
        fails: "effect_ledger",
        untouched: &[
            "durable_append",
            "orphan_marking",
            "checkpoint_projection",
            "outcome",
        ],
    });
    let v = campaign::first_violation(&report, "ledger-refuses-double-commit");
    assert!(
        v["found"].as_str().unwrap().contains("committed twice"),
        "{v}"
    );
    // The probe's replay command reproduces it through the same adapter.
    let command = v["replay"].as_str().unwrap();
    assert!(command.contains("probe:ledger@"), "{command}");
    let (code, stdout) = campaign::replay(command);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("VIOLATION ledger-refuses-double-commit"),
        "{stdout}"
    );
}

/// The agent restarts a call only when recovery says so, and no recovery
/// says so for a committed one: only the rules probe starts it again (after
/// a recovery and a reconciliation that claims `not_applied`).
#[test]
fn sqlite_rerun_committed_fails_effect_ledger_by_the_rules_probe() {
    let report = caught(&Expect {
        store: Store::Sqlite("rerun-committed"),
        scenario: "small",
        invariant: "rule-refused",
        fails: "effect_ledger",
        untouched: &[
            "durable_append",
            "orphan_marking",
            "checkpoint_projection",
            "outcome",
        ],
    });
    let v = campaign::first_violation(&report, "rule-refused");
    let command = v["replay"].as_str().unwrap();
    assert!(
        command.contains("probe:rule-restart-committed-call@"),
        "{command}"
    );
    let (code, stdout) = campaign::replay(command);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("VIOLATION rule-refused"), "{stdout}");
}

#[test]
fn sqlite_rerun_uncertain_fails_orphan_marking() {
    caught(&Expect {
        store: Store::Sqlite("rerun-uncertain"),
        scenario: "small",
        invariant: "orphan-marked-uncertain",
        fails: "orphan_marking",
        untouched: &["durable_append", "effect_ledger", "checkpoint_projection"],
    });
}

#[test]
fn sqlite_mark_twice_fails_orphan_marking() {
    caught(&Expect {
        store: Store::Sqlite("mark-twice"),
        scenario: "small",
        invariant: "recovery-idempotent",
        fails: "orphan_marking",
        untouched: &[
            "durable_append",
            "effect_ledger",
            "checkpoint_projection",
            "outcome",
        ],
    });
}

#[test]
fn sqlite_forget_started_fails_orphan_marking() {
    caught(&Expect {
        store: Store::Sqlite("forget-started"),
        scenario: "small",
        invariant: "orphan-marked-uncertain",
        fails: "orphan_marking",
        untouched: &["durable_append", "effect_ledger", "checkpoint_projection"],
    });
}

#[test]
fn sqlite_recovery_uncommitted_fails_orphan_marking() {
    caught(&Expect {
        store: Store::Sqlite("recovery-uncommitted"),
        scenario: "small",
        invariant: "recovery-idempotent",
        fails: "orphan_marking",
        untouched: &["durable_append", "effect_ledger", "checkpoint_projection"],
    });
}

#[test]
fn sqlite_lose_intent_fails_durable_append() {
    caught(&Expect {
        store: Store::Sqlite("lose-intent"),
        scenario: "small",
        invariant: "acked-durable",
        fails: "durable_append",
        untouched: &["effect_ledger", "outcome"],
    });
}

#[test]
fn sqlite_drop_recovery_notice_fails_orphan_marking() {
    caught(&Expect {
        store: Store::Sqlite("drop-recovery-notice"),
        scenario: "small",
        invariant: "orphan-marked-uncertain",
        fails: "orphan_marking",
        untouched: &[
            "durable_append",
            "effect_ledger",
            "checkpoint_projection",
            "outcome",
        ],
    });
}

/// The small fixture never moves the leaf: this one needs a branch switch.
#[test]
fn sqlite_leaf_from_last_line_fails_branches() {
    caught(&Expect {
        store: Store::Sqlite("leaf-from-last-line"),
        scenario: "branch",
        invariant: "checkpoint-projection",
        fails: "branches",
        untouched: &[
            "durable_append",
            "orphan_marking",
            "effect_ledger",
            "checkpoint_projection",
            "compaction",
            "outcome",
        ],
    });
}

#[test]
fn agentstore_ack_before_fsync_fails_durable_append() {
    caught(&Expect {
        store: Store::Fault("ack-before-fsync"),
        scenario: "small",
        invariant: "acked-durable",
        fails: "durable_append",
        untouched: &[
            "torn_tail_repair",
            "damage_refusal",
            "orphan_marking",
            "effect_ledger",
        ],
    });
}

#[test]
fn agentstore_no_torn_tail_repair_fails_torn_tail_repair() {
    caught(&Expect {
        store: Store::Fault("no-torn-tail-repair"),
        scenario: "small",
        invariant: "log-prefix",
        fails: "torn_tail_repair",
        untouched: &["damage_refusal", "effect_ledger"],
    });
}

#[test]
fn agentstore_skip_damaged_lines_fails_damage_refusal_and_its_probe_replays() {
    let report = caught(&Expect {
        store: Store::Fault("skip-damaged-lines"),
        scenario: "small",
        invariant: "damage-refused",
        fails: "damage_refusal",
        // Not torn_tail_repair: the tail probe's 64 torn lines are skipped
        // as records too, and the store dies folding them (tail-rules).
        untouched: &[
            "durable_append",
            "orphan_marking",
            "effect_ledger",
            "checkpoint_projection",
            "outcome",
        ],
    });
    let v = campaign::first_violation(&report, "damage-refused");
    // Plain words: which file, which byte, what went missing.
    let expected = v["expected"].as_str().unwrap();
    assert!(
        expected.contains("events.jsonl, byte offset "),
        "{expected}"
    );
    assert!(v["found"].as_str().unwrap().contains("silent skip"), "{v}");
    let (code, stdout) = campaign::replay(v["replay"].as_str().unwrap());
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("VIOLATION damage-refused"), "{stdout}");
}

#[test]
fn agentstore_non_atomic_snapshot_fails_checkpoint_projection() {
    caught(&Expect {
        store: Store::Fault("non-atomic-snapshot"),
        scenario: "small",
        invariant: "checkpoint-projection",
        fails: "checkpoint_projection",
        untouched: &[
            "durable_append",
            "torn_tail_repair",
            "damage_refusal",
            "orphan_marking",
            "effect_ledger",
            "outcome",
        ],
    });
}

#[test]
fn agentstore_drop_recovery_block_fails_orphan_marking() {
    let others: Vec<&str> = ALL_ROWS
        .into_iter()
        .filter(|r| *r != "orphan_marking")
        .collect();
    caught(&Expect {
        store: Store::Fault("drop-recovery-block"),
        scenario: "small",
        invariant: "orphan-marked-uncertain",
        fails: "orphan_marking",
        untouched: &others,
    });
}

/// The control: the unmodified reference store fails no row, claims
/// everything, and every capability the small fixture exercises passes
/// with evidence counted. The SQLite store's control is
/// `adapter_run.rs`'s `the_sqlite_store_passes` (the same exhaustive
/// campaign, run once).
#[test]
fn the_unmodified_reference_store_fails_no_row() {
    let (code, report, stdout) = campaign(Store::Reference, "small");
    assert_eq!(code, 0, "{stdout}");
    for r in ALL_ROWS {
        let verdict = &row(&report, r)["verdict"];
        match r {
            // The small fixture moves no leaf, compacts nothing, stores no blob.
            "branches" | "compaction" | "blobs" => {
                assert_eq!(verdict, "not exercised", "{r}: {stdout}")
            }
            _ => {
                assert_eq!(verdict, "pass", "{r}: {stdout}");
                assert!(row(&report, r)["evidence"].as_u64().unwrap() > 0);
            }
        }
    }
    assert!(
        stdout.contains("scorecard (11 of 11 capabilities claimed)"),
        "{stdout}"
    );
}
