//! The syscall tracer's seccomp filter: with it, the traced process stops
//! only at the calls the nemesis decodes; without it (`seccomp: false`,
//! `AGENTCHAOS_SECCOMP=off`), at every call. For the Rust adapter, the
//! Python kit's and the Node kit's hello stores: the counted calls, their
//! results and the recorded operations are the same either way, the same
//! fault plans hit the same calls with the same effects, a replay under the
//! filter repeats itself, and the filter spares stops. With reads traced
//! too, the file-mutating calls keep their indices, and the read faults
//! hit the same reads with the same effects with and without the filter.
//! Linux x86_64 only.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agentchaos::nemesis::powerloss::Op;
use agentchaos::nemesis::syscall::{
    Call, Errno, FaultPlan, Outcome, SyscallFault, TraceConfig, Traced,
};
use serde_json::{json, Value};

use crate::node;
use crate::python;

/// One session through an adapter: hello, open (creating), three appends,
/// the events read back, close; then end of input.
fn requests(root: &Path, ws: &Path) -> String {
    [
        json!({"id": 1, "op": "hello", "protocol": 1}),
        json!({"id": 2, "op": "open", "root": root, "session": "s", "workspace": ws, "create": true}),
        json!({"id": 3, "op": "append", "event": {"type": "run_started", "run_id": "r1"}}),
        json!({"id": 4, "op": "append", "event": {"type": "user_message", "parent": null, "text": "deploy v2"}}),
        json!({"id": 5, "op": "append", "event": {"type": "run_finished", "run_id": "r1", "status": "ok"}}),
        json!({"id": 6, "op": "events"}),
        json!({"id": 7, "op": "close"}),
    ]
    .iter()
    .map(|r| format!("{r}\n"))
    .collect()
}

/// What one traced session showed, in words that do not depend on pids,
/// on the scratch directory (`DIR`) or on the clock: the adapter's
/// replies, every counted call with its result, the fault report, the
/// recorded operations (a write by its place and length: the stores write
/// timestamps and pids) and how the process ended.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    lines: Vec<String>,
}

struct Session {
    seen: Seen,
    outcome: Outcome,
}

/// Runs the session through `adapter` under the tracer, recording, with
/// `fault`, the filter on or off, and the reads traced or not.
fn session(
    adapter: &dyn Fn() -> Command,
    fault: Option<FaultPlan>,
    seccomp: bool,
    reads: bool,
) -> Session {
    let dir = tempfile::tempdir().unwrap();
    let (root, ws) = (dir.path().join("root"), dir.path().join("ws"));
    fs::create_dir_all(&root).unwrap();
    fs::create_dir_all(&ws).unwrap();
    let mut cmd = adapter();
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let config = TraceConfig {
        root: root.clone(),
        fault,
        record: true,
        seccomp,
        reads,
    };
    let mut traced = Traced::spawn(cmd, config).expect("spawn under ptrace");
    let mut stdin = traced.stdin.take().unwrap();
    let mut stdout = traced.stdout.take().unwrap();
    let input = requests(&root, &ws);
    // A killed adapter closes its stdin: a broken pipe is its answer.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let outcome = traced.run().expect("trace run");
    writer.join().unwrap();
    let replies = reader.join().unwrap();
    let dir = fs::canonicalize(dir.path()).unwrap();
    let dir = dir.to_str().unwrap();
    let mut lines: Vec<String> = replies
        .lines()
        .map(|l| format!("< {}", without_timestamps(l)))
        .collect();
    lines.extend(outcome.events.iter().map(|e| e.to_string()));
    lines.extend(outcome.reads.iter().map(|e| format!("read {e}")));
    if let Some(report) = &outcome.fault {
        // Without the pid it names (`… in pid 1234 (it returned -5)`).
        let text = report.to_string();
        let text = match text.split_once(" in pid ") {
            Some((head, tail)) => {
                format!(
                    "{head}{}",
                    tail.trim_start_matches(|c: char| c.is_ascii_digit())
                )
            }
            None => text,
        };
        lines.push(format!("fault: {text}"));
    }
    if let Some(log) = &outcome.oplog {
        lines.extend(log.ops.iter().map(|o| {
            let at = o.origin.as_ref().map(|o| o.syscall);
            let op = match &o.op {
                Op::Write { path, offset, data } => format!(
                    "write {} at {offset}, {} bytes",
                    path.display(),
                    data.0.len()
                ),
                op => format!("{op:?}"),
            };
            format!("op {op} from call {at:?}")
        }));
        lines.extend(log.outputs.iter().map(|m| {
            format!(
                "{} stdout bytes at {} after op {}",
                m.len, m.offset, m.after_ops
            )
        }));
        lines.extend(
            log.gaps
                .iter()
                .map(|g| format!("gap at call {}: {}", g.syscall, g.what)),
        );
    }
    lines.push(format!("exit: {:?}", outcome.exit));
    let lines = lines
        .iter()
        .map(|l| without_lock_sizes(&l.replace(dir, "DIR")))
        .collect();
    Session {
        seen: Seen { lines },
        outcome,
    }
}

