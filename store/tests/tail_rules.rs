//! The tail rules (see `scan`): what may be cut as a torn tail and what is
//! damage, the quarantine copy of whatever is cut, and recovery verifying
//! every line even under a snapshot.

mod common;

use std::path::Path;
use std::process::Command;

use agentstore::{Error, EventLog, LogOptions, Session, SessionId, SessionOptions, SessionPaths};

use common::{binary, line_starts, paths, sample_event, scratch};

/// A session `s` under `root` with `n` events after `session_created`.
fn session(root: &Path, n: u64) -> (SessionPaths, Session) {
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let id = SessionId::new("s").unwrap();
    let mut s = Session::create(root, &id, &ws, SessionOptions::default()).unwrap();
    for i in 0..n {
        s.append(agentstore::Event::RunStarted {
            run_id: format!("r{i}"),
        })
        .unwrap();
        s.append(agentstore::Event::RunFinished {
            run_id: format!("r{i}"),
            status: agentstore::event::RunStatus::Completed,
        })
        .unwrap();
    }
    (s.paths().clone(), s)
}

/// Flips the case of the first ASCII letter at or after the middle of `line`
/// of the log: the frame stays well formed, only its checksum is wrong.
fn flip_in_line(paths: &SessionPaths, line: usize) -> (Vec<u8>, u64) {
    let mut bytes = std::fs::read(paths.events()).unwrap();
    let starts = line_starts(&bytes);
    let start = starts[line] as usize;
    let end = starts.get(line + 1).map_or(bytes.len(), |&e| e as usize);
    let at = ((start + end) / 2..end)
        .find(|&i| bytes[i].is_ascii_alphabetic())
        .unwrap();
    bytes[at] ^= 0x20;
    std::fs::write(paths.events(), &bytes).unwrap();
    (bytes, starts[line])
}

fn open_log(paths: &SessionPaths) -> agentstore::Result<agentstore::OpenReport> {
    EventLog::open(paths, LogOptions::default(), |_, _| Ok(())).map(|(_, r)| r)
}

fn assert_damage_at(result: agentstore::Result<impl std::fmt::Debug>, want: (u64, u64)) {
    match result {
        Err(Error::Damage { line, offset, .. }) => assert_eq!((line, offset), want),
        other => panic!(
            "expected damage at line {}, offset {}: {other:?}",
            want.0, want.1
        ),
    }
}

#[test]
fn a_wrong_checksum_on_the_last_complete_line_is_damage_not_a_torn_tail() {
    let _serial = common::serial();
    let dir = scratch();
    let (paths, s) = session(dir.path(), 3);
    drop(s);
    let last = line_starts(&std::fs::read(paths.events()).unwrap()).len() - 1;
    let (bytes, offset) = flip_in_line(&paths, last);
    assert_damage_at(open_log(&paths), (last as u64 + 1, offset));
    assert_damage_at(
        Session::open(dir.path(), paths.id(), SessionOptions::default()).map(|_| ()),
        (last as u64 + 1, offset),
    );
    // Nothing was cut: the acknowledged event keeps its seq.
    assert_eq!(std::fs::read(paths.events()).unwrap(), bytes);
}

#[test]
fn zeros_over_the_last_lines_under_a_snapshot_are_damage() {
    let _serial = common::serial();
    let dir = scratch();
    let (paths, mut s) = session(dir.path(), 3);
    s.checkpoint().unwrap();
    drop(s);
    let mut bytes = std::fs::read(paths.events()).unwrap();
    let starts = line_starts(&bytes);
    let first = starts[starts.len() - 3];
    bytes[first as usize..].fill(0);
    std::fs::write(paths.events(), &bytes).unwrap();
    let want = (starts.len() as u64 - 2, first);
    assert_damage_at(open_log(&paths), want);
    assert_damage_at(
        Session::open(dir.path(), paths.id(), SessionOptions::default()).map(|_| ()),
        want,
    );
    assert_eq!(std::fs::read(paths.events()).unwrap(), bytes);
}

