//! Recording on real processes: the op log replayed onto the snapshot taken
//! before the run reproduces the final directory byte for byte, and stdout
//! writes are placed exactly between ops.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use agentchaos::nemesis::powerloss::{Op, OpLog, Simulator, Tree};
use agentchaos::nemesis::syscall::{Exit, TraceConfig, Traced};

use crate::support;

/// The scripted file-operation program (`examples/agentchaos-fsprobe.rs`).
fn probe_bin() -> std::path::PathBuf {
    support::workspace_example("agentchaos-fsprobe")
}

fn probe(root: &Path, script: &[&str]) -> Command {
    let mut cmd = Command::new(probe_bin());
    cmd.current_dir(root)
        .args(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    cmd
}

fn record(root: &Path, script: &[&str]) -> (OpLog, String) {
    let config = TraceConfig {
        root: root.to_path_buf(),
        fault: None,
        record: true,
        seccomp: true,
        reads: false,
    };
    let mut traced = Traced::spawn(probe(root, script), config).unwrap();
    let mut out = traced.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let outcome = traced.run().unwrap();
    assert_eq!(outcome.exit, Exit::Code { code: 0 });
    (outcome.oplog.unwrap(), reader.join().unwrap())
}

#[test]
fn the_op_log_replayed_on_the_snapshot_reproduces_the_final_directory() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    fs::write(r.join("existing.txt"), "0123456789").unwrap();
    fs::write(r.join("victim.txt"), "replaced by a rename").unwrap();
    fs::write(r.join("trunc.txt"), "emptied by O_TRUNC").unwrap();
    fs::create_dir(r.join("old")).unwrap();
    fs::write(r.join("old/gone.txt"), "unlinked").unwrap();
    let before = Tree::capture(r).unwrap();

    let script = [
        "open existing.txt",
        "pwrite existing.txt 2 XY",
        "write existing.txt ab",
        "append existing.txt",
        "write existing.txt +tail",
        // Linux quirk: pwrite on an O_APPEND fd appends anyway.
        "pwrite existing.txt 0 !!",
        "create trunc.txt",
        "write trunc.txt new",
        "mkdir d",
        "create d/tmp",
        "writev d/tmp one|two|three",
        "fill d/tmp 100000 z",
        "fsync d/tmp",
        "rename d/tmp victim.txt",
        "fsyncdir .",
        "unlink old/gone.txt",
        "rmdir old",
        "dsync d/sync.log",
        "write d/sync.log durable-on-return",
        "create d/cut",
        "write d/cut 0123456789",
        "ftruncate d/cut 4",
        "ftruncate d/cut 6",
        "child",
        "append d/child.log",
        "write d/child.log from a child process",
        "thread",
        "append d/thread.log",
        "write d/thread.log from a thread",
    ];
    let (log, stdout) = record(r, &script);
    assert_eq!(stdout, "done\nchild exited 0\ndone\n");
    assert_eq!(log.gaps, []);
    assert_eq!(
        fs::read_to_string(r.join("existing.txt")).unwrap(),
        "abXY456789+tail!!"
    );

    let after = Tree::capture(r).unwrap();
    let copy = tempfile::tempdir().unwrap();
    before.materialize(copy.path()).unwrap();
    log.replay(copy.path(), log.ops.len()).unwrap();
    assert_eq!(Tree::capture(copy.path()).unwrap(), after);

    let mut sim = Simulator::new(&before, &log);
    sim.advance_to(log.ops.len()).unwrap();
    assert_eq!(sim.volatile_tree(), after);

    // The O_DSYNC write is followed by its implied fdatasync.
    let i = log
        .ops
        .iter()
        .position(|o| matches!(&o.op, Op::Write { path, .. } if path.ends_with("sync.log")))
        .unwrap();
    assert_eq!(
        log.ops[i + 1].op,
        Op::Fdatasync {
            path: "d/sync.log".into()
        }
    );

    // The log survives JSON.
    let json = serde_json::to_string(&log).unwrap();
    assert_eq!(serde_json::from_str::<OpLog>(&json).unwrap(), log);
}

