//! Torn tails: cut the log at every byte offset inside its last lines, or
//! pad it with zeros. Opening for writing must cut exactly the bytes after
//! the last complete line, say where, and leave a log the next append
//! extends; zeros to the end of the file after the last line are the
//! pre-allocated region (nothing cut), and zeros no lost write could leave
//! (stopping inside a sector before the end of the file) are damage.

mod common;

use agentstore::scan::{self, LogPosition};
use agentstore::{Durability, Event, EventLog, LogOptions, SessionPaths};

use common::{line_starts, paths, sample_event, scratch};

/// A synced log of `n` sample events; returns its bytes.
fn build_log(paths: &SessionPaths, n: u64) -> Vec<u8> {
    let log = EventLog::create(paths, Durability::None).unwrap();
    for i in 0..n {
        log.append(&sample_event(i)).unwrap();
    }
    log.sync().unwrap();
    drop(log);
    std::fs::read(paths.events()).unwrap()
}

/// Writes `bytes` as the log, opens it for writing, and checks that exactly
/// the bytes after `complete` complete lines (ending at `boundary`) are cut
/// and that an append afterwards is read back as the next seq.
fn open_cut_and_append(paths: &SessionPaths, bytes: &[u8], complete: u64, boundary: u64) {
    std::fs::write(paths.events(), bytes).unwrap();
    let (log, report) = EventLog::open(paths, LogOptions::default(), |_, _| Ok(())).unwrap();
    let torn_len = bytes.len() as u64 - boundary;
    match &report.repaired {
        None => assert_eq!(torn_len, 0, "{torn_len} torn bytes not reported"),
        Some(t) => {
            assert_eq!(
                (t.offset, t.len, t.line),
                (boundary, torn_len, complete + 1),
                "wrong torn tail for a {}-byte file: {t}",
                bytes.len()
            );
        }
    }
    assert_eq!(
        report.end,
        LogPosition {
            offset: boundary,
            seq: complete
        }
    );
    assert_eq!(std::fs::metadata(paths.events()).unwrap().len(), boundary);
    let next = Event::RunStarted {
        run_id: "after-repair".into(),
    };
    let acked = log.append(&next).unwrap();
    assert_eq!((acked.seq(), acked.offset()), (complete, boundary));
    drop(log);
    let mut last = None;
    let verified = scan::verify(&paths.events(), LogPosition::START, |_, rec| {
        last = rec.event().cloned();
        Ok(())
    })
    .unwrap();
    assert_eq!(verified.torn, None);
    assert_eq!(verified.end.seq, complete + 1);
    assert_eq!(last, Some(next));
    // The kept prefix is byte for byte what was there.
    let after = std::fs::read(paths.events()).unwrap();
    assert_eq!(&after[..boundary as usize], &bytes[..boundary as usize]);
}

#[test]
fn every_cut_inside_the_last_three_lines_repairs_to_the_complete_prefix() {
    let dir = scratch();
    let paths = paths(dir.path(), "cut");
    let full = build_log(&paths, 9);
    let starts = line_starts(&full);
    let first = starts[starts.len() - 3];
    for cut in first..=full.len() as u64 {
        let complete = starts.iter().filter(|&&s| s <= cut).count() as u64 - 1;
        let (complete, boundary) = if cut == full.len() as u64 {
            (starts.len() as u64, cut)
        } else {
            (complete, starts[complete as usize])
        };
        open_cut_and_append(&paths, &full[..cut as usize], complete, boundary);
    }
}

/// Writes `bytes`, `complete` whole lines ending at `boundary` and zeros
/// to the end of the file, as the log; opening for writing must find its
/// end at `boundary`, cut nothing (the zeros are the pre-allocated region,
/// log format 2), and append there, over the zeros.
fn open_and_append_over_zeros(paths: &SessionPaths, bytes: &[u8], complete: u64, boundary: u64) {
    std::fs::write(paths.events(), bytes).unwrap();
    let (log, report) = EventLog::open(paths, LogOptions::default(), |_, _| Ok(())).unwrap();
    assert_eq!(report.repaired, None, "zeros to the end are not torn");
    assert_eq!(
        report.end,
        LogPosition {
            offset: boundary,
            seq: complete
        }
    );
    assert_eq!(
        std::fs::metadata(paths.events()).unwrap().len(),
        bytes.len() as u64
    );
    let acked = log.append(&sample_event(complete)).unwrap();
    assert_eq!((acked.seq(), acked.offset()), (complete, boundary));
    drop(log);
    let verified = scan::verify(&paths.events(), LogPosition::START, |_, _| Ok(())).unwrap();
    assert_eq!((verified.end.seq, verified.torn), (complete + 1, None));
    let after = std::fs::read(paths.events()).unwrap();
    assert_eq!(&after[..boundary as usize], &bytes[..boundary as usize]);
}

