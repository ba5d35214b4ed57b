//! The store under test, as the agent and the checker see it.
//!
//! [`SessionStore`] is the writer interface the child agent drives (append,
//! recover, events, context, checkpoint, projection, blobs, close);
//! [`StoreBackend`] opens one and, separately, [`StoreBackend::observe`]s
//! what is on disk without locking or repairing anything, for the checker.
//! Both are object-safe and data-oriented (events are
//! [`agentchaos_protocol::Event`]/[`agentchaos_protocol::Record`]) so that the adapter
//! protocol is a second implementation ([`crate::store::adapter::AdapterBackend`])
//! next to [`ReferenceBackend`], which runs agentstore in-process. Nothing here
//! judges what it sees: that is the checker's job.
//!
//! agentstore's internals (its `Session`, `Scanner`, snapshot reader and
//! fold) are the reference backend's alone: they run and observe the
//! reference store here, and what reaches the checker is the protocol's
//! types (`agentchaos_protocol`), the same for every store.

pub mod adapter;

use std::path::PathBuf;

use agentchaos_protocol::event::{BlobRef, Event, Phase, Record, Seq};
use agentchaos_protocol::message::{ErrorKind, LeaseGrant, LeaseRequest, RecoveryState};
use agentchaos_protocol::Capability;
use agentstore::projection::{Projection, SeenNodes};
use agentstore::{
    Durability, LogPosition, Scanner, Session, SessionId, SessionOptions, SessionPaths,
};
use serde_json::Value;

use crate::model::oracle;

/// A store failure, as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    pub message: String,
    /// An I/O failure (agentstore's `Io` or `Poisoned`, an adapter's `io`
    /// refusal): nothing is acknowledged, and an agent may retry, as real
    /// agents do. Any other failure is final.
    pub io: bool,
    /// The harness's side failed, not the store: its adapter could not be
    /// started, or a request could not be encoded.
    pub harness: bool,
    /// The protocol's kind of the store's refusal, when it refused
    /// (`fenced`, `lease_held`, …); None for a failure that is no refusal.
    pub kind: Option<ErrorKind>,
}

impl StoreError {
    /// A failure that is not an I/O error.
    pub fn other(message: String) -> StoreError {
        StoreError {
            message,
            io: false,
            harness: false,
            kind: None,
        }
    }

