//! The lease transitions of `agentchaos workers` under strikes (`slow@K`,
//! `lapse@K`, `leave@K`, a kill inside a renewal, `kill@K.P`, and with
//! `--postgres` a connection reset or dropped under its owner,
//! `reset@K.S`, `drop@K.S`, and a pause inside its transaction,
//! `pause@K.S`): each of agentstore's faults on a lease path is
//! caught by its replay in 10 of 10 runs (`--repeat 10`), and the
//! unmodified store passes the same plan in 10 of 10; the same for the
//! PostgreSQL store's faults (`--postgres`, a private cluster the campaign
//! starts; skipped without PostgreSQL on a dev machine, failed under
//! `CI=true`, as in `postgres.rs`).

use crate::postgres::postgres_installed;
use crate::support;
use crate::workers::workers;

/// `fault` under `plan` (`ttl`: `--ttl-ms`) fails 10 of 10 runs of its
/// printed replay, by `invariant`; the unmodified store passes 10 of 10.
fn caught_ten_of_ten(fault: &str, plan: &str, ttl: &str, invariant: &str) -> String {
    caught_on(&[], fault, plan, ttl, invariant)
}

/// As [`caught_ten_of_ten`], on the store `store` names (`--postgres`, or
/// nothing). The broken and the unmodified store run at once: each is a
/// campaign of its own (its own scratch directories, and with `--postgres`
/// its own cluster), whose verdicts no timing changes, and both mostly
/// wait out leases.
fn caught_on(store: &[&str], fault: &str, plan: &str, ttl: &str, invariant: &str) -> String {
    let on = store.iter().map(|s| format!(" {s}")).collect::<String>();
    let replay = format!(
        "agentchaos workers --plan {plan} --workers 2 --sessions 2 --ttl-ms {ttl}{on} --store-fault {fault}"
    );
    let mut args: Vec<&str> = replay.split(' ').skip(2).collect();
    args.extend(["--repeat", "10"]);
    let mut clean_args = vec!["--plan", plan, "--ttl-ms", ttl, "--repeat", "10"];
    clean_args.extend_from_slice(store);
    let ((code, out), (clean_code, clean)) = std::thread::scope(|s| {
        let clean = s.spawn(|| workers(&clean_args));
        (workers(&args), clean.join().unwrap())
    });
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("{plan}: failed 10 of 10 runs")),
        "{out}"
    );
    assert!(out.contains(&format!("VIOLATION {invariant} ")), "{out}");
    // The command it ran is the replay every violation prints.
    assert!(out.contains(&format!("  replay:   {replay}\n")), "{out}");
    assert_eq!(clean_code, 0, "{clean}");
    assert!(
        clean.contains(&format!("{plan}: failed 0 of 10 runs")),
        "{clean}"
    );
    assert!(
        clean.contains("10 trial(s), 0 violation(s), 0 not exercised"),
        "{clean}"
    );
    out
}

/// A slow owner (alive, sent nothing while its lease lapsed) is taken
/// over; its renewal before its next effect must be fenced like a write.
#[test]
fn a_renewal_without_an_epoch_check_is_caught_under_a_slow_owner() {
    let out = caught_ten_of_ten(
        "renew-without-epoch-check",
        "slow@3",
        "100,5000",
        "fenced-epoch-refused",
    );
    assert!(
        out.contains("found:    the store renewed its lease, and the worker applied op-s0-0 for w0 at epoch 1"),
        "{out}"
    );
}

/// A second process under the owner's worker id takes the lapsed session
/// back: granted the same epoch, the first process's write is accepted.
#[test]
fn a_reclaim_at_the_same_epoch_is_caught_as_two_processes_holding_it() {
    let out = caught_ten_of_ten("reclaim-same-epoch", "lapse@3", "100", "one-live-owner");
    assert!(
        out.contains("from w0 at epoch 1 while w0#2 held it: two processes held one epoch at once"),
        "{out}"
    );
}

/// An acknowledged close must end the lease: the next worker is granted
/// the session at once.
#[test]
fn a_release_that_keeps_the_lease_is_caught_by_the_next_worker() {
    let out = caught_ten_of_ten("release-keeps-lease", "leave@3", "300", "one-live-owner");
    assert!(
        out.contains("expected: w0's acknowledged close of session s0 ends its lease (epoch 1)"),
        "{out}"
    );
}

/// A kill inside the owner's renewal (its first crash point there,
/// `lease.write`) must leave the session to the next worker: a lease
/// record rewritten in place is left empty, and no one can take over.
#[test]
fn a_lease_written_in_place_is_caught_by_a_kill_inside_the_renewal() {
    let out = caught_ten_of_ten(
        "lease-written-in-place",
        "kill@3.1",
        "100",
        "acked-survive-takeover",
    );
    assert!(out.contains("VIOLATION work-completes "), "{out}");
    assert!(
        out.contains("found:    the store refused w1's takeover"),
        "{out}"
    );
    assert!(out.contains("the lease record does not parse"), "{out}");
    assert!(
        out.contains("strikes fired/planned: crash-point-kill 10/10"),
        "{out}"
    );
}

