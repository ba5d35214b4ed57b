//! Linux x86_64: turning a syscall-enter stop into a [`Call`], and reading
//! (or, for a torn write, rewriting) the tracee's memory and `/proc` entries.
//!
//! Never resumes or signals a tracee; the tracer loop does that.

use std::ffi::OsStr;
use std::fs;
use std::io::{IoSlice, IoSliceMut};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use nix::libc;
use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;

use super::event::{Call, Sysno};

/// x86_64 open flags the decoder needs.
pub(super) const O_CREAT: i32 = 0o100;
pub(super) const O_TRUNC: i32 = 0o1000;
pub(super) const O_APPEND: i32 = 0o2000;
pub(super) const O_DSYNC: i32 = 0o10000;
pub(super) const O_SYNC: i32 = 0o4010000;
/// `__O_TMPFILE` (O_TMPFILE without its O_DIRECTORY bit).
pub(super) const O_TMPFILE_BIT: i32 = 0o20000000;
const AT_FDCWD: i32 = -100;
const AT_REMOVEDIR: u64 = 0x200;
const RWF_APPEND: u64 = 0x10;
const RWF_NOAPPEND: u64 = 0x20;
const IOV_MAX: u64 = 1024;
/// Longest path read from the tracee (PATH_MAX).
const PATH_MAX: usize = 4096;

/// Every system call the decoder handles, by its x86_64 number: the one
/// list that both [`sysno`] and the seccomp filter (`filter.rs`) are built
/// from, so the calls the tracer stops at and the calls it decodes cannot
/// drift apart.
pub(super) const DECODED: [(i64, Sysno); 23] = [
    (libc::SYS_write, Sysno::Write),
    (libc::SYS_pwrite64, Sysno::Pwrite64),
    (libc::SYS_writev, Sysno::Writev),
    (libc::SYS_pwritev, Sysno::Pwritev),
    (libc::SYS_pwritev2, Sysno::Pwritev2),
    (libc::SYS_fsync, Sysno::Fsync),
    (libc::SYS_fdatasync, Sysno::Fdatasync),
    (libc::SYS_sync_file_range, Sysno::SyncFileRange),
    (libc::SYS_sync, Sysno::Sync),
    (libc::SYS_syncfs, Sysno::Syncfs),
    (libc::SYS_ftruncate, Sysno::Ftruncate),
    (libc::SYS_truncate, Sysno::Truncate),
    (libc::SYS_rename, Sysno::Rename),
    (libc::SYS_renameat, Sysno::Renameat),
    (libc::SYS_renameat2, Sysno::Renameat2),
    (libc::SYS_unlink, Sysno::Unlink),
    (libc::SYS_unlinkat, Sysno::Unlinkat),
    (libc::SYS_rmdir, Sysno::Rmdir),
    (libc::SYS_open, Sysno::Open),
    (libc::SYS_openat, Sysno::Openat),
    (libc::SYS_creat, Sysno::Creat),
    (libc::SYS_mkdir, Sysno::Mkdir),
    (libc::SYS_mkdirat, Sysno::Mkdirat),
];

/// The reads the decoder handles, by their x86_64 numbers: stopped at
/// (the seccomp filter) and decoded only when reads are traced
/// ([`super::TraceConfig::reads`]); counted in a sequence of their own.
pub(super) const READS: [(i64, Sysno); 5] = [
    (libc::SYS_read, Sysno::Read),
    (libc::SYS_pread64, Sysno::Pread64),
    (libc::SYS_readv, Sysno::Readv),
    (libc::SYS_preadv, Sysno::Preadv),
    (libc::SYS_preadv2, Sysno::Preadv2),
];

/// The open flags that make an open one the decoder counts: any of them
/// set. An open with none of them (a plain read, an interpreter's import)
/// is neither decoded nor stopped at.
pub(super) const COUNTED_OPEN_FLAGS: i32 = O_CREAT | O_TRUNC | O_TMPFILE_BIT;

