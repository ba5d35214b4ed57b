//! The PostgreSQL store (`store-pg`, `agentstore-pg adapter`) under the
//! harness, on a private cluster each test starts itself: the kills of a
//! campaign with 0 violations, and its faults caught with their replay
//! commands.
//!
//! The syscall nemesis does not apply: it faults the file-mutating
//! syscalls under the trial's store root, and this store writes no file
//! (its I/O is the database's socket). Power loss models a file system
//! under the store, not a database server.

use std::path::{Path, PathBuf};

use agentchaos::nemesis::partition::{self, Partition};
use agentchaos::store::adapter::{AdapterCommand, Client, ClientOptions};
use agentchaos_protocol::event::{Effect, Event, Phase};
use agentchaos_protocol::message::{LeaseRequest, OpenArgs};
use agentchaos_protocol::ErrorKind;
use agentstore_pg::cluster::{self, Cluster, ClusterError, ClusterOptions, Listen};

use crate::campaign;
use crate::support;

/// A started private cluster, or `None` (a skip) without PostgreSQL on a
/// dev machine; under `CI=true` a missing PostgreSQL fails.
fn private_cluster() -> Option<Cluster> {
    match Cluster::start(ClusterOptions::default()) {
        Ok(c) => Some(c),
        Err(e @ ClusterError::NotInstalled) if !cluster::required() => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("cannot start a private PostgreSQL cluster: {e}"),
    }
}

