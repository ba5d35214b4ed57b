//! Linux x86_64: turning completed calls into [`Op`]s with their data, and
//! placing the process's stdout writes between them.
//!
//! Write offsets come from `/proc/PID/fdinfo/FD` after the write (`pos`
//! minus the bytes written: right for plain and O_APPEND fds alike), or
//! from the call's explicit offset. Only successful calls are recorded.
//! Whatever cannot be expressed as ops becomes a [`Gap`], never a silent
//! skip.

use std::fs;
use std::path::{Path, PathBuf};

use nix::unistd::Pid;

use super::decode::{self, Decoded, O_APPEND, O_CREAT, O_DSYNC, O_SYNC, O_TMPFILE_BIT, O_TRUNC};
use super::event::Call;
use crate::nemesis::powerloss::{Bytes, Gap, LoggedOp, Op, OpLog, Origin, OutputMark};

const RENAME_EXCHANGE: u32 = 2;
const RENAME_WHITEOUT: u32 = 4;

#[derive(Debug)]
pub(super) struct Recorder {
    root: PathBuf,
    /// What fd 1 of the spawned process pointed to (`pipe:[…]`).
    stdout: Option<PathBuf>,
    /// Bytes written to that stream so far.
    stream: u64,
    log: OpLog,
}

/// A call the op log cannot express (a gap): a path outside the root or
/// already unlinked, a descriptor without fdinfo, bytes the tracer could
/// not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(super) struct Unmodelled(String);

impl From<super::decode::TraceeMemory> for Unmodelled {
    fn from(e: super::decode::TraceeMemory) -> Unmodelled {
        Unmodelled(e.to_string())
    }
}

impl Recorder {
    pub fn new(root: PathBuf, stdout: Option<PathBuf>) -> Recorder {
        Recorder {
            root,
            stdout,
            stream: 0,
            log: OpLog::default(),
        }
    }

    pub fn ops(&self) -> usize {
        self.log.ops.len()
    }

    /// Bytes written to the spawned process's stdout so far.
    pub fn stream(&self) -> u64 {
        self.stream
    }

    pub fn finish(self) -> OpLog {
        self.log
    }

    /// A write-class call to the spawned process's stdout.
    pub fn is_output(&self, d: &Decoded) -> bool {
        matches!((&d.call, &self.stdout), (Call::Write { path, .. }, Some(out)) if path == out)
    }

    /// `n` bytes reached stdout after the ops recorded so far.
    pub fn output(&mut self, pid: Pid, n: u64) {
        self.log.outputs.push(OutputMark {
            after_ops: self.log.ops.len(),
            offset: self.stream,
            len: n,
            pid: pid.as_raw(),
        });
        self.stream += n;
    }

    /// Records a counted call that succeeded with `result`.
    pub fn completed(&mut self, pid: Pid, syscall: u64, d: &Decoded, result: i64) {
        let origin = Origin {
            pid: pid.as_raw(),
            syscall,
        };
        match self.ops_for(pid, d, result) {
            Ok(ops) => self.log.ops.extend(ops.into_iter().map(|op| LoggedOp {
                op,
                origin: Some(origin),
            })),
            Err(what) => self.log.gaps.push(Gap {
                pid: pid.as_raw(),
                syscall,
                what: what.to_string(),
            }),
        }
    }

