//! The nemesis: how a trial's agent dies, and what each death models.
//!
//! A [`Plan`] says how the first process dies ([`Crash`]) and, for a double
//! crash, at which hit the first restarted process dies too, during its
//! recovery. Every crash is a real `SIGKILL`: uncatchable, no destructors,
//! no flushes, but the kernel keeps the page cache, so what was written
//! survives. The crash models:
//!
//! - `kill@N`: SIGKILL at the N-th crash-point hit (whitebox; 0-based, counted
//!   over every point the store and the agent pass, in this process).
//! - `tear@N:B`: hit N is a write; only its first B bytes reach the file
//!   (at most all but one), then SIGKILL: a torn write.
//! - `powercut@N`: SIGKILL at hit N, then every file the store reported
//!   syncing is cut back to the last length it reported durable (via
//!   `AGENTCHAOS_SYNC_LOG`). This models a power cut in which nothing
//!   written after the last successful `fdatasync` of the event log reached
//!   the disk and the file size reverts with it. It is how an ack given
//!   before its fsync gets caught: a plain SIGKILL keeps the page cache. It
//!   does not model reordered or partially persisted unsynced writes, lost
//!   renames, or loss in other files (snapshot, metadata, blobs); issue 6
//!   (power loss) covers those.
//! - `timer@Dus`: the harness sends SIGKILL after D microseconds, wherever
//!   the agent is (blackbox, for realism; not exactly replayable).
//! - `+kill@M` suffix: the first restarted process is killed at its M-th
//!   hit, inside its recovery for small M; a third process then recovers
//!   and finishes (a double crash).
//!
//! The syscall nemesis (`--nemesis syscall`, [`crate::syscall`], Linux
//! x86_64 only) needs no crash points: the first process tree (the agent
//! and its adapter child, forks followed) runs under ptrace, and N counts
//! the file-mutating syscalls it makes under the trial's store root, in
//! the order a crash-free traced run enumerated them ([`SyscallTrace`]):
//!
//! - `sys-kill-before@N`: SIGKILL as syscall N enters; it never runs.
//! - `sys-kill-after@N`: syscall N runs, then SIGKILL before the caller
//!   sees its result (the store cannot react to it).
//! - `sys-tear@N:B`: writes only: syscall N writes only its first B bytes,
//!   then SIGKILL (a torn write the store did not choose).
//! - `sys-enospc@N`: writes only: syscall N fails with ENOSPC, nothing
//!   written, and the process goes on (a full disk).
//! - `sys-eio@N`: fsync/fdatasync only: syscall N fails with EIO and the
//!   process goes on (a failing device; Linux may have dropped the dirty
//!   pages, so a retried fsync can succeed for data that is gone).
//!
//! After an injected error the first process may finish or give up; either
//! way the trial goes on as after a kill (restart, recover, finish).
//!
//! This module owns plan syntax, the environment a plan gives each
//! process, the power cut itself, and which plans a campaign runs. It must
//! never decide whether a trial passed.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::rng::Rng;
use crate::syscall::{Call, Errno, SyscallEvent, SyscallFault, Sysno};

/// Crash-point hits whose name ends like this are writes that can tear.
pub const WRITE_SUFFIX: &str = ".write";
/// The crash point of an event-log append.
pub const LOG_WRITE: &str = "log.write";
/// The agent's crash point before it opens a session in an adapter; in a
/// traced (first) process the open creates the session: `session_created`.
pub const ADAPTER_OPEN: &str = "adapter.open";
/// The agent's crash point before it sends an append to an adapter.
pub const ADAPTER_APPEND: &str = "adapter.append";
/// The agent's crash point once the adapter has answered an append, before
/// the agent reads the answer (the append is done; its ack is never seen).
pub const ADAPTER_APPEND_REPLIED: &str = "adapter.append.replied";

/// How the first process of a trial dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Crash {
    Kill {
        at: u64,
    },
    Tear {
        at: u64,
        bytes: u64,
    },
    PowerCut {
        at: u64,
    },
    Timer {
        micros: u64,
    },
    /// A fault at the `at`-th counted syscall of the first process tree.
    Syscall {
        at: u64,
        fault: SysFault,
    },
}

