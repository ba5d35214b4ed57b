//! The tracer on real processes: what it counts, following children and
//! threads, and each fault's effect on disk and on the process.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use agentchaos::nemesis::syscall::{
    trace, Errno, Exit, FaultOutcome, FaultPlan, Outcome, SyscallFault, TraceConfig, Traced,
};

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

/// Runs the probe under the tracer; returns the outcome and its stdout.
fn run(root: &Path, script: &[&str], fault: Option<FaultPlan>, record: bool) -> (Outcome, String) {
    run_with(root, script, fault, record, false)
}

/// [`run`], with the reads of files under the root traced or not.
fn run_with(
    root: &Path,
    script: &[&str],
    fault: Option<FaultPlan>,
    record: bool,
    reads: bool,
) -> (Outcome, String) {
    let config = TraceConfig {
        root: root.to_path_buf(),
        fault,
        record,
        seccomp: true,
        reads,
    };
    let mut traced = Traced::spawn(probe(root, script), config).expect("spawn under ptrace");
    let mut out = traced.stdout.take().expect("stdout is piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).expect("read probe stdout");
        s
    });
    let outcome = traced.run().expect("trace run");
    (outcome, reader.join().expect("reader thread"))
}

/// Events as text, with the root spelled ROOT.
fn lines(outcome: &Outcome, root: &Path) -> Vec<String> {
    let root = fs::canonicalize(root).unwrap();
    outcome
        .events
        .iter()
        .map(|e| e.to_string().replace(root.to_str().unwrap(), "ROOT"))
        .collect()
}

/// The descriptors from 3 up that a child of this process inherits: open
/// here without close-on-exec (a wrapper such as `perf record`, or a CI
/// runner, may pass one down to the test process). Read from
/// `/proc/self/fdinfo`, not from anything the tracer reports.
fn inherited_fds() -> Vec<i64> {
    const O_CLOEXEC: u64 = 0o2000000;
    let mut fds: Vec<i64> = fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd >= 3)
        .filter(|fd| {
            // Gone since the listing (the listing's own descriptor): not inherited.
            let Ok(info) = fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) else {
                return false;
            };
            info.lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| u64::from_str_radix(f.trim(), 8).ok())
                .is_some_and(|flags| flags & O_CLOEXEC == 0)
        })
        .collect();
    fds.sort_unstable();
    fds
}

/// `lines` with each descriptor spelled as on a plain `cargo test`, where
/// the probe inherits none from 3 up: a child takes the lowest free number,
/// so every descriptor `inherited` below one moves it up by one.
fn renumbered_fds(lines: Vec<String>, inherited: &[i64]) -> Vec<String> {
    let renumber = |n: &str| {
        let fd: i64 = n.parse().expect("a descriptor");
        (fd - inherited.iter().filter(|&&i| i < fd).count() as i64).to_string()
    };
    lines
        .into_iter()
        .map(|line| {
            let mut out = String::new();
            let mut rest = line.as_str();
            while let Some(at) = rest.find("fd ") {
                let (before, after) = rest.split_at(at + "fd ".len());
                let digits =
                    after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                out.push_str(before);
                out.push_str(&renumber(&after[..digits]));
                rest = &after[digits..];
            }
            out.push_str(rest);
            match out.rsplit_once(" = ") {
                Some((call, fd)) if call.contains(" openat(") => {
                    format!("{call} = {}", renumber(fd))
                }
                _ => out,
            }
        })
        .collect()
}

fn killed() -> Exit {
    Exit::Signal {
        signal: "SIGKILL".into(),
    }
}

fn at(at: u64, fault: SyscallFault) -> Option<FaultPlan> {
    Some(FaultPlan { at, fault })
}

