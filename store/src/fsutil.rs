//! Durable file-system steps: create, replace atomically, fsync a directory.
//!
//! Each step goes through a named crash point. A new file or a rename is
//! durable only after an fsync of its parent directory (fsync(2)); every
//! helper here does that and never reports success before it.
//!
//! The store never writes through a symbolic link: every file it writes is
//! opened with `O_NOFOLLOW` ([`open_nofollow`]), every file it creates with
//! `O_EXCL` as well ([`create_exclusive`]), and a writer refuses a session
//! directory that is, or holds, a symlink or a store file that is not a
//! regular file ([`check_session_dir`]). A planted link fails with one line
//! naming it ([`symlink_refused`]).
//!
//! Nor does it read through one, or read anything but a regular file: every
//! store file is opened for reading by [`open_for_reading`], which looks at
//! the path (`lstat`) before it opens it, so a FIFO (whose open blocks), a
//! device, a socket or a directory is refused unopened ([`not_regular`]),
//! and a file read whole is refused unread when it is larger than the most
//! the store ever writes there ([`read_capped`]). So no error can quote a
//! foreign file's bytes, and no read hangs or grows without bound.
//! Linux (and Unix) only: `O_NOFOLLOW`, `O_NONBLOCK`.

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

/// The error for a symbolic link where the store would read or write.
pub fn symlink_refused(path: &Path) -> Error {
    Error::Foreign {
        path: path.to_path_buf(),
        what: "is a symbolic link; the store never reads or writes through one (remove it)".into(),
    }
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// What a file type is, for a message.
fn kind_of(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_file() {
        "a regular file"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "of an unknown type"
    }
}

/// The error for something other than a regular file where the store
/// reads or writes one (a symlink gets [`symlink_refused`]).
pub fn not_regular(path: &Path, kind: std::fs::FileType) -> Error {
    if kind.is_symlink() {
        return symlink_refused(path);
    }
    Error::Foreign {
        path: path.to_path_buf(),
        what: format!(
            "is {}, not a regular file; the store reads and writes only regular files (remove it)",
            kind_of(kind)
        ),
    }
}

/// How a file the store reads may be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// A store file: a symbolic link there is refused.
    Refuse,
    /// A file outside the store that may be a link (a workspace's
    /// `.git/HEAD`): followed, but what it leads to must be a regular file.
    Follow,
}

/// The metadata of `path` (`lstat`, or `stat` with [`Links::Follow`]),
/// refused unless it is a regular file, without opening it. A missing file
/// is an [`Error::Io`] of kind `NotFound`.
pub fn check_regular(path: &Path, links: Links) -> Result<std::fs::Metadata> {
    let meta = match links {
        Links::Refuse => std::fs::symlink_metadata(path),
        Links::Follow => std::fs::metadata(path),
    }
    .map_err(Error::io("stat", path))?;
    if !meta.is_file() {
        return Err(not_regular(path, meta.file_type()));
    }
    Ok(meta)
}

/// Whether `e` is the error of a missing file.
pub fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

/// Opens the regular file `path` for reading. Checked before it is opened
/// ([`check_regular`]), then opened with `O_NONBLOCK` (and `O_NOFOLLOW`
/// unless [`Links::Follow`]), so that a FIFO or link swapped in since
/// neither blocks nor is followed, and checked again once open (`fstat`).
pub fn open_for_reading(path: &Path, links: Links) -> Result<File> {
    check_regular(path, links)?;
    let mut flags = nix::fcntl::OFlag::O_NONBLOCK;
    if links == Links::Refuse {
        flags |= nix::fcntl::OFlag::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
        .map_err(|e| match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() && links == Links::Refuse => symlink_refused(path),
            _ => Error::io("open", path)(e),
        })?;
    let meta = file.metadata().map_err(Error::io("stat", path))?;
    if !meta.is_file() {
        return Err(not_regular(path, meta.file_type()));
    }
    Ok(file)
}

/// Reads the regular file `path` whole ([`open_for_reading`]), refused
/// unread when it is larger than `cap` bytes: the most the store ever
/// writes there.
pub fn read_capped(path: &Path, cap: u64, links: Links) -> Result<Vec<u8>> {
    use std::io::Read;
    let file = open_for_reading(path, links)?;
    let len = file.metadata().map_err(Error::io("stat", path))?.len();
    let too_large = |len: u64| Error::Foreign {
        path: path.to_path_buf(),
        what: format!(
            "is {len} bytes, more than the {cap} bytes the store ever writes there; refused unread"
        ),
    };
    if len > cap {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // Bounded even if the file grows after the fstat.
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(Error::io("read", path))?;
    if bytes.len() as u64 > cap {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Refuses `path` if it is a symbolic link (a missing `path` is fine):
/// for the directories a reader goes through (the session's, `blobs/`),
/// where `O_NOFOLLOW` on the file would not see it.
pub fn refuse_symlink(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(symlink_refused(path)),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("stat", path)(e)),
    }
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

/// Refuses a session directory `dir` that is a symlink or holds one, or
/// whose store files (`events.jsonl`, `session.json`, `snapshot.json`,
/// `lease.json`, `lock`) are not regular files, or whose `blobs` is not a
/// directory: from the entries' types, nothing opened (only its own
/// entries are listed; files below `blobs/` are opened with `O_NOFOLLOW`
/// when written). A missing `dir` is fine.
pub fn check_session_dir(dir: &Path) -> Result<()> {
    use crate::layout::{BLOBS_DIR, EVENTS_FILE, LEASE_FILE, LOCK_FILE, META_FILE, SNAPSHOT_FILE};
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => return Err(symlink_refused(dir)),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("stat", dir)(e)),
    }
    for entry in std::fs::read_dir(dir).map_err(Error::io("read_dir", dir))? {
        let entry = entry.map_err(Error::io("read_dir", dir))?;
        let kind = entry.file_type().map_err(Error::io("stat", entry.path()))?;
        let name = entry.file_name();
        let file = [EVENTS_FILE, META_FILE, SNAPSHOT_FILE, LEASE_FILE, LOCK_FILE]
            .iter()
            .any(|f| name == *f);
        if kind.is_symlink() || (file && !kind.is_file()) {
            return Err(not_regular(&entry.path(), kind));
        }
        if name == BLOBS_DIR && !kind.is_dir() {
            return Err(Error::Foreign {
                path: entry.path(),
                what: format!("is {}, not a directory (remove it)", kind_of(kind)),
            });
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
/// Only a regular file is replaced: a symlink (whose target is what a
/// reader follows) or a FIFO, device, socket there is refused.
pub fn replace_atomic(path: &Path, bytes: &[u8], what: &'static str) -> Result<()> {
    let (write_point, sync_point, rename_point) = crash_points(what);
    match check_regular(path, Links::Refuse) {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e),
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
    match std::fs::rename(&tmp, path) {
        // Broken on purpose: the blob stays under its temporary name.
        Err(_) if what == "blob" && fault::active(Fault::BlobRenameErrorIgnored) => {}
        renamed => renamed.map_err(Error::io("rename", path))?,
    }
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
/// can leave a torn file. Used only by the `non-atomic-snapshot` and
/// `lease-written-in-place` faults.
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