    /// Whether the store under test is to blame: it broke the protocol, or
    /// refused or failed a request for a reason other than I/O (an I/O
    /// error is the machine's, a failed spawn the harness's).
    pub fn store_fault(&self) -> bool {
        !self.io && !self.harness
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StoreError {}

impl From<agentstore::Error> for StoreError {
    fn from(e: agentstore::Error) -> Self {
        // The kind the reference adapter would refuse with, and its message.
        let refusal = agentchaos_protocol::Refusal::from(e);
        StoreError {
            io: refusal.kind == ErrorKind::Io,
            harness: false,
            kind: Some(refusal.kind),
            message: refusal.message,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Which session, where, bound to which workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSpec {
    pub root: PathBuf,
    pub session: String,
    pub workspace: PathBuf,
}

/// The store's durable acknowledgement of one append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub seq: Seq,
}

/// An event of a parallel group, written by [`SessionStore::write`] and not
/// yet waited for: its seq, and (for a store that can defer the wait) what
/// its waiter needs.
#[derive(Debug)]
pub struct Pending {
    /// Its seq: the store's, or for a pipelined request not answered yet,
    /// the one its place in the batch gives it (`chaos/PROTOCOL.md`, section 10).
    pub seq: Seq,
    deferred: Deferred,
}

/// What a [`Pending`] write waits for.
#[derive(Debug)]
enum Deferred {
    /// Nothing: the store acknowledged it as it wrote it.
    Nothing,
    /// The in-process store's sync of its group.
    Sync(agentstore::Written),
    /// The adapter's reply to the `k`-th request of the group, pipelined.
    Reply(usize),
}

impl Pending {
    /// A write the store acknowledged as it wrote it.
    pub(crate) fn acknowledged_at(seq: Seq) -> Pending {
        Pending {
            seq,
            deferred: Deferred::Nothing,
        }
    }

    /// A write the adapter will answer as the `k`-th request of the group,
    /// expected at `seq`.
    pub(crate) fn pipelined(seq: Seq, k: usize) -> Pending {
        Pending {
            seq,
            deferred: Deferred::Reply(k),
        }
    }

    /// The ack, if the store gave it with the write (it did not defer the
    /// wait): the agent reports it at once, as for any append.
    pub fn acknowledged(&self) -> Option<Ack> {
        matches!(self.deferred, Deferred::Nothing).then_some(Ack { seq: self.seq })
    }
}

/// A store whose parallel group goes out as pipelined requests: it sends
/// them when a waiter first needs one, and hands each its reply.
pub(crate) trait PipelinedGroup: Send {
    /// The reply to the `k`-th write of the group.
    fn reply(&mut self, k: usize) -> StoreResult<Ack>;
}

/// What waits for a store's deferred writes ([`SessionStore::group_waiter`]),
/// from as many threads at once as there are writes: the parallel
/// appenders of a group commit.
pub struct GroupWaiter<'a>(Waiter<'a>);

enum Waiter<'a> {
    InProcess(&'a agentstore::Session),
    /// One waiter at a time reads the adapter's replies.
    Pipelined(std::sync::Mutex<&'a mut dyn PipelinedGroup>),
}

impl std::fmt::Debug for GroupWaiter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupWaiter").finish_non_exhaustive()
    }
}

impl<'a> GroupWaiter<'a> {
    pub(crate) fn pipelined(group: &'a mut dyn PipelinedGroup) -> GroupWaiter<'a> {
        GroupWaiter(Waiter::Pipelined(std::sync::Mutex::new(group)))
    }

    /// Returns once `pending` is durable by the store's account, or its
    /// group commit failed.
    pub fn wait(&self, pending: Pending) -> StoreResult<Ack> {
        match (pending.deferred, &self.0) {
            (Deferred::Nothing, _) => Ok(Ack { seq: pending.seq }),
            (Deferred::Sync(w), Waiter::InProcess(session)) => store_work(|| {
                session
                    .wait(w)
                    .map(|a| Ack { seq: a.seq() })
                    .map_err(StoreError::from)
            }),
            (Deferred::Reply(k), Waiter::Pipelined(group)) => {
                group.lock().unwrap_or_else(|p| p.into_inner()).reply(k)
            }
            (deferred, _) => panic!("{deferred:?} waited for by another store's waiter"),
        }
    }
}

/// An uncertain call as recovery reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uncertain {
    pub call_id: String,
    pub phase: Phase,
}

/// What the store's recovery reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recovered {
    /// Events this recovery appended.
    pub appended: u64,
    pub interrupted_runs: Vec<String>,
    /// Every call marked uncertain and not reconciled, in call order.
    pub uncertain: Vec<Uncertain>,
}

impl From<RecoveryState> for Recovered {
    fn from(state: RecoveryState) -> Recovered {
        Recovered {
            appended: state.appended,
            interrupted_runs: state.interrupted_runs,
            uncertain: state
                .uncertain
                .into_iter()
                .map(|u| Uncertain {
                    call_id: u.call_id,
                    phase: u.phase,
                })
                .collect(),
        }
    }
}

/// An open session, from the writer's side. Every method may do I/O (an
/// adapter answers over a pipe), so every method takes `&mut self`.
pub trait SessionStore {
    /// Appends one event; returns once the store says it is durable.
    fn append(&mut self, event: &Event) -> StoreResult<Ack>;
    /// Writes one event of a parallel group (parallel tool calls), to be
    /// waited for with the [`GroupWaiter`] of [`SessionStore::group_waiter`] once the group is written. A
    /// store that cannot defer the wait appends it whole (an adapter that
    /// does not pipeline: `chaos/PROTOCOL.md`, section 10).
    fn write(&mut self, event: &Event) -> StoreResult<Pending> {
        let ack = self.append(event)?;
        Ok(Pending::acknowledged_at(ack.seq))
    }
    /// What waits for the writes [`SessionStore::write`] deferred, one
    /// thread per write (the caller's schedule decides which waits when):
    /// `None` for a store that acknowledges as it writes.
    fn group_waiter(&mut self) -> Option<GroupWaiter<'_>> {
        None
    }
    /// The store's own recovery after a crash.
    fn recover(&mut self) -> StoreResult<Recovered>;
    /// Every event after `after` (all when `None`), in order.
    fn events(&mut self, after: Option<Seq>) -> StoreResult<Vec<Record>>;
    /// The model's view, including how it shows uncertain calls.
    fn context(&mut self, budget_tokens: Option<u64>) -> StoreResult<String>;
    fn checkpoint(&mut self) -> StoreResult<()>;
    /// The store's fold of the log, as JSON.
    fn projection(&mut self) -> StoreResult<Value>;
    /// Stores a large payload durably.
    fn put_blob(&mut self, bytes: &[u8]) -> StoreResult<BlobRef>;
    /// Closes the session (releases its lock; on a leased session, its lease).
    fn close(self: Box<Self>) -> StoreResult<()>;
    /// Extends the lease of a session opened with [`StoreBackend::open_leased`].
    fn renew_lease(&mut self) -> StoreResult<LeaseGrant>;
}