impl Crash {
    /// The hit it kills at, for whitebox crashes.
    pub fn hit(&self) -> Option<u64> {
        match *self {
            Crash::Kill { at } | Crash::Tear { at, .. } | Crash::PowerCut { at } => Some(at),
            Crash::Timer { .. } | Crash::Syscall { .. } => None,
        }
    }
}

/// What the syscall nemesis does to its syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SysFault {
    KillBefore,
    KillAfter,
    /// Only the first `bytes` bytes of the write go through, then SIGKILL.
    Tear {
        bytes: u64,
    },
    /// The write fails with ENOSPC; the process goes on.
    Enospc,
    /// The fsync/fdatasync fails with EIO; the process goes on.
    Eio,
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
        }
    }

    /// Does the process die of it (rather than go on after an error)?
    pub fn kills(self) -> bool {
        !matches!(self, SysFault::Enospc | SysFault::Eio)
    }

    /// Can `call` take this fault?
    pub fn applies_to(self, call: &TracedCall) -> bool {
        match self {
            SysFault::KillBefore | SysFault::KillAfter => true,
            SysFault::Tear { bytes } => call.write_len.is_some_and(|l| bytes >= 1 && bytes < l),
            SysFault::Enospc => call.write_len.is_some(),
            SysFault::Eio => call.is_sync,
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
    /// the workspace path is in `session_created`): what must match for a
    /// fault to have hit the planned call.
    pub key: String,
    /// Writes: the byte count.
    pub write_len: Option<u64>,
    /// fsync or fdatasync.
    pub is_sync: bool,
}

impl TracedCall {
    /// `root` is the canonical store root of the run that made the call.
    pub fn new(e: &SyscallEvent, root: &Path) -> TracedCall {
        let root = root.display().to_string();
        let rel = |p: &Path| p.display().to_string().replacen(&root, "ROOT", 1);
        let fd = match &e.call {
            Call::Write { fd, .. } | Call::Sync { fd, .. } | Call::SyncFileRange { fd, .. } => {
                format!("fd {fd} ")
            }
            Call::Truncate { fd: Some(fd), .. } => format!("fd {fd} "),
            _ => String::new(),
        };
        let paths: Vec<String> = e.call.paths().into_iter().map(|p| rel(p)).collect();
        TracedCall {
            sysno: e.sysno,
            text: e.call_text().replace(&root, "ROOT"),
            key: format!("{}({fd}{})", e.sysno, paths.join(" -> ")),
            write_len: match e.call {
                Call::Write { len, .. } => Some(len),
                _ => None,
            },
            is_sync: matches!(e.call, Call::Sync { .. }),
        }
    }
}

/// What a crash-free traced run of the first process made: its counted
/// syscalls, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyscallTrace {
    pub calls: Vec<TracedCall>,
}

impl SyscallTrace {
    pub fn len(&self) -> u64 {
        self.calls.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    fn plan(at: usize, fault: SysFault) -> Plan {
        Plan {
            crash: Some(Crash::Syscall {
                at: at as u64,
                fault,
            }),
            then_kill_at: None,
        }
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

    /// `--exhaustive`: every applicable fault at every counted syscall.
    pub fn exhaustive(&self, rng: &mut Rng) -> Vec<Plan> {
        (0..self.calls.len())
            .flat_map(|at| {
                self.faults(at, rng)
                    .into_iter()
                    .map(move |f| SyscallTrace::plan(at, f))
            })
            .collect()
    }

    /// `n` plans sampled from the seed: a random syscall, a random fault that applies.
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

/// Which nemeses a campaign runs: crash points (kill, tear, power cut,
/// timer, double crash), the syscall nemesis, and/or power loss (the
/// persistence models of [`crate::powerloss`], run by
/// [`crate::powercampaign`] after the trials).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nemeses {
    pub points: bool,
    pub syscall: bool,
    pub powerloss: bool,
}

impl Nemeses {
    pub const POINTS: Nemeses = Nemeses {
        points: true,
        syscall: false,
        powerloss: false,
    };

    /// Every nemesis this build can run: the syscall nemesis and the
    /// power-loss recorder need ptrace on Linux x86_64.
    pub fn every_supported() -> Nemeses {
        Nemeses {
            points: true,
            syscall: crate::syscall::SUPPORTED,
            powerloss: crate::syscall::SUPPORTED,
        }
    }
}

impl Default for Nemeses {
    fn default() -> Self {
        Nemeses::POINTS
    }
}

impl fmt::Display for Nemeses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = [
            (self.points, "points"),
            (self.syscall, "syscall"),
            (self.powerloss, "powerloss"),
        ]
        .into_iter()
        .filter_map(|(on, n)| on.then_some(n))
        .collect();
        f.write_str(&names.join(","))
    }
}

