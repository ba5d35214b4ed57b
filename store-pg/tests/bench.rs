//! `agentstore-pg bench` at its smallest setting: the report has every
//! configuration and takeover row, its JSON parses, its numbers are
//! positive (never its timings); on a server given by `--dsn` it leaves
//! no row and no table behind; bad arguments are usage errors.

use std::path::Path;
use std::process::{Command, Output};

use agentstore_pg::bench::{
    ConnectionState, Report, TakeoverStore, Target, CONNECTION_ROUNDS, SESSIONS, TAKEOVER_ROUNDS,
};
use agentstore_pg::cluster::{self, Cluster, ClusterOptions};

const BIN: &str = env!("CARGO_BIN_EXE_agentstore-pg");

/// Whether PostgreSQL is missing on a dev machine (a skip); under
/// `CI=true` the bench itself then fails and so does the test.
fn skip() -> bool {
    if cluster::find_bindir().is_none() && !cluster::required() {
        eprintln!("skipped: PostgreSQL is not installed");
        return true;
    }
    false
}

/// Runs the smallest bench (0.1 s per configuration, one history length,
/// a 50 ms lease) with `extra` arguments; the report it wrote and its text.
fn bench(dir: &Path, extra: &[&str]) -> (Report, String) {
    let json = dir.join("report.json");
    let out = Command::new(BIN)
        .args([
            "bench",
            "--seconds",
            "0.1",
            "--lengths",
            "10",
            "--ttl-ms",
            "50",
        ])
        .arg("--dir")
        .arg(dir)
        .arg("--json")
        .arg(&json)
        .args(extra)
        .output()
        .expect("run agentstore-pg bench");
    assert!(
        out.status.success(),
        "agentstore-pg bench failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json).expect("the --json report");
    let report: Report = serde_json::from_str(&text).expect("the report parses");
    (report, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn check_shape(report: &Report, text: &str) {
    let expected: Vec<(Target, usize)> = Target::ALL
        .iter()
        .flat_map(|&t| SESSIONS.iter().map(move |&n| (t, n)))
        .collect();
    let found: Vec<(Target, usize)> = report
        .appends
        .iter()
        .map(|r| (r.target, r.sessions))
        .collect();
    assert_eq!(found, expected, "every configuration once, in order");
    for r in &report.appends {
        let what = format!("{} x{}", r.target.name(), r.sessions);
        assert!(r.events >= r.sessions as u64, "{what}: {} events", r.events);
        for (name, v) in [
            ("seconds", r.seconds),
            ("events/s", r.events_per_s),
            ("p50", r.p50_us),
            ("p99", r.p99_us),
            ("events/s ratio", r.ratio.events_per_s),
            ("p50 ratio", r.ratio.p50),
            ("p99 ratio", r.ratio.p99),
        ] {
            assert!(v.is_finite() && v > 0.0, "{what}: {name} is {v}");
        }
        assert!(r.p99_us >= r.p50_us, "{what}: p99 below p50");
        // CPU is counted in clock ticks: a tiny run may see none.
        assert!(
            r.client_cpu_us_per_event.is_finite() && r.client_cpu_us_per_event >= 0.0,
            "{what}: client CPU {}",
            r.client_cpu_us_per_event
        );
        assert_eq!(
            r.server_cpu_us_per_event.is_some(),
            report.server == "private cluster",
            "{what}: the server's CPU is known on a private cluster only"
        );
        assert!(text.contains(r.target.name()), "{what} missing in:\n{text}");
    }
    let base = report
        .appends
        .iter()
        .find(|r| r.target == Target::AgentstoreSync && r.sessions == 1)
        .expect("the baseline row");
    assert_eq!(
        (base.ratio.events_per_s, base.ratio.p50, base.ratio.p99),
        (1.0, 1.0, 1.0),
        "the baseline is agentstore Sync with one session"
    );
    let stores: Vec<(TakeoverStore, u64)> = report
        .takeover
        .rows
        .iter()
        .map(|r| (r.store, r.history_events))
        .collect();
    assert_eq!(
        stores,
        vec![
            (TakeoverStore::Postgres, 10),
            (TakeoverStore::AgentstoreSync, 10)
        ]
    );
    assert_eq!(
        (report.takeover.ttl_ms, report.takeover.rounds),
        (50, TAKEOVER_ROUNDS)
    );
    for r in &report.takeover.rows {
        let what = r.store.name();
        assert_eq!(
            r.recovery_marks, 2,
            "{what}: run_interrupted and tool_recovery"
        );
        assert_eq!(
            r.session_events,
            1 + 10 + 3,
            "{what}: created, history, the dying run"
        );
        for (name, v) in [
            ("lease wait", r.lease_wait_ms),
            ("open and recovery", r.open_and_recovery_ms),
            ("first append", r.first_append_ms),
            ("recovery", r.recovery_ms),
            ("total", r.total_ms),
        ] {
            assert!(v.is_finite() && v > 0.0, "{what}: {name} is {v}");
        }
    }
    let states: Vec<ConnectionState> = report
        .connection
        .rows
        .iter()
        .map(|r| r.connection)
        .collect();
    // The relay's faults need the private cluster's socket.
    let expected: Vec<ConnectionState> = match report.server.as_str() {
        "private cluster" => ConnectionState::ALL.to_vec(),
        _ => vec![ConnectionState::Alive, ConnectionState::EndedByServer],
    };
    assert_eq!(states, expected);
    assert_eq!(report.connection.rounds, CONNECTION_ROUNDS);
    for r in &report.connection.rows {
        let what = r.connection.name();
        // A fault at the COMMIT never lands on a write refused before it;
        // none is left for the server to end before a takeover's own
        // new connection.
        let at_commit = matches!(
            r.connection,
            ConnectionState::ResetBeforeCommit | ConnectionState::CommitAnswerLost
        );
        assert_eq!(r.fenced.is_none(), at_commit, "{what}");
        assert_eq!(
            r.takeover.is_none(),
            r.connection == ConnectionState::EndedByServer,
            "{what}"
        );
        for (name, t) in [
            ("append", Some(r.append)),
            ("fenced", r.fenced),
            ("takeover", r.takeover),
        ] {
            let Some(t) = t else { continue };
            let (p50, max) = (t.p50_ms, t.max_ms);
            assert!(p50.is_finite() && p50 > 0.0, "{what}: {name} p50 is {p50}");
            assert!(max >= p50, "{what}: {name} max {max} below its p50 {p50}");
        }
        assert!(text.contains(what), "{what} missing in:\n{text}");
    }
    assert!(report.postgres_version.starts_with("PostgreSQL"));
    assert!(report.event_json_bytes == 200 && report.agentstore_line_bytes > 200);
}

#[test]
fn pgbench_the_smallest_run_reports_every_configuration() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("scratch");
    let (report, text) = bench(dir.path(), &[]);
    check_shape(&report, &text);
    assert_eq!(report.server, "private cluster");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec!["report.json"],
        "the scratch directory was removed"
    );
}

#[test]
fn pgbench_on_a_given_server_leaves_no_row_and_no_table() {
    if skip() {
        return;
    }
    let c = Cluster::start(ClusterOptions {
        settings: vec![("max_connections".into(), "200".into())],
        ..ClusterOptions::default()
    })
    .expect("a private cluster");
    let dir = tempfile::tempdir().expect("scratch");
    let (report, text) = bench(dir.path(), &["--dsn", &c.dsn()]);
    check_shape(&report, &text);
    assert_eq!(report.server, "given DSN");
    let mut client = postgres::Client::connect(&c.dsn(), postgres::NoTls).expect("connect");
    let count = |client: &mut postgres::Client, sql: &str| -> i64 {
        client.query_one(sql, &[]).expect(sql).get(0)
    };
    assert_eq!(
        count(&mut client, "SELECT count(*) FROM agentstore.sessions"),
        0
    );
    assert_eq!(
        count(&mut client, "SELECT count(*) FROM agentstore.events"),
        0
    );
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'bench_floor%'"
        ),
        0
    );
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run agentstore-pg")
}

