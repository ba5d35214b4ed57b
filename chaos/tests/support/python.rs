//! Python adapters in tests: the in-repository adapter kit
//! (`chaos/adapters/python`) on `PYTHONPATH`, so that a test runs the kit
//! of this checkout rather than whatever version pip installed, and the
//! skip rule: a test whose Python packages are missing says so on stderr
//! and passes on a dev machine, and fails under `CI=true`, where `.ci/run`
//! installs them.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `chaos/adapters/python`, the kit's source (the directory holding the
/// `agentchaos_adapter` package).
pub fn kit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("adapters/python")
}

/// `PYTHONPATH` with the kit's source first.
pub fn pythonpath() -> OsString {
    let mut paths = vec![kit_dir()];
    if let Some(old) = std::env::var_os("PYTHONPATH") {
        paths.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(paths).expect("the kit's path has no separator in it")
}

/// The interpreter `python3` names, resolved once to its own path
/// (`sys.executable`); `python3` itself when it does not run, so that the
/// skip rule below still says why. A version manager's `python3` is a
/// shell script (pyenv's shim: 95 ms a start here, against 30 ms for the
/// interpreter it runs), and a campaign starts an adapter for every life.
pub fn python3_path() -> &'static Path {
    static RESOLVED: OnceLock<PathBuf> = OnceLock::new();
    RESOLVED.get_or_init(|| {
        Command::new("python3")
            .args(["-c", "import sys; sys.stdout.write(sys.executable)"])
            .output()
            .ok()
            .filter(|o| o.status.success() && !o.stdout.is_empty())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map_or_else(|| PathBuf::from("python3"), PathBuf::from)
    })
}

/// `python3` with the kit's source on its path.
pub fn python3() -> Command {
    python(python3_path())
}

/// The interpreter `program` (`python3`, or a virtual environment's
/// `bin/python`) with the kit's source on its path.
pub fn python(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("PYTHONPATH", pythonpath());
    cmd
}

/// An adapter command line for `agentchaos run --adapter`: `env
/// PYTHONPATH=… python3 SCRIPT ARGS…`, quoted as the harness splits it.
pub fn adapter_command(script: &Path, args: &[&str]) -> String {
    adapter_command_with(python3_path(), script, args)
}

/// [`adapter_command`] with another interpreter (a virtual environment's).
pub fn adapter_command_with(python: &Path, script: &Path, args: &[&str]) -> String {
    let path = pythonpath();
    let assignment = format!("PYTHONPATH={}", path.to_str().expect("a UTF-8 path"));
    let mut words = vec!["env".to_string(), assignment];
    for word in [python, script] {
        words.push(word.to_str().expect("a UTF-8 path").into());
    }
    words.extend(args.iter().map(|a| a.to_string()));
    shlex::try_join(words.iter().map(String::as_str)).expect("no NUL in the command")
}

/// Whether CI asked for every test to run (`CI=true`, as `.ci/run` and
/// hosted CI set it).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Whether `python3` (with the kit on its path) can run `probe`; if not,
/// fails the test under CI and otherwise says why on stderr (past the
/// test harness's capture, so a skip shows in logs) and returns false.
pub fn available(test: &str, probe: &str, install: &str) -> bool {
    available_with(test, python3_path(), probe, install)
}

/// [`available`] with another interpreter.
fn available_with(test: &str, python3: &Path, probe: &str, install: &str) -> bool {
    let out = python(python3).args(["-c", probe]).output();
    let why = match out {
        Ok(o) if o.status.success() => return true,
        Ok(o) => String::from_utf8_lossy(&o.stderr)
            .lines()
            .last()
            .unwrap_or("no error output")
            .to_string(),
        Err(e) => format!("cannot run {}: {e}", python3.display()),
    };
    let message = format!(
        "{test}: `{} -c '{probe}'` failed ({why}); install with: {install}",
        python3.display()
    );
    assert!(!in_ci(), "CI=true and {message}");
    let _ = writeln!(std::io::stderr(), "SKIP {message}");
    false
}

/// The kit's dependencies: what `.ci/run` installs for it.
pub fn kit_available(test: &str) -> bool {
    available(
        test,
        "import agentchaos_adapter",
        "python3 -m pip install ./chaos/adapters/python",
    )
}

/// `chaos/adapters/NAME`, a third-party store's adapter on the kit.
pub fn store_adapter_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("adapters")
        .join(name)
}

/// Whether the kit and the store behind `chaos/adapters/NAME` import
/// (`probe` imports the store's module): what `.ci/run` installs from its
/// `requirements.txt`.
pub fn store_available(test: &str, name: &str, probe: &str) -> bool {
    available(
        test,
        &format!("{probe}; import agentchaos_adapter"),
        &format!(
            "python3 -m pip install ./chaos/adapters/python -r chaos/adapters/{name}/requirements.txt"
        ),
    )
}

/// `chaos/adapters/NAME/.venv/bin/python`: the interpreter of a store
/// whose pins clash with the other stores' (`.ci/run` makes the
/// environment and installs the kit and the store's `requirements.txt`).
pub fn venv_python(name: &str) -> PathBuf {
    store_adapter_dir(name).join(".venv/bin/python")
}

/// [`store_available`] for a store in its own virtual environment.
pub fn store_available_in_venv(test: &str, name: &str, probe: &str) -> bool {
    available_with(
        test,
        &venv_python(name),
        &format!("{probe}; import agentchaos_adapter"),
        &format!(
            "python3 -m venv chaos/adapters/{name}/.venv && chaos/adapters/{name}/.venv/bin/python -m pip install ./chaos/adapters/python -r chaos/adapters/{name}/requirements.txt"
        ),
    )
}