impl FromStr for Nemeses {
    type Err = String;

    fn from_str(s: &str) -> Result<Nemeses, String> {
        let mut n = Nemeses {
            points: false,
            syscall: false,
            powerloss: false,
        };
        for part in s.split(',') {
            match part.trim() {
                "points" => n.points = true,
                "syscall" => n.syscall = true,
                "powerloss" => n.powerloss = true,
                "all" => n = Nemeses::every_supported(),
                other => {
                    return Err(format!(
                        "nemesis {other:?} is not points, syscall, powerloss or all (e.g. --nemesis points,syscall)"
                    ))
                }
            }
        }
        Ok(n)
    }
}

/// One trial's nemesis schedule. `crash: None` is the crash-free trace run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Plan {
    pub crash: Option<Crash>,
    /// Kill the first restarted process at this hit (a double crash).
    pub then_kill_at: Option<u64>,
}

impl Plan {
    pub const NONE: Plan = Plan {
        crash: None,
        then_kill_at: None,
    };

    pub fn kill(at: u64) -> Plan {
        Plan {
            crash: Some(Crash::Kill { at }),
            then_kill_at: None,
        }
    }

    /// The kind, for reports: `kill`, `tear`, `powercut`, `timer`, `double`,
    /// `sys-kill-before`, `sys-kill-after`, `sys-tear`, `sys-enospc`, `sys-eio`, `none`.
    pub fn kind(&self) -> &'static str {
        match (self.crash, self.then_kill_at) {
            (None, _) => "none",
            (Some(_), Some(_)) => "double",
            (Some(Crash::Syscall { fault, .. }), None) => match fault {
                SysFault::KillBefore => "sys-kill-before",
                SysFault::KillAfter => "sys-kill-after",
                SysFault::Tear { .. } => "sys-tear",
                SysFault::Enospc => "sys-enospc",
                SysFault::Eio => "sys-eio",
            },
            (Some(Crash::Kill { .. }), None) => "kill",
            (Some(Crash::Tear { .. }), None) => "tear",
            (Some(Crash::PowerCut { .. }), None) => "powercut",
            (Some(Crash::Timer { .. }), None) => "timer",
        }
    }

    /// Is this plan's outcome a pure function of the plan (not of timing)?
    pub fn deterministic(&self) -> bool {
        !matches!(self.crash, Some(Crash::Timer { .. }))
    }

    /// Environment for life `life` of the agent; `sync_log` is where a
    /// power cut's sync log goes, `trace` where a trace goes.
    pub fn env(&self, life: u32, sync_log: &Path, trace: &Path) -> Vec<(&'static str, String)> {
        let mut env = Vec::new();
        match (life, self.crash) {
            (0, Some(Crash::Kill { at })) => env.push(("AGENTCHAOS_KILL_AT", at.to_string())),
            (0, Some(Crash::Tear { at, bytes })) => {
                env.push(("AGENTCHAOS_KILL_AT", at.to_string()));
                env.push(("AGENTCHAOS_TEAR", bytes.to_string()));
            }
            (0, Some(Crash::PowerCut { at })) => {
                env.push(("AGENTCHAOS_KILL_AT", at.to_string()));
                env.push(("AGENTCHAOS_SYNC_LOG", sync_log.display().to_string()));
            }
            // The trace tells where the timer struck.
            (0, Some(Crash::Timer { .. })) => {
                env.push(("AGENTCHAOS_TRACE", trace.display().to_string()))
            }
            (1, _) => {
                if let Some(m) = self.then_kill_at {
                    env.push(("AGENTCHAOS_KILL_AT", m.to_string()));
                }
            }
            _ => {}
        }
        env
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.crash {
            None => write!(f, "none")?,
            Some(Crash::Kill { at }) => write!(f, "kill@{at}")?,
            Some(Crash::Tear { at, bytes }) => write!(f, "tear@{at}:{bytes}")?,
            Some(Crash::PowerCut { at }) => write!(f, "powercut@{at}")?,
            Some(Crash::Timer { micros }) => write!(f, "timer@{micros}us")?,
            Some(Crash::Syscall { at, fault }) => match fault {
                SysFault::KillBefore => write!(f, "sys-kill-before@{at}")?,
                SysFault::KillAfter => write!(f, "sys-kill-after@{at}")?,
                SysFault::Tear { bytes } => write!(f, "sys-tear@{at}:{bytes}")?,
                SysFault::Enospc => write!(f, "sys-enospc@{at}")?,
                SysFault::Eio => write!(f, "sys-eio@{at}")?,
            },
        }
        if let Some(m) = self.then_kill_at {
            write!(f, "+kill@{m}")?;
        }
        Ok(())
    }
}

