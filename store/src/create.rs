//! Creating a session on disk, in an order that survives a crash at any step.
//!
//! Steps: the session directory and an empty `events.jsonl`, both durable
//! and under the writer lock ([`EventLog::create`]); then `session.json`
//! (atomic replace); then the first event, `session_created`. A crash after
//! the log exists but before `session_created` leaves an empty log, which
//! [`initialize`] completes later; it never leaves a log whose first event
//! is something else. This module does not decide what a session may
//! contain after its first event (that is the session layer's job).

use std::path::Path;

use crate::durability::{Acked, Durability};
use crate::error::{Error, Result};
use crate::event::{Event, SCHEMA_VERSION};
use crate::layout::{SessionId, SessionPaths};
use crate::log::EventLog;
use crate::meta::SessionMeta;

/// The durable first event of a session and the metadata written with it.
#[derive(Debug, Clone)]
pub struct Initialized {
    pub acked: Acked,
    /// The `session_created` event, as written.
    pub event: Event,
    pub meta: SessionMeta,
}

/// Creates session `id` under `root` for `workspace` and returns its open
/// log (holding the writer lock) with its durable `session_created` event.
/// Fails with [`Error::SessionExists`] if the session's log already exists.
pub fn create_session(
    root: &Path,
    id: &SessionId,
    workspace: &str,
    durability: Durability,
) -> Result<(EventLog, Initialized)> {
    let paths = SessionPaths::new(root, id);
    let log = EventLog::create(&paths, durability)?;
    let init = initialize(&paths, &log, workspace)?;
    Ok((log, init))
}

/// The git HEAD commit of `workspace`, when it is a repository. Reads
/// only regular files of at most [`GIT_FILE_MAX_BYTES`] (links followed:
/// they are the workspace's), a ref only under `.git/refs/`, and keeps
/// only what looks like a commit id.
pub fn git_head(workspace: &Path) -> Option<String> {
    let git = workspace.join(".git");
    let read = |path: &Path| {
        crate::fsutil::read_capped(path, GIT_FILE_MAX_BYTES, crate::fsutil::Links::Follow)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
    };
    let head = read(&git.join("HEAD"))?;
    let head = head.trim();
    let commit = match head.strip_prefix("ref: ") {
        Some(r) if r.starts_with("refs/") && !r.split('/').any(|c| c == "..") => {
            read(&git.join(r))?.trim().to_string()
        }
        Some(_) => return None,
        None => head.to_string(),
    };
    let hex = matches!(commit.len(), 40 | 64) && commit.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then_some(commit)
}

/// The most of a git file ([`git_head`]) the store reads: a commit id or a
/// `ref: ` line is far shorter.
pub const GIT_FILE_MAX_BYTES: u64 = 4096;

/// Writes `session.json` and the `session_created` event into an empty,
/// open log: the tail of [`create_session`], also used to complete a
/// creation a crash interrupted. A readable `session.json` left by that
/// creation is kept, and its workspace wins over `workspace`.
pub fn initialize(paths: &SessionPaths, log: &EventLog, workspace: &str) -> Result<Initialized> {
    if log.next_seq() != 0 {
        return Err(Error::Invalid(format!(
            "session {:?} is already initialized ({} events)",
            paths.id().as_str(),
            log.next_seq()
        )));
    }
    let meta = match SessionMeta::read(paths) {
        Ok(meta) if meta.id == paths.id().as_str() => meta,
        _ => {
            let mut meta = SessionMeta::new(paths, workspace, git_head(Path::new(workspace)));
            meta.write(paths)?;
            meta
        }
    };
    let event = Event::SessionCreated {
        session_id: paths.id().to_string(),
        schema_version: SCHEMA_VERSION,
        workspace: meta.workspace.clone(),
    };
    let acked = log.append(&event)?;
    Ok(Initialized { acked, event, meta })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LogOptions;
    use crate::meta::SessionStatus;

    #[test]
    fn creates_log_meta_and_first_event_and_refuses_to_create_twice() {
        let root = tempfile::tempdir().unwrap();
        let id = SessionId::new("s1").unwrap();
        let (log, init) = create_session(root.path(), &id, "/w", Durability::Sync).unwrap();
        assert_eq!((init.acked.seq(), init.acked.offset()), (0, 0));
        assert_eq!(log.durable().len(), init.acked.end());
        drop(log);
        let paths = SessionPaths::new(root.path(), &id);
        let meta = SessionMeta::read(&paths).unwrap();
        assert_eq!((meta.id.as_str(), meta.workspace.as_str()), ("s1", "/w"));
        assert_eq!(meta.status, SessionStatus::Active);
        let mut first = Vec::new();
        EventLog::open(&paths, LogOptions::default(), |_, rec| {
            first.push(rec.event().cloned());
            Ok(())
        })
        .unwrap();
        assert_eq!(
            first,
            vec![Some(Event::SessionCreated {
                session_id: "s1".into(),
                schema_version: SCHEMA_VERSION,
                workspace: "/w".into(),
            })]
        );
        assert!(matches!(
            create_session(root.path(), &id, "/w", Durability::Sync),
            Err(Error::SessionExists { .. })
        ));
    }

    #[test]
    fn an_interrupted_creation_is_completed_with_its_own_workspace() {
        let root = tempfile::tempdir().unwrap();
        let id = SessionId::new("s1").unwrap();
        let paths = SessionPaths::new(root.path(), &id);
        // The crash came after session.json, before session_created.
        let log = EventLog::create(&paths, Durability::Sync).unwrap();
        SessionMeta::new(&paths, "/first", None)
            .write(&paths)
            .unwrap();
        drop(log);
        let (log, _) = EventLog::open(&paths, LogOptions::default(), |_, _| Ok(())).unwrap();
        initialize(&paths, &log, "/second").unwrap();
        assert!(matches!(
            initialize(&paths, &log, "/second"),
            Err(Error::Invalid(_))
        ));
        assert_eq!(SessionMeta::read(&paths).unwrap().workspace, "/first");
    }

    #[test]
    fn git_head_reads_only_a_commit_id_under_the_repository() {
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir_all(git.join("refs/heads")).unwrap();
        let sha = "0123456789abcdef0123456789abcdef01234567";
        std::fs::write(git.join("refs/heads/main"), format!("{sha}\n")).unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(git_head(ws.path()).as_deref(), Some(sha));
        std::fs::write(git.join("HEAD"), format!("{sha}\n")).unwrap();
        assert_eq!(git_head(ws.path()).as_deref(), Some(sha));
        // A ref out of the repository is not followed; what is not a
        // commit id is not kept.
        let outside = ws.path().join("secret");
        std::fs::write(&outside, "hunter2\n").unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/../../secret\n").unwrap();
        assert_eq!(git_head(ws.path()), None);
        std::fs::write(git.join("refs/heads/main"), "hunter2\n").unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(git_head(ws.path()), None);
        // A FIFO is not opened (that would block): no commit.
        std::fs::remove_file(git.join("HEAD")).unwrap();
        nix::unistd::mkfifo(&git.join("HEAD"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(git_head(ws.path()), None);
    }
}
