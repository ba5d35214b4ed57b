//! The syscall nemesis's plans: the fault a plan makes at a counted call
//! ([`SysFault`]), the calls a crash-free traced life made
//! ([`SyscallTrace`], its file-mutating calls and its reads of the
//! store's files in two sequences), and which faults apply to which call.

use std::path::Path;

use super::{Crash, Plan};
use crate::nemesis::syscall::{Call, Errno, SyscallEvent, SyscallFault, Sysno};
use crate::scenario::rng::Rng;

/// What the syscall nemesis does to its syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SysFault {
    KillBefore,
    KillAfter,
    /// Only the first `bytes` bytes of the write go through, then SIGKILL.
    Tear {
        bytes: u64,
    },
    /// A call that needs space (a write, a creating open, mkdir, rename)
    /// fails with ENOSPC; the process goes on.
    Enospc,
    /// Any counted call but a write (fsync, fdatasync, truncate, rename,
    /// unlink, a creating open, mkdir, …) fails with EIO; the process goes on.
    Eio,
    /// The disk is full from this call on, to the end of the life: every
    /// call that needs space fails with ENOSPC; the process goes on.
    DiskFull,
    /// Reads (the index counts reads): the read fails with EIO; the process goes on.
    EioRead,
    /// Reads: the read fails with EINTR, nothing read; the process goes on.
    EintrRead,
    /// Reads: the read returns only its first `bytes` bytes; the process goes on.
    ShortRead {
        bytes: u64,
    },
}

impl SysFault {
    /// The tracer's fault.
    pub fn to_syscall(self) -> SyscallFault {
        match self {
            SysFault::KillBefore => SyscallFault::KillBefore,
            SysFault::KillAfter => SyscallFault::KillAfter,
            SysFault::Tear { bytes } => SyscallFault::TearWrite { keep: bytes },
            SysFault::Enospc => SyscallFault::Fail {
                errno: Errno::ENOSPC,
            },
            SysFault::Eio => SyscallFault::Fail { errno: Errno::EIO },
            SysFault::DiskFull => SyscallFault::DiskFull,
            SysFault::EioRead => SyscallFault::FailRead { errno: Errno::EIO },
            SysFault::EintrRead => SyscallFault::FailRead {
                errno: Errno::EINTR,
            },
            SysFault::ShortRead { bytes } => SyscallFault::ShortRead { keep: bytes },
        }
    }

    /// Does the process die of it (rather than go on after an error)?
    pub fn kills(self) -> bool {
        matches!(
            self,
            SysFault::KillBefore | SysFault::KillAfter | SysFault::Tear { .. }
        )
    }

    /// Does its index count the reads of the store's files (not the
    /// file-mutating calls)?
    pub fn is_read(self) -> bool {
        matches!(
            self,
            SysFault::EioRead | SysFault::EintrRead | SysFault::ShortRead { .. }
        )
    }

    /// Can `call` take this fault?
    pub fn applies_to(self, call: &TracedCall) -> bool {
        match self {
            SysFault::KillBefore | SysFault::KillAfter => call.read_got.is_none(),
            SysFault::Tear { bytes } => call.write_len.is_some_and(|l| bytes >= 1 && bytes < l),
            SysFault::Enospc => call.may_need_space(),
            // From any call on: it fails the first that needs space, and every one after.
            SysFault::DiskFull => true,
            SysFault::Eio => call.write_len.is_none() && call.read_got.is_none(),
            SysFault::EioRead | SysFault::EintrRead => call.read_got.is_some(),
            SysFault::ShortRead { bytes } => call.read_got.is_some_and(|g| bytes >= 1 && bytes < g),
        }
    }
}

/// One counted syscall of a crash-free traced run, with the store root
/// written as `ROOT` so that runs in different trial directories compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedCall {
    pub sysno: Sysno,
    /// `fdatasync(fd 5 = ROOT/sessions/s/events.jsonl)`.
    pub text: String,
    /// The call without byte counts (which may differ from run to run:
    /// the workspace path is in `session_created`) and without the random
    /// part of a temporary file's name ([`comparable_path`]): what must
    /// match for a fault to have hit the planned call.
    pub key: String,
    /// Writes: the byte count.
    pub write_len: Option<u64>,
    /// Not a write, but may need a new block or inode, so a full disk can
    /// fail it: an open that creates, mkdir, rename (the target directory
    /// may grow).
    pub allocates: bool,
    /// Reads: how many bytes it read (0 at the end of the file, or when it
    /// failed).
    pub read_got: Option<u64>,
}

