//! A session: the event log plus the rules that make it an agent session.
//!
//! [`Session`] holds the writer lock, the log and the projection. Every
//! append is checked against the session rules first (a result for an
//! unknown call, a second commit, a run finished twice, a parent that does
//! not exist, a tool started before it was called or approved) and refused
//! with [`Error::Rule`]; then what folding it needs is read from the log
//! (a failed read refuses it with nothing written); only then written,
//! made durable, and folded.
//!
//! Opening resumes from `snapshot.json` when the log confirms it and replays
//! only the tail; otherwise it replays the whole log and says why.

use std::path::{Path, PathBuf};

use crate::blob;
use crate::checkpoint::{self, Checkpoint};
use crate::crashpoint;
use crate::create;
use crate::durability::{Acked, Durability, Written};
use crate::error::{Error, Result};
use crate::event::{BlobRef, Event, Record, Redaction, Seq};
use crate::fault::{self, Fault};
use crate::index::SparseIndex;
use crate::layout::{SessionId, SessionPaths};
use crate::lease::LeaseRecord;
use crate::log::{EventLog, LogOptions};
use crate::meta::SessionMeta;
use crate::nodes::{LogNodes, RecentNodes};
use crate::projection::{Fold, Projection};
use crate::scan::{self, LogPosition, Scanner, TornTail};

/// How to create or open a session.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    pub durability: Durability,
    /// Rebind the session to this workspace (recorded as `workspace_rebound`).
    pub workspace: Option<PathBuf>,
}

/// How the projection was rebuilt on open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotUse {
    /// No snapshot: the whole log was replayed.
    Absent,
    /// The snapshot covering events `0..next_seq` was used; only the tail was replayed.
    Used { next_seq: Seq },
    /// A snapshot existed but was not trusted; the whole log was replayed.
    Rejected { reason: String },
}

/// What opening a session found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeReport {
    pub snapshot: SnapshotUse,
    /// Events folded from the log (the tail, or all of them).
    pub replayed: u64,
    /// The torn tail that was cut off, if any.
    pub repaired: Option<TornTail>,
    /// The workspace was rebound from this path.
    pub rebound_from: Option<String>,
}

/// Proof that a tool call's intent is durable: the tool may run now.
#[derive(Debug, Clone)]
pub struct Intent {
    call_id: String,
    operation_id: Option<String>,
    ack: Option<Acked>,
}

impl Intent {
    pub fn call_id(&self) -> &str {
        &self.call_id
    }
    /// The idempotency key the tool must receive.
    pub fn operation_id(&self) -> Option<&str> {
        self.operation_id.as_deref()
    }
    /// The ack of the `tool_started` event. `None` only under the
    /// `skip-intent` fault, which never writes it.
    pub fn ack(&self) -> Option<&Acked> {
        self.ack.as_ref()
    }
}

/// An open session with its writer lock.
#[derive(Debug)]
pub struct Session {
    paths: SessionPaths,
    log: EventLog,
    projection: Projection,
    /// Sparse index over the whole log (snapshot's part plus what was read or written since).
    index: SparseIndex,
    meta: SessionMeta,
    repaired: Option<TornTail>,
    /// The lease this handle owns the session through (`crate::lease`).
    pub(crate) lease: Option<crate::lease::HeldLease>,
    /// Whether this handle holds the writer lock now: always, unless
    /// leased (a leased handle takes it for each write).
    pub(crate) lock_held: bool,
    /// The `ledger-folded-at-sync` fault's commits (seq, operation id)
    /// written by [`Session::write`] and kept out of the ledger until a
    /// sync covers them. Always empty without that fault.
    unsynced_commits: Vec<(Seq, String)>,
}

fn workspace_string(workspace: &Path) -> Result<String> {
    let abs = std::path::absolute(workspace).map_err(Error::io("resolve", workspace))?;
    abs.to_str()
        .map(str::to_string)
        .ok_or_else(|| Error::Invalid(format!("workspace path {} is not UTF-8", abs.display())))
}