impl FromStr for Plan {
    type Err = String;

    fn from_str(s: &str) -> Result<Plan, String> {
        let bad = || {
            format!(
                "plan {s:?} is not one of none, kill@N, tear@N:BYTES, powercut@N, timer@MICROSus, sys-kill-before@N, sys-kill-after@N, sys-tear@N:BYTES, sys-enospc@N, sys-eio@N, optionally followed by +kill@M"
            )
        };
        let num = |t: &str| t.parse::<u64>().map_err(|_| bad());
        let (first, then) = match s.split_once('+') {
            Some((a, b)) => (
                a,
                Some(b.strip_prefix("kill@").ok_or_else(bad).and_then(num)?),
            ),
            None => (s, None),
        };
        let crash = if first == "none" {
            None
        } else {
            let (kind, arg) = first.split_once('@').ok_or_else(bad)?;
            let sys = |fault| -> Result<Crash, String> {
                Ok(Crash::Syscall {
                    at: num(arg)?,
                    fault,
                })
            };
            Some(match kind {
                "kill" => Crash::Kill { at: num(arg)? },
                "sys-kill-before" => sys(SysFault::KillBefore)?,
                "sys-kill-after" => sys(SysFault::KillAfter)?,
                "sys-enospc" => sys(SysFault::Enospc)?,
                "sys-eio" => sys(SysFault::Eio)?,
                "sys-tear" => {
                    let (at, bytes) = arg.split_once(':').ok_or_else(bad)?;
                    Crash::Syscall {
                        at: num(at)?,
                        fault: SysFault::Tear { bytes: num(bytes)? },
                    }
                }
                "powercut" => Crash::PowerCut { at: num(arg)? },
                "tear" => {
                    let (at, bytes) = arg.split_once(':').ok_or_else(bad)?;
                    Crash::Tear {
                        at: num(at)?,
                        bytes: num(bytes)?,
                    }
                }
                "timer" => Crash::Timer {
                    micros: num(arg.strip_suffix("us").ok_or_else(bad)?)?,
                },
                _ => return Err(bad()),
            })
        };
        if crash.is_none() && then.is_some() {
            return Err(bad());
        }
        Ok(Plan {
            crash,
            then_kill_at: then,
        })
    }
}

