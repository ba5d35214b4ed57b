//! The nemesis: how a trial's agent dies, and what each death models.
//!
//! A [`Plan`] says how the first process dies ([`Crash`]) and, for a double
//! or triple crash, how the restarted lives 1 and 2 die too, counted in
//! their own hits or syscalls ([`LaterTrace`]: a restarted life's own
//! trace). Every crash is a real `SIGKILL`: uncatchable, no destructors,
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
//! - `+kill@M`, `+tear@M:B`, `+sys-…@M` suffixes: the restarted life 1
//!   dies too, at its own M-th hit or syscall; a second suffix crashes
//!   life 2. The next process then recovers and finishes.
//!
//! The syscall nemesis (`--nemesis syscall`, [`crate::nemesis::syscall`], Linux
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
//! - `sys-enospc@N`: a call that needs space (a write, an open that
//!   creates, mkdir, rename): syscall N fails with ENOSPC, nothing done,
//!   and the process goes on (a full disk).
//! - `sys-eio@N`: any counted call but a write (fsync, fdatasync,
//!   truncate, rename, unlink, an open that creates, mkdir, …): syscall N
//!   fails with EIO, nothing done, and the process goes on (a failing
//!   device; after a failed fsync Linux may have dropped the dirty pages,
//!   so a retried fsync can succeed for data that is gone).
//! - `sys-full@N`: the disk fills up at syscall N and stays full for the
//!   rest of the life: from N on, every counted call that needs space (a
//!   write, an open that creates a file not there yet, mkdir) fails with
//!   ENOSPC, nothing done, and the process goes on; the next life finds
//!   the space freed. The store must refuse, not loop or acknowledge.
//!
//! and, counting only the reads of the store's files (read, pread64,
//! readv, preadv, preadv2 of a file under the root, in their own
//! sequence: a life's N-th read), in the first life and in the restarted
//! lives the nemesis traces (their recovery included):
//!
//! - `sys-eio-read@N`: read N fails with EIO and the process goes on (a
//!   failing device). The store must refuse or retry, never take it for
//!   the end of its log.
//! - `sys-eintr-read@N`: read N fails with EINTR, nothing read (a signal;
//!   network and FUSE file systems do it); the store must retry.
//! - `sys-short-read@N:B`: read N returns only its first B bytes (POSIX
//!   allows a short read anywhere); the store must read on.
//!
//! After an injected error the first process may finish or give up; either
//! way the trial goes on as after a kill (restart, recover, finish).
//!
//! [`database`] crashes the database server under a store whose events
//! live in one (`agentchaos db-crash`, and the `db-crash:MODEL@K` strike
//! of `agentchaos workers`: `pg_ctl stop -m immediate`, SIGKILL of the
//! server, SIGKILL with its background writers frozen); [`partition`]
//! puts the database and each worker in a network namespace of its own,
//! every worker joined to the database by its own veth pair, which it
//! cuts and heals (`partition@K`); [`workers`] names the many-workers
//! strikes; [`pgproxy`] relays each worker's connections to the database
//! and holds one of its statements (`pause@K.S`, `reset@K.Sr`, …).
//!
//! This module owns plan syntax, the environment a plan gives each
//! process, the power cut itself, and which plans a campaign runs. It must
//! never decide whether a trial passed.

pub mod database;
pub mod partition;
pub mod pgproxy;
pub mod powerloss;
pub mod syscall;
mod syscall_plans;
pub mod workers;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::scenario::rng::Rng;

pub use syscall_plans::{comparable_path, SysFault, SyscallTrace, TracedCall};

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
    /// Can a restarted life die of it? Kills, tears and syscall faults
    /// (counted in that life); power cuts and timers only end the first.
    pub fn allowed_later(&self) -> bool {
        matches!(
            self,
            Crash::Kill { .. } | Crash::Tear { .. } | Crash::Syscall { .. }
        )
    }

    /// The hit it kills at, for whitebox crashes.
    pub fn hit(&self) -> Option<u64> {
        match *self {
            Crash::Kill { at } | Crash::Tear { at, .. } | Crash::PowerCut { at } => Some(at),
            Crash::Timer { .. } | Crash::Syscall { .. } => None,
        }
    }
}

/// Which nemeses a campaign runs: crash points (kill, tear, power cut,
/// timer, double crash), the syscall nemesis, and/or power loss (the
/// persistence models of [`crate::nemesis::powerloss`], run by
/// [`crate::campaign::powercampaign`] after the trials).
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
            syscall: crate::nemesis::syscall::SUPPORTED,
            powerloss: crate::nemesis::syscall::SUPPORTED,
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