impl Session {
    /// Creates a new session bound to `workspace` (see [`crate::create`]
    /// for the crash-safe order of the steps).
    pub fn create(
        root: &Path,
        id: &SessionId,
        workspace: &Path,
        options: SessionOptions,
    ) -> Result<Session> {
        let paths = SessionPaths::new(root, id);
        let (log, init) =
            create::create_session(root, id, &workspace_string(workspace)?, options.durability)?;
        Session::from_initialized(paths, log, init, None)
    }

    /// Opens the session, or creates it if it does not exist yet or if its
    /// creation was interrupted before `session_created` became durable.
    /// What an agent calls at start-up.
    pub fn open_or_create(
        root: &Path,
        id: &SessionId,
        workspace: &Path,
        options: SessionOptions,
    ) -> Result<(Session, Option<ResumeReport>)> {
        let paths = SessionPaths::new(root, id);
        if !paths.events().exists() {
            return Ok((Session::create(root, id, workspace, options)?, None));
        }
        let (session, report) = Session::open_inner(paths, options, Some(workspace), None)?;
        Ok((session, Some(report)))
    }

    fn from_initialized(
        paths: SessionPaths,
        log: EventLog,
        init: create::Initialized,
        repaired: Option<TornTail>,
    ) -> Result<Session> {
        let mut session = Session {
            paths,
            log,
            projection: Projection::default(),
            index: SparseIndex::default(),
            meta: init.meta,
            repaired,
            lease: None,
            lock_held: true,
            unsynced_commits: Vec::new(),
        };
        session.index.note(LogPosition {
            offset: init.acked.offset(),
            seq: init.acked.seq(),
        });
        let events = session.paths.events();
        session.projection.apply_event(
            init.acked.seq(),
            &init.event,
            &mut LogNodes {
                path: &events,
                index: &session.index,
            },
        )?;
        Ok(session)
    }

    /// Opens an existing session for writing and rebuilds its projection.
    pub fn open(
        root: &Path,
        id: &SessionId,
        options: SessionOptions,
    ) -> Result<(Session, ResumeReport)> {
        Session::open_inner(SessionPaths::new(root, id), options, None, None)
    }