/// A reply with the value of every `"ts"` key (the events' clock) left out.
/// A line naming a write of the session's lock file with its size
/// replaced by `N`: the lock holds its writer's pid, whose digits differ
/// between runs (`…/lock, 5 bytes at offset 0) = 5`,
/// `write sessions/s/lock at 0, 5 bytes …`).
fn without_lock_sizes(line: &str) -> String {
    if !line.contains("s/lock") {
        return line.to_string();
    }
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find(" bytes") {
        let digits = rest[..at]
            .bytes()
            .rev()
            .take_while(u8::is_ascii_digit)
            .count();
        out.push_str(&rest[..at - digits]);
        out.push_str(if digits > 0 { "N bytes" } else { " bytes" });
        rest = &rest[at + " bytes".len()..];
    }
    out.push_str(rest);
    match out.rsplit_once(") = ") {
        Some((head, tail)) if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) => {
            format!("{head}) = N")
        }
        _ => out,
    }
}

#[test]
fn a_lock_write_is_named_without_its_size() {
    assert_eq!(
        without_lock_sizes(
            "#6 pwrite64(fd 3 = DIR/root/sessions/s/lock, 12345 bytes at offset 0) = 12345"
        ),
        "#6 pwrite64(fd 3 = DIR/root/sessions/s/lock, N bytes at offset 0) = N"
    );
    assert_eq!(
        without_lock_sizes("op write sessions/s/lock at 0, 5 bytes from call Some(6)"),
        "op write sessions/s/lock at 0, N bytes from call Some(6)"
    );
    let other = "#11 pwrite64(fd 5 = DIR/root/sessions/s/session.tmp, 199 bytes at offset 0) = 199";
    assert_eq!(without_lock_sizes(other), other);
}

fn without_timestamps(reply: &str) -> String {
    let mut out = String::new();
    let mut rest = reply;
    while let Some(at) = rest.find("\"ts\":\"") {
        let value = at + "\"ts\":\"".len();
        out.push_str(&rest[..value]);
        rest = &rest[value..];
        rest = &rest[rest.find('"').unwrap_or(rest.len())..];
    }
    out.push_str(rest);
    out
}

/// The faults a trial could plan at call `at` of `outcome`: a torn write
/// (half its bytes), or a failed call (EIO), and a kill after the last one.
fn faults(outcome: &Outcome) -> Vec<FaultPlan> {
    let n = outcome.events.len();
    let mut at: Vec<usize> = vec![0, n / 4, n / 2, 3 * n / 4, n - 1];
    at.dedup();
    let mut plans: Vec<FaultPlan> = at
        .iter()
        .map(|&i| FaultPlan {
            at: i as u64,
            fault: match outcome.events[i].call {
                Call::Write { len, .. } if len > 1 => SyscallFault::TearWrite { keep: len / 2 },
                _ => SyscallFault::Fail { errno: Errno::EIO },
            },
        })
        .collect();
    plans.push(FaultPlan {
        at: (n - 1) as u64,
        fault: SyscallFault::KillAfter,
    });
    plans
}