#[test]
fn trace_lists_exactly_the_file_mutating_calls_under_the_root() {
    let root = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let outside = elsewhere.path().join("outside.txt");
    let outside = outside.to_str().unwrap();
    let script = [
        format!("create {outside}"),
        format!("write {outside} not counted"),
        format!("fsync {outside}"),
        "create a.txt".into(),
        "write a.txt hello".into(),
        "fsync a.txt".into(),
        "ack one".into(),
        "rename a.txt b.txt".into(),
        "fsyncdir .".into(),
        "mkdir d".into(),
        "append d/x".into(),
        "writev d/x a|bb|ccc".into(),
        "fdatasync d/x".into(),
        "open b.txt".into(),
        "pwrite b.txt 2 XY".into(),
        "ftruncate d/x 3".into(),
        "unlink b.txt".into(),
        "rmdir d".into(),
    ];
    let script: Vec<&str> = script.iter().map(String::as_str).collect();
    let (outcome, stdout) = run(root.path(), &script, None, false);
    assert_eq!(
        stdout,
        "ack one\nerr rmdir d: Directory not empty (os error 39)\ndone\n"
    );
    assert_eq!(outcome.exit, Exit::Code { code: 0 });
    assert_eq!(
        renumbered_fds(lines(&outcome, root.path()), &inherited_fds()),
        [
            "#0 openat(ROOT/a.txt, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0o666) = 4",
            "#1 write(fd 4 = ROOT/a.txt, 5 bytes) = 5",
            "#2 fsync(fd 4 = ROOT/a.txt) = 0",
            "#3 rename(ROOT/a.txt -> ROOT/b.txt) = 0",
            "#4 fsync(fd 5 = ROOT) = 0",
            "#5 mkdir(ROOT/d, 0o777) = 0",
            "#6 openat(ROOT/d/x, O_WRONLY|O_CREAT|O_APPEND|O_CLOEXEC, 0o666) = 5",
            "#7 writev(fd 5 = ROOT/d/x, 6 bytes) = 6",
            "#8 fdatasync(fd 5 = ROOT/d/x) = 0",
            "#9 pwrite64(fd 6 = ROOT/b.txt, 2 bytes at offset 2) = 2",
            "#10 ftruncate(fd 5 = ROOT/d/x, 3) = 0",
            "#11 unlink(ROOT/b.txt) = 0",
            "#12 rmdir(ROOT/d) = -1 ENOTEMPTY",
        ]
    );
}

