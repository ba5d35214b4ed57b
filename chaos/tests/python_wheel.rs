//! The Python wheel (`chaos/pyproject.toml`: maturin, `bindings = "bin"`):
//! the `agentchaos` binary and the Python kit in one package. Built,
//! installed into a fresh virtual environment, and run from outside the
//! checkout: `agentchaos` on the environment's PATH runs a campaign on a
//! built-in scenario against the kit's hello store, which imports the
//! installed kit (no `PYTHONPATH`), and re-executes itself from the
//! environment's `bin/` for its agents.
//!
//! The wheel carries the binary `cargo test` built: maturin's `cargo
//! rustc --profile test` would build the binary's unit tests instead, and
//! a release build costs minutes, so maturin runs with
//! `tests/support/cargo_for_maturin.py` as its cargo, which hands it that
//! binary and builds nothing. `python3 -m maturin
//! build --release` in `chaos/` is the same wheel with a release binary.
//!
//! Skipped on a dev machine, with a line on stderr, without maturin
//! (`python3 -m pip install maturin==1.16.0`); fails under `CI=true`. The
//! install downloads `jsonschema` (the kit's one dependency) from PyPI
//! unless pip has it cached.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::campaign;
use crate::python;

fn chaos_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn checked(what: &str, out: Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{text}",
        out.status
    );
    text
}

/// `maturin build --profile test` into `dist`, with a copy (in `dist`'s
/// parent) of the binary `cargo test` built: the one wheel it wrote.
///
/// maturin is handed a copy because it briefly removes the artifact it is
/// given, and target/debug/agentchaos is what every other test running
/// meanwhile starts (and re-executes for its agents).
fn build_wheel(dist: &Path) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let binary = dist.parent().unwrap().join("agentchaos");
    std::fs::copy(env!("CARGO_BIN_EXE_agentchaos"), &binary).unwrap();
    let out = Command::new(python::python3_path())
        .args([
            "-m",
            "maturin",
            "build",
            "--quiet",
            "--profile",
            "test",
            "--out",
        ])
        .arg(dist)
        .current_dir(chaos_dir())
        .env(
            "CARGO",
            chaos_dir().join("tests/support/cargo_for_maturin.py"),
        )
        .env("AGENTCHAOS_CARGO", cargo)
        .env("AGENTCHAOS_BINARY", &binary)
        .output()
        .unwrap();
    checked("maturin build", out);
    let wheels: Vec<PathBuf> = std::fs::read_dir(dist)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(wheels.len(), 1, "{wheels:?}");
    let name = wheels[0].file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with("agentchaos-0.1.0-py3-none-") && name.ends_with(".whl"),
        "{name}"
    );
    wheels[0].clone()
}

/// `pip install WHEEL` into a fresh virtual environment at `venv` (made
/// without pip of its own: this interpreter's pip installs into it).
fn install(wheel: &Path, venv: &Path) {
    let python = python::python3_path();
    let out = Command::new(python)
        .args(["-m", "venv", "--without-pip"])
        .arg(venv)
        .output()
        .unwrap();
    checked("python3 -m venv", out);
    let out = Command::new(python)
        .args(["-m", "pip", "--python"])
        .arg(venv.join("bin/python"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
        ])
        .arg("--root-user-action=ignore")
        .arg(wheel)
        .output()
        .unwrap();
    checked("pip install", out);
}

/// A command run as a user of the environment would run it: its `bin/`
/// first on PATH, no `PYTHONPATH`, in `cwd` (outside the checkout).
fn in_venv(program: &str, venv: &Path, cwd: &Path) -> Command {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![venv.join("bin")];
    paths.extend(std::env::split_paths(&path));
    let mut cmd = Command::new(program);
    cmd.current_dir(cwd)
        .env("PATH", std::env::join_paths(paths).unwrap())
        .env("VIRTUAL_ENV", venv)
        .env_remove("PYTHONPATH");
    cmd
}

#[test]
fn the_wheel_installs_a_harness_that_runs_a_campaign_from_anywhere() {
    if !python::available(
        "the_wheel_installs_a_harness_that_runs_a_campaign_from_anywhere",
        "import maturin",
        "python3 -m pip install maturin==1.16.0",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dist = tmp.path().join("dist");
    let venv = tmp.path().join("venv");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    install(&build_wheel(&dist), &venv);

    let installed = venv.join("bin/agentchaos");
    assert!(installed.is_file(), "no {}", installed.display());
    let probe = "import agentchaos_adapter, sys; sys.stderr.write(agentchaos_adapter.__file__)";
    let out = in_venv("python", &venv, &work)
        .args(["-c", probe])
        .output()
        .unwrap();
    let kit = checked("import agentchaos_adapter", out);
    assert!(
        Path::new(&kit).starts_with(&venv),
        "the kit was imported from {kit}, not from the environment"
    );

    std::fs::copy(
        python::kit_dir().join("examples/hello_store.py"),
        work.join("hello_store.py"),
    )
    .unwrap();
    let report_file = work.join("report.json");
    let out = in_venv("agentchaos", &venv, &work)
        .args(["run", "--quiet", "--adapter", "python hello_store.py"])
        .args([
            "--scenario",
            "builtin:approval-gated",
            "--nemesis",
            "points",
        ])
        .args(["--trials", "2", "--restarts", "none", "--json"])
        .arg(&report_file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report_file).unwrap()).unwrap();
    assert_eq!(report["error_count"], 0, "{stdout}");
    assert_eq!(report["trials"], 2, "{stdout}");
    assert_eq!(report["scenarios"][0]["name"], "approval-gated", "{stdout}");
    // The lives and observers are children of the environment's Python:
    // the kit's fork server, installed.
    assert!(
        report["adapter_processes"]["forked"].as_u64().unwrap() > 0,
        "{stdout}"
    );
    campaign::assert_rows(
        &report,
        "pass",
        &["orphan_marking", "effect_ledger", "writer_lock", "outcome"],
        &stdout,
    );
}
