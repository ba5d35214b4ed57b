//! What tracing costs a store: the same append workload run plain, under
//! the tracer (counting), and under the tracer recording every write's data.
//!
//! Run: `cargo bench -p agentchaos --bench trace_overhead`. Linux x86_64.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use agentchaos::nemesis::syscall::{trace, Exit, TraceConfig};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

#[path = "../tests/support/mod.rs"]
mod support;

/// The scripted file-operation program (`examples/agentchaos-fsprobe.rs`).
fn probe_bin() -> std::path::PathBuf {
    support::workspace_example("agentchaos-fsprobe")
}
const LINE: &str = r#"{"crc":"0badf00d","seq":1,"type":"message","body":"a line of about a hundred bytes, like a small session event"}"#;

fn probe(root: &Path, script: &[String]) -> Command {
    let mut cmd = Command::new(probe_bin());
    cmd.current_dir(root).args(script).stdout(Stdio::null());
    cmd
}

fn run(root: &Path, script: &[String], mode: &str) {
    let cmd = probe(root, script);
    match mode {
        "untraced" => {
            let status = { cmd }.status().expect("run probe");
            assert!(status.success());
        }
        _ => {
            let config = TraceConfig {
                root: root.to_path_buf(),
                fault: None,
                record: mode == "recorded",
                seccomp: true,
                reads: false,
            };
            let outcome = trace(cmd, config).expect("trace probe");
            assert_eq!(outcome.exit, Exit::Code { code: 0 });
        }
    }
}

fn workload(c: &mut Criterion, name: &str, script: Vec<String>) {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for mode in ["untraced", "traced", "recorded"] {
        group.bench_with_input(BenchmarkId::from_parameter(mode), &mode, |b, mode| {
            b.iter_with_setup(
                || tempfile::tempdir().expect("temp root"),
                |root| run(root.path(), &script, mode),
            )
        });
    }
    group.finish();
}

fn appends(c: &mut Criterion) {
    let script = vec![
        "append events.jsonl".to_string(),
        format!("repeat 10000 events.jsonl {LINE}"),
    ];
    workload(c, "10k appends", script);
    let script = vec![
        "append events.jsonl".to_string(),
        format!("repeat-sync 1000 events.jsonl {LINE}"),
    ];
    workload(c, "1k appends, fdatasync each", script);
}

criterion_group!(benches, appends);
criterion_main!(benches);