#[test]
fn children_and_threads_are_followed() {
    let root = tempfile::tempdir().unwrap();
    let script = [
        "append a",
        "write a parent",
        "child",
        "append b",
        "write b child",
        "thread",
        "append c",
        "write c thread",
    ];
    let (outcome, stdout) = run(root.path(), &script, None, false);
    assert_eq!(stdout, "done\nchild exited 0\ndone\n");
    let paths: Vec<String> = outcome
        .events
        .iter()
        .map(|e| {
            e.call.paths()[0]
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(paths, ["a", "a", "b", "b", "c", "c"]);
    let pids: BTreeSet<i32> = outcome.events.iter().map(|e| e.pid).collect();
    assert_eq!(
        pids.len(),
        3,
        "parent, child process, thread: {:?}",
        outcome.events
    );
    assert_eq!(fs::read_to_string(root.path().join("c")).unwrap(), "thread");
}

#[test]
fn kill_before_and_kill_after_differ_on_disk() {
    let script = [
        "create a.txt",
        "write a.txt hello",
        "rename a.txt b.txt",
        "ack after",
    ];
    let exists = |root: &Path, name: &str| root.join(name).exists();

    // #1 is the write, #2 the rename.
    let root = tempfile::tempdir().unwrap();
    let (outcome, stdout) = run(root.path(), &script, at(1, SyscallFault::KillBefore), false);
    assert_eq!(outcome.exit, killed());
    assert_eq!(stdout, "");
    assert_eq!(fs::read(root.path().join("a.txt")).unwrap(), b"");

    let root = tempfile::tempdir().unwrap();
    let (outcome, _) = run(root.path(), &script, at(1, SyscallFault::KillAfter), false);
    assert_eq!(outcome.exit, killed());
    assert_eq!(fs::read(root.path().join("a.txt")).unwrap(), b"hello");

    let root = tempfile::tempdir().unwrap();
    let (outcome, stdout) = run(root.path(), &script, at(2, SyscallFault::KillBefore), false);
    assert_eq!((outcome.exit.clone(), stdout.as_str()), (killed(), ""));
    assert!(exists(root.path(), "a.txt") && !exists(root.path(), "b.txt"));
    let report = outcome.fault.unwrap().to_string();
    let canon = fs::canonicalize(root.path()).unwrap();
    assert_eq!(
        report
            .replace(canon.to_str().unwrap(), "ROOT")
            .split(" in pid ")
            .next()
            .unwrap(),
        "kill before syscall #2: rename(ROOT/a.txt -> ROOT/b.txt)"
    );
    assert_eq!(outcome.events.len(), 3);
    assert_eq!(outcome.events[2].result, None, "killed before it returned");

    let root = tempfile::tempdir().unwrap();
    let (outcome, stdout) = run(root.path(), &script, at(2, SyscallFault::KillAfter), false);
    assert_eq!((outcome.exit, stdout.as_str()), (killed(), ""));
    assert!(!exists(root.path(), "a.txt") && exists(root.path(), "b.txt"));
    assert_eq!(outcome.events[2].result, Some(0));
}

#[test]
fn a_torn_write_leaves_exactly_the_kept_prefix() {
    let root = tempfile::tempdir().unwrap();
    let script = ["create a.txt", "fill a.txt 10000 x", "ack after"];
    let (outcome, stdout) = run(
        root.path(),
        &script,
        at(1, SyscallFault::TearWrite { keep: 4097 }),
        false,
    );
    assert_eq!((outcome.exit, stdout.as_str()), (killed(), ""));
    assert_eq!(
        fs::read(root.path().join("a.txt")).unwrap(),
        vec![b'x'; 4097]
    );
    assert_eq!(outcome.events[1].result, Some(4097));

    // writev: the iovecs are cut in the tracee's memory.
    let root = tempfile::tempdir().unwrap();
    let script = ["create a.txt", "writev a.txt aaaa|bbbb|cccc"];
    let (outcome, _) = run(
        root.path(),
        &script,
        at(1, SyscallFault::TearWrite { keep: 6 }),
        false,
    );
    assert_eq!(outcome.exit, killed());
    assert_eq!(fs::read(root.path().join("a.txt")).unwrap(), b"aaaabb");
}

#[test]
fn a_fault_that_does_not_fit_is_reported_and_nothing_is_injected() {
    let root = tempfile::tempdir().unwrap();
    let script = ["create a.txt", "write a.txt hello", "fsync a.txt"];
    let (outcome, stdout) = run(
        root.path(),
        &script,
        at(2, SyscallFault::TearWrite { keep: 1 }),
        false,
    );
    assert_eq!(
        (outcome.exit, stdout.as_str()),
        (Exit::Code { code: 0 }, "done\n")
    );
    let report = outcome.fault.unwrap();
    assert!(
        matches!(&report.outcome, FaultOutcome::NotApplicable { reason, .. } if reason == "only writes can be torn")
    );

    let (outcome, _) = run(
        root.path(),
        &script,
        at(1, SyscallFault::TearWrite { keep: 5 }),
        false,
    );
    assert!(matches!(
        outcome.fault.unwrap().outcome,
        FaultOutcome::NotApplicable { .. }
    ));

    let (outcome, _) = run(root.path(), &script, at(9, SyscallFault::KillBefore), false);
    let report = outcome.fault.unwrap();
    assert_eq!(report.outcome, FaultOutcome::NotReached { counted: 3 });
    assert_eq!(
        report.to_string(),
        "kill before syscall #9: not reached, the run made only 3 counted syscalls"
    );
}

#[test]
fn enospc_on_a_write_fails_it_inside_the_process_which_goes_on() {
    let root = tempfile::tempdir().unwrap();
    let script = [
        "append a.txt",
        "write a.txt first",
        "write a.txt second",
        "write a.txt third",
    ];
    let fault = at(
        2,
        SyscallFault::Fail {
            errno: Errno::ENOSPC,
        },
    );
    let (outcome, stdout) = run(root.path(), &script, fault, false);
    assert_eq!(
        stdout,
        "err write a.txt second: No space left on device (os error 28)\ndone\n"
    );
    assert_eq!(outcome.exit, Exit::Code { code: 0 });
    assert_eq!(
        fs::read_to_string(root.path().join("a.txt")).unwrap(),
        "firstthird"
    );
    assert_eq!(outcome.events[2].result, Some(-28));
    let fault = renumbered_fds(lines(&outcome, root.path()), &inherited_fds());
    let fault_line = outcome.fault.unwrap().to_string();
    assert!(
        fault_line.starts_with("fail with ENOSPC syscall #2: write(fd "),
        "{fault_line}"
    );
    assert!(
        fault[2].starts_with("#2 write(fd 3 = ROOT/a.txt"),
        "{fault:?}"
    );
}

#[test]
fn eio_on_fdatasync_fails_it_and_the_recording_keeps_no_sync() {
    let root = tempfile::tempdir().unwrap();
    let script = [
        "append a.txt",
        "write a.txt x",
        "fdatasync a.txt",
        "write a.txt y",
        "fdatasync a.txt",
    ];
    let fault = at(2, SyscallFault::Fail { errno: Errno::EIO });
    let (outcome, stdout) = run(root.path(), &script, fault, true);
    assert_eq!(
        stdout,
        "err fdatasync a.txt: Input/output error (os error 5)\ndone\n"
    );
    assert_eq!(outcome.exit, Exit::Code { code: 0 });
    assert_eq!(fs::read_to_string(root.path().join("a.txt")).unwrap(), "xy");
    let ops: Vec<String> = outcome
        .oplog
        .unwrap()
        .ops
        .iter()
        .map(|o| o.op.to_string())
        .collect();
    assert_eq!(
        ops,
        [
            "create a.txt",
            "write a.txt bytes 0..1",
            "write a.txt bytes 1..2",
            "fdatasync a.txt"
        ]
    );
}

#[test]
fn monitor_kill_ends_a_hung_process() {
    let root = tempfile::tempdir().unwrap();
    let mut cmd = probe(root.path(), &["append a", "wait-stdin", "write a never"]);
    cmd.stdin(Stdio::piped());
    let mut traced = Traced::spawn(
        cmd,
        TraceConfig {
            root: root.path().into(),
            fault: None,
            record: false,
            seccomp: true,
            reads: false,
        },
    )
    .unwrap();
    let _stdin = traced.stdin.take(); // held open: the probe blocks reading it
    let monitor = traced.monitor();
    let killer = std::thread::spawn(move || {
        while monitor.counted_syscalls() < 1 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        monitor.kill();
    });
    let outcome = traced.run().unwrap();
    killer.join().unwrap();
    assert_eq!(outcome.exit, killed());
    assert_eq!(outcome.events.len(), 1);
}

#[test]
fn spawn_errors_are_one_line() {
    let root = tempfile::tempdir().unwrap();
    let config = TraceConfig {
        root: root.path().join("missing"),
        fault: None,
        record: false,
        seccomp: true,
        reads: false,
    };
    let err = trace(probe(root.path(), &[]), config)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("trace root ") && err.ends_with("No such file or directory (os error 2)"),
        "{err}"
    );
    let config = TraceConfig {
        root: root.path().into(),
        fault: None,
        record: false,
        seccomp: true,
        reads: false,
    };
    let err = trace(Command::new(root.path().join("no-such-program")), config)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("cannot start ") && !err.contains('\n'),
        "{err}"
    );
}