impl TracedCall {
    /// A write, or a call that may need a new block or inode
    /// ([`Self::allocates`]): what ENOSPC can fail, and where a disk can fill.
    pub fn may_need_space(&self) -> bool {
        self.write_len.is_some() || self.allocates
    }

    /// `root` is the canonical store root of the run that made the call.
    pub fn new(e: &SyscallEvent, root: &Path) -> TracedCall {
        let root = root.display().to_string();
        let rel = |p: &Path| p.display().to_string().replacen(&root, "ROOT", 1);
        let fd = match &e.call {
            Call::Write { fd, .. }
            | Call::Sync { fd, .. }
            | Call::SyncFileRange { fd, .. }
            | Call::Read { fd, .. } => format!("fd {fd} "),
            Call::Truncate { fd: Some(fd), .. } => format!("fd {fd} "),
            _ => String::new(),
        };
        let paths: Vec<String> = e
            .call
            .paths()
            .into_iter()
            .map(|p| comparable_path(&rel(p)))
            .collect();
        TracedCall {
            sysno: e.sysno,
            text: e.call_text().replace(&root, "ROOT"),
            key: format!("{}({fd}{})", e.sysno, paths.join(" -> ")),
            write_len: match e.call {
                Call::Write { len, .. } => Some(len),
                _ => None,
            },
            allocates: match e.call {
                Call::Open { flags, .. } => flags & nix::libc::O_CREAT != 0,
                Call::Mkdir { .. } | Call::Rename { .. } => true,
                _ => false,
            },
            read_got: match e.call {
                Call::Read { .. } => Some(e.result.map_or(0, |r| r.max(0) as u64)),
                _ => None,
            },
        }
    }
}

/// `path` with the random part of a temporary file's name left out, so
/// that a store naming its temporary files with `mkstemp` makes the same
/// calls from run to run (`…/.strands_wwtnge70.tmp` and
/// `…/.strands_9i_t3070.tmp` are both `…/.*.tmp`). A temporary file is
/// one whose name says so (`tmp` or `temp` in it, any case); in its
/// name, every run of six or more letters, digits and `_` is the random
/// part. Every other name is compared whole: `message_5.json` is not
/// `message_13.json`.
pub fn comparable_path(path: &str) -> String {
    match path.rsplit_once('/') {
        Some((dir, name)) => format!("{dir}/{}", comparable_name(name)),
        None => comparable_name(path),
    }
}

fn comparable_name(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    if !(lower.contains("tmp") || lower.contains("temp")) {
        return name.to_string();
    }
    fn flush(run: &mut String, out: &mut String) {
        out.push_str(if run.len() >= 6 { "*" } else { run.as_str() });
        run.clear();
    }
    let mut out = String::new();
    let mut run = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// What a crash-free traced run of the first process made: its counted
/// syscalls, in order, and its reads of the store's files, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyscallTrace {
    pub calls: Vec<TracedCall>,
    pub reads: Vec<TracedCall>,
}

impl SyscallTrace {
    /// The counted syscalls and reads of a traced run, `root` (its
    /// canonical store root) written as `ROOT`.
    pub fn of(events: &[SyscallEvent], reads: &[SyscallEvent], root: &Path) -> SyscallTrace {
        SyscallTrace {
            calls: events.iter().map(|e| TracedCall::new(e, root)).collect(),
            reads: reads.iter().map(|e| TracedCall::new(e, root)).collect(),
        }
    }

    /// The call a `fault` at `at` targets: a read for a read fault.
    pub fn target(&self, fault: SysFault, at: u64) -> Option<&TracedCall> {
        self.counted(fault).get(at as usize)
    }

    /// The calls a `fault`'s index counts: the reads, or the file-mutating calls.
    pub fn counted(&self, fault: SysFault) -> &[TracedCall] {
        if fault.is_read() {
            &self.reads
        } else {
            &self.calls
        }
    }