/// The whole comparison for one adapter; returns the stops (filter on,
/// off) of the crash-free session.
fn same_with_and_without_the_filter(name: &str, adapter: &dyn Fn() -> Command) -> (u64, u64) {
    let on = session(adapter, None, true, false);
    let off = session(adapter, None, false, false);
    assert!(
        on.outcome.seccomp && !off.outcome.seccomp,
        "{name}: the filter is in effect exactly when asked for"
    );
    assert!(
        !on.outcome.events.is_empty(),
        "{name}: the session makes counted calls: {:#?}",
        on.seen
    );
    assert_eq!(
        on.seen, off.seen,
        "{name}: the filter changed the traced calls"
    );
    assert!(
        on.outcome.stops < off.outcome.stops,
        "{name}: {} stops with the filter, {} without",
        on.outcome.stops,
        off.outcome.stops
    );
    for plan in faults(&on.outcome) {
        let filtered = session(adapter, Some(plan), true, false);
        let every = session(adapter, Some(plan), false, false);
        assert_eq!(
            filtered.seen, every.seen,
            "{name}: the plan {plan:?} hit another call, or did something else, under the filter"
        );
        assert!(
            filtered.seen.lines.iter().any(|l| l.starts_with("fault: ")),
            "{name}: {plan:?} has a report"
        );
    }
    // A replay under the filter: the same plan, the same run.
    let plan = faults(&on.outcome)[1];
    assert_eq!(
        session(adapter, Some(plan), true, false).seen,
        session(adapter, Some(plan), true, false).seen,
        "{name}: a replay of {plan:?} under the filter differs"
    );
    let _ = writeln!(
        std::io::stderr(),
        "{name}: {} ptrace stops per session with the seccomp filter, {} without; {} counted calls",
        on.outcome.stops,
        off.outcome.stops,
        on.outcome.events.len()
    );
    (on.outcome.stops, off.outcome.stops)
}

/// The read faults a trial could plan at the reads of `outcome`: EIO at
/// the first and the last, EINTR in the middle, and a short read (half of
/// it) at the first that read 2 bytes or more.
fn read_faults(outcome: &Outcome) -> Vec<FaultPlan> {
    let n = outcome.reads.len();
    let mut plans = vec![
        FaultPlan {
            at: 0,
            fault: SyscallFault::FailRead { errno: Errno::EIO },
        },
        FaultPlan {
            at: (n / 2) as u64,
            fault: SyscallFault::FailRead {
                errno: Errno::EINTR,
            },
        },
        FaultPlan {
            at: (n - 1) as u64,
            fault: SyscallFault::FailRead { errno: Errno::EIO },
        },
    ];
    if let Some(r) = outcome.reads.iter().find(|r| r.result >= Some(2)) {
        plans.push(FaultPlan {
            at: r.index,
            fault: SyscallFault::ShortRead {
                keep: r.result.unwrap() as u64 / 2,
            },
        });
    }
    plans
}

/// With the reads traced: the file-mutating calls as without them, the
/// reads the same with the filter and without, and each read fault the
/// same either way. Returns the stops of the crash-free session with the
/// filter, reads traced and not.
fn reads_the_same_with_and_without_the_filter(
    name: &str,
    adapter: &dyn Fn() -> Command,
) -> (u64, u64) {
    let plain = session(adapter, None, true, false);
    let on = session(adapter, None, true, true);
    let off = session(adapter, None, false, true);
    assert!(
        !on.outcome.reads.is_empty(),
        "{name}: the session reads its log back: {:#?}",
        on.seen
    );
    let without_reads = |s: &Seen| -> Vec<String> {
        s.lines
            .iter()
            .filter(|l| !l.starts_with("read "))
            .cloned()
            .collect()
    };
    assert_eq!(
        without_reads(&on.seen),
        plain.seen.lines,
        "{name}: tracing the reads changed the file-mutating calls"
    );
    assert_eq!(
        on.seen, off.seen,
        "{name}: the filter changed the traced reads"
    );
    for plan in read_faults(&on.outcome) {
        let filtered = session(adapter, Some(plan), true, false);
        let every = session(adapter, Some(plan), false, false);
        assert_eq!(
            filtered.seen, every.seen,
            "{name}: the plan {plan:?} hit another read, or did something else, under the filter"
        );
        let report = filtered
            .seen
            .lines
            .iter()
            .find(|l| l.starts_with("fault: "))
            .unwrap_or_else(|| panic!("{name}: {plan:?} has a report"));
        assert!(
            report.contains(&format!(" read #{}: read", plan.at))
                || report.contains(&format!(" read #{}: pread64", plan.at)),
            "{name}: {report}"
        );
        assert!(
            filtered.outcome.reads.len() > plan.at as usize,
            "{name}: a read fault traces the reads by itself"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "{name}: {} ptrace stops per session with the seccomp filter and the reads traced, {} without the reads; {} counted reads",
        on.outcome.stops,
        plain.outcome.stops,
        on.outcome.reads.len()
    );
    (on.outcome.stops, plain.outcome.stops)
}

#[test]
fn reads_are_traced_apart_and_faulted_alike_for_the_rust_adapter() {
    let (reads, plain) = reads_the_same_with_and_without_the_filter("reference-adapter", &|| {
        let mut cmd = Command::new(agentchaos());
        cmd.arg("reference-adapter");
        cmd
    });
    assert!(reads > plain, "reads cost stops: {reads} against {plain}");
}

#[test]
fn reads_are_traced_apart_and_faulted_alike_for_the_python_hello_store() {
    if !python::kit_available("reads_are_traced_apart_and_faulted_alike_for_the_python_hello_store")
    {
        return;
    }
    let script = python::kit_dir().join("examples/hello_store.py");
    reads_the_same_with_and_without_the_filter("Python hello store", &|| {
        let mut cmd = python::python3();
        cmd.arg(&script);
        cmd
    });
}

fn agentchaos() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agentchaos"))
}

