//! One `agentstore append` invocation against session length: open the
//! session for writing (resuming from a checkpoint taken ~100 events before
//! the end), append one event, close; on a 1k- and a 1M-event session in the
//! same run. The goal (issue 11): the 1M-event append within 2x of the 1k
//! one, i.e. the open reads only the tail after the snapshot.
//!
//! Durability `None`: the fdatasync an invocation adds is the same for both
//! lengths and would drown the difference in disk noise (see README.md).
//! Before each iteration (untimed) the log is cut back to its length before
//! the previous append, so every iteration resumes the same tail.

use std::fs::OpenOptions;
use std::path::Path;

use agentbench::{bench_dir, build_session, scaled, short, SessionShape};
use agentstore::session::{Session, SessionOptions, SnapshotUse};
use agentstore::{Durability, Event, SessionId};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};

/// Events appended after the checkpoint ("a recent checkpoint").
const TAIL: u64 = 100;

fn open_and_append(root: &Path, id: &SessionId) {
    let options = SessionOptions {
        durability: Durability::None,
        workspace: None,
    };
    let (mut session, report) = Session::open(root, id, options).expect("open");
    assert!(
        matches!(report.snapshot, SnapshotUse::Used { .. }),
        "{:?}",
        report.snapshot
    );
    session
        .append(Event::UserMessage {
            parent: None,
            text: "one more question".into(),
        })
        .expect("append");
}

fn open_append(c: &mut Criterion) {
    let dir = bench_dir(env!("CARGO_TARGET_TMPDIR"));
    let mut group = c.benchmark_group("open_append");
    for n in [1_000, 1_000_000].map(scaled) {
        let name = format!("s{n}");
        let id = SessionId::new(&name).expect("valid id");
        let built = build_session(
            dir.path(),
            dir.path(),
            &name,
            SessionShape {
                events: n,
                compact_every_turns: 100,
                checkpoint_at: Some(n.saturating_sub(TAIL)),
            },
        );
        let events = built.paths().events();
        let len = built.log().end().offset;
        drop(built);
        let cut_back = || {
            OpenOptions::new()
                .write(true)
                .open(&events)
                .and_then(|f| f.set_len(len))
                .expect("cut the log back");
        };
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_batched(
                cut_back,
                |()| open_and_append(dir.path(), &id),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = short();
    targets = open_append
}
criterion_main!(benches);