/// Every transition, one after another in one plan: a slow owner taken
/// over, its heir's session taken back by a second process under the
/// heir's id, then a graceful release; the unmodified store passes, each
/// strike fired, every write of a superseded owner fenced.
#[test]
fn every_transition_in_one_plan_passes_on_the_unmodified_store() {
    let (code, out) = workers(&["--plan", "slow@3+lapse@1+leave@2", "--ttl-ms", "100"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("strikes fired/planned: lapse 1/1 · leave 1/1 · slow 1/1"),
        "{out}"
    );
    let line = out.lines().find(|l| l.starts_with("slow@3+")).unwrap();
    assert!(
        line.contains("2 write(s) fenced, 6 effect(s) applied, 0 violation(s)"),
        "{line}"
    );
}

#[test]
fn a_bad_repeat_is_refused_in_one_line() {
    let (code, out) = workers(&["--plan", "slow@3", "--repeat", "0"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("--repeat must be at least 1"), "{out}");
}

/// Whether PostgreSQL's server binaries are here (the caller skips
/// without them on a dev machine; under `CI=true` their absence fails),
/// with `agentstore-pg` built beside `agentchaos`, where `--postgres` looks.
fn postgres_here() -> bool {
    if !postgres_installed() {
        return false;
    }
    support::workspace_bin("agentstore-pg");
    true
}

/// The PostgreSQL store's renewal must be fenced: extending the current
/// lease for a taken-over owner hands it its successor's epoch.
#[test]
fn postgres_a_renewal_without_an_epoch_check_is_caught() {
    if postgres_here() {
        caught_on(
            &["--postgres"],
            "renew-without-epoch-check",
            "slow@3",
            "100,5000",
            "one-live-owner",
        );
    }
}

#[test]
fn postgres_a_reclaim_at_the_same_epoch_is_caught() {
    if postgres_here() {
        caught_on(
            &["--postgres"],
            "reclaim-same-epoch",
            "lapse@3",
            "100",
            "one-live-owner",
        );
    }
}

/// A fenced owner's close ends its successor's lease when the release is
/// not fenced: the slow owner, refused, asks again and is granted the
/// session while the heir's lease lives.
#[test]
fn postgres_a_release_without_a_fence_is_caught() {
    if postgres_here() {
        caught_on(
            &["--postgres"],
            "release-without-fence",
            "slow@3",
            "100,5000",
            "one-live-owner",
        );
    }
}

/// A write whose connection died in its `COMMIT` (the round trip reset
/// before the server got it) must not be acknowledged on the store's
/// word alone: the server rolled it back, and the acknowledged effect
/// commit is missing from the log.
#[test]
fn postgres_a_lost_commit_taken_as_committed_is_caught() {
    if postgres_here() {
        caught_on(
            &["--postgres"],
            "lost-commit-assumed",
            "reset@4.7",
            "300",
            "acked-survive-takeover",
        );
    }
}

/// The same mistake in a takeover: the heir's connection reset before
/// its takeover's `COMMIT` (after the owner's kill) is taken as a grant.
/// The server rolled the takeover back with its recovery marks, so the
/// heir acts on the previous owner's orphans at an epoch no grant wrote.
#[test]
fn postgres_a_lost_takeover_commit_taken_as_a_grant_is_caught() {
    if postgres_here() {
        let out = caught_on(
            &["--postgres"],
            "lost-commit-assumed",
            "kill@3.1+reset@take.10",
            "300",
            "takeover-marks-orphans",
        );
        assert!(
            out.contains("found:    no tool_recovery for call c0"),
            "{out}"
        );
    }
}

/// And in a release: the owner's connection reset before its close's
/// `COMMIT` is taken as a release. The server rolled it back, so the
/// lease the store called ended is live, and the next worker, asking at
/// once, is refused `lease_held` after an acknowledged close.
#[test]
fn postgres_a_lost_close_commit_taken_as_a_release_is_caught() {
    if postgres_here() {
        caught_on(
            &["--postgres"],
            "lost-commit-assumed",
            "leave@3+reset@close.5",
            "300",
            "one-live-owner",
        );
    }
}

/// A reconnect is not a new owner: the owner's renewal dropped (never
/// sent) while the other worker took the session over, then its
/// connection closed; a store that adopts the session's epoch on
/// reconnecting renews the heir's lease for the zombie, which applies its
/// effect again.
#[test]
fn postgres_a_reconnect_that_adopts_the_epoch_is_caught() {
    if postgres_here() {
        let out = caught_on(
            &["--postgres"],
            "reconnect-adopts-epoch",
            "drop@3.1",
            "100",
            "fenced-epoch-refused",
        );
        assert!(
            out.contains("VIOLATION effect-once-across-workers "),
            "{out}"
        );
    }
}

/// A fence checked at one moment and relied on at another: a write that
/// reads the session's epoch without locking its row, held inside its
/// transaction after that read (`pause@4.3`) while the other worker takes
/// the session over, commits after the newer grant and writes its stale
/// lease over the heir's. The unmodified store locks the row, so the
/// takeover waits for the held write instead.
#[test]
fn postgres_a_fence_without_the_row_lock_is_caught() {
    if postgres_here() {
        caught_on(
            &["--postgres"],
            "fence-without-row-lock",
            "pause@4.3",
            "100",
            "fenced-epoch-refused",
        );
    }
}