    /// Opens for writing; with `lease`, as its owner (`crate::lease`). The
    /// lease is decided right after the log is opened (the writer lock
    /// taken), before anything is written.
    pub(crate) fn open_inner(
        paths: SessionPaths,
        options: SessionOptions,
        create_in: Option<&Path>,
        lease: Option<&agentchaos_protocol::message::LeaseRequest>,
    ) -> Result<(Session, ResumeReport)> {
        let (snapshot, mut snapshot_use) = match checkpoint::read_snapshot(&paths) {
            Ok(Some(s)) => match confirm_snapshot(&paths, s.position()) {
                Ok(()) => {
                    let next_seq = s.next_seq;
                    (Some(s), SnapshotUse::Used { next_seq })
                }
                Err(reason) => (None, SnapshotUse::Rejected { reason }),
            },
            Ok(None) => (None, SnapshotUse::Absent),
            // Damaged, or another session's: the log is replayed instead.
            Err(e @ Error::Damage { .. }) => (
                None,
                SnapshotUse::Rejected {
                    reason: e.to_string(),
                },
            ),
            // A symlink, a FIFO, a file larger than any snapshot: refused.
            Err(e) => return Err(e),
        };
        let events = paths.events();
        let (mut projection, mut index, trusted) = match snapshot {
            Some(s) => {
                let pos = s.position();
                (s.projection, s.index, Some(pos))
            }
            None => (Projection::default(), SparseIndex::default(), None),
        };
        let mut replayed = 0u64;
        let mut seen = RecentNodes::default();
        let opened = {
            let tail_index = index.clone();
            EventLog::open(
                &paths,
                LogOptions {
                    durability: options.durability,
                    trusted_prefix: trusted,
                },
                |offset, rec: &Record| {
                    replayed += 1;
                    index.note(LogPosition {
                        offset,
                        seq: rec.seq,
                    });
                    if trusted.is_some() {
                        projection.apply(
                            rec,
                            &mut LogNodes {
                                path: &events,
                                index: &tail_index,
                            },
                        )
                    } else {
                        seen.observe(rec);
                        projection.apply(rec, &mut seen.with_log(&events, &index))
                    }
                },
            )
        };
        let (log, report) = match opened {
            Ok(ok) => ok,
            // The snapshot matched at its offset but the tail after it does not
            // fold: distrust the snapshot and read the log from the start.
            Err(e) if trusted.is_some() && e.is_damage() => {
                snapshot_use = SnapshotUse::Rejected {
                    reason: format!("the log after the snapshot is unreadable ({e})"),
                };
                projection = Projection::default();
                index = SparseIndex::default();
                replayed = 0;
                let mut seen = RecentNodes::default();
                EventLog::open(
                    &paths,
                    LogOptions {
                        durability: options.durability,
                        trusted_prefix: None,
                    },
                    |offset, rec| {
                        replayed += 1;
                        index.note(LogPosition {
                            offset,
                            seq: rec.seq,
                        });
                        seen.observe(rec);
                        projection.apply(rec, &mut seen.with_log(&events, &index))
                    },
                )?
            }
            Err(e) => return Err(e),
        };
        let held = crate::lease::decide(&paths, lease)?;
        if projection.next_seq() == 0 {
            // The creation was interrupted before session_created was durable.
            let Some(workspace) = create_in else {
                return Err(Error::IncompleteSession {
                    id: paths.id().to_string(),
                });
            };
            let report = ResumeReport {
                snapshot: snapshot_use,
                replayed,
                repaired: report.repaired.clone(),
                rebound_from: None,
            };
            let init = create::initialize(&paths, &log, &workspace_string(workspace)?)?;
            let mut session = Session::from_initialized(paths, log, init, report.repaired.clone())?;
            session.lease = held;
            session.record_quarantines()?;
            return Ok((session, report));
        }
        let mut meta = match SessionMeta::read(&paths) {
            Ok(m) => m,
            Err(e) if crate::fsutil::is_not_found(&e) && projection.session_id().is_some() => {
                // session.json was lost to a crash during creation: rebuild it from the log.
                let mut m =
                    SessionMeta::new(&paths, projection.workspace().unwrap_or_default(), None);
                m.write(&paths)?;
                m
            }
            Err(e) => return Err(e),
        };
        meta.migrate_log_format(&paths)?;
        let mut session = Session {
            paths,
            log,
            projection,
            index,
            meta,
            repaired: report.repaired.clone(),
            lease: held,
            lock_held: true,
            unsynced_commits: Vec::new(),
        };
        session.record_quarantines()?;
        let rebound_from = session.bind_workspace(options.workspace.as_deref())?;
        Ok((
            session,
            ResumeReport {
                snapshot: snapshot_use,
                replayed,
                repaired: report.repaired,
                rebound_from,
            },
        ))
    }

    /// Appends a `tail_quarantined` for every quarantine file in the session
    /// directory that no event names yet: the cut this open made (with its
    /// reason), and any cut whose record a crash prevented (between the cut
    /// and this append). So no cut stays silent.
    fn record_quarantines(&mut self) -> Result<()> {
        if fault::active(Fault::UnrecordedQuarantine) {
            return Ok(()); // Broken on purpose: every cut stays silent.
        }
        for (file, offset) in self.paths.quarantine_files()? {
            if self.projection.is_quarantine_recorded(&file) {
                continue;
            }
            let path = self.paths.dir().join(&file);
            let len = std::fs::symlink_metadata(&path)
                .map_err(Error::io("stat", &path))?
                .len();
            let reason = match &self.repaired {
                Some(t) if t.quarantine.as_deref() == Some(path.as_path()) => t.reason.clone(),
                _ => "a torn tail cut earlier that no event recorded (a crash between the cut and its record, or a cut before session_created)".to_string(),
            };
            crashpoint::hit("repair.record");
            self.append(Event::TailQuarantined {
                file,
                offset,
                len,
                reason,
            })?;
        }
        Ok(())
    }

