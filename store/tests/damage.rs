//! Damage before the tail: a byte changed anywhere in a line that is not the
//! last. It must be detected and reported with its line and offset by every
//! reader (open, queries, fsck), never skipped, never cut; salvage must copy
//! exactly the lines before it and leave the original as it was.

mod common;

use std::sync::OnceLock;

use agentstore::fsck::{fsck_session, LogProblem, Problem};
use agentstore::meta::SessionMeta;
use agentstore::repair::{repair, salvage};
use agentstore::{Durability, Error, EventLog, LogOptions, LogReader, SessionId};
use proptest::prelude::*;

use common::{line_starts, message_event, paths, scratch};

const EVENTS: u64 = 8;

/// The bytes of a clean log of `EVENTS` events, and where each line starts.
fn base() -> &'static (Vec<u8>, Vec<u64>) {
    static BASE: OnceLock<(Vec<u8>, Vec<u64>)> = OnceLock::new();
    BASE.get_or_init(|| {
        let dir = scratch();
        let paths = paths(dir.path(), "base");
        let log = EventLog::create(&paths, Durability::None).unwrap();
        for i in 0..EVENTS {
            log.append(&message_event(i)).unwrap();
        }
        drop(log);
        let bytes = std::fs::read(paths.events()).unwrap();
        let starts = line_starts(&bytes);
        (bytes, starts)
    })
}

fn check_damage_at(line: usize, at: f64, xor: u8) {
    let (clean, starts) = base();
    let start = starts[line];
    let end = starts[line + 1];
    let pos = start + ((end - start - 1) as f64 * at) as u64;
    let mut bytes = clean.clone();
    bytes[pos as usize] ^= xor;
    let want_line = line as u64 + 1;

    let dir = scratch();
    let root = dir.path();
    let paths = paths(root, "s");
    std::fs::create_dir_all(paths.dir()).unwrap();
    std::fs::write(paths.events(), &bytes).unwrap();
    SessionMeta::new(&paths, "/w", None).write(&paths).unwrap();
    let is_damage_here = |e: &Error| matches!(e, Error::Damage { line: l, offset: o, .. } if (*l, *o) == (want_line, start));

    // Opening for writing fails and cuts nothing.
    match EventLog::open(&paths, LogOptions::default(), |_, _| Ok(())) {
        Err(e) => assert!(is_damage_here(&e), "byte {pos}: wrong error {e}"),
        Ok(_) => panic!("byte {pos} ^ {xor:#x} (line {want_line}) went unnoticed by open"),
    }
    assert_eq!(std::fs::read(paths.events()).unwrap(), bytes);

    // Repair refuses it too.
    let err = repair(root, paths.id()).unwrap_err();
    assert!(is_damage_here(&err), "repair: {err}");

    // A query yields the lines before it, then the error, then nothing.
    let mut events = LogReader::open(&paths).unwrap().after(0).unwrap();
    let before: Vec<u64> = (&mut events)
        .map_while(|r| r.ok())
        .map(|rec| rec.seq)
        .collect();
    assert_eq!(before, (1..line as u64).collect::<Vec<_>>());
    assert!(events.next().is_none(), "the stream went on past damage");
    let err = LogReader::open(&paths)
        .unwrap()
        .range(0..)
        .unwrap()
        .find_map(|r| r.err())
        .expect("query skipped the damage");
    assert!(is_damage_here(&err), "query: {err}");

    // fsck reports exactly this, and counts the valid events before it.
    let check = fsck_session(root, paths.id()).unwrap();
    assert_eq!(check.events, line as u64);
    match check.problems.as_slice() {
        [Problem::Log(LogProblem::Damage {
            line: l, offset, ..
        })] => {
            assert_eq!((*l, *offset), (want_line, start));
        }
        other => panic!("fsck found {other:?}"),
    }

    // Salvage copies exactly the prefix and leaves the original untouched.
    let new_id = SessionId::new("saved").unwrap();
    let report = salvage(root, paths.id(), &new_id).unwrap();
    assert_eq!((report.kept, report.kept_bytes), (line as u64, start));
    assert!(matches!(
        report.stopped_at,
        Some(LogProblem::Damage { line: l, .. }) if l == want_line
    ));
    let new_paths = common::paths(root, "saved");
    assert_eq!(
        std::fs::read(new_paths.events()).unwrap(),
        &clean[..start as usize]
    );
    assert_eq!(std::fs::read(paths.events()).unwrap(), bytes);
    assert_eq!(SessionMeta::read(&new_paths).unwrap().workspace, "/w");
    assert!(fsck_session(root, &new_id).unwrap().problems.is_empty());
    let (log, report) = EventLog::open(&new_paths, LogOptions::default(), |_, _| Ok(())).unwrap();
    assert_eq!(report.end.seq, line as u64);
    assert_eq!(log.append(&message_event(99)).unwrap().seq(), line as u64);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any line but the last (the last one is the tail), any byte of it,
    /// including its newline, any change.
    #[test]
    fn a_changed_byte_before_the_tail_is_damage(
        line in 0..(EVENTS as usize - 1),
        at in 0.0f64..=1.0,
        xor in 1u8..=255,
    ) {
        check_damage_at(line, at, xor);
    }
}

