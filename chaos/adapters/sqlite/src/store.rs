//! A session in SQLite: create, open, append under the session rules, recover.
//!
//! Every append is one `BEGIN IMMEDIATE … COMMIT` transaction: the rules are
//! checked against the derived tables, the event row is inserted, the
//! derived tables are updated, and only a returned `COMMIT` (the WAL
//! fsynced, `synchronous=FULL`) lets the caller acknowledge it. A refused
//! event rolls the transaction back; nothing of it remains.
//!
//! Recovery appends `run_interrupted` and one `tool_recovery` per call
//! without result and without a mark, all in one transaction: after a
//! crash either all of them are there or none, and a second recovery finds
//! nothing left to mark.

use std::fs::File;
use std::path::{Path, PathBuf};

use agentchaos_protocol::event::{
    BlobRef, Decision, Effect, Event, Phase, ReconcileOutcome, RecoveryStatus,
};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Result, StoreError};
use crate::mutant::{self, Mutant};
use crate::schema;
use crate::view::{self, word, CallRow};

/// Longest accepted session id, in bytes.
const MAX_SESSION_ID: usize = 128;

/// An open session: the connection holds the exclusive lock until dropped.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    session: String,
}

/// What recovery found and recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovery {
    /// Runs without a finish since the last run started.
    pub interrupted_runs: Vec<String>,
    /// Calls marked uncertain and not reconciled, in call order.
    pub uncertain: Vec<CallRow>,
    /// Events this recovery appended.
    pub appended: u64,
}

/// One stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: u64,
    pub ts: String,
    /// The event as JSON: `type` and its fields.
    pub event: Value,
}

/// `ROOT/<session>.sqlite`, after checking the id cannot leave ROOT.
pub fn db_path(root: &Path, session: &str) -> Result<PathBuf> {
    let bad = |why: &str| {
        Err(StoreError::Invalid(format!(
            "invalid session id {session:?}: {why}"
        )))
    };
    if session.is_empty() || session.len() > MAX_SESSION_ID {
        return bad("must be 1 to 128 bytes");
    }
    if session.starts_with('.') {
        return bad("must not start with '.'");
    }
    if !session
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return bad("only ASCII letters, digits, '-', '_' and '.' are allowed");
    }
    Ok(root.join(format!("{session}.sqlite")))
}

fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(StoreError::io("fsync directory", dir))
}

/// Creates `dir` and any missing parents, each made durable in its parent.
fn create_dir_durable(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    create_dir_durable(parent)?;
    match std::fs::create_dir(dir) {
        Ok(()) => fsync_dir(parent),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(StoreError::io("create directory", dir)(e)),
    }
}

fn absolute(path: &Path) -> Result<String> {
    let abs = std::path::absolute(path).map_err(StoreError::io("resolve", path))?;
    abs.to_str().map(str::to_string).ok_or_else(|| {
        StoreError::Invalid(format!("workspace path {} is not UTF-8", abs.display()))
    })
}

