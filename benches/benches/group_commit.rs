//! Group commit: 1, 2, 4, 8 and 16 threads appending to one log, Batch mode
//! against Sync mode; criterion reports events/s (elements/s).

use std::time::{Duration, Instant};

use agentbench::{bench_dir, event_of_line_size, new_log, short};
use agentstore::{Durability, EventLog};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const APPENDERS: [u64; 5] = [1, 2, 4, 8, 16];

/// Wall time for `total` appends shared by `threads` threads.
fn run(log: &EventLog, threads: u64, total: u64) -> Duration {
    let event = event_of_line_size(200, 0);
    let per_thread = total.div_ceil(threads);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..per_thread {
                    log.append(&event).expect("append");
                }
            });
        }
    });
    // Time per event, even when rounding gave some thread one more.
    start
        .elapsed()
        .mul_f64(total as f64 / (per_thread * threads) as f64)
}

fn group_commit(c: &mut Criterion) {
    let dir = bench_dir(env!("CARGO_TARGET_TMPDIR"));
    let mut group = c.benchmark_group("group_commit");
    group.throughput(Throughput::Elements(1));
    for (mode, durability) in [("batch", Durability::batch()), ("sync", Durability::Sync)] {
        for n in APPENDERS {
            let log = new_log(dir.path(), &format!("{mode}-{n}"), durability);
            group.bench_function(BenchmarkId::new(mode, n), |b| {
                b.iter_custom(|iters| run(&log, n, iters))
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = short();
    targets = group_commit
}
criterion_main!(benches);