#[test]
fn damage_in_the_first_and_second_to_last_lines_including_newlines() {
    for line in [0, EVENTS as usize - 2] {
        for at in [0.0, 0.5, 1.0] {
            check_damage_at(line, at, 0x20);
        }
    }
}

#[test]
fn salvage_refuses_an_existing_target_and_a_missing_source() {
    let dir = scratch();
    let root = dir.path();
    let (clean, _) = base();
    for id in ["a", "b"] {
        let p = paths(root, id);
        std::fs::create_dir_all(p.dir()).unwrap();
        std::fs::write(p.events(), clean).unwrap();
    }
    let id = |s| SessionId::new(s).unwrap();
    assert!(matches!(
        salvage(root, &id("a"), &id("b")),
        Err(Error::SessionExists { .. })
    ));
    assert!(matches!(
        salvage(root, &id("a"), &id("a")),
        Err(Error::SessionExists { .. })
    ));
    assert!(matches!(
        salvage(root, &id("nope"), &id("c")),
        Err(Error::NoSuchSession { .. })
    ));
    // A clean source is copied whole; its session.json was missing, so the
    // workspace comes from nowhere and the report says so.
    let report = salvage(root, &id("a"), &id("c")).unwrap();
    assert_eq!(report.kept, EVENTS);
    assert_eq!(report.stopped_at, None);
    assert_eq!(
        report.workspace_from,
        agentstore::repair::WorkspaceSource::Unknown
    );
    assert_eq!(std::fs::read(paths(root, "c").events()).unwrap(), *clean);
    // No staging directory is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(root.join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A line whose checksum holds but whose fields do not fit (a writer that
/// framed a bad event): the frame scan of fsck passes it, the fold builds
/// it, and fsck reports it as damage at its line, counting the events
/// before it; every reader that builds events refuses it the same way.
#[test]
fn fields_that_do_not_fit_under_a_good_checksum_are_damage() {
    let (clean, starts) = base();
    let bad = agentstore::framing::frame_object(
        format!(r#"{{"seq":{EVENTS},"id":"e{EVENTS}","ts":"t","type":"user_message"}}"#).as_bytes(),
    );
    let mut bytes = clean.clone();
    bytes.extend_from_slice(&bad);
    bytes.push(b'\n');
    bytes.extend_from_slice(&clean[starts[0] as usize..starts[1] as usize]);
    let dir = scratch();
    let root = dir.path();
    let paths = paths(root, "s");
    std::fs::create_dir_all(paths.dir()).unwrap();
    std::fs::write(paths.events(), &bytes).unwrap();
    SessionMeta::new(&paths, "/w", None).write(&paths).unwrap();
    let want = (EVENTS + 1, clean.len() as u64);
    let check = fsck_session(root, paths.id()).unwrap();
    assert_eq!(check.events, EVENTS);
    match &check.problems[..] {
        [Problem::Log(LogProblem::Damage { line, offset, .. })] => {
            assert_eq!((*line, *offset), want)
        }
        other => panic!("fsck found {other:?}"),
    }
    let reader = LogReader::open(&paths).unwrap();
    let e = reader.after(0).unwrap().find_map(Result::err).unwrap();
    assert!(
        matches!(e, Error::Damage { line, offset, .. } if (line, offset) == want),
        "{e}"
    );
}