/// A nemesis set, restart policy or plan that is not one: bad input,
/// naming what was given and every form it may take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadNemesis {
    #[error(
        "nemesis {0:?} is not points, syscall, powerloss or all (e.g. --nemesis points,syscall)"
    )]
    Nemesis(String),
    #[error("--restarts {0:?} is not all, deepest or none")]
    Restarts(String),
    #[error("plan {0:?} is not one of none, kill@N, tear@N:BYTES, powercut@N, timer@MICROSus, sys-kill-before@N, sys-kill-after@N, sys-tear@N:BYTES, sys-enospc@N, sys-eio@N, sys-full@N, sys-eio-read@N, sys-eintr-read@N, sys-short-read@N:BYTES, optionally followed by up to {LATER_LIVES} crashes of the restarted lives, each +kill@M, +tear@M:BYTES or +sys-…@M, then optionally ,sched:S (the parallel appenders' interleaving seed S)")]
    Plan(String),
}

impl FromStr for Nemeses {
    type Err = BadNemesis;

    fn from_str(s: &str) -> Result<Nemeses, BadNemesis> {
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
                other => return Err(BadNemesis::Nemesis(other.to_string())),
            }
        }
        Ok(n)
    }
}

impl Nemeses {
    /// Whether the two sets share a nemesis.
    pub fn overlaps(self, other: Nemeses) -> bool {
        (self.points && other.points)
            || (self.syscall && other.syscall)
            || (self.powerloss && other.powerloss)
    }
}

/// The nemeses that reveal a store fault profile: the ones its test in
/// `chaos/tests` catches it with (`faults.rs` runs each fault with exactly
/// these, `powerloss_campaign.rs` the power-loss ones). Another nemesis may
/// catch a fault too; this names the ones that are shown to.
///
/// - Power-loss faults (a missing or misplaced fsync) leave nothing a
///   SIGKILL can see, since the page cache survives it: only the power-loss
///   models lose unsynced data.
/// - A failed sync, a refused write or a failed or short read needs an
///   injected errno or a cut count: the syscall nemesis.
/// - A torn tail saved on a full disk needs both: a crash point's tear,
///   then the syscall nemesis's full disk in the next life.
/// - Every other fault shows under crash points.
pub fn revealing(fault: agentstore::fault::Fault) -> Nemeses {
    use agentstore::fault::Fault;
    if Fault::POWER_LOSS.contains(&fault) {
        Nemeses {
            points: false,
            syscall: false,
            powerloss: true,
        }
    } else if matches!(
        fault,
        Fault::FsyncRetry
            | Fault::KeepRefusedAppend
            | Fault::ReadErrorIsEof
            | Fault::FailedSyncAcksFollowers
            | Fault::FailedWriteCutsGroup
            | Fault::BlobRenameErrorIgnored
    ) {
        Nemeses {
            points: false,
            syscall: true,
            powerloss: false,
        }
    } else if fault == Fault::QuarantineRetriesAnyError {
        // A torn tail (a crash point's tear), then a full disk in the next
        // life (the syscall nemesis).
        Nemeses {
            points: true,
            syscall: true,
            powerloss: false,
        }
    } else {
        Nemeses::POINTS
    }
}

/// How many restarted lives a plan can crash after the first process.
pub const LATER_LIVES: usize = 2;

/// Which restarted lives a campaign traces and crashes (`--restarts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Restarts {
    /// Every restart of [`restarts`] through its recovery and the
    /// [`RESUMED_HITS`] after it, the deepest to its end, and a life 2.
    #[default]
    All,
    /// Only the deepest restart (to its end) and the life 2 after it.
    Deepest,
    /// No restarted life is crashed except by the first-life plans' own
    /// double crashes (`--trials`): first-life faults only.
    None,
}

impl fmt::Display for Restarts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Restarts::All => "all",
            Restarts::Deepest => "deepest",
            Restarts::None => "none",
        })
    }
}

impl FromStr for Restarts {
    type Err = BadNemesis;

    fn from_str(s: &str) -> Result<Restarts, BadNemesis> {
        match s {
            "all" => Ok(Restarts::All),
            "deepest" => Ok(Restarts::Deepest),
            "none" => Ok(Restarts::None),
            other => Err(BadNemesis::Restarts(other.to_string())),
        }
    }
}

/// One trial's nemesis schedule. `crash: None` is the crash-free trace run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Plan {
    /// How the first process (life 0) dies.
    pub crash: Option<Crash>,
    /// How the restarted lives 1 and 2 die: a kill, a tear or a syscall
    /// fault, counted in that life's own hits or syscalls (see
    /// [`Crash::allowed_later`]). `later[1]` only after `later[0]`, and
    /// both only after `crash`: the parser refuses anything else.
    pub later: [Option<Crash>; LATER_LIVES],
    /// The interleaving of the parallel appenders, by its seed (`,sched:S`;
    /// 0 is the fixed default schedule, written without a suffix). It
    /// names the trial; the schedule itself reaches the agent from its
    /// scenario source (`crate::campaign::interleavings`).
    pub sched: u64,
}