#[test]
fn pgbench_bad_arguments_are_one_line_usage_errors() {
    for (args, names) in [
        (&["bench", "--seconds", "soon"][..], "--seconds \"soon\""),
        (&["bench", "--seconds", "0"], "--seconds \"0\""),
        (&["bench", "--lengths", "10,x"], "--lengths \"10,x\""),
        (&["bench", "--ttl-ms", "0"], "--ttl-ms \"0\""),
        (
            &["bench", "--dir", "/nonexistent/dir"],
            "--dir /nonexistent/dir",
        ),
        (
            &["bench", "--json", "/nonexistent/dir/r.json"],
            "--json /nonexistent/dir/r.json",
        ),
        (&["bench", "--frobnicate"], "\"--frobnicate\""),
        (
            &["bench-holder", "postgres"],
            "bench-holder takes STORE DSN ROOT SESSION TTL_MS",
        ),
        (
            &["bench-holder", "sqlite", "dsn", "/r", "s", "50"],
            "unknown store \"sqlite\"",
        ),
        (
            &["bench-holder", "postgres", "dsn", "/r", "s", "soon"],
            "TTL_MS \"soon\"",
        ),
    ] {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(names), "{args:?} not named in: {err}");
    }
}

#[test]
fn pgbench_an_unreachable_server_fails_the_harness_in_one_line() {
    let dir = tempfile::tempdir().expect("scratch");
    let dsn = format!(
        "host={} port=5432 user=nobody dbname=none",
        dir.path().display()
    );
    let out = run(&["bench", "--seconds", "0.1", "--dsn", &dsn]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("connect"), "{err}");
}
