//! A session on PostgreSQL: create, open, append under the session rules,
//! recover, read back.
//!
//! The events in the database are the truth; this process holds their
//! fold (agentstore's [`Projection`], which owns the session rules) and the
//! events themselves, to check the next append and render the context.
//! Every write is one transaction: lock the session row (`FOR UPDATE`),
//! fold whatever another process appended since this one last looked,
//! check the rules, insert the events (and the ledger rows, whose unique
//! constraint refuses a second commit), bump `next_seq`, `COMMIT`. Only a
//! returned `COMMIT` (the WAL flushed on the server: `synchronous_commit =
//! on`) lets the caller acknowledge. A refused event rolls back; nothing of
//! it remains.
//!
//! It never writes a file: the power-loss nemesis, which models a file
//! system under the store, has nothing of this store to cut; a crash of
//! the database server is its own nemesis.

use std::path::Path;

use agentchaos_protocol::event::{BlobRef, Event, RecoveryStatus, Seq};
use agentchaos_protocol::message::{LeaseGrant, LeaseRequest, RecoveryState, UncertainCall};
use agentstore::projection::{node_of_event, Node, NodeSource, OpenCall, Projection};
use agentstore::SessionId;
use postgres::Client;
use sha2::{Digest, Sha256};

use crate::error::{Result, StoreError};
use crate::fault::{self, Fault};
use crate::schema;

/// One stored event, as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: Seq,
    pub ts: String,
    /// The event's JSON, as it was acknowledged.
    pub json: String,
}

/// An open session.
pub struct PgStore {
    /// Where `client` connects again when its connection dies.
    dsn: String,
    client: Client,
    key: i64,
    session: String,
    /// Events `0..projection.next_seq()`, as this process last saw them.
    events: Vec<Event>,
    projection: Projection,
    /// The lease this connection holds, as last granted or renewed.
    lease: Option<HeldLease>,
}

/// A lease this connection was granted, and the ttl it renews by.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HeldLease {
    grant: LeaseGrant,
    ttl_ms: u64,
}

/// The session row's lease columns, as a write transaction reads them
/// under the row lock.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LeaseRow {
    worker_id: String,
    /// 0: never leased.
    epoch: u64,
    granted_at_ms: u64,
    expires_at_ms: u64,
}

impl LeaseRow {
    fn grant(&self) -> LeaseGrant {
        LeaseGrant {
            worker_id: self.worker_id.clone(),
            epoch: self.epoch,
            granted_at_ms: self.granted_at_ms,
            expires_at_ms: self.expires_at_ms,
        }
    }

    fn is_live(&self, now_ms: u64) -> bool {
        self.epoch > 0 && now_ms < self.expires_at_ms
    }
}

/// What a write transaction does with the session's lease, under the row
/// lock and before anything else it writes.
#[derive(Debug, Clone, Copy)]
enum LeaseStep<'a> {
    /// A write of a connection opened without a lease: no check.
    Unleased,
    /// A write of a leased connection: refused (`fenced`) unless the
    /// session is still at `epoch`.
    Fence { epoch: u64 },
    /// A leased open: refused (`lease_held`) while a lease is live, else
    /// the next epoch for `request`'s worker.
    Acquire(&'a LeaseRequest),
    /// A plain open: refused while a lease is live; a session that was
    /// leased gets the next epoch, held by no one, which fences its last owner.
    PlainOpen,
    /// `renew_lease`: fenced as a write, then `expires = now + ttl`.
    Renew { epoch: u64, ttl_ms: u64 },
    /// `close` of a leased connection: fenced as a write, then `expires = now`.
    Release { epoch: u64 },
}

/// The worker's clock, which only the `lease-by-worker-clock` fault reads:
/// this process's real-time clock plus `AGENTSTORE_PG_CLOCK_SKEW_MS`, a
/// stand-in for a worker on a machine whose clock runs ahead (or behind).
fn worker_clock_ms() -> u64 {
    let real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let skew = std::env::var("AGENTSTORE_PG_CLOCK_SKEW_MS")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0);
    real.saturating_add(skew).max(0) as u64
}