/// Parses a store-made event id (`e<seq>`).
pub fn seq_of_id(id: &str) -> Option<i64> {
    let digits = id.strip_prefix('e')?;
    let canonical = !digits.is_empty() && (digits == "0" || !digits.starts_with('0'));
    if canonical && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse().ok()
    } else {
        None
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn rule<T>(msg: String) -> Result<T> {
    Err(StoreError::Rule(msg))
}

impl SqliteStore {
    /// Creates the session database with `session_created` as event 0.
    pub fn create(root: &Path, session: &str, workspace: &Path) -> Result<SqliteStore> {
        let path = db_path(root, session)?;
        let workspace = absolute(workspace)?;
        create_dir_durable(root)?;
        let mut conn = schema::connect(&path, true)?;
        {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(StoreError::sqlite("begin"))?;
            // A file without tables is a creation that never committed: reuse it.
            if schema::version(&tx)? != 0 {
                return Err(StoreError::Exists(format!(
                    "session {session:?} already exists under {}",
                    root.display()
                )));
            }
            schema::create_tables(&tx)?;
            append_in(
                &tx,
                &Event::SessionCreated {
                    session_id: session.to_string(),
                    schema_version: agentchaos_protocol::event::SCHEMA_VERSION,
                    workspace,
                },
            )?;
            tx.commit().map_err(StoreError::sqlite("commit"))?;
        }
        // The new file's directory entry must survive a crash too.
        fsync_dir(root)?;
        Ok(SqliteStore {
            conn,
            session: session.to_string(),
        })
    }

    /// Opens an existing session and takes its lock. With `workspace`, a
    /// different path rebinds the session (`workspace_rebound`); without,
    /// the recorded workspace must still exist.
    pub fn open(root: &Path, session: &str, workspace: Option<&Path>) -> Result<SqliteStore> {
        let path = db_path(root, session)?;
        let missing =
            || StoreError::NotFound(format!("no session {session:?} under {}", root.display()));
        if !path.is_file() {
            return Err(missing());
        }
        let mut conn = schema::connect(&path, false)?;
        let recorded: String = {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(StoreError::sqlite("begin"))?;
            match schema::version(&tx)? {
                0 => return Err(missing()),
                schema::SCHEMA_VERSION => {}
                v => {
                    return Err(StoreError::Damage(format!(
                        "{} has schema version {v}, this store knows {}",
                        path.display(),
                        schema::SCHEMA_VERSION
                    )))
                }
            }
            let ws = tx
                .query_row("SELECT workspace FROM session", [], |r| r.get(0))
                .optional()
                .map_err(StoreError::sqlite("read session"))?;
            if mutant::active(Mutant::LeafFromLastLine) {
                // Broken on purpose: resume at the last message, not the user's branch.
                tx.execute("UPDATE session SET leaf = (SELECT MAX(seq) FROM nodes)", [])
                    .map_err(StoreError::sqlite("reset leaf"))?;
            }
            tx.commit().map_err(StoreError::sqlite("commit"))?;
            ws.ok_or_else(|| {
                StoreError::Damage(format!("{} has tables but no session row", path.display()))
            })?
        };
        let mut store = SqliteStore {
            conn,
            session: session.to_string(),
        };
        match workspace {
            Some(new) => {
                let to = absolute(new)?;
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

    /// The connection, for reading views.
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Appends `event` after checking the rules; returns its seq once the
    /// transaction committed (durable).
    pub fn append(&mut self, event: &Event) -> Result<u64> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(StoreError::sqlite("begin"))?;
        let seq = append_in(&tx, event)?;
        tx.commit().map_err(StoreError::sqlite("commit"))?;
        Ok(seq)
    }

    /// The `ack-before-write` mutant's append: `reply` sends the ack
    /// before the COMMIT (broken on purpose: a crash before the WAL is
    /// written and synced loses an acknowledged event).
    pub fn append_acking_first(
        &mut self,
        event: &Event,
        reply: impl FnOnce(u64) -> std::io::Result<()>,
    ) -> Result<u64> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(StoreError::sqlite("begin"))?;
        let seq = append_in(&tx, event)?;
        reply(seq).map_err(|e| StoreError::Io(format!("cannot reply: {e}")))?;
        tx.commit().map_err(StoreError::sqlite("commit"))?;
        Ok(seq)
    }

    /// Makes the intent of `call_id` durable (`tool_started`); returns its
    /// seq and the operation id the tool must receive.
    pub fn start_tool(&mut self, call_id: &str) -> Result<(u64, Option<String>)> {
        let event = Event::ToolStarted {
            call_id: call_id.to_string(),
        };
        let seq = if mutant::active(Mutant::LoseIntent) {
            // Broken on purpose: claim the seq the intent would get, write
            // only the derived state, never the event.
            check(&self.conn, view::next_seq(&self.conn)?, &event)?;
            apply(&self.conn, 0, &event)?;
            view::next_seq(&self.conn)?
        } else {
            self.append(&event)?
        };
        let op = view::open_call(&self.conn, call_id)?.and_then(|c| c.operation_id);
        Ok((seq, op))
    }

    /// Closes open runs and marks every unmarked call without a result, in
    /// one transaction (idempotent: a second run appends nothing).
    pub fn recover(&mut self) -> Result<Recovery> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(StoreError::sqlite("begin"))?;
        let mut appended = 0;
        if let Some(run_id) = view::open_run(&tx)? {
            append_in(&tx, &Event::RunInterrupted { run_id })?;
            appended += 1;
        }
        let mark_twice = mutant::active(Mutant::MarkTwice);
        for call in view::open_calls(&tx)? {
            let mut phase = call.phase();
            if mutant::active(Mutant::ForgetStarted) && phase != Phase::Requested {
                continue; // Broken on purpose: a durable intent is forgotten.
            }
            if mutant::active(Mutant::RerunUncertain) {
                phase = Phase::Requested; // Broken on purpose: a lie inviting a re-run.
            }
            if call.recovery.is_none() || (mark_twice && call.is_uncertain()) {
                let mark = Event::ToolRecovery {
                    call_id: call.call_id,
                    status: RecoveryStatus::Uncertain,
                    phase,
                };
                if mark_twice {
                    // Broken on purpose: past the rule that refuses a second mark.
                    insert_and_apply(&tx, &mark)?;
                } else {
                    append_in(&tx, &mark)?;
                }
                appended += 1;
            }
        }
        let recovery = Recovery {
            interrupted_runs: view::interrupted_runs(&tx)?,
            uncertain: view::open_calls(&tx)?
                .into_iter()
                .filter(CallRow::is_uncertain)
                .collect(),
            appended,
        };
        if mutant::active(Mutant::RecoveryUncommitted) {
            // Broken on purpose: report the marks, keep none of them.
            tx.rollback().map_err(StoreError::sqlite("rollback"))?;
        } else {
            tx.commit().map_err(StoreError::sqlite("commit"))?;
        }
        Ok(recovery)
    }

    /// Events with seq greater than `after`, at most `limit`, in seq order.
    pub fn events(&self, after: Option<u64>, limit: Option<u64>) -> Result<Vec<StoredEvent>> {
        let from = after.map_or(0, |a| a as i64 + 1);
        let limit = limit.map_or(-1, |l| l.min(i64::MAX as u64) as i64);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, ts, json FROM events WHERE seq >= ?1 ORDER BY seq LIMIT ?2",
            )
            .map_err(StoreError::sqlite("read events"))?;
        let rows = stmt
            .query_map(params![from, limit], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(StoreError::sqlite("read events"))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, ts, json) = row.map_err(StoreError::sqlite("read events"))?;
            let event = serde_json::from_str(&json)
                .map_err(|e| StoreError::Damage(format!("event {seq} is not JSON: {e}")))?;
            out.push(StoredEvent {
                seq: seq as u64,
                ts,
                event,
            });
        }
        Ok(out)
    }

    /// Stores `bytes` under their SHA-256, durable when this returns.
    pub fn put_blob(&mut self, bytes: &[u8]) -> Result<BlobRef> {
        let digest = sha256_hex(bytes);
        self.conn
            .execute(
                "INSERT OR IGNORE INTO blobs (digest, data) VALUES (?1, ?2)",
                params![digest, bytes],
            )
            .map_err(StoreError::sqlite("insert blob"))?;
        Ok(BlobRef {
            digest,
            size: bytes.len() as u64,
        })
    }

    /// The bytes of a blob, checked against its reference.
    pub fn get_blob(&self, reference: &BlobRef) -> Result<Vec<u8>> {
        let data: Vec<u8> = self
            .conn
            .query_row(
                "SELECT data FROM blobs WHERE digest = ?1",
                [&reference.digest],
                |r| r.get(0),
            )
            .optional()
            .map_err(StoreError::sqlite("read blob"))?
            .ok_or_else(|| StoreError::NotFound(format!("no blob {}", reference.digest)))?;
        if sha256_hex(&data) != reference.digest || data.len() as u64 != reference.size {
            return Err(StoreError::Damage(format!(
                "blob {} does not match its reference",
                reference.digest
            )));
        }
        Ok(data)
    }

    /// Copies the WAL into the database file and truncates it; returns the
    /// seq the database file now covers up to (exclusive).
    pub fn checkpoint(&mut self) -> Result<u64> {
        let (busy, _, _): (i64, i64, i64) = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(StoreError::sqlite("checkpoint"))?;
        if busy != 0 {
            return Err(StoreError::Io(
                "sqlite: checkpoint could not complete (database busy)".into(),
            ));
        }
        view::next_seq(&self.conn)
    }
}