/// The argument (0-based) holding the open flags of an open-family call
/// that is counted only with [`COUNTED_OPEN_FLAGS`]; `None` for every other
/// call, which is always decoded (creat always creates and truncates).
pub(super) fn open_flags_arg(sysno: Sysno) -> Option<usize> {
    match sysno {
        Sysno::Open => Some(1),
        Sysno::Openat => Some(2),
        _ => None,
    }
}

/// The system call number at a syscall-enter stop, if it is one we decode
/// (a read among them: [`Sysno::is_read`]).
pub(super) fn sysno(orig_rax: u64) -> Option<Sysno> {
    DECODED
        .iter()
        .chain(&READS)
        .find(|(nr, _)| *nr as u64 == orig_rax)
        .map(|&(_, sysno)| sysno)
}

/// The six argument registers of the x86_64 syscall ABI.
pub(super) fn args(r: &libc::user_regs_struct) -> [u64; 6] {
    [r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9]
}

/// A decoded call plus what the tracer needs later at its exit stop.
#[derive(Debug)]
pub(super) struct Decoded {
    pub call: Call,
    /// Touches a path under the root: counted, faultable, recorded.
    pub in_root: bool,
    /// Write- and read-class calls: the data buffers, in order.
    pub buffers: Vec<RemoteIoVec>,
    /// writev- and readv-class calls: where the iovec array lives in the tracee.
    pub iov_addr: Option<u64>,
    /// open: the path existed at enter (O_CREAT then did not create it).
    pub existed: bool,
    /// pwritev2 with RWF_APPEND (writes at the end whatever the offset).
    pub rwf_append: bool,
    /// pwritev2 with RWF_NOAPPEND (honours its offset on an O_APPEND fd).
    pub rwf_noappend: bool,
}

/// What the decoder needs to know about the root.
#[derive(Debug)]
pub(super) struct Root {
    pub path: PathBuf,
    pub dev: u64,
}

impl Root {
    pub fn contains(&self, p: &Path) -> bool {
        p.starts_with(&self.path)
    }
}

