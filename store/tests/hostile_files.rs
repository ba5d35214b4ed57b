//! What a hostile hand may put where the store keeps its files: a FIFO, a
//! socket or a directory (refused unopened: opening a FIFO blocks), a file
//! far larger than the store ever writes (refused unread), a symlink to a
//! file outside ROOT (refused, its bytes never quoted), a blob that is not
//! what the log says. Every command answers with one line and a nonzero
//! exit, never hangs, never grows without bound; `fsck` checks every blob
//! the log references.

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentstore::event::{BlobRef, Effect, ResultStatus};
use agentstore::{Event, Session, SessionId, SessionOptions, SessionPaths};

use common::{binary, scratch, serial};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `agentstore args` with no stdin; a run still going after a minute
/// (a hang: a FIFO opened for reading blocks forever) is killed and fails.
fn agentstore(args: &[&str]) -> Run {
    let mut child = Command::new(binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("agentstore {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    let run = Run {
        code: out.status.code().expect("killed by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !run.stderr.contains("panicked"),
        "{args:?} panicked: {}",
        run.stderr
    );
    run
}

/// Asserts a refusal: a nonzero exit and one line (on stderr, or on
/// stdout for `fsck` and `ls`, which list what they found) holding every
/// one of `wanted`.
fn assert_refused(run: &Run, what: &str, wanted: &[&str]) {
    assert_ne!(run.code, 0, "{what}: {}{}", run.stdout, run.stderr);
    let line = if run.stderr.is_empty() {
        run.stdout
            .lines()
            .find(|l| wanted.iter().all(|w| l.contains(w)))
    } else {
        assert_eq!(run.stderr.lines().count(), 1, "{what}: {}", run.stderr);
        Some(run.stderr.as_str())
    };
    let line = line.unwrap_or_else(|| panic!("{what}: no line with {wanted:?}: {}", run.stdout));
    for w in wanted {
        assert!(line.contains(w), "{what}: {w:?} not in {line}");
    }
}

const SECRET: &str = "root:$6$SECRET-HASH-DO-NOT-PRINT:19000:0:99999:7:::\n";

struct Fixture {
    _dir: tempfile::TempDir,
    root: String,
    paths: SessionPaths,
    blob: BlobRef,
    /// A file outside ROOT, like /etc/shadow.
    outside: PathBuf,
}

/// Session `s`: a tool call whose result is a blob, checkpointed, then two
/// more events; and a file outside ROOT.
fn fixture() -> Fixture {
    let dir = scratch();
    let root = dir.path().join("root");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let outside = dir.path().join("shadow");
    std::fs::write(&outside, SECRET).unwrap();
    let id = SessionId::new("s").unwrap();
    let mut s = Session::create(&root, &id, &ws, SessionOptions::default()).unwrap();
    let u = s
        .append(Event::UserMessage {
            parent: None,
            text: "cat the log".into(),
        })
        .unwrap();
    let c = s
        .append(Event::ToolCall {
            parent: Some(u.id().to_string()),
            call_id: "c1".into(),
            tool: "cat".into(),
            args: serde_json::json!({}),
            effect: Effect::None,
            operation_id: None,
            target: None,
            needs_approval: false,
        })
        .unwrap();
    let blob = s.put_blob("x".repeat(10_000).as_bytes()).unwrap();
    s.append(Event::ToolResult {
        parent: Some(c.id().to_string()),
        call_id: "c1".into(),
        status: ResultStatus::Ok,
        output: None,
        blob: Some(blob.clone()),
    })
    .unwrap();
    s.checkpoint().unwrap();
    s.append(Event::RunStarted { run_id: "r".into() }).unwrap();
    let paths = s.paths().clone();
    drop(s);
    Fixture {
        root: root.to_str().unwrap().to_string(),
        _dir: dir,
        paths,
        blob,
        outside,
    }
}

impl Fixture {
    fn blob_path(&self) -> PathBuf {
        self.paths.blobs().join(&self.blob.digest)
    }
    fn run(&self, command: &str) -> Run {
        agentstore(&[command, &self.root, "s"][..if command == "ls" { 2 } else { 3 }])
    }
}

/// Replaces `at` (a file) with something else.
fn replace(at: &Path, with: &str, outside: &Path) {
    let _ = std::fs::remove_file(at);
    match with {
        "FIFO" => nix::unistd::mkfifo(at, nix::sys::stat::Mode::S_IRWXU).unwrap(),
        "socket" => drop(std::os::unix::net::UnixListener::bind(at).unwrap()),
        "directory" => std::fs::create_dir(at).unwrap(),
        "symbolic link" => symlink(outside, at).unwrap(),
        other => unreachable!("{other}"),
    }
}

/// The commands that read each file, as the store keeps them.
fn readers_of(file: &str) -> &'static [&'static str] {
    match file {
        "events.jsonl" => &[
            "show",
            "fsck",
            "append",
            "recover",
            "context",
            "export",
            "checkpoint",
        ],
        "session.json" => &["fsck", "ls", "append", "recover", "checkpoint"],
        "snapshot.json" => &["fsck", "append", "recover", "context", "checkpoint"],
        "lease.json" => &["fsck", "append", "recover", "checkpoint"],
        "blob" => &["fsck"],
        other => unreachable!("{other}"),
    }
}

fn target(f: &Fixture, file: &str) -> PathBuf {
    match file {
        "blob" => f.blob_path(),
        name => f.paths.dir().join(name),
    }
}

/// How a refusal names `file`: its path, or for a blob `blobs/<digest>`
/// (fsck names the referencing event and the blob within the session).
fn named(f: &Fixture, file: &str) -> String {
    match file {
        "blob" => format!("blobs/{}", f.blob.digest),
        _ => target(f, file).display().to_string(),
    }
}

#[test]
fn a_file_that_is_not_a_regular_file_is_refused_unopened_by_every_command() {
    let _serial = serial();
    for file in [
        "events.jsonl",
        "session.json",
        "snapshot.json",
        "lease.json",
        "blob",
    ] {
        for kind in ["FIFO", "socket", "directory"] {
            let f = fixture();
            let at = target(&f, file);
            replace(&at, kind, &f.outside);
            for command in readers_of(file) {
                let run = f.run(command);
                let what = format!("{command} with a {kind} at {file}");
                assert_refused(&run, &what, &[&named(&f, file), kind]);
            }
            // Every other command either refuses or goes on, never hangs.
            for command in ["show", "fsck", "ls", "context", "export"] {
                f.run(command);
            }
        }
    }
}

#[test]
fn a_file_larger_than_the_store_ever_writes_is_refused_unread() {
    let _serial = serial();
    for file in ["session.json", "snapshot.json", "lease.json", "blob"] {
        let f = fixture();
        let at = target(&f, file);
        // 300 MB, sparse: reading it whole would take 300 MB of memory.
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&at)
            .unwrap()
            .set_len(300 << 20)
            .unwrap();
        for command in readers_of(file) {
            let run = f.run(command);
            let what = format!("{command} with a 300 MB {file}");
            let wanted = if file == "blob" {
                "the blob is 314572800 bytes, its reference says 10000"
            } else {
                "is 314572800 bytes, more than the"
            };
            assert_refused(&run, &what, &[&named(&f, file), wanted]);
        }
    }
}

