//! Resume (open a session for writing and rebuild its projection) against
//! log length: 1k, 100k and 1M events, with a checkpoint taken ~100 events
//! before the end, and with no checkpoint (full replay). Prints the peak
//! memory each resume added (Linux VmHWM) next to criterion's times.

use std::path::Path;

use agentbench::{bench_dir, build_session, peak_rss_added, scaled, short, SessionShape};
use agentstore::session::{Session, SessionOptions, SnapshotUse};
use agentstore::SessionId;
use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};

const LENGTHS: [u64; 3] = [1_000, 100_000, 1_000_000];
/// Events appended after the checkpoint ("a recent checkpoint").
const TAIL: u64 = 100;

fn resume(root: &Path, id: &SessionId) -> (Session, SnapshotUse) {
    let (s, report) = Session::open(root, id, SessionOptions::default()).expect("resume");
    (s, report.snapshot)
}

fn resume_bench(c: &mut Criterion) {
    let dir = bench_dir(env!("CARGO_TARGET_TMPDIR"));
    let mut group = c.benchmark_group("resume");
    // A million-event replay takes seconds: equal samples, not 1+2+...+10 iterations.
    group.sampling_mode(SamplingMode::Flat);
    for n in LENGTHS.map(scaled) {
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
        let events = built.projection().next_seq();
        let snapshot = built.paths().snapshot();
        drop(built);
        group.throughput(Throughput::Elements(events));

        let ((_, used), peak) = peak_rss_added(|| resume(dir.path(), &id));
        assert!(matches!(used, SnapshotUse::Used { .. }), "{used:?}");
        report_peak("with_checkpoint", n, peak);
        group.bench_function(BenchmarkId::new("with_checkpoint", n), |b| {
            b.iter(|| resume(dir.path(), &id))
        });

        let aside = snapshot.with_extension("json.aside");
        std::fs::rename(&snapshot, &aside).expect("move snapshot aside");
        let ((_, used), peak) = peak_rss_added(|| resume(dir.path(), &id));
        assert_eq!(used, SnapshotUse::Absent);
        report_peak("full_replay", n, peak);
        group.bench_function(BenchmarkId::new("full_replay", n), |b| {
            b.iter(|| resume(dir.path(), &id))
        });
        std::fs::remove_dir_all(dir.path().join("sessions").join(&name)).expect("clean up");
    }
    group.finish();
}

fn report_peak(mode: &str, n: u64, peak: Option<u64>) {
    match peak {
        Some(bytes) => eprintln!(
            "resume/{mode}/{n}: peak memory added {:.1} MiB",
            bytes as f64 / (1024.0 * 1024.0)
        ),
        None => eprintln!("resume/{mode}/{n}: peak memory not measurable here"),
    }
}

criterion_group! {
    name = benches;
    config = short();
    targets = resume_bench
}
criterion_main!(benches);