impl Plan {
    pub const NONE: Plan = Plan {
        crash: None,
        later: [None; LATER_LIVES],
        sched: 0,
    };

    pub fn kill(at: u64) -> Plan {
        Plan::first(Crash::Kill { at })
    }

    /// A plan that crashes only the first process.
    pub fn first(crash: Crash) -> Plan {
        Plan {
            crash: Some(crash),
            later: [None; LATER_LIVES],
            sched: 0,
        }
    }

    /// This plan under the interleaving seeded by `sched`.
    pub fn scheduled(self, sched: u64) -> Plan {
        Plan { sched, ..self }
    }

    /// This plan, and then life `self.crashed_lives()` dies of `crash` too.
    pub fn then(mut self, crash: Crash) -> Plan {
        let n = self.crashed_lives();
        assert!(
            (1..=LATER_LIVES).contains(&n) && crash.allowed_later(),
            "{self} cannot be followed by {crash:?}"
        );
        self.later[n - 1] = Some(crash);
        self
    }

    /// The crashes of the first `lives` lives only, under the default
    /// schedule: the key a traced restarted life is found by, within one
    /// scenario source (whose schedule is already fixed).
    pub fn prefix(&self, lives: usize) -> Plan {
        let mut p = Plan::NONE;
        for life in 0..lives.min(self.crashed_lives()) {
            let c = self.crash_of(life as u32);
            if life == 0 {
                p.crash = c;
            } else {
                p.later[life - 1] = c;
            }
        }
        p
    }

    /// The life a syscall fault of this plan lands in, and the fault's index.
    pub fn syscall_fault(&self) -> Option<(u32, u64, SysFault)> {
        (0..=LATER_LIVES as u32).find_map(|life| match self.crash_of(life) {
            Some(Crash::Syscall { at, fault }) => Some((life, at, fault)),
            _ => None,
        })
    }

    /// The crash planned for life `life`, if any.
    pub fn crash_of(&self, life: u32) -> Option<Crash> {
        match life {
            0 => self.crash,
            i => self.later.get(i as usize - 1).copied().flatten(),
        }
    }

    /// How many lives this plan crashes: the first one without a planned
    /// crash is `crashed_lives()` (the one a trace run of this plan traces).
    pub fn crashed_lives(&self) -> usize {
        (0..=LATER_LIVES as u32)
            .take_while(|&l| self.crash_of(l).is_some())
            .count()
    }

    /// The kind, for reports: `kill`, `tear`, `powercut`, `timer`,
    /// `double` (a restarted life crashes too),
    /// `sys-kill-before`, `sys-kill-after`, `sys-tear`, `sys-enospc`, `sys-eio`,
    /// `sys-full`, `sys-eio-read`, `sys-eintr-read`, `sys-short-read`, `none`.
    pub fn kind(&self) -> &'static str {
        match (self.crash, self.later[0]) {
            (None, _) => "none",
            (Some(_), Some(_)) => "double",
            (Some(Crash::Syscall { fault, .. }), None) => match fault {
                SysFault::KillBefore => "sys-kill-before",
                SysFault::KillAfter => "sys-kill-after",
                SysFault::Tear { .. } => "sys-tear",
                SysFault::Enospc => "sys-enospc",
                SysFault::Eio => "sys-eio",
                SysFault::DiskFull => "sys-full",
                SysFault::EioRead => "sys-eio-read",
                SysFault::EintrRead => "sys-eintr-read",
                SysFault::ShortRead { .. } => "sys-short-read",
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
        match self.crash_of(life) {
            Some(Crash::Kill { at }) => env.push(("AGENTCHAOS_KILL_AT", at.to_string())),
            Some(Crash::Tear { at, bytes }) => {
                env.push(("AGENTCHAOS_KILL_AT", at.to_string()));
                env.push(("AGENTCHAOS_TEAR", bytes.to_string()));
            }
            Some(Crash::PowerCut { at }) => {
                env.push(("AGENTCHAOS_KILL_AT", at.to_string()));
                env.push(("AGENTCHAOS_SYNC_LOG", sync_log.display().to_string()));
            }
            // The trace tells where the timer struck.
            Some(Crash::Timer { .. }) => {
                env.push(("AGENTCHAOS_TRACE", trace.display().to_string()))
            }
            Some(Crash::Syscall { .. }) | None => {}
        }
        env
    }
}

impl fmt::Display for Crash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Crash::Kill { at } => write!(f, "kill@{at}"),
            Crash::Tear { at, bytes } => write!(f, "tear@{at}:{bytes}"),
            Crash::PowerCut { at } => write!(f, "powercut@{at}"),
            Crash::Timer { micros } => write!(f, "timer@{micros}us"),
            Crash::Syscall { at, fault } => match fault {
                SysFault::KillBefore => write!(f, "sys-kill-before@{at}"),
                SysFault::KillAfter => write!(f, "sys-kill-after@{at}"),
                SysFault::Tear { bytes } => write!(f, "sys-tear@{at}:{bytes}"),
                SysFault::Enospc => write!(f, "sys-enospc@{at}"),
                SysFault::Eio => write!(f, "sys-eio@{at}"),
                SysFault::DiskFull => write!(f, "sys-full@{at}"),
                SysFault::EioRead => write!(f, "sys-eio-read@{at}"),
                SysFault::EintrRead => write!(f, "sys-eintr-read@{at}"),
                SysFault::ShortRead { bytes } => write!(f, "sys-short-read@{at}:{bytes}"),
            },
        }
    }
}

