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
    let index = kit_dir().join("src/index.js");
    let mut probe = Command::new("node");
    probe
        .args(["--input-type=module", "-e", "await import(process.argv[1])"])
        .arg(&index);
    loads(
        test,
        probe,
        "the Node kit",
        "npm ci --prefix chaos/adapters/node",
    )
}

/// Whether `npm` runs (it comes with Node); if not, as [`kit_available`].
pub fn npm_available(test: &str) -> bool {
    let mut probe = Command::new("npm");
    probe.arg("--version");
    loads(
        test,
        probe,
        "npm",
        "install Node.js with npm (apt-get install nodejs npm)",
    )
}

/// `chaos/adapters/<name>`, a Node store's adapter directory (its own
/// `package.json` and `package-lock.json`).
pub fn store_adapter_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("adapters")
        .join(name)
}

/// Whether the Node kit and the store's pinned packages load: `node -e
/// PROBE` (CommonJS, so `require` resolves from the adapter's directory)
/// run in `chaos/adapters/<name>`; if not, as [`kit_available`].
pub fn store_available(test: &str, name: &str, probe: &str) -> bool {
    if !kit_available(test) {
        return false;
    }
    let mut cmd = Command::new("node");
    cmd.args(["-e", probe]).current_dir(store_adapter_dir(name));
    loads(
        test,
        cmd,
        &format!("the {name} adapter's packages"),
        &format!("npm ci --prefix chaos/adapters/{name}"),
    )
}

/// Runs `probe`: true when it succeeds; otherwise fails the test under CI
/// and elsewhere says why on stderr (past the test harness's capture, so
/// a skip shows in logs) and returns false.
fn loads(test: &str, mut probe: Command, what: &str, install: &str) -> bool {
    let why = match probe.output() {
        Ok(o) if o.status.success() => return true,
        Ok(o) => String::from_utf8_lossy(&o.stderr)
            .lines()
            .find(|l| l.contains("Error"))
            .unwrap_or("no error output")
            .to_string(),
        Err(e) => format!("cannot run {}: {e}", probe.get_program().to_string_lossy()),
    };
    let message = format!("{test}: {what} failed to load ({why}); install with: {install}");
    assert!(!in_ci(), "CI=true and {message}");
    let _ = writeln!(std::io::stderr(), "SKIP {message}");
    false
}