/// Checks, inserts and folds one event inside the caller's transaction.
fn append_in(conn: &Connection, event: &Event) -> Result<u64> {
    check(conn, view::next_seq(conn)?, event)?;
    insert_and_apply(conn, event)
}

/// Inserts and folds one event without checking the rules.
fn insert_and_apply(conn: &Connection, event: &Event) -> Result<u64> {
    let seq = view::next_seq(conn)?;
    let json = serde_json::to_string(event).expect("an event serializes");
    conn.execute(
        "INSERT INTO events (seq, type, ts, json) VALUES (?1, ?2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?3)",
        params![seq as i64, event.type_name(), json],
    )
    .map_err(StoreError::sqlite("insert event"))?;
    apply(conn, seq as i64, event)?;
    Ok(seq)
}

fn check_parent(conn: &Connection, parent: Option<&String>) -> Result<()> {
    let Some(p) = parent else { return Ok(()) };
    let known = match seq_of_id(p) {
        Some(seq) => conn
            .query_row("SELECT 1 FROM nodes WHERE seq = ?1", [seq], |_| Ok(()))
            .optional()
            .map_err(StoreError::sqlite("read nodes"))?
            .is_some(),
        None => false,
    };
    if known {
        Ok(())
    } else {
        rule(format!(
            "{p:?} is not a message, tool call, tool result or compaction of this session"
        ))
    }
}