/// Applies `step` to `lease` at `now_ms`; returns the grant a leased open
/// or a renewal replies with.
fn apply_lease_step(
    session: &str,
    step: LeaseStep<'_>,
    lease: &mut LeaseRow,
    now_ms: u64,
) -> Result<Option<LeaseGrant>> {
    let fence = |lease: &LeaseRow, epoch: u64| {
        if lease.epoch == epoch || fault::active(Fault::NoEpochCheck) {
            return Ok(());
        }
        Err(StoreError::Fenced(format!(
            "session {session:?} was taken over: this connection holds lease epoch {epoch}, the session is at epoch {} (worker {:?}); nothing was written",
            lease.epoch, lease.worker_id
        )))
    };
    let held = |lease: &LeaseRow| {
        StoreError::LeaseHeld(format!(
            "session {session:?} is leased to worker {:?} (epoch {}) until {} ms, {} ms from now by the database's clock",
            lease.worker_id,
            lease.epoch,
            lease.expires_at_ms,
            lease.expires_at_ms.saturating_sub(now_ms)
        ))
    };
    match step {
        LeaseStep::Unleased => Ok(None),
        LeaseStep::Fence { epoch } => fence(lease, epoch).map(|()| None),
        LeaseStep::Acquire(request) => {
            if lease.is_live(now_ms) {
                return Err(held(lease));
            }
            // reclaim-same-epoch: broken on purpose, a lapsed lease goes back to its worker id at its epoch.
            let reclaimed = lease.epoch > 0
                && lease.worker_id == request.worker_id
                && fault::active(Fault::ReclaimSameEpoch);
            *lease = LeaseRow {
                worker_id: request.worker_id.clone(),
                epoch: if reclaimed {
                    lease.epoch
                } else {
                    lease.epoch + 1
                },
                granted_at_ms: now_ms,
                expires_at_ms: now_ms.saturating_add(request.ttl_ms),
            };
            Ok(Some(lease.grant()))
        }
        LeaseStep::PlainOpen => {
            if lease.is_live(now_ms) {
                return Err(held(lease));
            }
            if lease.epoch > 0 {
                *lease = LeaseRow {
                    worker_id: String::new(),
                    epoch: lease.epoch + 1,
                    granted_at_ms: now_ms,
                    expires_at_ms: now_ms,
                };
            }
            Ok(None)
        }
        LeaseStep::Renew { epoch, ttl_ms } => {
            if !fault::active(Fault::RenewWithoutEpochCheck) {
                fence(lease, epoch)?; // Else broken on purpose: whoever holds the lease, it is extended.
            }
            lease.granted_at_ms = now_ms;
            lease.expires_at_ms = now_ms.saturating_add(ttl_ms);
            Ok(Some(lease.grant()))
        }
        LeaseStep::Release { epoch } => {
            if !fault::active(Fault::ReleaseWithoutFence) {
                fence(lease, epoch)?; // Else broken on purpose: a fenced close ends the successor's lease.
            }
            lease.expires_at_ms = now_ms;
            Ok(None)
        }
    }
}

/// The marks recovery appends on `p`: `run_interrupted` for the open run,
/// one `tool_recovery` per call without a result and without a mark, in
/// call order, with how far it got.
fn recovery_marks(p: &Projection) -> Vec<Event> {
    let mut marks = Vec::new();
    if let Some(run_id) = p.open_run() {
        marks.push(Event::RunInterrupted {
            run_id: run_id.to_string(),
        });
    }
    let mut calls: Vec<&OpenCall> = p
        .open_calls()
        .values()
        .filter(|c| c.recovery.is_none())
        .collect();
    calls.sort_by_key(|c| c.seq);
    marks.extend(calls.into_iter().map(|c| Event::ToolRecovery {
        call_id: c.call_id.clone(),
        status: RecoveryStatus::Uncertain,
        phase: c.phase(),
    }));
    marks
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("key", &self.key)
            .field("session", &self.session)
            .field("next_seq", &self.projection.next_seq())
            .finish_non_exhaustive()
    }
}

/// Looks nodes up in the events this process holds.
struct HeldNodes<'a>(&'a [Event]);

impl NodeSource for HeldNodes<'_> {
    fn node(&mut self, seq: Seq) -> agentstore::Result<Option<Node>> {
        Ok(self.0.get(seq as usize).and_then(|e| node_of_event(seq, e)))
    }
}

/// The root as the store keys it: absolute, UTF-8. Sessions of two roots
/// never meet, as two directories' files would not.
fn root_key(root: &Path) -> Result<String> {
    let abs = std::path::absolute(root)
        .map_err(|e| StoreError::Invalid(format!("cannot resolve root {}: {e}", root.display())))?;
    abs.to_str()
        .map(str::to_string)
        .ok_or_else(|| StoreError::Invalid(format!("root {} is not UTF-8", abs.display())))
}