/// A session opened as its lease owner: the grant, and the recovery the
/// store ran under it before it replied.
pub struct LeasedOpen {
    pub store: Box<dyn SessionStore>,
    pub grant: LeaseGrant,
    pub recovery: RecoveryState,
}

impl std::fmt::Debug for LeasedOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedOpen")
            .field("grant", &self.grant)
            .field("recovery", &self.recovery)
            .finish_non_exhaustive()
    }
}

/// What a snapshot on disk says, next to what the log says it should say.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckpointView {
    Absent,
    /// The store keeps its snapshot to itself (an adapter): not applicable.
    Opaque,
    /// Present but unreadable (torn, bad checksum, wrong schema).
    Unreadable(String),
    Present(SnapshotFacts),
}

/// The raw facts of a readable snapshot; the checker compares them.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotFacts {
    /// Events `0..next_seq` the snapshot claims to cover.
    pub next_seq: Seq,
    pub offset: u64,
    /// Byte offset where the log's line `next_seq` starts (or the log's end
    /// when it has exactly `next_seq` lines); `None` when the log has fewer lines.
    pub log_offset_of_next: Option<u64>,
    /// The snapshot's projection, as a protocol view.
    pub snapshot: Value,
    /// The oracle's projection of the log's events `0..next_seq` (None when
    /// the log is shorter).
    pub fold_at: Option<Value>,
    /// The snapshot's projection with the log's tail folded in by the
    /// store's own resume path, as a protocol view.
    pub resumed: Option<Value>,
}

/// What is on disk, read without a lock and without repairing anything.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// Every verified record, in order (up to damage or a torn tail).
    pub records: Vec<Record>,
    /// Byte offset just past each record's line, when the store is a byte log.
    pub ends: Vec<u64>,
    /// The torn tail, described, if the log ends in one.
    pub torn: Option<String>,
    /// Damage before the tail (the log refuses to load), described.
    pub damage: Option<String>,
    /// The projection the store must serve after `records`, as the
    /// oracle computes it ([`crate::model::oracle::projection`]; None when the
    /// store serves no projection to compare it with).
    pub fold: Option<Value>,
    /// The log file's bytes, when the store is a byte log the harness can read.
    pub bytes: Option<LogBytes>,
    pub checkpoint: CheckpointView,
    /// Every blob a record references, read back through the store.
    pub blobs: Vec<BlobRead>,
    /// The torn tail's offset and bytes, when the harness reads the log's bytes.
    pub torn_bytes: Option<(u64, Vec<u8>)>,
    /// The quarantine files in the session directory (where a store that
    /// cuts a torn tail saved it), by name, with their bytes; `None` when
    /// the harness cannot read the session directory (an adapter).
    pub quarantine: Option<Vec<(String, Vec<u8>)>>,
}

