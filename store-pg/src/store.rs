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
use agentchaos_protocol::message::{RecoveryState, UncertainCall};
use agentstore::projection::{node_of_event, Node, NodeSource, OpenCall, Projection};
use agentstore::SessionId;
use postgres::Client;
use sha2::{Digest, Sha256};

use crate::error::{Result, StoreError};
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
    client: Client,
    key: i64,
    session: String,
    /// Events `0..projection.next_seq()`, as this process last saw them.
    events: Vec<Event>,
    projection: Projection,
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

impl PgStore {
    /// Creates session `session` under `root` with `session_created` as
    /// event 0. A session row left without events by a crash between the
    /// two transactions is no session to `open` and is finished here.
    pub fn create(dsn: &str, root: &Path, session: &str, workspace: &Path) -> Result<PgStore> {
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
            client,
            key,
            session: session.to_string(),
            events: Vec::new(),
            projection: Projection::default(),
        };
        store.append(&Event::SessionCreated {
            session_id: session.to_string(),
            schema_version: agentchaos_protocol::event::SCHEMA_VERSION,
            workspace,
        })?;
        Ok(store)
    }

    /// Opens an existing session and reads it. With `workspace`, a
    /// different path rebinds the session (`workspace_rebound`); without,
    /// the recorded workspace must still exist.
    pub fn open(
        dsn: &str,
        root: &Path,
        session: &str,
        workspace: Option<&Path>,
    ) -> Result<PgStore> {
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
            client,
            key,
            session: session.to_string(),
            events: Vec::new(),
            projection: Projection::default(),
        };
        store.catch_up_outside()?;
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
        Ok(store)
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
        let (events, projection) = (&mut self.events, &mut self.projection);
        fetch_and_fold(&mut self.client, self.key, events, projection)
    }

    /// Appends `event` after checking the rules; returns its seq once the
    /// transaction committed.
    pub fn append(&mut self, event: &Event) -> Result<Seq> {
        let event = event.clone();
        let seqs = self.transact(move |_| Ok(vec![event]))?;
        Ok(seqs[0])
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
        let seqs = self.transact(|p| {
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
            Ok(marks)
        })?;
        let p = &self.projection;
        Ok(RecoveryState {
            repaired: None,
            interrupted_runs: p.interrupted_runs().to_vec(),
            uncertain: p
                .uncertain_calls()
                .into_iter()
                .map(uncertain_call)
                .collect(),
            appended: seqs.len() as u64,
        })
    }

    /// One write transaction: lock the session row, fold what others
    /// appended, let `build` decide the events from the current fold,
    /// check and insert each, commit. On success this process's fold
    /// includes them; on any error nothing of them was written (or, when
    /// the commit's answer was lost, the next transaction folds whatever
    /// the database kept).
    fn transact(
        &mut self,
        build: impl FnOnce(&Projection) -> Result<Vec<Event>>,
    ) -> Result<Vec<Seq>> {
        let s = schema::schema_name();
        let mut tx = self.client.transaction().map_err(StoreError::pg("begin"))?;
        tx.query_one(
            &format!("SELECT next_seq FROM {s}.sessions WHERE key = $1 FOR UPDATE"),
            &[&self.key],
        )
        .map_err(StoreError::pg("lock the session"))?;
        fetch_and_fold(&mut tx, self.key, &mut self.events, &mut self.projection)?;
        let events = build(&self.projection)?;
        let mut projection = self.projection.clone();
        let mut held = std::mem::take(&mut self.events);
        let before = held.len();
        let written = write_checked(&mut tx, self.key, &events, &mut projection, &mut held);
        let written = written.and_then(|seqs| {
            tx.execute(
                &format!("UPDATE {s}.sessions SET next_seq = $2 WHERE key = $1"),
                &[&self.key, &(projection.next_seq() as i64)],
            )
            .map_err(StoreError::pg("advance next_seq"))?;
            tx.commit().map_err(StoreError::pg("commit"))?;
            Ok(seqs)
        });
        match written {
            Ok(seqs) => {
                self.events = held;
                self.projection = projection;
                Ok(seqs)
            }
            Err(e) => {
                held.truncate(before);
                self.events = held;
                Err(e)
            }
        }
    }

    /// Events with seq greater than `after`, at most `limit`, in seq order,
    /// read from the database.
    pub fn events(&mut self, after: Option<Seq>, limit: Option<u64>) -> Result<Vec<StoredEvent>> {
        let s = schema::schema_name();
        let from = after.map_or(0, |a| a as i64 + 1);
        let limit = limit.map_or(i64::MAX, |l| l.min(i64::MAX as u64) as i64);
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT seq, ts, event FROM {s}.events WHERE session_key = $1 AND seq >= $2
                     ORDER BY seq LIMIT $3"
                ),
                &[&self.key, &from, &limit],
            )
            .map_err(StoreError::pg("read events"))?;
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
        self.client
            .execute(
                &format!(
                    "INSERT INTO {s}.blobs (digest, data) VALUES ($1, $2) ON CONFLICT (digest) DO NOTHING"
                ),
                &[&digest, &bytes],
            )
            .map_err(StoreError::pg("insert blob"))?;
        Ok(BlobRef {
            digest,
            size: bytes.len() as u64,
        })
    }

    /// The bytes of a blob, checked against its reference.
    pub fn get_blob(&mut self, reference: &BlobRef) -> Result<Vec<u8>> {
        let s = schema::schema_name();
        let row = self
            .client
            .query_opt(
                &format!("SELECT data FROM {s}.blobs WHERE digest = $1"),
                &[&reference.digest],
            )
            .map_err(StoreError::pg("read blob"))?
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
        self.catch_up_outside()?;
        // CHECKPOINT needs superuser or pg_checkpoint; without it the WAL
        // alone still holds every committed event.
        self.client
            .batch_execute("CHECKPOINT")
            .map_err(StoreError::pg("checkpoint"))?;
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
