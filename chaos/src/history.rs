//! A trial's history (Jepsen's history): what the harness observed of each
//! life of the agent. The child's acks and recovery reports come from its
//! pipe; the disk's content from [`Observation`]s taken while the child was
//! dead or paused; the syscall record from the tracer. [`crate::campaign::trial`]
//! writes it, [`crate::check`] judges it. This module holds facts only: it
//! must never run a process or judge what it holds.

use std::collections::BTreeMap;
use std::path::PathBuf;

use agentchaos_protocol::event::Seq;

use crate::agent::wire::{ReportedCall, ServedContext};
use crate::agent::world::Application;
use crate::nemesis::powerloss::OpLog;
use crate::nemesis::syscall::{FaultReport, SyscallEvent};
use crate::store::Observation;

/// One event the agent appended (reported before the append), and the
/// seq the store acknowledged it at, if it did before the process died.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    pub type_name: String,
    pub fingerprint: String,
    /// The byte offset of its announcement line in the agent's stdout.
    pub line: u64,
    pub acked: Option<Seq>,
    /// The store refused it with an I/O error (the agent may have retried it
    /// as the next append).
    pub refused: bool,
}

/// A line of the agent's pipe about a sync of an in-process store's log,
/// or an ack, in the order the pipe showed them (see
/// [`crate::agent::schedule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncLine {
    /// A sync succeeded: every event below this seq durable, by the store's account.
    Synced(Seq),
    SyncFailed,
    /// The ack of `writes[write]` at `seq`.
    Acked {
        write: usize,
        seq: Seq,
    },
}

/// What the first recovery of a restarted agent reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    pub appended: u64,
    pub interrupted: Vec<String>,
    pub uncertain: Vec<ReportedCall>,
    pub block: Option<String>,
    /// The contexts it served after the recovery (unbudgeted first).
    pub contexts: Vec<ServedContext>,
    /// The store's projection as it resumed (from its snapshot, if it used one).
    pub projection: serde_json::Value,
}

/// How an agent process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifeEnd {
    Killed,
    Exited(i32),
    /// Another signal than SIGKILL.
    Signaled(i32),
    /// The watchdog killed it.
    Hung,
}

/// One agent process.
#[derive(Debug, Clone)]
pub struct Life {
    pub index: u32,
    /// The hit it was to be killed at, if any.
    pub kill_at: Option<u64>,
    pub writes: Vec<Append>,
    pub recovered: Option<RecoveryReport>,
    /// The disk after the first recovery (the agent paused).
    pub after_recovery: Option<Observation>,
    /// What the second recovery (after close and reopen) appended, by its own account.
    pub recovered_again: Option<u64>,
    /// The disk after the second recovery.
    pub after_second_recovery: Option<Observation>,
    pub done: bool,
    pub end: LifeEnd,
    /// The last line the agent wrote to stderr.
    pub stderr: String,
    /// The syncs an in-process store reported and the acks among them, in
    /// pipe order (only acks when the store reported no sync).
    pub syncs: Vec<SyncLine>,
    /// Crash-point hits, when traced.
    pub trace: Option<String>,
    /// What the syscall tracer saw, when this process ran under it.
    pub syscalls: Option<SyscallLife>,
    pub micros: u64,
}

impl Life {
    /// Life `index` as it starts (to be killed at hit `kill_at`, if any):
    /// nothing written, recovered or observed yet; its end is filled in
    /// when it ends.
    pub fn started(index: u32, kill_at: Option<u64>) -> Life {
        Life {
            index,
            kill_at,
            writes: Vec::new(),
            recovered: None,
            after_recovery: None,
            recovered_again: None,
            after_second_recovery: None,
            done: false,
            end: LifeEnd::Exited(0),
            stderr: String::new(),
            syncs: Vec::new(),
            trace: None,
            syscalls: None,
            micros: 0,
        }
    }
}

/// A process tree that ran under the syscall tracer.
#[derive(Debug, Clone)]
pub struct SyscallLife {
    /// The canonical store root (the trace root; `ROOT` in descriptions).
    pub root: PathBuf,
    /// Every counted syscall, in order.
    pub events: Vec<SyscallEvent>,
    /// Every counted read, in order, when reads were traced.
    pub reads: Vec<SyscallEvent>,
    /// What became of the planned fault.
    pub fault: Option<FaultReport>,
    /// Injected errors only: the file operations, with the agent's stdout
    /// writes placed between them.
    pub oplog: Option<OpLog>,
    /// Each ack the agent reported: its index in [`Life::writes`] and the
    /// byte offset of its line in the agent's stdout.
    pub acks: Vec<(usize, u64)>,
    /// How many times the tracer stopped the life's processes.
    pub stops: u64,
}