/// One blob a record references, as the store served it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRead {
    /// The record that references it.
    pub seq: Seq,
    pub reference: BlobRef,
    /// Why it did not read back with its size and digest, if it did not.
    pub problem: Option<String>,
}

/// Checks bytes a store served for `reference` against it (size, SHA-256,
/// computed here, not by the store under test).
pub fn blob_problem(reference: &BlobRef, bytes: &[u8]) -> Option<String> {
    use sha2::Digest as _;
    let digest: String = sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    (bytes.len() as u64 != reference.size || digest != reference.digest)
        .then(|| format!("it served {} bytes with digest {digest}", bytes.len()))
}

/// The blobs `records` reference, each with the seq of its record.
pub fn referenced_blobs(records: &[Record]) -> impl Iterator<Item = (Seq, &BlobRef)> {
    records.iter().filter_map(|r| match r.event() {
        Some(Event::ToolResult { blob: Some(b), .. }) => Some((r.seq, b)),
        _ => None,
    })
}

/// Length and CRC32C of a log's bytes (to its logical end, or through the
/// torn tail or damage that ends it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBytes {
    pub len: u64,
    pub crc: u32,
}

impl Observation {
    /// What a store seen only through its own interface shows: its events,
    /// the torn tail or damage it reported, no bytes, no snapshot.
    pub fn opaque(
        records: Vec<Record>,
        torn: Option<String>,
        damage: Option<String>,
        fold: Option<Value>,
    ) -> Observation {
        Observation {
            records,
            ends: Vec::new(),
            torn,
            damage,
            fold,
            bytes: None,
            checkpoint: CheckpointView::Opaque,
            blobs: Vec::new(),
            torn_bytes: None,
            quarantine: None,
        }
    }
}

/// A check that cannot apply to a store, and why (reported, never passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotApplicable {
    /// The invariant it belongs to (or what else it is about).
    pub invariant: &'static str,
    pub check: &'static str,
}

/// A kind of store: opens sessions and observes them.
pub trait StoreBackend: Send + Sync + std::fmt::Debug {
    /// How reports name this store.
    fn describe(&self) -> String;
    /// Opens the session for writing, creating it if it does not exist.
    fn open(&self, spec: &SessionSpec) -> StoreResult<Box<dyn SessionStore>>;
    /// Opens an existing session as its lease owner (capability `lease`,
    /// `chaos/PROTOCOL.md` section 9); refused (`lease_held`) while
    /// another owner's lease is live.
    fn open_leased(&self, spec: &SessionSpec, lease: &LeaseRequest) -> StoreResult<LeasedOpen>;
    /// Reads the session's durable state, with the writer gone or paused
    /// (agentstore: from disk, no lock, no repair, no writes).
    fn observe(&self, spec: &SessionSpec) -> StoreResult<Observation>;
    /// Arguments the child agent needs to open this same store.
    fn agent_args(&self) -> Vec<String>;
    /// Store processes forked ahead for an agent life that will open the
    /// session `opens` times (an adapter that is a fork server, protocol
    /// version 2), or `None`: the life starts its own.
    fn fork_life(&self, _opens: usize) -> StoreResult<Option<adapter::backend::LifeAdapters>> {
        Ok(None)
    }
    /// Store processes made ahead for an agent life that will open the
    /// session `opens` times: forked ([`StoreBackend::fork_life`]), or,
    /// for an adapter that cannot fork, started warm (they load their code
    /// off the life's critical path); `None`: the life starts its own.
    fn life_processes(&self, opens: usize) -> StoreResult<Option<adapter::backend::LifeAdapters>> {
        self.fork_life(opens)
    }
    /// Starts `n` store processes ahead on this thread, for the current
    /// trial's next observations and life, where that saves time (an
    /// adapter that cannot fork); by default nothing.
    fn warm_up(&self, _n: usize) {}
    /// Kills and reaps what [`StoreBackend::warm_up`] started on this
    /// thread and nobody took (at the trial's end).
    fn cool_down(&self) {}
    /// The adapter command line, for a store behind one (the power-loss
    /// nemesis recovers its states through it).
    fn adapter_line(&self) -> Option<&str> {
        None
    }
    /// The checks this store cannot be judged on.
    fn not_applicable(&self) -> &'static [NotApplicable];
    /// The capabilities the store claims (an adapter: in its `hello`).
    fn capabilities(&self) -> StoreResult<Vec<Capability>>;
}