/// Decodes the call at a syscall-enter stop. `None`: not one we count or
/// watch (an open without O_CREAT/O_TRUNC, or an fd that no longer exists).
pub(super) fn decode(pid: Pid, sysno: Sysno, a: [u64; 6], root: &Root) -> Option<Decoded> {
    let fd = |n: u64| n as i32;
    let mut d = Decoded {
        call: Call::SyncAll { fd: None },
        in_root: false,
        buffers: Vec::new(),
        iov_addr: None,
        existed: false,
        rwf_append: false,
        rwf_noappend: false,
    };
    let write = |d: &mut Decoded, offset: Option<u64>| -> Option<()> {
        let path = fd_path(pid, fd(a[0]))?;
        let len = d.buffers.iter().map(|b| b.len as u64).sum();
        d.in_root = root.contains(&path);
        d.call = Call::Write {
            fd: fd(a[0]),
            path,
            len,
            offset,
        };
        Some(())
    };
    match sysno {
        Sysno::Write | Sysno::Pwrite64 => {
            d.buffers = vec![RemoteIoVec {
                base: a[1] as usize,
                len: a[2] as usize,
            }];
            write(&mut d, (sysno == Sysno::Pwrite64).then_some(a[3]))?;
        }
        Sysno::Writev | Sysno::Pwritev | Sysno::Pwritev2 => {
            d.buffers = read_iovecs(pid, a[1], a[2])?;
            d.iov_addr = Some(a[1]);
            let offset = match sysno {
                Sysno::Writev => None,
                Sysno::Pwritev2 if a[3] as i64 == -1 => None,
                _ => Some(a[3]),
            };
            d.rwf_append = sysno == Sysno::Pwritev2 && a[5] & RWF_APPEND != 0;
            d.rwf_noappend = sysno == Sysno::Pwritev2 && a[5] & RWF_NOAPPEND != 0;
            write(&mut d, offset)?;
        }
        Sysno::Read | Sysno::Pread64 | Sysno::Readv | Sysno::Preadv | Sysno::Preadv2 => {
            let offset = match sysno {
                Sysno::Read => {
                    d.buffers = vec![RemoteIoVec {
                        base: a[1] as usize,
                        len: a[2] as usize,
                    }];
                    None
                }
                Sysno::Pread64 => {
                    d.buffers = vec![RemoteIoVec {
                        base: a[1] as usize,
                        len: a[2] as usize,
                    }];
                    Some(a[3])
                }
                _ => {
                    d.buffers = read_iovecs(pid, a[1], a[2])?;
                    d.iov_addr = Some(a[1]);
                    match sysno {
                        Sysno::Readv => None,
                        Sysno::Preadv2 if a[3] as i64 == -1 => None,
                        _ => Some(a[3]),
                    }
                }
            };
            let path = fd_path(pid, fd(a[0]))?;
            d.in_root = root.contains(&path);
            d.call = Call::Read {
                fd: fd(a[0]),
                path,
                len: d.buffers.iter().map(|b| b.len as u64).sum(),
                offset,
            };
        }
        Sysno::Fsync | Sysno::Fdatasync => {
            let path = fd_path(pid, fd(a[0]))?;
            d.in_root = root.contains(&path);
            d.call = Call::Sync {
                fd: fd(a[0]),
                path,
                data_only: sysno == Sysno::Fdatasync,
            };
        }
        Sysno::SyncFileRange => {
            let path = fd_path(pid, fd(a[0]))?;
            d.in_root = root.contains(&path);
            d.call = Call::SyncFileRange {
                fd: fd(a[0]),
                path,
                offset: a[1],
                nbytes: a[2],
                flags: a[3] as u32,
            };
        }
        Sysno::Sync => d.in_root = true,
        Sysno::Syncfs => {
            let path = fd_path(pid, fd(a[0]))?;
            let dev = fs::metadata(format!("/proc/{pid}/fd/{}", fd(a[0])))
                .ok()?
                .dev();
            d.in_root = dev == root.dev;
            d.call = Call::SyncAll {
                fd: Some((fd(a[0]), path)),
            };
        }
        Sysno::Ftruncate => {
            let path = fd_path(pid, fd(a[0]))?;
            d.in_root = root.contains(&path);
            d.call = Call::Truncate {
                fd: Some(fd(a[0])),
                path,
                len: a[1],
            };
        }
        Sysno::Truncate => {
            let path = path_arg(pid, AT_FDCWD, a[0])?;
            d.in_root = root.contains(&path);
            d.call = Call::Truncate {
                fd: None,
                path,
                len: a[1],
            };
        }
        Sysno::Rename | Sysno::Renameat | Sysno::Renameat2 => {
            let (from, to, flags) = match sysno {
                Sysno::Rename => (
                    path_arg(pid, AT_FDCWD, a[0])?,
                    path_arg(pid, AT_FDCWD, a[1])?,
                    0,
                ),
                _ => (
                    path_arg(pid, a[0] as i32, a[1])?,
                    path_arg(pid, a[2] as i32, a[3])?,
                    if sysno == Sysno::Renameat2 {
                        a[4] as u32
                    } else {
                        0
                    },
                ),
            };
            d.in_root = root.contains(&from) || root.contains(&to);
            d.call = Call::Rename { from, to, flags };
        }
        Sysno::Unlink | Sysno::Rmdir => {
            let path = path_arg(pid, AT_FDCWD, a[0])?;
            d.in_root = root.contains(&path);
            d.call = Call::Unlink {
                path,
                dir: sysno == Sysno::Rmdir,
            };
        }
        Sysno::Unlinkat => {
            let path = path_arg(pid, a[0] as i32, a[1])?;
            d.in_root = root.contains(&path);
            d.call = Call::Unlink {
                path,
                dir: a[2] & AT_REMOVEDIR != 0,
            };
        }
        Sysno::Open | Sysno::Openat | Sysno::Creat => {
            let flags = open_flags_arg(sysno).map_or(0o1 | O_CREAT | O_TRUNC, |i| a[i] as i32);
            let (dirfd, addr, mode) = match sysno {
                Sysno::Open => (AT_FDCWD, a[0], a[2] as u32),
                Sysno::Openat => (a[0] as i32, a[1], a[3] as u32),
                _ => (AT_FDCWD, a[0], a[1] as u32),
            };
            if flags & COUNTED_OPEN_FLAGS == 0 {
                return None;
            }
            let path = path_arg(pid, dirfd, addr)?;
            d.in_root = root.contains(&path);
            d.existed = fs::symlink_metadata(&path).is_ok();
            d.call = Call::Open { path, flags, mode };
        }
        Sysno::Mkdir | Sysno::Mkdirat => {
            let (dirfd, addr, mode) = match sysno {
                Sysno::Mkdir => (AT_FDCWD, a[0], a[1] as u32),
                _ => (a[0] as i32, a[1], a[2] as u32),
            };
            let path = path_arg(pid, dirfd, addr)?;
            d.in_root = root.contains(&path);
            d.call = Call::Mkdir { path, mode };
        }
    }
    Some(d)
}

