//! Probes: checks of a capability that no crash trial can exercise, run on
//! the crash-free run's store once it is done.
//!
//! - `damage@FILE:OFFSET` (`damage_refusal`): a copy of the store's root
//!   with the low bit of one byte flipped, at seeded offsets in the middle
//!   half of each of its files, and, in a line-based file (one that ends
//!   with a newline), in the middle of its last complete line and the
//!   newline before that line.
//! - `fused@FILE:OFFSET` (`damage_refusal`): in a line-based file of at
//!   least two lines, the newline at OFFSET before the last line flipped
//!   and the last newline dropped: the last two lines fused into one bad
//!   piece that ends the file unterminated, as a torn write does, but with
//!   a whole valid line inside, which no torn write leaves.
//! - `zeros@FILE:OFFSET+LEN` (`damage_refusal`): the same, with LEN bytes
//!   from OFFSET overwritten with zeros, newlines kept: in a line-based
//!   file of at least two lines, over its last line alone (unless that
//!   line's newline sits at a [`SECTOR_BYTES`] boundary: zeros up to there
//!   are what a lost sector reads as), and in one of at least four lines,
//!   over the last three. Neither is what a torn write leaves (a torn
//!   write loses the end of one write; it does not flip a bit inside a
//!   whole line, nor zero whole lines and keep their newlines), and every
//!   event was acknowledged before the store closed, so a store that cuts
//!   them as a "torn tail" loses acknowledged events.
//! - `cut@LOG:LEN` and `cut-unreadable-snapshot@LOG:LEN`
//!   (`damage_refusal`, in-process: where the harness reads agentstore's
//!   `snapshot.json`): agentstore's log cut to LEN bytes, inside the last
//!   line the snapshot covers; the second also puts an empty directory in
//!   the snapshot's place, so reading it fails. The snapshot says that
//!   line was acknowledged, so it is no torn tail: a store that ignores the
//!   snapshot's word, or takes a snapshot it cannot read for none, cuts
//!   it. Judged as the damage probes are; where the snapshot is
//!   unreadable, an `io` refusal passes too.
//!
//!   Both pass when a fresh store opening the copy refuses with `damage` (at
//!   open or while reading) or serves exactly the undamaged events
//!   (redundancy is fine); anything else is a violation of
//!   `damage-refused`: a silent skip or cut, a changed event, or a refusal
//!   of another kind. Events are compared by content (type and fields,
//!   [`record_key`]), not by timestamps a store may regenerate.
//! - `ledger@OP` (`effect_ledger`): the crash-free run's events up to the
//!   first `effect_committed` of operation OP are replayed into a fresh
//!   session (the call is open, started and committed), then the same
//!   commit is appended again. It passes when that is refused with `rule`
//!   and nothing was written; otherwise `ledger-refuses-double-commit`.
//! - `ledger-retry@OP` (`effect_ledger`): the operation retried under a
//!   new call id, as agents do: the events up to just before the first
//!   commit, then a second call with the same operation id (approved when
//!   the first needed it) and its intent, then the first call's commit,
//!   then the second call's. A `rule` refusal anywhere in those four, with
//!   nothing written by it, passes; the second commit acknowledged is
//!   `ledger-refuses-double-commit` (a ledger keyed by call, not by
//!   operation, lets it through).
//! - `ledger-race@OP` (`effect_ledger`, in-process): the same retry with
//!   the two commits written into one group, the second before any sync
//!   covers the first ([`SecondCommit::RetryInOneGroup`]; a Batch write
//!   returns before its sync). A ledger that takes a commit in only once
//!   a sync covers it lets the second through.
//! - `rule-CASE@OP` (`effect_ledger`): the session rules that keep an
//!   effect from running twice ([`RuleCase`], PROTOCOL.md §3), on the
//!   scenario's first committed operation OP: the crash-free run's events
//!   replayed into a fresh session up to the situation the rule is about
//!   (with the store's own `recover` where the rule is about a restart,
//!   which must mark the call as the trials expect, else the probe is not
//!   carried out), then the one append the rule forbids. It passes when
//!   that is refused with `rule` and, after the session is closed and
//!   opened again, the log holds no more events than before it; an
//!   acknowledgement, another refusal kind or a grown log is
//!   `rule-refused`. One case is the history tree's, not the ledger's:
//!   `rule-parent-missing@OP` (`branches`), the call's `tool_call` hung
//!   under an entry that does not exist.
//! - `rule-compaction-off-leaf@ID`, `rule-compaction-kept-off-branch@ID`
//!   (`compaction`): the crash-free run's events replayed up to its
//!   compaction ID, then that compaction broken in one half of its rule
//!   ([`CompactionBreak`]; a compaction must extend the active leaf and
//!   keep an entry of the active branch, PROTOCOL.md §3): hung under the
//!   session's first user message instead of the active leaf, or kept
//!   from an entry off the active branch. Judged as the other rules are.
//! - `tail@LOG:lines-N`, `tail@LOG:zeros-N`, `tail@LOG:lost-sector`,
//!   `tail@LOG:misplaced-zeros`, `tail@LOG:unterminated-N` (`torn_tail_repair`,
//!   in-process: the bytes are agentstore's log format): [`Tail`] appended
//!   after the last line of agentstore's log, at the bounds of its tail
//!   rules as the harness states them ([`TAIL_MAX_LINES`],
//!   [`TAIL_MAX_ZERO_BYTES`]): a whole group of torn lines and one more,
//!   zeros to the end of the file as long as one line and a pre-allocation
//!   step (log format 2) and one byte more, a line's start with no newline
//!   as long as a line may be ([`TAIL_MAX_LINE_BYTES`]) and one byte more,
//!   and two torn lines the second
//!   of which lost one whole sector to zeros (what a power cut leaves of a
//!   group write: the zeros are judged at their offsets in the file), and
//!   one torn line with such a lost sector and a later run of zeros inside
//!   a sector (written zeros: damage).
//!   Within the rules it passes when the store opens and serves every
//!   acknowledged event unchanged (its own `tail_quarantined` after them
//!   allowed); past them, when it refuses with `damage`; anything else is
//!   `tail-rules`.
//! - `limit` (`durable_append`, every store): in a fresh session, the
//!   crash-free run's events up to its first user message, then assistant
//!   messages of growing size (doubling from [`LIMIT_FIRST_BYTES`] up to
//!   [`LIMIT_CAP_BYTES`] of text, then a bisection between the largest
//!   acknowledged and the smallest refused), so the last ones are as
//!   large as the store takes, to the byte. A store may refuse a size
//!   (any refusal kind); it must read back every message it acknowledged
//!   after the session is opened again: one lost, changed, or a session
//!   that no longer opens is `acked-durable` (a reader whose line limit is
//!   below its writer's: agentstore's `read-limit-below-write-limit`).
//! - `lock` (`writer_lock`): a copy of the crash-free run's store is opened
//!   for writing, and, while that first open holds it, opened again (a
//!   second `Session::open` in-process, a second adapter process). It
//!   passes when the second open is refused with `locked`; a second writer
//!   let in, or another refusal, is `second-writer-refused`.
//!
//! Each probe runs in a child process (`agentchaos probe`, hidden) that
//! opens the store exactly as the agent does, so `--store-fault` and
//! `--adapter` apply; the child reports what the store did as one JSON
//! line ([`ProbeReply`]) and the harness judges it here.
//!
//! Claims decide how a probe is judged, never which faults a store gets:
//! the probes that break bytes on disk (damage, fused, zeros, cut, tail:
//! [`Probe::is_fault`]) run on every store, and on one that does not claim
//! their capability they are judged by what every store owes
//! ([`judge_owed`]: a refusal of any kind, or every acknowledged event
//! served; serving fewer without a word is `acked-durable`). The others
//! (ledger, rules, lock) try a request that a promise forbids, and run
//! only where it was made; the limit's promise every store owes. This
//! module must never touch the crash-free run's own files: probes work on
//! copies and fresh sessions.
//!
//! Each family of probes has a file of its own, with its verdict and the
//! child's side of it: `damage.rs` (damage, fused, zeros, cut), `tail.rs`,
//! `ledger.rs`, `rules.rs`, `compaction.rs`, `limit.rs`, `lock.rs`.
//! `fault.rs` holds what the fault probes share, `plan.rs` which probes a
//! store gets, `name.rs` how `--plan probe:` names one, `spawn.rs` how the
//! harness runs the probe child, `child.rs` the child's side, and
//! `replay.rs` `agentchaos replay --plan probe:…`. This file holds the
//! types they share and the two entry points: [`run`] in the harness,
//! [`run_child`] in the child.

