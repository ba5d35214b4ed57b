//! `agentstore-pg bench`: what the PostgreSQL store costs against
//! agentstore on this machine, measured side by side in one run.
//!
//! Two sections:
//! - **appends**: 1, 8 and 64 concurrent sessions (one thread and one
//!   connection or log per session, each appending to its own session) on
//!   the PostgreSQL store, PostgreSQL's floor (one prepared `INSERT`,
//!   autocommitted), agentstore `Sync` and agentstore `Batch`; p50 and p99
//!   append latency, total events/s and CPU per append (this process, and
//!   the private cluster's processes), as ratios against agentstore
//!   `Sync` with one session. Every store append is a real, durable
//!   append through the store's library API ([`PgStore::append`] with
//!   `synchronous_commit = on`, [`Session::append`]) of a `user_message`
//!   whose JSON is [`EVENT_JSON_BYTES`] bytes. The configurations are
//!   measured **interleaved**: [`ROUNDS`] rounds, each giving every
//!   configuration one slice, in an order rotated per round, so machine
//!   noise hits all of them alike;
//! - **takeover**: a worker holding the lease with ttl T appends the start
//!   of a run and a started tool call in a process of its own
//!   (`agentstore-pg bench-holder`, [`hold`]), then is SIGKILLed (its
//!   connection closed, its file lock gone, its lease record in place,
//!   agentstore's pre-allocated log tail left as it was); another worker waits
//!   for the expiry, acquires, recovers (the run closed, the call marked
//!   uncertain) and appends. Reported per session length: the lease wait
//!   (about T by construction), open + recovery, the first acknowledged
//!   append, and the total from death to that append;
//! - **connection faults** (the PostgreSQL store alone: agentstore has no
//!   connection): an owner's acknowledged append, a taken-over owner's
//!   write refused `fenced`, and a takeover (open with recovery and the
//!   first append, after a lease that lapsed with a run and a tool call
//!   open), each under one [`ConnectionState`]: a live connection; one the
//!   server ended right before the write (`pg_terminate_backend`, as a
//!   server restart leaves it: the store reconnects under the same lease
//!   and runs the write again); and, through the bench's relay
//!   (`bench/relay.rs`, a private cluster only), every server read delayed, the
//!   connection reset before the write's `COMMIT`, or the `COMMIT`'s
//!   answer lost. [`CONNECTION_ROUNDS`] writes of each, interleaved;
//!   median and worst.
//!
//! It owns the private cluster it starts (unless given a DSN), a scratch
//! directory for agentstore's sessions on the file system of the
//! cluster's (or `--dir`), and the sessions it creates under its own root
//! namespace, whose rows it deletes at the end on a server it was pointed
//! at. It never connects to a server it was not given, writes outside
//! its scratch directory, or times anything in unit tests.

use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use agentchaos_protocol::event::{Effect, Event, Redaction, RunStatus};
use agentchaos_protocol::message::LeaseRequest;
use agentstore::session::{Session, SessionOptions};
use agentstore::{Durability, SessionId};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, ClusterError, ClusterOptions};
use crate::{PgStore, StoreError};

mod connection;
mod relay;
pub use connection::{ConnectionRow, ConnectionSection, ConnectionState, Timing, WIRE_DELAY};

/// Concurrent sessions of the append section.
pub const SESSIONS: [usize; 3] = [1, 8, 64];
/// Slices each configuration's measurement is cut into, interleaved.
pub const ROUNDS: u32 = 10;
/// Takeovers per store and session length (the report gives the median).
pub const TAKEOVER_ROUNDS: usize = 3;
/// The size of each appended event as JSON (what the PostgreSQL store
/// keeps in its `event` column; agentstore frames it in a longer line).
pub const EVENT_JSON_BYTES: usize = 200;
/// Writes of each kind and connection state in the connection section.
pub const CONNECTION_ROUNDS: usize = 20;
/// Session lengths of the takeover section unless told otherwise.
pub const DEFAULT_LENGTHS: [u64; 4] = [10, 100, 1_000, 10_000];
/// The `format` field of the JSON report.
pub const REPORT_FORMAT: u32 = 3;
/// The private cluster's `max_connections`: the append section holds
/// `2 * (1 + 8 + 64)` connections at once (a server given by `--dsn` must
/// allow as many).
const MAX_CONNECTIONS: u32 = 200;
/// How often a taker retries after the lease's expiry.
const RETRY: Duration = Duration::from_millis(1);

/// A store configuration of the append section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// PostgreSQL's floor: one prepared `INSERT` of the event's JSON into a
    /// plain table of this run, autocommitted, `synchronous_commit = on`
    /// (what one durable commit costs, without the store's work).
    PostgresInsert,
    /// [`PgStore`], `synchronous_commit = on`: one transaction per append
    /// (lock the session row, fold, check, insert, advance, commit).
    Postgres,
    /// agentstore, [`Durability::Sync`]: one `fdatasync` per append.
    AgentstoreSync,
    /// agentstore, [`Durability::batch`]: group commit within one log.
    AgentstoreBatch,
}

