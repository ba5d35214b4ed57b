//! Shared helpers for the criterion benches: where bench files live, the
//! baselines, and the sessions the benches read.
//!
//! The baselines themselves (raw `write`+`fdatasync` of the same bytes,
//! SQLite WAL `synchronous=FULL` one transaction per event) and the event
//! generator live in `agentstore::bench`, because `agentstore bench` runs
//! them too; they are re-exported here so both measure the same thing. This
//! crate must never put bench files on tmpfs, where fsync is a no-op.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentstore::bench::machine::Machine;
use agentstore::event::{Effect, ResultStatus, RunStatus};
use agentstore::session::{Session, SessionOptions};
use agentstore::{Durability, Event, EventLog, SessionId, SessionPaths};
use criterion::Criterion;

pub use agentstore::bench::methods::{RawWriter, SyncMethod, Workload};
pub use agentstore::bench::sqlite::SqliteLog;
pub use agentstore::bench::workload::{event_of_line_size, line_for};

/// Event (line) sizes of the append benches.
pub const SIZES: [usize; 3] = [200, 4096, 65536];

/// Criterion settings that keep `cargo bench` to a few minutes on 2 cores
/// (no plots: rendering them takes longer than short benches do).
pub fn short() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10)
        .without_plots()
        .configure_from_args()
}

/// `n` under `cargo bench`; a hundredth of it when the bench binary runs as
/// a test (`cargo test --all-targets` runs each bench once, without
/// `--bench`), so that the test suite does not build million-event sessions.
pub fn scaled(n: u64) -> u64 {
    if std::env::args().any(|a| a == "--bench") {
        n
    } else {
        (n / 100).max(10)
    }
}

/// A fresh directory for bench files under `$AGENTBENCH_DIR`, or else under
/// `default_base` (benches pass `env!("CARGO_TARGET_TMPDIR")`, which is on
/// the disk holding `target/`). Refuses RAM-backed file systems.
pub fn bench_dir(default_base: &str) -> tempfile::TempDir {
    let base = std::env::var_os("AGENTBENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default_base));
    std::fs::create_dir_all(&base)
        .unwrap_or_else(|e| panic!("cannot create bench dir {}: {e}", base.display()));
    let machine = Machine::probe(&base);
    assert!(
        !machine.fs_is_volatile(),
        "{} is on {}: fsync is a no-op there; set AGENTBENCH_DIR to a directory on a real disk",
        base.display(),
        machine.fs_type
    );
    eprintln!(
        "agentbench: bench files in {} ({}; {}, {} cores, {})",
        base.display(),
        machine.fs_type,
        machine.cpu_model,
        machine.cores,
        machine.kernel
    );
    tempfile::Builder::new()
        .prefix("agentbench-")
        .tempdir_in(&base)
        .unwrap_or_else(|e| panic!("cannot create a directory in {}: {e}", base.display()))
}

/// Paths of session `name` under `root`.
pub fn paths(root: &Path, name: &str) -> SessionPaths {
    SessionPaths::new(
        root,
        &SessionId::new(name).expect("bench session names are valid"),
    )
}

/// A new event log (no session rules) in `root`.
pub fn new_log(root: &Path, name: &str, durability: Durability) -> EventLog {
    EventLog::create(&paths(root, name), durability).expect("create bench log")
}

/// The raw floor: `pwrite` + `fdatasync` appending `line` to `path`.
pub fn raw_floor(path: &Path, line: &[u8]) -> RawWriter {
    RawWriter::create(
        path,
        SyncMethod::Fdatasync,
        Workload::Append { len: line.len() },
        line,
    )
    .unwrap_or_else(|_| panic!("cannot open {} for the raw floor", path.display()))
}

/// A raw writer of `line` into a pre-zeroed 4 MiB file at `path`, made
/// durable by `method` (the floor of an append into pre-allocated space).
pub fn raw_zeroed(path: &Path, method: SyncMethod, line: &[u8]) -> RawWriter {
    agentstore::bench::methods::prewrite(path).expect("pre-zero");
    RawWriter::create(path, method, Workload::PreZeroed { len: line.len() }, line)
        .unwrap_or_else(|_| panic!("open {} for {}", path.display(), method.label()))
}

/// Something appended to in a bench: the store, the floor or SQLite.
pub trait Sink {
    fn append(&mut self);
}

impl Sink for RawWriter {
    fn append(&mut self) {
        self.op().expect("raw append");
    }
}

impl Sink for SqliteLog {
    fn append(&mut self) {
        self.op().expect("sqlite insert");
    }
}

/// An event log and the event it appends.
#[derive(Debug)]
pub struct LogSink {
    pub log: EventLog,
    pub event: Event,
}

impl Sink for LogSink {
    fn append(&mut self) {
        self.log.append(&self.event).expect("store append");
    }
}

/// A sink that starts over in a fresh directory every `limit` bytes, so a
/// fast no-sync bench does not write gigabytes. The swap happens outside
/// the timed part (see [`Rotating::time`]).
pub struct Rotating<S> {
    base: PathBuf,
    make: Box<dyn FnMut(&Path) -> S>,
    current: Option<(tempfile::TempDir, S)>,
    per_op: u64,
    written: u64,
    limit: u64,
}

impl<S: Sink> Rotating<S> {
    /// `make` builds a sink in the directory it is given; each op writes `per_op` bytes.
    pub fn new(
        base: &Path,
        per_op: usize,
        limit: u64,
        make: impl FnMut(&Path) -> S + 'static,
    ) -> Rotating<S> {
        Rotating {
            base: base.to_path_buf(),
            make: Box::new(make),
            current: None,
            per_op: per_op as u64,
            written: 0,
            limit,
        }
    }

    /// Times `iters` appends (criterion's `iter_custom`), rotating between them.
    pub fn time(&mut self, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            if self.current.is_none() || self.written + self.per_op > self.limit {
                // Drop the old sink first: its files go before any write-back.
                self.current = None;
                let dir = tempfile::tempdir_in(&self.base).expect("rotation dir");
                let sink = (self.make)(dir.path());
                self.current = Some((dir, sink));
                self.written = 0;
            }
            let (_, sink) = self.current.as_mut().expect("a sink was just made");
            let t0 = Instant::now();
            sink.append();
            total += t0.elapsed();
            self.written += self.per_op;
        }
        total
    }
}

