//! What the syscall tracer's seccomp filter saves a campaign: ptrace stops
//! per traced session (the crash-free traced life, the JSON report's
//! `syscall_trace_stops`) and trials/s, with the filter and without
//! (`AGENTCHAOS_SECCOMP=on` / `off`), for the in-process store, the Rust
//! adapter, the Python and the Node hello stores, under `--nemesis
//! syscall` and under the default nemeses. The two settings of one row run
//! one after the other, so their ratio holds on a busy machine.
//!
//! Run: `cargo bench -p agentchaos --bench seccomp_filter` (release
//! build; Linux x86_64). `SECCOMP_BENCH_TRIALS` sets the trials per
//! campaign (default 40). Needs `python3` with the Python kit's
//! dependencies and the Node kit's (`npm ci --prefix chaos/adapters/node`);
//! a store whose runtime is missing is left out, and said so.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

#[path = "../tests/support/mod.rs"]
mod support;

/// One campaign's figures.
struct Figures {
    trials_per_second: f64,
    stops: u64,
}

fn campaign(adapter: Option<&str>, nemesis: Option<&str>, seccomp: &str, trials: u32) -> Figures {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let json = dir.path().join("report.json");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = Command::new(support::workspace_bin("agentchaos"));
    cmd.current_dir(&workspace)
        .env("AGENTCHAOS_SECCOMP", seccomp)
        .args(["run", "--quiet", "--restarts", "none", "--seed", "1"])
        .args(["--scenario", "scenarios/deploy-and-notify.json"])
        .args(["--trials", &trials.to_string(), "--json"])
        .arg(&json);
    if let Some(n) = nemesis {
        cmd.args(["--nemesis", n]);
    }
    if let Some(a) = adapter {
        cmd.args(["--adapter", a]);
    }
    let out = cmd.output().expect("run agentchaos");
    let report: Value = match std::fs::read(&json) {
        Ok(bytes) => serde_json::from_slice(&bytes).expect("a JSON report"),
        Err(e) => panic!(
            "{adapter:?} {nemesis:?} AGENTCHAOS_SECCOMP={seccomp}: no report ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    };
    let s = &report["scenarios"][0];
    Figures {
        trials_per_second: s["trials_per_second"].as_f64().unwrap_or(0.0),
        stops: s["syscall_trace_stops"].as_u64().unwrap_or(0),
    }
}

/// Whether `program args` runs; says why not on stderr.
fn runs(program: &str, args: &[&str], what: &str) -> bool {
    let ok = Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("left out: {what} (`{program} {}` failed)", args.join(" "));
    }
    ok
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not,
    // and only checks that this compiles.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let trials: u32 = std::env::var("SECCOMP_BENCH_TRIALS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(40);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python_kit = root.join("adapters/python");
    let node_store: PathBuf = root.join("adapters/node/examples/hello_store.mjs");
    let agentstore = support::workspace_bin("agentstore");
    let mut stores: Vec<(&str, Option<String>)> = vec![
        ("agentstore in-process", None),
        (
            "`agentstore adapter` (Rust)",
            Some(format!("{} adapter", agentstore.display())),
        ),
    ];
    if runs(
        "python3",
        &["-c", "import agentchaos_adapter"],
        "the Python hello store",
    ) {
        stores.push((
            "hello store (Python kit)",
            Some(format!(
                "env PYTHONPATH={} python3 {}",
                python_kit.display(),
                python_kit.join("examples/hello_store.py").display()
            )),
        ));
    }
    if runs(
        "node",
        &[
            "--input-type=module",
            "-e",
            &format!(
                "await import('{}')",
                root.join("adapters/node/src/index.js").display()
            ),
        ],
        "the Node hello store",
    ) {
        stores.push((
            "hello store (Node kit)",
            Some(format!("node {}", node_store.display())),
        ));
    }
    println!(
        "{trials} trials per campaign, scenarios/deploy-and-notify.json, --restarts none --seed 1"
    );
    println!();
    println!("| store | nemeses | ptrace stops per traced session, filter on / off | trials/s on / off | on ÷ off |");
    println!("|---|---|---|---|---|");
    for (name, adapter) in &stores {
        for nemesis in [Some("syscall"), None] {
            let on = campaign(adapter.as_deref(), nemesis, "on", trials);
            let off = campaign(adapter.as_deref(), nemesis, "off", trials);
            println!(
                "| {name} | {} | {} / {} | {:.2} / {:.2} | ×{:.2} |",
                nemesis.unwrap_or("defaults"),
                on.stops,
                off.stops,
                on.trials_per_second,
                off.trials_per_second,
                on.trials_per_second / off.trials_per_second.max(f64::MIN_POSITIVE)
            );
        }
    }
}