fn require_call(conn: &Connection, call_id: &str, what: &str) -> Result<CallRow> {
    view::open_call(conn, call_id)?.ok_or_else(|| {
        StoreError::Rule(format!(
            "{what}: call {call_id:?} is not open (never called, or it already has its result)"
        ))
    })
}

fn is_committed(conn: &Connection, op: &str) -> Result<bool> {
    Ok(conn
        .query_row(
            "SELECT 1 FROM effects WHERE operation_id = ?1",
            [op],
            |_| Ok(()),
        )
        .optional()
        .map_err(StoreError::sqlite("read effects"))?
        .is_some())
}

/// The session rules: may `event` be appended as event `seq`?
fn check(conn: &Connection, seq: u64, event: &Event) -> Result<()> {
    match event {
        Event::SessionCreated { .. } => {
            if seq != 0 {
                return rule("session_created can only be event 0".into());
            }
        }
        Event::RunStarted { run_id } => {
            if let Some(open) = view::open_run(conn)? {
                return rule(format!(
                    "run {run_id:?} cannot start: run {open:?} is still open"
                ));
            }
            let previous: Option<String> = conn
                .query_row(
                    "SELECT run_id FROM runs ORDER BY started_seq DESC LIMIT 1",
                    [],
                    |r| r.get(0),
                )
                .optional()
                .map_err(StoreError::sqlite("read runs"))?;
            if previous.as_deref() == Some(run_id.as_str()) {
                return rule(format!(
                    "run id {run_id:?} is the previous run's id; a new run needs a new id"
                ));
            }
        }
        Event::RunFinished { run_id, .. }
        | Event::RunInterrupted { run_id }
        | Event::RequestHeader { run_id, .. } => {
            if view::open_run(conn)?.as_deref() != Some(run_id.as_str()) {
                return rule(format!(
                    "{}: run {run_id:?} is not the open run",
                    event.type_name()
                ));
            }
        }
        Event::UserMessage { parent, .. } | Event::AssistantMessage { parent, .. } => {
            check_parent(conn, parent.as_ref())?
        }
        Event::ToolCall {
            parent,
            call_id,
            effect,
            operation_id,
            ..
        } => {
            check_parent(conn, parent.as_ref())?;
            if view::open_call(conn, call_id)?.is_some() {
                return rule(format!("call {call_id:?} is already open"));
            }
            match operation_id {
                None if *effect == Effect::SideEffect => {
                    return rule(format!(
                        "call {call_id:?} has a side effect but no operation_id"
                    ))
                }
                Some(op) if is_committed(conn, op)? => {
                    return rule(format!("operation {op:?} was already committed"))
                }
                _ => {}
            }
        }
        Event::Approval { call_id, .. } => {
            let call = require_call(conn, call_id, "approval")?;
            if !call.needs_approval {
                return rule(format!("call {call_id:?} needs no approval"));
            }
            if call.approval.is_some() {
                return rule(format!("call {call_id:?} was already decided on"));
            }
        }
        Event::ToolStarted { call_id } => {
            let call = require_call(conn, call_id, "tool_started")?;
            if call.needs_approval && call.approval != Some(Decision::Approved) {
                return rule(format!("call {call_id:?} is not approved"));
            }
            if call.external_ref.is_some() {
                if mutant::active(Mutant::RerunCommitted) {
                    return Ok(()); // Broken on purpose: the effect may happen twice.
                }
                return rule(format!(
                    "call {call_id:?} has committed its effect and must not run again"
                ));
            }
            if call.started {
                // Running again is allowed only after a crash, and for a side
                // effect only when it never started or is known not applied.
                let again = match call.recovery {
                    None => false,
                    Some(_) if call.effect != Effect::SideEffect => true,
                    Some(Phase::Requested) => true,
                    Some(_) => call.reconciled == Some(ReconcileOutcome::NotApplied),
                };
                if !again {
                    return rule(format!(
                        "call {call_id:?} was started before; reconcile it (not_applied) before running it again"
                    ));
                }
            }
        }
        Event::EffectCommitted {
            call_id,
            operation_id,
            ..
        } => {
            let call = require_call(conn, call_id, "effect_committed")?;
            if is_committed(conn, operation_id)? && !mutant::active(Mutant::DoubleCommit) {
                return rule(format!(
                    "operation {operation_id:?} was already committed; a second commit is refused"
                ));
            }
            if call.operation_id.as_deref() != Some(operation_id.as_str()) {
                return rule(format!(
                    "call {call_id:?} has operation {:?}, not {operation_id:?}",
                    call.operation_id
                ));
            }
            if !call.started {
                return rule(format!(
                    "call {call_id:?} commits an effect without a durable tool_started"
                ));
            }
        }
        Event::ToolResult {
            parent, call_id, ..
        } => {
            check_parent(conn, parent.as_ref())?;
            require_call(conn, call_id, "tool_result")?;
        }
        Event::ToolRecovery { call_id, .. } => {
            if require_call(conn, call_id, "tool_recovery")?.is_uncertain() {
                return rule(format!("call {call_id:?} is already marked uncertain"));
            }
        }
        Event::ToolReconciled { call_id, .. } => {
            let call = require_call(conn, call_id, "tool_reconciled")?;
            if call.recovery.is_none() {
                return rule(format!("call {call_id:?} was never marked uncertain"));
            }
            if call.reconciled.is_some() {
                return rule(format!("call {call_id:?} is already reconciled"));
            }
        }
        Event::Compaction {
            parent,
            first_kept_id,
            ..
        } => {
            check_parent(conn, parent.as_ref())?;
            let leaf = view::leaf(conn)?;
            if leaf.is_none() || parent.as_deref().and_then(seq_of_id) != leaf {
                return rule("a compaction must hang under the active leaf".into());
            }
            let kept = seq_of_id(first_kept_id);
            if !kept.is_some_and(|k| view::branch(conn).is_ok_and(|b| b.contains(&k))) {
                return rule(format!(
                    "first_kept_id {first_kept_id:?} is not on the active branch"
                ));
            }
        }
        Event::LeafMoved { leaf } => check_parent(conn, Some(leaf))?,
        Event::PlanUpdated { .. } | Event::WorkspaceRebound { .. } => {}
        Event::TailQuarantined { .. } => {
            return rule(
                "tail_quarantined records a torn tail a store cut; this store never cuts one"
                    .into(),
            )
        }
    }
    Ok(())
}