/// `none`, or the first life's crash, then `+CRASH` for each restarted life
/// that dies too: `kill@9+kill@2`, `kill@9+sys-eio@3`, `kill@9+kill@40+kill@5`;
/// then `,sched:S` under a schedule other than the default: `kill@9,sched:3`.
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.crash {
            None => write!(f, "none")?,
            Some(c) => write!(f, "{c}")?,
        }
        for c in self.later.iter().flatten() {
            write!(f, "+{c}")?;
        }
        if self.sched != 0 {
            write!(f, ",sched:{}", self.sched)?;
        }
        Ok(())
    }
}

impl FromStr for Crash {
    type Err = ();

    fn from_str(s: &str) -> Result<Crash, ()> {
        let num = |t: &str| t.parse::<u64>().map_err(|_| ());
        let (kind, arg) = s.split_once('@').ok_or(())?;
        let sys = |fault| -> Result<Crash, ()> {
            Ok(Crash::Syscall {
                at: num(arg)?,
                fault,
            })
        };
        let pair = |arg: &str| -> Result<(u64, u64), ()> {
            let (a, b) = arg.split_once(':').ok_or(())?;
            Ok((num(a)?, num(b)?))
        };
        Ok(match kind {
            "kill" => Crash::Kill { at: num(arg)? },
            "sys-kill-before" => sys(SysFault::KillBefore)?,
            "sys-kill-after" => sys(SysFault::KillAfter)?,
            "sys-enospc" => sys(SysFault::Enospc)?,
            "sys-eio" => sys(SysFault::Eio)?,
            "sys-full" => sys(SysFault::DiskFull)?,
            "sys-eio-read" => sys(SysFault::EioRead)?,
            "sys-eintr-read" => sys(SysFault::EintrRead)?,
            "sys-short-read" => {
                let (at, bytes) = pair(arg)?;
                Crash::Syscall {
                    at,
                    fault: SysFault::ShortRead { bytes },
                }
            }
            "sys-tear" => {
                let (at, bytes) = pair(arg)?;
                Crash::Syscall {
                    at,
                    fault: SysFault::Tear { bytes },
                }
            }
            "powercut" => Crash::PowerCut { at: num(arg)? },
            "tear" => {
                let (at, bytes) = pair(arg)?;
                Crash::Tear { at, bytes }
            }
            "timer" => Crash::Timer {
                micros: num(arg.strip_suffix("us").ok_or(())?)?,
            },
            _ => return Err(()),
        })
    }
}

impl FromStr for Plan {
    type Err = BadNemesis;

