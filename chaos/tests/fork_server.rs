//! Protocol version 2, the fork server (`chaos/PROTOCOL.md`, section 8):
//! a version 1 adapter is still started per process and passes; the Python
//! kit's hello store, a fork server, passes a sampled campaign with its
//! observations and its crash-point lives forked (the report counts how
//! the harness's adapter processes started); a forked child the harness
//! kills is really dead, also one whose agent died, and none is left over;
//! through an adapter that cannot fork, the warm processes started ahead
//! receive their session only after the process before them died.
//!
//! The kit's tests skip, saying so on stderr, when `python3` cannot import
//! the kit (it needs `jsonschema`); they fail under `CI=true`.

use crate::campaign;
use crate::python;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use crate::campaign::row;
use agentchaos::store::adapter::{AdapterBackend, Client, ClientOptions, ErrorKind, OpenArgs};
use agentchaos::store::{SessionSpec, StoreBackend};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

fn hello_store() -> String {
    python::adapter_command(&python::kit_dir().join("examples/hello_store.py"), &[])
}

/// The hello store as a command the client can start.
fn hello_command() -> Command {
    let mut cmd = python::python3();
    cmd.arg(python::kit_dir().join("examples/hello_store.py"));
    cmd
}

/// `/proc/PID/stat`'s state letter, or `None` once the process is gone (reaped).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

fn spec(dir: &Path) -> SessionSpec {
    let workspace = dir.join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    SessionSpec {
        root: dir.join("root"),
        session: "s".into(),
        workspace,
    }
}

fn open_args(spec: &SessionSpec, create: bool) -> OpenArgs {
    OpenArgs {
        root: spec.root.clone(),
        session: spec.session.clone(),
        workspace: Some(spec.workspace.clone()),
        create,
        lease: None,
    }
}

