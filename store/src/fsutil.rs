//! Durable file-system steps: create, replace atomically, fsync a directory.
//!
//! Each step goes through a named crash point. A new file or a rename is
//! durable only after an fsync of its parent directory (fsync(2)); every
//! helper here does that and never reports success before it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::crashpoint;
use crate::error::{Error, Result};
use crate::fault::{self, Fault};

/// fsyncs a directory so that entries created or renamed in it are durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    crashpoint::hit("fsync_dir");
    let d = File::open(dir).map_err(Error::io("open directory", dir))?;
    d.sync_all().map_err(Error::io("fsync directory", dir))
}

/// Creates `dir` and any missing parents, fsyncing each parent whose entry changed.
pub fn create_dir_durable(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        if !parent.as_os_str().is_empty() {
            create_dir_durable(parent)?;
        }
    }
    crashpoint::hit("mkdir");
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(Error::io("mkdir", dir)(e)),
    }
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => fsync_dir(parent),
        _ => Ok(()),
    }
}

/// Creates a new empty file (failing if it exists), fsyncs it and its directory.
pub fn create_new_durable(path: &Path) -> Result<File> {
    crashpoint::hit("create_file");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(Error::io("create", path))?;
    file.sync_all().map_err(Error::io("fsync", path))?;
    if !fault::active(Fault::NoDirFsyncCreate) {
        fsync_dir(parent_of(path))?;
    }
    Ok(file)
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Replaces `path` with `bytes` atomically: temp file, fsync, rename, fsync
/// the directory. After a crash at any point the file holds either the old
/// or the new content, never a mix. `what` names the crash points
/// (`snapshot` gives `snapshot.write`, `snapshot.fsync`, `snapshot.rename`).
pub fn replace_atomic(path: &Path, bytes: &[u8], what: &'static str) -> Result<()> {
    let (write_point, sync_point, rename_point) = crash_points(what);
    let tmp = path.with_extension("tmp");
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(Error::io("create", &tmp))?;
    crashpoint::write_at(write_point, &file, bytes, 0).map_err(Error::io("write", &tmp))?;
    crashpoint::hit(sync_point);
    if !(what == "snapshot" && fault::active(Fault::SnapshotNoFsync)) {
        file.sync_all().map_err(Error::io("fsync", &tmp))?;
    }
    drop(file);
    crashpoint::hit(rename_point);
    std::fs::rename(&tmp, path).map_err(Error::io("rename", path))?;
    if what == "meta" && fault::active(Fault::NoDirFsyncCreate) {
        // Broken on purpose: this fsync would also make events.jsonl's entry durable.
        return Ok(());
    }
    fsync_dir(parent_of(path))
}

/// Renames `from` to `to` unless `to` exists (even as an empty directory,
/// which plain `rename` would replace), then fsyncs `to`'s parent. Linux
/// only (`renameat2` with `RENAME_NOREPLACE`). An existing `to` fails with
/// an [`Error::Io`] of kind `AlreadyExists`.
pub fn rename_noreplace_durable(from: &Path, to: &Path) -> Result<()> {
    use nix::fcntl::{renameat2, RenameFlags};
    crashpoint::hit("file.rename");
    renameat2(None, from, None, to, RenameFlags::RENAME_NOREPLACE)
        .map_err(|errno| Error::io("rename", to)(std::io::Error::from(errno)))?;
    fsync_dir(parent_of(to))
}

/// Overwrites `path` in place (truncate, write, fsync). Not atomic: a crash
/// can leave a torn file. Used only by the `non-atomic-snapshot` fault.
pub fn overwrite_in_place(path: &Path, bytes: &[u8], what: &'static str) -> Result<()> {
    let (write_point, sync_point, _) = crash_points(what);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(Error::io("open", path))?;
    crashpoint::write_at(write_point, &file, bytes, 0).map_err(Error::io("write", path))?;
    crashpoint::hit(sync_point);
    file.flush().map_err(Error::io("flush", path))?;
    file.sync_all().map_err(Error::io("fsync", path))
}

fn crash_points(what: &'static str) -> (&'static str, &'static str, &'static str) {
    match what {
        "snapshot" => ("snapshot.write", "snapshot.fsync", "snapshot.rename"),
        "meta" => ("meta.write", "meta.fsync", "meta.rename"),
        "blob" => ("blob.write", "blob.fsync", "blob.rename"),
        _ => ("file.write", "file.fsync", "file.rename"),
    }
}
