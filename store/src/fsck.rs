//! Verifying sessions without changing them.
//!
//! [`check_log`] reads every line of a log (frame, checksum, seq contiguity,
//! id) and says how far it is valid and what stops it there. [`fsck_session`]
//! then folds a valid log through the session rules (the first event that
//! breaks one, with its seq) and adds `session.json` and `snapshot.json`;
//! [`fsck_root`] checks every session under ROOT and
//! names entries that are not sessions. This module never writes, never
//! takes the writer lock, and never stops at the first problem of a session
//! when a later check (metadata) can still run.

use std::fmt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::event::{Event, Record, SCHEMA_VERSION};
use crate::fsutil::{self, Links};
use crate::layout::{sessions_dir, SessionId, SessionPaths, BLOBS_DIR, EVENTS_FILE};
use crate::meta::{SessionMeta, LOG_FORMAT};
use crate::scan::{LogPosition, Scanner, TornTail};

/// Why a log is not valid to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogProblem {
    /// Bytes at the end that are not a complete line: cut by `repair` (or
    /// by the next writer's open) without losing any complete line.
    TornTail(TornTail),
    /// A bad line before the tail. Never skipped, never cut: `salvage`
    /// copies the lines before it into a new session.
    Damage {
        line: u64,
        offset: u64,
        reason: String,
    },
    /// A line of a type this build does not know (a newer schema?) that did
    /// not mark itself ignorable. Lines after it are not checked.
    UnknownType {
        line: u64,
        offset: u64,
        type_name: String,
    },
    /// Every line is valid, but the event at `seq` breaks a session rule
    /// (say, a dangling parent): resuming would refuse it. `salvage`
    /// copies the events before it.
    Rule { seq: u64, reason: String },
}

impl LogProblem {
    /// Whether `repair` can fix this without losing a complete line.
    pub fn is_repairable(&self) -> bool {
        matches!(self, LogProblem::TornTail(_))
    }
}

impl fmt::Display for LogProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogProblem::TornTail(t) => write!(f, "{t}"),
            LogProblem::Damage {
                line,
                offset,
                reason,
            } => write!(f, "damage at line {line}, byte offset {offset}: {reason}"),
            LogProblem::Rule { seq, reason } => write!(
                f,
                "event seq {seq} (line {}) breaks a session rule: {reason}",
                seq + 1
            ),
            LogProblem::UnknownType {
                line,
                offset,
                type_name,
            } => write!(
                f,
                "unknown event type {type_name:?} at line {line}, byte offset {offset} (written by a newer schema?)"
            ),
        }
    }
}

/// How much of a log is valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogCheck {
    /// Just after the last valid line: its seq is the number of valid events.
    pub valid_end: LogPosition,
    /// What stops the log from being valid to its end, if anything.
    pub problem: Option<LogProblem>,
}

/// Reads and verifies the frame of every line of the log at `path` (frame,
/// checksum, seq, id, type; the fields are checked by the fold of
/// [`fsck_session`]), with the tail rules of [`crate::scan`]: no torn tail
/// may start before `floor`, what an intact snapshot covers
/// ([`crate::checkpoint::covered`]), and the log may not end before it.
/// Damage is a finding here, not an error; errors are I/O failures.
pub fn check_log(path: &Path, floor: LogPosition) -> Result<LogCheck> {
    let mut events = Scanner::open(path, LogPosition::START)?.durable_floor(floor);
    let problem = loop {
        match events.next_frame().map(|f| f.is_some()) {
            Ok(true) => continue,
            Ok(false) => break events.torn().cloned().map(LogProblem::TornTail),
            Err(Error::Damage {
                line,
                offset,
                reason,
                ..
            }) => {
                break Some(LogProblem::Damage {
                    line,
                    offset,
                    reason,
                })
            }
            Err(Error::UnknownEventType {
                line,
                offset,
                type_name,
                ..
            }) => {
                break Some(LogProblem::UnknownType {
                    line,
                    offset,
                    type_name,
                })
            }
            Err(e) => return Err(e),
        }
    };
    Ok(LogCheck {
        valid_end: events.position(),
        problem,
    })
}