impl Target {
    pub const ALL: [Target; 4] = [
        Target::PostgresInsert,
        Target::Postgres,
        Target::AgentstoreSync,
        Target::AgentstoreBatch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Target::PostgresInsert => "postgres-insert",
            Target::Postgres => "postgres",
            Target::AgentstoreSync => "agentstore-sync",
            Target::AgentstoreBatch => "agentstore-batch",
        }
    }
}

/// A store of the takeover section (agentstore in `Sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TakeoverStore {
    Postgres,
    AgentstoreSync,
}

impl TakeoverStore {
    pub const ALL: [TakeoverStore; 2] = [TakeoverStore::Postgres, TakeoverStore::AgentstoreSync];

    pub fn name(self) -> &'static str {
        match self {
            TakeoverStore::Postgres => "postgres",
            TakeoverStore::AgentstoreSync => "agentstore-sync",
        }
    }

    pub fn from_name(name: &str) -> Option<TakeoverStore> {
        TakeoverStore::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Where the server is.
#[derive(Debug, Clone)]
pub enum Server {
    /// A private cluster started (and killed) by the run, its scratch
    /// directory in the system's temporary directory.
    Private,
    /// An existing server: the run creates sessions under a root of its
    /// own and deletes their rows at the end.
    Dsn(String),
}

/// What a run measures and where.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: Server,
    /// Where agentstore's scratch directory goes; `None`: beside the
    /// private cluster's (the system's temporary directory).
    pub dir: Option<PathBuf>,
    /// Wall time of each append configuration, over all its rounds.
    pub per_configuration: Duration,
    /// History lengths (events) of the takeover section.
    pub lengths: Vec<u64>,
    /// The dying worker's lease ttl.
    pub ttl: Duration,
    /// The `agentstore-pg` binary: run as `PROGRAM bench-holder ...`, it
    /// is the dying worker of the takeover section ([`hold`]).
    pub holder: PathBuf,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot start a private PostgreSQL cluster: {0}")]
    Cluster(#[from] ClusterError),
    #[error("PostgreSQL store: {0}")]
    Pg(#[from] StoreError),
    #[error("agentstore: {0}")]
    Agentstore(#[from] agentstore::Error),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("an append thread panicked")]
    Thread,
    #[error("takeover of {store} session {session:?}: {what}")]
    Takeover {
        store: &'static str,
        session: String,
        what: String,
    },
    #[error("connection faults: {0}")]
    Connection(String),
}

/// One append configuration's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppendRow {
    pub target: Target,
    pub sessions: usize,
    pub events: u64,
    /// Wall time of its slices, summed.
    pub seconds: f64,
    pub events_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// CPU time of this process (the client: every session's thread) per
    /// event, during this configuration's slices.
    pub client_cpu_us_per_event: f64,
    /// CPU time of the private cluster's processes (backends, WAL writer,
    /// ...) per event; `None` on a server given by `--dsn`.
    pub server_cpu_us_per_event: Option<f64>,
    /// Against agentstore `Sync` with one session, in this run.
    pub ratio: Ratios,
}

/// A row's figures divided by the baseline's (events/s above 1: faster;
/// latency above 1: slower).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ratios {
    pub events_per_s: f64,
    pub p50: f64,
    pub p99: f64,
}

/// One store and session length of the takeover section: medians of
/// [`TAKEOVER_ROUNDS`] takeovers, in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TakeoverRow {
    pub store: TakeoverStore,
    /// Events of finished runs before the dying worker's own.
    pub history_events: u64,
    /// Events in the session when the worker died.
    pub session_events: u64,
    /// Death to the start of the acquire that succeeded: about the ttl.
    pub lease_wait_ms: f64,
    /// The successful acquire: open, epoch, recovery, all durable.
    pub open_and_recovery_ms: f64,
    /// The new owner's first append, acknowledged.
    pub first_append_ms: f64,
    /// `open_and_recovery_ms + first_append_ms` (median of the sums):
    /// the part that does not depend on the ttl.
    pub recovery_ms: f64,
    /// Death to the first acknowledged append.
    pub total_ms: f64,
    /// Events the recovery appended (`run_interrupted`, `tool_recovery`).
    pub recovery_marks: u64,
}

/// The takeover section.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TakeoverSection {
    pub ttl_ms: u64,
    pub rounds: usize,
    pub rows: Vec<TakeoverRow>,
}

/// A run's report (`--json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub format: u32,
    pub cores: usize,
    /// `/proc/loadavg` at the start and at the end of the run.
    pub load_average_start: [f64; 3],
    pub load_average_end: [f64; 3],
    /// `SELECT version()`.
    pub postgres_version: String,
    /// "private cluster" or "given DSN".
    pub server: String,
    /// The directory agentstore's sessions were in.
    pub agentstore_dir: String,
    pub event_json_bytes: usize,
    /// The same event as agentstore's framed line (newline included).
    pub agentstore_line_bytes: usize,
    pub seconds_per_configuration: f64,
    pub rounds: u32,
    pub baseline: String,
    pub appends: Vec<AppendRow>,
    pub takeover: TakeoverSection,
    pub connection: ConnectionSection,
}