fn absolute_workspace(path: &Path) -> Result<String> {
    let abs = std::path::absolute(path).map_err(|e| {
        StoreError::Invalid(format!("cannot resolve workspace {}: {e}", path.display()))
    })?;
    abs.to_str().map(str::to_string).ok_or_else(|| {
        StoreError::Invalid(format!("workspace path {} is not UTF-8", abs.display()))
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An RFC 3339 UTC timestamp with milliseconds, by the database's clock.
const NOW: &str =
    "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')";

fn uncertain_call(call: &OpenCall) -> UncertainCall {
    UncertainCall {
        call_id: call.call_id.clone(),
        tool: call.tool.clone(),
        target: call.target.clone(),
        phase: call.recovery.unwrap_or(call.phase()),
        effect: call.effect,
        operation_id: call.operation_id.clone(),
        args: call.args.clone(),
        external_ref: call.committed.clone(),
    }
}

/// How long a store waits for the server to say what became of a
/// transaction whose connection died (its old backend ends it once it
/// sees the connection closed).
const OUTCOME_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a store waits for an empty query's answer when it asks
/// whether a connection that gave an error still answers.
const LIVENESS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A write transaction that did not commit.
enum Attempt {
    /// Refused by the rules or the lease, or failed by the database; the
    /// connection lives and nothing was written.
    Failed(StoreError),
    /// The connection died under it. `txid`: its transaction's id, once
    /// the server gave one; `at_commit`: what it wrote, when the connection
    /// died in its `COMMIT` (the one place it may have committed).
    Lost {
        error: StoreError,
        txid: Option<i64>,
        at_commit: Option<Box<Written>>,
    },
}

impl Attempt {
    fn into_error(self) -> StoreError {
        match self {
            Attempt::Failed(e) | Attempt::Lost { error: e, .. } => e,
        }
    }
}

/// What a write transaction wrote, to take in once it committed.
struct Written {
    seqs: Vec<Seq>,
    grant: Option<LeaseGrant>,
    /// Its events, in seq order.
    appended: Vec<Event>,
    /// The fold with them.
    projection: Projection,
}

/// What a leased open was granted, and the recovery it ran under the
/// new epoch in the same transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Takeover {
    pub grant: LeaseGrant,
    pub recovery: RecoveryState,
}

impl PgStore {
    /// Creates session `session` under `root` with `session_created` as
    /// event 0; with `lease`, then takes its lease (epoch 1). A session row
    /// left without events by a crash between the two transactions is no
    /// session to `open` and is finished here.
    pub fn create(
        dsn: &str,
        root: &Path,
        session: &str,
        workspace: &Path,
        lease: Option<&LeaseRequest>,
    ) -> Result<(PgStore, Option<Takeover>)> {
        SessionId::new(session)?;
        let root = root_key(root)?;
        let workspace = absolute_workspace(workspace)?;
        let mut client = schema::connect(dsn)?;
        let s = schema::schema_name();
        let key: i64 = {
            let mut tx = client.transaction().map_err(StoreError::pg("begin"))?;
            let inserted = tx
                .query_opt(
                    &format!(
                        "INSERT INTO {s}.sessions (root, session, next_seq) VALUES ($1, $2, 0)
                         ON CONFLICT (root, session) DO NOTHING RETURNING key"
                    ),
                    &[&root, &session],
                )
                .map_err(StoreError::pg("create the session"))?;
            let key = match inserted {
                Some(row) => row.get(0),
                None => {
                    let row = tx
                        .query_one(
                            &format!(
                                "SELECT key, next_seq FROM {s}.sessions WHERE root = $1 AND session = $2"
                            ),
                            &[&root, &session],
                        )
                        .map_err(StoreError::pg("find the session"))?;
                    if row.get::<_, i64>(1) > 0 {
                        return Err(StoreError::Exists(format!(
                            "session {session:?} already exists under {root}"
                        )));
                    }
                    row.get(0)
                }
            };
            tx.commit().map_err(StoreError::pg("commit"))?;
            key
        };
        let mut store = PgStore {
            dsn: dsn.to_string(),
            client,
            key,
            session: session.to_string(),
            events: Vec::new(),
            projection: Projection::default(),
            lease: None,
        };
        let created = Event::SessionCreated {
            session_id: session.to_string(),
            schema_version: agentchaos_protocol::event::SCHEMA_VERSION,
            workspace,
        };
        store.transact(LeaseStep::PlainOpen, |_| Ok(vec![created.clone()]))?;
        let takeover = lease.map(|r| store.take_over(r)).transpose()?;
        Ok((store, takeover))
    }

    /// Opens an existing session and reads it; with `lease`, as its lease
    /// owner (see `take_over`). Either is refused with `lease_held`
    /// while another owner's lease is live. With `workspace`, a different
    /// path rebinds the session (`workspace_rebound`); without, the
    /// recorded workspace must still exist.
    pub fn open(
        dsn: &str,
        root: &Path,
        session: &str,
        workspace: Option<&Path>,
        lease: Option<&LeaseRequest>,
    ) -> Result<(PgStore, Option<Takeover>)> {
        SessionId::new(session)?;
        let root = root_key(root)?;
        let mut client = schema::connect(dsn)?;
        let s = schema::schema_name();
        let row = client
            .query_opt(
                &format!("SELECT key, next_seq FROM {s}.sessions WHERE root = $1 AND session = $2"),
                &[&root, &session],
            )
            .map_err(StoreError::pg("find the session"))?;
        let key: i64 = match row {
            Some(r) if r.get::<_, i64>(1) > 0 => r.get(0),
            _ => {
                return Err(StoreError::NotFound(format!(
                    "no session {session:?} under {root}"
                )))
            }
        };
        let mut store = PgStore {
            dsn: dsn.to_string(),
            client,
            key,
            session: session.to_string(),
            events: Vec::new(),
            projection: Projection::default(),
            lease: None,
        };
        let takeover = match lease {
            Some(r) => Some(store.take_over(r)?),
            None => {
                store.transact(LeaseStep::PlainOpen, |_| Ok(Vec::new()))?;
                None
            }
        };
        let recorded = store
            .projection
            .workspace()
            .map(str::to_string)
            .ok_or_else(|| {
                StoreError::Damage(format!("session {session:?} has no session_created"))
            })?;
        match workspace {
            Some(new) => {
                let to = absolute_workspace(new)?;
                if to != recorded {
                    if !new.is_dir() {
                        return Err(StoreError::Invalid(format!(
                            "cannot rebind session {session:?} to {to}: not a directory"
                        )));
                    }
                    store.append(&Event::WorkspaceRebound { from: recorded, to })?;
                }
            }
            None if Path::new(&recorded).is_dir() => {}
            None => {
                return Err(StoreError::Invalid(format!(
                    "the workspace of session {session:?} has moved: {recorded} no longer exists; open it with the new workspace"
                )))
            }
        }
        Ok((store, takeover))
    }

    /// Takes the session's lease: in one transaction, refused while a
    /// lease is live by the database's clock, else the next epoch and the
    /// recovery under it (the previous owner's run closed, its orphans
    /// marked), so both are durable before the new owner acts.
    fn take_over(&mut self, request: &LeaseRequest) -> Result<Takeover> {
        let (seqs, grant) = self.transact(LeaseStep::Acquire(request), |p| {
            if fault::active(Fault::TakeoverWithoutRecovery) {
                return Ok(Vec::new()); // Broken on purpose: orphans left unmarked.
            }
            Ok(recovery_marks(p))
        })?;
        let grant = grant.expect("an acquired lease has a grant");
        self.lease = Some(HeldLease {
            grant: grant.clone(),
            ttl_ms: request.ttl_ms,
        });
        Ok(Takeover {
            grant,
            recovery: self.recovery_state(seqs.len() as u64),
        })
    }

    /// The lease step of an ordinary write of this connection.
    fn write_step(&self) -> LeaseStep<'static> {
        match &self.lease {
            Some(h) => LeaseStep::Fence {
                epoch: h.grant.epoch,
            },
            None => LeaseStep::Unleased,
        }
    }

    /// Extends this connection's lease by its ttl from now (the database's
    /// clock); `fenced` when another owner took the session over.
    pub fn renew_lease(&mut self) -> Result<LeaseGrant> {
        let Some(held) = self.lease.clone() else {
            return Err(StoreError::Invalid(format!(
                "session {:?} was not opened with a lease: nothing to renew",
                self.session
            )));
        };
        let step = LeaseStep::Renew {
            epoch: held.grant.epoch,
            ttl_ms: held.ttl_ms,
        };
        let (_, grant) = self.transact(step, |_| Ok(Vec::new()))?;
        let grant = grant.expect("a renewal has a grant");
        self.lease = Some(HeldLease {
            grant: grant.clone(),
            ttl_ms: held.ttl_ms,
        });
        Ok(grant)
    }

    /// Ends this connection's lease now (epoch kept), so the next owner
    /// need not wait; a connection that was fenced has nothing to release.
    pub fn release_lease(&mut self) -> Result<()> {
        let Some(held) = self.lease.clone() else {
            return Ok(());
        };
        let step = LeaseStep::Release {
            epoch: held.grant.epoch,
        };
        match self.transact(step, |_| Ok(Vec::new())) {
            Ok(_) | Err(StoreError::Fenced(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The lease this connection holds, as last granted or renewed.
    pub fn lease_grant(&self) -> Option<&LeaseGrant> {
        self.lease.as_ref().map(|h| &h.grant)
    }

    /// The session id.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The fold of the events this process has seen.
    pub fn projection(&self) -> &Projection {
        &self.projection
    }

    /// The events this process has seen, by seq.
    pub fn held_events(&self) -> &[Event] {
        &self.events
    }

    /// Reads the events appended since this process last looked (outside
    /// any write transaction) and folds them.
    fn catch_up_outside(&mut self) -> Result<()> {
        self.reading(|s| fetch_and_fold(&mut s.client, s.key, &mut s.events, &mut s.projection))
    }

    /// Appends `event` after checking the rules (and, on a leased
    /// connection, the epoch); returns its seq once the transaction committed.
    pub fn append(&mut self, event: &Event) -> Result<Seq> {
        let (seqs, _) = self.transact(self.write_step(), |_| Ok(vec![event.clone()]))?;
        Ok(seqs[0])
    }

    /// Appends `events` in order, all in one transaction (each checked
    /// against the fold of those before it): all of them are committed or
    /// none. Returns their seqs once the transaction committed.
    pub fn append_all(&mut self, events: &[Event]) -> Result<Vec<Seq>> {
        let (seqs, _) = self.transact(self.write_step(), |_| Ok(events.to_vec()))?;
        Ok(seqs)
    }

    /// Makes the intent of `call_id` durable (`tool_started`); returns its
    /// seq and the operation id the tool must receive.
    pub fn start_tool(&mut self, call_id: &str) -> Result<(Seq, Option<String>)> {
        let seq = self.append(&Event::ToolStarted {
            call_id: call_id.to_string(),
        })?;
        let op = self
            .projection
            .open_calls()
            .get(call_id)
            .and_then(|c| c.operation_id.clone());
        Ok((seq, op))
    }

    /// Closes the open run and marks every unmarked call without a result,
    /// all in one transaction (a crash leaves all marks or none; a second
    /// recovery appends nothing).
    pub fn recover(&mut self) -> Result<RecoveryState> {
        let (seqs, _) = self.transact(self.write_step(), |p| Ok(recovery_marks(p)))?;
        Ok(self.recovery_state(seqs.len() as u64))
    }

    fn recovery_state(&self, appended: u64) -> RecoveryState {
        let p = &self.projection;
        RecoveryState {
            repaired: None,
            interrupted_runs: p.interrupted_runs().to_vec(),
            uncertain: p
                .uncertain_calls()
                .into_iter()
                .map(uncertain_call)
                .collect(),
            appended,
        }
    }

    /// One write transaction: lock the session row, apply `step` to its
    /// lease (the epoch check of every write), fold what others appended,
    /// let `build` decide the events from the current fold, check and
    /// insert each, write the lease and `next_seq`, commit. On success this
    /// process's fold includes them; on any error nothing of them was
    /// written. Returns the seqs and, for an acquired or renewed lease, its
    /// grant.
    ///
    /// When the connection dies under it, the store reconnects (the same
    /// lease, the same epoch: a reconnect is not a new owner) and asks the
    /// server what became of the transaction (`txid_status`): committed
    /// (the connection died after the server took its `COMMIT`) is
    /// success; anything else wrote nothing, and the transaction runs once
    /// more on the new connection, fenced like the first.
    fn transact(
        &mut self,
        step: LeaseStep<'_>,
        build: impl Fn(&Projection) -> Result<Vec<Event>>,
    ) -> Result<(Vec<Seq>, Option<LeaseGrant>)> {
        let (error, txid, at_commit) = match self.transact_once(step, &build) {
            Ok(done) => return Ok(done),
            Err(Attempt::Failed(e)) => return Err(e),
            Err(Attempt::Lost {
                error,
                txid,
                at_commit,
            }) => (error, txid, at_commit),
        };
        self.reconnect(&error)?;
        let committed = if fault::active(Fault::LostCommitAssumed) {
            at_commit.is_some() // Broken on purpose: the server is not asked.
        } else {
            match txid {
                Some(txid) => self.committed(txid, &error)?,
                None => false,
            }
        };
        if !committed {
            let step = self.held_epoch(step);
            return self
                .transact_once(step, &build)
                .map_err(Attempt::into_error);
        }
        let written = at_commit.ok_or_else(|| {
            StoreError::Io(format!(
                "{error}; the server says its transaction committed, but this process never sent its COMMIT"
            ))
        })?;
        Ok(self.keep(*written))
    }

    /// `step` fenced by the epoch this connection holds now (a retry's).
    fn held_epoch<'a>(&self, step: LeaseStep<'a>) -> LeaseStep<'a> {
        let Some(epoch) = self.lease.as_ref().map(|h| h.grant.epoch) else {
            return step;
        };
        match step {
            LeaseStep::Fence { .. } => LeaseStep::Fence { epoch },
            LeaseStep::Renew { ttl_ms, .. } => LeaseStep::Renew { epoch, ttl_ms },
            LeaseStep::Release { .. } => LeaseStep::Release { epoch },
            other => other,
        }
    }

    /// Takes in what a committed transaction wrote.
    fn keep(&mut self, written: Written) -> (Vec<Seq>, Option<LeaseGrant>) {
        self.events.extend(written.appended);
        self.projection = written.projection;
        (written.seqs, written.grant)
    }

    /// One try of [`PgStore::transact`]; a connection that died under it is
    /// [`Attempt::Lost`], with what it would have written when it died in
    /// the `COMMIT`.
    fn transact_once(
        &mut self,
        step: LeaseStep<'_>,
        build: &impl Fn(&Projection) -> Result<Vec<Event>>,
    ) -> Result<(Vec<Seq>, Option<LeaseGrant>), Attempt> {
        let s = schema::schema_name();
        let key = self.key;
        let mut txid = None;
        // Where this try's own events start in `self.events`, once folded.
        let mut mark = None;
        let mut at_commit = None;
        let lock = if fault::active(Fault::FenceWithoutRowLock) {
            "" // Broken on purpose: the row is read, not locked.
        } else {
            " FOR UPDATE"
        };
        let result = (|| {
            let mut tx = self.client.transaction().map_err(StoreError::pg("begin"))?;
            let row = tx
                .query_one(
                    &format!(
                        "SELECT lease_worker, lease_epoch, lease_granted_ms, lease_expires_ms,
                            (extract(epoch FROM clock_timestamp()) * 1000)::bigint, txid_current()
                         FROM {s}.sessions WHERE key = $1{lock}"
                    ),
                    &[&key],
                )
                .map_err(StoreError::pg("lock the session"))?;
            txid = Some(row.get::<_, i64>(5));
            let mut lease = LeaseRow {
                worker_id: row.get(0),
                epoch: row.get::<_, i64>(1) as u64,
                granted_at_ms: row.get::<_, i64>(2) as u64,
                expires_at_ms: row.get::<_, i64>(3) as u64,
            };
            let now_ms = if fault::active(Fault::LeaseByWorkerClock) {
                worker_clock_ms() // Broken on purpose: the worker's clock, not the database's.
            } else {
                row.get::<_, i64>(4) as u64
            };
            let grant = apply_lease_step(&self.session, step, &mut lease, now_ms)?;
            // What others appended is the database's, whatever becomes of
            // this transaction: it stays folded.
            fetch_and_fold(&mut tx, key, &mut self.events, &mut self.projection)?;
            mark = Some(self.events.len());
            let events = build(&self.projection)?;
            let mut projection = self.projection.clone();
            let seqs = write_checked(&mut tx, key, &events, &mut projection, &mut self.events)?;
            tx.execute(
                &format!(
                    "UPDATE {s}.sessions SET next_seq = $2, lease_worker = $3, lease_epoch = $4,
                        lease_granted_ms = $5, lease_expires_ms = $6
                     WHERE key = $1"
                ),
                &[
                    &key,
                    &(projection.next_seq() as i64),
                    &lease.worker_id,
                    &(lease.epoch as i64),
                    &(lease.granted_at_ms as i64),
                    &(lease.expires_at_ms as i64),
                ],
            )
            .map_err(StoreError::pg("advance next_seq and the lease"))?;
            match tx.commit() {
                Ok(()) => {
                    self.projection = projection;
                    Ok((seqs, grant))
                }
                Err(e) => {
                    at_commit = Some((seqs, grant, projection));
                    Err(StoreError::pg("commit")(e))
                }
            }
        })();
        let error = match result {
            Ok(done) => return Ok(done),
            Err(error) => error,
        };
        let appended = mark.map_or_else(Vec::new, |m| self.events.split_off(m));
        if !self.connection_lost(&error) {
            return Err(Attempt::Failed(error));
        }
        let at_commit = at_commit.map(|(seqs, grant, projection)| {
            Box::new(Written {
                seqs,
                grant,
                appended,
                projection,
            })
        });
        Err(Attempt::Lost {
            error,
            txid,
            at_commit,
        })
    }

    /// A new connection in place of one that died of `error`. It keeps
    /// this connection's lease and epoch: a reconnect is not a new owner.
    fn reconnect(&mut self, error: &StoreError) -> Result<()> {
        self.client = schema::connect(&self.dsn)
            .map_err(|e| StoreError::Io(format!("{error}; reconnecting: {e}")))?;
        if fault::active(Fault::ReconnectAdoptsEpoch) {
            // Broken on purpose: the session's epoch, whoever was granted it.
            let s = schema::schema_name();
            let row = self
                .client
                .query_one(
                    &format!("SELECT lease_epoch FROM {s}.sessions WHERE key = $1"),
                    &[&self.key],
                )
                .map_err(StoreError::pg("read the lease"))?;
            if let Some(held) = &mut self.lease {
                held.grant.epoch = row.get::<_, i64>(0) as u64;
            }
        }
        Ok(())
    }

    /// Whether transaction `txid`, whose connection died of `error`,
    /// committed, by the server's word (`txid_status`). A transaction
    /// still in progress is one whose old backend has not yet seen its
    /// connection close; it ends either way, and the answer is waited for.
    fn committed(&mut self, txid: i64, error: &StoreError) -> Result<bool> {
        let deadline = std::time::Instant::now() + OUTCOME_TIMEOUT;
        loop {
            let status: Option<String> = self
                .client
                .query_one("SELECT txid_status($1)", &[&txid])
                .map_err(StoreError::pg("ask what became of the lost transaction"))?
                .get(0);
            match status.as_deref() {
                Some("committed") => return Ok(true),
                Some("aborted") => return Ok(false),
                Some("in progress") if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                other => {
                    return Err(StoreError::Io(format!(
                        "{error}; transaction {txid} is {} after {}s: its outcome is unknown, the write is not acknowledged",
                        other.unwrap_or("forgotten by the server"),
                        OUTCOME_TIMEOUT.as_secs()
                    )))
                }
            }
        }
    }

    /// Whether `error`, from this connection, left it dead. The server's
    /// last message (a backend it ended says so first) can reach the
    /// client before the connection's end does, through a proxy or over a
    /// slow network: a connection that no longer answers an empty query
    /// is lost too. A refusal of the store's own (a rule, a fence) never
    /// touched the connection and is never asked about.
    fn connection_lost(&mut self, error: &StoreError) -> bool {
        self.client.is_closed()
            || (matches!(error, StoreError::Io(_))
                && self.client.is_valid(LIVENESS_TIMEOUT).is_err())
    }

    /// Runs `read` (idempotent: a read, or an insert that does nothing the
    /// second time) once more on a new connection when its connection died.
    fn reading<T>(&mut self, read: impl Fn(&mut Self) -> Result<T>) -> Result<T> {
        match read(self) {
            Err(e) if self.connection_lost(&e) => {
                self.reconnect(&e)?;
                read(self)
            }
            other => other,
        }
    }

    /// Events with seq greater than `after`, at most `limit`, in seq order,
    /// read from the database.
    pub fn events(&mut self, after: Option<Seq>, limit: Option<u64>) -> Result<Vec<StoredEvent>> {
        let s = schema::schema_name();
        let from = after.map_or(0, |a| a as i64 + 1);
        let limit = limit.map_or(i64::MAX, |l| l.min(i64::MAX as u64) as i64);
        let rows = self.reading(|st| {
            st.client
                .query(
                    &format!(
                        "SELECT seq, ts, event FROM {s}.events WHERE session_key = $1 AND seq >= $2
                         ORDER BY seq LIMIT $3"
                    ),
                    &[&st.key, &from, &limit],
                )
                .map_err(StoreError::pg("read events"))
        })?;
        Ok(rows
            .iter()
            .map(|r| StoredEvent {
                seq: r.get::<_, i64>(0) as Seq,
                ts: r.get(1),
                json: r.get(2),
            })
            .collect())
    }

    /// Reads what others appended, so the projection and context served
    /// are the database's, not this process's memory of it.
    pub fn refresh(&mut self) -> Result<()> {
        self.catch_up_outside()
    }

    /// Stores `bytes` under their SHA-256, committed when this returns.
    pub fn put_blob(&mut self, bytes: &[u8]) -> Result<BlobRef> {
        let s = schema::schema_name();
        let digest = sha256_hex(bytes);
        self.reading(|st| {
            st.client
                .execute(
                    &format!(
                        "INSERT INTO {s}.blobs (digest, data) VALUES ($1, $2) ON CONFLICT (digest) DO NOTHING"
                    ),
                    &[&digest, &bytes],
                )
                .map_err(StoreError::pg("insert blob"))
        })?;
        Ok(BlobRef {
            digest,
            size: bytes.len() as u64,
        })
    }

    /// The bytes of a blob, checked against its reference.
    pub fn get_blob(&mut self, reference: &BlobRef) -> Result<Vec<u8>> {
        let s = schema::schema_name();
        let row = self
            .reading(|st| {
                st.client
                    .query_opt(
                        &format!("SELECT data FROM {s}.blobs WHERE digest = $1"),
                        &[&reference.digest],
                    )
                    .map_err(StoreError::pg("read blob"))
            })?
            .ok_or_else(|| StoreError::NotFound(format!("no blob {}", reference.digest)))?;
        let data: Vec<u8> = row.get(0);
        if sha256_hex(&data) != reference.digest || data.len() as u64 != reference.size {
            return Err(StoreError::Damage(format!(
                "blob {} does not match its reference",
                reference.digest
            )));
        }
        Ok(data)
    }

    /// Forces a checkpoint on the server (`CHECKPOINT`: every dirty page
    /// written and fsynced, so crash recovery starts from here); returns the
    /// seq the checkpoint covers up to (exclusive).
    pub fn checkpoint(&mut self) -> Result<Seq> {
        // A write like any other: fenced on a taken-over connection.
        self.transact(self.write_step(), |_| Ok(Vec::new()))?;
        // CHECKPOINT needs superuser or pg_checkpoint; without it the WAL
        // alone still holds every committed event.
        self.reading(|st| {
            st.client
                .batch_execute("CHECKPOINT")
                .map_err(StoreError::pg("checkpoint"))
        })?;
        Ok(self.projection.next_seq())
    }
}

/// Folds into `projection` the events of session `key` from
/// `projection.next_seq()` on, reading them through `conn` (a client, or a
/// transaction that holds the session row).
fn fetch_and_fold(
    conn: &mut impl postgres::GenericClient,
    key: i64,
    events: &mut Vec<Event>,
    projection: &mut Projection,
) -> Result<()> {
    let s = schema::schema_name();
    let from = projection.next_seq() as i64;
    let rows = conn
        .query(
            &format!(
                "SELECT seq, event FROM {s}.events WHERE session_key = $1 AND seq >= $2 ORDER BY seq"
            ),
            &[&key, &from],
        )
        .map_err(StoreError::pg("read events"))?;
    for row in rows {
        let seq = row.get::<_, i64>(0) as Seq;
        let json: String = row.get(1);
        if seq != projection.next_seq() {
            return Err(StoreError::Damage(format!(
                "session events jump from seq {} to {seq}",
                projection.next_seq()
            )));
        }
        let event: Event = serde_json::from_str(&json)
            .map_err(|e| StoreError::Damage(format!("event {seq} is not an event: {e}")))?;
        events.push(event);
        let (last, earlier) = events.split_last().expect("just pushed");
        projection.apply_event(seq, last, &mut HeldNodes(earlier))?;
    }
    Ok(())
}

/// Checks and inserts each of `events` in turn inside `tx`, folding each
/// into `projection` and `held` so the next is checked against it.
fn write_checked(
    tx: &mut postgres::Transaction<'_>,
    key: i64,
    events: &[Event],
    projection: &mut Projection,
    held: &mut Vec<Event>,
) -> Result<Vec<Seq>> {
    let s = schema::schema_name();
    let mut seqs = Vec::with_capacity(events.len());
    for event in events {
        let seq = projection.next_seq();
        check(projection, held, event)?;
        let json = serde_json::to_string(event).expect("an event serializes");
        tx.execute(
            &format!(
                "INSERT INTO {s}.events (session_key, seq, ts, event) VALUES ($1, $2, {NOW}, $3)"
            ),
            &[&key, &(seq as i64), &json],
        )
        .map_err(StoreError::pg("insert event"))?;
        if let Event::EffectCommitted {
            operation_id,
            external_ref,
            ..
        } = event
        {
            // The ledger: the unique constraint refuses a second commit.
            tx.execute(
                &format!(
                    "INSERT INTO {s}.effects (session_key, operation_id, seq, external_ref) VALUES ($1, $2, $3, $4)"
                ),
                &[&key, operation_id, &(seq as i64), external_ref],
            )
            .map_err(StoreError::pg("record the effect in the ledger"))?;
        }
        held.push(event.clone());
        let (last, earlier) = held.split_last().expect("just pushed");
        projection.apply_event(seq, last, &mut HeldNodes(earlier))?;
        seqs.push(seq);
    }
    Ok(seqs)
}

/// The session rules for `event`: agentstore's, except that whether an
/// operation is already committed is the ledger's unique constraint to
/// say (in [`write_checked`]), not the fold's.
fn check(projection: &Projection, held: &[Event], event: &Event) -> Result<()> {
    let Event::EffectCommitted {
        call_id,
        operation_id,
        ..
    } = event
    else {
        return Ok(projection.check(event, &mut HeldNodes(held))?);
    };
    let call = projection.open_calls().get(call_id).ok_or_else(|| {
        StoreError::Rule(format!(
            "effect_committed for call {call_id:?}, which is unknown or already has a result"
        ))
    })?;
    if call.operation_id.as_deref() != Some(operation_id) {
        return Err(StoreError::Rule(format!(
            "effect_committed for call {call_id:?} names operation {operation_id:?}, the call has {:?}",
            call.operation_id
        )));
    }
    if !call.started {
        return Err(StoreError::Rule(format!(
            "effect_committed for call {call_id:?} before its tool_started (the intent)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(worker: &str, epoch: u64, expires_at_ms: u64) -> LeaseRow {
        LeaseRow {
            worker_id: worker.into(),
            epoch,
            granted_at_ms: 0,
            expires_at_ms,
        }
    }

    fn request(worker: &str, ttl_ms: u64) -> LeaseRequest {
        LeaseRequest {
            worker_id: worker.into(),
            ttl_ms,
        }
    }

    #[test]
    fn a_live_lease_refuses_every_opener_and_an_expired_one_goes_to_the_next_epoch() {
        let mut lease = row("a", 1, 1_000);
        for step in [LeaseStep::Acquire(&request("b", 10)), LeaseStep::PlainOpen] {
            assert!(matches!(
                apply_lease_step("s", step, &mut lease, 999),
                Err(StoreError::LeaseHeld(_))
            ));
        }
        assert_eq!(lease, row("a", 1, 1_000), "a refusal changes nothing");
        let grant = apply_lease_step(
            "s",
            LeaseStep::Acquire(&request("b", 10)),
            &mut lease,
            1_000,
        )
        .unwrap()
        .unwrap();
        assert_eq!((grant.worker_id.as_str(), grant.epoch), ("b", 2));
        assert_eq!((grant.granted_at_ms, grant.expires_at_ms), (1_000, 1_010));
    }

    #[test]
    fn a_plain_open_of_a_leased_session_fences_its_last_owner() {
        let mut never = row("", 0, 0);
        apply_lease_step("s", LeaseStep::PlainOpen, &mut never, 5).unwrap();
        assert_eq!(never.epoch, 0, "a session never leased stays so");
        let mut lapsed = row("a", 3, 10);
        apply_lease_step("s", LeaseStep::PlainOpen, &mut lapsed, 20).unwrap();
        assert_eq!((lapsed.worker_id.as_str(), lapsed.epoch), ("", 4));
        assert!(matches!(
            apply_lease_step("s", LeaseStep::Fence { epoch: 3 }, &mut lapsed, 21),
            Err(StoreError::Fenced(_))
        ));
    }

    #[test]
    fn writes_renewals_and_releases_of_an_older_epoch_are_fenced() {
        let mut lease = row("b", 2, 100);
        for step in [
            LeaseStep::Fence { epoch: 1 },
            LeaseStep::Renew {
                epoch: 1,
                ttl_ms: 50,
            },
            LeaseStep::Release { epoch: 1 },
        ] {
            assert!(matches!(
                apply_lease_step("s", step, &mut lease, 50),
                Err(StoreError::Fenced(_))
            ));
        }
        assert_eq!(lease, row("b", 2, 100));
        // A lapsed lease not taken over still writes and renews.
        apply_lease_step("s", LeaseStep::Fence { epoch: 2 }, &mut lease, 500).unwrap();
        let renewed = apply_lease_step(
            "s",
            LeaseStep::Renew {
                epoch: 2,
                ttl_ms: 50,
            },
            &mut lease,
            500,
        )
        .unwrap()
        .unwrap();
        assert_eq!(renewed.expires_at_ms, 550);
        apply_lease_step("s", LeaseStep::Release { epoch: 2 }, &mut lease, 510).unwrap();
        assert_eq!(lease.expires_at_ms, 510);
        assert!(!lease.is_live(510));
    }
}