#[test]
fn a_torn_line_after_the_snapshot_is_still_cut() {
    let _serial = common::serial();
    let dir = scratch();
    let (paths, mut s) = session(dir.path(), 2);
    s.checkpoint().unwrap();
    drop(s);
    let full = std::fs::read(paths.events()).unwrap();
    let mut bytes = full.clone();
    bytes.extend_from_slice(b"{\"crc\":\"0000");
    std::fs::write(paths.events(), &bytes).unwrap();
    let (s, report) = Session::open(dir.path(), paths.id(), SessionOptions::default()).unwrap();
    let torn = report.repaired.expect("a torn tail");
    assert_eq!((torn.offset, torn.len), (full.len() as u64, 12));
    // Cut to where the torn line began; the record of the cut follows.
    drop(s);
    let after = std::fs::read(paths.events()).unwrap();
    assert_eq!(&after[..full.len()], &full[..]);
    assert_eq!(
        last_record(&paths).event().map(|e| e.type_name()),
        Some("tail_quarantined")
    );
}

#[test]
fn what_is_cut_is_first_saved_to_a_quarantine_file_next_to_the_log() {
    let _serial = common::serial();
    let dir = scratch();
    let p = paths(dir.path(), "q");
    let log = EventLog::create(&p, agentstore::Durability::Sync).unwrap();
    for i in 0..3 {
        log.append(&sample_event(i)).unwrap();
    }
    drop(log);
    let full = std::fs::read(p.events()).unwrap();
    let torn: &[u8] = b"{\"crc\":\"12345678\",\"seq\":3,\"id\":\"e3\",\"ts\":";
    for round in 0..2 {
        let mut bytes = full.clone();
        bytes.extend_from_slice(torn);
        std::fs::write(p.events(), &bytes).unwrap();
        let report = open_log(&p).unwrap();
        let cut = report.repaired.expect("a torn tail");
        let want = match round {
            0 => format!("{}.torn-{}", p.events().display(), full.len()),
            _ => format!("{}.torn-{}.1", p.events().display(), full.len()),
        };
        let q = cut.quarantine.clone().expect("the quarantine path");
        assert_eq!(q.display().to_string(), want);
        assert_eq!(std::fs::read(&q).unwrap(), torn);
        assert!(cut.to_string().contains(&want), "{cut}");
        assert_eq!(std::fs::read(p.events()).unwrap(), full);
    }
}

