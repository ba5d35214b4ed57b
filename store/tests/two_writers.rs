//! One writer per session: a second writer, in this process or another, is
//! refused with `SessionLocked` naming the holder's pid; the lock dies with
//! its holder, even by SIGKILL.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use agentstore::{Durability, Error, EventLog, LogOptions, SessionPaths};

use common::{binary, paths};

fn open(paths: &SessionPaths) -> agentstore::Result<EventLog> {
    EventLog::open(paths, LogOptions::default(), |_, _| Ok(())).map(|(log, _)| log)
}

fn locked_by(result: agentstore::Result<EventLog>) -> String {
    match result {
        Err(Error::SessionLocked { pid, .. }) => pid,
        Err(e) => panic!("expected SessionLocked, got {e}"),
        Ok(_) => panic!("a second writer was let in"),
    }
}

#[test]
fn a_second_writer_in_the_same_process_is_refused() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path(), "s");
    let first = EventLog::create(&paths, Durability::Sync).unwrap();
    let me = std::process::id().to_string();
    assert_eq!(locked_by(open(&paths)), me);
    assert_eq!(locked_by(EventLog::create(&paths, Durability::Sync)), me);
    drop(first);
    // Another test in this binary may be forking a child at this moment; until
    // that child execs, it shares our lock's open file description, so the
    // lock outlives the drop for a moment. Retry briefly rather than flake.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let again = loop {
        match open(&paths) {
            Err(agentstore::Error::SessionLocked { .. })
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            other => break other.unwrap(),
        }
    };
    assert_eq!(locked_by(open(&paths)), me);
    drop(again);
}

/// `agentstore append` holding the session open, its stdin kept open.
struct Writer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Writer {
    fn spawn(root: &std::path::Path) -> Writer {
        let mut child = Command::new(binary())
            .args(["append", root.to_str().unwrap(), "s", "--workspace"])
            .arg(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Writer {
            child,
            stdin,
            stdout,
        }
    }

    /// Starts run `run_id` and waits for its ack: from then on the lock is held.
    fn append(&mut self, run_id: &str) -> serde_json::Value {
        self.send(
            &format!(r#"{{"type":"run_started","run_id":"{run_id}"}}"#),
            "run_started",
        )
    }

    /// Sends one event line and waits for the ack of an event of `type_name`.
    fn send(&mut self, event: &str, type_name: &str) -> serde_json::Value {
        writeln!(self.stdin, "{event}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            assert_ne!(self.stdout.read_line(&mut line).unwrap(), 0, "writer died");
            let ack: serde_json::Value = serde_json::from_str(&line).unwrap();
            if ack["type"] == type_name {
                return ack;
            }
        }
    }
}

#[test]
fn a_second_writer_process_is_refused_with_the_holders_pid() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let paths = paths(root, "s");
    let mut holder = Writer::spawn(root);
    let ack = holder.append("r1");
    assert_eq!(ack["seq"], 1, "seq 0 is session_created");
    let holder_pid = holder.child.id().to_string();

    // This process, as a library user.
    assert_eq!(locked_by(open(&paths)), holder_pid);

    // Another agentstore process.
    let second = Command::new(binary())
        .args(["append", root.to_str().unwrap(), "s"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8(second.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("agentstore: session \"s\" is locked by another writer")
            && stderr.contains(&format!("(pid {holder_pid})")),
        "{stderr}"
    );

    // The holder is still fine, and lets go when its input ends.
    holder.send(
        r#"{"type":"run_finished","run_id":"r1","status":"completed"}"#,
        "run_finished",
    );
    drop(holder.stdin);
    assert!(holder.child.wait().unwrap().success());
    let mut runs = Vec::new();
    let (_log, report) = EventLog::open(&paths, LogOptions::default(), |_, rec| {
        runs.push(rec.body.type_name().to_string());
        Ok(())
    })
    .unwrap();
    assert_eq!(report.end.seq, 3);
    assert_eq!(runs, ["session_created", "run_started", "run_finished"]);
}

#[test]
fn the_lock_dies_with_a_killed_writer() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let paths = paths(root, "s");
    let mut holder = Writer::spawn(root);
    holder.append("r1");
    assert_eq!(locked_by(open(&paths)), holder.child.id().to_string());
    holder.child.kill().unwrap(); // SIGKILL: no destructor runs
    holder.child.wait().unwrap();
    let log = open(&paths).unwrap();
    assert_eq!(log.next_seq(), 2);
}