    pub fn len(&self) -> u64 {
        self.calls.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    fn plan(at: usize, fault: SysFault) -> Plan {
        Plan::first(Crash::Syscall {
            at: at as u64,
            fault,
        })
    }

    /// Every fault that applies to call `at`, a tear keeping a sampled prefix.
    fn faults(&self, at: usize, rng: &mut Rng) -> Vec<SysFault> {
        let call = &self.calls[at];
        // At most half the bytes: the trial's write may be a little shorter
        // than the trace's (paths in events differ in length).
        let tear = SysFault::Tear {
            bytes: call.write_len.map_or(0, |l| 1 + rng.below((l / 2).max(1))),
        };
        [
            SysFault::KillBefore,
            SysFault::KillAfter,
            tear,
            SysFault::Enospc,
            SysFault::Eio,
        ]
        .into_iter()
        .filter(|f| f.applies_to(call))
        .collect()
    }

    /// The read faults planned at read `at`: EIO, a short read keeping a
    /// sampled part of what it read (if it read 2 bytes or more), and
    /// EINTR if `first_of_its_call` (see [`Self::read_plans`]).
    fn read_faults(&self, at: usize, first_of_its_call: bool, rng: &mut Rng) -> Vec<SysFault> {
        let read = &self.reads[at];
        // At most half the bytes: the trial's read may get a little less
        // than the trace's (paths in events differ in length).
        let short = SysFault::ShortRead {
            bytes: read.read_got.map_or(0, |g| 1 + rng.below((g / 2).max(1))),
        };
        [SysFault::EioRead, short]
            .into_iter()
            .chain(first_of_its_call.then_some(SysFault::EintrRead))
            .filter(|f| f.applies_to(read))
            .collect()
    }

    /// The read faults at every counted read: EIO and a short read at each;
    /// EINTR at the first read of each call and file ([`TracedCall::key`]:
    /// `read(fd 5 ROOT/…/events.jsonl)`) only, since a runtime retries
    /// EINTR below the store's code (Rust's `read_exact`, Python's PEP 475)
    /// or does not, the same way at every read it makes. Drawn from their
    /// own `rng`, so that planning them changes no other plan.
    pub fn read_plans(&self, rng: &mut Rng) -> Vec<Plan> {
        let mut seen = std::collections::BTreeSet::new();
        let mut plans = Vec::new();
        for at in 0..self.reads.len() {
            let first = seen.insert(self.reads[at].key.as_str());
            for f in self.read_faults(at, first, rng) {
                plans.push(SyscallTrace::plan(at, f));
            }
        }
        plans
    }

    /// Every applicable fault at every counted file-mutating syscall (the
    /// reads' are [`Self::read_plans`]).
    pub fn exhaustive(&self, rng: &mut Rng) -> Vec<Plan> {
        (0..self.calls.len())
            .flat_map(|at| {
                self.faults(at, rng)
                    .into_iter()
                    .map(move |f| SyscallTrace::plan(at, f))
            })
            .collect()
    }

    /// The full-disk plans of a first life: the disk fills at each call
    /// that may need space and stays full.
    pub fn disk_full_plans(&self) -> Vec<Plan> {
        self.fills_at()
            .map(|at| SyscallTrace::plan(at, SysFault::DiskFull))
            .collect()
    }

    /// `n` full-disk plans sampled from the seed.
    pub fn disk_full_sample(&self, n: usize, rng: &mut Rng) -> Vec<Plan> {
        let at: Vec<usize> = self.fills_at().collect();
        if at.is_empty() {
            return Vec::new();
        }
        (0..n)
            .map(|_| SyscallTrace::plan(*rng.pick(&at), SysFault::DiskFull))
            .collect()
    }

    /// The calls a disk can fill at ([`TracedCall::may_need_space`]).
    pub fn fills_at(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.calls.len()).filter(|&at| self.calls[at].may_need_space())
    }

    /// `n` plans sampled from the seed: a random file-mutating syscall, a
    /// random fault that applies.
    pub fn sample(&self, n: usize, rng: &mut Rng) -> Vec<Plan> {
        if self.calls.is_empty() {
            return Vec::new();
        }
        (0..n)
            .map(|_| {
                let at = rng.below(self.len()) as usize;
                let faults = self.faults(at, rng);
                SyscallTrace::plan(at, *rng.pick(&faults))
            })
            .collect()
    }
}
