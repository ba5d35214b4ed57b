//! The Node kit as a store's project installs it: `npm pack
//! chaos/adapters/node`, then `npm install` of that tarball into a project
//! outside the checkout, with `ajv` and its dependencies at the versions
//! the kit's `package-lock.json` pins (the project's `overrides`). The
//! hello store and the noisy store (the hello store printing through
//! `console` and `process.stdout` on every call), copied there, import
//! `agentchaos-adapter` from the project's `node_modules`; a short campaign
//! on a built-in scenario through the noisy store passes: the installed
//! kit speaks the protocol and keeps the wire clean.
//!
//! Skipped on a dev machine, with a line on stderr, without `node`, `npm`
//! or the kit's dependencies (`npm ci --prefix chaos/adapters/node`, which
//! also fills npm's cache with the pinned versions); fails under
//! `CI=true`.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};

use crate::campaign;
use crate::node;

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

fn npm(args: &[&str], cwd: &Path) -> String {
    let out = Command::new("npm")
        .args(args)
        .args(["--no-audit", "--no-fund", "--silent"])
        .current_dir(cwd)
        .output()
        .unwrap();
    checked(&format!("npm {}", args.join(" ")), out)
}

/// The versions the kit's `package-lock.json` pins, as `overrides`.
fn pinned() -> Value {
    let lock: Value =
        serde_json::from_slice(&std::fs::read(node::kit_dir().join("package-lock.json")).unwrap())
            .unwrap();
    let overrides: serde_json::Map<String, Value> = lock["packages"]
        .as_object()
        .unwrap()
        .iter()
        .filter_map(|(path, p)| Some((path.strip_prefix("node_modules/")?, p)))
        .map(|(name, p)| (name.to_string(), p["version"].clone()))
        .collect();
    assert!(overrides.contains_key("ajv"), "{overrides:?}");
    Value::Object(overrides)
}

#[test]
fn the_packed_kit_installs_into_a_project_and_runs_a_campaign() {
    let test = "the_packed_kit_installs_into_a_project_and_runs_a_campaign";
    if !node::kit_available(test) || !node::npm_available(test) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let kit = node::kit_dir();
    let packed = npm(
        &[
            "pack",
            kit.to_str().unwrap(),
            "--pack-destination",
            tmp.path().to_str().unwrap(),
        ],
        tmp.path(),
    );
    let tarball = tmp.path().join(packed.trim());
    assert_eq!(
        tarball.file_name().unwrap(),
        "agentchaos-adapter-0.1.0.tgz",
        "{packed}"
    );

    let project = tmp.path().join("store");
    std::fs::create_dir(&project).unwrap();
    let manifest = json!({
        "name": "a-store",
        "private": true,
        "type": "module",
        "overrides": pinned(),
    });
    std::fs::write(project.join("package.json"), manifest.to_string()).unwrap();
    npm(
        &["install", "--prefer-offline", tarball.to_str().unwrap()],
        &project,
    );
    let ajv: Value = serde_json::from_slice(
        &std::fs::read(project.join("node_modules/ajv/package.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(ajv["version"], pinned()["ajv"]);
    for store in ["hello_store.mjs", "noisy_store.mjs"] {
        std::fs::copy(kit.join("examples").join(store), project.join(store)).unwrap();
    }

    let report_file = project.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .current_dir(&project)
        .args(["run", "--quiet", "--adapter", "node noisy_store.mjs"])
        .args([
            "--scenario",
            "builtin:approval-gated",
            "--nemesis",
            "points",
        ])
        .args(["--trials", "1", "--restarts", "none", "--json"])
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
    let report: Value = serde_json::from_slice(&std::fs::read(&report_file).unwrap()).unwrap();
    assert_eq!(report["error_count"], 0, "{stdout}");
    assert_eq!(report["trials"], 1, "{stdout}");
    campaign::assert_rows(
        &report,
        "pass",
        &["orphan_marking", "effect_ledger", "outcome"],
        &stdout,
    );
}