mod child;
mod compaction;
mod damage;
mod fault;
#[cfg(test)]
mod fixture;
mod ledger;
mod limit;
mod lock;
mod name;
mod plan;
mod replay;
mod rules;
mod spawn;
mod tail;

pub use child::{ChildArgs, ChildError};
pub use compaction::CompactionBreak;
pub use damage::judge_damage;
pub use fault::judge_owed;
pub use ledger::judge_ledger;
pub use limit::{judge_limit, LIMIT_CAP_BYTES, LIMIT_FIRST_BYTES};
pub use lock::judge_lock;
pub use name::{BadProbePlan, PLAN_PREFIX};
pub use plan::{agentstore_files, plan, AgentstoreFiles, DAMAGE_POSITIONS};
pub use replay::replay;
pub use rules::{judge_rule, RuleCase};
pub use tail::{
    judge_tail, Tail, TAIL_MAX_LINES, TAIL_MAX_LINE_BYTES, TAIL_MAX_ZERO_BYTES,
    TAIL_PIECE_MAX_BYTES,
};

use std::io::Write as _;
use std::path::{Path, PathBuf};

use agentchaos_protocol::event::{Record, Seq};
use serde::{Deserialize, Serialize};

use crate::campaign::config::Config;
use crate::campaign::prepare::Prepared;
use crate::check::{Invariant, Violation};
use crate::store::adapter::Capability;
use crate::store::{SessionSpec, StoreBackend};