#[test]
fn the_filter_changes_nothing_the_rust_adapter_is_traced_for() {
    let (on, off) = same_with_and_without_the_filter("reference-adapter", &|| {
        let mut cmd = Command::new(agentchaos());
        cmd.arg("reference-adapter");
        cmd
    });
    // A Rust store makes few calls the nemesis does not decode.
    assert!(on * 2 < off, "{on} stops with the filter, {off} without");
}

#[test]
fn the_filter_changes_nothing_the_python_hello_store_is_traced_for() {
    if !python::kit_available("the_filter_changes_nothing_the_python_hello_store_is_traced_for") {
        return;
    }
    let script = python::kit_dir().join("examples/hello_store.py");
    let (on, off) = same_with_and_without_the_filter("Python hello store", &|| {
        let mut cmd = python::python3();
        cmd.arg(&script);
        cmd
    });
    // The interpreter's imports stop no more.
    assert!(on * 10 < off, "{on} stops with the filter, {off} without");
}

#[test]
fn the_filter_changes_nothing_the_node_hello_store_is_traced_for() {
    if !node::kit_available("the_filter_changes_nothing_the_node_hello_store_is_traced_for") {
        return;
    }
    let script = node::kit_dir().join("examples/hello_store.mjs");
    let (on, off) = same_with_and_without_the_filter("Node hello store", &|| {
        let mut cmd = Command::new("node");
        cmd.arg(&script);
        cmd
    });
    assert!(on * 10 < off, "{on} stops with the filter, {off} without");
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.json")
}

/// `agentchaos run --nemesis syscall` through the Rust adapter, with
/// `AGENTCHAOS_SECCOMP` set to `setting`: the JSON report.
fn syscall_campaign(setting: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let adapter = format!("{} reference-adapter", agentchaos().display());
    let out = Command::new(agentchaos())
        .env("AGENTCHAOS_SECCOMP", setting)
        .args([
            "run",
            "--quiet",
            "--nemesis",
            "syscall",
            "--restarts",
            "none",
        ])
        .args(["--trials", "12", "--seed", "7", "--scenario"])
        .arg(fixture())
        .args(["--adapter", &adapter, "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "AGENTCHAOS_SECCOMP={setting}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&fs::read(&json).unwrap()).unwrap()
}

#[test]
fn a_syscall_campaign_enumerates_and_faults_the_same_calls_with_the_filter_and_without() {
    let on = syscall_campaign("on");
    let off = syscall_campaign("off");
    let (on, off) = (&on["scenarios"][0], &off["scenarios"][0]);
    for key in ["syscalls_total", "syscalls_covered", "trials", "errors"] {
        assert_eq!(on[key], off[key], "{key}: {on} against {off}");
    }
    assert!(on["syscalls_total"].as_u64().unwrap() > 0, "{on}");
    let stops = |s: &Value| s["syscall_trace_stops"].as_u64().unwrap();
    assert!(
        stops(on) < stops(off),
        "the report's stops: {} with the filter, {} without",
        stops(on),
        stops(off)
    );
}

#[test]
fn a_bad_seccomp_setting_is_a_usage_error_in_one_line() {
    let out = Command::new(agentchaos())
        .env("AGENTCHAOS_SECCOMP", "sometimes")
        .args(["run", "--quiet", "--nemesis", "syscall", "--scenario"])
        .arg(fixture())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr,
        "agentchaos: AGENTCHAOS_SECCOMP=\"sometimes\": expected on or off\n"
    );
}
