//! Finding the workspace's adapter binaries from a test of another package,
//! and the test helpers, which are examples (`cargo install` leaves them out).
//!
//! `CARGO_BIN_EXE_*` only exists for binaries of the test's own package,
//! and `cargo test -p agentchaos` does not build the other packages'
//! binaries. So the first use runs `$CARGO build --workspace --examples`
//! naming every other package's binary (`--bin`, [`build_workspace`]), once
//! per test process, with the profile and target directory
//! of the running test, then returns the binary's path next to this test's
//! `deps/` directory. Without `$CARGO` (the test binary run by hand) it uses
//! whatever binary is there. Examples live in `target/<profile>/examples/`.
//!
//! Why the whole workspace, examples included: cargo resolves features over
//! the packages and targets it is asked for, and the examples bring in the
//! dev-dependencies, as `cargo test --workspace` does. Resolved alike, the
//! build finds everything `cargo test --workspace` built fresh and only
//! links the binaries back into place (0.1 s). `cargo build -p agentstore
//! --bin agentstore` resolved fewer features (serde_json, regex, schemars and
//! more), so every test run rebuilt agentstore, the adapters and the
//! harness's library a second time while the tests waited for them.

// The trace_overhead bench compiles this module too and uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Whether this process has built the workspace's binaries yet.
static BUILT: Mutex<bool> = Mutex::new(false);

/// `target/<profile>` of the running test executable (`target/<profile>/deps/test-…`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    exe.parent()
        .and_then(Path::parent)
        .expect("a test executable lives in target/<profile>/deps")
        .to_path_buf()
}

/// The path of binary `bin` of a workspace package, built first.
pub fn workspace_bin(bin: &str) -> PathBuf {
    built(Path::new(bin))
}

/// The path of example `name` of a workspace package, built first.
pub fn workspace_example(name: &str) -> PathBuf {
    built(&Path::new("examples").join(name))
}

/// `target/<profile>/<under_profile>`, after every binary and example of the
/// workspace was built (once per process).
fn built(under_profile: &Path) -> PathBuf {
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    let dir = profile_dir();
    if !*built {
        if let Ok(cargo) = std::env::var("CARGO") {
            build_workspace(&cargo, &dir);
        }
        *built = true;
    }
    let path = dir.join(under_profile);
    assert!(path.is_file(), "no binary at {}", path.display());
    path
}

/// `$CARGO build --workspace --examples --bin …` into `dir`
/// (`target/<profile>`), with that profile, every binary named but
/// `agentchaos`'s own: `cargo test` built those (`CARGO_BIN_EXE_agentchaos`),
/// `cargo build` would link them again in their place if it resolved them
/// otherwise, and tests running them meanwhile would find no file there.
/// One invocation over the whole workspace resolves features as `cargo
/// test --workspace` does; `--exclude agentchaos` resolved fewer (serde,
/// syn, clap, rusqlite and SQLite's C build, tokio-postgres), and every CI
/// run compiled them a second time in the middle of its tests.
fn build_workspace(cargo: &str, dir: &Path) {
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "test",
        Some(other) => other,
        None => panic!("odd target directory {}", dir.display()),
    };
    let target_dir = dir.parent().expect("target/<profile> has a parent");
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--quiet",
        "--profile",
        profile,
        "--workspace",
        "--examples",
    ]);
    for bin in other_packages_bins(cargo) {
        cmd.args(["--bin", &bin]);
    }
    let output = cmd
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    built_or_panic(&output);
}

/// The binary targets of every workspace package but `agentchaos`
/// (`cargo metadata`).
fn other_packages_bins(cargo: &str) -> Vec<String> {
    let output = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    built_or_panic(&output);
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let bins: Vec<String> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|p| p["name"] != env!("CARGO_PKG_NAME"))
        .flat_map(|p| p["targets"].as_array().expect("targets"))
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.contains(&"bin".into()))
        })
        .map(|t| t["name"].as_str().expect("a name").to_string())
        .collect();
    assert!(!bins.is_empty(), "cargo metadata lists no binary");
    bins
}

fn built_or_panic(output: &std::process::Output) {
    assert!(
        output.status.success(),
        "building the workspace's binaries failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