use compaction::compaction_rule;
use damage::{cut, damage, Change};
use fault::child_damage;
use ledger::{child_ledger, ledger};
use limit::{child_limit, limit};
use lock::{child_lock, lock};
use rules::{child_rule, rule};
use tail::torn_tail;

/// The unit a disk writes atomically: a lost sector reads as zeros.
pub const SECTOR_BYTES: u64 = 512;

/// Where a ledger probe's second commit of an operation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecondCommit {
    /// The same call commits again (`ledger@OP`).
    SameCall,
    /// A retry under a new call id, committed once the first commit is
    /// acknowledged (`ledger-retry@OP`).
    Retry,
    /// A retry under a new call id whose commit is written into the same
    /// group as the first call's, before either is acknowledged
    /// (`ledger-race@OP`): two appenders committing one operation at once.
    /// In-process only: the adapter protocol acknowledges each write
    /// before the harness sends the next, so through an adapter this is
    /// `Retry`.
    RetryInOneGroup,
}

/// One probe, as `agentchaos replay --plan probe:<this>` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Flip the low bit of the byte at `offset` of `file` (relative to the store's root).
    Damage { file: PathBuf, offset: u64 },
    /// Flip the low bit of the newline at `newline` of `file`, the one
    /// before its last line, and drop the file's last byte (the last
    /// line's newline): two complete lines fused into one bad piece that
    /// ends the file like a torn write but holds a whole valid line, which
    /// no torn write leaves.
    Fused { file: PathBuf, newline: u64 },
    /// Overwrite `len` bytes of `file` from `offset` with zeros, keeping newlines.
    Zeros {
        file: PathBuf,
        offset: u64,
        len: u64,
    },
    /// Commit operation `operation` a second time, from where `second` says.
    Ledger {
        operation: String,
        second: SecondCommit,
    },
    /// Append what the session rule `case` forbids, in a fresh session
    /// replaying the crash-free run up to the commit of `operation`.
    Rule { case: RuleCase, operation: String },
    /// Append the crash-free run's compaction `compaction` (an event id)
    /// with one half of its rule broken, in a fresh session replaying the
    /// run up to it.
    CompactionRule {
        compaction: String,
        breaks: CompactionBreak,
    },
    /// Append messages up to the largest the store takes, reopen, read
    /// every acknowledged one back.
    Limit,
    /// Open the session a second time while a first open holds it.
    Lock,
    /// Append `tail` to `file`, agentstore's log, after its last
    /// acknowledged line: a torn tail at or just past the bounds of
    /// agentstore's tail rules.
    Tail { file: PathBuf, tail: Tail },
    /// Cut `file`, agentstore's log, to `len` bytes, inside the last line
    /// its `snapshot.json` covers; with `unreadable_snapshot`, an empty
    /// directory takes `snapshot.json`'s place, so reading it fails.
    Cut {
        file: PathBuf,
        len: u64,
        unreadable_snapshot: bool,
    },
}

