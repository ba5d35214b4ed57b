//! The replayable log of file operations a traced run made under its root,
//! with the data written, and where the process's stdout writes fell
//! between them.
//!
//! Paths are relative to the root (`.` is the root itself), so a log can be
//! replayed onto a copy of the root anywhere.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Error;

/// One file operation, as it completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// A new, empty regular file (an open with O_CREAT of a path that did
    /// not exist).
    Create {
        path: PathBuf,
    },
    Mkdir {
        path: PathBuf,
    },
    /// `data` written at `offset` (write, pwrite, writev, …, short writes
    /// cut to what was written).
    Write {
        path: PathBuf,
        offset: u64,
        data: Bytes,
    },
    /// ftruncate, truncate, or an open with O_TRUNC of an existing file.
    Truncate {
        path: PathBuf,
        len: u64,
    },
    /// fsync of a file or a directory.
    Fsync {
        path: PathBuf,
    },
    /// fdatasync (also implied by a write through an O_DSYNC fd).
    Fdatasync {
        path: PathBuf,
    },
    /// sync(), or syncfs() on the root's file system: everything is durable.
    SyncAll,
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    Unlink {
        path: PathBuf,
    },
    Rmdir {
        path: PathBuf,
    },
}

impl fmt::Display for Op {
    /// `write sessions/s/events.jsonl bytes 120..270`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Create { path } => write!(f, "create {}", path.display()),
            Op::Mkdir { path } => write!(f, "mkdir {}", path.display()),
            Op::Write { path, offset, data } => write!(
                f,
                "write {} bytes {offset}..{}",
                path.display(),
                offset + data.0.len() as u64
            ),
            Op::Truncate { path, len } => write!(f, "truncate {} to {len}", path.display()),
            Op::Fsync { path } => write!(f, "fsync {}", path.display()),
            Op::Fdatasync { path } => write!(f, "fdatasync {}", path.display()),
            Op::SyncAll => f.write_str("sync"),
            Op::Rename { from, to } => write!(f, "rename {} -> {}", from.display(), to.display()),
            Op::Unlink { path } => write!(f, "unlink {}", path.display()),
            Op::Rmdir { path } => write!(f, "rmdir {}", path.display()),
        }
    }
}

/// Which traced call produced an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub pid: i32,
    /// The counted syscall index ([`crate::nemesis::syscall::SyscallEvent::index`]).
    pub syscall: u64,
}

/// An op and, when recorded by the tracer, where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedOp {
    #[serde(flatten)]
    pub op: Op,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

impl From<Op> for LoggedOp {
    fn from(op: Op) -> LoggedOp {
        LoggedOp { op, origin: None }
    }
}

/// A write to the spawned process's stdout, placed among the ops: it was
/// made after exactly `after_ops` ops had completed. `offset` counts bytes
/// on that stream from its start, as the reader of the pipe sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputMark {
    pub after_ops: usize,
    pub offset: u64,
    pub len: u64,
    pub pid: i32,
}

/// Something the recorder saw but cannot express as ops (for example a
/// write to a file already unlinked). A log with gaps may not replay to
/// what the process left on disk; report them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    pub pid: i32,
    pub syscall: u64,
    pub what: String,
}

/// The recorded operations of a run, in completion order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpLog {
    pub ops: Vec<LoggedOp>,
    pub outputs: Vec<OutputMark>,
    pub gaps: Vec<Gap>,
}

impl OpLog {
    /// A log of hand-written ops (no origin, no outputs).
    pub fn from_ops(ops: impl IntoIterator<Item = Op>) -> OpLog {
        OpLog {
            ops: ops.into_iter().map(LoggedOp::from).collect(),
            ..OpLog::default()
        }
    }

    /// How many ops had completed when the stdout byte at `offset` was
    /// written: an ack line ending at byte B was sent after
    /// `ops_before_output(B - 1)` ops. `None` if no recorded write holds it.
    pub fn ops_before_output(&self, offset: u64) -> Option<usize> {
        self.outputs
            .iter()
            .find(|m| m.offset <= offset && offset < m.offset + m.len)
            .map(|m| m.after_ops)
    }

    /// Applies the first `upto` ops to the directory `dir` (a copy of the
    /// root as it was before the run). Syncs are no-ops here.
    pub fn replay(&self, dir: &Path, upto: usize) -> Result<(), Error> {
        for (i, logged) in self.ops.iter().take(upto).enumerate() {
            apply(dir, &logged.op).map_err(|source| Error::Replay {
                op: i,
                text: logged.op.to_string(),
                source,
            })?;
        }
        Ok(())
    }
}

fn apply(dir: &Path, op: &Op) -> std::io::Result<()> {
    match op {
        Op::Create { path } => OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(path))
            .map(drop),
        Op::Mkdir { path } => fs::create_dir(dir.join(path)),
        Op::Write { path, offset, data } => {
            let mut f = OpenOptions::new().write(true).open(dir.join(path))?;
            f.seek(SeekFrom::Start(*offset))?;
            f.write_all(&data.0)
        }
        Op::Truncate { path, len } => OpenOptions::new()
            .write(true)
            .open(dir.join(path))?
            .set_len(*len),
        Op::Fsync { .. } | Op::Fdatasync { .. } | Op::SyncAll => Ok(()),
        Op::Rename { from, to } => fs::rename(dir.join(from), dir.join(to)),
        Op::Unlink { path } => fs::remove_file(dir.join(path)),
        Op::Rmdir { path } => fs::remove_dir(dir.join(path)),
    }
}

/// Written bytes. Serialised as `{"text": "..."}` when valid UTF-8 (most
/// session-store data is), else `{"hex": "..."}`.
#[derive(Clone, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = String::from_utf8_lossy(&self.0);
        let mut shown: String = text.chars().take(80).collect();
        if shown.len() < text.len() {
            shown.push('…');
        }
        write!(f, "{} bytes {shown:?}", self.0.len())
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum BytesRepr {
    Text(String),
    Hex(String),
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => BytesRepr::Text(text.to_string()),
            Err(_) => BytesRepr::Hex(self.0.iter().map(|b| format!("{b:02x}")).collect()),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match BytesRepr::deserialize(d)? {
            BytesRepr::Text(t) => Ok(Bytes(t.into_bytes())),
            BytesRepr::Hex(h) => {
                if h.len() % 2 != 0 || !h.is_ascii() {
                    return Err(serde::de::Error::custom(
                        "hex data must be an even number of ASCII hex digits",
                    ));
                }
                (0..h.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&h[i..i + 2], 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map(Bytes)
                    .map_err(|e| serde::de::Error::custom(format!("hex data: {e}")))
            }
        }
    }
}