/// Applies a power cut: every file named in the sync log is cut back to the
/// last length reported durable for it. Returns what was cut, as
/// `(path, length before, length after)`.
pub fn power_cut(sync_log: &Path) -> std::io::Result<Vec<(PathBuf, u64, u64)>> {
    let text = match std::fs::read_to_string(sync_log) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let mut durable: BTreeMap<PathBuf, u64> = BTreeMap::new();
    for line in text.lines() {
        if let Some((len, path)) = parse_sync_line(line) {
            durable.insert(PathBuf::from(path), len);
        }
    }
    let mut cut = Vec::new();
    for (path, len) in durable {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.len() > len {
            let f = std::fs::OpenOptions::new().write(true).open(&path)?;
            f.set_len(len)?;
            cut.push((path, meta.len(), len));
        }
    }
    Ok(cut)
}

/// A sync-log line is `LEN PATH`.
pub fn parse_sync_line(line: &str) -> Option<(u64, &str)> {
    let (len, path) = line.split_once(' ')?;
    Some((len.parse().ok()?, path))
}

/// What a crash-free trace run saw, hit by hit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trace {
    /// Name of every crash-point hit, in order.
    pub hits: Vec<String>,
    /// Per hit: does the event log hold bytes not yet synced?
    pub unsynced: Vec<bool>,
    /// Per hit: how many event-log appends completed before it.
    pub appends_before: Vec<usize>,
    /// Per hit: how much work a recovery would have if the process died
    /// there (open run + calls to mark), from the reference log.
    pub recovery_work: Vec<usize>,
    /// Wall time of the trace run's agent, in microseconds.
    pub micros: u64,
}

impl Trace {
    /// Builds the trace from the interleaved trace/sync-log file (hit names,
    /// and `LEN PATH` lines after each sync), the byte end of each record of
    /// the reference log, and the recovery work after each record count.
    pub fn from_log(text: &str, record_ends: &[u64], work_after: &[usize], micros: u64) -> Trace {
        let mut t = Trace {
            micros,
            ..Trace::default()
        };
        let mut synced = 0u64;
        let mut appends = 0usize;
        let mut pending_write = false;
        for line in text.lines() {
            if let Some((len, _)) = parse_sync_line(line) {
                synced = len;
                continue;
            }
            // A log.write (or adapter.append) hit is counted before the
            // write; it completes before the next hit (an adapter's is
            // served at its `.replied` hit).
            if pending_write {
                appends += 1;
            }
            let written = appends
                .checked_sub(1)
                .map_or(0, |i| record_ends.get(i).copied().unwrap_or(0));
            t.unsynced.push(written > synced);
            t.appends_before.push(appends);
            t.recovery_work
                .push(work_after.get(appends).copied().unwrap_or(0));
            pending_write = [LOG_WRITE, ADAPTER_APPEND, ADAPTER_OPEN].contains(&line);
            t.hits.push(line.to_string());
        }
        t
    }

    pub fn len(&self) -> u64 {
        self.hits.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.hits.is_empty()
    }
}

/// A tear size: half the time a short prefix, half the time everything but
/// the last byte (the store clamps it), so that the fragment is nearly a line.
fn tear_bytes(rng: &mut Rng) -> u64 {
    if rng.chance(1, 2) {
        rng.range(1, 48)
    } else {
        u64::from(u32::MAX)
    }
}

/// The hit to kill the restarted process at: inside its first or second
/// recovery (each mark costs three hits: the mark, the write, the sync).
fn second_kill(rng: &mut Rng, work: usize) -> u64 {
    rng.below(4 + 3 * work as u64)
}