impl Probe {
    /// The capability the probe is evidence for.
    pub fn capability(&self) -> Capability {
        match self {
            Probe::Damage { .. }
            | Probe::Fused { .. }
            | Probe::Zeros { .. }
            | Probe::Cut { .. } => Capability::DamageRefusal,
            Probe::Ledger { .. } => Capability::EffectLedger,
            Probe::Rule { case, .. } => case.capability(),
            Probe::CompactionRule { .. } => Capability::Compaction,
            Probe::Lock => Capability::WriterLock,
            Probe::Limit => Capability::DurableAppend,
            Probe::Tail { .. } => Capability::TornTailRepair,
        }
    }

    /// Whether it breaks bytes on disk (damage, a cut, a torn tail): a
    /// fault, applied to every store whatever it claims. The others try a
    /// request a promise forbids, and have nothing to judge where nothing
    /// was promised.
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            Probe::Damage { .. }
                | Probe::Fused { .. }
                | Probe::Zeros { .. }
                | Probe::Cut { .. }
                | Probe::Tail { .. }
        )
    }

    /// The capability whose promise its verdict holds a store claiming
    /// `claimed` to: its own when claimed; for a fault on a store that does
    /// not claim it, `durable_append`, which every store owes (no
    /// acknowledged event lost without a refusal, [`judge_owed`]).
    pub fn judged_by(&self, claimed: &[Capability]) -> Capability {
        let own = self.capability();
        if self.is_fault() && !claimed.contains(&own) {
            Capability::DurableAppend
        } else {
            own
        }
    }

    /// The capability a violation `v` this probe found is charged to: a
    /// setup step's, whatever the probe tests (the session it set up lost
    /// what the store acknowledged, `acked-durable`: `durable_append`; a
    /// recovery that did not mark its call: `orphan_marking`); else the one
    /// its verdict holds the store to ([`Probe::judged_by`]).
    pub fn charged(&self, v: &Violation, claimed: &[Capability]) -> Capability {
        match v.invariant {
            Invariant::AckedDurable => Capability::DurableAppend,
            Invariant::OrphanMarkedUncertain => Capability::OrphanMarking,
            _ => self.judged_by(claimed),
        }
    }

    /// The `--plan` value that replays it.
    pub fn plan(&self) -> String {
        format!("{PLAN_PREFIX}{self}")
    }
}

/// The byte ranges of the newline-terminated lines of `bytes`, newline
/// included; none unless the whole file is lines (it ends with a newline).
fn complete_lines(bytes: &[u8]) -> Vec<std::ops::Range<u64>> {
    if bytes.last() != Some(&b'\n') {
        return Vec::new();
    }
    let mut start = 0u64;
    let mut out = Vec::new();
    for (i, _) in bytes.iter().enumerate().filter(|(_, b)| **b == b'\n') {
        let end = i as u64 + 1;
        out.push(start..end);
        start = end;
    }
    out
}

/// What the store did, as the child reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
pub enum ProbeReply {
    /// The store refused: `at` names the operation (open, events, append),
    /// `kind` the refusal kind (a protocol `ErrorKind` name).
    Refused {
        at: String,
        kind: String,
        message: String,
        /// Ledger: how many events the session held before the refused
        /// append, and after it.
        #[serde(default)]
        events_before: Option<u64>,
        #[serde(default)]
        events_after: Option<u64>,
    },
    /// Damage: the store opened and served these records ([`record_key`]),
    /// with their type names.
    Served {
        records: Vec<String>,
        #[serde(default)]
        types: Vec<String>,
        /// Damage: the blobs it served changed (each described), where a
        /// `damage` refusal was owed.
        #[serde(default)]
        wrong_blobs: Vec<String>,
    },
    /// Damage: the store died on the damaged copy (a panic in-process, an
    /// adapter that broke the protocol or exited) instead of refusing it.
    Crashed { at: String, message: String },
    /// Ledger: the second commit was acknowledged at this seq.
    Accepted { seq: Seq },
    /// Ledger: the store refused the crash-free run's own events before
    /// the second commit, so the probe could not set up its situation.
    NotReplayed { message: String },
    /// Rule: what the store acknowledged in the probe's fresh session was
    /// gone before the rule could be judged: `at` says where (the session
    /// opened again after the refused append, or the events it served
    /// before the append the rule forbids), `acknowledged` how many events
    /// it had acknowledged, `found` what the store did instead.
    SessionLost {
        at: String,
        acknowledged: u64,
        found: String,
    },
    /// Rule: the store's `recover` did not mark the probe's call with the
    /// phase the rule's situation needs; `found` says how it marked it.
    NotMarked {
        call_id: String,
        phase: agentchaos_protocol::event::Phase,
        found: String,
    },
    /// Lock: the second open succeeded while the first held the session.
    SecondOpened,
    /// Limit: the largest message text the store acknowledged (bytes), the
    /// smallest it refused (none up to [`LIMIT_CAP_BYTES`]), how many it
    /// acknowledged, and those not read back as written after reopening.
    Limit {
        largest: u64,
        smallest_refused: Option<u64>,
        acknowledged: usize,
        not_read_back: Vec<String>,
    },
}

