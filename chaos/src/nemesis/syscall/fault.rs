//! Faults the tracer injects at the N-th counted system call, and the report
//! of what it did.
//!
//! A kill fault kills every traced process (the whole store, as a crash
//! would), not only the thread that made the call.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::event::{errno_name, SyscallEvent};

/// An errno value the tracer can make a call return (1..=4095).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "i32", into = "i32")]
pub struct Errno(i32);

impl Errno {
    /// No space left on device: what a full disk does to a write.
    pub const ENOSPC: Errno = Errno(28);
    /// I/O error: what a failing device does to an fsync or a read.
    pub const EIO: Errno = Errno(5);
    /// Interrupted system call: a read a signal cut short before it read
    /// anything (a network or FUSE file system; the caller retries).
    pub const EINTR: Errno = Errno(4);

    /// `None` outside the kernel's errno range 1..=4095.
    pub fn new(errno: i32) -> Option<Errno> {
        (1..=4095).contains(&errno).then_some(Errno(errno))
    }

    /// The raw value.
    pub fn get(self) -> i32 {
        self.0
    }
}

/// An errno outside 1..=4095 (what a syscall can return): bad input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("errno {0} is outside 1..=4095")]
pub struct ErrnoOutOfRange(i32);

impl TryFrom<i32> for Errno {
    type Error = ErrnoOutOfRange;
    fn try_from(v: i32) -> Result<Self, ErrnoOutOfRange> {
        Errno::new(v).ok_or(ErrnoOutOfRange(v))
    }
}

impl From<Errno> for i32 {
    fn from(e: Errno) -> i32 {
        e.0
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&errno_name(i64::from(self.0)))
    }
}

/// What to do to the targeted call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "kebab-case")]
pub enum SyscallFault {
    /// SIGKILL at syscall-enter: the call never runs.
    KillBefore,
    /// SIGKILL at syscall-exit: the call ran, the caller never sees its result.
    KillAfter,
    /// Writes only: the byte count is cut to `keep` before the call runs
    /// (for writev-style calls the iovecs are cut), then SIGKILL at exit.
    TearWrite { keep: u64 },
    /// The call is skipped and returns `-errno`; the process goes on.
    Fail { errno: Errno },
    /// Reads only (the plan's `at` counts reads): the read is skipped and
    /// returns `-errno`; the process goes on.
    FailRead { errno: Errno },
    /// Reads only (the plan's `at` counts reads): the byte count is cut to
    /// `keep` (at least 1, fewer than asked) before the call runs, and
    /// restored at its exit: a short read, which POSIX allows anywhere;
    /// the process goes on.
    ShortRead { keep: u64 },
    /// A disk that fills up and stays full: from the planned call on, every
    /// counted call that needs space ([`Call::needs_space`]: a write, an
    /// open that creates, mkdir, rename) is skipped and returns ENOSPC;
    /// the others (fsync, truncate, unlink, reads) run. The process goes
    /// on. `fallocate` is not traced, so a store that reserves space with
    /// it gets it even on this full disk.
    ///
    /// [`Call::needs_space`]: super::Call::needs_space
    DiskFull,
}

impl SyscallFault {
    /// Does it target a read (the plan's `at` counting the reads of files
    /// under the root, not the file-mutating calls)?
    pub fn is_read(self) -> bool {
        matches!(
            self,
            SyscallFault::FailRead { .. } | SyscallFault::ShortRead { .. }
        )
    }

    /// `syscall` or `read`: what the plan's index counts.
    pub fn counts(self) -> &'static str {
        if self.is_read() {
            "read"
        } else {
            "syscall"
        }
    }
}

impl fmt::Display for SyscallFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyscallFault::KillBefore => f.write_str("kill before"),
            SyscallFault::KillAfter => f.write_str("kill after"),
            SyscallFault::TearWrite { keep } => write!(f, "tear to {keep} bytes then kill at"),
            SyscallFault::Fail { errno } | SyscallFault::FailRead { errno } => {
                write!(f, "fail with {errno}")
            }
            SyscallFault::ShortRead { keep } => write!(f, "shorten to {keep} bytes"),
            SyscallFault::DiskFull => f.write_str("disk full from"),
        }
    }
}

/// A fault and the counted call it hits (0-based, as [`SyscallEvent::index`]:
/// among the counted reads for a read fault, [`SyscallFault::is_read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultPlan {
    pub at: u64,
    pub fault: SyscallFault,
}

/// What became of a [`FaultPlan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum FaultOutcome {
    /// The fault hit this call (its `result` is what the process saw, if it
    /// lived to see one). A full disk: the first call it failed.
    Injected { event: SyscallEvent },
    /// The run made only `counted` counted calls (reads, for a read fault).
    NotReached { counted: u64 },
    /// A full disk: none of the `counted` calls from the planned one on
    /// needed space, so nothing failed.
    NoSpaceNeeded { counted: u64 },
    /// The call at `at` cannot take this fault (a tear on a non-write, or a
    /// tear keeping as many bytes as the write has); nothing was injected.
    NotApplicable { event: SyscallEvent, reason: String },
}

/// The plan and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultReport {
    pub plan: FaultPlan,
    pub outcome: FaultOutcome,
    /// Record mode, when the planned call was reached: how many bytes the
    /// traced process had written to its stdout by then. Whatever it wrote
    /// from this offset on came after the call (exact ordering of the
    /// process's own reports against the fault).
    #[serde(default)]
    pub stdout_before: Option<u64>,
}

impl fmt::Display for FaultReport {
    /// `kill before syscall #12: fdatasync(fd 5 = /r/sessions/s/events.jsonl) in pid 4242`,
    /// `fail with EIO read #3: read(fd 5 = /r/sessions/s/events.jsonl, 8192 bytes) in pid 4242 (it returned -5)`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let FaultPlan { at, fault } = self.plan;
        let counts = fault.counts();
        match &self.outcome {
            FaultOutcome::Injected { event } if fault == SyscallFault::DiskFull => write!(
                f,
                "{fault} {counts} #{at} on (ENOSPC at every call that needs space); the first it failed, #{}: {} in pid {}",
                event.index,
                event.call_text(),
                event.pid
            ),
            FaultOutcome::Injected { event } => {
                write!(
                    f,
                    "{fault} {counts} #{at}: {} in pid {}",
                    event.call_text(),
                    event.pid
                )?;
                let kills = matches!(fault, SyscallFault::KillBefore | SyscallFault::KillAfter);
                match event.result {
                    Some(r) if !kills => write!(f, " (it returned {r})"),
                    _ => Ok(()),
                }
            }
            FaultOutcome::NotReached { counted } => write!(
                f,
                "{fault} {counts} #{at}: not reached, the run made only {counted} counted {counts}s"
            ),
            FaultOutcome::NoSpaceNeeded { counted } => write!(
                f,
                "{fault} {counts} #{at}: no call needed space from it to the run's last ({counted} counted {counts}s); nothing failed"
            ),
            FaultOutcome::NotApplicable { event, reason } => write!(
                f,
                "{fault} {counts} #{at}: not applicable to {} ({reason}); nothing injected",
                event.call_text()
            ),
        }
    }
}
