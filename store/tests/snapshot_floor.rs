//! `snapshot.json` is a durable record of how much of the log was
//! acknowledged: a log that ends before it (cut by hand, or by anything but
//! the store) is damage, refused by every reader that checks it and every
//! writer, so no seq is ever given twice. A snapshot that is itself
//! garbage is never trusted, and `fsck` says so.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agentstore::{Error, Session, SessionId, SessionOptions, SessionView, SnapshotUse};

use common::{binary, scratch};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn agentstore(args: &[&str], stdin: &str) -> Run {
    let mut child = Command::new(binary())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that refuses before it reads stdin may have exited already.
    match child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        written => written.unwrap(),
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().expect("killed by a signal"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

const THREE: &str = concat!(
    r#"{"type":"run_started","run_id":"r1"}"#,
    "\n",
    r#"{"type":"user_message","parent":null,"text":"hi"}"#,
    "\n",
    r#"{"type":"assistant_message","parent":null,"text":"yo"}"#,
    "\n",
);

/// A root holding session `s1`: `session_created` and THREE's three events,
/// checkpointed (the snapshot covers all four).
fn checkpointed() -> (tempfile::TempDir, String, PathBuf) {
    let dir = scratch();
    let root = dir.path().to_str().unwrap().to_string();
    let run = agentstore(&["append", &root, "s1", "--workspace", &root], THREE);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = agentstore(&["checkpoint", &root, "s1"], "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let events = dir.path().join("sessions/s1/events.jsonl");
    (dir, root, events)
}

/// Keeps the first `n` lines of the log.
fn keep_lines(events: &Path, n: usize) -> Vec<u8> {
    let bytes = std::fs::read(events).unwrap();
    let starts = common::line_starts(&bytes);
    let kept = bytes[..starts[n] as usize].to_vec();
    std::fs::write(events, &kept).unwrap();
    kept
}

/// Asserts a one-line refusal on stderr, exit 1, naming the log, both ends.
fn assert_refused(run: &Run, log_end: (u64, u64), covered: (u64, u64)) {
    assert_eq!(run.code, 1, "stderr: {}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "stderr: {}", run.stderr);
    let line = &run.stderr;
    for wanted in [
        "the log ends before what the snapshot covers".to_string(),
        "events.jsonl".to_string(),
        format!("byte offset {} (seq {})", log_end.0, log_end.1),
        format!("byte offset {}, seq {}", covered.0, covered.1),
    ] {
        assert!(line.contains(&wanted), "{wanted:?} not in {line}");
    }
}

#[test]
fn a_log_cut_before_its_snapshot_is_refused_and_no_seq_is_reused() {
    let (_dir, root, events) = checkpointed();
    let full = std::fs::read(&events).unwrap();
    let covered = (full.len() as u64, 4);
    let kept = keep_lines(&events, 3);
    let log_end = (kept.len() as u64, 3);

    let run = agentstore(&["fsck", &root, "s1"], "");
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("the log ends before what the snapshot covers")
            && run
                .stdout
                .contains(&format!("byte offset {}, seq {}", covered.0, covered.1)),
        "{}",
        run.stdout
    );
    let run = agentstore(&["fsck", &root], "");
    assert_eq!(run.code, 1, "{}", run.stdout);

    let after = concat!(
        r#"{"type":"user_message","parent":null,"text":"after"}"#,
        "\n"
    );
    assert_refused(
        &agentstore(&["append", &root, "s1"], after),
        log_end,
        covered,
    );
    assert_refused(&agentstore(&["recover", &root, "s1"], ""), log_end, covered);
    assert_refused(
        &agentstore(&["checkpoint", &root, "s1"], ""),
        log_end,
        covered,
    );
    assert_refused(&agentstore(&["context", &root, "s1"], ""), log_end, covered);
    assert_eq!(std::fs::read(&events).unwrap(), kept, "nothing written");

    // The library's opens, for writing and for reading.
    let id = SessionId::new("s1").unwrap();
    for e in [
        Session::open(Path::new(&root), &id, SessionOptions::default()).map(|_| ()),
        SessionView::open(Path::new(&root), &id).map(|_| ()),
    ] {
        match e {
            Err(e @ Error::Damage { .. }) => assert!(
                e.to_string()
                    .contains("the log ends before what the snapshot covers"),
                "{e}"
            ),
            other => panic!("opened a log shorter than its snapshot: {other:?}"),
        }
    }
    assert_eq!(std::fs::read(&events).unwrap(), kept, "nothing written");

    // The whole log back: it opens, from the snapshot, and goes on at seq 4.
    std::fs::write(&events, &full).unwrap();
    let run = agentstore(&["append", &root, "s1"], after);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with(r#"{"seq":4,"#), "{}", run.stdout);
}

#[test]
fn a_log_with_fewer_events_than_its_snapshot_is_refused_even_when_longer() {
    let (_dir, root, events) = checkpointed();
    let full = std::fs::read(&events).unwrap();
    // Three lines, the last one longer than the fourth was: the log goes
    // past the snapshot's offset with one event fewer than it covers.
    let mut kept = keep_lines(&events, 2);
    let id = SessionId::new("s1").unwrap();
    {
        // Written by the store into a scratch copy, so its frame is valid.
        let dir = scratch();
        let mut s =
            Session::create(dir.path(), &id, dir.path(), SessionOptions::default()).unwrap();
        s.append(agentstore::Event::RunStarted {
            run_id: "r1".into(),
        })
        .unwrap();
        s.append(agentstore::Event::UserMessage {
            parent: None,
            text: "x".repeat(400),
        })
        .unwrap();
        drop(s);
        let other = std::fs::read(dir.path().join("sessions/s1/events.jsonl")).unwrap();
        let starts = common::line_starts(&other);
        kept.extend_from_slice(&other[starts[2] as usize..]);
    }
    assert!(kept.len() > full.len());
    std::fs::write(&events, &kept).unwrap();
    let log_end = (kept.len() as u64, 3);
    let covered = (full.len() as u64, 4);
    let after = concat!(
        r#"{"type":"user_message","parent":null,"text":"after"}"#,
        "\n"
    );
    assert_refused(
        &agentstore(&["append", &root, "s1"], after),
        log_end,
        covered,
    );
    assert_refused(&agentstore(&["recover", &root, "s1"], ""), log_end, covered);
    let run = agentstore(&["fsck", &root, "s1"], "");
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("the log ends before what the snapshot covers"),
        "{}",
        run.stdout
    );
    assert_eq!(std::fs::read(&events).unwrap(), kept, "nothing written");
}

#[test]
fn a_garbage_snapshot_is_reported_by_fsck_and_never_trusted() {
    let (_dir, root, events) = checkpointed();
    let snapshot = events.with_file_name("snapshot.json");
    let good = std::fs::read(&snapshot).unwrap();
    let log = std::fs::read(&events).unwrap();
    // Another session's snapshot, intact.
    let other = agentstore(
        &["append", &root, "s2", "--workspace", &root],
        concat!(r#"{"type":"run_started","run_id":"r1"}"#, "\n"),
    );
    assert_eq!(other.code, 0, "{}", other.stderr);
    assert_eq!(agentstore(&["checkpoint", &root, "s2"], "").code, 0);
    let foreign = std::fs::read(
        events
            .parent()
            .unwrap()
            .with_file_name("s2")
            .join("snapshot.json"),
    )
    .unwrap();

    let mut bad_crc = good.clone();
    bad_crc[40] ^= 0x01;
    let unparsable = agentstore::framing::frame_object(br#"{"next_seq":"four"}"#);
    let mut unparsable = unparsable;
    unparsable.push(b'\n');
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("bad checksum", bad_crc, "checksum mismatch"),
        ("no newline", good[..good.len() - 1].to_vec(), "newline"),
        ("does not parse", unparsable, "does not fit"),
        ("another session's", foreign, "session \"s2\""),
    ];
    let id = SessionId::new("s1").unwrap();
    for (what, bytes, wanted) in cases {
        std::fs::write(&snapshot, &bytes).unwrap();
        let run = agentstore(&["fsck", &root, "s1"], "");
        assert_eq!(run.code, 1, "{what}: {}{}", run.stdout, run.stderr);
        assert_eq!(run.stdout.lines().count(), 1, "{what}: {}", run.stdout);
        assert!(
            run.stdout.starts_with("s1: snapshot.json: ") && run.stdout.contains(wanted),
            "{what}: {}",
            run.stdout
        );
        // Opening never trusts it: the whole log is replayed, nothing cut.
        let (s, report) = Session::open(Path::new(&root), &id, SessionOptions::default())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            matches!(report.snapshot, SnapshotUse::Rejected { .. }),
            "{what}: {:?}",
            report.snapshot
        );
        assert_eq!(s.projection().next_seq(), 4, "{what}");
        drop(s);
        assert_eq!(std::fs::read(&events).unwrap(), log, "{what}");
    }
    std::fs::write(&snapshot, &good).unwrap();
    let run = agentstore(&["fsck", &root, "s1"], "");
    assert_eq!(run.code, 0, "{}", run.stdout);
}
