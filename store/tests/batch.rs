//! Group commit: concurrent appenders under `Durability::Batch` share
//! fdatasyncs, and each still gets its ack only once its own bytes are synced.
//!
//! This binary holds one test only: it sets `AGENTCHAOS_SYNC_LOG` (read once
//! per process) to learn every durable length the log reached.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use agentstore::framing;
use agentstore::scan::{self, LogPosition};
use agentstore::{Acked, Durability, EventLog};

use common::{paths, sample_event};

const THREADS: u64 = 8;
const PER_THREAD: u64 = 60;

#[test]
fn concurrent_appends_get_unique_contiguous_durable_acks() {
    let dir = tempfile::tempdir().unwrap(); // a real disk: real fdatasync
    let sync_log = dir.path().join("synced");
    std::env::set_var("AGENTCHAOS_SYNC_LOG", &sync_log);
    let paths = paths(dir.path(), "batch");
    let log = EventLog::create(
        &paths,
        Durability::Batch {
            max_delay: Duration::from_millis(2),
            max_events: 8,
        },
    )
    .unwrap();
    let acks: Vec<(u64, Acked)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let log = &log;
                s.spawn(move || {
                    (0..PER_THREAD)
                        .map(|i| {
                            let n = t * PER_THREAD + i;
                            (n, log.append(&sample_event(n)).unwrap())
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
    let total = THREADS * PER_THREAD;
    let seqs: BTreeSet<u64> = acks.iter().map(|(_, a)| a.seq()).collect();
    assert_eq!(seqs.len() as u64, total, "duplicate seqs");
    assert_eq!(
        seqs.into_iter().collect::<Vec<_>>(),
        (0..total).collect::<Vec<_>>()
    );
    assert_eq!(log.durable().len(), log.end().offset);

    // The file verifies, and each ack's bytes are its event's line.
    let verified = scan::verify(&paths.events(), LogPosition::START, |_, _| Ok(())).unwrap();
    assert_eq!((verified.end.seq, verified.torn), (total, None));
    let file = std::fs::File::open(paths.events()).unwrap();
    for (n, ack) in &acks {
        let mut line = vec![0; (ack.end() - ack.offset()) as usize];
        file.read_exact_at(&mut line, ack.offset()).unwrap();
        assert_eq!(line.pop(), Some(b'\n'));
        let rec = framing::decode(&line).unwrap();
        assert_eq!(rec.seq, ack.seq());
        assert_eq!(rec.event(), Some(&sample_event(*n)));
    }

    // Every ack was covered by a sync that finished before it returned, and
    // the syncs were shared.
    let synced: Vec<u64> = std::fs::read_to_string(&sync_log)
        .unwrap()
        .lines()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    for (_, ack) in &acks {
        assert!(
            synced.iter().any(|&len| len >= ack.end()),
            "seq {} acked but never synced",
            ack.seq()
        );
    }
    println!("{total} appends, {} fdatasyncs", synced.len());
    assert!(
        (synced.len() as u64) < total,
        "group commit did not group: {} syncs for {total} appends",
        synced.len()
    );
}