#[test]
fn fsck_checks_every_blob_the_log_references() {
    let _serial = serial();
    // What is broken, how, and what fsck says.
    type Case<'a> = (&'a str, &'a dyn Fn(&Fixture), &'a str);
    let cases: [Case; 6] = [
        (
            "missing",
            &|f| std::fs::remove_file(f.blob_path()).unwrap(),
            "missing",
        ),
        (
            "changed",
            &|f| std::fs::write(f.blob_path(), "y".repeat(10_000)).unwrap(),
            "blob content does not match its digest",
        ),
        (
            "cut",
            &|f| std::fs::write(f.blob_path(), "x".repeat(9_999)).unwrap(),
            "the blob is 9999 bytes, its reference says 10000",
        ),
        (
            "a symlink to an identical file outside ROOT",
            &|f| {
                std::fs::write(&f.outside, "x".repeat(10_000)).unwrap();
                replace(&f.blob_path(), "symbolic link", &f.outside);
            },
            "symbolic link",
        ),
        (
            "blobs/ a symlink to a directory outside ROOT",
            &|f| {
                let elsewhere = f.outside.with_extension("d");
                std::fs::rename(f.paths.blobs(), &elsewhere).unwrap();
                symlink(&elsewhere, f.paths.blobs()).unwrap();
            },
            "symbolic link",
        ),
        (
            "a digest that names a path",
            &|f| {
                let calls = concat!(
                    r#"{"type":"tool_call","parent":null,"call_id":"c9","tool":"t","args":{},"effect":"none"}"#,
                    "\n",
                    r#"{"type":"tool_result","parent":null,"call_id":"c9","status":"ok","blob":{"digest":"../../../shadow","size":52}}"#,
                    "\n",
                );
                let mut child = Command::new(binary())
                    .args(["append", &f.root, "s"])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap();
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(calls.as_bytes())
                    .unwrap();
                assert!(child.wait().unwrap().success());
            },
            r#"is not 64 lowercase hex digits"#,
        ),
    ];
    for (what, break_it, wanted) in cases {
        let f = fixture();
        let run = f.run("fsck");
        assert_eq!(run.code, 0, "{what}: intact first: {}", run.stdout);
        break_it(&f);
        let run = f.run("fsck");
        assert_eq!(run.code, 1, "{what}: {}{}", run.stdout, run.stderr);
        assert_eq!(run.stdout.lines().count(), 1, "{what}: {}", run.stdout);
        let line = run.stdout.trim_end();
        let seq = if what.starts_with("a digest") { 6 } else { 3 };
        assert!(
            line.starts_with(&format!("s: event seq {seq} references blobs/"))
                && line.contains(wanted),
            "{what}: {line}"
        );
        assert!(!line.contains("SECRET"), "{what}: {line}");
    }
}

