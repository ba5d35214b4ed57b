//! The store never writes through a symlink: for each file it writes, a
//! link planted there to a file outside ROOT is refused with an error that
//! names it, and the outside file is left as it was.

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentstore::meta::SessionMeta;
use agentstore::{Session, SessionId, SessionOptions, SessionPaths};

use common::{binary, scratch};

const PRECIOUS: &[u8] = b"important, outside the store\n";

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    paths: SessionPaths,
}

/// A session `s` with one event, and a file outside ROOT.
fn fixture() -> Fixture {
    let dir = scratch();
    let root = dir.path().join("root");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let outside = dir.path().join("important");
    std::fs::write(&outside, PRECIOUS).unwrap();
    let id = SessionId::new("s").unwrap();
    let s = Session::create(&root, &id, &ws, SessionOptions::default()).unwrap();
    let paths = s.paths().clone();
    drop(s);
    Fixture {
        _dir: dir,
        root,
        outside,
        paths,
    }
}

impl Fixture {
    fn plant(&self, at: &Path) {
        let _ = std::fs::remove_file(at);
        symlink(&self.outside, at).unwrap();
    }
    fn open(&self) -> agentstore::Result<Session> {
        Session::open(&self.root, self.paths.id(), SessionOptions::default()).map(|(s, _)| s)
    }
    fn assert_refused<T: std::fmt::Debug>(&self, result: agentstore::Result<T>, at: &Path) {
        let e = result.expect_err("a write through a symlink was not refused");
        let line = e.to_string();
        assert!(
            line.contains(&at.display().to_string()) && line.contains("symbolic link"),
            "{line}"
        );
        assert!(!line.contains('\n'), "{line}");
        assert_eq!(std::fs::read(&self.outside).unwrap(), PRECIOUS);
    }
}

#[test]
fn lock() {
    let _serial = common::serial();
    let f = fixture();
    let at = f.paths.lock();
    f.plant(&at);
    f.assert_refused(f.open(), &at);
    // The CLI: one line naming it, exit 1 (an operation refused).
    let out = Command::new(binary())
        .args(["recover", f.root.to_str().unwrap(), "s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&at.display().to_string()), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(std::fs::read(&f.outside).unwrap(), PRECIOUS);
}

#[test]
fn events_jsonl() {
    let _serial = common::serial();
    let f = fixture();
    let at = f.paths.events();
    // The outside file even looks like this session's log.
    std::fs::write(&f.outside, std::fs::read(&at).unwrap()).unwrap();
    let before = std::fs::read(&f.outside).unwrap();
    f.plant(&at);
    let e = f.open().expect_err("appended through a symlinked log");
    assert!(e.to_string().contains(&at.display().to_string()), "{e}");
    assert_eq!(std::fs::read(&f.outside).unwrap(), before);
}

#[test]
fn snapshot_tmp_and_snapshot_json() {
    let _serial = common::serial();
    let f = fixture();
    let mut s = f.open().unwrap();
    for at in [f.paths.dir().join("snapshot.tmp"), f.paths.snapshot()] {
        f.plant(&at);
        f.assert_refused(s.checkpoint(), &at);
        std::fs::remove_file(&at).unwrap();
    }
    s.checkpoint().unwrap();
    drop(s);
    let at = f.paths.dir().join("snapshot.tmp");
    f.plant(&at);
    f.assert_refused(f.open(), &at);
}

#[test]
fn session_tmp_and_session_json() {
    let _serial = common::serial();
    let f = fixture();
    let mut meta = SessionMeta::read(&f.paths).unwrap();
    for at in [f.paths.dir().join("session.tmp"), f.paths.meta()] {
        f.plant(&at);
        f.assert_refused(meta.write(&f.paths), &at);
        f.assert_refused(f.open(), &at);
        std::fs::remove_file(&at).unwrap();
    }
    meta.write(&f.paths).unwrap();
}

#[test]
fn blobs() {
    let _serial = common::serial();
    let f = fixture();
    let s = f.open().unwrap();
    let bytes = vec![b'x'; 20_000];
    let digest = agentstore::blob::digest(&bytes);
    std::fs::create_dir_all(f.paths.blobs()).unwrap();
    for at in [
        f.paths.blobs().join(format!("{digest}.tmp")),
        f.paths.blobs().join(&digest),
    ] {
        f.plant(&at);
        f.assert_refused(s.put_blob(&bytes), &at);
        std::fs::remove_file(&at).unwrap();
    }
    // The blobs directory itself, linked to a directory outside ROOT.
    let elsewhere = f.outside.with_extension("d");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::remove_dir(f.paths.blobs()).unwrap();
    symlink(&elsewhere, f.paths.blobs()).unwrap();
    f.assert_refused(s.put_blob(&bytes), &f.paths.blobs());
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

#[test]
fn torn_tail_quarantine() {
    let _serial = common::serial();
    let f = fixture();
    let mut bytes = std::fs::read(f.paths.events()).unwrap();
    let len = bytes.len();
    bytes.extend_from_slice(b"{\"crc\":\"0");
    std::fs::write(f.paths.events(), &bytes).unwrap();
    let at = PathBuf::from(format!("{}.torn-{len}", f.paths.events().display()));
    f.plant(&at);
    f.assert_refused(f.open(), &at);
    // Nothing was cut either.
    assert_eq!(std::fs::read(f.paths.events()).unwrap(), bytes);
}

#[test]
fn the_session_directory_itself() {
    let _serial = common::serial();
    let f = fixture();
    let moved = f.root.join("elsewhere");
    std::fs::rename(f.paths.dir(), &moved).unwrap();
    symlink(&moved, f.paths.dir()).unwrap();
    let before = std::fs::read(moved.join("events.jsonl")).unwrap();
    f.assert_refused(f.open(), f.paths.dir());
    assert_eq!(std::fs::read(moved.join("events.jsonl")).unwrap(), before);
}