/// One thing wrong with a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    Log(LogProblem),
    /// `session.json` is missing, unreadable, or does not describe this session.
    Meta(String),
    /// `snapshot.json` is there but damaged (torn, a bad checksum, fields
    /// that do not fit) or another session's: never trusted, only reported
    /// (the log stays the source of truth; the next checkpoint replaces it).
    Snapshot(String),
    /// `lease.json` does not parse.
    Lease(String),
    /// The event at `seq` references a blob that is missing, not a regular
    /// file inside the session, or not what its reference says.
    Blob {
        seq: u64,
        path: String,
        why: String,
    },
    /// A file the store refuses to read (a symlink, a FIFO, a device, a
    /// directory, one larger than the store writes): the session directory,
    /// its log (then nothing else is checked), `snapshot.json`, `lease.json`.
    File(String),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Log(p) => p.fmt(f),
            Problem::Meta(why) => write!(f, "session.json: {why}"),
            Problem::Snapshot(why) => write!(f, "snapshot.json: {why}"),
            Problem::Lease(why) => write!(f, "lease.json: {why}"),
            Problem::Blob { seq, path, why } => {
                write!(f, "event seq {seq} references {path}: {why}")
            }
            Problem::File(why) => f.write_str(why),
        }
    }
}

/// What checking one session found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCheck {
    pub id: SessionId,
    /// Number of valid events (the seq after the last valid line).
    pub events: u64,
    pub problems: Vec<Problem>,
}

/// Verifies session `id`: every line of its log and every blob it
/// references, then its `session.json`, `snapshot.json` and `lease.json`.
/// A file the store refuses to read (a symlink, a FIFO, one larger than
/// the store writes) is a problem, and the checks that need it are skipped.
pub fn fsck_session(root: &Path, id: &SessionId) -> Result<SessionCheck> {
    let paths = SessionPaths::new(root, id);
    if !paths.events().exists() {
        return Err(Error::NoSuchSession {
            id: id.to_string(),
            root: root.to_path_buf(),
        });
    }
    let refused = |checked: Result<()>| match checked {
        Ok(()) => Ok(None),
        Err(e @ Error::Foreign { .. }) => Ok(Some(Problem::File(e.to_string()))),
        Err(e) => Err(e),
    };
    let unreadable = refused(
        fsutil::refuse_symlink(paths.dir())
            .and_then(|()| fsutil::check_regular(&paths.events(), Links::Refuse).map(|_| ())),
    )?;
    if let Some(problem) = unreadable {
        return Ok(SessionCheck {
            id: id.clone(),
            events: 0,
            problems: vec![problem],
        });
    }
    let floor = match crate::checkpoint::covered(&paths) {
        Ok(floor) => floor.unwrap_or(LogPosition::START),
        // Refused (a symlink, too large): reported by the snapshot check.
        Err(Error::Foreign { .. }) => LogPosition::START,
        Err(e) => return Err(e),
    };
    let mut log = check_log(&paths.events(), floor)?;
    // The fold builds every event, so it also finds a line whose fields do
    // not fit (the frame scan does not build events): that damage, if it
    // comes before what the frame scan found, is the first problem. A rule
    // is only judged on a log whose lines are all valid: damage comes first.
    let frames_ok = matches!(log.problem, None | Some(LogProblem::TornTail(_)));
    let mut blobs = BlobCheck::default();
    let folded = crate::projection::first_rule_violation(&paths, |rec| blobs.visit(&paths, rec));
    let rule = match folded {
        Ok(found) if frames_ok => found.map(|(seq, reason)| LogProblem::Rule { seq, reason }),
        Err(Error::Damage {
            line,
            offset,
            reason,
            ..
        }) if offset < log.valid_end.offset || frames_ok => {
            log.valid_end = LogPosition {
                offset,
                seq: line - 1,
            };
            log.problem = None;
            Some(LogProblem::Damage {
                line,
                offset,
                reason,
            })
        }
        Ok(_) | Err(Error::Damage { .. } | Error::UnknownEventType { .. }) => None,
        Err(e) => return Err(e),
    };
    let mut problems: Vec<Problem> = log
        .problem
        .into_iter()
        .chain(rule)
        .map(Problem::Log)
        .collect();
    problems.extend(blobs.problems);
    problems.extend(check_meta(&paths).map(Problem::Meta));
    problems.extend(check_snapshot(&paths)?);
    problems.extend(check_lease(&paths)?);
    Ok(SessionCheck {
        id: id.clone(),
        events: log.valid_end.seq,
        problems,
    })
}

/// The blobs a log references, each checked once ([`crate::blob::check`]);
/// every reference to a bad one is a problem.
#[derive(Default)]
struct BlobCheck {
    /// What was found for each `(digest, size)` referenced so far.
    checked: std::collections::HashMap<(String, u64), Option<String>>,
    problems: Vec<Problem>,
}