/// agentstore, in the agent's process.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReferenceBackend {
    /// What every session is opened with: `Sync`, or `Batch` (group commit).
    pub durability: Durability,
}

/// An open agentstore session.
#[derive(Debug)]
pub struct ReferenceStore {
    session: Session,
}

fn session_id(spec: &SessionSpec) -> StoreResult<SessionId> {
    SessionId::new(&spec.session).map_err(StoreError::from)
}

impl StoreBackend for ReferenceBackend {
    fn describe(&self) -> String {
        match self.durability {
            Durability::Sync => "agentstore (in-process)".to_string(),
            d => format!("agentstore (in-process, {d})"),
        }
    }

    /// `--durability batch` for a batch store: the agent's, the reference
    /// adapter's and a replay's flag alike.
    fn agent_args(&self) -> Vec<String> {
        match self.durability {
            Durability::Sync => Vec::new(),
            _ => vec!["--durability".to_string(), "batch".to_string()],
        }
    }

    fn not_applicable(&self) -> &'static [NotApplicable] {
        &[]
    }

    fn capabilities(&self) -> StoreResult<Vec<Capability>> {
        Ok(Capability::ALL.to_vec())
    }

    fn open_leased(&self, spec: &SessionSpec, lease: &LeaseRequest) -> StoreResult<LeasedOpen> {
        let options = SessionOptions {
            durability: self.durability,
            ..SessionOptions::default()
        };
        let (session, _, takeover) =
            Session::open_leased(&spec.root, &session_id(spec)?, options, lease)?;
        Ok(LeasedOpen {
            store: Box::new(ReferenceStore { session }),
            grant: takeover.grant,
            recovery: takeover.recovery,
        })
    }

    fn open(&self, spec: &SessionSpec) -> StoreResult<Box<dyn SessionStore>> {
        let id = session_id(spec)?;
        // open_or_create also finishes a creation a crash interrupted.
        let options = SessionOptions {
            durability: self.durability,
            ..SessionOptions::default()
        };
        let (session, _) = store_work(|| {
            Ok(Session::open_or_create(
                &spec.root,
                &id,
                &spec.workspace,
                options,
            )?)
        })?;
        Ok(Box::new(ReferenceStore { session }))
    }

    fn observe(&self, spec: &SessionSpec) -> StoreResult<Observation> {
        let paths = SessionPaths::new(&spec.root, &session_id(spec)?);
        crate::timing::timed(crate::timing::Part::Store, || observe_reference(&paths))
    }
}

/// agentstore's projection as the protocol's view: what the reference
/// store serves, never what it must serve (that is [`crate::model::oracle`]'s).
fn to_value(p: &Projection) -> Value {
    serde_json::to_value(agentstore::adapter::projection_view(p))
        .expect("a projection view serializes")
}