/// The run's servers and directories.
struct Env {
    dsn: String,
    /// The PostgreSQL store's root namespace for this run's sessions.
    pg_root: PathBuf,
    /// agentstore's root.
    agent_root: PathBuf,
    /// The sessions' workspace (the scratch directory).
    workspace: PathBuf,
    /// The plain table of [`Target::PostgresInsert`], dropped at the end.
    floor_table: String,
    /// The program run as the dying worker (`bench-holder`).
    holder: PathBuf,
}

/// An open session of either store.
enum Writer {
    /// A connection, its prepared insert and its session's number.
    PgInsert(Box<postgres::Client>, postgres::Statement, i32),
    Pg(Box<PgStore>),
    Agent(Box<Session>),
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Writer::PgInsert(..) => "Writer::PgInsert",
            Writer::Pg(_) => "Writer::Pg",
            Writer::Agent(_) => "Writer::Agent",
        })
    }
}

impl Writer {
    fn append(&mut self, event: &Event) -> Result<(), BenchError> {
        match self {
            Writer::PgInsert(client, insert, session) => {
                let json = serde_json::to_string(event).expect("an event serializes");
                client
                    .execute(&*insert, &[session, &json])
                    .map_err(StoreError::pg("insert into the floor table"))?;
            }
            Writer::Pg(s) => {
                s.append(event)?;
            }
            Writer::Agent(s) => {
                s.append(event.clone())?;
            }
        }
        Ok(())
    }
}

/// One append configuration while it is measured.
struct Contender {
    target: Target,
    writers: Vec<Writer>,
    hist: Histogram<u64>,
    events: u64,
    busy: Duration,
    /// CPU time of this process during its slices, in clock ticks.
    client_ticks: u64,
    /// CPU time of the private cluster's processes during its slices.
    server_ticks: u64,
}

/// Clock ticks per second of `/proc/PID/stat` (`USER_HZ`, fixed at 100 in
/// Linux's user ABI).
const USER_HZ: f64 = 100.0;

/// utime + stime of process `pid` in clock ticks (0 once it is gone).
fn cpu_ticks(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    // After the command: state, ppid, ... utime is the 12th, stime the 13th.
    rest.split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum()
}

/// Where CPU time is read: this process, and the private cluster's
/// processes (none on a server given by `--dsn`).
struct CpuMeters {
    server: Option<Vec<i32>>,
}

impl CpuMeters {
    /// (this process, the server) in clock ticks.
    fn read(&self) -> (u64, u64) {
        let server = self
            .server
            .iter()
            .flatten()
            .map(|p| cpu_ticks(&p.to_string()))
            .sum();
        (cpu_ticks("self"), server)
    }
}

fn histogram() -> Histogram<u64> {
    // 1 ns to 1 min, 3 significant digits.
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A `user_message` whose JSON is `bytes` long (or the shortest one).
pub fn message_of_json_size(bytes: usize) -> Event {
    let with_text = |text: String| Event::UserMessage { parent: None, text };
    let overhead = serde_json::to_string(&with_text(String::new()))
        .expect("an event serializes")
        .len();
    const WORDS: &str = "the agent reads the failing test and edits the parser ";
    with_text(
        WORDS
            .chars()
            .cycle()
            .take(bytes.saturating_sub(overhead))
            .collect(),
    )
}

fn agentstore_line_bytes(event: &Event) -> usize {
    let mut line = Vec::new();
    agentstore::framing::encode_into(
        &mut line,
        1,
        &agentchaos_protocol::event::event_id(1),
        &agentstore::event::now_ts(),
        Redaction::Public,
        event,
    );
    line.len()
}

fn load_average() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut fields = text.split_whitespace().map(|f| f.parse().unwrap_or(0.0));
    [(); 3].map(|()| fields.next().unwrap_or(0.0))
}

fn agentstore_options(durability: Durability) -> SessionOptions {
    SessionOptions {
        durability,
        ..SessionOptions::default()
    }
}

impl Env {
    fn writer(&self, target: Target, name: &str, number: i32) -> Result<Writer, BenchError> {
        let durability = match target {
            Target::PostgresInsert => {
                let mut c = client(&self.dsn)?;
                c.batch_execute("SET synchronous_commit = on")
                    .map_err(StoreError::pg("set synchronous_commit"))?;
                let insert = c
                    .prepare(&format!(
                        "INSERT INTO {} (session, event) VALUES ($1, $2)",
                        self.floor_table
                    ))
                    .map_err(StoreError::pg("prepare the floor insert"))?;
                return Ok(Writer::PgInsert(Box::new(c), insert, number));
            }
            Target::Postgres => {
                let (store, _) =
                    PgStore::create(&self.dsn, &self.pg_root, name, &self.workspace, None)?;
                return Ok(Writer::Pg(Box::new(store)));
            }
            Target::AgentstoreSync => Durability::Sync,
            Target::AgentstoreBatch => Durability::batch(),
        };
        let session = Session::create(
            &self.agent_root,
            &SessionId::new(name)?,
            &self.workspace,
            agentstore_options(durability),
        )?;
        Ok(Writer::Agent(Box::new(session)))
    }
}

