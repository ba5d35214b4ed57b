//! Append latency per durability mode and event size, against the raw
//! `write`+`fdatasync` floor of a growing file, the raw floors of writes
//! into a pre-zeroed file (fdatasync, O_DSYNC, RWF_DSYNC) and SQLite (WAL,
//! synchronous=FULL, one transaction per event), all the same line bytes.

use agentbench::{
    bench_dir, event_of_line_size, line_for, new_log, raw_floor, raw_zeroed, short, LogSink,
    Rotating, SqliteLog, SIZES,
};
use agentstore::bench::methods::SyncMethod;
use agentstore::Durability;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// Start a fresh file after this many bytes (keeps no-sync runs small).
const ROTATE_BYTES: u64 = 64 << 20;

fn append(c: &mut Criterion) {
    let dir = bench_dir(env!("CARGO_TARGET_TMPDIR"));
    for size in SIZES {
        let event = event_of_line_size(size, 0);
        let line = line_for(&event, 0);
        let mut group = c.benchmark_group(format!("append/{size}B"));
        group.throughput(Throughput::Bytes(line.len() as u64));
        let base = dir.path().to_path_buf();

        let l = line.clone();
        let mut floor = Rotating::new(&base, line.len(), ROTATE_BYTES, move |d| {
            raw_floor(&d.join("floor"), &l)
        });
        group.bench_function(BenchmarkId::new("raw_write_fdatasync", size), |b| {
            b.iter_custom(|n| floor.time(n))
        });

        for (name, method) in [
            ("raw_zeroed_write_fdatasync", SyncMethod::Fdatasync),
            ("raw_zeroed_o_dsync", SyncMethod::ODsync),
            ("raw_zeroed_rwf_dsync", SyncMethod::RwfDsync),
        ] {
            let l = line.clone();
            // A pre-zeroed file is overwritten in place: it never grows.
            let mut w = Rotating::new(&base, 0, u64::MAX, move |d| {
                raw_zeroed(&d.join("zeroed"), method, &l)
            });
            group.bench_function(BenchmarkId::new(name, size), |b| {
                b.iter_custom(|n| w.time(n))
            });
        }

        for (name, durability) in [
            ("store_sync", Durability::Sync),
            ("store_batch_1_appender", Durability::batch()),
            ("store_none", Durability::None),
        ] {
            let ev = event.clone();
            let mut sink = Rotating::new(&base, line.len(), ROTATE_BYTES, move |d| LogSink {
                log: new_log(d, "s", durability),
                event: ev.clone(),
            });
            group.bench_function(BenchmarkId::new(name, size), |b| {
                b.iter_custom(|n| sink.time(n))
            });
        }

        let l = line.clone();
        let mut sql = Rotating::new(&base, line.len(), ROTATE_BYTES, move |d| {
            SqliteLog::create(&d.join("events.db"), &l).expect("create sqlite baseline")
        });
        group.bench_function(BenchmarkId::new("sqlite_wal_full", size), |b| {
            b.iter_custom(|n| sql.time(n))
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = short();
    targets = append
}
criterion_main!(benches);