fn observe_reference(paths: &SessionPaths) -> StoreResult<Observation> {
    let events = paths.events();
    let bytes = match std::fs::read(&events) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(StoreError::other(format!("read {}: {e}", events.display()))),
    };
    let mut records = Vec::new();
    let mut offsets = Vec::new();
    let mut torn = None;
    let mut damage = None;
    let mut torn_bytes = None;
    let mut end = 0;
    // The log's bytes are what the scanner reads as the log: without the
    // zeros pre-allocated after its last line (log format 2), which a clean
    // close cuts and a crash leaves.
    let mut logical = bytes.len();
    if !bytes.is_empty() {
        // Named from the store's root, so that a message about the log reads
        // the same in every trial directory and every replay.
        let shown = events.strip_prefix(paths.root()).unwrap_or(&events);
        let mut scanner = Scanner::new(&bytes[..], shown, LogPosition::START);
        loop {
            match scanner.next_record() {
                Ok(Some((offset, rec))) => {
                    offsets.push(offset);
                    records.push(rec);
                }
                Ok(None) => break,
                Err(e) => {
                    damage = Some(e.to_string());
                    break;
                }
            }
        }
        torn = scanner.torn().map(|t| t.to_string());
        torn_bytes = scanner.torn().map(|t| {
            let end = (t.offset + t.len).min(bytes.len() as u64);
            (t.offset, bytes[t.offset as usize..end as usize].to_vec())
        });
        end = scanner.position().offset;
        logical -= scanner.preallocated() as usize;
    }
    let ends: Vec<u64> = offsets
        .iter()
        .skip(1)
        .copied()
        .chain((!records.is_empty()).then_some(end))
        .collect();
    let checkpoint = match agentstore::checkpoint::read_snapshot(paths) {
        Ok(None) => CheckpointView::Absent,
        Err(e) => CheckpointView::Unreadable(e.to_string()),
        Ok(Some(snap)) => {
            let k = snap.next_seq as usize;
            let log_offset_of_next = match k.cmp(&records.len()) {
                std::cmp::Ordering::Less => Some(offsets[k]),
                std::cmp::Ordering::Equal => Some(end),
                std::cmp::Ordering::Greater => None,
            };
            let fold_at = (k <= records.len()).then(|| oracle::projection_value(&records[..k]));
            // The tail folds onto the snapshot only where its projection ends;
            // a snapshot whose claim and projection disagree cannot resume.
            let resumed = (k <= records.len() && snap.projection.next_seq() == snap.next_seq)
                .then(|| {
                    let mut p = snap.projection.clone();
                    let mut seen = SeenNodes::default();
                    for r in &records {
                        seen.observe(r);
                    }
                    records[k..]
                        .iter()
                        .try_for_each(|r| p.apply(r, &mut seen))
                        .ok()
                        .map(|()| to_value(&p))
                })
                .flatten();
            CheckpointView::Present(SnapshotFacts {
                next_seq: snap.next_seq,
                offset: snap.offset,
                log_offset_of_next,
                snapshot: to_value(&snap.projection),
                fold_at,
                resumed,
            })
        }
    };
    let fold = Some(oracle::projection_value(&records));
    let blobs = referenced_blobs(&records)
        .map(|(seq, reference)| BlobRead {
            seq,
            reference: reference.clone(),
            // Read through the store (its digest check is code under
            // test), judged by the harness's own digest.
            problem: match agentstore::blob::get(paths, reference) {
                Ok(bytes) => blob_problem(reference, &bytes),
                Err(e) => Some(format!("the store cannot read it: {e}")),
            },
        })
        .collect();
    Ok(Observation {
        blobs,
        fold,
        records,
        ends,
        torn,
        torn_bytes,
        quarantine: Some(quarantine_files(paths)?),
        damage,
        bytes: Some(LogBytes {
            len: logical as u64,
            crc: crc32c::crc32c(&bytes[..logical]),
        }),
        checkpoint,
    })
}

/// agentstore's quarantine files (`events.jsonl.torn-<offset>[.<n>]` in
/// the session directory), sorted by name, with their bytes.
fn quarantine_files(paths: &SessionPaths) -> StoreResult<Vec<(String, Vec<u8>)>> {
    let dir = paths.dir();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::other(format!("read {}: {e}", dir.display()))),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::other(format!("read {}: {e}", dir.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(agentstore::layout::QUARANTINE_PREFIX) {
            let bytes = std::fs::read(entry.path())
                .map_err(|e| StoreError::other(format!("read {}: {e}", entry.path().display())))?;
            out.push((name, bytes));
        }
    }
    out.sort();
    Ok(out)
}

impl SessionStore for ReferenceStore {
    fn append(&mut self, event: &Event) -> StoreResult<Ack> {
        store_work(|| self.append_now(event))
    }