impl<S> std::fmt::Debug for Rotating<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotating")
            .field("base", &self.base)
            .field("written", &self.written)
            .field("limit", &self.limit)
            .finish()
    }
}

/// The scan baseline: read the file and parse each line with serde_json
/// into a `Value`, nothing else (no checksum, no schema). Returns the
/// number of lines.
pub fn serde_value_scan(path: &Path) -> io::Result<u64> {
    let mut reader = BufReader::with_capacity(256 * 1024, File::open(path)?);
    let mut line = Vec::with_capacity(4096);
    let mut n = 0;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(n);
        }
        let v: serde_json::Value = serde_json::from_slice(&line).map_err(io::Error::other)?;
        std::hint::black_box(v);
        n += 1;
    }
}

/// How a generated session is shaped.
#[derive(Debug, Clone, Copy)]
pub struct SessionShape {
    /// Total events, `session_created` included (rounded up to whole turns).
    pub events: u64,
    /// A `compaction` every this many turns, 0 for none (a long agent
    /// session compacts its context; without it the active branch, and with
    /// it every snapshot, grows without bound).
    pub compact_every_turns: u64,
    /// Take a checkpoint at the first turn boundary at or after this many events.
    pub checkpoint_at: Option<u64>,
}

/// Events per generated turn.
pub const EVENTS_PER_TURN: u64 = 8;

/// Builds a session that follows every session rule: turns of run_started,
/// user_message, assistant_message, tool_call, tool_started, tool_result,
/// assistant_message, run_finished, with a periodic compaction. Written
/// with durability None (the benches read it from the page cache).
pub fn build_session(root: &Path, workspace: &Path, name: &str, shape: SessionShape) -> Session {
    let id = SessionId::new(name).expect("bench session names are valid");
    let mut s = Session::create(
        root,
        &id,
        workspace,
        SessionOptions {
            durability: Durability::None,
            workspace: None,
        },
    )
    .expect("create bench session");
    let mut leaf: Option<String> = None;
    let mut turn = 0u64;
    let mut checkpointed = false;
    while s.projection().next_seq() < shape.events {
        if let Some(at) = shape.checkpoint_at {
            if !checkpointed && s.projection().next_seq() >= at {
                s.checkpoint().expect("bench checkpoint");
                checkpointed = true;
            }
        }
        if shape.compact_every_turns > 0
            && turn > 0
            && turn.is_multiple_of(shape.compact_every_turns)
        {
            if let Some(l) = leaf.clone() {
                // The compaction extends the leaf and becomes the new leaf.
                leaf = Some(push(
                    &mut s,
                    Event::Compaction {
                        parent: Some(l.clone()),
                        summary: format!("summary of turns up to {turn}"),
                        first_kept_id: l,
                        tokens_before: 100_000,
                    },
                ));
            }
        }
        let run_id = format!("r{turn}");
        let call_id = format!("c{turn}");
        push(
            &mut s,
            Event::RunStarted {
                run_id: run_id.clone(),
            },
        );
        let user = push(
            &mut s,
            Event::UserMessage {
                parent: leaf.clone(),
                text: format!("turn {turn}: the test in parser.rs fails, please fix it"),
            },
        );
        let thought = push(
            &mut s,
            Event::AssistantMessage {
                parent: Some(user),
                text: "Let me read the parser first.".into(),
            },
        );
        let call = push(
            &mut s,
            Event::ToolCall {
                parent: Some(thought),
                call_id: call_id.clone(),
                tool: "read_file".into(),
                args: serde_json::json!({ "path": "src/parser.rs" }),
                effect: Effect::None,
                operation_id: None,
                target: Some("src/parser.rs".into()),
                needs_approval: false,
            },
        );
        push(
            &mut s,
            Event::ToolStarted {
                call_id: call_id.clone(),
            },
        );
        let result = push(
            &mut s,
            Event::ToolResult {
                parent: Some(call),
                call_id,
                status: ResultStatus::Ok,
                output: Some(serde_json::json!(
                    "fn parse(input: &str) -> Result<Ast> { ... }"
                )),
                blob: None,
            },
        );
        let answer = push(
            &mut s,
            Event::AssistantMessage {
                parent: Some(result),
                text: "The off-by-one is in the tokenizer; fixed.".into(),
            },
        );
        push(
            &mut s,
            Event::RunFinished {
                run_id,
                status: RunStatus::Completed,
            },
        );
        leaf = Some(answer);
        turn += 1;
    }
    s
}

