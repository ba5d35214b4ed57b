//! Syscall-level nemesis: run a command under ptrace, list the file-mutating
//! system calls it makes under a root directory, kill it before or after the
//! N-th of them, tear a write, or make a call fail and let it go on; and
//! record its file operations with their data for the power-loss model.
//!
//! **Linux on x86_64 only** (ptrace register layout, syscall numbers,
//! `/proc`). On any other platform the types exist but [`Traced::spawn`]
//! returns [`Error::Unsupported`].
//!
//! Owns: the tracing loop, the decoding of calls, fault injection, recording.
//! Never: interprets what the store wrote, or decides what is a violation.
//!
//! # What is counted
//! Only calls that touch a path under [`TraceConfig::root`] (canonicalised):
//! write, pwrite64, writev, pwritev, pwritev2, fsync, fdatasync,
//! sync_file_range, ftruncate, truncate, rename, renameat, renameat2, unlink,
//! unlinkat, rmdir, mkdir, mkdirat, and open, openat, creat with O_CREAT or
//! O_TRUNC; plus sync(), and syncfs() on the file system holding the root.
//! The runtime's own writes (stdout pipes, logs elsewhere) are not counted.
//! An fd is resolved to its path at every call (`/proc/PID/fd/N`), so dup,
//! fork and fd passing need no bookkeeping and close is not tracked.
//!
//! Not seen: writes through mmap, io_uring, fallocate, copy_file_range,
//! sendfile/splice into files, link/symlink, O_TMPFILE + linkat, openat2.
//!
//! # Reads
//! With [`TraceConfig::reads`] (or a read fault planned), the reads of
//! files under the root are counted too, in a sequence of their own
//! ([`Outcome::reads`]): read, pread64, readv, preadv, preadv2. A read
//! fault ([`SyscallFault::FailRead`], [`SyscallFault::ShortRead`]) names
//! its read by that index, so the file-mutating calls keep their indices
//! whether reads are traced or not. Not seen: reads through mmap,
//! io_uring, sendfile/splice/copy_file_range out of a file.
//!
//! # Where the traced process stops
//! A seccomp-bpf filter, installed in the child before its exec and built
//! from the decoder's own list of calls, makes the kernel stop it only at
//! the calls above (opens only with O_CREAT, O_TRUNC or O_TMPFILE) and run
//! every other call without a stop: an interpreter's imports cost nothing.
//! Reads are in the filter only when reads are traced; then every read
//! of every file stops once (an interpreter's imports cost again).
//! The counted calls, their order and the faults are those of tracing
//! every call. [`TraceConfig::seccomp`] false (`AGENTCHAOS_SECCOMP=off` for
//! the campaigns, [`seccomp_from_env`]) stops at every call's enter and
//! exit instead, as the tracer does where the kernel refuses the filter
//! (it says so once on stderr). The filter sets the process's
//! no_new_privs: a set-user-ID program it runs gains no privileges (ptrace
//! already denies them).
//!
//! # Use from a harness
//! The tracer must run on the thread that spawned the process ([`Traced`]
//! is `!Send` to enforce it). Spawn and run it on a thread of its own, take
//! the child's pipes out, and read the acks on another thread:
//!
//! ```no_run
//! # use agentchaos::nemesis::syscall::{Traced, TraceConfig};
//! # use std::process::{Command, Stdio};
//! let (tx, rx) = std::sync::mpsc::channel();
//! let tracer = std::thread::spawn(move || {
//!     let mut cmd = Command::new("my-adapter");
//!     cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
//!     let config = TraceConfig { root: "/tmp/root".into(), fault: None, record: true, seccomp: true, reads: false };
//!     let mut traced = Traced::spawn(cmd, config)?;
//!     tx.send((traced.stdin.take(), traced.stdout.take(), traced.monitor())).unwrap();
//!     traced.run()
//! });
//! let (stdin, stdout, monitor) = rx.recv().unwrap();
//! // ... talk to the adapter; `monitor.recorded_ops()` is live, and the
//! // recorded `OpLog::outputs` place every stdout write exactly between ops.
//! let outcome = tracer.join().unwrap()?;
//! # Ok::<(), agentchaos::nemesis::syscall::Error>(())
//! ```
//!
//! # Determinism
//! Indices are assigned in the order the tracer sees counted calls enter. A
//! single-threaded store run twice makes the same calls in the same order, so
//! a fault planned from a trace run hits the same call; with several threads
//! or processes racing, it may not, and the [`FaultReport`] names the call it
//! actually hit.

