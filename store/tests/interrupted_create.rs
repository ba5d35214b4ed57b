//! A crash inside `Session::create` must leave a session that can be
//! opened and finished, not one that can neither be opened nor created.

use agentstore::event::Event;
use agentstore::{Session, SessionId, SessionOptions, SessionPaths};

fn setup() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    SessionId,
) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    (dir, root, ws, SessionId::new("s").unwrap())
}

fn with_workspace(ws: &std::path::Path) -> SessionOptions {
    SessionOptions {
        workspace: Some(ws.to_path_buf()),
        ..SessionOptions::default()
    }
}

#[test]
fn open_finishes_a_creation_interrupted_before_session_json() {
    let (_d, root, ws, id) = setup();
    drop(Session::create(&root, &id, &ws, SessionOptions::default()).unwrap());
    let paths = SessionPaths::new(&root, &id);
    // The state a crash between the durable empty log and session.json leaves.
    std::fs::remove_file(paths.meta()).unwrap();
    std::fs::write(paths.events(), b"").unwrap();
    let err = Session::open(&root, &id, SessionOptions::default()).unwrap_err();
    assert!(err.to_string().contains("never fully created"), "{err}");
    let (s, _) = Session::open(&root, &id, with_workspace(&ws)).unwrap();
    assert!(paths.meta().exists());
    assert_eq!(s.projection().next_seq(), 1);
    assert_eq!(s.projection().session_id(), Some("s"));
}

#[test]
fn open_writes_event_zero_when_creation_stopped_before_it() {
    let (_d, root, ws, id) = setup();
    drop(Session::create(&root, &id, &ws, SessionOptions::default()).unwrap());
    let paths = SessionPaths::new(&root, &id);
    std::fs::write(paths.events(), b"").unwrap();
    let (mut s, _) = Session::open(&root, &id, SessionOptions::default()).unwrap();
    s.append(Event::RunStarted { run_id: "r".into() }).unwrap();
    drop(s);
    let (p, _) = agentstore::projection::replay(&paths).unwrap();
    assert_eq!(p.session_id(), Some("s"));
    assert_eq!(p.next_seq(), 2);
}