#[test]
fn reads_refuse_a_symlink_and_never_quote_what_it_points_to() {
    let _serial = serial();
    for file in ["events.jsonl", "session.json", "snapshot.json", "blob"] {
        let f = fixture();
        let at = target(&f, file);
        replace(&at, "symbolic link", &f.outside);
        let readers: &[&str] = match file {
            "events.jsonl" => &["show", "export", "context", "fsck"],
            "session.json" => &["ls", "fsck"],
            "snapshot.json" => &["context", "fsck"],
            _ => &["fsck"],
        };
        for command in readers {
            let run = f.run(command);
            let what = format!("{command} with {file} a symlink");
            assert_refused(&run, &what, &[&named(&f, file), "symbolic link"]);
            assert!(
                !run.stdout.contains("SECRET") && !run.stderr.contains("SECRET"),
                "{what}: {}{}",
                run.stdout,
                run.stderr
            );
        }
    }
    // The library's blob read too.
    let f = fixture();
    replace(&f.blob_path(), "symbolic link", &f.outside);
    let e = agentstore::blob::get(&f.paths, &f.blob).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // A session directory that is a symlink to one outside ROOT.
    let f = fixture();
    let elsewhere = f.outside.with_extension("session");
    std::fs::rename(f.paths.dir(), &elsewhere).unwrap();
    symlink(&elsewhere, f.paths.dir()).unwrap();
    for command in ["show", "export", "context", "fsck"] {
        let run = f.run(command);
        let what = format!("{command} in a symlinked session directory");
        assert_refused(
            &run,
            &what,
            &[&f.paths.dir().display().to_string(), "symbolic link"],
        );
    }
}

#[test]
fn a_damaged_session_json_is_refused_as_damage_not_rewritten() {
    let _serial = serial();
    let f = fixture();
    let meta = f.paths.meta();
    let mut bytes = std::fs::read(&meta).unwrap();
    // `"id": "s",` becomes `"id": "s".`: not JSON any more.
    let comma = bytes.windows(5).position(|w| w == b"\"s\",\n").unwrap() + 3;
    bytes[comma] = b'.';
    std::fs::write(&meta, &bytes).unwrap();
    for command in ["append", "recover", "checkpoint"] {
        let run = f.run(command);
        assert_refused(
            &run,
            command,
            &[
                &format!("damaged {}: line 2, byte offset {comma}", meta.display()),
                "not valid session metadata",
            ],
        );
        assert_eq!(std::fs::read(&meta).unwrap(), bytes, "{command} rewrote it");
    }
    let run = f.run("fsck");
    assert_refused(&run, "fsck", &["s: session.json: damaged", "line 2"]);
}