#[test]
fn stdout_writes_are_placed_exactly_between_ops() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    // The harness pattern: spawn and run on a thread of its own.
    let tracer = std::thread::spawn(move || {
        let script = [
            "append a",
            "write a one\\n",
            "fdatasync a",
            "ack 1",
            "wait-stdin",
            "write a two\\n",
            "fdatasync a",
            "ack 2",
        ];
        let mut cmd = probe(&r, &script);
        cmd.stdin(Stdio::piped());
        let config = TraceConfig {
            root: r.clone(),
            fault: None,
            record: true,
            seccomp: true,
            reads: false,
        };
        let mut traced = Traced::spawn(cmd, config).unwrap();
        tx.send((
            traced.stdin.take().unwrap(),
            traced.stdout.take().unwrap(),
            traced.monitor(),
        ))
        .unwrap();
        traced.run()
    });
    let (mut stdin, stdout, monitor) = rx.recv().unwrap();
    let mut stdout = BufReader::new(stdout);
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ack 1\n");
    let ack1_end = line.len() as u64;
    // The probe now waits on stdin: the count is exact.
    assert_eq!(monitor.recorded_ops(), 3);
    stdin.write_all(b"go\n").unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ack 2\n");
    let ack2_end = ack1_end + line.len() as u64;
    let outcome = tracer.join().unwrap().unwrap();
    let log = outcome.oplog.unwrap();
    assert_eq!(log.ops_before_output(ack1_end - 1), Some(3));
    assert_eq!(log.ops_before_output(ack2_end - 1), Some(5));
    assert_eq!(log.ops_before_output(10_000), None);
}

#[test]
fn a_recorded_run_without_a_directory_fsync_loses_its_file_on_power_loss() {
    use agentchaos::nemesis::powerloss::{Limits, Model};
    let root = tempfile::tempdir().unwrap();
    fs::create_dir(root.path().join("s")).unwrap();
    let before = Tree::capture(root.path()).unwrap();
    let (log, _) = record(
        root.path(),
        &[
            "append s/events.jsonl",
            "write s/events.jsonl e1\\n",
            "fdatasync s/events.jsonl",
            "ack e1",
        ],
    );
    let acked_after = log.ops_before_output(0).unwrap();
    assert_eq!(acked_after, 3);
    let mut sim = Simulator::new(&before, &log);
    sim.advance_to(acked_after).unwrap();
    let states = sim.crash_states(Model::Strict, &Limits::default());
    let lose_all = &states.states[1];
    assert_eq!(lose_all.tree.file("s/events.jsonl"), None);
    assert_eq!(
        lose_all.describe(),
        "the directory entry of s/events.jsonl (created by op #0) is lost: directory s was not fsynced after it"
    );
    let dir = tempfile::tempdir().unwrap();
    lose_all.materialize(&dir.path().join("state")).unwrap();
    assert!(
        dir.path().join("state/s").is_dir() && !dir.path().join("state/s/events.jsonl").exists()
    );
}

#[test]
fn what_cannot_be_modelled_is_reported_as_a_gap() {
    let root = tempfile::tempdir().unwrap();
    let (log, _) = record(
        root.path(),
        &["create a", "unlink a", "write a into the void"],
    );
    let ops: Vec<String> = log.ops.iter().map(|o| o.op.to_string()).collect();
    assert_eq!(ops, ["create a", "unlink a"]);
    assert_eq!(log.gaps.len(), 1);
    let canon = fs::canonicalize(root.path()).unwrap();
    assert_eq!(
        log.gaps[0].what.replace(canon.to_str().unwrap(), "ROOT"),
        "ROOT/a (deleted) was already unlinked; calls on it are not modelled"
    );
    assert_eq!(log.gaps[0].syscall, 2);
}