/// Whether PostgreSQL's server binaries are here: false (the caller
/// skips) on a dev machine without them; under `CI=true` their absence fails.
pub(crate) fn postgres_installed() -> bool {
    if cluster::find_bindir().is_some() {
        return true;
    }
    assert!(
        !cluster::required(),
        "PostgreSQL is not installed (CI=true)"
    );
    eprintln!("skipped: PostgreSQL is not installed");
    false
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

/// The adapter command line for `cluster`, with `--fault` when given.
fn pg_adapter(cluster: &Cluster, fault: Option<&str>) -> String {
    let bin = support::workspace_bin("agentstore-pg");
    let mut words = vec![
        bin.display().to_string(),
        "adapter".into(),
        "--dsn".into(),
        cluster.dsn(),
    ];
    if let Some(f) = fault {
        words.extend(["--fault".into(), f.to_string()]);
    }
    shlex::try_join(words.iter().map(String::as_str)).expect("no NUL in the command")
}

#[test]
fn the_postgres_store_passes_the_kills_of_a_campaign() {
    let Some(cluster) = private_cluster() else {
        return;
    };
    let adapter = pg_adapter(&cluster, None);
    let (code, report, stdout) =
        campaign::run(&fixture(), &["--adapter", &adapter, "--nemesis", "points"]);
    assert_eq!(code, 0, "the PostgreSQL store must pass:\n{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    assert!(report["trials"].as_u64().unwrap() > 20, "{stdout}");
    let s = &report["scenarios"][0];
    assert_eq!(
        s["crash_points_covered"], s["crash_points_total"],
        "{stdout}"
    );
    for r in ["orphan_marking", "effect_ledger", "checkpoint_projection"] {
        assert_eq!(
            campaign::row(&report, r)["verdict"],
            "pass",
            "{r}:\n{stdout}"
        );
    }
    // Kills between requests cannot land inside the store's writes, and
    // the syscall nemesis has no file of this store to fault: its
    // durability is the database crash's to show (below), never passed here.
    assert_eq!(
        campaign::row(&report, "durable_append")["verdict"],
        "not exercised",
        "{stdout}"
    );
    for r in ["torn_tail_repair", "damage_refusal", "writer_lock"] {
        assert_eq!(
            campaign::row(&report, r)["verdict"],
            "not supported",
            "{r}:\n{stdout}"
        );
    }
}

#[test]
fn a_ledger_without_its_unique_constraint_is_caught_and_replayed() {
    let Some(cluster) = private_cluster() else {
        return;
    };
    let adapter = pg_adapter(&cluster, Some("ledger-without-unique"));
    let (code, report, stdout) =
        campaign::run(&fixture(), &["--adapter", &adapter, "--nemesis", "points"]);
    assert_eq!(
        code, 1,
        "the broken ledger must fail the campaign:\n{stdout}"
    );
    assert_eq!(
        campaign::row(&report, "effect_ledger")["verdict"],
        "fail",
        "{stdout}"
    );
    let v = campaign::first_violation(&report, "ledger-refuses-double-commit");
    let replay = v["replay"].as_str().unwrap();
    assert!(replay.contains("ledger-without-unique"), "{replay}");
    let (code, out) = campaign::replay(replay);
    assert_eq!(code, 1, "the replay reproduces the violation:\n{out}");
    assert!(out.contains("VIOLATION"), "{out}");
}

/// `agentchaos db-crash` with `args`: exit code and stdout. `None` (a
/// skip) without PostgreSQL on a dev machine.
fn db_crash(fault: Option<&str>, args: &[&str]) -> Option<(i32, String)> {
    if !postgres_installed() {
        return None;
    }
    let bin = support::workspace_bin("agentstore-pg");
    let mut adapter = format!("{} adapter", bin.display());
    if let Some(f) = fault {
        adapter.push_str(&format!(" --fault {f}"));
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(["db-crash", "--adapter", &adapter])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    Some((out.status.code().unwrap_or(-1), format!("{stdout}{stderr}")))
}

#[test]
fn acknowledged_events_survive_every_database_crash() {
    let Some((code, out)) = db_crash(None, &[]) else {
        return;
    };
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "db-crash: 24 trial(s), 108 acknowledged append(s) before the crashes, 0 violation(s)"
        ),
        "{out}"
    );
}

#[test]
fn asynchronous_commit_is_caught_by_a_crash_with_the_wal_writer_frozen() {
    let Some((code, out)) = db_crash(
        Some("synchronous-commit-off"),
        &["--crash", "kill-frozen", "--after", "3"],
    ) else {
        return;
    };
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("VIOLATION acked-durable"), "{out}");
    let replay = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay:   "))
        .unwrap_or_else(|| panic!("no replay line:\n{out}"));
    assert!(
        replay.contains("--fault synchronous-commit-off"),
        "{replay}"
    );
    let (code, again) = campaign::replay(replay);
    assert_eq!(code, 1, "the replay reproduces the loss:\n{again}");
    assert!(again.contains("VIOLATION acked-durable"), "{again}");
}

/// A fresh adapter process of `adapter` with `env` set.
fn adapter_process(adapter: &str, env: &[(&str, &str)]) -> Client {
    let mut cmd = AdapterCommand::parse(adapter).unwrap().to_command();
    cmd.envs(env.iter().copied());
    Client::spawn(cmd, ClientOptions::default()).unwrap()
}

fn leased_open(root: &Path, ws: &Path, create: bool, worker: &str, ttl_ms: u64) -> OpenArgs {
    OpenArgs {
        root: root.to_path_buf(),
        session: "leased".into(),
        workspace: Some(ws.to_path_buf()),
        create,
        lease: Some(LeaseRequest {
            worker_id: worker.into(),
            ttl_ms,
        }),
    }
}

