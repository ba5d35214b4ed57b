//! Power loss: the on-disk states a crash may leave after the k-th recorded
//! file operation, under a named persistence model, built from the snapshot
//! of the root taken before the run and the run's [`OpLog`].
//!
//! Owns: the op log format, the durable-state bookkeeping, the models, the
//! enumeration and sampling of states, and writing a state into a
//! directory. Never: runs the store, or judges a state (the harness's
//! checker does, through the store's own recovery).
//!
//! Portable (pure data and std::fs); the recording that fills an
//! [`OpLog`] is in [`crate::nemesis::syscall`] (Linux x86_64).
//!
//! # What survives a crash after op k
//! *Durable* means made durable before the crash by the calls below; the
//! snapshot taken before the run is durable as a whole.
//! - **File data** (contents and size) is durable as of the last `fsync` or
//!   `fdatasync` of that file (an O_DSYNC write counts as one). Later writes
//!   and truncates to it are *un-synced*.
//! - **A directory entry** (made by create, mkdir, rename, or removed by
//!   unlink, rmdir, rename) is durable only if its parent directory was
//!   fsynced after the operation. A rename between two directories is
//!   durable on each side by that side's directory fsync.
//! - `sync()`, or `syncfs()` on the root's file system, makes everything
//!   durable. `sync_file_range` makes nothing durable.
//! - A file is in a crash state only if a chain of entries reaches it from
//!   the root: fsyncing a new file does not make its name durable.
//!
//! # Models
//! Each model allows every state of the one above it.
//! - **`strict`**: exactly two states. *Everything kept* (what the process
//!   saw), and *lose all un-synced*: every file holds its durable data,
//!   every directory its durable entries. This is the rule a store may rely
//!   on under POSIX: what it fsynced, and nothing else.
//! - **`ext4-ordered`**: plus, for each file independently, its un-synced
//!   appends and truncates persist as a prefix in order: all, none, up to
//!   an op, or up to a 4096-byte boundary of the file inside an append
//!   (the file is never longer than the data that reached it); each
//!   un-synced overwrite (a write within the file's size) is kept or
//!   dropped on its own; and the un-synced directory operations persist as
//!   a prefix in their global order, a rename atomically (as a journal
//!   commit would).
//! - **`weak`**: plus, for each un-synced data op on its own: kept,
//!   dropped, torn (only a prefix up to a 512-byte boundary of the file
//!   reached the disk), or, when it grew the file, the grown range reads
//!   as zeros or as garbage; each un-synced directory operation persists or
//!   not on its own, and a rename pending on its directories can be half
//!   done: both names exist, or neither (or the target keeps the file it
//!   replaced).
//!
//! # Pre-allocation
//! A store that pre-allocates (agentstore's log format 2) makes three kinds
//! of op, and each model treats each as what it is on the disk: the zero
//! fill is a *growth* write (the size change and the zeros together: in
//! `weak` the grown range may read as zeros, as garbage, which is the
//! size change kept without the zeros, or be torn at a sector; in
//! `ext4-ordered` it persists as a prefix, as an append does); a line
//! written into the zeros is an *overwrite* (kept or dropped on its own,
//! torn at a sector in `weak`), so a lost line reads as the zeros it
//! overwrote; and a cut of the zeros (agentstore's clean close) is a
//! truncate. A zero fill by `fallocate` is not recorded (a file that
//! grows without a write is not modelled); agentstore writes its zeros.
//!
//! Every state lists its [`Loss`]es: which operation is lost, torn or
//! garbled, and the missing fsync that allows it, so a violation found in
//! that state names the persistence assumption the store relied on.
//!
//! # Bounds
//! The combinations of all choices are enumerated when there are at most
//! [`Limits::max_states`] of them; beyond that a seeded sample of that many
//! is drawn, always including everything-kept and lose-all. States that
//! leave identical trees are merged.
//!
//! Not modelled: permissions, timestamps, hard links, symlinks, files
//! written through mmap, and fsync failures (a failed fsync is not
//! recorded, so it makes nothing durable).

mod model;
mod oplog;
mod sim;
mod tree;

use std::io;
use std::path::PathBuf;

pub use model::{CrashState, CrashStates, Fate, FateKind, Limits, Loss, Model, UnknownModel};
pub use oplog::{Bytes, Gap, LoggedOp, Op, OpLog, Origin, OutputMark};
pub use sim::Simulator;
pub use tree::{Node, Tree};

/// What can go wrong building or writing crash states. One line each.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: {kind} cannot be snapshotted (regular files and directories only)", path.display())]
    Unsupported { path: PathBuf, kind: &'static str },
    #[error("op log does not fit the snapshot: op #{op} ({text}): {problem}")]
    Inconsistent {
        op: usize,
        text: String,
        problem: String,
    },
    #[error("replaying op #{op} ({text}): {source}")]
    Replay {
        op: usize,
        text: String,
        #[source]
        source: io::Error,
    },
    #[error("crash point {k} is beyond the log's {ops} ops")]
    CrashPoint { k: usize, ops: usize },
    #[error("the simulator is already past op {applied}; cannot go back to {k}")]
    Backwards { k: usize, applied: usize },
    #[error("choice {choice:?} does not fit model {model} at crash point {crash_after}")]
    BadChoice {
        model: Model,
        crash_after: usize,
        choice: Vec<u32>,
    },
}