#[test]
fn the_cli_names_the_quarantine_file() {
    let _serial = common::serial();
    let dir = scratch();
    let (paths, s) = session(dir.path(), 1);
    drop(s);
    let len = std::fs::metadata(paths.events()).unwrap().len();
    let torn = || {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(paths.events())
            .unwrap();
        std::io::Write::write_all(&mut f, b"{\"crc\":\"ab").unwrap();
    };
    let root = dir.path().to_str().unwrap();
    torn();
    let out = Command::new(binary())
        .args(["repair", root, "s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let q = format!("{}.torn-{len}", paths.events().display());
    assert!(stdout.contains(&q), "{stdout}");
    match last_record(&paths).event() {
        Some(agentstore::Event::TailQuarantined {
            file,
            offset,
            len: cut,
            ..
        }) => assert_eq!(
            (file.as_str(), *offset, *cut),
            (format!("events.jsonl.torn-{len}").as_str(), len, 10)
        ),
        other => panic!("no tail_quarantined after repair: {other:?}"),
    }

    // repair appended that record: the next tear starts after it.
    let len = std::fs::metadata(paths.events()).unwrap().len();
    torn();
    let out = Command::new(binary())
        .args(["recover", root, "s", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        state["repaired"]["quarantine"],
        serde_json::json!(format!("{}.torn-{len}", paths.events().display()))
    );
}

fn records(paths: &SessionPaths) -> Vec<agentstore::Record> {
    let mut recs = Vec::new();
    agentstore::scan::verify(&paths.events(), agentstore::LogPosition::START, |_, rec| {
        recs.push(rec.clone());
        Ok(())
    })
    .unwrap();
    recs
}

fn last_record(paths: &SessionPaths) -> agentstore::Record {
    records(paths).pop().unwrap()
}

#[test]
fn a_cut_is_named_in_a_durable_event_once() {
    let _serial = common::serial();
    let dir = scratch();
    let (paths, mut s) = session(dir.path(), 2);
    s.checkpoint().unwrap();
    drop(s);
    let len = std::fs::metadata(paths.events()).unwrap().len();
    let mut bytes = std::fs::read(paths.events()).unwrap();
    bytes.extend_from_slice(b"{\"crc\":\"0000");
    std::fs::write(paths.events(), &bytes).unwrap();

    let (s, report) = Session::open(dir.path(), paths.id(), SessionOptions::default()).unwrap();
    let torn = report.repaired.expect("a torn tail");
    let next = s.projection().next_seq();
    drop(s);
    let file = format!("events.jsonl.torn-{len}");
    let rec = last_record(&paths);
    assert_eq!(rec.seq, next - 1);
    assert_eq!(
        rec.event(),
        Some(&agentstore::Event::TailQuarantined {
            file: file.clone(),
            offset: len,
            len: 12,
            reason: torn.reason,
        })
    );
    assert_eq!(
        std::fs::read(paths.dir().join(&file)).unwrap(),
        b"{\"crc\":\"0000"
    );

    // Reopening (from the snapshot, or replaying all) records it no second time.
    for snapshot in [true, false] {
        if !snapshot {
            std::fs::remove_file(paths.snapshot()).unwrap();
        }
        let (s, _) = Session::open(dir.path(), paths.id(), SessionOptions::default()).unwrap();
        assert_eq!(s.projection().next_seq(), next);
    }
}

#[test]
fn a_quarantine_file_whose_record_a_crash_prevented_is_recorded_on_the_next_open() {
    let _serial = common::serial();
    let dir = scratch();
    let (paths, s) = session(dir.path(), 1);
    drop(s);
    // As a crash between the cut and its record leaves it.
    std::fs::write(paths.dir().join("events.jsonl.torn-77"), b"torn").unwrap();
    // Not a quarantine file's name: left alone.
    std::fs::write(paths.dir().join("events.jsonl.torn-77.tmp"), b"x").unwrap();
    let (s, report) = Session::open(dir.path(), paths.id(), SessionOptions::default()).unwrap();
    assert_eq!(report.repaired, None);
    drop(s);
    let recs = records(&paths);
    let marks: Vec<_> = recs
        .iter()
        .filter_map(|r| match r.event() {
            Some(agentstore::Event::TailQuarantined {
                file, offset, len, ..
            }) => Some((file.clone(), *offset, *len)),
            _ => None,
        })
        .collect();
    assert_eq!(marks, [("events.jsonl.torn-77".to_string(), 77, 4)]);
}

#[test]
fn recovery_verifies_every_line_even_under_a_checkpoint() {
    let _serial = common::serial();
    let dir = scratch();
    let (paths, mut s) = session(dir.path(), 4);
    s.checkpoint().unwrap();
    drop(s);
    let lines = line_starts(&std::fs::read(paths.events()).unwrap()).len();
    let (bytes, offset) = flip_in_line(&paths, lines / 2);
    let want = (lines as u64 / 2 + 1, offset);

    // Resuming may still trust the snapshot's prefix (the O(tail) path)...
    let (mut s, report) = Session::open(dir.path(), paths.id(), SessionOptions::default()).unwrap();
    assert!(matches!(
        report.snapshot,
        agentstore::SnapshotUse::Used { .. }
    ));
    // ...but recovery reads it all, and appends nothing to a damaged log.
    assert_damage_at(s.recover(), want);
    drop(s);
    assert_eq!(std::fs::read(paths.events()).unwrap(), bytes);

    let out = Command::new(binary())
        .args(["recover", dir.path().to_str().unwrap(), "s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("line {}, byte offset {}", want.0, want.1)),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(std::fs::read(paths.events()).unwrap(), bytes);
}