/// The lease contract through the adapter, in three deterministic steps
/// (no sleeps: a lease of ttl 0 has expired by the next request, one of
/// 10 minutes is live for the whole test). Returns every broken promise,
/// each with expected and found; the replay is this test's own command.
fn lease_problems(adapter: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let mut problems = Vec::new();

    // Worker a owns the session with a lease that lapses at once, starts a
    // side effect and is taken over by b.
    let root = dir.path().join("takeover");
    let mut a = adapter_process(adapter, &[]);
    a.open(&leased_open(&root, &ws, true, "a", 0)).unwrap();
    start_side_effect(&mut a);
    let mut b = adapter_process(adapter, &[]);
    let opened = b
        .open(&leased_open(&root, &ws, false, "b", 600_000))
        .unwrap();
    let epoch = opened.lease.as_ref().map(|g| g.epoch);
    if epoch != Some(2) {
        problems.push(format!("takeover: expected epoch 2, found {epoch:?}"));
    }
    let marked: Vec<(String, Phase)> = opened
        .recovery
        .iter()
        .flat_map(|r| r.uncertain.iter().map(|u| (u.call_id.clone(), u.phase)))
        .collect();
    if marked != [("c1".to_string(), Phase::Started)] {
        problems.push(format!(
            "takeover-marks-orphans: expected c1 marked uncertain with phase started before b acts, found {marked:?}"
        ));
    }

    // The zombie wakes up: its commit must be refused, nothing written.
    let zombie = a.append(&Event::EffectCommitted {
        call_id: "c1".into(),
        operation_id: "op-c1".into(),
        external_ref: "zombie".into(),
    });
    match zombie {
        Err(e) if e.refusal_kind() == Some(ErrorKind::Fenced) => {}
        other => problems.push(format!(
            "fenced-epoch-refused: expected the epoch-1 owner's effect_committed refused with fenced after the takeover, found {other:?}"
        )),
    }
    let _ = a.kill();
    let _ = b.kill();

    // Two workers whose clocks disagree by 20 minutes: b's runs ahead.
    let root = dir.path().join("clocks");
    let mut a = adapter_process(adapter, &[]);
    a.open(&leased_open(&root, &ws, true, "a", 600_000))
        .unwrap();
    let mut b = adapter_process(adapter, &[("AGENTSTORE_PG_CLOCK_SKEW_MS", "1200000")]);
    match b.open(&leased_open(&root, &ws, false, "b", 600_000)) {
        Err(e) if e.refusal_kind() == Some(ErrorKind::LeaseHeld) => {}
        other => problems.push(format!(
            "one-live-owner: expected lease_held while a's 10-minute lease is live by the database's clock, found {other:?}"
        )),
    }
    let _ = a.kill();
    let _ = b.kill();
    problems
}

const LEASE_REPLAY: &str =
    "cargo test -p agentchaos --test integration postgres::lease_ (its problems name the broken promise)";

#[test]
fn lease_the_postgres_store_keeps_its_lease_contract() {
    let Some(cluster) = private_cluster() else {
        return;
    };
    let problems = lease_problems(&pg_adapter(&cluster, None));
    assert!(problems.is_empty(), "{problems:#?}\nreplay: {LEASE_REPLAY}");
}

/// Each lease fault is caught, by the check its broken promise belongs to.
#[test]
fn lease_faults_are_each_caught() {
    let Some(cluster) = private_cluster() else {
        return;
    };
    for (fault, caught_by) in [
        ("no-epoch-check", "fenced-epoch-refused"),
        ("lease-by-worker-clock", "one-live-owner"),
        ("takeover-without-recovery", "takeover-marks-orphans"),
    ] {
        let problems = lease_problems(&pg_adapter(&cluster, Some(fault)));
        assert!(
            problems.iter().any(|p| p.starts_with(caught_by)),
            "fault {fault} not caught by {caught_by}: {problems:#?}\nreplay: {LEASE_REPLAY}"
        );
    }
}