    /// Checks the workspace still exists, or rebinds it to `new`.
    fn bind_workspace(&mut self, new: Option<&Path>) -> Result<Option<String>> {
        let current = self
            .projection
            .workspace()
            .unwrap_or(&self.meta.workspace)
            .to_string();
        match new {
            Some(new) => {
                let to = workspace_string(new)?;
                if to == current {
                    return Ok(None);
                }
                if !new.is_dir() {
                    return Err(Error::Invalid(format!(
                        "cannot rebind session {} to {to}: not a directory",
                        self.paths.id()
                    )));
                }
                self.append(Event::WorkspaceRebound {
                    from: current.clone(),
                    to: to.clone(),
                })?;
                self.meta.workspace = to;
                self.meta.git_head = create::git_head(new);
                self.meta.write(&self.paths)?;
                Ok(Some(current))
            }
            None => check_workspace(&self.paths, &current).map(|()| None),
        }
    }

    pub fn paths(&self) -> &SessionPaths {
        &self.paths
    }
    pub fn log(&self) -> &EventLog {
        &self.log
    }
    pub fn projection(&self) -> &Projection {
        &self.projection
    }
    pub fn meta(&self) -> &SessionMeta {
        &self.meta
    }
    /// The sparse index over the whole log.
    pub fn index(&self) -> &SparseIndex {
        &self.index
    }
    /// The torn tail cut off when this session was opened.
    pub fn repaired_on_open(&self) -> Option<&TornTail> {
        self.repaired.as_ref()
    }

    /// Checks `event` against the session rules without writing it.
    pub fn check(&self, event: &Event) -> Result<()> {
        let events = self.paths.events();
        self.projection.check(
            event,
            &mut LogNodes {
                path: &events,
                index: &self.index,
            },
        )
    }

    /// Appends a public event after checking the session rules.
    pub fn append(&mut self, event: Event) -> Result<Acked> {
        self.append_redacted(event, Redaction::Public)
    }

    /// Appends an event with a redaction level after checking the session rules.
    pub fn append_redacted(&mut self, event: Event, redaction: Redaction) -> Result<Acked> {
        self.fenced(|s| {
            s.check(&event)?;
            s.write_and_fold(event, redaction)
        })
    }

    /// Appends without checking the rules. Only the `mark-twice` fault uses it.
    pub(crate) fn append_unchecked(&mut self, event: Event) -> Result<Acked> {
        self.write_and_fold(event, Redaction::Public)
    }

    fn write_and_fold(&mut self, event: Event, redaction: Redaction) -> Result<Acked> {
        let fold = self.prepare(&event)?;
        let ack = self.log.append_with(&event, redaction)?;
        self.fold(ack.seq(), ack.offset(), &event, fold);
        Ok(ack)
    }

    /// Reads what folding `event` needs from the log, before it is written:
    /// a failed read refuses the append with nothing written, never after
    /// the event is in the log (where a retry would add it twice).
    fn prepare(&self, event: &Event) -> Result<Fold> {
        let events = self.paths.events();
        self.projection.prepare(
            event,
            &mut LogNodes {
                path: &events,
                index: &self.index,
            },
        )
    }

    fn fold(&mut self, seq: Seq, offset: u64, event: &Event, fold: Fold) {
        self.index.note(LogPosition { offset, seq });
        self.projection.apply_prepared(seq, event, fold);
    }

    /// Writes a public event after checking the session rules, and folds
    /// it, without waiting for it to be durable: one of several parallel
    /// appenders' events (a parallel tool call's), each then waited for
    /// with [`Session::wait`], from as many threads as there are events,
    /// so that `Batch` mode syncs them as one group. The session shows the
    /// event from now on; if its sync fails, the session is poisoned (every
    /// later write fails) and what it shows must not be trusted: reopen it.
    /// A leased session waits before it lets go of the writer lock.
    pub fn write(&mut self, event: Event) -> Result<Written> {
        self.fenced(|s| {
            if fault::active(Fault::LedgerFoldedAtSync) {
                s.fold_synced_commits();
            }
            s.check(&event)?;
            let fold = s.prepare(&event)?;
            let written = s.log.write_with(&event, Redaction::Public)?;
            s.fold(written.seq(), written.0.offset, &event, fold);
            if let Event::EffectCommitted { operation_id, .. } = &event {
                if fault::active(Fault::LedgerFoldedAtSync) {
                    // Broken on purpose: the commit stays out of the ledger
                    // until a sync covers it, so the next write of the same
                    // group may commit the operation again.
                    s.projection.set_committed_for_fault(operation_id, false);
                    s.unsynced_commits
                        .push((written.seq(), operation_id.clone()));
                }
            }
            if s.lease.is_some() {
                return Ok(Written(s.log.wait(written)?));
            }
            Ok(written)
        })
    }