#[test]
fn trailing_zero_bytes_are_the_end_of_the_log_and_after_a_partial_line_a_torn_tail() {
    let dir = scratch();
    let paths = paths(dir.path(), "zeros");
    let full = build_log(&paths, 4);
    let starts = line_starts(&full);
    let n = starts.len() as u64;
    let last_start = *starts.last().unwrap();
    for zeros in [1usize, 7, 4096] {
        // After a newline: the pre-allocated region, or a lost write into
        // it (the file grew, or zeros were overwritten, the data never came).
        let mut bytes = full.clone();
        bytes.resize(full.len() + zeros, 0);
        open_and_append_over_zeros(&paths, &bytes, n, full.len() as u64);

        // Right after a partial line (no newline before the zeros): a write
        // into the pre-allocated zeros killed after any byte: torn.
        let mut bytes = full[..full.len() - 1].to_vec();
        bytes.resize(full.len() - 1 + zeros, 0);
        open_cut_and_append(&paths, &bytes, n - 1, last_start);

        // The same write lost from the sector boundary on is torn.
        let sector = (last_start / 512 + 1) * 512;
        if sector < full.len() as u64 {
            let mut bytes = full.clone();
            bytes[sector as usize..].fill(0);
            open_cut_and_append(&paths, &bytes, n - 1, last_start);
        }

        // Zeros ending in a newline inside a sector: the newline was
        // written and the bytes before it zeroed, which no lost write
        // leaves: damage, unless the newline starts a sector.
        let mut bytes = full.clone();
        bytes.resize(full.len() + zeros, 0);
        bytes.push(b'\n');
        std::fs::write(paths.events(), &bytes).unwrap();
        let opened = EventLog::open(&paths, LogOptions::default(), |_, _| Ok(()));
        if (full.len() + zeros).is_multiple_of(512) {
            drop(opened);
            open_cut_and_append(&paths, &bytes, n, full.len() as u64);
        } else {
            assert!(
                matches!(opened, Err(agentstore::Error::Damage { .. })),
                "{zeros} zeros then a newline: {:?}",
                opened.err()
            );
        }
    }
}

#[test]
fn readers_stop_at_a_torn_tail_without_cutting_it() {
    let dir = scratch();
    let paths = paths(dir.path(), "reader");
    let full = build_log(&paths, 5);
    let starts = line_starts(&full);
    let cut = starts[4] as usize + 10;
    std::fs::write(paths.events(), &full[..cut]).unwrap();
    let reader = agentstore::LogReader::open(&paths).unwrap();
    let mut events = reader.after(1).unwrap();
    let seqs: Vec<u64> = (&mut events).map(|r| r.unwrap().seq).collect();
    assert_eq!(seqs, vec![2, 3]);
    let torn = events.torn().expect("torn tail reported");
    assert_eq!((torn.offset, torn.len), (starts[4], 10));
    assert_eq!(std::fs::metadata(paths.events()).unwrap().len(), cut as u64);
}

#[test]
fn a_reader_that_buffered_a_torn_tail_sees_the_repaired_log_not_damage() {
    let dir = scratch();
    let paths = paths(dir.path(), "race");
    let full = build_log(&paths, 6);
    let starts = line_starts(&full);
    let torn_at = starts[5] as usize;
    // The writer died mid-line: a torn tail of 20 bytes.
    std::fs::write(paths.events(), &full[..torn_at + 20]).unwrap();

    let reader = agentstore::LogReader::open(&paths).unwrap();
    let mut events = reader.after(0).unwrap();
    // Read up to the torn tail: the reader's buffer now holds the torn bytes.
    for want in 1..5 {
        assert_eq!(events.next().unwrap().unwrap().seq, want);
    }
    // Meanwhile a new writer cuts the tail and appends.
    let (log, report) = EventLog::open(&paths, LogOptions::default(), |_, _| Ok(())).unwrap();
    assert_eq!(report.repaired.unwrap().offset, torn_at as u64);
    for i in 5..8 {
        log.append(&sample_event(i)).unwrap();
    }
    drop(log);
    // The reader continues with the new lines instead of reporting damage.
    let rest: Vec<u64> = events.map(|r| r.unwrap().seq).collect();
    assert_eq!(rest, vec![5, 6, 7]);
}