    fn from_str(s: &str) -> Result<Plan, BadNemesis> {
        let bad = || BadNemesis::Plan(s.to_string());
        let (crashes, sched) = match s.split_once(',') {
            None => (s, 0),
            Some((crashes, sched)) => {
                let seed = sched.strip_prefix("sched:").ok_or_else(bad)?;
                (crashes, seed.parse::<u64>().map_err(|_| bad())?)
            }
        };
        let mut parts = crashes.split('+');
        let first = parts.next().unwrap_or_default();
        let mut plan = if first == "none" {
            Plan::NONE
        } else {
            Plan::first(first.parse().map_err(|()| bad())?)
        };
        for part in parts {
            let crash: Crash = part.parse().map_err(|()| bad())?;
            let n = plan.crashed_lives();
            if n == 0 || n > LATER_LIVES || !crash.allowed_later() {
                return Err(bad());
            }
            plan = plan.then(crash);
        }
        Ok(plan.scheduled(sched))
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

/// The first lives' crashes after which a restarted life is traced and
/// crashed at every one of its points: one first kill per distinct log
/// length at which a recovery has work (the last hit with that log: the
/// most progress with it), so that each restart recovers something
/// different: an open run, a requested, started or committed call.
pub fn restarts(trace: &Trace) -> Vec<Plan> {
    let mut last_at_len: BTreeMap<usize, usize> = BTreeMap::new();
    for (h, &n) in trace.appends_before.iter().enumerate() {
        if trace.recovery_work[h] > 0 {
            last_at_len.insert(n, h);
        }
    }
    last_at_len
        .into_values()
        .map(|h| Plan::kill(h as u64))
        .collect()
}

/// The first life's tear after which a restarted life is traced and torn
/// again ([`LaterTrace::torn_again`]): everything but the last byte of the
/// last event-log write after which a recovery has work. The next open
/// cuts the fragment and appends its `tail_quarantined` at the offset of
/// the cut; tearing that write too makes the open after it cut at the same
/// offset again.
pub fn tear_restart(trace: &Trace) -> Option<Plan> {
    let h = trace
        .hits
        .iter()
        .enumerate()
        .rposition(|(h, name)| name == LOG_WRITE && trace.recovery_work[h] > 0)?;
    Some(Plan::first(Crash::Tear {
        at: h as u64,
        bytes: u64::from(u32::MAX),
    }))
}

/// Of [`restarts`], the one whose recovery has the most work (the latest
/// on a tie): where the syscall nemesis and the third life are traced.
pub fn deepest_restart(trace: &Trace) -> Option<Plan> {
    restarts(trace).into_iter().max_by_key(|p| {
        let h = p.crash.and_then(|c| c.hit()).unwrap_or_default();
        (trace.recovery_work[h as usize], h)
    })
}

/// A restarted life's crash-free trace: what life `before.crashed_lives()`
/// does (opens, recovers, finishes the scenario) after the crashes
/// `before` planned for the lives before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaterTrace {
    pub before: Plan,
    /// Its crash-point hits, in order.
    pub hits: Vec<String>,
    /// Its syscalls under the tracer (the syscall nemesis only).
    pub syscalls: Option<SyscallTrace>,
    /// Crash it at every hit to its end, not only through its recovery
    /// and the [`RESUMED_HITS`] after it.
    pub every_point: bool,
    /// A life after a torn write ([`tear_restart`]): only torn again, at
    /// each write through its recovery, the first of them the record of
    /// the cut, so that the next open cuts twice at one offset.
    pub torn_again: bool,
}

/// How many of a restarted life's first calls that may need space the
/// disk fills at ([`LaterTrace::disk_full_plans`]): its open's
/// (agentstore's: the lock, the torn tail's save, the record of the cut,
/// the recovery's marks).
pub const DISK_FULL_OPENING_CALLS: usize = 4;

/// How many hits after its recovery a restarted life is crashed at (unless
/// [`LaterTrace::every_point`]): enough for the reconciliation and re-run of
/// an uncertain call (its intent, effect, commit and result, each a write
/// and a sync). Past them the life does what the first life did.
pub const RESUMED_HITS: usize = 16;

impl LaterTrace {
    /// The traced life.
    pub fn life(&self) -> usize {
        self.before.crashed_lives()
    }

    /// The first hit after its last recovery hit (0 when it has none).
    fn recovered_at(&self) -> usize {
        self.hits
            .iter()
            .rposition(|h| h.contains("recover"))
            .map_or(0, |i| i + 1)
    }

    /// Where its own restart is killed to trace the life after it (a third
    /// life): halfway between its last recovery hit and its end, inside
    /// the scenario work it resumed.
    pub fn next_restart(&self) -> Option<Plan> {
        if self.life() > LATER_LIVES - 1 {
            return None;
        }
        let at = (self.recovered_at() + self.hits.len()) / 2;
        (at < self.hits.len()).then(|| self.before.then(Crash::Kill { at: at as u64 }))
    }

    /// The hits it is crashed at: all of them, or through its recovery and
    /// the [`RESUMED_HITS`] after it.
    pub fn span(&self) -> usize {
        if self.every_point {
            self.hits.len()
        } else {
            self.hits.len().min(self.recovered_at() + RESUMED_HITS)
        }
    }