/// Every plan `--exhaustive` runs: a kill at every hit; a tear at every
/// write hit; a power cut at every hit where the log has unsynced bytes;
/// once per distinct log length at which a recovery has work, a double
/// crash killing the recovery too; and one timer kill per eight hits, for
/// realism (blackbox: wherever the agent happens to be).
pub fn exhaustive(trace: &Trace, rng: &mut Rng) -> Vec<Plan> {
    let mut plans: Vec<Plan> = (0..trace.len()).map(Plan::kill).collect();
    for (h, name) in trace.hits.iter().enumerate() {
        if name.ends_with(WRITE_SUFFIX) {
            plans.push(Plan {
                crash: Some(Crash::Tear {
                    at: h as u64,
                    bytes: tear_bytes(rng),
                }),
                then_kill_at: None,
            });
        }
    }
    for (h, &u) in trace.unsynced.iter().enumerate() {
        if u {
            plans.push(Plan {
                crash: Some(Crash::PowerCut { at: h as u64 }),
                then_kill_at: None,
            });
        }
    }
    // Last hit for each log length: the most progress with that log.
    let mut last_at_len: BTreeMap<usize, usize> = BTreeMap::new();
    for (h, &n) in trace.appends_before.iter().enumerate() {
        if trace.recovery_work[h] > 0 {
            last_at_len.insert(n, h);
        }
    }
    for h in last_at_len.into_values() {
        plans.push(Plan {
            crash: Some(Crash::Kill { at: h as u64 }),
            then_kill_at: Some(second_kill(rng, trace.recovery_work[h])),
        });
    }
    for _ in 0..trace.len().div_ceil(8) {
        plans.push(Plan {
            crash: Some(timer(trace, rng)),
            then_kill_at: None,
        });
    }
    plans
}

/// A timer kill somewhere in the span of a crash-free run (a little past
/// it, so that some timers come too late and the agent finishes).
fn timer(trace: &Trace, rng: &mut Rng) -> Crash {
    Crash::Timer {
        micros: rng.below(trace.micros.max(1) * 6 / 5 + 1),
    }
}