impl BlobCheck {
    fn visit(&mut self, paths: &SessionPaths, rec: &Record) -> Result<()> {
        let Some(Event::ToolResult {
            blob: Some(reference),
            ..
        }) = rec.event()
        else {
            return Ok(());
        };
        let key = (reference.digest.clone(), reference.size);
        let found = match self.checked.get(&key) {
            Some(found) => found.clone(),
            None => {
                let found = crate::blob::check(paths, reference)?;
                self.checked.insert(key, found.clone());
                found
            }
        };
        if let Some(why) = found {
            let path = if crate::blob::is_digest(&reference.digest) {
                format!("{BLOBS_DIR}/{}", reference.digest)
            } else {
                format!("{BLOBS_DIR}/{}", crate::error::quote(&reference.digest))
            };
            self.problems.push(Problem::Blob {
                seq: rec.seq,
                path,
                why,
            });
        }
        Ok(())
    }
}

fn check_meta(paths: &SessionPaths) -> Option<String> {
    if !paths.meta().exists() {
        return Some("missing".into());
    }
    match SessionMeta::read(paths) {
        Err(e) => Some(e.to_string()),
        Ok(meta) if meta.id != paths.id().as_str() => Some(format!(
            "names session {:?}, not {:?}",
            meta.id,
            paths.id().as_str()
        )),
        Ok(meta) if meta.schema_version > SCHEMA_VERSION => Some(format!(
            "schema version {} is newer than this build's {SCHEMA_VERSION}",
            meta.schema_version
        )),
        Ok(meta) if meta.log_format > LOG_FORMAT => Some(format!(
            "log format {} is newer than this build's {LOG_FORMAT}",
            meta.log_format
        )),
        Ok(_) => None,
    }
}

/// What is wrong with `snapshot.json`, if anything: damage of its own, or
/// a file the store refuses to read (its position against the log is the
/// log check's). Other I/O failures are errors.
fn check_snapshot(paths: &SessionPaths) -> Result<Option<Problem>> {
    match crate::checkpoint::read_snapshot(paths) {
        Ok(_) => Ok(None),
        Err(Error::Damage { reason, .. }) => Ok(Some(Problem::Snapshot(reason))),
        Err(e @ Error::Foreign { .. }) => Ok(Some(Problem::File(e.to_string()))),
        Err(e) => Err(e),
    }
}

/// What is wrong with `lease.json`, if anything: a record that does not
/// parse, or a file the store refuses to read. Other I/O failures are errors.
fn check_lease(paths: &SessionPaths) -> Result<Option<Problem>> {
    match crate::lease::LeaseRecord::read(paths) {
        Ok(_) => Ok(None),
        Err(Error::Damage { reason, .. }) => Ok(Some(Problem::Lease(reason))),
        Err(e @ Error::Foreign { .. }) => Ok(Some(Problem::File(e.to_string()))),
        Err(e) => Err(e),
    }
}

/// An entry under `ROOT/sessions` that is not a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stray {
    pub name: String,
    pub reason: String,
}

/// What checking every session under ROOT found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootCheck {
    pub sessions: Vec<SessionCheck>,
    pub strays: Vec<Stray>,
}

impl RootCheck {
    /// Whether nothing at all was found wrong.
    pub fn is_clean(&self) -> bool {
        self.strays.is_empty() && self.sessions.iter().all(|s| s.problems.is_empty())
    }
}

/// Verifies every session under `root` and lists entries that are not
/// sessions (e.g. a directory left by a creation or salvage a crash cut short).
pub fn fsck_root(root: &Path) -> Result<RootCheck> {
    if !root.is_dir() {
        return Err(Error::Invalid(format!(
            "{}: not a directory (no store here)",
            root.display()
        )));
    }
    let dir = sessions_dir(root);
    let mut names = Vec::new();
    match std::fs::read_dir(&dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(Error::io("read_dir", &dir))?;
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("read_dir", &dir)(e)),
    }
    names.sort();
    let mut check = RootCheck {
        sessions: Vec::new(),
        strays: Vec::new(),
    };
    for name in names {
        let stray = |reason: String| Stray {
            name: name.clone(),
            reason,
        };
        match SessionId::new(&name) {
            Err(Error::InvalidSessionId { reason, .. }) => {
                check
                    .strays
                    .push(stray(format!("not a valid session id: {reason}")));
            }
            Err(e) => return Err(e),
            Ok(id) => {
                if dir.join(&name).join(EVENTS_FILE).exists() {
                    check.sessions.push(fsck_session(root, &id)?);
                } else {
                    check
                        .strays
                        .push(stray(format!("not a session: no {EVENTS_FILE}")));
                }
            }
        }
    }
    Ok(check)
}