mod event;
mod fault;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod decode;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod filter;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod record;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod tracer;
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
#[path = "unsupported.rs"]
mod tracer;

use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use event::{errno_name, open_flags, Call, SyscallEvent, Sysno};
pub use fault::{Errno, FaultOutcome, FaultPlan, FaultReport, SyscallFault};
pub use tracer::{Monitor, Traced};

use crate::nemesis::powerloss::OpLog;

/// Can this build trace syscalls (Linux on x86_64)? Elsewhere
/// [`Traced::spawn`] returns [`Error::Unsupported`].
pub const SUPPORTED: bool = cfg!(all(target_os = "linux", target_arch = "x86_64"));

/// What to trace and what to do.
#[derive(Debug, Clone)]
pub struct TraceConfig {
    /// Only calls touching files under this directory are counted, faulted
    /// and recorded. Must exist; it is canonicalised.
    pub root: PathBuf,
    /// At most one fault per run.
    pub fault: Option<FaultPlan>,
    /// Record file operations with their data into an [`OpLog`].
    pub record: bool,
    /// Stop only at the calls the decoder handles (a seccomp filter; see
    /// the module's documentation); false: at every call.
    pub seccomp: bool,
    /// Count the reads of files under the root too ([`Outcome::reads`]);
    /// implied by a planned read fault.
    pub reads: bool,
}

/// Turns the seccomp filter of the campaigns' tracer off (`off`) or on
/// (`on`, the default).
pub const SECCOMP_ENV: &str = "AGENTCHAOS_SECCOMP";

/// [`SECCOMP_ENV`] is neither `on` nor `off`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{SECCOMP_ENV}={0:?}: expected on or off")]
pub struct BadSeccompSetting(pub String);

/// [`TraceConfig::seccomp`] as [`SECCOMP_ENV`] sets it: true unless `off`.
pub fn seccomp_from_env() -> Result<bool, BadSeccompSetting> {
    match std::env::var_os(SECCOMP_ENV) {
        None => Ok(true),
        Some(v) if v == "on" => Ok(true),
        Some(v) if v == "off" => Ok(false),
        Some(v) => Err(BadSeccompSetting(v.to_string_lossy().into_owned())),
    }
}

/// How the spawned process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "exit", rename_all = "snake_case")]
pub enum Exit {
    Code { code: i32 },
    Signal { signal: String },
}

/// Everything a traced run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    /// Every counted call, in order (`events[i].index == i`).
    pub events: Vec<SyscallEvent>,
    /// When reads were traced: every counted read, in order
    /// (`reads[i].index == i`).
    #[serde(default)]
    pub reads: Vec<SyscallEvent>,
    /// Present when a fault was planned.
    pub fault: Option<FaultReport>,
    /// Present when recording was asked for.
    pub oplog: Option<OpLog>,
    /// How the spawned process ended (its children are waited for too).
    pub exit: Exit,
    /// The seccomp filter was in effect.
    #[serde(default)]
    pub seccomp: bool,
    /// How many times the tracer stopped a traced process (a seccomp,
    /// syscall, event or signal stop): the cost of tracing.
    #[serde(default)]
    pub stops: u64,
}

/// Why tracing could not run. Each renders as one line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("syscall tracing needs Linux on x86_64; this build targets {os}/{arch}")]
    Unsupported {
        os: &'static str,
        arch: &'static str,
    },
    #[error("trace root {}: {source}", path.display())]
    Root {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot start {program} under ptrace: {source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("ptrace {op} on pid {pid} failed: {errno} (is ptrace allowed here? seccomp, yama ptrace_scope and container policies can forbid it)")]
    Ptrace {
        op: &'static str,
        pid: i32,
        errno: String,
    },
    #[error("{op} on pid {pid}: {what}")]
    Tracee {
        op: &'static str,
        pid: i32,
        what: String,
    },
}

/// Spawns `cmd` under the tracer and runs it to the end (or the planned
/// kill). For stdin/stdout interaction use [`Traced`] directly.
pub fn trace(cmd: std::process::Command, config: TraceConfig) -> Result<Outcome, Error> {
    Traced::spawn(cmd, config)?.run()
}