    /// The `ledger-folded-at-sync` fault: the commits a sync now covers
    /// enter the ledger.
    fn fold_synced_commits(&mut self) {
        let durable = self.log.durable().next_seq();
        let (synced, unsynced) = std::mem::take(&mut self.unsynced_commits)
            .into_iter()
            .partition(|(seq, _)| *seq < durable);
        self.unsynced_commits = unsynced;
        for (_, operation) in synced {
            self.projection.set_committed_for_fault(&operation, true);
        }
    }

    /// Returns once an event [`Session::write`] wrote is durable (see
    /// [`EventLog::wait`]). Takes `&self`: several threads wait at once.
    pub fn wait(&self, written: Written) -> Result<Acked> {
        self.log.wait(written)
    }

    /// Records the intent of `call_id` (`tool_started`), durable before the
    /// tool runs. The returned [`Intent`] is what allows running it.
    pub fn start_tool(&mut self, call_id: &str) -> Result<Intent> {
        self.fenced(|s| s.start_tool_unfenced(call_id))
    }

    fn start_tool_unfenced(&mut self, call_id: &str) -> Result<Intent> {
        let event = Event::ToolStarted {
            call_id: call_id.to_string(),
        };
        self.check(&event)?;
        let operation_id = self.projection.open_calls()[call_id].operation_id.clone();
        let ack = if fault::active(Fault::SkipIntent) {
            // Broken on purpose: the intent is never written.
            self.projection.mark_started_unlogged(call_id);
            None
        } else {
            Some(self.append(event)?)
        };
        Ok(Intent {
            call_id: call_id.to_string(),
            operation_id,
            ack,
        })
    }

    /// Stores a large payload as a durable blob.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<BlobRef> {
        blob::put(&self.paths, bytes)
    }

    /// Reads a blob back; `Damage` if its bytes do not match the reference.
    pub fn get_blob(&self, reference: &BlobRef) -> Result<Vec<u8>> {
        blob::get(&self.paths, reference)
    }

    /// Reads every line of the log from the start, verifying each (frame,
    /// checksum, seq, id), whatever a snapshot covers; damage is an error
    /// naming line and byte offset. Recovery calls it before appending.
    pub fn verify_whole_log(&self) -> Result<()> {
        if fault::active(Fault::NoTornTailRepair) {
            // Broken on purpose: the fragment left in place (and whatever
            // fused onto it) must reach the harness, not stop recovery here.
            return Ok(());
        }
        let events = self.paths.events();
        let floor = checkpoint::covered(&self.paths)?.unwrap_or(LogPosition::START);
        let mut scanner = Scanner::open(&events, LogPosition::START)?.durable_floor(floor);
        while scanner.next_record()?.is_some() {}
        let end = self.log.end();
        if scanner.position() != end {
            return Err(Error::Damage {
                path: events,
                line: scanner.position().line(),
                offset: scanner.position().offset,
                reason: format!(
                    "the log verifies only to here, but its writer holds it to byte offset {} (seq {})",
                    end.offset, end.seq
                ),
            });
        }
        Ok(())
    }

    /// Writes a checkpoint of the current projection, covering only what
    /// is durable (the log is synced first).
    pub fn checkpoint(&mut self) -> Result<Checkpoint> {
        self.fenced(|s| {
            crashpoint::hit("checkpoint.begin");
            s.log.sync()?;
            let end = s.log.end();
            checkpoint::write_snapshot(&s.paths, &s.projection, end, &s.index)
        })
    }

    /// Renders the model's view of the active branch (see `context`).
    pub fn context(&self, budget_tokens: Option<u64>) -> Result<String> {
        crate::context::render(&self.paths, &self.projection, &self.index, budget_tokens)
    }

    /// Writes the model's view to `out` as it is read, in bounded memory.
    pub fn write_context(
        &self,
        out: &mut dyn std::io::Write,
        budget_tokens: Option<u64>,
    ) -> Result<()> {
        crate::context::write(
            out,
            &self.paths,
            &self.projection,
            &self.index,
            budget_tokens,
        )
    }
}