/// Runs one slice of `c`: every session appends `event` in its own
/// thread for `time` (at least once), all started together.
fn slice(
    c: &mut Contender,
    event: &Event,
    time: Duration,
    cpu: &CpuMeters,
) -> Result<(), BenchError> {
    let (client_before, server_before) = cpu.read();
    let barrier = Barrier::new(c.writers.len() + 1);
    let (elapsed, results) = std::thread::scope(|scope| {
        let threads: Vec<_> = c
            .writers
            .iter_mut()
            .map(|writer| {
                let barrier = &barrier;
                scope.spawn(move || -> Result<(Histogram<u64>, u64), BenchError> {
                    let mut hist = histogram();
                    let mut n = 0u64;
                    barrier.wait();
                    let end = Instant::now() + time;
                    loop {
                        let t0 = Instant::now();
                        writer.append(event)?;
                        hist.saturating_record(t0.elapsed().as_nanos() as u64);
                        n += 1;
                        if Instant::now() >= end {
                            break;
                        }
                    }
                    Ok((hist, n))
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> = threads.into_iter().map(|t| t.join()).collect();
        (start.elapsed(), results)
    });
    c.busy += elapsed;
    let (client_after, server_after) = cpu.read();
    c.client_ticks += client_after.saturating_sub(client_before);
    c.server_ticks += server_after.saturating_sub(server_before);
    for result in results {
        let (hist, n) = result.map_err(|_| BenchError::Thread)??;
        c.hist.add(&hist).expect("histograms of the same bounds");
        c.events += n;
    }
    Ok(())
}

fn appends(
    env: &Env,
    per_configuration: Duration,
    cluster: Option<&Cluster>,
) -> Result<Vec<AppendRow>, BenchError> {
    let mut contenders = Vec::new();
    for target in Target::ALL {
        for sessions in SESSIONS {
            let writers = (0..sessions)
                .map(|i| {
                    let name = format!("{}-{sessions}-{i}", target.name());
                    env.writer(target, &name, (sessions * 1000 + i) as i32)
                })
                .collect::<Result<Vec<_>, _>>()?;
            contenders.push(Contender {
                target,
                writers,
                hist: histogram(),
                events: 0,
                busy: Duration::ZERO,
                client_ticks: 0,
                server_ticks: 0,
            });
        }
    }
    // Every connection is open: the server's processes are all there.
    let cpu = CpuMeters {
        server: cluster
            .map(|c| {
                c.children()
                    .map(|ch| ch.into_iter().map(|(pid, _)| pid).collect())
            })
            .transpose()?,
    };
    let event = message_of_json_size(EVENT_JSON_BYTES);
    let time = per_configuration / ROUNDS;
    for round in 0..ROUNDS as usize {
        for i in 0..contenders.len() {
            let n = contenders.len();
            slice(&mut contenders[(i + round) % n], &event, time, &cpu)?;
        }
    }
    let mut rows: Vec<AppendRow> = contenders
        .iter()
        .map(|c| {
            let seconds = c.busy.as_secs_f64();
            AppendRow {
                target: c.target,
                sessions: c.writers.len(),
                events: c.events,
                seconds,
                events_per_s: c.events as f64 / seconds,
                p50_us: us(c.hist.value_at_quantile(0.5)),
                p99_us: us(c.hist.value_at_quantile(0.99)),
                client_cpu_us_per_event: c.client_ticks as f64 / USER_HZ * 1e6 / c.events as f64,
                server_cpu_us_per_event: cpu
                    .server
                    .as_ref()
                    .map(|_| c.server_ticks as f64 / USER_HZ * 1e6 / c.events as f64),
                ratio: Ratios {
                    events_per_s: 1.0,
                    p50: 1.0,
                    p99: 1.0,
                },
            }
        })
        .collect();
    let base = rows
        .iter()
        .find(|r| r.target == Target::AgentstoreSync && r.sessions == 1)
        .cloned()
        .expect("agentstore Sync with one session is measured");
    for r in &mut rows {
        r.ratio = Ratios {
            events_per_s: r.events_per_s / base.events_per_s,
            p50: r.p50_us / base.p50_us,
            p99: r.p99_us / base.p99_us,
        };
    }
    Ok(rows)
}

/// `history` events of finished runs: turns of `run_started`,
/// `user_message`, `assistant_message`, `run_finished` (the last turn cut
/// short by a `run_finished` so the count is exact and no run is open).
fn history(history: u64) -> Vec<Event> {
    let mut events = Vec::with_capacity(history as usize);
    let mut turn = 0u64;
    while (events.len() as u64) < history {
        let left = history - events.len() as u64;
        let run_id = format!("h{turn}");
        if left == 1 {
            // A one-event turn: a message outside any run.
            events.push(message_of_json_size(EVENT_JSON_BYTES));
            break;
        }
        events.push(Event::RunStarted {
            run_id: run_id.clone(),
        });
        for k in 0..left.min(4) - 2 {
            events.push(if k == 0 {
                message_of_json_size(EVENT_JSON_BYTES)
            } else {
                Event::AssistantMessage {
                    parent: None,
                    text: "I will read the parser and fix the off-by-one.".into(),
                }
            });
        }
        events.push(Event::RunFinished {
            run_id,
            status: RunStatus::Completed,
        });
        turn += 1;
    }
    events
}

/// What the dying worker appends under its lease: a run and a started
/// tool call, which the taker's recovery must close and mark.
fn dying_run() -> Vec<Event> {
    vec![
        Event::RunStarted {
            run_id: "dying".into(),
        },
        Event::ToolCall {
            parent: None,
            call_id: "c-dying".into(),
            tool: "edit_file".into(),
            args: serde_json::json!({ "path": "src/parser.rs" }),
            effect: Effect::None,
            operation_id: None,
            target: Some("src/parser.rs".into()),
            needs_approval: false,
        },
        Event::ToolStarted {
            call_id: "c-dying".into(),
        },
    ]
}

/// The times of one takeover.
struct Taken {
    lease_wait: Duration,
    open_and_recovery: Duration,
    first_append: Duration,
    total: Duration,
    marks: u64,
    session_events: u64,
}

fn lease(worker: &str, ttl: Duration) -> LeaseRequest {
    LeaseRequest {
        worker_id: worker.into(),
        ttl_ms: ttl.as_millis() as u64,
    }
}

/// Sleeps until the wall clock reaches `expires_at_ms` (ms since the
/// Unix epoch; the database's clock for the PostgreSQL store, which runs
/// on this machine).
fn sleep_until_ms(expires_at_ms: u64) {
    let now = agentstore::lease::now_ms();
    if expires_at_ms > now {
        std::thread::sleep(Duration::from_millis(expires_at_ms - now));
    }
}

/// A lease holder of the takeover section, alive until its process is
/// killed: `agentstore-pg bench-holder` keeps it while it blocks.
#[derive(Debug)]
pub struct Held {
    /// The open, leased session (kept open, never released).
    _writer: Writer,
    /// When its lease expires (ms since the Unix epoch; the database's
    /// clock for the PostgreSQL store).
    pub expires_at_ms: u64,
    /// Events in the session after the holder's own.
    pub session_events: u64,
}

impl Held {
    /// The line the holder prints once it holds the lease: `held
    /// EXPIRES_AT_MS SESSION_EVENTS`.
    pub fn line(&self) -> String {
        format!("held {} {}", self.expires_at_ms, self.session_events)
    }
}

/// The dying worker: opens session `session` under `root` (on `dsn` for
/// the PostgreSQL store) with a lease of `ttl` as `worker-a`, renews it,
/// appends `run_started`, `tool_call`, `tool_started` and returns holding it all. Run in a
/// process of its own (`agentstore-pg bench-holder`) that the takeover
/// section SIGKILLs.
pub fn hold(
    store: TakeoverStore,
    dsn: &str,
    root: &Path,
    session: &str,
    ttl: Duration,
) -> Result<Held, BenchError> {
    let request = lease("worker-a", ttl);
    match store {
        TakeoverStore::Postgres => {
            let (mut a, _) = PgStore::open(dsn, root, session, None, Some(&request))?;
            let grant = a.renew_lease()?;
            for e in dying_run() {
                a.append(&e)?;
            }
            Ok(Held {
                session_events: a.projection().next_seq(),
                expires_at_ms: grant.expires_at_ms,
                _writer: Writer::Pg(Box::new(a)),
            })
        }
        TakeoverStore::AgentstoreSync => {
            let id = SessionId::new(session)?;
            let options = agentstore_options(Durability::Sync);
            let (mut a, _, _) = Session::open_leased(root, &id, options, &request)?;
            let grant = a.renew_lease()?;
            for e in dying_run() {
                a.append(e)?;
            }
            Ok(Held {
                session_events: a.projection().next_seq(),
                expires_at_ms: grant.expires_at_ms,
                _writer: Writer::Agent(Box::new(a)),
            })
        }
    }
}

/// Runs the holder of `session` in a process of its own, waits for its
/// line, SIGKILLs it and reaps it; returns its lease's expiry, the
/// session's length and the instant it was gone.
fn kill_holder(
    env: &Env,
    store: TakeoverStore,
    root: &Path,
    session: &str,
    ttl: Duration,
) -> Result<(u64, u64, Instant), BenchError> {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let failed = |what: String| BenchError::Takeover {
        store: store.name(),
        session: session.to_string(),
        what,
    };
    let mut child = Command::new(&env.holder)
        .arg("bench-holder")
        .arg(store.name())
        .arg(&env.dsn)
        .arg(root)
        .arg(session)
        .arg(ttl.as_millis().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io(format!("run the lease holder {}", env.holder.display())))?;
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped stdout");
    let read = std::io::BufReader::new(stdout).read_line(&mut line);
    let parsed = line
        .strip_prefix("held ")
        .and_then(|rest| rest.trim().split_once(' '))
        .and_then(|(e, n)| Some((e.parse::<u64>().ok()?, n.parse::<u64>().ok()?)));
    let _ = child.kill(); // SIGKILL
    let output = child
        .wait_with_output()
        .map_err(io("wait for the lease holder"))?;
    let death = Instant::now();
    match (read, parsed) {
        (Ok(_), Some((expires, events))) => Ok((expires, events, death)),
        _ => Err(failed(format!(
            "the holder printed {:?}, not \"held EXPIRES EVENTS\"; its stderr: {}",
            line.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        ))),
    }
}

fn takeover_pg(env: &Env, name: &str, length: u64, ttl: Duration) -> Result<Taken, BenchError> {
    let (mut fill, _) = PgStore::create(&env.dsn, &env.pg_root, name, &env.workspace, None)?;
    fill.append_all(&history(length))?;
    drop(fill);
    let (expires_at_ms, session_events, death) =
        kill_holder(env, TakeoverStore::Postgres, &env.pg_root, name, ttl)?;
    sleep_until_ms(expires_at_ms);
    let request = lease("worker-b", ttl);
    let (attempt, (mut b, takeover)) = loop {
        let attempt = Instant::now();
        match PgStore::open(&env.dsn, &env.pg_root, name, None, Some(&request)) {
            Err(StoreError::LeaseHeld(_)) => std::thread::sleep(RETRY),
            other => break (attempt, other?),
        }
    };
    let opened = Instant::now();
    b.append(&message_of_json_size(EVENT_JSON_BYTES))?;
    let acked = Instant::now();
    let marks = takeover.map_or(0, |t| t.recovery.appended);
    Ok(Taken {
        lease_wait: attempt - death,
        open_and_recovery: opened - attempt,
        first_append: acked - opened,
        total: acked - death,
        marks,
        session_events,
    })
}

fn takeover_agentstore(
    env: &Env,
    name: &str,
    length: u64,
    ttl: Duration,
) -> Result<Taken, BenchError> {
    let id = SessionId::new(name)?;
    // The history is written without syncs (untimed set-up); the holder
    // opens it leased, durably.
    let mut fill = Session::create(
        &env.agent_root,
        &id,
        &env.workspace,
        agentstore_options(Durability::None),
    )?;
    for e in history(length) {
        fill.append(e)?;
    }
    drop(fill);
    let (expires_at_ms, session_events, death) = kill_holder(
        env,
        TakeoverStore::AgentstoreSync,
        &env.agent_root,
        name,
        ttl,
    )?;
    sleep_until_ms(expires_at_ms);
    let options = agentstore_options(Durability::Sync);
    let request = lease("worker-b", ttl);
    let (attempt, (mut b, _, takeover)) = loop {
        let attempt = Instant::now();
        match Session::open_leased(&env.agent_root, &id, options.clone(), &request) {
            Err(agentstore::Error::LeaseHeld { .. }) => std::thread::sleep(RETRY),
            other => break (attempt, other?),
        }
    };
    let opened = Instant::now();
    b.append(message_of_json_size(EVENT_JSON_BYTES))?;
    let acked = Instant::now();
    Ok(Taken {
        lease_wait: attempt - death,
        open_and_recovery: opened - attempt,
        first_append: acked - opened,
        total: acked - death,
        marks: takeover.recovery.appended,
        session_events,
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn takeovers(env: &Env, lengths: &[u64], ttl: Duration) -> Result<TakeoverSection, BenchError> {
    let mut taken: Vec<(TakeoverStore, u64, Vec<Taken>)> = Vec::new();
    for &length in lengths {
        for store in TakeoverStore::ALL {
            taken.push((store, length, Vec::new()));
        }
    }
    for round in 0..TAKEOVER_ROUNDS {
        for (store, length, times) in &mut taken {
            let name = format!("takeover-{}-{length}-{round}", store.name());
            let t = match store {
                TakeoverStore::Postgres => takeover_pg(env, &name, *length, ttl)?,
                TakeoverStore::AgentstoreSync => takeover_agentstore(env, &name, *length, ttl)?,
            };
            if t.marks != 2 {
                return Err(BenchError::Takeover {
                    store: store.name(),
                    session: name,
                    what: format!(
                        "recovery appended {} marks, expected 2 (run_interrupted, tool_recovery)",
                        t.marks
                    ),
                });
            }
            times.push(t);
        }
    }
    let rows = taken
        .into_iter()
        .map(|(store, length, times)| {
            let of = |f: fn(&Taken) -> f64| median(times.iter().map(f).collect());
            TakeoverRow {
                store,
                history_events: length,
                session_events: times[0].session_events,
                lease_wait_ms: of(|t| ms(t.lease_wait)),
                open_and_recovery_ms: of(|t| ms(t.open_and_recovery)),
                first_append_ms: of(|t| ms(t.first_append)),
                recovery_ms: of(|t| ms(t.open_and_recovery + t.first_append)),
                total_ms: of(|t| ms(t.total)),
                recovery_marks: times[0].marks,
            }
        })
        .collect();
    Ok(TakeoverSection {
        ttl_ms: ttl.as_millis() as u64,
        rounds: TAKEOVER_ROUNDS,
        rows,
    })
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

fn client(dsn: &str) -> Result<postgres::Client, BenchError> {
    Ok(postgres::Client::connect(dsn, postgres::NoTls).map_err(StoreError::pg("connect"))?)
}

/// The server's `SELECT version()`.
fn server_version(dsn: &str) -> Result<String, BenchError> {
    let row = client(dsn)?
        .query_one("SELECT version()", &[])
        .map_err(StoreError::pg("SELECT version()"))?;
    Ok(row.get(0))
}

/// Deletes the rows of the sessions under `root`, on a server the run was
/// pointed at (the schema is the store's, the root is this run's own).
fn delete_root(dsn: &str, root: &str) -> Result<(), BenchError> {
    let s = crate::schema::schema_name();
    let mut client = client(dsn)?;
    let mut tx = client.transaction().map_err(StoreError::pg("begin"))?;
    let keys = format!("SELECT key FROM {s}.sessions WHERE root = $1");
    for table in ["effects", "events"] {
        tx.execute(
            &format!("DELETE FROM {s}.{table} WHERE session_key IN ({keys})"),
            &[&root],
        )
        .map_err(StoreError::pg("delete the run's rows"))?;
    }
    tx.execute(
        &format!("DELETE FROM {s}.sessions WHERE root = $1"),
        &[&root],
    )
    .map_err(StoreError::pg("delete the run's sessions"))?;
    tx.commit().map_err(StoreError::pg("commit"))?;
    Ok(())
}

/// Runs both sections and returns the report.
pub fn run(config: &Config) -> Result<Report, BenchError> {
    let load_average_start = load_average();
    let (cluster, dsn) = match &config.server {
        Server::Private => {
            // Every configuration's sessions stay connected for the
            // interleaving: 2 x (1 + 8 + 64) connections, past the default 100.
            let c = Cluster::start(ClusterOptions {
                settings: vec![("max_connections".into(), MAX_CONNECTIONS.to_string())],
                ..ClusterOptions::default()
            })?;
            let dsn = c.dsn();
            (Some(c), dsn)
        }
        Server::Dsn(dsn) => (None, dsn.clone()),
    };
    let base = config.dir.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = tempfile::Builder::new()
        .prefix("agentstore-pg-bench-")
        .tempdir_in(&base)
        .map_err(io(format!(
            "create a scratch directory in {}",
            base.display()
        )))?;
    let pg_root = PathBuf::from(format!(
        "/agentstore-pg-bench/{}",
        scratch
            .path()
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    ));
    let suffix: String = scratch
        .path()
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().to_lowercase())
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let env = Env {
        dsn,
        agent_root: scratch.path().join("agentstore"),
        workspace: scratch.path().to_path_buf(),
        pg_root,
        floor_table: format!(
            "{}.bench_floor_{}_{suffix}",
            crate::schema::schema_name(),
            std::process::id()
        ),
        holder: config.holder.clone(),
    };
    std::fs::create_dir(&env.agent_root)
        .map_err(io(format!("create {}", env.agent_root.display())))?;
    let postgres_version = server_version(&env.dsn)?;
    // The store's schema first (its connect creates it), then the floor's table.
    drop(crate::schema::connect(&env.dsn)?);
    client(&env.dsn)?
        .batch_execute(&format!(
            "CREATE TABLE {} (session int NOT NULL, event text NOT NULL)",
            env.floor_table
        ))
        .map_err(StoreError::pg("create the floor table"))?;
    let measured = appends(&env, config.per_configuration, cluster.as_ref()).and_then(|a| {
        let t = takeovers(&env, &config.lengths, config.ttl)?;
        Ok((a, t, connection::connection_faults(&env, cluster.as_ref())?))
    });
    client(&env.dsn)?
        .batch_execute(&format!("DROP TABLE {}", env.floor_table))
        .map_err(StoreError::pg("drop the floor table"))?;
    if cluster.is_none() {
        let root = env.pg_root.to_string_lossy().into_owned();
        delete_root(&env.dsn, &root)?;
    }
    let (appends, takeover, connection) = measured?;
    drop(cluster);
    let event = message_of_json_size(EVENT_JSON_BYTES);
    Ok(Report {
        format: REPORT_FORMAT,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_average_start,
        load_average_end: load_average(),
        postgres_version,
        server: match config.server {
            Server::Private => "private cluster".into(),
            Server::Dsn(_) => "given DSN".into(),
        },
        agentstore_dir: base.display().to_string(),
        event_json_bytes: serde_json::to_string(&event)
            .expect("an event serializes")
            .len(),
        agentstore_line_bytes: agentstore_line_bytes(&event),
        seconds_per_configuration: config.per_configuration.as_secs_f64(),
        rounds: ROUNDS,
        baseline: "agentstore-sync, 1 session".into(),
        appends,
        takeover,
        connection,
    })
}

impl Report {
    /// The report as a person reads it.
    pub fn text(&self) -> String {
        let mut out = format!(
            "agentstore-pg bench: {} cores, load average {:.2} at the start, {:.2} at the end\n{} ({}); agentstore in {}\n\n",
            self.cores,
            self.load_average_start[0],
            self.load_average_end[0],
            self.postgres_version,
            self.server,
            self.agentstore_dir,
        );
        out.push_str(&format!(
            "Appends: each session its own, one thread each; a user_message of {} B as JSON ({} B as agentstore's line); durable; {} interleaved rounds, {:.2} s per configuration\nratios against {} (same run)\n",
            self.event_json_bytes,
            self.agentstore_line_bytes,
            self.rounds,
            self.seconds_per_configuration,
            self.baseline
        ));
        out.push_str(&format!(
            "{:<18} {:>8} {:>11} {:>10} {:>10} {:>10} {:>8} {:>8} {:>18}\n",
            "store",
            "sessions",
            "events/s",
            "p50 µs",
            "p99 µs",
            "events/s×",
            "p50×",
            "p99×",
            "CPU µs/event c+s"
        ));
        for r in &self.appends {
            let server = r
                .server_cpu_us_per_event
                .map_or_else(|| "-".to_string(), |s| format!("{s:.0}"));
            out.push_str(&format!(
                "{:<18} {:>8} {:>11.0} {:>10.0} {:>10.0} {:>9.2}x {:>7.2}x {:>7.2}x {:>18}\n",
                r.target.name(),
                r.sessions,
                r.events_per_s,
                r.p50_us,
                r.p99_us,
                r.ratio.events_per_s,
                r.ratio.p50,
                r.ratio.p99,
                format!("{:.0}+{server}", r.client_cpu_us_per_event)
            ));
        }
        out.push_str(&format!(
            "\nTakeover: the holder (lease ttl {} ms, its own process) is SIGKILLed after its run's tool_started; medians of {} takeovers, ms\nthe lease wait is about the ttl by construction: recovery (open + recovery + first append) is the number that matters\n",
            self.takeover.ttl_ms, self.takeover.rounds
        ));
        out.push_str(&format!(
            "{:<16} {:>8} {:>11} {:>16} {:>13} {:>10} {:>9}\n",
            "store", "history", "lease wait", "open+recovery", "first append", "recovery", "total"
        ));
        for r in &self.takeover.rows {
            out.push_str(&format!(
                "{:<16} {:>8} {:>11.1} {:>16.1} {:>13.1} {:>10.1} {:>9.1}\n",
                r.store.name(),
                r.history_events,
                r.lease_wait_ms,
                r.open_and_recovery_ms,
                r.first_append_ms,
                r.recovery_ms,
                r.total_ms
            ));
        }
        out.push_str(&format!(
            "\nConnection faults (PostgreSQL): an owner's append, a fenced write and a takeover (open, recovery, first append) on a live connection, one the server ended right before the write (it reconnects under the same lease and runs the write again), and through a relay: every server read delayed, the connection reset before the COMMIT, the COMMIT's answer lost (it reconnects and asks the server); {} writes of each, ms (-: the fault cannot land on that write)\n",
            self.connection.rounds
        ));
        out.push_str(&format!(
            "{:<19} {:>11} {:>11} {:>11} {:>11} {:>13} {:>13}\n",
            "connection",
            "append p50",
            "append max",
            "fenced p50",
            "fenced max",
            "takeover p50",
            "takeover max"
        ));
        let cells = |t: Option<Timing>| match t {
            Some(t) => (format!("{:.2}", t.p50_ms), format!("{:.2}", t.max_ms)),
            None => ("-".to_string(), "-".to_string()),
        };
        for r in &self.connection.rows {
            let (fenced_p50, fenced_max) = cells(r.fenced);
            let (takeover_p50, takeover_max) = cells(r.takeover);
            out.push_str(&format!(
                "{:<19} {:>11.2} {:>11.2} {:>11} {:>11} {:>13} {:>13}\n",
                r.connection.name(),
                r.append.p50_ms,
                r.append.max_ms,
                fenced_p50,
                fenced_max,
                takeover_p50,
                takeover_max
            ));
        }
        out
    }
}

/// Whether `path`'s parent exists, for `--json FILE` checked before the run.
pub fn json_target_ok(path: &Path) -> bool {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    parent.is_none_or(Path::is_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_has_the_exact_length_and_no_open_run() {
        for n in [0, 1, 2, 3, 4, 5, 10, 101] {
            let h = history(n);
            assert_eq!(h.len() as u64, n, "length {n}");
            let open = h.iter().fold(0i64, |open, e| match e {
                Event::RunStarted { .. } => open + 1,
                Event::RunFinished { .. } => open - 1,
                _ => open,
            });
            assert_eq!(open, 0, "length {n}: a run left open");
        }
    }

    #[test]
    fn the_appended_message_has_the_requested_json_size() {
        let e = message_of_json_size(EVENT_JSON_BYTES);
        assert_eq!(serde_json::to_string(&e).unwrap().len(), EVENT_JSON_BYTES);
    }
}
