//! The append-only event log of one session: the writer side.
//!
//! [`EventLog`] owns `events.jsonl` while it holds the session's writer lock.
//! It assigns seq, id and ts, frames each event as one line, writes it at the
//! end and makes it durable according to its [`Durability`]. It must never
//! rewrite a byte before the durable end, except to cut a torn tail at open
//! (by the tail rules of [`crate::scan`], with `snapshot.json`'s offset as
//! the floor), and only after copying it to a quarantine file.
//!
//! Pre-allocation: before a line would pass the file's end, the log grows
//! the file with real zero bytes (never `fallocate`: an unwritten extent
//! still costs a metadata commit on its first write) to a multiple of its
//! step, so each append overwrites written, allocated blocks and its
//! fdatasync commits no size change. The zeros are made durable once, by
//! the next fdatasync of the log (the append that grew the file pays the
//! size commit for the whole step): a separate fdatasync of them would
//! add a sync and remove none, and, beside a `Batch` group leader's, two
//! syncs of one file could race on the outcome of a failed one. The step
//! starts at [`PREALLOC_MIN_STEP`] and doubles with each growth up to
//! [`PREALLOC_MAX_BYTES`], so a short-lived writer zero-fills little.
//! The zeros after the last line are the scanner's pre-allocated region,
//! not a torn tail; dropping the handle cuts them off, so a log closed
//! cleanly ends exactly at its last line. A power cut may turn what is
//! written and not yet durable into zeros, and the scanner reads only one
//! line's worth of zeros plus a step there as that region, so a `Batch`
//! group holds at most [`MAX_LINE_BYTES`] of lines (or one line).
//!
//! Failure rules:
//! - a failed write is rolled back to where that line started (the lines
//!   before it, in `Batch` mode perhaps other appenders' waiting for their
//!   group's sync, stay);
//! - a failed `fdatasync` rolls back to the last durable length and poisons
//!   the handle: every later append fails until the session is reopened,
//!   because after a failed sync the kernel may have dropped the dirty pages
//!   and a retried sync could report success for data that is gone.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::checkpoint;
use crate::crashpoint::{self, Note};
use crate::durability::{Acked, Durability, DurablePosition, Written, MAX_GROUP_EVENTS};
use crate::error::{Error, Result};
use crate::event::{event_id, now_ts, Event, Record, Redaction, Seq};
use crate::fault::{self, Fault};
use crate::framing::{self, MAX_LINE_BYTES};
use crate::fsutil;
use crate::index::SparseIndex;
use crate::layout::SessionPaths;
use crate::lock::WriterLock;
use crate::scan::{LogPosition, Scanner, TornTail, PREALLOC_MAX_BYTES};

/// The first pre-allocation step of a handle (see the module doc).
pub const PREALLOC_MIN_STEP: u64 = 64 * 1024;

/// How to open a log for writing.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogOptions {
    pub durability: Durability,
    /// Verify only from this position on: the prefix before it was verified
    /// when a checkpoint was taken. `None` verifies the whole log.
    pub trusted_prefix: Option<LogPosition>,
}

/// What opening found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenReport {
    /// The torn tail that was cut off, if any.
    pub repaired: Option<TornTail>,
    /// Where verification started.
    pub verified_from: LogPosition,
    /// The end of the log after opening (all of it durable).
    pub end: LogPosition,
}

#[derive(Debug)]
struct WriteState {
    /// Where the next line goes (written, maybe not yet durable).
    end: LogPosition,
    /// The file's length: `end` and the zeros pre-allocated after it.
    allocated: u64,
    /// How far the next pre-allocation grows the file at least.
    step: u64,
    durable: DurablePosition,
    /// Events written since the last sync began (batch mode).
    pending: usize,
    /// Events the last group sync covered (batch mode; 1 before the first):
    /// how many the next leader expects back.
    last_group: usize,
    /// How long the last group sync took (batch mode; zero before the
    /// first): how long a leader waits for the rest of the last group.
    last_sync: std::time::Duration,
    sync_running: bool,
    /// Successful fdatasyncs of this handle (what a group commit saves).
    syncs: u64,
    poisoned: Option<String>,
    buf: Vec<u8>,
    index: SparseIndex,
}

