//! What the tracer saw: one [`SyscallEvent`] per counted system call.
//!
//! Plain data, portable (the tracer that fills it is Linux x86_64 only).
//! Paths are absolute, as the traced process reached them; `Display` renders
//! an event the way a violation report names it, e.g.
//! `#12 fdatasync(fd 5 = /tmp/r/sessions/s/events.jsonl) = 0`.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The system calls the tracer recognises (x86_64 names): the
/// file-mutating ones, and the reads ([`Sysno::is_read`]), which are
/// counted only when asked for and in a sequence of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Sysno {
    Write,
    Pwrite64,
    Writev,
    Pwritev,
    Pwritev2,
    Fsync,
    Fdatasync,
    SyncFileRange,
    Sync,
    Syncfs,
    Ftruncate,
    Truncate,
    Rename,
    Renameat,
    Renameat2,
    Unlink,
    Unlinkat,
    Rmdir,
    Open,
    Openat,
    Creat,
    Mkdir,
    Mkdirat,
    Read,
    Pread64,
    Readv,
    Preadv,
    Preadv2,
}

impl Sysno {
    /// The kernel's name for the call.
    pub fn name(self) -> &'static str {
        match self {
            Sysno::Write => "write",
            Sysno::Pwrite64 => "pwrite64",
            Sysno::Writev => "writev",
            Sysno::Pwritev => "pwritev",
            Sysno::Pwritev2 => "pwritev2",
            Sysno::Fsync => "fsync",
            Sysno::Fdatasync => "fdatasync",
            Sysno::SyncFileRange => "sync_file_range",
            Sysno::Sync => "sync",
            Sysno::Syncfs => "syncfs",
            Sysno::Ftruncate => "ftruncate",
            Sysno::Truncate => "truncate",
            Sysno::Rename => "rename",
            Sysno::Renameat => "renameat",
            Sysno::Renameat2 => "renameat2",
            Sysno::Unlink => "unlink",
            Sysno::Unlinkat => "unlinkat",
            Sysno::Rmdir => "rmdir",
            Sysno::Open => "open",
            Sysno::Openat => "openat",
            Sysno::Creat => "creat",
            Sysno::Mkdir => "mkdir",
            Sysno::Mkdirat => "mkdirat",
            Sysno::Read => "read",
            Sysno::Pread64 => "pread64",
            Sysno::Readv => "readv",
            Sysno::Preadv => "preadv",
            Sysno::Preadv2 => "preadv2",
        }
    }

    /// read, pread64, readv, preadv, preadv2: counted in their own
    /// sequence ([`super::Outcome::reads`]), only when reads are traced.
    pub fn is_read(self) -> bool {
        matches!(
            self,
            Sysno::Read | Sysno::Pread64 | Sysno::Readv | Sysno::Preadv | Sysno::Preadv2
        )
    }
}

impl fmt::Display for Sysno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A recognised call with its arguments decoded; fds come with the path they
/// pointed to when the call entered (`/proc/PID/fd/N`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Call {
    /// write, pwrite64, writev, pwritev, pwritev2. `len` is the byte count
    /// asked for (all iovecs together); `offset` is the explicit position of
    /// the p* variants.
    Write {
        fd: i32,
        path: PathBuf,
        len: u64,
        offset: Option<u64>,
    },
    /// fsync (`data_only` false) or fdatasync (true), of a file or a directory.
    Sync {
        fd: i32,
        path: PathBuf,
        data_only: bool,
    },
    /// sync_file_range: counted, but no durability promise (no metadata, no
    /// device cache flush), so the power-loss model gives it none.
    SyncFileRange {
        fd: i32,
        path: PathBuf,
        offset: u64,
        nbytes: u64,
        flags: u32,
    },
    /// sync() (no fd) or syncfs(fd) on the file system holding the root.
    SyncAll { fd: Option<(i32, PathBuf)> },
    /// ftruncate (with `fd`) or truncate.
    Truncate {
        fd: Option<i32>,
        path: PathBuf,
        len: u64,
    },
    /// rename, renameat, renameat2 (`flags`: RENAME_NOREPLACE = 1,
    /// RENAME_EXCHANGE = 2, RENAME_WHITEOUT = 4).
    Rename {
        from: PathBuf,
        to: PathBuf,
        flags: u32,
    },
    /// unlink, unlinkat, rmdir (`dir` true for rmdir / AT_REMOVEDIR).
    Unlink { path: PathBuf, dir: bool },
    /// open, openat, creat with O_CREAT or O_TRUNC.
    Open {
        path: PathBuf,
        flags: i32,
        mode: u32,
    },
    /// mkdir, mkdirat.
    Mkdir { path: PathBuf, mode: u32 },
    /// read, pread64, readv, preadv, preadv2. `len` is the byte count
    /// asked for (all iovecs together); `offset` is the explicit position
    /// of the p* variants.
    Read {
        fd: i32,
        path: PathBuf,
        len: u64,
        offset: Option<u64>,
    },
}

impl Call {
    /// Every path the call touches (one, or two for a rename).
    pub fn paths(&self) -> Vec<&PathBuf> {
        match self {
            Call::Write { path, .. }
            | Call::Sync { path, .. }
            | Call::SyncFileRange { path, .. }
            | Call::Truncate { path, .. }
            | Call::Unlink { path, .. }
            | Call::Open { path, .. }
            | Call::Mkdir { path, .. }
            | Call::Read { path, .. } => vec![path],
            Call::SyncAll { fd } => fd.iter().map(|(_, p)| p).collect(),
            Call::Rename { from, to, .. } => vec![from, to],
        }
    }