#[test]
fn a_version_1_adapter_is_started_for_every_process_and_passes() {
    let adapter = format!(
        "{} adapter --no-fork",
        support::workspace_bin("agentstore").display()
    );
    let (code, report, stdout) = campaign::run(
        &fixture(),
        &[
            "--adapter",
            &adapter,
            "--nemesis",
            "points",
            "--trials",
            "4",
        ],
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    assert_eq!(row(&report, "outcome")["verdict"], "pass", "{stdout}");
    let processes = &report["adapter_processes"];
    assert_eq!(processes["forked"], 0, "{processes}");
    assert!(processes["spawned"].as_u64().unwrap() > 4, "{processes}");
}

#[test]
fn the_hello_store_forks_its_observers_and_lives_and_passes() {
    if !python::kit_available("the_hello_store_forks_its_observers_and_lives_and_passes") {
        return;
    }
    let adapter = hello_store();
    let (code, report, stdout) = campaign::run(
        &fixture(),
        &[
            "--adapter",
            &adapter,
            "--nemesis",
            "points",
            "--trials",
            "4",
        ],
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    for key in ["orphan_marking", "effect_ledger", "writer_lock", "outcome"] {
        assert_eq!(row(&report, key)["verdict"], "pass", "{key}:\n{stdout}");
    }
    // Started with exec: one fork server for the whole campaign (its hello
    // negotiates version 2), shared by the probes', the trials' and the
    // shrinker's threads; everything else is forked from it.
    let processes = &report["adapter_processes"];
    let forked = processes["forked"].as_u64().unwrap();
    let trials = report["trials"].as_u64().unwrap();
    assert_eq!(processes["spawned"], 1, "{processes}");
    // Every trial observes at least twice (after the kill, at the end) and
    // forks at least one life's store process.
    assert!(forked >= 3 * trials, "{processes} for {trials} trials");
}

/// The witness store (`fixtures/witness_store.py`: the hello store as an
/// adapter that cannot fork) writing what it saw into `witness`.
fn witness_store(witness: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/witness_store.py");
    let assignment = format!("WITNESS_FILE={}", witness.display());
    let quoted = shlex::try_quote(&assignment).expect("no NUL in the path");
    format!("env {quoted} {}", python::adapter_command(&script, &[]))
}

/// What the witness store wrote: one JSON object per line.
fn witnessed(witness: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(witness).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The opens at which a process that had opened the same session before
/// was still alive: `(pid, the live ones)`. The probes' opens are left
/// out (the lock probe opens beside a live writer on purpose).
fn opened_beside_a_live_process(lines: &[serde_json::Value]) -> Vec<(u64, Vec<String>)> {
    let opens = lines
        .iter()
        .filter(|l| l.get("open").is_some() && l["parent"] != "probe");
    let alive = |l: &serde_json::Value| -> Vec<String> {
        let before = l["before"].as_object().unwrap();
        before
            .iter()
            .filter(|(_, a)| a.as_bool().unwrap())
            .map(|(p, _)| p.clone())
            .collect()
    };
    opens
        .map(|l| (l["pid"].as_u64().unwrap(), alive(l)))
        .filter(|(_, live)| !live.is_empty())
        .collect()
}

/// Through an adapter that cannot fork, the harness starts its observers
/// and the store processes of the lives it can hand them to ahead of their
/// use (warm processes): each receives its session only after every
/// process that had opened the session before is dead. The witness store
/// writes down, at every `open`, who opened the session before and
/// whether it still runs; its lines show whether the harness or an agent
/// started each process, so the warm lives are seen, not assumed. Two
/// trials (about 4 s); a process kept alive beside a second opener is
/// seen by the same check.
#[test]
fn a_warm_process_receives_its_session_only_after_the_previous_one_died() {
    if !python::kit_available(
        "a_warm_process_receives_its_session_only_after_the_previous_one_died",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let witness = dir.path().join("witness.jsonl");
    let adapter = witness_store(&witness);
    let (code, report, stdout) = campaign::run(
        &fixture(),
        &[
            "--adapter",
            &adapter,
            "--nemesis",
            "points",
            "--trials",
            "2",
        ],
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    assert_eq!(report["adapter_processes"]["forked"], 0, "{report}");
    let lines = witnessed(&witness);
    let opens: Vec<&serde_json::Value> = lines.iter().filter(|l| l.get("open").is_some()).collect();
    assert!(opens.len() >= 8, "{lines:?}");
    assert_eq!(opened_beside_a_live_process(&lines), vec![], "{lines:?}");
    // Warm lives: a process the harness started that wrote the agent's
    // events; and observers, which the harness started too.
    let started_by_harness: std::collections::BTreeSet<u64> = opens
        .iter()
        .filter(|l| l["parent"] == "run")
        .map(|l| l["pid"].as_u64().unwrap())
        .collect();
    let writers: std::collections::BTreeSet<u64> = lines
        .iter()
        .filter(|l| l.get("write").is_some())
        .map(|l| l["pid"].as_u64().unwrap())
        .collect();
    assert!(
        started_by_harness.intersection(&writers).next().is_some(),
        "no life's store process was started by the harness: {lines:?}"
    );
    assert!(
        started_by_harness.difference(&writers).next().is_some(),
        "no observer was started by the harness: {lines:?}"
    );

    // The check itself: a second process opening while the first one
    // still holds the session open is seen.
    let spec = spec(dir.path());
    let start = || {
        let mut cmd = python::python3();
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/witness_store.py"));
        cmd.env("WITNESS_FILE", dir.path().join("broken.jsonl"));
        Client::spawn(cmd, ClientOptions::default()).unwrap()
    };
    let mut first = start();
    first.open(&open_args(&spec, true)).unwrap();
    let mut second = start();
    let _ = second.open(&open_args(&spec, false));
    let broken = opened_beside_a_live_process(&witnessed(&dir.path().join("broken.jsonl")));
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert_eq!(broken[0].1, vec![first.pid().to_string()], "{broken:?}");
    first.kill().unwrap();
    second.kill().unwrap();
}

/// Both adapters written in Rust, agentstore's and the SQLite store's, are
/// fork servers through `agentchaos_protocol::fork_server`: the same
/// campaign, its processes forked, the same verdicts as version 1.
#[test]
fn the_rust_adapters_fork_their_observers_and_lives_and_pass() {
    let agentstore = format!("{} adapter", support::workspace_bin("agentstore").display());
    let sqlite = support::workspace_bin("agentchaos-sqlite-adapter");
    for adapter in [agentstore.as_str(), sqlite.to_str().unwrap()] {
        rust_adapter_forks_and_passes(adapter);
    }
}

fn rust_adapter_forks_and_passes(adapter: &str) {
    let (code, report, stdout) = campaign::run(
        &fixture(),
        &["--adapter", adapter, "--nemesis", "points", "--trials", "4"],
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    for key in ["orphan_marking", "effect_ledger", "writer_lock", "outcome"] {
        assert_eq!(row(&report, key)["verdict"], "pass", "{key}:\n{stdout}");
    }
    let processes = &report["adapter_processes"];
    let forked = processes["forked"].as_u64().unwrap();
    let trials = report["trials"].as_u64().unwrap();
    // One fork server for the campaign, as for the Python kit.
    assert_eq!(processes["spawned"], 1, "{processes}");
    assert!(forked >= 3 * trials, "{processes} for {trials} trials");
}

#[test]
fn a_forked_child_is_killed_for_real_and_its_lock_released() {
    if !python::kit_available("a_forked_child_is_killed_for_real_and_its_lock_released") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path());
    let server = Client::spawn_fork_server(hello_command(), ClientOptions::default()).unwrap();
    assert!(server.hello().fork, "{:?}", server.hello());
    let server = Arc::new(Mutex::new(server));

    let mut writer = Client::fork(&server).unwrap();
    assert!(!writer.hello().fork, "a forked child never forks");
    writer.open(&open_args(&spec, true)).unwrap();
    let pid = writer.pid();
    assert_eq!(state(pid).map(|s| s != 'Z'), Some(true), "pid {pid} runs");
    // A second child is refused while the first holds the session.
    let mut second = Client::fork(&server).unwrap();
    let refused = second.open(&open_args(&spec, false)).unwrap_err();
    assert_eq!(refused.refusal_kind(), Some(ErrorKind::Locked), "{refused}");
    second.shutdown().unwrap();

    // SIGKILL, then reaped by the server: gone, and its lock with it.
    let status = writer.kill().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    assert_eq!(state(pid), None, "pid {pid} is still there");
    let mut reader = Client::fork(&server).unwrap();
    reader.open(&open_args(&spec, false)).unwrap();
    assert_eq!(reader.events(None).unwrap().len(), 1);
    reader.close().unwrap();
    let reader_pid = reader.pid();
    reader.shutdown().unwrap();
    assert_eq!(state(reader_pid), None, "a shut-down child is reaped");
}

#[test]
fn the_store_processes_of_a_life_die_with_its_agent() {
    if !python::kit_available("the_store_processes_of_a_life_die_with_its_agent") {
        return;
    }
    let backend = AdapterBackend::forking(&hello_store()).unwrap();
    let adapters = backend
        .fork_life(3)
        .unwrap()
        .expect("the hello store is a fork server");
    let pids: Vec<u32> = adapters
        .arg(3)
        .split(';')
        .map(|p| p.split_once(':').unwrap().0.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 3);
    // An agent stand-in that would outlive the test: killed below.
    let mut agent = Command::new("sleep").arg("600").spawn().unwrap();
    let watcher = adapters.kill_with(agent.id()).unwrap();
    for &pid in &pids {
        assert!(matches!(state(pid), Some(s) if s != 'Z'), "pid {pid} runs");
    }
    agent.kill().unwrap();
    // The watcher ends once it has killed them; they stay zombies (the
    // server reaps them only when asked), so their pids are still theirs.
    watcher.join().unwrap();
    for &pid in &pids {
        // SIGKILL is delivered asynchronously: the process may still be
        // exiting (the bound only turns a kill that never lands into a failure).
        let bound = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut s = state(pid);
        while matches!(s, Some(c) if c != 'Z') && std::time::Instant::now() < bound {
            std::thread::yield_now();
            s = state(pid);
        }
        assert_eq!(s, Some('Z'), "pid {pid} did not die");
    }
    agent.wait().unwrap();
    drop(adapters);
    for &pid in &pids {
        assert_eq!(state(pid), None, "pid {pid} was not reaped");
    }
}

/// An observation changes nothing on disk: the WAL a killed SQLite writer
/// left is still there, byte for byte, and the database file too, after
/// the harness observed the session. Closing the observer's session would
/// have checkpointed the WAL into the database file and removed it.
#[test]
fn an_observation_leaves_the_store_s_files_as_it_found_them() {
    let sqlite = support::workspace_bin("agentchaos-sqlite-adapter");
    let dir = tempfile::tempdir().unwrap();
    let spec = SessionSpec {
        root: dir.path().join("root"),
        session: "s".into(),
        workspace: dir.path().join("ws"),
    };
    std::fs::create_dir_all(&spec.root).unwrap();
    std::fs::create_dir_all(&spec.workspace).unwrap();
    let mut writer = Client::spawn(Command::new(&sqlite), ClientOptions::default()).unwrap();
    writer.open(&open_args(&spec, true)).unwrap();
    let started = agentchaos_protocol::event::Event::RunStarted { run_id: "r".into() };
    writer.append(&started).unwrap();
    writer.kill().unwrap();
    let files = || -> std::collections::BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(&spec.root)
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&path).unwrap())
            })
            .collect()
    };
    let before = files();
    assert!(
        before.keys().any(|name| name.ends_with("-wal")),
        "the killed writer left its WAL: {:?}",
        before.keys()
    );
    let backend = AdapterBackend::new(sqlite.to_str().unwrap()).unwrap();
    let observed = backend.observe(&spec).unwrap();
    assert_eq!(
        observed.records.last().and_then(|r| r.event()),
        Some(&started),
        "the observer read the acknowledged event"
    );
    assert!(files() == before, "observing wrote to the store's files");
}
