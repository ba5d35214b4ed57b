//! Building the model's context for a long session: the whole active
//! branch, and within a token budget.

use agentbench::{bench_dir, build_session, scaled, short, SessionShape};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

fn context(c: &mut Criterion) {
    let dir = bench_dir(env!("CARGO_TARGET_TMPDIR"));
    let mut group = c.benchmark_group("context");
    // A compacted 100k-event session, and a 10k-event one that never compacted
    // (its active branch holds every message: the worst case).
    for (label, events, compact_every_turns) in
        [("compacted", 100_000, 100), ("uncompacted", 10_000, 0)]
    {
        let events = scaled(events);
        let session = build_session(
            dir.path(),
            dir.path(),
            &format!("ctx-{label}"),
            SessionShape {
                events,
                compact_every_turns,
                checkpoint_at: None,
            },
        );
        for budget in [None, Some(8_000)] {
            let id = format!(
                "{label}_{events}_events/{}",
                budget.map_or("all".to_string(), |b| format!("{b}_tokens"))
            );
            group.bench_function(BenchmarkId::from_parameter(id), |b| {
                b.iter(|| session.context(budget).expect("context"))
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = short();
    targets = context
}
criterion_main!(benches);
