//! Reading a whole file that a user or the store under test wrote, within
//! a byte limit: scenario files, the workspace files the agent's tools read
//! back. This module owns the rule for such reads: only a regular file is
//! opened, and never more than the limit (and one byte, to tell) is read.
//! It must never open anything else: opening a FIFO blocks until a writer
//! comes, and a device such as `/dev/zero` never ends. Linux only
//! (`O_NONBLOCK` keeps a file swapped for a FIFO after the check from
//! blocking the open).

use std::fs::{File, FileType, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a bounded read refused or failed; the path is the caller's to name.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("is {0}, not a regular file (refused without opening it)")]
    NotRegular(&'static str),
    #[error("is {}larger than the limit of {limit} bytes", .size.map(|s| format!("{s} bytes, ")).unwrap_or_default())]
    TooLarge {
        /// Its size, when known before reading.
        size: Option<u64>,
        limit: u64,
    },
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
}

impl ReadError {
    /// The file is not there (the caller may take that for "empty").
    pub fn not_found(&self) -> bool {
        matches!(self, ReadError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// What a file that is not a regular one is, in words.
fn kind(t: FileType) -> Option<&'static str> {
    Some(if t.is_file() {
        return None;
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a file"
    })
}

/// The bytes of the regular file at `path` (symbolic links followed), at
/// most `limit` of them.
pub fn read(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let meta = std::fs::metadata(path)?;
    if let Some(what) = kind(meta.file_type()) {
        return Err(ReadError::NotRegular(what));
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge {
            size: Some(meta.len()),
            limit,
        });
    }
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)?;
    // The path may name something else by now.
    if let Some(what) = kind(file.metadata()?.file_type()) {
        return Err(ReadError::NotRegular(what));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { size: None, limit });
    }
    Ok(bytes)
}

/// [`read`], as UTF-8 text.
pub fn read_to_string(path: &Path, limit: u64) -> Result<String, ReadError> {
    String::from_utf8(read(path, limit)?).map_err(|e| {
        ReadError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 (byte offset {})", e.utf8_error().valid_up_to()),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(read(&f, 5).unwrap(), b"12345");
        let e = read(&f, 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "is 5 bytes, larger than the limit of 4 bytes"
        );
        let fifo = dir.path().join("p");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // No writer: opening it would block this test forever.
        assert!(matches!(
            read(&fifo, 5),
            Err(ReadError::NotRegular("a FIFO"))
        ));
        assert!(matches!(
            read(dir.path(), 5),
            Err(ReadError::NotRegular("a directory"))
        ));
        assert!(matches!(
            read(Path::new("/dev/zero"), 5),
            Err(ReadError::NotRegular("a character device"))
        ));
        assert!(read(&dir.path().join("none"), 5).unwrap_err().not_found());
        std::fs::write(&f, [b'a', 0xff]).unwrap();
        let e = read_to_string(&f, 5).unwrap_err();
        assert_eq!(e.to_string(), "cannot read: not UTF-8 (byte offset 1)");
    }
}
