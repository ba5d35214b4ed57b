//! The private cluster: it starts, survives an immediate stop and a SIGKILL
//! of every server process with its committed rows, and the store on it
//! keeps agentstore's rules with the ledger as a unique constraint.

use agentchaos_protocol::event::{Effect, Event, Phase};
use agentchaos_protocol::message::LeaseRequest;
use agentstore_pg::cluster::{self, Cluster, ClusterError, ClusterOptions};
use agentstore_pg::{PgStore, StoreError};

/// A started cluster, or `None` (a skip) when PostgreSQL is not installed
/// on a dev machine; under `CI=true` a missing PostgreSQL fails.
fn cluster() -> Option<Cluster> {
    match Cluster::start(ClusterOptions::default()) {
        Ok(c) => Some(c),
        Err(e @ ClusterError::NotInstalled) if !cluster::required() => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("cannot start a private PostgreSQL cluster: {e}"),
    }
}

fn count(c: &Cluster) -> i64 {
    let mut client = postgres::Client::connect(&c.dsn(), postgres::NoTls).expect("connect");
    client
        .query_one("SELECT count(*) FROM t", &[])
        .expect("count")
        .get(0)
}

#[test]
fn committed_rows_survive_an_immediate_stop_and_a_sigkill_of_the_server() {
    let Some(mut c) = cluster() else { return };
    let mut client = postgres::Client::connect(&c.dsn(), postgres::NoTls).expect("connect");
    client
        .batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        .expect("write");
    drop(client);
    c.stop_immediate().expect("stop -m immediate");
    assert!(c.pid().is_none());
    c.restart().expect("restart after an immediate stop");
    assert_eq!(count(&c), 1);
    c.kill().expect("SIGKILL");
    c.restart().expect("restart after SIGKILL");
    assert_eq!(count(&c), 1);
    let log = std::fs::read_to_string(c.log_path()).expect("server log");
    assert!(
        log.contains("database system was interrupted"),
        "no crash recovery in the server log:\n{log}"
    );
}

#[test]
fn the_cluster_listens_only_on_its_own_socket() {
    let Some(c) = cluster() else { return };
    assert!(c.dsn().contains(&c.socket_dir().display().to_string()));
    assert!(c.socket_dir().join(".s.PGSQL.5432").exists());
    let mut client = postgres::Client::connect(&c.dsn(), postgres::NoTls).expect("connect");
    let row = client
        .query_one(
            "SELECT current_setting('listen_addresses'), current_setting('fsync'), current_setting('synchronous_commit')",
            &[],
        )
        .expect("settings");
    let (listen, fsync, sync): (String, String, String) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (listen.as_str(), fsync.as_str(), sync.as_str()),
        ("", "on", "on")
    );
}

fn call(call_id: &str, op: &str) -> Event {
    Event::ToolCall {
        parent: None,
        call_id: call_id.into(),
        tool: "deploy".into(),
        args: serde_json::json!({"v": 2}),
        effect: Effect::SideEffect,
        operation_id: Some(op.into()),
        target: Some("prod".into()),
        needs_approval: false,
    }
}

fn commit(call_id: &str, op: &str) -> Event {
    Event::EffectCommitted {
        call_id: call_id.into(),
        operation_id: op.into(),
        external_ref: format!("ref-{call_id}"),
    }
}

#[test]
fn the_ledger_constraint_refuses_a_second_commit_and_recovery_marks_orphans_once() {
    let Some(c) = cluster() else { return };
    let ws = tempfile::tempdir().expect("workspace");
    let root = ws.path().join("root");
    let (mut s, _) = PgStore::create(&c.dsn(), &root, "s1", ws.path(), None).expect("create");
    s.append(&Event::RunStarted {
        run_id: "r1".into(),
    })
    .expect("run");
    assert_eq!(s.append(&call("c1", "op-1")).expect("call c1"), 2);
    s.append(&call("c2", "op-1"))
        .expect("call c2, same operation");
    s.start_tool("c1").expect("start c1");
    s.start_tool("c2").expect("start c2");
    s.append(&commit("c1", "op-1")).expect("first commit");
    match s.append(&commit("c2", "op-1")) {
        Err(StoreError::Rule(m)) => assert!(m.contains("23505"), "{m}"),
        other => panic!("a second commit of op-1 was not refused by the ledger: {other:?}"),
    }
    assert_eq!(
        s.projection().next_seq(),
        7,
        "the refused commit left nothing"
    );
    drop(s);

    let (mut s, _) = PgStore::open(&c.dsn(), &root, "s1", None, None).expect("reopen");
    let r = s.recover().expect("recover");
    assert_eq!(r.interrupted_runs, vec!["r1".to_string()]);
    let phases: Vec<(String, Phase)> = r
        .uncertain
        .iter()
        .map(|u| (u.call_id.clone(), u.phase))
        .collect();
    assert_eq!(
        phases,
        vec![
            ("c1".to_string(), Phase::Committed),
            ("c2".to_string(), Phase::Started)
        ]
    );
    assert_eq!(r.appended, 3);
    assert_eq!(s.recover().expect("second recover").appended, 0);
    assert!(matches!(
        PgStore::create(&c.dsn(), &root, "s1", ws.path(), None),
        Err(StoreError::Exists(_))
    ));
    assert!(matches!(
        PgStore::open(&c.dsn(), &ws.path().join("other-root"), "s1", None, None),
        Err(StoreError::NotFound(_))
    ));
}

fn lease(worker: &str, ttl_ms: u64) -> LeaseRequest {
    LeaseRequest {
        worker_id: worker.into(),
        ttl_ms,
    }
}

