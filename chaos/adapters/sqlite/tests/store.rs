//! The SQLite store through its library API: what the protocol tests do not
//! reach (half-created databases, workspace binding, budgets, checkpoints).

use std::path::{Path, PathBuf};

use agentchaos_protocol::event::{Effect, Event};
use agentchaos_sqlite_store::store::db_path;
use agentchaos_sqlite_store::{view, SqliteStore, StoreError};
use serde_json::json;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    workspace: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    Fixture {
        root: dir.path().join("nested").join("root"),
        workspace,
        _dir: dir,
    }
}

fn call(parent: Option<&str>, call_id: &str) -> Event {
    Event::ToolCall {
        parent: parent.map(String::from),
        call_id: call_id.into(),
        tool: "deploy".into(),
        args: json!({}),
        effect: Effect::SideEffect,
        operation_id: Some(format!("op-{call_id}")),
        target: None,
        needs_approval: false,
    }
}

#[test]
fn a_creation_that_never_committed_is_not_a_session() {
    let f = fixture();
    std::fs::create_dir_all(&f.root).unwrap();
    // What a crash between creating the file and the first commit leaves.
    let path = db_path(&f.root, "s").unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA journal_mode=WAL;")
        .unwrap();
    assert!(matches!(
        SqliteStore::open(&f.root, "s", None),
        Err(StoreError::NotFound(_))
    ));
    let store = SqliteStore::create(&f.root, "s", &f.workspace).unwrap();
    assert_eq!(view::next_seq(store.conn()).unwrap(), 1);
    drop(store);
    assert!(matches!(
        SqliteStore::create(&f.root, "s", &f.workspace),
        Err(StoreError::Exists(_))
    ));
}

#[test]
fn a_moved_workspace_is_refused_until_rebound() {
    let f = fixture();
    drop(SqliteStore::create(&f.root, "s", &f.workspace).unwrap());
    let moved = f.workspace.with_file_name("ws-moved");
    std::fs::rename(&f.workspace, &moved).unwrap();
    let err = SqliteStore::open(&f.root, "s", None).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the workspace of session \"s\" has moved: {} no longer exists; open it with the new workspace",
            f.workspace.display()
        )
    );
    let store = SqliteStore::open(&f.root, "s", Some(&moved)).unwrap();
    let events = store.events(Some(0), None).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event["type"], "workspace_rebound");
    assert_eq!(events[0].event["to"], moved.to_str().unwrap());
    drop(store);
    // Rebound durably: opening without a workspace works now.
    SqliteStore::open(&f.root, "s", None).unwrap();
}

#[test]
fn the_recovery_notice_survives_any_budget() {
    let f = fixture();
    let mut store = SqliteStore::create(&f.root, "s", &f.workspace).unwrap();
    let mut parent = None;
    for i in 0..20 {
        let seq = store
            .append(&Event::UserMessage {
                parent: parent.clone(),
                text: format!("message number {i} with some words in it"),
            })
            .unwrap();
        parent = Some(format!("e{seq}"));
    }
    store.append(&call(parent.as_deref(), "c1")).unwrap();
    store.start_tool("c1").unwrap();
    drop(store);
    let mut store = SqliteStore::open(&f.root, "s", None).unwrap();
    assert_eq!(store.recover().unwrap().appended, 1);
    let full = view::context(store.conn(), None).unwrap();
    let tight = view::context(store.conn(), Some(10)).unwrap();
    assert!(tight.len() < full.len());
    assert!(tight.contains("earlier entries left out to fit the budget"));
    let notice = view::recovery_notice(store.conn()).unwrap();
    assert!(notice.contains("call c1 (deploy, operation op-c1) is uncertain, phase started"));
    assert!(tight.ends_with(&notice), "{tight}");
}

#[test]
fn a_checkpoint_empties_the_wal_and_loses_nothing() {
    let f = fixture();
    let mut store = SqliteStore::create(&f.root, "s", &f.workspace).unwrap();
    for i in 0..10 {
        store
            .append(&Event::RunStarted {
                run_id: format!("r{i}"),
            })
            .unwrap();
        store
            .append(&Event::RunInterrupted {
                run_id: format!("r{i}"),
            })
            .unwrap();
    }
    let wal = |root: &Path| std::fs::metadata(root.join("s.sqlite-wal")).map(|m| m.len());
    assert!(wal(&f.root).unwrap() > 0);
    assert_eq!(store.checkpoint().unwrap(), 21);
    assert_eq!(wal(&f.root).unwrap(), 0);
    drop(store);
    let store = SqliteStore::open(&f.root, "s", None).unwrap();
    assert_eq!(store.events(None, None).unwrap().len(), 21);
    assert_eq!(view::interrupted_runs(store.conn()).unwrap(), ["r9"]);
}

#[test]
fn a_second_commit_is_refused_by_the_ledger_itself() {
    let f = fixture();
    let mut store = SqliteStore::create(&f.root, "s", &f.workspace).unwrap();
    store.append(&call(None, "c1")).unwrap();
    store.start_tool("c1").unwrap();
    let commit = Event::EffectCommitted {
        call_id: "c1".into(),
        operation_id: "op-c1".into(),
        external_ref: "x".into(),
    };
    store.append(&commit).unwrap();
    // Even past the rule check, the UNIQUE constraint refuses it.
    let err = store
        .conn()
        .execute(
            "INSERT INTO effects (operation_id, call_seq, external_ref, seq) VALUES ('op-c1', 1, 'y', 99)",
            [],
        )
        .map_err(StoreError::sqlite("insert"))
        .unwrap_err();
    assert!(matches!(err, StoreError::Rule(_)), "{err}");
    assert!(matches!(store.append(&commit), Err(StoreError::Rule(_))));
    assert_eq!(view::next_seq(store.conn()).unwrap(), 4);
}