/// The writer of one session's event log.
#[derive(Debug)]
pub struct EventLog {
    path: PathBuf,
    file: File,
    durability: Durability,
    state: Mutex<WriteState>,
    /// Woken when a sync finishes: appenders waiting for their ack or for
    /// room in the group.
    synced: Condvar,
    /// Batch mode: woken when an appender has written, for the one group
    /// leader gathering them. Apart from `synced` so that each write wakes
    /// the leader alone, not every appender already waiting for the sync.
    arrived: Condvar,
    /// Batch mode: appenders that called `append` and wait for the state
    /// lock. A group leader waits for these, and only for these.
    arriving: AtomicUsize,
    lock: WriterLock,
}

/// Copies the torn bytes `t` of the log `file` at `path` into a new file
/// next to it, `<log>.torn-<offset>` (or `.torn-<offset>.<n>` if an earlier
/// cut at the same offset left one), durably (file and directory fsynced),
/// before anything is cut. Returns its path.
fn quarantine(file: &File, path: &Path, t: &TornTail) -> Result<PathBuf> {
    use std::io::{Read, Seek, SeekFrom};
    let dir = path.parent().unwrap_or(Path::new("."));
    let base = dir.join(format!("{}{}", crate::layout::QUARANTINE_PREFIX, t.offset));
    let mut n = 0u32;
    let (target, mut out) = loop {
        let target = match n {
            0 => base.clone(),
            n => PathBuf::from(format!("{}.{n}", base.display())),
        };
        if fault::active(Fault::QuarantineOverwrite) {
            // Broken on purpose: no name-collision guard, the earlier cut's file is replaced.
            let out = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&target)
                .map_err(Error::io("create quarantine", &target))?;
            break (target, out);
        }
        match fsutil::create_exclusive(&target) {
            Ok(out) => break (target, out),
            Err(Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 =>
            {
                n += 1
            }
            // Broken on purpose: any error is taken for a name collision.
            Err(Error::Io { .. }) if fault::active(Fault::QuarantineRetriesAnyError) => {
                n = n.wrapping_add(1)
            }
            Err(e) => return Err(e),
        }
    };
    let mut src = file.try_clone().map_err(Error::io("dup", path))?;
    src.seek(SeekFrom::Start(t.offset))
        .map_err(Error::io("seek", path))?;
    let copied = std::io::copy(&mut src.take(t.len), &mut out)
        .map_err(Error::io("write quarantine", &target))?;
    if copied != t.len {
        return Err(Error::Invalid(format!(
            "{} shrank while its torn tail was saved to {} ({copied} of {} bytes read)",
            path.display(),
            target.display(),
            t.len
        )));
    }
    out.sync_all().map_err(Error::io("fsync", &target))?;
    fsutil::fsync_dir(target.parent().unwrap_or(Path::new(".")))?;
    Ok(target)
}

/// The group size a `Batch` log uses for `max_events`: 1 to [`MAX_GROUP_EVENTS`].
fn group_size(max_events: usize) -> usize {
    max_events.clamp(1, MAX_GROUP_EVENTS)
}

/// A trusted prefix must end exactly at a line boundary inside the file.
/// Otherwise appends would leave a hole of zeros (prefix beyond the end) or
/// verification would start mid-line and could cut a committed line as "torn".
fn check_trusted_prefix(file: &File, path: &Path, from: LogPosition) -> Result<()> {
    if from.offset == 0 {
        return Ok(());
    }
    let len = file.metadata().map_err(Error::io("stat", path))?.len();
    let mut last = [0u8; 1];
    if len >= from.offset {
        file.read_exact_at(&mut last, from.offset - 1)
            .map_err(Error::io("read", path))?;
    }
    if len < from.offset || last[0] != b'\n' {
        return Err(Error::Damage {
            path: path.to_path_buf(),
            line: from.line(),
            offset: from.offset,
            reason: format!(
                "the trusted prefix (seq {} at byte offset {}) does not end at a line boundary of this {len}-byte log",
                from.seq, from.offset
            ),
        });
    }
    Ok(())
}

impl EventLog {
    /// Creates the session directory and an empty, durable `events.jsonl`,
    /// then opens it for writing. Fails if the log already exists.
    pub fn create(paths: &SessionPaths, durability: Durability) -> Result<EventLog> {
        fsutil::create_dir_durable(paths.dir())?;
        let lock = WriterLock::acquire(paths)?;
        let events = paths.events();
        if events.exists() {
            return Err(Error::SessionExists {
                id: paths.id().to_string(),
                root: paths.root().to_path_buf(),
            });
        }
        let file = fsutil::create_new_durable(&events)?;
        // The empty file is durable: a power-cut trial may cut back to it.
        crashpoint::synced(&events, 0);
        Ok(EventLog::from_parts(
            events,
            file,
            durability,
            lock,
            LogPosition::START,
            SparseIndex::default(),
        ))
    }