/// `n` plans sampled from the seed: kills, tears, power cuts, double
/// crashes and timer kills.
pub fn sample(trace: &Trace, n: usize, rng: &mut Rng) -> Vec<Plan> {
    if trace.is_empty() {
        return Vec::new();
    }
    let writes: Vec<u64> = (0..trace.len())
        .filter(|&h| trace.hits[h as usize].ends_with(WRITE_SUFFIX))
        .collect();
    let unsynced: Vec<u64> = (0..trace.len())
        .filter(|&h| trace.unsynced[h as usize])
        .collect();
    (0..n)
        .map(|_| {
            let any = rng.below(trace.len());
            let roll = rng.below(100);
            let crash = match roll {
                0..=34 => Crash::Kill { at: any },
                35..=49 if !writes.is_empty() => Crash::Tear {
                    at: *rng.pick(&writes),
                    bytes: tear_bytes(rng),
                },
                50..=64 if !unsynced.is_empty() => Crash::PowerCut {
                    at: *rng.pick(&unsynced),
                },
                85..=99 => timer(trace, rng),
                _ => Crash::Kill { at: any },
            };
            let double = (65..=84).contains(&roll);
            Plan {
                crash: Some(crash),
                then_kill_at: double.then(|| second_kill(rng, trace.recovery_work[any as usize])),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_round_trip_through_their_string_form() {
        for s in [
            "none",
            "kill@41",
            "tear@7:4294967295",
            "powercut@3",
            "timer@1200us",
            "kill@9+kill@2",
            "sys-kill-before@0",
            "sys-kill-after@14",
            "sys-tear@3:7",
            "sys-enospc@5",
            "sys-eio@6",
        ] {
            let p: Plan = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
        }
        for bad in [
            "",
            "kill",
            "kill@x",
            "tear@3",
            "none+kill@1",
            "zap@1",
            "timer@5",
            "sys-tear@3",
            "sys-eio@x",
            "sys-zap@1",
        ] {
            assert!(bad.parse::<Plan>().is_err(), "{bad}");
        }
    }

    #[test]
    fn trace_knows_where_the_log_is_unsynced_and_exhaustive_covers_every_hit() {
        // Two appends of 10 bytes each; the second is never synced.
        let log = "mkdir\n0 /l\nlog.write\nlog.fdatasync\n10 /l\nlog.write\nagent.before_effect\n";
        let t = Trace::from_log(log, &[10, 20], &[0, 1, 2], 5);
        assert_eq!(
            t.hits,
            [
                "mkdir",
                "log.write",
                "log.fdatasync",
                "log.write",
                "agent.before_effect"
            ]
        );
        assert_eq!(t.appends_before, [0, 0, 1, 1, 2]);
        assert_eq!(t.unsynced, [false, false, true, false, true]);
        let plans = exhaustive(&t, &mut Rng::new(1));
        for h in 0..5 {
            assert!(plans.contains(&Plan::kill(h)));
        }
        assert_eq!(plans.iter().filter(|p| p.kind() == "tear").count(), 2);
        assert_eq!(plans.iter().filter(|p| p.kind() == "powercut").count(), 2);
        assert_eq!(plans.iter().filter(|p| p.kind() == "double").count(), 2);
        assert_eq!(plans.iter().filter(|p| p.kind() == "timer").count(), 1);
        let sampled = sample(&t, 50, &mut Rng::new(2));
        assert_eq!(sampled.len(), 50);
        assert!(sampled.iter().all(|p| p.crash.is_some()));
    }

    #[test]
    fn syscall_plans_cover_each_call_with_the_faults_that_apply() {
        let root = Path::new("/r");
        let log = PathBuf::from("/r/s/events.jsonl");
        let event = |index, sysno, call| SyscallEvent {
            index,
            pid: 1,
            sysno,
            call,
            result: Some(0),
        };
        let calls = [
            event(
                0,
                Sysno::Mkdir,
                Call::Mkdir {
                    path: "/r/s".into(),
                    mode: 0o755,
                },
            ),
            event(
                1,
                Sysno::Pwrite64,
                Call::Write {
                    fd: 4,
                    path: log.clone(),
                    len: 180,
                    offset: Some(0),
                },
            ),
            event(
                2,
                Sysno::Fdatasync,
                Call::Sync {
                    fd: 4,
                    path: log,
                    data_only: true,
                },
            ),
        ];
        let trace = SyscallTrace {
            calls: calls.iter().map(|e| TracedCall::new(e, root)).collect(),
        };
        assert_eq!(trace.calls[2].text, "fdatasync(fd 4 = ROOT/s/events.jsonl)");
        assert_eq!(trace.calls[1].key, "pwrite64(fd 4 ROOT/s/events.jsonl)");
        let plans = trace.exhaustive(&mut Rng::new(1));
        let kinds: Vec<String> = plans.iter().map(|p| p.to_string()).collect();
        // mkdir: 2 kills; the write: 2 kills, a tear, ENOSPC; the sync: 2 kills, EIO.
        assert_eq!(plans.len(), 9, "{kinds:?}");
        for k in [
            "sys-kill-before@0",
            "sys-kill-after@0",
            "sys-enospc@1",
            "sys-eio@2",
        ] {
            assert!(kinds.contains(&k.to_string()), "{kinds:?}");
        }
        let tear = plans.iter().find(|p| p.kind() == "sys-tear").unwrap();
        assert!(matches!(
            tear.crash,
            Some(Crash::Syscall { at: 1, fault: SysFault::Tear { bytes } }) if (1..=90).contains(&bytes)
        ));
        let sampled = trace.sample(30, &mut Rng::new(2));
        assert!(sampled.iter().all(|p| match p.crash {
            Some(Crash::Syscall { at, fault }) => fault.applies_to(&trace.calls[at as usize]),
            _ => false,
        }));
        assert_eq!(
            "points,syscall".parse::<Nemeses>().unwrap().to_string(),
            "points,syscall"
        );
        assert!("points,zap".parse::<Nemeses>().is_err());
    }

    #[test]
    fn power_cut_drops_only_what_was_never_synced() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.jsonl");
        std::fs::write(&log, b"0123456789abcdef").unwrap();
        let sync = dir.path().join("synced");
        std::fs::write(&sync, format!("0 {p}\n10 {p}\n", p = log.display())).unwrap();
        let cut = power_cut(&sync).unwrap();
        assert_eq!(cut, vec![(log.clone(), 16, 10)]);
        assert_eq!(std::fs::read(&log).unwrap(), b"0123456789");
        assert!(power_cut(&sync).unwrap().is_empty());
    }
}