    /// A kill at every hit and a tear at every write hit of its
    /// [`span`](Self::span); after a tear ([`Self::torn_again`]), only the
    /// tears of the writes before its recovery ends.
    pub fn point_plans(&self, rng: &mut Rng) -> Vec<Plan> {
        if self.torn_again {
            return (0..self.recovered_at())
                .filter(|&h| self.hits[h].ends_with(WRITE_SUFFIX))
                .map(|h| {
                    self.before.then(Crash::Tear {
                        at: h as u64,
                        bytes: tear_bytes(rng),
                    })
                })
                .collect();
        }
        let span = self.span();
        let mut plans: Vec<Plan> = (0..span as u64)
            .map(|at| self.before.then(Crash::Kill { at }))
            .collect();
        for (h, name) in self.hits[..span].iter().enumerate() {
            if name.ends_with(WRITE_SUFFIX) {
                plans.push(self.before.then(Crash::Tear {
                    at: h as u64,
                    bytes: tear_bytes(rng),
                }));
            }
        }
        plans
    }

    /// Every applicable syscall fault at every file-mutating syscall of
    /// this life; none for a torn-again life, whose syscalls are traced for
    /// the full-disk plans only.
    pub fn syscall_plans(&self, rng: &mut Rng) -> Vec<Plan> {
        self.faulted_syscalls()
            .iter()
            .flat_map(|s| s.exhaustive(rng))
            .filter_map(|p| p.crash)
            .map(|c| self.before.then(c))
            .collect()
    }

    /// Every applicable read fault at every read of the store's files in
    /// this life (its recovery's among them); none for a torn-again life.
    pub fn read_plans(&self, rng: &mut Rng) -> Vec<Plan> {
        self.faulted_syscalls()
            .iter()
            .flat_map(|s| s.read_plans(rng))
            .filter_map(|p| p.crash)
            .map(|c| self.before.then(c))
            .collect()
    }

    /// The disk fills at each of this life's first
    /// [`DISK_FULL_OPENING_CALLS`] calls that may need space, its open's,
    /// and stays full; a torn-again life's too (its open saves the torn
    /// bytes to a file it must create). Past its open a restarted life
    /// writes as the first life does.
    pub fn disk_full_plans(&self) -> Vec<Plan> {
        self.syscalls
            .iter()
            .flat_map(|s| s.fills_at().take(DISK_FULL_OPENING_CALLS))
            .map(|at| {
                self.before.then(Crash::Syscall {
                    at: at as u64,
                    fault: SysFault::DiskFull,
                })
            })
            .collect()
    }