/// Updates the derived tables for event `seq` (already checked and inserted).
fn apply(conn: &Connection, seq: i64, event: &Event) -> Result<()> {
    let exec = |sql: &str, params: &[&dyn rusqlite::ToSql]| -> Result<()> {
        conn.execute(sql, params)
            .map(drop)
            .map_err(StoreError::sqlite("update derived tables"))
    };
    if let Some(parent) = event.parent() {
        let first_kept = match event {
            Event::Compaction { first_kept_id, .. } => seq_of_id(first_kept_id),
            _ => None,
        };
        let parent = parent.and_then(|p| seq_of_id(p));
        exec(
            "INSERT INTO nodes (seq, parent, first_kept) VALUES (?1, ?2, ?3)",
            &[&seq, &parent, &first_kept],
        )?;
        exec("UPDATE session SET leaf = ?1", &[&seq])?;
    }
    const OPEN: &str = "call_id = ?1 AND result_seq IS NULL";
    match event {
        Event::SessionCreated {
            session_id,
            workspace,
            ..
        } => exec(
            "INSERT INTO session (id, session_id, workspace, leaf) VALUES (1, ?1, ?2, NULL)",
            &[session_id, workspace],
        ),
        Event::WorkspaceRebound { to, .. } => exec("UPDATE session SET workspace = ?1", &[to]),
        Event::RunStarted { run_id } => exec(
            "INSERT INTO runs (run_id, started_seq, ended) VALUES (?1, ?2, NULL)",
            &[run_id, &seq],
        ),
        Event::RunFinished { run_id, status } => exec(
            "UPDATE runs SET ended = ?2 WHERE run_id = ?1 AND ended IS NULL",
            &[run_id, &word(status)],
        ),
        Event::RunInterrupted { run_id } => exec(
            "UPDATE runs SET ended = 'interrupted' WHERE run_id = ?1 AND ended IS NULL",
            &[run_id],
        ),
        Event::ToolCall {
            call_id,
            tool,
            args,
            effect,
            operation_id,
            target,
            needs_approval,
            ..
        } => exec(
            "INSERT INTO calls (seq, call_id, tool, args, effect, operation_id, target, needs_approval)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            &[
                &seq,
                call_id,
                tool,
                &args.to_string(),
                &word(effect),
                operation_id,
                target,
                needs_approval,
            ],
        ),
        Event::Approval { call_id, decision } => exec(
            &format!("UPDATE calls SET approval = ?2 WHERE {OPEN}"),
            &[call_id, &word(decision)],
        ),
        Event::ToolStarted { call_id } => exec(
            &format!("UPDATE calls SET started = 1, recovery = NULL, reconciled = NULL WHERE {OPEN}"),
            &[call_id],
        ),
        Event::EffectCommitted {
            call_id,
            operation_id,
            external_ref,
        } => exec(
            &format!(
                "INSERT {} INTO effects (operation_id, call_seq, external_ref, seq)
                 SELECT ?2, seq, ?3, ?4 FROM calls WHERE {OPEN}",
                // Broken on purpose: the ledger overwrites instead of refusing.
                if mutant::active(Mutant::DoubleCommit) { "OR REPLACE" } else { "" }
            ),
            &[call_id, operation_id, external_ref, &seq],
        ),
        Event::ToolResult { call_id, .. } => exec(
            &format!("UPDATE calls SET result_seq = ?2 WHERE {OPEN}"),
            &[call_id, &seq],
        ),
        Event::ToolRecovery { call_id, phase, .. } => exec(
            &format!("UPDATE calls SET recovery = ?2, reconciled = NULL WHERE {OPEN}"),
            &[call_id, &word(phase)],
        ),
        Event::ToolReconciled {
            call_id, outcome, ..
        } => exec(
            &format!("UPDATE calls SET reconciled = ?2 WHERE {OPEN}"),
            &[call_id, &word(outcome)],
        ),
        Event::PlanUpdated { goal, steps } => exec(
            "INSERT OR REPLACE INTO plan (id, goal, steps) VALUES (1, ?1, ?2)",
            &[goal, &serde_json::to_string(steps).expect("steps serialize")],
        ),
        Event::LeafMoved { leaf } => exec("UPDATE session SET leaf = ?1", &[&seq_of_id(leaf)]),
        Event::RequestHeader { .. }
        | Event::UserMessage { .. }
        | Event::AssistantMessage { .. }
        | Event::Compaction { .. }
        | Event::TailQuarantined { .. } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_only_in_canonical_form() {
        assert_eq!(seq_of_id("e0"), Some(0));
        assert_eq!(seq_of_id("e42"), Some(42));
        for bad in ["", "e", "e01", "x1", "e-1", "e1x", "e+1"] {
            assert_eq!(seq_of_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn session_ids_cannot_leave_the_root() {
        for bad in ["", "..", ".hidden", "a/b", "a\\b", "a b"] {
            assert!(matches!(
                db_path(Path::new("/r"), bad),
                Err(StoreError::Invalid(_))
            ));
        }
        assert_eq!(
            db_path(Path::new("/r"), "s-1.x").unwrap(),
            Path::new("/r/s-1.x.sqlite")
        );
    }
}