    fn write(&mut self, event: &Event) -> StoreResult<Pending> {
        store_work(|| {
            let written = self.session.write(event.clone())?;
            Ok(Pending {
                seq: written.seq(),
                deferred: Deferred::Sync(written),
            })
        })
    }

    fn group_waiter(&mut self) -> Option<GroupWaiter<'_>> {
        Some(GroupWaiter(Waiter::InProcess(&self.session)))
    }

    fn recover(&mut self) -> StoreResult<Recovered> {
        store_work(|| Ok(self.session.recover()?.into()))
    }

    fn events(&mut self, after: Option<Seq>) -> StoreResult<Vec<Record>> {
        store_work(|| self.events_now(after))
    }

    fn context(&mut self, budget_tokens: Option<u64>) -> StoreResult<String> {
        store_work(|| Ok(self.session.context(budget_tokens)?))
    }

    fn checkpoint(&mut self) -> StoreResult<()> {
        store_work(|| {
            self.session.checkpoint()?;
            Ok(())
        })
    }

    fn projection(&mut self) -> StoreResult<Value> {
        store_work(|| Ok(to_value(self.session.projection())))
    }

    fn put_blob(&mut self, bytes: &[u8]) -> StoreResult<BlobRef> {
        store_work(|| Ok(self.session.put_blob(bytes)?))
    }

    fn close(self: Box<Self>) -> StoreResult<()> {
        store_work(move || {
            let mut store = self;
            store.session.release_lease()?;
            drop(store);
            Ok(())
        })
    }

    fn renew_lease(&mut self) -> StoreResult<LeaseGrant> {
        store_work(|| Ok(self.session.renew_lease()?))
    }
}

/// Runs a call of the in-process store, its time recorded as the store's own work.
fn store_work<T>(f: impl FnOnce() -> StoreResult<T>) -> StoreResult<T> {
    crate::timing::timed(crate::timing::Part::Store, f)
}

impl ReferenceStore {
    fn append_now(&mut self, event: &Event) -> StoreResult<Ack> {
        if let Event::ToolStarted { call_id } = event {
            // The intent goes through the session's intent API, where the
            // store decides how it is made durable.
            let due = self.session.log().next_seq();
            let intent = self.session.start_tool(call_id)?;
            // `start_tool` returning no ack still claims the intent is
            // durable; report it where it was due, so the claim can be checked.
            return Ok(Ack {
                seq: intent.ack().map_or(due, |a| a.seq()),
            });
        }
        let ack = self.session.append(event.clone())?;
        Ok(Ack { seq: ack.seq() })
    }

