//! Finding the workspace's adapter binaries from a test of another package,
//! and the test helpers, which are examples (`cargo install` leaves them out).
//!
//! `CARGO_BIN_EXE_*` only exists for binaries of the test's own package,
//! and `cargo test -p agentchaos` does not build the other packages'
//! binaries. So the first use runs `$CARGO build --workspace --bins
//! --examples`, once per test process, with the profile and target directory
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

/// `$CARGO build --workspace --bins --examples` into `dir`
/// (`target/<profile>`), with that profile, except `agentchaos`'s own
/// binary: `cargo test` built it (`CARGO_BIN_EXE_agentchaos`) with the
/// features a test build unifies, `cargo build` would link another one in
/// its place, and tests running it meanwhile would find no file there.
fn build_workspace(cargo: &str, dir: &Path) {
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "test",
        Some(other) => other,
        None => panic!("odd target directory {}", dir.display()),
    };
    let target_dir = dir.parent().expect("target/<profile> has a parent");
    for packages in [
        &["--workspace", "--exclude", "agentchaos", "--bins"][..],
        &["--workspace", "--examples"][..],
    ] {
        let output = Command::new(cargo)
            .args(["build", "--quiet", "--profile", profile])
            .args(packages)
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cargo runs");
        built_or_panic(&output);
    }
}

fn built_or_panic(output: &std::process::Output) {
    assert!(
        output.status.success(),
        "building the workspace's binaries failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
