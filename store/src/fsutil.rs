//! Durable file-system steps: create, replace atomically, fsync a directory.
//!
//! Each step goes through a named crash point. A new file or a rename is
//! durable only after an fsync of its parent directory (fsync(2)); every
//! helper here does that and never reports success before it.
//!
//! The store never writes through a symbolic link: every file it writes is
//! opened with `O_NOFOLLOW` ([`open_nofollow`]), every file it creates with
//! `O_EXCL` as well ([`create_exclusive`]), and a writer refuses a session
//! directory that is, or holds, a symlink ([`refuse_symlinks`]). A planted
//! link fails with one line naming it ([`symlink_refused`]).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
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

/// The error for a symbolic link where the store would write.
pub fn symlink_refused(path: &Path) -> Error {
    Error::Invalid(format!(
        "{} is a symbolic link; the store never writes through one (remove it)",
        path.display()
    ))
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Opens `path` with `options` and `O_NOFOLLOW`: a symlink there fails with
/// [`symlink_refused`] instead of being followed; other failures name `op`.
pub fn open_nofollow(options: &mut OpenOptions, path: &Path, op: &'static str) -> Result<File> {
    options
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(|e| {
            if is_symlink(path) {
                symlink_refused(path)
            } else {
                Error::io(op, path)(e)
            }
        })
}

/// Creates `path` for reading and writing with `O_EXCL` and `O_NOFOLLOW`:
/// fails if anything (a file, a symlink) is already there.
pub fn create_exclusive(path: &Path) -> Result<File> {
    open_nofollow(
        OpenOptions::new().read(true).write(true).create_new(true),
        path,
        "create",
    )
}

/// Refuses a session directory `dir` that is a symlink or holds one (only
/// its own entries are listed; files below `blobs/` are opened with
/// `O_NOFOLLOW` when written). A missing `dir` is fine.
pub fn refuse_symlinks(dir: &Path) -> Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => return Err(symlink_refused(dir)),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("stat", dir)(e)),
    }
    for entry in std::fs::read_dir(dir).map_err(Error::io("read_dir", dir))? {
        let entry = entry.map_err(Error::io("read_dir", dir))?;
        let kind = entry.file_type().map_err(Error::io("stat", entry.path()))?;
        if kind.is_symlink() {
            return Err(symlink_refused(&entry.path()));
        }
    }
    Ok(())
}

/// Removes a temporary left by an earlier crash, only if it is a regular file.
fn remove_stale_temporary(tmp: &Path) -> Result<()> {
    match std::fs::symlink_metadata(tmp) {
        Ok(m) if m.file_type().is_symlink() => Err(symlink_refused(tmp)),
        Ok(m) if m.is_file() => std::fs::remove_file(tmp).map_err(Error::io("remove", tmp)),
        Ok(_) => Err(Error::Invalid(format!(
            "{} is not a regular file; the store will not replace it (remove it)",
            tmp.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("stat", tmp)(e)),
    }
}

/// Creates a new empty file (failing if it exists), fsyncs it and its directory.
pub fn create_new_durable(path: &Path) -> Result<File> {
    crashpoint::hit("create_file");
    let file = create_exclusive(path)?;
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
    if is_symlink(path) {
        // rename would replace the link, but its target is what a reader follows.
        return Err(symlink_refused(path));
    }
    let tmp = path.with_extension("tmp");
    remove_stale_temporary(&tmp)?;
    let file = create_exclusive(&tmp)?;
    crashpoint::write_at(write_point, &file, bytes, 0).map_err(Error::io("write", &tmp))?;
    crashpoint::hit(sync_point);
    let broken = (what == "snapshot" && fault::active(Fault::SnapshotNoFsync))
        || (what == "blob" && fault::active(Fault::BlobNoFsync));
    if !broken {
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
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    crashpoint::hit("file.rename");
    renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE)
        .map_err(|errno| Error::io("rename", to)(std::io::Error::from(errno)))?;
    fsync_dir(parent_of(to))
}

/// Overwrites `path` in place (truncate, write, fsync). Not atomic: a crash
/// can leave a torn file. Used only by the `non-atomic-snapshot` fault.
pub fn overwrite_in_place(path: &Path, bytes: &[u8], what: &'static str) -> Result<()> {
    let (write_point, sync_point, _) = crash_points(what);
    let mut file = open_nofollow(
        OpenOptions::new().write(true).create(true).truncate(true),
        path,
        "open",
    )?;
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
        "lease" => ("lease.write", "lease.fsync", "lease.rename"),
        _ => ("file.write", "file.fsync", "file.rename"),
    }
}