fn push(s: &mut Session, e: Event) -> String {
    s.append(e).expect("bench event").id().clone()
}

/// A field of /proc/self/status in KiB (`"VmRSS:"`, `"VmHWM:"`); Linux only.
pub fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentstore::session::SnapshotUse;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap()
    }

    #[test]
    fn generated_sessions_follow_the_rules_and_reopen() {
        let d = dir();
        let s = build_session(
            d.path(),
            d.path(),
            "gen",
            SessionShape {
                events: 200,
                compact_every_turns: 5,
                checkpoint_at: Some(100),
            },
        );
        let n = s.projection().next_seq();
        assert!((200..=200 + EVENTS_PER_TURN).contains(&n), "{n}");
        drop(s);
        let (s, report) = Session::open(
            d.path(),
            &SessionId::new("gen").unwrap(),
            SessionOptions::default(),
        )
        .unwrap();
        assert_eq!(s.projection().next_seq(), n);
        // The checkpoint at the turn boundary at or after 100 (turns are 8 or 9 events).
        match report.snapshot {
            SnapshotUse::Used { next_seq } => {
                assert!((100..110).contains(&next_seq), "{next_seq}");
                assert_eq!(report.replayed, n - next_seq);
            }
            other => panic!("snapshot not used: {other:?}"),
        }
        assert!(s.projection().compaction().is_some());
    }

    #[test]
    fn the_scan_baseline_counts_lines_and_refuses_non_json() {
        let d = dir();
        let s = build_session(
            d.path(),
            d.path(),
            "scan",
            SessionShape {
                events: 50,
                compact_every_turns: 0,
                checkpoint_at: None,
            },
        );
        let n = s.projection().next_seq();
        let events = s.paths().events();
        // A log at rest: closing cuts the zeros pre-allocated after its last line.
        drop(s);
        assert_eq!(serde_value_scan(&events).unwrap(), n);
        std::fs::write(d.path().join("bad"), b"{\"a\":1}\nnot json\n").unwrap();
        assert!(serde_value_scan(&d.path().join("bad")).is_err());
    }

    #[test]
    fn rotation_starts_a_fresh_sink_past_the_limit() {
        let d = dir();
        let line = line_for(&event_of_line_size(200, 0), 0);
        let made = std::rc::Rc::new(std::cell::Cell::new(0));
        let counter = made.clone();
        let mut rot = Rotating::new(d.path(), line.len(), 1000, move |dir| {
            counter.set(counter.get() + 1);
            LogSink {
                log: new_log(dir, "r", Durability::None),
                event: event_of_line_size(200, 0),
            }
        });
        rot.time(12);
        // 5 appends of 200 bytes fit in 1000 bytes: 12 appends need 3 sinks.
        assert_eq!(made.get(), 3);
        drop(rot);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn proc_status_reads_memory_fields() {
        let rss = proc_status_kib("VmRSS:").unwrap();
        let hwm = proc_status_kib("VmHWM:").unwrap();
        assert!(rss > 0 && hwm >= rss, "rss {rss} hwm {hwm}");
        assert_eq!(proc_status_kib("NoSuchField:"), None);
    }

    #[test]
    fn bench_dirs_refuse_tmpfs() {
        if !Path::new("/dev/shm").is_dir() {
            return;
        }
        let refused = std::panic::catch_unwind(|| bench_dir("/dev/shm"));
        // AGENTBENCH_DIR, when set, overrides the default base.
        if std::env::var_os("AGENTBENCH_DIR").is_none() {
            assert!(refused.is_err());
        }
    }
}