    /// Does the call need free space, so that a full disk fails it with
    /// ENOSPC ([`SyscallFault::DiskFull`](super::SyscallFault::DiskFull))?
    /// A write, an open that creates a file not there yet (asked at the
    /// call's enter, so before it runs), mkdir. Every write counts, even
    /// one over blocks the file already has: stricter than a real full
    /// disk, where such an overwrite may succeed. A rename reuses its
    /// directory's space, and fsync, truncate, unlink and reads need none.
    pub fn needs_space(&self) -> bool {
        match self {
            Call::Write { .. } | Call::Mkdir { .. } => true,
            Call::Open { path, flags, .. } => {
                flags & nix::libc::O_CREAT != 0 && std::fs::symlink_metadata(path).is_err()
            }
            _ => false,
        }
    }
}

/// One counted system call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallEvent {
    /// 0-based position among the counted calls of the run (among its
    /// counted reads, for a read); a [`FaultPlan`](super::FaultPlan) names
    /// a call by this index.
    pub index: u64,
    /// The thread that made the call.
    pub pid: i32,
    pub sysno: Sysno,
    pub call: Call,
    /// The return value (`-errno` on failure); `None` when the process was
    /// killed before the call returned.
    pub result: Option<i64>,
}

impl SyscallEvent {
    /// The call and its arguments in plain words, without index or result:
    /// `fdatasync(fd 5 = /r/sessions/s/events.jsonl)`.
    pub fn call_text(&self) -> String {
        let name = self.sysno.name();
        let fd = |fd: &i32, path: &PathBuf| format!("fd {fd} = {}", path.display());
        let args = match &self.call {
            Call::Write {
                fd: n,
                path,
                len,
                offset,
            }
            | Call::Read {
                fd: n,
                path,
                len,
                offset,
            } => match offset {
                Some(o) => format!("{}, {len} bytes at offset {o}", fd(n, path)),
                None => format!("{}, {len} bytes", fd(n, path)),
            },
            Call::Sync { fd: n, path, .. } => fd(n, path),
            Call::SyncFileRange {
                fd: n,
                path,
                offset,
                nbytes,
                flags,
            } => format!(
                "{}, offset {offset}, {nbytes} bytes, flags {flags:#x}",
                fd(n, path)
            ),
            Call::SyncAll { fd: None } => String::new(),
            Call::SyncAll {
                fd: Some((n, path)),
            } => fd(n, path),
            Call::Truncate {
                fd: Some(n),
                path,
                len,
            } => format!("{}, {len}", fd(n, path)),
            Call::Truncate {
                fd: None,
                path,
                len,
            } => format!("{}, {len}", path.display()),
            Call::Rename { from, to, flags } => {
                let flags = match flags {
                    0 => String::new(),
                    f => format!(", flags {f:#x}"),
                };
                format!("{} -> {}{flags}", from.display(), to.display())
            }
            Call::Unlink { path, dir } => match (self.sysno, dir) {
                (Sysno::Unlinkat, true) => format!("{}, AT_REMOVEDIR", path.display()),
                _ => path.display().to_string(),
            },
            Call::Open { path, flags, mode } => {
                format!("{}, {}, {mode:#o}", path.display(), open_flags(*flags))
            }
            Call::Mkdir { path, mode } => format!("{}, {mode:#o}", path.display()),
        };
        format!("{name}({args})")
    }
}

impl fmt::Display for SyscallEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {}", self.index, self.call_text())?;
        match self.result {
            Some(r) if r < 0 => write!(f, " = -1 {}", errno_name(-r)),
            Some(r) => write!(f, " = {r}"),
            None => f.write_str(" (killed before it returned)"),
        }
    }
}

/// `O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC` style rendering (Linux x86_64 values).
pub fn open_flags(flags: i32) -> String {
    const NAMED: [(i32, &str); 10] = [
        (0o100, "O_CREAT"),
        (0o200, "O_EXCL"),
        (0o1000, "O_TRUNC"),
        (0o2000, "O_APPEND"),
        (0o4010000, "O_SYNC"),
        (0o10000, "O_DSYNC"),
        (0o40000, "O_DIRECT"),
        (0o200000, "O_DIRECTORY"),
        (0o400000, "O_NOFOLLOW"),
        (0o2000000, "O_CLOEXEC"),
    ];
    let mut parts = vec![match flags & 0o3 {
        0 => "O_RDONLY",
        1 => "O_WRONLY",
        _ => "O_RDWR",
    }
    .to_string()];
    let mut rest = flags & !0o3;
    for (bit, name) in NAMED {
        if rest & bit == bit {
            parts.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        parts.push(format!("{rest:#o}"));
    }
    parts.join("|")
}

/// The symbolic name of an errno value (`ENOSPC`), or its number.
pub fn errno_name(errno: i64) -> String {
    let name = match errno {
        1 => "EPERM",
        2 => "ENOENT",
        4 => "EINTR",
        5 => "EIO",
        9 => "EBADF",
        13 => "EACCES",
        17 => "EEXIST",
        18 => "EXDEV",
        20 => "ENOTDIR",
        21 => "EISDIR",
        22 => "EINVAL",
        27 => "EFBIG",
        28 => "ENOSPC",
        30 => "EROFS",
        38 => "ENOSYS",
        39 => "ENOTEMPTY",
        122 => "EDQUOT",
        _ => return format!("errno {errno}"),
    };
    name.to_string()
}