/// The path an fd points to, if it points to one (`/proc/PID/fd/N`).
/// A pipe reads as `pipe:[inode]`, an unlinked file as `/path (deleted)`.
pub(super) fn fd_path(pid: Pid, fd: i32) -> Option<PathBuf> {
    fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()
}

/// `pos` and `flags` from `/proc/PID/fdinfo/FD`.
pub(super) fn fdinfo(pid: Pid, fd: i32) -> Option<(u64, i32)> {
    let text = fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let pos = field("pos:")?.parse().ok()?;
    let flags = i32::from_str_radix(field("flags:")?, 8).ok()?;
    Some((pos, flags))
}

/// A path argument, made absolute against the directory fd (or the cwd) and
/// with its parent canonicalised, so it compares with the canonical root.
fn path_arg(pid: Pid, dirfd: i32, addr: u64) -> Option<PathBuf> {
    let raw = read_cstring(pid, addr)?;
    let p = Path::new(OsStr::from_bytes(&raw));
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else if dirfd == AT_FDCWD {
        fs::read_link(format!("/proc/{pid}/cwd")).ok()?.join(p)
    } else {
        fd_path(pid, dirfd)?.join(p)
    };
    Some(canonical_parent(&joined))
}

/// Canonicalises everything but a final normal component (which may not
/// exist yet, or be the symlink the call acts on); lexical fallback.
fn canonical_parent(p: &Path) -> PathBuf {
    match (p.parent(), p.components().next_back()) {
        (Some(parent), Some(Component::Normal(name))) => match fs::canonicalize(parent) {
            Ok(c) => c.join(name),
            Err(_) => lexical(p),
        },
        _ => fs::canonicalize(p).unwrap_or_else(|_| lexical(p)),
    }
}

fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// A NUL-terminated string from the tracee, read a page piece at a time so
/// no read crosses into an unmapped page.
fn read_cstring(pid: Pid, addr: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = addr as usize;
    while out.len() < PATH_MAX {
        let chunk = 4096 - at % 4096;
        let mut buf = vec![0u8; chunk];
        let n = read_mem(pid, at, &mut buf)?;
        if let Some(end) = buf[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf[..n]);
        at += n;
    }
    None
}

fn read_mem(pid: Pid, addr: usize, buf: &mut [u8]) -> Option<usize> {
    let len = buf.len();
    let n = process_vm_readv(
        pid,
        &mut [IoSliceMut::new(buf)],
        &[RemoteIoVec { base: addr, len }],
    )
    .ok()?;
    (n > 0).then_some(n)
}