    fn ops_for(&self, pid: Pid, d: &Decoded, result: i64) -> Result<Vec<Op>, Unmodelled> {
        let rel = |p: &Path| self.rel(p);
        Ok(match &d.call {
            Call::Write {
                fd, path, offset, ..
            } => {
                let n = result as u64;
                if n == 0 {
                    return Ok(Vec::new());
                }
                let rel = rel(path)?;
                let (pos, flags) = decode::fdinfo(pid, *fd).ok_or_else(|| {
                    Unmodelled(format!("no fdinfo for fd {fd} = {}", path.display()))
                })?;
                // On Linux an O_APPEND fd appends even for pwrite.
                let appends = d.rwf_append || (flags & O_APPEND != 0 && !d.rwf_noappend);
                let offset = match offset {
                    _ if appends => {
                        let size = fs::metadata(format!("/proc/{pid}/fd/{fd}"))
                            .map_err(|e| {
                                Unmodelled(format!(
                                    "size of {} after an append: {e}",
                                    path.display()
                                ))
                            })?
                            .len();
                        size.checked_sub(n)
                    }
                    Some(o) => Some(*o),
                    None => pos.checked_sub(n),
                }
                .ok_or_else(|| {
                    Unmodelled(format!(
                        "the offset of a {n}-byte write to {} moved under it",
                        path.display()
                    ))
                })?;
                let data = decode::read_written(pid, &d.buffers, n as usize)?;
                let mut ops = vec![Op::Write {
                    path: rel.clone(),
                    offset,
                    data: Bytes(data),
                }];
                if flags & O_SYNC == O_SYNC {
                    ops.push(Op::Fsync { path: rel });
                } else if flags & O_DSYNC != 0 {
                    ops.push(Op::Fdatasync { path: rel });
                }
                ops
            }
            Call::Sync {
                path, data_only, ..
            } => {
                let path = rel(path)?;
                vec![if *data_only {
                    Op::Fdatasync { path }
                } else {
                    Op::Fsync { path }
                }]
            }
            Call::SyncFileRange { .. } => Vec::new(),
            Call::SyncAll { .. } => vec![Op::SyncAll],
            Call::Truncate { path, len, .. } => vec![Op::Truncate {
                path: rel(path)?,
                len: *len,
            }],
            Call::Rename { from, to, flags } => {
                if flags & (RENAME_EXCHANGE | RENAME_WHITEOUT) != 0 {
                    return Err(Unmodelled(format!(
                        "renameat2 with flags {flags:#x} of {} and {} is not modelled",
                        from.display(),
                        to.display()
                    )));
                }
                match (rel(from), rel(to)) {
                    (Ok(from), Ok(to)) => vec![Op::Rename { from, to }],
                    (Ok(from), Err(_)) if fs::metadata(to).is_ok_and(|m| m.is_file()) => {
                        vec![Op::Unlink { path: from }]
                    }
                    _ => {
                        return Err(Unmodelled(format!(
                        "rename of {} to {} moves something into or out of the root; not modelled",
                        from.display(),
                        to.display()
                    )))
                    }
                }
            }
            Call::Unlink { path, dir } => {
                let path = rel(path)?;
                vec![if *dir {
                    Op::Rmdir { path }
                } else {
                    Op::Unlink { path }
                }]
            }
            Call::Open { path, flags, .. } => {
                if flags & O_TMPFILE_BIT != 0 {
                    return Err(Unmodelled(format!(
                        "O_TMPFILE file in {}: its contents and a later linkat are not traced",
                        path.display()
                    )));
                }
                let path = rel(path)?;
                if !d.existed && flags & O_CREAT != 0 {
                    vec![Op::Create { path }]
                } else if flags & O_TRUNC != 0 {
                    vec![Op::Truncate { path, len: 0 }]
                } else {
                    Vec::new()
                }
            }
            Call::Mkdir { path, .. } => vec![Op::Mkdir { path: rel(path)? }],
            // Reads change nothing on disk (and are never handed here).
            Call::Read { .. } => Vec::new(),
        })
    }

    /// A path under the root, relative to it (`.` for the root itself).
    fn rel(&self, p: &Path) -> Result<PathBuf, Unmodelled> {
        if p.to_string_lossy().ends_with(" (deleted)") {
            return Err(Unmodelled(format!(
                "{} was already unlinked; calls on it are not modelled",
                p.display()
            )));
        }
        match p.strip_prefix(&self.root) {
            Ok(r) if r.as_os_str().is_empty() => Ok(PathBuf::from(".")),
            Ok(r) => Ok(r.to_path_buf()),
            Err(_) => Err(Unmodelled(format!("{} is outside the root", p.display()))),
        }
    }
}