/// Which kind of run a trial is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// A trial of a plan.
    Trial,
    /// The crash-free run that records the crash-point trace.
    TracePoints,
    /// The crash-free run whose first process runs under the syscall
    /// tracer, to enumerate its syscalls.
    TraceSyscalls,
}

/// Why a trial could not be carried out as planned, and whose fault that is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TrialError {
    pub message: String,
    /// The store under test is to blame, a finding about it (exit 1): it
    /// failed the harness's own observation of it
    /// ([`crate::store::StoreError::store_fault`]: a broken adapter
    /// protocol, a refusal that is not I/O), or a life hung in it.
    /// Otherwise the harness could not carry the trial out (exit 3).
    pub store_fault: bool,
}

/// A failure of the harness itself.
impl From<String> for TrialError {
    fn from(message: String) -> TrialError {
        TrialError {
            message,
            store_fault: false,
        }
    }
}

impl From<TrialError> for String {
    fn from(e: TrialError) -> String {
        e.message
    }
}

/// Everything a trial observed.
#[derive(Debug, Clone)]
pub struct History {
    pub lives: Vec<Life>,
    /// `after_kill[i]`: the disk after life `i` was killed (and the power cut, if any).
    pub after_kill: Vec<Observation>,
    /// What the power cut removed: (file, length before, length after).
    pub power_cut: Vec<(PathBuf, u64, u64)>,
    pub final_obs: Observation,
    pub world: Vec<Application>,
    pub workspace: BTreeMap<String, Vec<u8>>,
    /// A trial that could not be carried out as planned (not a violation;
    /// the store's fault or the harness's).
    pub error: Option<TrialError>,
}

impl History {
    /// The last life, which should have finished the scenario.
    pub fn last(&self) -> &Life {
        self.lives.last().expect("a trial has at least one life")
    }
}

/// One thing the many-workers campaign observed, in the order it observed
/// it. The harness sends one command at a time and waits for its reply,
/// so this order is the order in which the store served the requests.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerEvent {
    /// `worker` got the lease of `session`; `records` are the events the
    /// store served right after the grant (its recovery included).
    Granted {
        worker: String,
        session: String,
        grant: agentchaos_protocol::message::LeaseGrant,
        records: Vec<agentchaos_protocol::event::Record>,
    },
    /// `worker`'s reply to a step or renewal of `session`.
    Replied {
        worker: String,
        session: String,
        reply: crate::agent::worker::WorkerReply,
    },
    Paused {
        worker: String,
    },
    Resumed {
        worker: String,
    },
    Killed {
        worker: String,
    },
    /// `worker` (killed just before) was started again under the same id:
    /// a new process, a new holder.
    Restarted {
        worker: String,
    },
    /// The database server was crashed (`model`: a
    /// [`crate::nemesis::database::DatabaseCrash`]'s name) and restarted.
    DatabaseCrashed {
        model: String,
    },
    /// `worker`'s link to the database was cut.
    Partitioned {
        worker: String,
    },
    /// `worker` was sent a write of `session` while its link was cut: its
    /// reply comes after the heal.
    InFlight {
        worker: String,
        session: String,
    },
    /// `worker`'s link to the database was healed.
    Healed {
        worker: String,
    },
    /// The harness stopped driving `session` before its workload was
    /// done because of `strike` (a plan element, `db-crash:kill@4`): `why`.
    GaveUp {
        session: String,
        strike: String,
        why: String,
    },
    /// `session`'s log as the store served it after the trial, every
    /// worker gone and its last lease expired.
    Final {
        session: String,
        log: FinalLog,
    },
}

/// What the store served of a session after a many-workers trial.
#[derive(Debug, Clone, PartialEq)]
pub enum FinalLog {
    Served(Vec<agentchaos_protocol::event::Record>),
    /// The store has no such session any more (`not_found`).
    Missing,
    /// The store refused to open or read it: its message.
    Unreadable(String),
}
