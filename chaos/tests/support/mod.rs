//! Finding the workspace's adapter binaries from a test of another package,
//! and the test helpers, which are examples (`cargo install` leaves them out).
//!
//! `CARGO_BIN_EXE_*` only exists for binaries of the test's own package,
//! and `cargo test -p agentchaos` does not build the other packages'
//! binaries. So the first use runs `$CARGO build` for the binary, with the
//! profile and target directory of the running test (a no-op when it is
//! fresh, as it is under `cargo test --workspace`), then returns its path
//! next to this test's `deps/` directory. Without `$CARGO` (the test binary
//! run by hand) it uses whatever binary is there. Examples live in
//! `target/<profile>/examples/`.

// The trace_overhead bench compiles this module too and uses part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);

/// `target/<profile>` of the running test executable (`target/<profile>/deps/test-…`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    exe.parent()
        .and_then(Path::parent)
        .expect("a test executable lives in target/<profile>/deps")
        .to_path_buf()
}

/// The path of binary `bin` of workspace package `package`, built first.
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    built(package, "--bin", bin, Path::new(""))
}

/// The path of example `name` of workspace package `package`, built first.
pub fn workspace_example(package: &str, name: &str) -> PathBuf {
    built(package, "--example", name, Path::new("examples"))
}

/// Target `name` of `package` (`kind`: `--bin` or `--example`), built into
/// `target/<profile>/<under>`.
fn built(package: &str, kind: &str, name: &str, under: &Path) -> PathBuf {
    let bin = name;
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    let built = built.get_or_insert_with(HashMap::new);
    if let Some(path) = built.get(bin) {
        return path.clone();
    }
    let dir = profile_dir();
    let path = dir.join(under).join(bin);
    if let Ok(cargo) = std::env::var("CARGO") {
        let profile = match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "test",
            Some(other) => other,
            None => panic!("odd target directory {}", dir.display()),
        };
        let target_dir = dir.parent().expect("target/<profile> has a parent");
        let output = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "--profile",
                profile,
                "-p",
                package,
                kind,
                bin,
            ])
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cargo runs");
        assert!(
            output.status.success(),
            "building {bin} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert!(path.is_file(), "no binary at {}", path.display());
    built.insert(bin.to_string(), path.clone());
    path
}