#[test]
fn a_traced_process_dropped_without_run_is_killed_not_left_stopped() {
    let root = tempfile::tempdir().unwrap();
    let config = TraceConfig {
        root: root.path().into(),
        fault: None,
        record: false,
        seccomp: true,
        reads: false,
    };
    let traced = Traced::spawn(probe(root.path(), &["create a.txt"]), config).unwrap();
    let pid = traced.pid();
    drop(traced);
    // Reaped: no such process any more (not even a zombie).
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    assert!(!root.path().join("a.txt").exists());
}

#[test]
fn a_kill_in_a_child_process_kills_the_whole_tree() {
    let root = tempfile::tempdir().unwrap();
    let script = [
        "append a",
        "write a parent",
        "child",
        "append b",
        "write b x",
        "write b y",
    ];
    // #0 append a, #1 write a, #2 append b (child), #3 write b x.
    let (outcome, stdout) = run(root.path(), &script, at(3, SyscallFault::KillAfter), false);
    assert_eq!(outcome.exit, killed(), "the parent dies with its child");
    assert_eq!(stdout, "", "the parent never saw its child exit");
    assert_ne!(outcome.events[3].pid, outcome.events[0].pid);
    assert_eq!(fs::read_to_string(root.path().join("b")).unwrap(), "x");
}

/// Runs the probe under the tracer with the reads traced.
fn run_reads(root: &Path, script: &[&str], fault: Option<FaultPlan>) -> (Outcome, String) {
    run_with(root, script, fault, false, true)
}