    /// The syscall trace the single-call faults are planned on.
    fn faulted_syscalls(&self) -> Option<&SyscallTrace> {
        self.syscalls.as_ref().filter(|_| !self.torn_again)
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

/// Every plan `--exhaustive` runs in the first life: a kill at every hit;
/// a tear at every write hit; a power cut at every hit where the log has
/// unsynced bytes; and one timer kill per eight hits, for realism
/// (blackbox: wherever the agent happens to be). The restarted lives'
/// plans come from their own traces ([`LaterTrace`]).
pub fn exhaustive(trace: &Trace, rng: &mut Rng) -> Vec<Plan> {
    let mut plans: Vec<Plan> = (0..trace.len()).map(Plan::kill).collect();
    for (h, name) in trace.hits.iter().enumerate() {
        if name.ends_with(WRITE_SUFFIX) {
            plans.push(Plan::first(Crash::Tear {
                at: h as u64,
                bytes: tear_bytes(rng),
            }));
        }
    }
    for (h, &u) in trace.unsynced.iter().enumerate() {
        if u {
            plans.push(Plan::first(Crash::PowerCut { at: h as u64 }));
        }
    }
    for _ in 0..trace.len().div_ceil(8) {
        plans.push(Plan::first(timer(trace, rng)));
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
            let plan = Plan::first(crash);
            if (65..=84).contains(&roll) {
                plan.then(Crash::Kill {
                    at: second_kill(rng, trace.recovery_work[any as usize]),
                })
            } else {
                plan
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::syscall::{Call, SyscallEvent, Sysno};

    #[test]
    fn a_temporary_files_random_name_is_not_compared() {
        let strands = |n: &str| comparable_path(&format!("ROOT/s/messages/.strands_{n}.tmp"));
        assert_eq!(strands("wwtnge70"), "ROOT/s/messages/.*.tmp");
        assert_eq!(strands("wwtnge70"), strands("9i_t3070"));
        assert_eq!(comparable_path("tmpab12cd34"), "*");
        // Names that do not say they are temporary are compared whole.
        assert_ne!(
            comparable_path("ROOT/s/message_5.json"),
            comparable_path("ROOT/s/message_13.json")
        );
        assert_eq!(
            comparable_path("ROOT/sessions/s/events.jsonl"),
            "ROOT/sessions/s/events.jsonl"
        );
    }

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
            "sys-full@7",
            "sys-eio-read@2",
            "sys-eintr-read@0",
            "sys-short-read@4:9",
            "kill@9+sys-eio@3",
            "kill@9+sys-eio-read@3",
            "tear@13:4294967295+sys-full@3",
            "kill@9+kill@40+tear@5:12",
            "sys-tear@3:7+sys-kill-after@2",
            "none,sched:3",
            "kill@9+sys-eio@3,sched:18446744073709551615",
        ] {
            let p: Plan = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
        }
        let triple: Plan = "kill@9+kill@40+sys-eio@5".parse().unwrap();
        assert_eq!(triple.crashed_lives(), 3);
        assert_eq!(triple.prefix(2).to_string(), "kill@9+kill@40");
        assert_eq!(
            triple.syscall_fault(),
            Some((2, 5, SysFault::Eio)),
            "the fault lands in life 2"
        );
        assert_eq!(triple.kind(), "double");
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
            "sys-short-read@3",
            "sys-eio-read@3:1",
            "sys-zap@1",
            "kill@1+powercut@3",
            "kill@1+timer@5us",
            "kill@1+kill@2+kill@3+kill@4",
            "kill@1+",
            "kill@1,sched:",
            "kill@1,sched:x",
            "kill@1,seed:2",
            "kill@1,sched:2,sched:3",
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
        assert_eq!(
            plans.iter().filter(|p| p.kind() == "double").count(),
            0,
            "restarted lives are planned from their own traces"
        );
        assert_eq!(plans.iter().filter(|p| p.kind() == "timer").count(), 1);
        let sampled = sample(&t, 50, &mut Rng::new(2));
        assert_eq!(sampled.len(), 50);
        assert!(sampled.iter().all(|p| p.crash.is_some()));
    }

    #[test]
    fn a_life_after_a_tear_is_torn_again_only_through_its_recovery() {
        let log = "log.write\nlog.fdatasync\n10 /l\nagent.x\nlog.write\nlog.fdatasync\n20 /l\n";
        let t = Trace::from_log(log, &[10, 20], &[0, 1, 2], 5);
        let before = tear_restart(&t).expect("a log write with recovery work after it");
        assert_eq!(before.to_string(), "tear@3:4294967295");
        let hits = [
            "repair.truncate",
            "repair.fdatasync",
            "repair.record",
            "log.write",
            "log.fdatasync",
            "recovery.begin",
            "log.write",
            "log.fdatasync",
            "recovery.end",
            "agent.x",
            "log.write",
        ];
        let later = LaterTrace {
            before,
            hits: hits.iter().map(|h| h.to_string()).collect(),
            syscalls: None,
            every_point: false,
            torn_again: true,
        };
        let plans = later.point_plans(&mut Rng::new(1));
        let at: Vec<Option<Crash>> = plans.iter().map(|p| p.crash_of(1)).collect();
        assert_eq!(
            plans.len(),
            2,
            "the record of the cut and the recovery's mark: {plans:?}"
        );
        assert!(matches!(at[0], Some(Crash::Tear { at: 3, .. })), "{at:?}");
        assert!(matches!(at[1], Some(Crash::Tear { at: 6, .. })), "{at:?}");
        assert!(plans.iter().all(|p| p.crash == Some(before.crash.unwrap())));
    }

    #[test]
    fn restarted_lives_are_crashed_through_their_recovery_and_the_deepest_everywhere() {
        // Two appends; recovery has work after each.
        let log = "log.write\nlog.fdatasync\n10 /l\nagent.x\nlog.write\nlog.fdatasync\n20 /l\n";
        let t = Trace::from_log(log, &[10, 20], &[0, 1, 2], 5);
        let restarts = restarts(&t);
        assert_eq!(
            restarts.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
            ["kill@3", "kill@4"],
            "the last hit at each log length with recovery work"
        );
        assert_eq!(deepest_restart(&t), Some(Plan::kill(4)));
        let mut hits = vec!["recovery.begin".to_string(), "recovery.end".to_string()];
        hits.extend((0..40).map(|i| {
            if i % 2 == 0 {
                "log.write"
            } else {
                "log.fdatasync"
            }
            .to_string()
        }));
        let mut later = LaterTrace {
            before: Plan::kill(3),
            hits,
            syscalls: None,
            every_point: false,
            torn_again: false,
        };
        assert_eq!(later.span(), 2 + RESUMED_HITS);
        let plans = later.point_plans(&mut Rng::new(1));
        assert_eq!(plans.len(), 2 + RESUMED_HITS + RESUMED_HITS / 2);
        assert!(plans
            .iter()
            .all(|p| p.crashed_lives() == 2 && p.crash == Some(Crash::Kill { at: 3 })));
        later.every_point = true;
        assert_eq!(later.span(), 42);
        let third = later.next_restart().unwrap();
        assert_eq!(
            third.to_string(),
            "kill@3+kill@22",
            "halfway through its resumed work"
        );
        let life2 = LaterTrace {
            before: third,
            hits: later.hits.clone(),
            syscalls: None,
            every_point: true,
            torn_again: false,
        };
        assert_eq!(life2.next_restart(), None, "lives 1 and 2 only");
        assert!(life2
            .point_plans(&mut Rng::new(1))
            .iter()
            .all(|p| p.crashed_lives() == 3));
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
        let trace = SyscallTrace::of(&calls, &[], root);
        assert_eq!(trace.calls[2].text, "fdatasync(fd 4 = ROOT/s/events.jsonl)");
        assert_eq!(trace.calls[1].key, "pwrite64(fd 4 ROOT/s/events.jsonl)");
        let plans = trace.exhaustive(&mut Rng::new(1));
        let kinds: Vec<String> = plans.iter().map(|p| p.to_string()).collect();
        // mkdir: 2 kills, ENOSPC, EIO; the write: 2 kills, a tear, ENOSPC;
        // the sync: 2 kills, EIO. A write never fails with EIO, a sync never
        // with ENOSPC.
        assert_eq!(plans.len(), 11, "{kinds:?}");
        for k in [
            "sys-kill-before@0",
            "sys-kill-after@0",
            "sys-enospc@0",
            "sys-eio@0",
            "sys-enospc@1",
            "sys-eio@2",
        ] {
            assert!(kinds.contains(&k.to_string()), "{kinds:?}");
        }
        for k in ["sys-eio@1", "sys-enospc@2"] {
            assert!(!kinds.contains(&k.to_string()), "{kinds:?}");
        }
        // A disk fills at the mkdir and the write, not at the sync.
        let full: Vec<String> = trace
            .disk_full_plans()
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(full, ["sys-full@0", "sys-full@1"]);
        // A torn-again life: its open is filled, nothing else planned at its syscalls.
        let torn = LaterTrace {
            before: Plan::first(Crash::Tear { at: 9, bytes: 3 }),
            hits: Vec::new(),
            syscalls: Some(trace.clone()),
            every_point: false,
            torn_again: true,
        };
        assert!(torn.syscall_plans(&mut Rng::new(1)).is_empty());
        let full: Vec<String> = torn
            .disk_full_plans()
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(full, ["tear@9:3+sys-full@0", "tear@9:3+sys-full@1"]);
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
    fn read_plans_count_reads_apart_and_interrupt_each_call_and_file_once() {
        let root = Path::new("/r");
        let read = |index, path: &str, result| SyscallEvent {
            index,
            pid: 1,
            sysno: Sysno::Read,
            call: Call::Read {
                fd: 5,
                path: path.into(),
                len: 262144,
                offset: None,
            },
            result: Some(result),
        };
        let reads = [
            read(0, "/r/s/session.json", 247),
            read(1, "/r/s/events.jsonl", 1800),
            read(2, "/r/s/events.jsonl", 0),
            read(3, "/r/s/events.jsonl", -5),
        ];
        let trace = SyscallTrace::of(&[], &reads, root);
        assert!(trace.is_empty(), "reads are not file-mutating calls");
        assert_eq!(trace.reads[1].key, "read(fd 5 ROOT/s/events.jsonl)");
        let plans = trace.read_plans(&mut Rng::new(1));
        let kinds: Vec<String> = plans.iter().map(|p| p.kind().to_string()).collect();
        // session.json: EIO, short, EINTR; the log's first read: EIO,
        // short, EINTR; its end of file and its failed read: EIO only.
        assert_eq!(
            kinds,
            [
                "sys-eio-read",
                "sys-short-read",
                "sys-eintr-read",
                "sys-eio-read",
                "sys-short-read",
                "sys-eintr-read",
                "sys-eio-read",
                "sys-eio-read"
            ],
            "{plans:?}"
        );
        for p in &plans {
            let Some(Crash::Syscall { at, fault }) = p.crash else {
                panic!("{p}")
            };
            assert!(fault.is_read() && !fault.kills(), "{p}");
            let target = trace.target(fault, at).unwrap();
            assert!(fault.applies_to(target), "{p}");
            if let SysFault::ShortRead { bytes } = fault {
                assert!(bytes >= 1 && bytes <= target.read_got.unwrap() / 2, "{p}");
            }
            assert_eq!(p.to_string().parse::<Plan>().unwrap(), *p);
        }
        assert!(!SysFault::KillBefore.applies_to(&trace.reads[0]));
        assert!(!SysFault::EioRead.applies_to(&TracedCall::new(
            &SyscallEvent {
                index: 0,
                pid: 1,
                sysno: Sysno::Fsync,
                call: Call::Sync {
                    fd: 5,
                    path: "/r/s/events.jsonl".into(),
                    data_only: false
                },
                result: Some(0),
            },
            root
        )));
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
