//! Resume (open a session for writing and rebuild its projection) against
//! log length: 1k, 100k and 1M events, with a checkpoint taken ~100 events
//! before the end, and with no checkpoint (full replay).
//!
//! Peak memory of a resume is measured in a fresh child process (this
//! bench binary re-run with `AGENTBENCH_RESUME_CHILD` set): in the bench
//! process itself, memory freed by building the session would be reused
//! and hide the peak. Linux only (/proc/self/status).

use std::path::Path;
use std::process::Command;

use agentbench::{bench_dir, build_session, proc_status_kib, scaled, short, SessionShape};
use agentstore::session::{Session, SessionOptions, SnapshotUse};
use agentstore::SessionId;
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};

const LENGTHS: [u64; 3] = [1_000, 100_000, 1_000_000];
/// Events appended after the checkpoint ("a recent checkpoint").
const TAIL: u64 = 100;
/// Set in the child that measures one resume's memory: `ROOT\nSESSION`.
const CHILD: &str = "AGENTBENCH_RESUME_CHILD";

fn resume(root: &Path, id: &SessionId) -> (Session, SnapshotUse) {
    let (s, report) = Session::open(root, id, SessionOptions::default()).expect("resume");
    (s, report.snapshot)
}

/// In the child: one resume, then `RSS_BEFORE_KIB PEAK_KIB` on stdout.
fn child(spec: &str) {
    let (root, id) = spec.split_once('\n').expect("ROOT\\nSESSION");
    let before = proc_status_kib("VmRSS:").expect("VmRSS");
    let session = resume(Path::new(root), &SessionId::new(id).expect("valid id"));
    let peak = proc_status_kib("VmHWM:").expect("VmHWM");
    drop(session);
    println!("{before} {peak}");
}

/// Memory one resume adds on top of a fresh process, in MiB.
fn peak_mib(root: &Path, id: &SessionId) -> f64 {
    let exe = std::env::current_exe().expect("own path");
    let out = Command::new(exe)
        .env(CHILD, format!("{}\n{id}", root.display()))
        .output()
        .expect("run the resume child");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let nums: Vec<u64> = text
        .split_whitespace()
        .map(|n| n.parse().expect("KiB"))
        .collect();
    (nums[1].saturating_sub(nums[0])) as f64 / 1024.0
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

        let (_, used) = resume(dir.path(), &id);
        assert!(matches!(used, SnapshotUse::Used { .. }), "{used:?}");
        eprintln!(
            "resume/with_checkpoint/{n}: peak memory added {:.1} MiB (snapshot.json {} KiB)",
            peak_mib(dir.path(), &id),
            std::fs::metadata(&snapshot).expect("stat snapshot").len() / 1024
        );
        group.bench_function(BenchmarkId::new("with_checkpoint", n), |b| {
            b.iter(|| resume(dir.path(), &id))
        });

        std::fs::remove_file(&snapshot).expect("remove snapshot");
        let (_, used) = resume(dir.path(), &id);
        assert_eq!(used, SnapshotUse::Absent);
        eprintln!(
            "resume/full_replay/{n}: peak memory added {:.1} MiB",
            peak_mib(dir.path(), &id)
        );
        group.bench_function(BenchmarkId::new("full_replay", n), |b| {
            b.iter(|| resume(dir.path(), &id))
        });
        std::fs::remove_dir_all(dir.path().join("sessions").join(&name)).expect("clean up");
    }
    group.finish();
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    let mut c = short();
    resume_bench(&mut c);
    c.final_summary();
}