impl Session {
    /// Runs one write of a leased handle: waits for the writer lock, checks
    /// that the session is still at this handle's epoch, writes, releases
    /// the lock. Unleased handles (and writes nested in one) just write.
    pub(crate) fn fenced<T>(&mut self, write: impl FnOnce(&mut Session) -> Result<T>) -> Result<T> {
        let Some(held) = self.lease.as_ref() else {
            return write(self);
        };
        if self.lock_held {
            return write(self);
        }
        let epoch = held.record.epoch;
        self.log().writer_lock().retake()?;
        self.lock_held = true;
        let result = self.check_epoch(epoch).and_then(|()| write(self));
        self.lock_held = false;
        let released = self.log().writer_lock().release();
        let value = result?;
        released?;
        Ok(value)
    }

    fn check_epoch(&self, held: u64) -> Result<()> {
        if fault::active(Fault::NoEpochCheck) {
            return Ok(()); // Broken on purpose: a taken-over owner writes on.
        }
        let current = LeaseRecord::read(self.paths())?;
        if fault::active(Fault::RefuseLeasedWrites) {
            // Broken on purpose: the current owner is refused as if fenced.
            return Err(Error::Fenced {
                id: self.paths().id().to_string(),
                held,
                current: current.as_ref().map_or(0, |c| c.epoch),
                worker_id: current.map(|c| c.worker_id).unwrap_or_default(),
            });
        }
        match current {
            Some(c) if c.epoch == held => Ok(()),
            other => Err(Error::Fenced {
                id: self.paths().id().to_string(),
                held,
                current: other.as_ref().map_or(0, |c| c.epoch),
                worker_id: other.map(|c| c.worker_id).unwrap_or_default(),
            }),
        }
    }
}

/// Refuses a session whose workspace no longer exists.
fn check_workspace(paths: &SessionPaths, workspace: &str) -> Result<()> {
    if Path::new(workspace).is_dir() {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "the workspace of session {} has moved: {workspace} no longer exists; rebind it with --workspace NEW",
        paths.id()
    )))
}

/// A session read without the writer lock, for commands that only look
/// (`context`): it works while an agent writes and on a read-only root,
/// and writes nothing. Its projection is the log as of opening: a final
/// line still being written (or torn) is left out, never cut.
#[derive(Debug)]
pub struct SessionView {
    paths: SessionPaths,
    projection: Projection,
    index: SparseIndex,
}

impl SessionView {
    /// Folds the session's log, from the snapshot when the log confirms it.
    /// Refuses a session that does not exist, is incomplete, or whose
    /// workspace has moved (as [`Session::open`] does).
    pub fn open(root: &Path, id: &SessionId) -> Result<SessionView> {
        let paths = SessionPaths::new(root, id);
        crate::fsutil::refuse_symlink(paths.dir())?;
        if !paths.events().exists() {
            return Err(Error::NoSuchSession {
                id: id.to_string(),
                root: root.to_path_buf(),
            });
        }
        let (projection, index) = match fold_read_only(&paths) {
            // A writer may have cut a torn tail we read and appended after
            // it: damage does not move, so fold once more before reporting it.
            Err(e) if e.is_damage() => fold_read_only(&paths)?,
            folded => folded?,
        };
        if projection.next_seq() == 0 {
            return Err(Error::IncompleteSession { id: id.to_string() });
        }
        let workspace = match projection.workspace() {
            Some(w) => w.to_string(),
            None => SessionMeta::read(&paths)?.workspace,
        };
        check_workspace(&paths, &workspace)?;
        Ok(SessionView {
            paths,
            projection,
            index,
        })
    }