    /// Opens an existing log for writing: takes the writer lock, verifies
    /// every line (or those after `trusted_prefix`), calls `visit` on each
    /// verified record, and cuts a torn tail (exactly the torn bytes, then
    /// fdatasync). Damage before the tail fails the open.
    pub fn open(
        paths: &SessionPaths,
        options: LogOptions,
        mut visit: impl FnMut(u64, &Record) -> Result<()>,
    ) -> Result<(EventLog, OpenReport)> {
        let events = paths.events();
        if !events.exists() {
            return Err(Error::NoSuchSession {
                id: paths.id().to_string(),
                root: paths.root().to_path_buf(),
            });
        }
        let lock = WriterLock::acquire(paths)?;
        let file =
            fsutil::open_nofollow(OpenOptions::new().read(true).write(true), &events, "open")?;
        // The lock checked the entry; this is the file opened.
        let kind = file
            .metadata()
            .map_err(Error::io("stat", &events))?
            .file_type();
        if !kind.is_file() {
            return Err(fsutil::not_regular(&events, kind));
        }
        let from = options.trusted_prefix.unwrap_or(LogPosition::START);
        check_trusted_prefix(&file, &events, from)?;
        // A trusted prefix is the snapshot's; without one, a snapshot that
        // was rejected still says how much of the log was acknowledged.
        let floor = match options.trusted_prefix {
            Some(p) => p,
            None => checkpoint::covered(paths)?.unwrap_or(LogPosition::START),
        };
        let mut index = SparseIndex::default();
        let mut scanner = Scanner::open(&events, from)?.durable_floor(floor);
        while let Some((offset, rec)) = scanner.next_record()? {
            index.note(LogPosition {
                offset,
                seq: rec.seq,
            });
            visit(offset, &rec)?;
        }
        let mut end = scanner.position();
        let mut torn = scanner.torn().cloned();
        if let Some(t) = &mut torn {
            if fault::active(Fault::NoTornTailRepair) {
                // Broken on purpose: keep the fragment, append after it.
                end.offset = t.offset + t.len;
            } else {
                t.quarantine = Some(quarantine(&file, &events, t)?);
                crashpoint::hit("repair.truncate");
                file.set_len(t.offset)
                    .map_err(Error::io("truncate torn tail", &events))?;
                crashpoint::hit("repair.fdatasync");
                file.sync_data()
                    .map_err(Error::io("fdatasync after repair", &events))?;
                crashpoint::synced(&events, t.offset);
            }
        }
        let allocated = file.metadata().map_err(Error::io("stat", &events))?.len();
        if fault::active(Fault::AppendAfterPreallocation) {
            // Broken on purpose: the file's size taken for the end of the log.
            end.offset = allocated;
        }
        let mut log = EventLog::from_parts(events, file, options.durability, lock, end, index);
        log.state
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .allocated = allocated;
        Ok((
            log,
            OpenReport {
                repaired: torn,
                verified_from: from,
                end,
            },
        ))
    }

    fn from_parts(
        path: PathBuf,
        file: File,
        durability: Durability,
        lock: WriterLock,
        end: LogPosition,
        index: SparseIndex,
    ) -> EventLog {
        EventLog {
            path,
            file,
            durability,
            state: Mutex::new(WriteState {
                end,
                allocated: end.offset,
                step: PREALLOC_MIN_STEP,
                durable: DurablePosition {
                    len: end.offset,
                    next_seq: end.seq,
                },
                pending: 0,
                last_group: 1,
                last_sync: std::time::Duration::ZERO,
                sync_running: false,
                syncs: 0,
                poisoned: None,
                buf: Vec::with_capacity(1024),
                index,
            }),
            synced: Condvar::new(),
            arrived: Condvar::new(),
            arriving: AtomicUsize::new(0),
            lock,
        }
    }

    /// The session's writer lock, which this log holds (a leased session
    /// releases it between writes: [`crate::lease`]).
    pub(crate) fn writer_lock(&self) -> &WriterLock {
        &self.lock
    }