/// The iovec array of a writev-style call (struct iovec is two u64 on x86_64).
fn read_iovecs(pid: Pid, addr: u64, count: u64) -> Option<Vec<RemoteIoVec>> {
    if count > IOV_MAX {
        return None;
    }
    let mut raw = vec![0u8; count as usize * 16];
    if count > 0 && read_mem(pid, addr as usize, &mut raw)? != raw.len() {
        return None;
    }
    let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().expect("8-byte slice")) as usize;
    Some(
        raw.chunks_exact(16)
            .map(|c| RemoteIoVec {
                base: word(&c[..8]),
                len: word(&c[8..]),
            })
            .collect(),
    )
}

/// The tracee's memory could not be read or written (process_vm_readv,
/// process_vm_writev): the tracer's failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(super) struct TraceeMemory(String);

/// The first `n` bytes the call wrote, gathered across its buffers.
pub(super) fn read_written(
    pid: Pid,
    buffers: &[RemoteIoVec],
    n: usize,
) -> Result<Vec<u8>, TraceeMemory> {
    let mut remote = Vec::new();
    let mut left = n;
    for b in buffers {
        if left == 0 {
            break;
        }
        let take = b.len.min(left);
        if take > 0 {
            remote.push(RemoteIoVec {
                base: b.base,
                len: take,
            });
        }
        left -= take;
    }
    let mut data = vec![0u8; n];
    if n == 0 {
        return Ok(data);
    }
    let got = process_vm_readv(pid, &mut [IoSliceMut::new(&mut data)], &remote)
        .map_err(|e| TraceeMemory(format!("process_vm_readv of {n} written bytes: {e}")))?;
    if got != n {
        return Err(TraceeMemory(format!(
            "process_vm_readv read {got} of {n} written bytes"
        )));
    }
    Ok(data)
}

/// An iovec length the tracer rewrote in the tracee's memory: where, and
/// what it was (to put back when the process goes on).
#[derive(Debug, Clone, Copy)]
pub(super) struct RewrittenIovec {
    at: usize,
    len: usize,
}

/// Cuts a write- or read-class call to its first `keep` bytes before it
/// runs: returns the new count register value, after rewriting the iovec
/// array in the tracee's memory for vectored calls (and the length it
/// rewrote, which [`restore_iovec`] puts back).
pub(super) fn cut(
    pid: Pid,
    d: &Decoded,
    keep: u64,
) -> Result<(u64, Option<RewrittenIovec>), TraceeMemory> {
    let Some(iov_addr) = d.iov_addr else {
        return Ok((keep, None));
    };
    let mut left = keep as usize;
    for (j, b) in d.buffers.iter().enumerate() {
        if left <= b.len {
            let at = iov_addr as usize + j * 16 + 8;
            write_word(pid, at, left as u64)
                .map_err(|e| TraceeMemory(format!("process_vm_writev of iovec {j}: {e}")))?;
            return Ok((j as u64 + 1, Some(RewrittenIovec { at, len: b.len })));
        }
        left -= b.len;
    }
    Ok((d.buffers.len() as u64, None))
}

/// Puts back an iovec length [`cut`] rewrote.
pub(super) fn restore_iovec(pid: Pid, r: RewrittenIovec) -> Result<(), TraceeMemory> {
    write_word(pid, r.at, r.len as u64)
        .map(|_| ())
        .map_err(|e| TraceeMemory(format!("process_vm_writev restoring an iovec: {e}")))
}

fn write_word(pid: Pid, at: usize, word: u64) -> nix::Result<usize> {
    process_vm_writev(
        pid,
        &[IoSlice::new(&word.to_ne_bytes())],
        &[RemoteIoVec { base: at, len: 8 }],
    )
}