/// A lease of ttl 0 has expired by the time anyone else asks (the
/// database's clock does not run back), so a takeover needs no waiting.
#[test]
fn a_takeover_after_expiry_fences_the_old_owner_and_marks_its_orphans() {
    let Some(c) = cluster() else { return };
    let ws = tempfile::tempdir().expect("workspace");
    let root = ws.path().join("root");
    let (mut a, t) = PgStore::create(&c.dsn(), &root, "s", ws.path(), Some(&lease("a", 0)))
        .expect("create with a lease");
    assert_eq!(t.expect("a grant").grant.epoch, 1);
    a.append(&Event::RunStarted {
        run_id: "r1".into(),
    })
    .expect("a lapsed lease not taken over still writes");
    a.append(&call("c1", "op-1")).expect("call");
    a.start_tool("c1").expect("intent");

    let (mut b, t) = PgStore::open(&c.dsn(), &root, "s", None, Some(&lease("b", 600_000)))
        .expect("take over an expired lease");
    let t = t.expect("a grant");
    assert_eq!((t.grant.worker_id.as_str(), t.grant.epoch), ("b", 2));
    assert_eq!(t.recovery.interrupted_runs, vec!["r1".to_string()]);
    assert_eq!(t.recovery.uncertain.len(), 1);
    assert_eq!(t.recovery.uncertain[0].phase, Phase::Started);
    assert_eq!(t.recovery.appended, 2);

    let before = b.projection().next_seq();
    for (what, refused) in [
        ("append", a.append(&commit("c1", "op-1")).err()),
        ("renew", a.renew_lease().err()),
        ("recover", a.recover().err()),
    ] {
        assert!(
            matches!(refused, Some(StoreError::Fenced(_))),
            "the zombie's {what} was not fenced: {refused:?}"
        );
    }
    a.release_lease()
        .expect("a fenced owner has nothing to release");
    b.refresh().expect("refresh");
    assert_eq!(b.projection().next_seq(), before, "nothing of the zombie's");

    for l in [Some(lease("c", 1_000)), None] {
        assert!(matches!(
            PgStore::open(&c.dsn(), &root, "s", None, l.as_ref()),
            Err(StoreError::LeaseHeld(_))
        ));
    }
    b.renew_lease().expect("the owner renews");
    b.release_lease().expect("release");
    let (_, t) = PgStore::open(&c.dsn(), &root, "s", None, Some(&lease("c", 1_000)))
        .expect("a released lease is taken over at once");
    assert_eq!(t.expect("a grant").grant.epoch, 3);
}

/// A worker holding one session's row inside its transaction (as every
/// write does, `FOR UPDATE`) must not delay another worker's open of
/// another session: connecting reads the catalog and changes no table when
/// the tables are complete. The second open runs with a `lock_timeout`, so
/// a connect that asked for a table lock fails at once instead of hanging.
#[test]
fn opening_a_session_waits_for_no_other_sessions_transaction() {
    let Some(c) = cluster() else { return };
    let ws = tempfile::tempdir().expect("workspace");
    let root = ws.path().join("root");
    for session in ["busy", "other"] {
        PgStore::create(&c.dsn(), &root, session, ws.path(), None).expect("create");
    }
    let mut holder = postgres::Client::connect(&c.dsn(), postgres::NoTls).expect("connect");
    let mut tx = holder.transaction().expect("begin");
    let held = tx
        .query(
            "SELECT key FROM agentstore.sessions WHERE session = 'busy' FOR UPDATE",
            &[],
        )
        .expect("lock the busy session's row");
    assert_eq!(held.len(), 1);

    let impatient = format!("{} options='-c lock_timeout=2000'", c.dsn());
    let (mut s, _) = PgStore::open(&impatient, &root, "other", None, None)
        .expect("open beside a transaction holding another session's row");
    s.append(&Event::RunStarted {
        run_id: "r1".into(),
    })
    .expect("append beside it");
    tx.rollback().expect("rollback");
}

/// A store whose connection the server ended (`pg_terminate_backend`)
/// reconnects at its next write, under the same lease and epoch: the
/// write is acknowledged once, and a renewal keeps the epoch. The
/// reconnect is not a new owner: once another worker took the session
/// over, the reconnected store's writes are fenced.
#[test]
fn a_store_whose_connection_died_reconnects_under_the_same_epoch() {
    let Some(c) = cluster() else { return };
    let ws = tempfile::tempdir().expect("workspace");
    let root = ws.path().join("root");
    let (mut a, t) = PgStore::create(&c.dsn(), &root, "s", ws.path(), Some(&lease("a", 0)))
        .expect("create with a lease");
    assert_eq!(t.expect("a grant").grant.epoch, 1);
    let mut admin = postgres::Client::connect(&c.dsn(), postgres::NoTls).expect("connect");
    let terminate_others = |admin: &mut postgres::Client| {
        admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                &[],
            )
            .expect("terminate the store's backend")
    };
    assert_eq!(terminate_others(&mut admin), 1);
    let seq = a
        .append(&Event::RunStarted {
            run_id: "r1".into(),
        })
        .expect("the write reconnects");
    assert_eq!(seq, 1);
    assert_eq!(a.renew_lease().expect("renew").epoch, 1);
    let (_, t) = PgStore::open(&c.dsn(), &root, "s", None, Some(&lease("b", 600_000)))
        .expect("take over the lapsed lease");
    assert_eq!(t.expect("a grant").grant.epoch, 2);
    terminate_others(&mut admin);
    assert!(
        matches!(
            a.append(&Event::RunStarted {
                run_id: "r2".into()
            }),
            Err(StoreError::Fenced(_))
        ),
        "a reconnect is not a new owner"
    );
}