    /// Path of `events.jsonl`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The durability mode appends use.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The durable end of the log.
    pub fn durable(&self) -> DurablePosition {
        self.lock_state().durable
    }

    /// How many fdatasyncs of the log this handle has completed: in Batch
    /// mode, the events appended divided by this is the mean group size.
    pub fn syncs(&self) -> u64 {
        self.lock_state().syncs
    }

    /// The end of the log (where the next line goes).
    pub fn end(&self) -> LogPosition {
        self.lock_state().end
    }

    /// The seq the next append gets.
    pub fn next_seq(&self) -> Seq {
        self.lock_state().end.seq
    }

    /// A copy of the sparse index of what this handle has seen.
    pub fn index(&self) -> SparseIndex {
        self.lock_state().index.clone()
    }

    /// The `rewrite-whole-log` fault, broken on purpose as stores that
    /// serialize their whole history on every save are: the file is cut
    /// to zero, then everything is written again with `line` at `offset`.
    fn rewrite_whole(&self, line: &[u8], offset: u64) -> std::io::Result<()> {
        let mut all = vec![0u8; offset as usize];
        self.file.read_exact_at(&mut all, 0)?;
        all.extend_from_slice(line);
        self.file.set_len(0)?;
        crashpoint::write_at("log.write", &self.file, &all, 0)
    }

    fn lock_state(&self) -> MutexGuard<'_, WriteState> {
        // A panic while holding the lock cannot leave the file inconsistent
        // with `end`, because `end` only moves after a successful write.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends one public event; returns once it is durable.
    pub fn append(&self, event: &Event) -> Result<Acked> {
        self.append_with(event, Redaction::Public)
    }

    /// Appends one event with a redaction level; returns once it is durable.
    pub fn append_with(&self, event: &Event, redaction: Redaction) -> Result<Acked> {
        let (st, written) = self.write_locked(event, redaction)?;
        self.acknowledge(st, written)
    }

    /// Writes one event without waiting for its group commit: what a caller
    /// with several appenders does before it waits for each of them (on its
    /// own thread, say) with [`EventLog::wait`]. In `Sync` mode the event is
    /// already durable, in `None` mode never; in `Batch` mode the group it
    /// joined is synced by one of its waiters, or by a later write that
    /// finds the group full.
    pub fn write_with(&self, event: &Event, redaction: Redaction) -> Result<Written> {
        let (st, written) = self.write_locked(event, redaction)?;
        drop(st);
        Ok(written)
    }

    /// Returns once `written` is durable by this log's durability (in
    /// `Batch` mode: leading or joining its group commit). A failed sync
    /// poisons the handle: this and every later wait and append fail.
    pub fn wait(&self, written: Written) -> Result<Acked> {
        if !matches!(self.durability, Durability::Batch { .. }) {
            // Synced by the write (`Sync`), or never durable (`None`).
            return Ok(written.0);
        }
        self.acknowledge(self.lock_state(), written)
    }

