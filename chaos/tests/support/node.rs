//! Node adapters in tests: the in-repository adapter kit
//! (`chaos/adapters/node`, package `agentchaos-adapter`) and the skip rule:
//! a test that finds no `node`, or the kit's dependencies not installed
//! (`npm ci --prefix chaos/adapters/node`), says so on stderr and passes on
//! a dev machine, and fails under `CI=true`, where `.ci/run` installs them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::python::in_ci;

/// `chaos/adapters/node`, the kit's package directory.
pub fn kit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("adapters/node")
}

/// An adapter command line for `agentchaos run --adapter`: `node SCRIPT`,
/// quoted as the harness splits it.
pub fn adapter_command(script: &Path) -> String {
    let script = script.to_str().expect("a UTF-8 path");
    shlex::try_join(["node", script]).expect("no NUL in the command")
}

/// Whether `node` runs and the kit imports (its dependencies installed);
/// if not, fails the test under CI and otherwise says why on stderr and
/// returns false.
pub fn kit_available(test: &str) -> bool {
    let probe = "await import(process.argv[1])";
    let index = kit_dir().join("src/index.js");
    let out = Command::new("node")
        .args(["--input-type=module", "-e", probe])
        .arg(&index)
        .output();
    let why = match out {
        Ok(o) if o.status.success() => return true,
        Ok(o) => String::from_utf8_lossy(&o.stderr)
            .lines()
            .find(|l| l.contains("Error"))
            .unwrap_or("no error output")
            .to_string(),
        Err(e) => format!("cannot run node: {e}"),
    };
    let message = format!(
        "{test}: the Node kit does not load ({why}); install with: npm ci --prefix chaos/adapters/node"
    );
    assert!(!in_ci(), "CI=true and {message}");
    let _ = writeln!(std::io::stderr(), "SKIP {message}");
    false
}