/// A record as the damage probe compares it: seq, id and the event's
/// content (its fingerprint), not the timestamp, which a store may
/// regenerate when it serves an event.
pub fn record_key(r: &Record) -> String {
    let body = match r.event() {
        Some(e) => crate::agent::wire::fingerprint(e),
        None => format!("ignorable {}", r.body.type_name()),
    };
    format!("{} {} {body}", r.seq, r.id)
}

/// Why a probe could not be carried out, and whose fault that is: a
/// campaign decides its exit code from the variant, never from the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The store under test failed the probe before its check could judge
    /// anything: its adapter broke the protocol or died, or it refused,
    /// for a reason other than I/O, what the probe asks of any store
    /// (opening a fresh session, replaying the crash-free run's own
    /// events, recovering, serving its events). The store's failure (exit 1).
    #[error("the store under test failed: {0}")]
    Store(String),
    /// The harness could not carry the probe out: its scratch directory,
    /// the probe child or its files, the store processes it forks, a reply
    /// it cannot read, an I/O refusal (the machine's). Exit 3.
    #[error("{0}")]
    Harness(String),
}

impl ProbeError {
    /// Whether the store under test is to blame ([`ProbeError::Store`]).
    pub fn store_fault(&self) -> bool {
        matches!(self, ProbeError::Store(_))
    }
}

/// A probe replay that could not be carried out, blamed as the probe was.
impl From<ProbeError> for crate::campaign::trial::TrialError {
    fn from(e: ProbeError) -> Self {
        crate::campaign::trial::TrialError {
            store_fault: e.store_fault(),
            message: e.to_string(),
        }
    }
}

/// What a probe found.
#[derive(Debug, Clone)]
pub struct ProbeOutcome {
    pub probe: Probe,
    /// What the store did, in words.
    pub told: String,
    pub violations: Vec<Violation>,
    /// The probe could not be carried out (not a verdict on the store's
    /// promise; [`ProbeError::Store`] fails the run all the same).
    pub error: Option<ProbeError>,
    /// Not reached: the probe stopped short of the situation it tests (not
    /// evidence, not an error; `told` says why). The store refused to
    /// replay its own crash-free events (the trials judge that log), or a
    /// setup step broke another promise, charged to it in `violations`
    /// ([`Probe::charged`]): the session lost what the store acknowledged in
    /// it, a recovery did not mark the probe's call.
    pub skipped: bool,
}

/// What running probes needs from the campaign.
#[derive(Debug, Clone, Copy)]
pub struct ProbeSetup<'a> {
    pub backend: &'a dyn StoreBackend,
    /// The `agentchaos` binary (its hidden `probe` subcommand is the child).
    pub agent_exe: &'a Path,
    pub store_fault: Option<&'a str>,
    /// The crash-free run's session, finished and closed.
    pub spec: &'a SessionSpec,
    /// The crash-free run's events.
    pub reference: &'a [Record],
    /// A probe child that runs this long is hung: killed, the store's failure.
    pub hang_timeout: std::time::Duration,
    /// What the store claims: decides how a fault probe is judged
    /// ([`Probe::judged_by`]).
    pub claimed: &'a [Capability],
}

/// How probes reach the crash-free run's store, left in `dir` by
/// [`crate::campaign::prepare::prepare_keeping`].
pub fn probe_setup<'a>(
    cfg: &'a Config<'_>,
    prepared: &'a Prepared,
    spec: &'a crate::store::SessionSpec,
    claimed: &'a [Capability],
) -> ProbeSetup<'a> {
    ProbeSetup {
        claimed,
        backend: cfg.backend,
        agent_exe: &cfg.agent_exe,
        store_fault: cfg.store_fault.as_deref(),
        spec,
        reference: &prepared.reference.records,
        hang_timeout: cfg.hang_timeout,
    }
}

