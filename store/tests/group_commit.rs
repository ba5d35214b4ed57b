//! Batch mode (group commit): every append returns only once its own bytes
//! are durable, and a group leader never waits out its `max_delay` for
//! appenders that are not coming (at most one sync's time for the rest of
//! the last group). The latter is checked with a one-hour `max_delay`: a
//! leader that waited out its delay would hang the test instead of
//! finishing it.

use std::time::Duration;

use agentstore::event::Event;
use agentstore::{Durability, EventLog, LogPosition, Scanner, SessionId, SessionPaths};

const NEVER: Duration = Duration::from_secs(3600);

fn batch_log(dir: &std::path::Path) -> EventLog {
    let paths = SessionPaths::new(dir, &SessionId::new("group").unwrap());
    EventLog::create(
        &paths,
        Durability::Batch {
            max_delay: NEVER,
            max_events: 64,
        },
    )
    .unwrap()
}

fn event(i: usize) -> Event {
    Event::RunStarted {
        run_id: format!("r{i}"),
    }
}

#[test]
fn a_lone_appender_does_not_wait_for_followers() {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let log = batch_log(d.path());
    for i in 0..20 {
        let ack = log.append(&event(i)).unwrap();
        assert_eq!(ack.seq(), i as u64);
        assert!(log.durable().len() >= ack.end(), "acked before durable");
    }
}

#[test]
fn concurrent_appenders_all_return_durable_and_in_one_sequence() {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let log = batch_log(d.path());
    let (threads, each) = (8, 40);
    let mut seqs: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let log = &log;
                s.spawn(move || {
                    (0..each)
                        .map(|i| {
                            let ack = log.append(&event(t * each + i)).unwrap();
                            assert!(log.durable().len() >= ack.end(), "acked before durable");
                            ack.seq()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    seqs.sort_unstable();
    let n = (threads * each) as u64;
    assert_eq!(seqs, (0..n).collect::<Vec<_>>());
    let path = log.path().to_path_buf();
    drop(log);
    let read = Scanner::open(&path, LogPosition::START)
        .unwrap()
        .map(|r| r.unwrap().1.seq)
        .collect::<Vec<_>>();
    assert_eq!(read, (0..n).collect::<Vec<_>>());
}

/// A power cut may zero everything written and not yet durable, and the
/// scanner reads at most one line's worth of zeros (plus a pre-allocation
/// step) at the end as the pre-allocated region: so a group holds at most
/// one line's worth of bytes. Four appenders of 3 MiB lines: no two fit in
/// one group, so each line has a sync of its own.
#[test]
fn a_group_holds_at_most_one_lines_worth_of_bytes() {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let log = batch_log(d.path());
    let big = |i: usize| Event::UserMessage {
        parent: None,
        text: format!("{i}{}", "x".repeat(3 * 1024 * 1024)),
    };
    std::thread::scope(|s| {
        for t in 0..4 {
            let (log, event) = (&log, big(t));
            s.spawn(move || {
                let ack = log.append(&event).unwrap();
                assert!(log.durable().len() >= ack.end(), "acked before durable");
            });
        }
    });
    assert_eq!(log.syncs(), 4, "one sync per 3 MiB line");
}
