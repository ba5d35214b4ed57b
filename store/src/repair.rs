//! Fixing a session that does not verify: cut a torn tail, or salvage.
//!
//! [`repair`] only ever removes a torn tail (it is what opening for writing
//! does, the cut bytes saved first and the cut recorded as a
//! `tail_quarantined` event) and refuses damage with its line and offset. [`salvage`] copies the
//! valid prefix of a damaged log, verbatim, into a new session and leaves
//! the original untouched. Nothing here rewrites or deletes a complete line.

use std::io::{Read, Write};
use std::path::Path;

use crate::error::{Error, Result};
use crate::event::{Event, Seq};
use crate::fsck::{check_log, LogProblem};
use crate::fsutil;
use crate::layout::{sessions_dir, SessionId, SessionPaths, EVENTS_FILE, META_FILE};
use crate::log::{EventLog, LogOptions};
use crate::meta::SessionMeta;
use crate::scan::{self, LogPosition, TornTail};

/// What [`repair`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairReport {
    /// The torn tail that was cut, if there was one.
    pub cut: Option<TornTail>,
    /// The end of the log after repair.
    pub end: LogPosition,
}

/// Opens session `id` for writing, which cuts a torn tail (exactly the torn
/// bytes, then fdatasync), and closes it again. Damage is refused with
/// [`Error::Damage`]: repair never deletes a complete line.
pub fn repair(root: &Path, id: &SessionId) -> Result<RepairReport> {
    let paths = SessionPaths::new(root, id);
    let (log, report) = EventLog::open(&paths, LogOptions::default(), |_, _| Ok(()))?;
    // The durable record of the cut. A log without its session_created gets
    // it from the open that finishes the creation, which appends one for
    // every quarantine file no event names.
    if let (Some(cut), true) = (&report.repaired, report.end.seq > 0) {
        if let Some(file) = cut.quarantine.as_deref().and_then(Path::file_name) {
            crate::crashpoint::hit("repair.record");
            log.append(&Event::TailQuarantined {
                file: file.to_string_lossy().into_owned(),
                offset: cut.offset,
                len: cut.len,
                reason: cut.reason.clone(),
            })?;
        }
    }
    Ok(RepairReport {
        cut: report.repaired,
        end: log.end(),
    })
}

/// What [`salvage`] copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SalvageReport {
    /// Events copied into the new session.
    pub kept: u64,
    /// Bytes copied (the whole valid prefix of the original log).
    pub kept_bytes: u64,
    /// Where the copy stopped and why; `None` if the original was valid to its end.
    pub stopped_at: Option<LogProblem>,
    /// Where the new session's `session.json` took its workspace from.
    pub workspace_from: WorkspaceSource,
}

/// The source of a salvaged session's workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceSource {
    /// The original's `session.json`.
    Meta,
    /// The original's `session_created` event (its `session.json` was unreadable).
    FirstEvent,
    /// Neither was readable: the workspace is empty.
    Unknown,
}

/// Copies the valid prefix of session `id`'s log (every line before the
/// first damage or torn tail, verbatim) into a new session `new_id`, with a
/// `session.json` of its own. The new session is built under a hidden name
/// and renamed into place only when complete and durable, so a crash leaves
/// either no new session or a whole one. The original is only read.
/// Linux only (uses `renameat2`).
pub fn salvage(root: &Path, id: &SessionId, new_id: &SessionId) -> Result<SalvageReport> {
    let src = SessionPaths::new(root, id);
    let dst = SessionPaths::new(root, new_id);
    if !src.events().exists() {
        return Err(Error::NoSuchSession {
            id: id.to_string(),
            root: root.to_path_buf(),
        });
    }
    if id == new_id || dst.dir().exists() {
        return Err(Error::SessionExists {
            id: new_id.to_string(),
            root: root.to_path_buf(),
        });
    }
    let floor = crate::checkpoint::covered(&src)?.unwrap_or(LogPosition::START);
    let check = check_log(&src.events(), floor)?;
    // A prefix of valid lines is kept only up to the first event that
    // breaks a session rule: the copy must be a session the store resumes.
    let (kept_end, stopped_at) = match check.problem {
        None | Some(LogProblem::TornTail(_)) => {
            match crate::projection::first_rule_violation(&src, |_| Ok(()))? {
                Some((seq, reason)) => (
                    position_of(&src.events(), seq)?,
                    Some(LogProblem::Rule { seq, reason }),
                ),
                None => (check.valid_end, check.problem),
            }
        }
        problem => (check.valid_end, problem),
    };

    let staging = sessions_dir(root).join(format!(".salvage-{new_id}-{}", std::process::id()));
    let staged = stage(&src, &dst, &staging, kept_end);
    if staged.is_err() {
        // Best effort: a leftover hidden directory is reported by fsck.
        let _ = std::fs::remove_dir_all(&staging);
    }
    let workspace_from = staged?;
    fsutil::rename_noreplace_durable(&staging, dst.dir()).map_err(|e| match e {
        Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists => {
            let _ = std::fs::remove_dir_all(&staging);
            Error::SessionExists {
                id: new_id.to_string(),
                root: root.to_path_buf(),
            }
        }
        e => e,
    })?;
    Ok(SalvageReport {
        kept: kept_end.seq,
        kept_bytes: kept_end.offset,
        stopped_at,
        workspace_from,
    })
}