/// Runs one probe in `dir` (a scratch directory it creates; the caller removes it).
pub fn run(setup: &ProbeSetup<'_>, probe: &Probe, dir: &Path) -> ProbeOutcome {
    let result = std::fs::create_dir_all(dir)
        .map_err(|e| ProbeError::Harness(format!("cannot create {}: {e}", dir.display())))
        .and_then(|()| match probe {
            Probe::Damage { file, offset } => damage(setup, file, &Change::Flip(*offset), dir),
            Probe::Fused { file, newline } => damage(setup, file, &Change::Fuse(*newline), dir),
            Probe::Zeros { file, offset, len } => {
                damage(setup, file, &Change::Zeros(*offset, *len), dir)
            }
            Probe::Ledger { operation, second } => ledger(setup, operation, *second, dir),
            Probe::Rule { case, operation } => rule(setup, *case, operation, dir),
            Probe::CompactionRule { compaction, breaks } => {
                compaction_rule(setup, compaction, *breaks, dir)
            }
            Probe::Lock => lock(setup, dir),
            Probe::Limit => limit(setup, dir),
            Probe::Tail { file, tail } => torn_tail(setup, file, *tail, dir),
            Probe::Cut {
                file,
                len,
                unreadable_snapshot,
            } => cut(setup, file, *len, *unreadable_snapshot, dir),
        });
    match result {
        Ok((told, violations, skipped)) => ProbeOutcome {
            probe: probe.clone(),
            skipped,
            told,
            violations,
            error: None,
        },
        Err(e) => ProbeOutcome {
            probe: probe.clone(),
            told: String::new(),
            violations: Vec::new(),
            error: Some(e),
            skipped: false,
        },
    }
}

/// What the store did, in words.
fn tell(reply: &ProbeReply) -> String {
    match reply {
        ProbeReply::NotReplayed { message } => {
            format!("not carried out: the store did not reach the probe's situation: {message}")
        }
        ProbeReply::SessionLost {
            at,
            acknowledged,
            found,
        } => format!(
            "not reached: the session lost the {acknowledged} event(s) the store acknowledged in it, {at}: {found}"
        ),
        ProbeReply::NotMarked {
            call_id,
            phase,
            found,
        } => format!(
            "not reached: recovery marked call {call_id} {found}, not {} as the rule's situation needs",
            crate::model::phase_name(*phase)
        ),
        ProbeReply::Refused {
            at, kind, message, ..
        } => format!("{at} refused with `{kind}`: {message}"),
        ProbeReply::Served { records, .. } => {
            format!("it opened and served {} event(s)", records.len())
        }
        ProbeReply::Accepted { seq } => format!("it acknowledged the probe's append at seq {seq}"),
        ProbeReply::Crashed { at, message } => format!("the store died at {at}: {message}"),
        ProbeReply::SecondOpened => {
            "a second open succeeded while the first held the session".to_string()
        }
        ProbeReply::Limit {
            largest,
            smallest_refused,
            acknowledged,
            not_read_back,
        } => format!(
            "it acknowledged {acknowledged} message(s), the largest of {largest} bytes of text ({}), and after reopening served {} of them back as written",
            smallest_refused.map_or_else(
                || format!("none refused up to {LIMIT_CAP_BYTES}"),
                |n| format!("{n} refused")
            ),
            acknowledged - not_read_back.len()
        ),
    }
}

/// The child (`agentchaos probe`): drives the store, prints one [`ProbeReply`] line.
pub fn run_child(args: &ChildArgs) -> Result<(), ProbeError> {
    let reply = match args.what.as_str() {
        "damage" => child_damage(args),
        "ledger" => child_ledger(args),
        "rule" => child_rule(args),
        "lock" => child_lock(args),
        "limit" => child_limit(args),
        other => {
            return Err(ProbeError::Harness(format!(
                "--what {other:?} is not damage, ledger, rule, lock or limit"
            )))
        }
    }?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{}",
        serde_json::to_string(&reply).expect("a reply serializes")
    )
    .and_then(|()| out.flush())
    .map_err(|e| ProbeError::Harness(format!("cannot write the reply: {e}")))
}