    fn acknowledge<'a>(
        &'a self,
        st: MutexGuard<'a, WriteState>,
        written: Written,
    ) -> Result<Acked> {
        match self.durability {
            // `None` is never durable by design; `Sync` wrote and synced.
            Durability::None | Durability::Sync => Ok(written.0),
            Durability::Batch {
                max_delay,
                max_events,
            } => self.wait_group_commit(st, written.0, max_delay, group_size(max_events)),
        }
    }

    /// Writes one event at the end (in `Sync` mode, and synced) and returns
    /// the state lock with it, so that an append waits for its group
    /// without letting go of the lock in between.
    fn write_locked(
        &self,
        event: &Event,
        redaction: Redaction,
    ) -> Result<(MutexGuard<'_, WriteState>, Written)> {
        let batch = matches!(self.durability, Durability::Batch { .. });
        if batch {
            self.arriving.fetch_add(1, Ordering::SeqCst);
        }
        let mut st = self.lock_state();
        if batch {
            // Written (and notified) below; if this append fails first, a
            // leader waiting for it gives up at its max_delay.
            self.arriving.fetch_sub(1, Ordering::SeqCst);
        }
        let (start, id, buf) = loop {
            if let Durability::Batch { max_events, .. } = self.durability {
                // What a power cut can tear is what is written and not yet
                // durable: keep that to one group (the scanner's tail bound).
                let group = group_size(max_events) as u64;
                while st.poisoned.is_none() && st.end.seq - st.durable.next_seq >= group {
                    if st.sync_running {
                        crashpoint::note(Note::GroupWait);
                        st = self.synced.wait(st).unwrap_or_else(|p| p.into_inner());
                    } else {
                        // Nobody leads the full group (its events were
                        // written with `write_with`, and none waits yet,
                        // or its leader has not taken the lock back):
                        // sync it here rather than wait for nobody.
                        let end = st.end;
                        self.sync_to(&mut st, end)?;
                    }
                }
            }
            if let Some(reason) = &st.poisoned {
                return Err(Error::Poisoned {
                    path: self.path.clone(),
                    reason: reason.clone(),
                });
            }
            let start = st.end;
            let early = fault::active(Fault::FdatasyncBeforeWrite)
                || (fault::active(Fault::AckBeforeFsync) && st.durable.len < start.offset);
            if early {
                // Broken on purpose: sync what came before, not this event.
                self.sync_to(&mut st, start)?;
            }
            let id = event_id(start.seq);
            let ts = now_ts();
            let mut buf = std::mem::take(&mut st.buf);
            framing::encode_into(&mut buf, start.seq, &id, &ts, redaction, event);
            if buf.len() > MAX_LINE_BYTES {
                let size = buf.len();
                st.buf = buf;
                return Err(Error::EventTooLarge {
                    size,
                    limit: MAX_LINE_BYTES,
                });
            }
            // A power cut may turn everything written and not yet durable
            // into zeros, and the scanner takes at most one line's worth
            // (plus a pre-allocation step) of zeros at the end for the
            // pre-allocated region (`ZERO_TAIL_MAX_BYTES`): a Batch group
            // holds at most one line's worth of bytes, or one line. Over
            // that, wait for the group before to be durable and encode
            // again (the end, and so this line's seq, may have moved).
            let undurable = start.offset - st.durable.len;
            if batch && undurable > 0 && undurable + buf.len() as u64 > MAX_LINE_BYTES as u64 {
                st.buf = buf;
                if st.sync_running {
                    // A leader may be waiting for this appender (it counted
                    // as arriving): it is not coming into this group.
                    self.arrived.notify_one();
                    crashpoint::note(Note::GroupWait);
                    st = self.synced.wait(st).unwrap_or_else(|p| p.into_inner());
                } else {
                    // Nobody leads the group before (its leader has not
                    // taken the lock back yet, or its appenders were
                    // acknowledged unsynced): sync it here rather than
                    // wait for a sync that may never come.
                    let end = st.end;
                    self.sync_to(&mut st, end)?;
                }
                continue;
            }
            break (start, id, buf);
        };
        let line_len = buf.len() as u64;
        let rewrite = fault::active(Fault::RewriteWholeLog);
        if !rewrite && start.offset + line_len > st.allocated {
            if let Err(e) = self.preallocate(&mut st, start.offset + line_len) {
                st.buf = buf;
                return Err(e);
            }
        }
        let written = if rewrite {
            self.rewrite_whole(&buf, start.offset)
        } else {
            crashpoint::write_at("log.write", &self.file, &buf, start.offset)
        };
        st.buf = buf;
        if let Err(e) = written {
            // Never leave a fragment the next append would fuse with; the
            // lines before it may be other appenders', waiting for a sync.
            let cut = if fault::active(Fault::FailedWriteCutsGroup) {
                st.durable.len // Broken on purpose: those lines go too.
            } else {
                start.offset
            };
            match self.file.set_len(cut) {
                Ok(()) => st.allocated = cut,
                Err(t) => {
                    st.poisoned = Some(format!("write failed ({e}) and rollback failed ({t})"))
                }
            }
            return Err(Error::io("write", &self.path)(e));
        }
        st.end = LogPosition {
            offset: start.offset + line_len,
            seq: start.seq + 1,
        };
        // Past the zeros if they could not be written.
        st.allocated = st.allocated.max(st.end.offset);
        st.index.note(start);
        let written = Written(Acked {
            seq: start.seq,
            id,
            offset: start.offset,
            end: st.end.offset,
        });
        match self.durability {
            Durability::None => {}
            Durability::Sync => {
                let broken = fault::active(Fault::AckBeforeFsync)
                    || fault::active(Fault::FdatasyncBeforeWrite);
                // Broken on purpose: acknowledge now; the sync comes with the next append.
                if !broken {
                    let target = st.end;
                    self.sync_to(&mut st, target)?;
                }
            }
            Durability::Batch { .. } => {
                st.pending += 1;
                self.arrived.notify_one();
            }
        }
        Ok((st, written))
    }

    /// Grows the file with zero bytes from its end to the next multiple of
    /// the step at or past `need` (see the module doc). Pre-allocation only
    /// saves time: if the zeros cannot be written (a disk too full for a
    /// step may still hold the line), they are cut back and the line is
    /// appended to the file as it is. Fails only if that cut fails, which
    /// poisons the handle.
    fn preallocate(&self, st: &mut WriteState, need: u64) -> Result<()> {
        let from = st.allocated;
        let to = need.next_multiple_of(st.step);
        let zeros = vec![0u8; (to - from) as usize];
        match crashpoint::write_at("log.preallocate", &self.file, &zeros, from) {
            Ok(()) => {
                st.allocated = to;
                st.step = (st.step * 2).min(PREALLOC_MAX_BYTES);
                Ok(())
            }
            Err(e) => match self.file.set_len(from) {
                Ok(()) => Ok(()),
                Err(t) => {
                    let reason = format!("pre-allocation failed ({e}) and its cut failed ({t})");
                    st.poisoned = Some(reason.clone());
                    Err(Error::Poisoned {
                        path: self.path.clone(),
                        reason,
                    })
                }
            },
        }
    }

    /// fdatasync while holding the state lock (sync mode, explicit syncs).
    fn sync_to(&self, st: &mut WriteState, target: LogPosition) -> Result<()> {
        crashpoint::hit("log.fdatasync");
        let result = self.fdatasync();
        self.finish_sync(st, target, result)
    }

    fn fdatasync(&self) -> std::io::Result<()> {
        if fault::active(Fault::NoFdatasync) {
            return Ok(()); // Broken on purpose: pretend the bytes are durable.
        }
        let result = self.file.sync_data();
        if result.is_err() && fault::active(Fault::FsyncRetry) {
            // Broken on purpose: after a failed fdatasync the kernel may have
            // dropped the dirty pages, so the retry's success proves nothing.
            return self.file.sync_data();
        }
        result
    }

    /// Applies the outcome of a sync that covered everything up to `target`.
    fn finish_sync(
        &self,
        st: &mut WriteState,
        target: LogPosition,
        result: std::io::Result<()>,
    ) -> Result<()> {
        match result {
            Ok(()) => {
                crashpoint::note(Note::Synced {
                    next_seq: target.seq.max(st.durable.next_seq),
                });
                st.syncs += 1;
                if target.offset > st.durable.len {
                    st.durable = DurablePosition {
                        len: target.offset,
                        next_seq: target.seq,
                    };
                    crashpoint::synced(&self.path, target.offset);
                }
                Ok(())
            }
            Err(e) if fault::active(Fault::KeepRefusedAppend) => {
                crashpoint::note(Note::SyncFailed);
                // Broken on purpose: refuse, but keep the bytes and the position.
                Err(Error::io("fdatasync", &self.path)(e))
            }
            Err(e) => {
                crashpoint::note(Note::SyncFailed);
                let reason = format!("fdatasync failed: {e}");
                let durable = st.durable;
                // Everything after the durable end may be lost: cut it, never re-sync it.
                let _ = self.file.set_len(durable.len);
                st.allocated = durable.len;
                st.end = LogPosition {
                    offset: durable.len,
                    seq: durable.next_seq,
                };
                st.index.truncate_from(durable.next_seq);
                st.poisoned = Some(reason);
                Err(Error::io("fdatasync", &self.path)(e))
            }
        }
    }

    /// Batch mode: wait until a sync covers `acked`, leading one if none runs.
    fn wait_group_commit<'a>(
        &'a self,
        mut st: MutexGuard<'a, WriteState>,
        acked: Acked,
        max_delay: std::time::Duration,
        max_events: usize,
    ) -> Result<Acked> {
        // Whether this appender waited for another's sync (a follower).
        let mut followed = false;
        loop {
            if st.durable.len >= acked.end {
                return Ok(acked);
            }
            if fault::active(Fault::BatchAckWhenWritten) && st.end.offset >= acked.end {
                return Ok(acked); // Broken on purpose: written is not durable.
            }
            if let Some(reason) = &st.poisoned {
                if followed && fault::active(Fault::FailedSyncAcksFollowers) {
                    return Ok(acked); // Broken on purpose: the sync that failed covered it.
                }
                return Err(Error::Poisoned {
                    path: self.path.clone(),
                    reason: reason.clone(),
                });
            }
            if st.sync_running {
                if fault::active(Fault::BatchFollowerEarlyAck) {
                    return Ok(acked); // Broken on purpose: the running sync has not returned.
                }
                followed = true;
                crashpoint::note(Note::GroupWait);
                st = self.synced.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            // Lead this group. Wait (up to max_delay) for the appenders
            // already on their way in. Then, if the last group was larger
            // than this one so far, wait up to one more sync's time for the
            // rest of it: woken by its sync, they are likely coming back,
            // and syncing the first of them alone would halve every group.
            // Nobody is waited for who may not come for longer than that
            // one sync, and a lone appender's groups are of one: no delay.
            st.sync_running = true;
            let start = Instant::now();
            let deadline = start + max_delay;
            let returners_deadline = start + st.last_sync.min(max_delay);
            let expected = st.last_group.min(max_events);
            while st.pending < max_events {
                let until = if self.arriving.load(Ordering::SeqCst) > 0 {
                    deadline
                } else if st.pending < expected {
                    returners_deadline
                } else {
                    break;
                };
                let now = Instant::now();
                if now >= until {
                    break;
                }
                st = self
                    .arrived
                    .wait_timeout(st, until - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            let target = st.end;
            st.last_group = st.pending.max(1);
            st.pending = 0;
            drop(st);
            crashpoint::note(Note::GroupSync);
            crashpoint::hit("log.fdatasync");
            let began = Instant::now();
            let result = self.fdatasync();
            st = self.lock_state();
            st.last_sync = began.elapsed();
            st.sync_running = false;
            let outcome = self.finish_sync(&mut st, target, result);
            self.synced.notify_all();
            outcome?;
        }
    }

    /// Makes everything written so far durable (useful after `Durability::None`).
    pub fn sync(&self) -> Result<DurablePosition> {
        let mut st = self.lock_state();
        if let Some(reason) = &st.poisoned {
            return Err(Error::Poisoned {
                path: self.path.clone(),
                reason: reason.clone(),
            });
        }
        let end = st.end;
        self.sync_to(&mut st, end)?;
        Ok(st.durable)
    }
}

impl Drop for EventLog {
    /// A log closed cleanly ends at its last line: the pre-allocated zeros
    /// are cut (without a sync: a crash may keep them, and then they read
    /// as the pre-allocated region they are). Only by a handle holding the
    /// writer lock: a leased one between writes (released, perhaps taken
    /// over) knows no end of the log, and cutting at its stale end would
    /// destroy what the next owner appended since.
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if st.allocated > st.end.offset && self.lock.is_held() {
            let _ = self.file.set_len(st.end.offset);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::SessionId;

    fn run_started(i: u64) -> Event {
        Event::RunStarted {
            run_id: format!("r{i}"),
        }
    }

    fn file_len(paths: &SessionPaths) -> u64 {
        std::fs::metadata(paths.events()).unwrap().len()
    }

    #[test]
    fn appends_overwrite_pre_allocated_zeros_and_a_clean_close_cuts_them() {
        let dir = tempfile::tempdir().unwrap();
        let paths = SessionPaths::new(dir.path(), &SessionId::new("s").unwrap());
        let log = EventLog::create(&paths, Durability::Sync).unwrap();
        let first = log.append(&run_started(0)).unwrap();
        assert_eq!(file_len(&paths), PREALLOC_MIN_STEP);
        let second = log.append(&run_started(1)).unwrap();
        assert_eq!(
            (second.offset(), file_len(&paths)),
            (first.end(), PREALLOC_MIN_STEP)
        );
        assert_eq!(log.durable().len(), second.end());
        // A crash (no drop) leaves the zeros: the next writer finds the
        // logical end, nothing torn, and appends there.
        let crashed = std::fs::read(paths.events()).unwrap();
        drop(log);
        assert_eq!(file_len(&paths), second.end());
        std::fs::write(paths.events(), &crashed).unwrap();
        let (log, report) = EventLog::open(&paths, LogOptions::default(), |_, _| Ok(())).unwrap();
        assert_eq!((report.end.offset, report.repaired), (second.end(), None));
        assert_eq!(log.append(&run_started(2)).unwrap().offset(), second.end());
        let end = log.end().offset;
        drop(log);
        assert_eq!(file_len(&paths), end);
    }

    #[test]
    fn parallel_writers_waiting_on_their_own_threads_share_one_sync() {
        let dir = tempfile::tempdir().unwrap();
        let paths = SessionPaths::new(dir.path(), &SessionId::new("s").unwrap());
        let batch = Durability::Batch {
            max_delay: std::time::Duration::from_millis(5),
            max_events: 4,
        };
        let log = EventLog::create(&paths, batch).unwrap();
        let before = log.syncs();
        let written: Vec<Written> = (0..4)
            .map(|i| log.write_with(&run_started(i), Redaction::Public).unwrap())
            .collect();
        assert_eq!(log.durable().next_seq(), 0, "a write alone syncs nothing");
        let acked: Vec<Acked> = std::thread::scope(|s| {
            let waiters: Vec<_> = written
                .into_iter()
                .map(|w| s.spawn(|| log.wait(w).unwrap()))
                .collect();
            waiters.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(
            acked.iter().map(Acked::seq).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(log.syncs() - before, 1, "one group, one fdatasync");
        assert_eq!(log.durable().len(), acked[3].end());
        // A full group that nobody waits for is synced by the next write,
        // which then starts the next group.
        let full: Vec<Written> = (4..8)
            .map(|i| log.write_with(&run_started(i), Redaction::Public).unwrap())
            .collect();
        assert_eq!(log.syncs() - before, 1);
        let next = log.write_with(&run_started(8), Redaction::Public).unwrap();
        assert_eq!(log.syncs() - before, 2);
        assert_eq!(log.durable().next_seq(), 8);
        for w in full {
            log.wait(w).unwrap();
        }
        assert_eq!(log.wait(next).unwrap().seq(), 8);
        assert_eq!(log.syncs() - before, 3);
    }

    #[test]
    fn pre_allocation_steps_double_up_to_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let paths = SessionPaths::new(dir.path(), &SessionId::new("s").unwrap());
        let log = EventLog::create(&paths, Durability::None).unwrap();
        let big = Event::RunStarted {
            run_id: "x".repeat(60 * 1024),
        };
        let mut lens = Vec::new();
        while lens.len() < 8 {
            log.append(&big).unwrap();
            let len = file_len(&paths);
            if lens.last() != Some(&len) {
                lens.push(len);
            }
        }
        // Each growth reaches the next multiple of its step past the line.
        let steps: Vec<u64> = lens.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(lens[0], PREALLOC_MIN_STEP);
        assert!(steps.iter().all(|&s| s <= PREALLOC_MAX_BYTES), "{lens:?}");
        assert!(steps.contains(&PREALLOC_MAX_BYTES), "{lens:?}");
        assert!(file_len(&paths) - log.end().offset < PREALLOC_MAX_BYTES);
    }

    #[test]
    fn a_trusted_prefix_off_a_line_boundary_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let paths = SessionPaths::new(dir.path(), &SessionId::new("s").unwrap());
        let log = EventLog::create(&paths, Durability::None).unwrap();
        let acks: Vec<Acked> = (0..3)
            .map(|i| {
                log.append(&Event::RunStarted {
                    run_id: format!("r{i}"),
                })
                .unwrap()
            })
            .collect();
        drop(log);
        let open_at = |offset, seq| {
            let options = LogOptions {
                trusted_prefix: Some(LogPosition { offset, seq }),
                ..LogOptions::default()
            };
            EventLog::open(&paths, options, |_, _| Ok(())).map(|(_, report)| report)
        };
        let good = open_at(acks[2].offset(), 2).unwrap();
        assert_eq!(good.end.seq, 3);
        for offset in [acks[2].offset() + 5, acks[2].end() + 100] {
            match open_at(offset, 2) {
                Err(Error::Damage { offset: at, .. }) => assert_eq!(at, offset),
                other => panic!("prefix at {offset} accepted: {other:?}"),
            }
        }
        // Nothing was cut by the refused opens.
        let len = std::fs::metadata(paths.events()).unwrap().len();
        assert_eq!(len, acks[2].end());
    }
}