/// Where the line of event `seq` starts in the valid log at `events`.
fn position_of(events: &Path, seq: Seq) -> Result<LogPosition> {
    let mut at = None;
    scan::verify(events, LogPosition::START, |offset, rec| {
        if rec.seq == seq {
            at = Some(LogPosition { offset, seq });
        }
        Ok(())
    })?;
    at.ok_or_else(|| {
        Error::Invalid(format!(
            "{}: no event seq {seq} to stop before",
            events.display()
        ))
    })
}

/// Builds the new session in `staging`: the copied prefix, verified, and
/// its `session.json`, all durable.
fn stage(
    src: &SessionPaths,
    dst: &SessionPaths,
    staging: &Path,
    kept_end: LogPosition,
) -> Result<WorkspaceSource> {
    if staging.exists() {
        // Left by an earlier salvage of this process id that died: ours to replace.
        std::fs::remove_dir_all(staging).map_err(Error::io("remove", staging))?;
    }
    fsutil::create_dir_durable(staging)?;
    let staged_events = staging.join(EVENTS_FILE);
    copy_prefix(&src.events(), &staged_events, kept_end.offset)?;
    // The copy is what the new session will be: it must verify on its own.
    let copied = scan::verify(&staged_events, LogPosition::START, |_, _| Ok(()))?;
    if copied.end != kept_end || copied.torn.is_some() {
        return Err(Error::Invalid(format!(
            "salvage copy {} does not verify as {} events ({} found); original left untouched",
            staged_events.display(),
            kept_end.seq,
            copied.end.seq
        )));
    }
    let (mut meta, workspace_from) = salvaged_meta(src, dst);
    meta.write_at(&staging.join(META_FILE))?;
    fsutil::fsync_dir(staging)?;
    Ok(workspace_from)
}

/// Copies the first `len` bytes of `from` into the new file `to`, durably.
fn copy_prefix(from: &Path, to: &Path, len: u64) -> Result<()> {
    let src = fsutil::open_for_reading(from, fsutil::Links::Refuse)?;
    let mut out = fsutil::create_new_durable(to)?;
    let copied = std::io::copy(&mut src.take(len), &mut out).map_err(Error::io("copy to", to))?;
    if copied != len {
        return Err(Error::Invalid(format!(
            "{} shrank while being salvaged ({copied} of {len} bytes read)",
            from.display()
        )));
    }
    out.flush().map_err(Error::io("write", to))?;
    out.sync_all().map_err(Error::io("fsync", to))
}

/// The new session's metadata: the original's workspace under the new id.
fn salvaged_meta(src: &SessionPaths, dst: &SessionPaths) -> (SessionMeta, WorkspaceSource) {
    if let Ok(old) = SessionMeta::read(src) {
        let mut meta = SessionMeta::new(dst, &old.workspace, old.git_head);
        meta.schema_version = old.schema_version;
        return (meta, WorkspaceSource::Meta);
    }
    let first = scan::Scanner::open(&src.events(), LogPosition::START)
        .ok()
        .and_then(|mut s| s.next_record().ok().flatten());
    if let Some((_, rec)) = first {
        if let Some(Event::SessionCreated { workspace, .. }) = rec.event() {
            return (
                SessionMeta::new(dst, workspace, None),
                WorkspaceSource::FirstEvent,
            );
        }
    }
    (SessionMeta::new(dst, "", None), WorkspaceSource::Unknown)
}