    fn events_now(&mut self, after: Option<Seq>) -> StoreResult<Vec<Record>> {
        let path = self.session.paths().events();
        let mut out = Vec::new();
        for item in Scanner::open(&path, LogPosition::START)? {
            let (_, rec) = item?;
            if after.is_none_or(|a| rec.seq > a) {
                out.push(rec);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentchaos_protocol::event::Effect;

    /// Session `s` under `dir/root`, its workspace `dir/ws` (created).
    fn spec_in(dir: &std::path::Path) -> SessionSpec {
        let ws = dir.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        SessionSpec {
            root: dir.join("root"),
            session: "s".into(),
            workspace: ws,
        }
    }

    #[test]
    fn a_batch_store_defers_a_parallel_group_and_answers_each_waiter() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_in(dir.path());
        let backend = ReferenceBackend {
            durability: Durability::batch(),
        };
        let mut store = backend.open(&spec).unwrap();
        let mut pending = Vec::new();
        let mut parent = None;
        for text in ["a", "b", "c"] {
            let p = store
                .write(&Event::UserMessage {
                    parent: parent.clone(),
                    text: text.into(),
                })
                .unwrap();
            assert_eq!(p.acknowledged(), None, "Batch defers the wait");
            parent = Some(agentchaos_protocol::event::event_id(p.seq));
            pending.push(p);
        }
        let seqs: Vec<Seq> = pending.iter().map(|p| p.seq).collect();
        let waiter = store
            .group_waiter()
            .expect("the reference store defers waits");
        let acked: Vec<Seq> = std::thread::scope(|s| {
            let threads: Vec<_> = pending
                .into_iter()
                .map(|p| {
                    let waiter = &waiter;
                    s.spawn(move || waiter.wait(p).unwrap().seq)
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(acked, seqs);
        let texts: Vec<String> = store
            .events(Some(seqs[0] - 1))
            .unwrap()
            .iter()
            .filter_map(|r| match r.event() {
                Some(Event::UserMessage { text, .. }) => Some(text.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["a", "b", "c"]);
    }

    /// The reference store's session at `spec`, created with run `r1` started.
    fn opened_with_a_run(backend: &ReferenceBackend, spec: &SessionSpec) -> Box<dyn SessionStore> {
        let mut store = backend.open(spec).unwrap();
        store
            .append(&Event::RunStarted {
                run_id: "r1".into(),
            })
            .unwrap();
        store
    }

    #[test]
    fn reference_store_appends_recovers_and_is_observed_without_a_lock() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_in(dir.path());
        let backend = ReferenceBackend::default();
        let mut store = opened_with_a_run(&backend, &spec);
        let call = Event::ToolCall {
            parent: None,
            call_id: "c".into(),
            tool: "remote".into(),
            args: Value::Null,
            effect: Effect::SideEffect,
            operation_id: Some("op-c".into()),
            target: None,
            needs_approval: false,
        };
        store.append(&call).unwrap();
        let ack = store
            .append(&Event::ToolStarted {
                call_id: "c".into(),
            })
            .unwrap();
        assert_eq!(ack.seq, 3);
        store.checkpoint().unwrap();
        // Observing while the writer holds the lock must work and not write.
        let obs = backend.observe(&spec).unwrap();
        assert_eq!(obs.records.len(), 4);
        match &obs.checkpoint {
            CheckpointView::Present(f) => {
                assert_eq!(f.next_seq, 4);
                assert_eq!(f.fold_at.as_ref(), Some(&f.snapshot));
                assert_eq!(f.resumed.as_ref(), obs.fold.as_ref());
            }
            other => panic!("expected a snapshot, got {other:?}"),
        }
        store.close().unwrap();
        let mut store = backend.open(&spec).unwrap();
        let rec = store.recover().unwrap();
        assert_eq!(rec.appended, 2);
        assert_eq!(
            rec.uncertain,
            vec![Uncertain {
                call_id: "c".into(),
                phase: Phase::Started
            }]
        );
        assert!(store.context(None).unwrap().contains("<recovery>"));
        assert_eq!(store.events(Some(3)).unwrap().len(), 2);
    }

    #[test]
    fn damage_is_named_from_the_store_root_so_every_trial_words_it_alike() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_in(dir.path());
        let backend = ReferenceBackend::default();
        opened_with_a_run(&backend, &spec).close().unwrap();
        let events = SessionPaths::new(&spec.root, &session_id(&spec).unwrap()).events();
        let mut bytes = std::fs::read(&events).unwrap();
        // A flipped byte inside the first line: damage, not a torn tail.
        bytes[10] ^= 0x20;
        std::fs::write(&events, bytes).unwrap();
        let damage = backend.observe(&spec).unwrap().damage.expect("damage");
        assert!(damage.contains("sessions/s/events.jsonl"), "{damage}");
        assert!(!damage.contains(&*dir.path().to_string_lossy()), "{damage}");
    }
}

#[cfg(test)]
mod blob_tests {
    use super::*;

    #[test]
    fn a_blob_reads_back_only_with_its_own_size_and_digest() {
        let reference = BlobRef {
            // `printf 'tool output' | sha256sum`
            digest: "e2a78c7b5a05c0b34cbcac65007d1e2a5765341d79b159797db7baf5fa1ecb13".into(),
            size: 11,
        };
        assert_eq!(blob_problem(&reference, b"tool output"), None);
        let changed = blob_problem(&reference, b"tool outpuT").expect("another digest");
        assert!(changed.contains("11 bytes with digest"), "{changed}");
        assert!(blob_problem(&reference, b"tool").is_some(), "another size");
    }
}