    pub fn projection(&self) -> &Projection {
        &self.projection
    }

    /// Renders the model's view of the active branch (see `context`).
    pub fn context(&self, budget_tokens: Option<u64>) -> Result<String> {
        crate::context::render(&self.paths, &self.projection, &self.index, budget_tokens)
    }

    /// Writes the model's view to `out` as it is read, in bounded memory.
    pub fn write_context(
        &self,
        out: &mut dyn std::io::Write,
        budget_tokens: Option<u64>,
    ) -> Result<()> {
        crate::context::write(
            out,
            &self.paths,
            &self.projection,
            &self.index,
            budget_tokens,
        )
    }
}

/// The projection and index of the log, read only: from a confirmed
/// snapshot plus the tail, or from the start. A log that ends before what
/// an intact snapshot covers is damage, as it is to a writer.
fn fold_read_only(paths: &SessionPaths) -> Result<(Projection, SparseIndex)> {
    let events = paths.events();
    // Read before the log: a writer syncs the log before it writes a
    // snapshot, so the log read after it is at least as long.
    let floor = checkpoint::covered(paths)?.unwrap_or(LogPosition::START);
    let snapshot = match checkpoint::read_snapshot(paths) {
        Ok(s) => s,
        // Damaged, or another session's: read from the start, as open does.
        Err(e) if e.is_damage() => None,
        Err(e) => return Err(e),
    };
    if let Some(s) = snapshot {
        if confirm_snapshot(paths, s.position()).is_ok() {
            let from = s.position();
            let (mut projection, mut index) = (s.projection, s.index);
            let snapshot_index = index.clone();
            let tail = scan::verify(&events, from, |offset, rec| {
                index.note(LogPosition {
                    offset,
                    seq: rec.seq,
                });
                projection.apply(
                    rec,
                    &mut LogNodes {
                        path: &events,
                        index: &snapshot_index,
                    },
                )
            });
            match tail {
                Ok(_) => return Ok((projection, index)),
                // Distrust the snapshot and read from the start, as open does.
                Err(e) if e.is_damage() => {}
                Err(e) => return Err(e),
            }
        }
    }
    let mut projection = Projection::default();
    let mut index = SparseIndex::default();
    let mut seen = RecentNodes::default();
    let mut scanner = Scanner::open(&events, LogPosition::START)?.durable_floor(floor);
    while let Some((offset, rec)) = scanner.next_record()? {
        index.note(LogPosition {
            offset,
            seq: rec.seq,
        });
        seen.observe(&rec);
        projection.apply(&rec, &mut seen.with_log(&events, &index))?;
    }
    Ok((projection, index))
}

/// Confirms a snapshot against the log: the line at its offset must carry
/// its `next_seq`, or the log must end exactly there.
fn confirm_snapshot(paths: &SessionPaths, at: LogPosition) -> Result<(), String> {
    let len = std::fs::metadata(paths.events())
        .map_err(|e| format!("cannot stat the log: {e}"))?
        .len();
    if at.offset > len {
        return Err(format!(
            "snapshot covers {} bytes but the log has only {len}",
            at.offset
        ));
    }
    if at.offset == len {
        return Ok(());
    }
    let mut scanner = Scanner::open(&paths.events(), at).map_err(|e| e.to_string())?;
    match scanner.next_record() {
        Ok(Some(_)) => Ok(()),
        // The log ends there, pre-allocated zeros after it.
        Ok(None) if scanner.torn().is_none() => Ok(()),
        // Only the full replay may decide what is torn: never cut from a snapshot's word.
        Ok(None) => Err(format!(
            "no complete event {} at the snapshot's offset {}",
            at.seq, at.offset
        )),
        Err(e) => Err(format!(
            "the line at the snapshot's offset {} is not event {}: {e}",
            at.offset, at.seq
        )),
    }
}