/// read, readv and pread64 of a file under the root, counted apart from
/// the file-mutating calls; a failed, a short (read and readv, whose cut
/// iovec is put back) and an interrupted read, each seen by the process,
/// which goes on.
#[test]
fn reads_are_counted_apart_and_failed_or_shortened_in_the_process() {
    let root = tempfile::tempdir().unwrap();
    let script = [
        "create a.txt",
        "write a.txt 0123456789abcdef",
        "ropen a.txt",
        "read a.txt 8",
        "readv a.txt 4 6",
        "pread a.txt 2 5",
    ];
    let (clean, stdout) = run_reads(root.path(), &script, None);
    assert_eq!(
        stdout,
        "read 8: 01234567\nread 8: 89ab|cdef\nread 5: 23456\ndone\n"
    );
    let reads: Vec<String> = clean
        .reads
        .iter()
        .map(|e| format!("{} {:?}", e.sysno, e.result))
        .collect();
    assert_eq!(reads, ["read Some(8)", "readv Some(8)", "pread64 Some(5)"]);
    let (plain, _) = run(root.path(), &script, None, false);
    assert_eq!(
        lines(&clean, root.path()),
        lines(&plain, root.path()),
        "the file-mutating calls keep their indices"
    );
    assert!(plain.reads.is_empty());
    let cases = [
        (0, SyscallFault::FailRead { errno: Errno::EIO }, "err read a.txt 8: Input/output error (os error 5)\nread 10: 0123|456789\nread 5: 23456\ndone\n"),
        (0, SyscallFault::ShortRead { keep: 3 }, "read 3: 012\nread 10: 3456|789abc\nread 5: 23456\ndone\n"),
        (1, SyscallFault::ShortRead { keep: 5 }, "read 8: 01234567\nread 5: 89ab|c\nread 5: 23456\ndone\n"),
        (2, SyscallFault::FailRead { errno: Errno::EINTR }, "read 8: 01234567\nread 8: 89ab|cdef\nerr pread a.txt 2 5: Interrupted system call (os error 4)\ndone\n"),
    ];
    for (at, fault, expected) in cases {
        let (outcome, stdout) = run(root.path(), &script, at_read(at, fault), false);
        assert_eq!(stdout, expected, "{fault:?} at read {at}");
        let report = outcome.fault.unwrap();
        assert!(
            matches!(report.outcome, FaultOutcome::Injected { .. }),
            "{report}"
        );
        assert!(
            report.to_string().contains(&format!(" read #{at}: ")),
            "{report}"
        );
        assert_eq!(outcome.exit, Exit::Code { code: 0 });
    }
}

fn at_read(at: u64, fault: SyscallFault) -> Option<FaultPlan> {
    Some(FaultPlan { at, fault })
}

#[test]
fn a_full_disk_fails_every_call_that_needs_space_from_its_call_on() {
    let root = tempfile::tempdir().unwrap();
    let script = [
        "append a.txt",
        "write a.txt first",
        "fdatasync a.txt",
        "append b.txt",
        "rename a.txt c.txt",
        "append c.txt",
        "write c.txt second",
        "mkdir d",
    ];
    let (outcome, stdout) = run(root.path(), &script, at(2, SyscallFault::DiskFull), false);
    // From #2 on: the sync, the rename and the open of a file already there
    // need no space and run; creating b.txt, the write and mkdir fail.
    assert_eq!(
        stdout,
        "err append b.txt: No space left on device (os error 28)\n\
         err write c.txt second: No space left on device (os error 28)\n\
         err mkdir d: No space left on device (os error 28)\ndone\n"
    );
    assert_eq!(outcome.exit, Exit::Code { code: 0 });
    assert_eq!(
        fs::read_to_string(root.path().join("c.txt")).unwrap(),
        "first"
    );
    assert!(!root.path().join("b.txt").exists() && !root.path().join("d").exists());
    let failed: Vec<bool> = outcome
        .events
        .iter()
        .map(|e| e.result.unwrap() == -28)
        .collect();
    assert_eq!(
        failed,
        [false, false, false, true, false, false, true, true]
    );
    let report = outcome.fault.unwrap().to_string();
    assert!(
        report.starts_with(
            "disk full from syscall #2 on (ENOSPC at every call that needs space); the first it failed, #3: openat("
        ) && report.contains("b.txt"),
        "{report}"
    );

    // Nothing from the planned call on needs space: said, not "injected".
    let script = ["append c.txt", "fsync c.txt"];
    let (outcome, _) = run(root.path(), &script, at(1, SyscallFault::DiskFull), false);
    assert_eq!(
        outcome.fault.unwrap().outcome,
        FaultOutcome::NoSpaceNeeded { counted: 2 }
    );
}
