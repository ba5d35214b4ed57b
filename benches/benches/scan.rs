//! Full scan against the baseline of reading the file and parsing each line
//! with `serde_json::from_slice::<Value>` alone, and against reading it
//! only: the frame scan (fsck without its fold: checksum, seq, id, type),
//! `show --json`'s work (the frames of a query, printed as stored, into
//! memory), and the full decode of every event.
//! Also: writing a checkpoint (snapshot) of a long session.

use std::io::Read;

use agentbench::{bench_dir, build_session, scaled, serde_value_scan, short, SessionShape};
use agentstore::fsck::check_log;
use agentstore::scan::{self, LogPosition};
use agentstore::{LogReader, Query};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn full_scan(c: &mut Criterion) {
    let dir = bench_dir(env!("CARGO_TARGET_TMPDIR"));
    // The events of a real session: messages, tool calls and results.
    let session = build_session(
        dir.path(),
        dir.path(),
        "scan",
        SessionShape {
            events: scaled(50_000),
            compact_every_turns: 100,
            checkpoint_at: None,
        },
    );
    let events = session.projection().next_seq();
    let path = session.paths().events();
    drop(session);
    let bytes = std::fs::metadata(&path).expect("stat").len();
    let mut group = c.benchmark_group("full_scan");
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("frame_scan_fsck_without_fold", |b| {
        b.iter(|| {
            let check = check_log(&path, agentstore::scan::LogPosition::START).expect("check");
            assert_eq!((check.valid_end.seq, check.problem), (events, None));
        })
    });
    group.bench_function("show_json", |b| {
        let reader = LogReader::from_file(&path);
        let mut out = Vec::with_capacity(bytes as usize);
        b.iter(|| {
            out.clear();
            let mut frames = reader.events(&Query::all()).expect("query");
            while let Some(frame) = frames.next_frame().expect("frame") {
                frame.write_without_checksum(&mut out).expect("to memory");
                out.push(b'\n');
            }
            assert!(out.len() as u64 <= bytes);
        })
    });
    group.bench_function("scanner_verify", |b| {
        b.iter(|| {
            let v = scan::verify(&path, LogPosition::START, |_, _| Ok(())).expect("verify");
            assert_eq!(v.end.seq, events);
        })
    });
    group.bench_function("read_and_serde_value_baseline", |b| {
        b.iter(|| assert_eq!(serde_value_scan(&path).expect("baseline"), events))
    });
    group.bench_function("read_only", |b| {
        b.iter(|| {
            let mut buf = Vec::with_capacity(bytes as usize);
            std::fs::File::open(&path)
                .and_then(|mut f| f.read_to_end(&mut buf))
                .expect("read");
            buf
        })
    });
    group.finish();
}

fn snapshot_write(c: &mut Criterion) {
    let dir = bench_dir(env!("CARGO_TARGET_TMPDIR"));
    let mut session = build_session(
        dir.path(),
        dir.path(),
        "snap",
        SessionShape {
            events: scaled(100_000),
            compact_every_turns: 100,
            checkpoint_at: None,
        },
    );
    c.bench_function("checkpoint_write/100k_events_compacted", |b| {
        b.iter(|| session.checkpoint().expect("checkpoint"))
    });
}

criterion_group! {
    name = benches;
    config = short();
    targets = full_scan, snapshot_write
}
criterion_main!(benches);