/// The database in a network namespace of its own, worker a in another,
/// joined by a veth pair: a starts a side effect, the link is cut, a's
/// lease lapses by the database's clock and worker b (on the database's
/// side) takes over; after the link heals, a's connection still works
/// and its effect commit is refused with `fenced`, nothing written. b
/// polls for a's expiry: the outcome does not depend on how long it takes.
#[test]
fn a_partitioned_owner_is_fenced_once_the_link_heals() {
    if !partition::available() {
        assert!(
            !cluster::required(),
            "network namespaces need root and iproute2 (CI=true)"
        );
        eprintln!("skipped: no network namespaces here");
        return;
    }
    if !postgres_installed() {
        return;
    }
    let mut net = Partition::create(&format!("ac{}", std::process::id())).unwrap();
    net.add_worker(0).unwrap();
    let cluster = Cluster::start(ClusterOptions {
        listen: Listen::Tcp {
            addr: partition::DATABASE_ADDR,
            port: 5432,
        },
        netns: Some(net.database_ns()),
        settings: Vec::new(),
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let root = dir.path().join("root");

    let bin = support::workspace_bin("agentstore-pg");
    let over_tcp = [
        "adapter".to_string(),
        "--dsn".to_string(),
        cluster.tcp_dsn().unwrap(),
    ];
    let cmd = net.in_worker(0, bin.to_str().unwrap(), &over_tcp);
    let mut a = Client::spawn(cmd, ClientOptions::default()).unwrap();
    a.open(&leased_open(&root, &ws, true, "a", 1_000)).unwrap();
    start_side_effect(&mut a);

    net.cut(0).unwrap();
    // The cut is real: a new connection from the workers' side cannot reach the server.
    let cut_off = [
        "adapter".to_string(),
        "--dsn".to_string(),
        format!("{} connect_timeout=2", cluster.tcp_dsn().unwrap()),
    ];
    let cmd = net.in_worker(0, bin.to_str().unwrap(), &cut_off);
    let mut c = Client::spawn(cmd, ClientOptions::default()).unwrap();
    let reached = c.open(&leased_open(&root, &ws, false, "c", 1_000));
    assert!(
        matches!(&reached, Err(e) if e.refusal_kind() == Some(ErrorKind::Io)),
        "a worker reached the database across the cut: {reached:?}"
    );
    let _ = c.kill();
    let mut b = adapter_process(&pg_adapter(&cluster, None), &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let opened = loop {
        match b.open(&leased_open(&root, &ws, false, "b", 600_000)) {
            Ok(o) => break o,
            Err(e)
                if e.refusal_kind() == Some(ErrorKind::LeaseHeld)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => panic!("b could not take over after a's lease lapsed: {e}"),
        }
    };
    assert_eq!(opened.lease.as_ref().map(|g| g.epoch), Some(2));
    let marked = opened.recovery.as_ref().map(|r| r.uncertain.len());
    assert_eq!(marked, Some(1), "b's takeover marks a's orphan c1");
    let next_seq = b.projection().unwrap().next_seq;

    net.heal(0).unwrap();
    let zombie = a.append(&Event::EffectCommitted {
        call_id: "c1".into(),
        operation_id: "op-c1".into(),
        external_ref: "zombie".into(),
    });
    match zombie {
        Err(e) if e.refusal_kind() == Some(ErrorKind::Fenced) => {}
        other => panic!(
            "expected the partitioned owner's commit refused with fenced after the heal, found {other:?}\nreplay: cargo test -p agentchaos --test integration postgres::a_partitioned_owner"
        ),
    }
    assert_eq!(
        b.projection().unwrap().next_seq,
        next_seq,
        "nothing of the zombie's was written"
    );
    let _ = a.kill();
    let _ = b.kill();
}

/// `agentchaos workers --postgres ARGS…` (a private cluster the campaign
/// starts itself): exit code and output. `None` (a skip) without
/// PostgreSQL on a dev machine; under `CI=true` a missing PostgreSQL fails.
fn workers_pg(args: &[&str]) -> Option<(i32, String)> {
    if !postgres_installed() {
        return None;
    }
    // Built beside agentchaos, where `--postgres` looks for it.
    support::workspace_bin("agentstore-pg");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(["workers", "--postgres"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    Some((out.status.code().unwrap_or(-1), format!("{stdout}{stderr}")))
}

/// Whether the partition strikes can run here: under `CI=true` they must.
fn partitions_here() -> bool {
    let here = partition::available();
    assert!(
        here || !cluster::required(),
        "network namespaces need root and iproute2 (CI=true)"
    );
    here
}

/// `fault` fails `plan` by `invariant`; the printed replay (`--postgres`,
/// a cluster of its own) reproduces it; the unmodified store passes `plan`.
fn pg_caught(fault: &str, plan: &str, invariant: &str) -> Option<String> {
    let (code, out) = workers_pg(&["--store-fault", fault, "--plan", plan])?;
    assert_eq!(code, 1, "{fault} under {plan}: {out}");
    assert!(out.contains(&format!("VIOLATION {invariant} ")), "{out}");
    let replay = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay:   "))
        .unwrap_or_else(|| panic!("no replay line:\n{out}"));
    assert!(
        replay.contains(&format!("--postgres --store-fault {fault}")),
        "{replay}"
    );
    let (code, again) = campaign::replay(replay);
    assert_eq!(code, 1, "the replay reproduces it:\n{again}");
    assert!(
        again.contains(&format!("VIOLATION {invariant} ")),
        "{again}"
    );
    let (code, clean) = workers_pg(&["--plan", plan])?;
    assert_eq!(code, 0, "the unmodified store passes {plan}: {clean}");
    Some(out)
}

/// The many-workers campaign with every strike (a pause and a kill of a
/// lease holder after every write, database crashes of each model, and
/// with network namespaces partitions) passes on PostgreSQL with 0
/// violations.
#[test]
fn the_many_workers_campaign_with_every_strike_passes() {
    let network = partitions_here();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    // A 100 ms lease: the campaign mostly waits out leases.
    let Some((code, out)) = workers_pg(&["--json", json.to_str().unwrap(), "--ttl-ms", "100"])
    else {
        return;
    };
    assert_eq!(code, 0, "{out}");
    let trials = if network { 66 } else { 62 };
    assert!(
        out.contains(&format!("total: {trials} trial(s), 0 violation(s)")),
        "{out}"
    );
    for model in ["immediate", "kill", "kill-frozen"] {
        assert!(out.contains(&format!("db-crash:{model}@")), "{out}");
    }
    // Every session is finished after each crash: 3 effects per session.
    for line in out.lines().filter(|l| l.contains("db-crash:")) {
        assert!(line.contains("6 effect(s) applied"), "{line}\n{out}");
    }
    assert!(out.contains("0 violation(s), 0 not exercised"), "{out}");
    // The statement strikes name the statements they hit, by SQL text:
    // the sample's sixteen land before or after five of them, the takeover
    // kills before its COMMIT and its paged read, its connection faults and
    // the close's at their COMMIT, its pause before its log read.
    let coverage = out
        .lines()
        .find(|l| l.starts_with("statement coverage: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        coverage.starts_with("statement coverage: 5 of the "),
        "{coverage}"
    );
    let begin = out
        .lines()
        .find(|l| l.ends_with("  START TRANSACTION"))
        .unwrap_or_else(|| panic!("{out}"));
    let counts: Vec<usize> = begin
        .split_whitespace()
        .take(3)
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(
        counts[0] >= 1 && counts[1] >= 1 && counts[2] > counts[0] + counts[1],
        "BEGIN struck before and after its reply, and run more often: {begin}"
    );
    // The heir killed in its takeover leaves the session to the next
    // worker, which finishes it.
    for plan in ["kill@3.1+kill@take.10 ", "kill@3.1+kill@take.11 "] {
        let line = out.lines().find(|l| l.starts_with(plan)).unwrap();
        assert!(
            line.contains("2 takeover(s), 0 write(s) fenced, 6 effect(s) applied, 0 violation(s), strikes fired 2/2"),
            "{out}"
        );
    }
    // A statement pause's zombie is fenced: its statement reached the
    // server after the newer grant and committed nothing.
    let line = out.lines().find(|l| l.starts_with("pause@3.1 ")).unwrap();
    assert!(line.contains("1 takeover(s), 1 write(s) fenced"), "{out}");
    // A connection closed under the owner (the worker alive) is not the
    // end of its lease: the store reconnects under the same epoch and asks
    // the server what became of the transaction. Reset inside the effect
    // commit's transaction, it was rolled back and runs again; its reply
    // lost after the server took its `COMMIT`, it committed and is
    // acknowledged once. Neither is a takeover. Held inside its
    // transaction once the row is locked, the owner makes the heir's
    // takeover wait, so it is let go first and its next write is fenced.
    // The same holds for the heir's takeover: reset before its `COMMIT`
    // or its answer lost, the store asks the server and grants it once.
    let report = std::fs::read_to_string(&json).unwrap();
    for (plan, outcome, hit) in [
        (
            "reset@4.3",
            "0 takeover(s), 0 write(s) fenced, 6 effect(s) applied, 0 violation(s)",
            "w0 before statement 3 of its request 4 of s0; the store reconnected and answered the request",
        ),
        (
            "cut@4.7",
            "0 takeover(s), 0 write(s) fenced, 6 effect(s) applied, 0 violation(s)",
            "w0 before statement 7 of its request 4 of s0; the store reconnected and answered the request",
        ),
        (
            "pause@4.3",
            "1 takeover(s), 1 write(s) fenced, 6 effect(s) applied, 0 violation(s)",
            "held w0 before statement 3 of its request 4 of s0, inside its transaction; w1's takeover waited for its locks, so it was let go first",
        ),
        (
            "kill@3.1+reset@take.10",
            "1 takeover(s), 0 write(s) fenced, 6 effect(s) applied, 0 violation(s), strikes fired 2/2",
            "reset the connection of w1 before statement 10 of its takeover of s0; the store reconnected and granted it",
        ),
        (
            "kill@3.1+cut@take.10",
            "1 takeover(s), 0 write(s) fenced, 6 effect(s) applied, 0 violation(s), strikes fired 2/2",
            "sent and lost the server's answer, then reset the connection, of w1 before statement 10 of its takeover of s0; the store reconnected and granted it",
        ),
        (
            "kill@3.1+pause@take.6",
            "2 takeover(s), 1 write(s) fenced, 6 effect(s) applied, 0 violation(s), strikes fired 2/2",
            "held w1 before statement 6 of its takeover of s0, inside its transaction; w2's takeover waited for its locks, so it was let go first, then w2 took the session over",
        ),
        (
            "leave@3+reset@close.5",
            "1 takeover(s), 0 write(s) fenced, 6 effect(s) applied, 0 violation(s), strikes fired 2/2",
            "reset the connection of w0 before statement 5 of its close; the store closed",
        ),
        (
            "leave@3+cut@close.5",
            "1 takeover(s), 0 write(s) fenced, 6 effect(s) applied, 0 violation(s), strikes fired 2/2",
            "sent and lost the server's answer, then reset the connection, of w0 before statement 5 of its close; the store closed",
        ),
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{plan} ")))
            .unwrap();
        assert!(line.contains(outcome), "{line}");
        assert!(report.contains(hit), "{plan}: {report}");
    }
    if network {
        assert!(
            out.contains("strikes fired/planned: close-connection-reset 1/1 · close-lost-reply 1/1 · connection-drop 2/2 · connection-reset 2/2 · db-crash 6/6 · kill 21/21 · leave 2/2 · lost-reply 1/1 · partition 4/4 · pause 21/21 · restart 2/2 · statement-kill 6/6 · statement-pause 3/3 · takeover-connection-reset 1/1 · takeover-lost-reply 1/1 · takeover-statement-kill 2/2 · takeover-statement-pause 1/1"),
            "{out}"
        );
        let line = out.lines().find(|l| l.starts_with("partition@4")).unwrap();
        assert!(line.contains("1 takeover(s), 1 write(s) fenced"), "{out}");
    } else {
        assert!(out.contains("partition strikes left out"), "{out}");
    }
}

/// Two of the store's lease faults fail the campaign with a replay
/// command. (`no-epoch-check` survives `pause@4` here, where agentstore's
/// is caught: the zombie's commit is refused by the rules anyway, since
/// every write folds the heir's events under the row lock first and the
/// heir finished the call; `pause@3`, a renewal and an effect commit of
/// the zombie's, catches it.)
#[test]
fn the_many_workers_campaign_catches_lease_faults() {
    for (fault, plan, invariant) in [
        ("no-epoch-check", "pause@3", "fenced-epoch-refused"),
        (
            "takeover-without-recovery",
            "kill@3",
            "takeover-marks-orphans",
        ),
    ] {
        if pg_caught(fault, plan, invariant).is_none() {
            return;
        }
    }
}

/// A statement strike: the owner is held right before the first
/// statement of its renewal before an effect (`pause@3.1`, inside the
/// request) while the other worker takes the session over; let go, the
/// renewal runs against the heir's epoch. The unmodified store fences it
/// (the statement sent after the newer grant commits nothing: the
/// campaign test checks the count); without the epoch check it is renewed
/// and the zombie applies its effect again.
#[test]
fn a_statement_pause_catches_a_write_without_an_epoch_check() {
    let Some(out) = pg_caught("no-epoch-check", "pause@3.1", "fenced-epoch-refused") else {
        return;
    };
    assert!(
        out.contains("VIOLATION effect-once-across-workers "),
        "{out}"
    );
    assert!(
        out.contains("strikes fired/planned: statement-pause 1/1"),
        "{out}"
    );
}

/// A round trip dropped while its transaction holds locks is reported
/// not exercised, never passed: a takeover would wait for those locks.
/// (The other connection strikes are the campaign test's.)
#[test]
fn a_dropped_round_trip_inside_a_locked_transaction_is_not_exercised() {
    let Some((code, out)) = workers_pg(&["--plan", "drop@4.3"]) else {
        return;
    };
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("NOT EXERCISED drop@4.3: drop@4.3 never fired: w0 before statement 3 of its request 4 of s0: its transaction holds locks"), "{out}");
}

/// `kill@take.S` kills the heir of a statement kill before the S-th
/// statement of its takeover, named by its SQL text, and the next worker
/// finishes the session; a takeover of fewer statements leaves the strike
/// not exercised, with the count it sent.
#[test]
fn a_kill_inside_the_heirs_takeover_lands_before_its_statement_or_is_not_exercised() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let Some((code, out)) = workers_pg(&[
        "--plan",
        "kill@3.1+kill@take.7",
        "--json",
        json.to_str().unwrap(),
    ]) else {
        return;
    };
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("strikes fired 2/2"), "{out}");
    let report = std::fs::read_to_string(&json).unwrap();
    assert!(
        report.contains(
            "killed w1 at statement 7 of its takeover of s0 (INSERT INTO agentstore.events "
        ),
        "{report}"
    );
    let (code, out) = workers_pg(&["--plan", "kill@3.1+kill@take.12"]).unwrap();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(
            "kill@take.12 never fired: w1's takeover of s0 passed 11 statement(s), none the 12-th"
        ),
        "{out}"
    );
}

/// An asynchronous commit loses what the store acknowledged when the
/// server crashes with its WAL writer frozen: the workers' acknowledged
/// events are missing from the log after the restart.
#[test]
fn asynchronous_commit_is_caught_by_acked_survive_takeover_under_a_db_crash() {
    let Some(out) = pg_caught(
        "synchronous-commit-off",
        "db-crash:kill-frozen@4",
        "acked-survive-takeover",
    ) else {
        return;
    };
    assert!(
        out.contains("expected: run_started at seq 1, acknowledged to w0 at epoch 1"),
        "{out}"
    );
    assert!(
        out.contains("event:    the database server crashed (kill-frozen) and restarted"),
        "{out}"
    );
}

/// The partition strike: the owner cut off from the database (its own
/// link; the other worker keeps its own) sends its next write, a renewal
/// before its effect, which stays in flight while another worker takes
/// the session over once the lease lapsed by the database's clock; after
/// the heal its old connection delivers it: the clean store refuses it
/// (fenced), a store without the epoch check renews the zombie's lease,
/// and the zombie applies its effect.
#[test]
fn a_partitioned_owner_without_an_epoch_check_is_caught() {
    if !partitions_here() {
        eprintln!("skipped: no network namespaces here");
        return;
    }
    if let Some(out) = pg_caught("no-epoch-check", "partition@3", "fenced-epoch-refused") {
        assert!(
            out.contains("found:    the store renewed its lease, and the worker applied op-s0-0 (sent while its link was cut, before the takeover) for w0 at epoch 1"),
            "{out}"
        );
    }
}

/// Starts run `r1` and its side-effecting call `c1` (operation `op-c1`) up
/// to its intent: the orphan a takeover must mark.
fn start_side_effect(client: &mut Client) {
    client
        .append(&Event::RunStarted {
            run_id: "r1".into(),
        })
        .unwrap();
    client
        .append(&Event::ToolCall {
            parent: None,
            call_id: "c1".into(),
            tool: "deploy".into(),
            args: serde_json::json!({"v": 2}),
            effect: Effect::SideEffect,
            operation_id: Some("op-c1".into()),
            target: Some("prod".into()),
            needs_approval: false,
        })
        .unwrap();
    client.start_tool("c1").unwrap();
}

/// The pids and start times of `pid`'s descendants (from /proc).
fn descendants_of(pid: u32) -> Vec<(u32, String, String)> {
    let stat = |p: &str| -> Option<(u32, u32, String, String)> {
        let text = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
        let cmd = std::fs::read(format!("/proc/{p}/cmdline")).ok()?;
        Some((
            p.parse().ok()?,
            fields.get(1)?.parse().ok()?,
            fields.get(19)?.to_string(),
            String::from_utf8_lossy(&cmd).replace('\0', " "),
        ))
    };
    let all: Vec<_> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| stat(&e.file_name().to_string_lossy()))
        .collect();
    let mut out = Vec::new();
    let mut next = vec![pid];
    while let Some(parent) = next.pop() {
        for (p, _, start, cmd) in all.iter().filter(|(_, pp, _, _)| *pp == parent) {
            next.push(*p);
            out.push((*p, start.clone(), cmd.clone()));
        }
    }
    out
}

#[test]
fn sigint_stops_db_crash_and_its_server() {
    if !postgres_installed() {
        return;
    }
    let adapter = format!(
        "{} adapter",
        support::workspace_bin("agentstore-pg").display()
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .args(["db-crash", "--adapter", &adapter])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The server runs: a postgres -D child of the harness.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let before = loop {
        let d = descendants_of(child.id());
        if d.iter().any(|(_, _, cmd)| cmd.contains("postgres -D")) {
            break d;
        }
        assert!(child.try_wait().unwrap().is_none(), "db-crash ended first");
        assert!(std::time::Instant::now() < deadline, "no server");
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let sent = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        // Removing the cluster's data directory takes its time on a busy machine.
        assert!(
            sent.elapsed().as_secs() < 20,
            "still running 20 s after SIGINT"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    eprintln!(
        "db-crash stopped {} ms after SIGINT",
        sent.elapsed().as_millis()
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.starts_with("agentchaos: interrupted by SIGINT"),
        "{stderr}"
    );
    for (pid, start, cmd) in before {
        let same = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|t| {
            let f: Vec<&str> = t[t.rfind(')').unwrap() + 1..].split_whitespace().collect();
            f[0] != "Z" && f[19] == start
        });
        assert!(!same, "{pid} ({cmd}) still runs");
    }
}
