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

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use agentchaos_protocol::event::{event_id, BlobRef, Event, Record, Seq};
use agentstore::{LogPosition, Scanner, Session, SessionId, SessionOptions, SessionPaths};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::campaign::config::Config;
use crate::campaign::prepare::Prepared;
use crate::check::{Invariant, Violation};
use crate::model::describe_record;
use crate::scenario::rng::Rng;
use crate::store::adapter::{AdapterBackend, Capability, Client, ErrorKind, OpenArgs};
use crate::store::{blob_problem, referenced_blobs, SessionSpec, StoreBackend};

/// Bytes damaged per file, one probe each.
pub const DAMAGE_POSITIONS: usize = 3;

/// The unit a disk writes atomically: a lost sector reads as zeros.
pub const SECTOR_BYTES: u64 = 512;

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
    /// Commit operation `operation` a second time: from the same call, or
    /// from `another_call` opened with the same operation id.
    Ledger {
        operation: String,
        another_call: bool,
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

/// What the probes know of agentstore's files, read in-process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentstoreFiles {
    /// The session's log, relative to the store's root.
    pub log: PathBuf,
    /// The byte offset of the log its `snapshot.json` covers (its JSON's
    /// `offset`), if one is readable.
    pub covered: Option<u64>,
}

/// agentstore's files of `spec`'s session (`None` for a session name
/// agentstore refuses).
pub fn agentstore_files(spec: &SessionSpec) -> Option<AgentstoreFiles> {
    let id = SessionId::new(&spec.session).ok()?;
    let paths = SessionPaths::new(&spec.root, &id);
    let log = paths.events().strip_prefix(&spec.root).ok()?.to_path_buf();
    // Read here, not through agentstore's reader: a store that mistakes
    // its snapshot for none must not hide the probes that catch it.
    let covered = std::fs::read(paths.snapshot()).ok().and_then(|bytes| {
        let snapshot: Value = serde_json::from_slice(bytes.strip_suffix(b"\n")?).ok()?;
        snapshot.get("offset")?.as_u64()
    });
    Some(AgentstoreFiles { log, covered })
}

/// What a tail probe appends to agentstore's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// This many newline-terminated pieces of the log's last line, each a
    /// prefix of it of 1 to [`TAIL_PIECE_MAX_BYTES`] bytes, the lengths
    /// taken in turn: lines cut short inside their checksum header, what a
    /// weak disk may leave of a group write.
    Lines(u64),
    /// This many zero bytes and no newline: a write lost after it grew the
    /// file.
    Zeros(u64),
    /// Two newline-terminated pieces of a group write that lost sectors:
    /// one whose bytes up to the next [`SECTOR_BYTES`] boundary of the file
    /// are zeros (the end of a lost sector, from the segment's start), then
    /// one holding one whole sector of zeros. Within the rules only if the
    /// store judges the zeros at their own offsets in the file.
    LostSector,
    /// One torn line that lost its first sector (zeros from the segment's
    /// start to the next [`SECTOR_BYTES`] boundary, as in [`Tail::LostSector`]),
    /// with a second, short run of zeros later in it that starts and stops
    /// inside a sector: written zeros, which no lost write leaves. Damage.
    MisplacedZeros,
    /// This many bytes of a line's start (its header, then `x`s) and no
    /// newline, to the end of the file: a torn write of a line as long as
    /// the limit ([`TAIL_MAX_LINE_BYTES`]), or one byte longer, which no
    /// write leaves.
    Unterminated(u64),
}

/// agentstore's tail rules (`store/src/scan.rs`, its module doc), as the
/// harness states them for its tail probes: one write leaves at most this
/// many torn lines (one `Batch` group)…
pub const TAIL_MAX_LINES: u64 = 64;
/// …and a piece with no newline this long that does not end the file is
/// damage (one line's limit, 4 MiB).
pub const TAIL_MAX_LINE_BYTES: u64 = 4 * 1024 * 1024;
/// …and zeros to the end of the file longer than this are damage (log
/// format 2: one lost line of 4 MiB, then a pre-allocated step of 1 MiB).
pub const TAIL_MAX_ZERO_BYTES: u64 = TAIL_MAX_LINE_BYTES + 1024 * 1024;
/// The longest prefix of the log's last line a [`Tail::Lines`] piece
/// keeps: a line's whole `{"crc":"XXXXXXXX",` header and nothing of its
/// body, so no piece is a well-formed line with a wrong checksum (which
/// the rules call damage). Every length from one byte up is tried, each
/// cut inside the header at another place.
pub const TAIL_PIECE_MAX_BYTES: usize = 18;

impl Tail {
    /// Whether the rules say one write could leave it: a torn tail the
    /// store cuts, not damage it refuses.
    pub fn within_rules(self) -> bool {
        match self {
            Tail::Lines(n) => n <= TAIL_MAX_LINES,
            Tail::Zeros(n) => n <= TAIL_MAX_ZERO_BYTES,
            Tail::LostSector => true,
            Tail::MisplacedZeros => false,
            Tail::Unterminated(n) => n <= TAIL_MAX_LINE_BYTES,
        }
    }

    /// Appends it to `bytes`, a log ending with a complete line; says what it appended.
    fn append(self, file: &Path, bytes: &mut Vec<u8>) -> Result<String, ProbeError> {
        let at = bytes.len();
        match self {
            Tail::Lines(n) => {
                let last = complete_lines(bytes).pop().ok_or_else(|| {
                    ProbeError::Harness(format!(
                        "{} does not end with a complete line",
                        file.display()
                    ))
                })?;
                let line = bytes[last.start as usize..last.end as usize - 1].to_vec();
                let longest = line.len().min(TAIL_PIECE_MAX_BYTES);
                for k in 0..n as usize {
                    bytes.extend_from_slice(&line[..1 + k % longest]);
                    bytes.push(b'\n');
                }
                Ok(format!(
                    "{}, from byte offset {at}: {n} line(s) appended, the first 1, 2, … {longest} byte(s) of its last line in turn",
                    file.display(),
                ))
            }
            Tail::Zeros(n) => {
                bytes.resize(at + n as usize, 0);
                Ok(format!(
                    "{}, from byte offset {at}: {n} zero bytes appended, no newline",
                    file.display()
                ))
            }
            Tail::Unterminated(n) => {
                // A well-formed header, as a torn write's own: the piece is
                // torn because it has no newline, whatever its checksum says.
                let header = b"{\"crc\":\"00000000\",";
                bytes.extend_from_slice(&header[..header.len().min(n as usize)]);
                bytes.resize(at + n as usize, b'x');
                Ok(format!(
                    "{}, from byte offset {at}: {n} bytes of a line's start, no newline, to the end of the file",
                    file.display()
                ))
            }
            Tail::MisplacedZeros => {
                // A lost first sector (zeros to the boundary, within the
                // rules), then the line goes on with three zeros inside a
                // sector: the second run is what makes it damage.
                let boundary = (at as u64 + 1).next_multiple_of(SECTOR_BYTES);
                bytes.resize(boundary as usize, 0);
                bytes.extend_from_slice(b"\"seq\":0,\"t\":\"");
                let from = bytes.len();
                bytes.extend_from_slice(&[0, 0, 0]);
                bytes.extend_from_slice(b"x\"}\n");
                Ok(format!(
                    "{}, from byte offset {at}: a torn line whose bytes {at}..{boundary} are zeros (a lost sector), then at byte offsets {from}..{} three zeros inside a sector (written, not lost)",
                    file.display(),
                    from + 3
                ))
            }
            Tail::LostSector => {
                // The first piece: its first sector lost, so zeros from the
                // segment's start (the pre-allocated zeros that sector held)
                // to the next boundary, then the bytes of the next sector.
                let first_boundary = (at as u64 + 1).next_multiple_of(SECTOR_BYTES);
                bytes.resize(first_boundary as usize, 0);
                bytes.extend_from_slice(b"\"seq\":0\n");
                let second = bytes.len();
                // Its own start, then any bytes up to the next sector
                // boundary but one (the start alone is not a sector's).
                bytes.extend_from_slice(b"{\"crc\":\"");
                let boundary = (bytes.len() as u64 + 1).next_multiple_of(SECTOR_BYTES);
                bytes.resize(boundary as usize, b'x');
                bytes.resize((boundary + SECTOR_BYTES) as usize, 0);
                bytes.push(b'\n');
                Ok(format!(
                    "{}, from byte offset {at}: a torn line whose bytes {at}..{first_boundary} are zeros (the rest of a lost sector), then at byte offset {second} one whose bytes {boundary}..{} are zeros (one whole sector lost)",
                    file.display(),
                    boundary + SECTOR_BYTES
                ))
            }
        }
    }
}

impl fmt::Display for Tail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tail::Lines(n) => write!(f, "lines-{n}"),
            Tail::Zeros(n) => write!(f, "zeros-{n}"),
            Tail::LostSector => f.write_str("lost-sector"),
            Tail::MisplacedZeros => f.write_str("misplaced-zeros"),
            Tail::Unterminated(n) => write!(f, "unterminated-{n}"),
        }
    }
}

/// A session rule the rules probe breaks, on the situation of an
/// operation's first commit: those that keep an effect from running twice,
/// and the history tree's rule for the call's parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleCase {
    /// The operation's `tool_call` again, as a side effect without an `operation_id`.
    NoOperationId,
    /// After the commit, a new call with the committed operation id.
    CallCommittedOperation,
    /// The call's `effect_committed` before its `tool_started`.
    CommitBeforeIntent,
    /// After the commit, a recovery (marking the call `committed`) and a
    /// `tool_reconciled` saying `not_applied`, the call's `tool_started` again.
    RestartCommittedCall,
    /// After the intent, a recovery (marking the side effect `started`) and
    /// no reconciliation, the call's `tool_started` again.
    RestartUnreconciled,
    /// The call's `tool_call` with a `parent` naming no entry of the log.
    ParentMissing,
}

impl RuleCase {
    pub const ALL: [RuleCase; 6] = [
        RuleCase::NoOperationId,
        RuleCase::CallCommittedOperation,
        RuleCase::CommitBeforeIntent,
        RuleCase::RestartCommittedCall,
        RuleCase::RestartUnreconciled,
        RuleCase::ParentMissing,
    ];

    /// The capability whose promise the rule is part of.
    pub fn capability(self) -> Capability {
        match self {
            RuleCase::ParentMissing => Capability::Branches,
            _ => Capability::EffectLedger,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RuleCase::NoOperationId => "no-operation-id",
            RuleCase::CallCommittedOperation => "call-committed-operation",
            RuleCase::CommitBeforeIntent => "commit-before-intent",
            RuleCase::RestartCommittedCall => "restart-committed-call",
            RuleCase::RestartUnreconciled => "restart-unreconciled",
            RuleCase::ParentMissing => "parent-missing",
        }
    }

    /// The rule, as PROTOCOL.md §3 states it.
    pub fn rule(self) -> &'static str {
        match self {
            RuleCase::NoOperationId => "a side effect needs an operation id",
            RuleCase::CallCommittedOperation => {
                "an operation id already committed cannot be called again"
            }
            RuleCase::CommitBeforeIntent => "effect_committed follows its call's tool_started",
            RuleCase::RestartCommittedCall => "a committed call never starts again",
            RuleCase::RestartUnreconciled => {
                "a side effect marked `started` starts again only after tool_reconciled with not_applied"
            }
            RuleCase::ParentMissing => "a parent must be an existing message-like event",
        }
    }

    fn from_name(name: &str) -> Option<RuleCase> {
        RuleCase::ALL.into_iter().find(|c| c.name() == name)
    }
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

    /// The `--plan` value that replays it.
    pub fn plan(&self) -> String {
        format!("{PLAN_PREFIX}{self}")
    }
}

/// The half of the compaction rule (PROTOCOL.md §3) a probe breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionBreak {
    /// Hung under the session's first user message, not the active leaf
    /// (or, if that is the leaf, under another entry).
    OffLeaf,
    /// Hung under the active leaf, its `first_kept_id` an entry of
    /// another branch (or, with no other branch yet, of no branch).
    KeptOffBranch,
}

impl CompactionBreak {
    pub const ALL: [CompactionBreak; 2] =
        [CompactionBreak::OffLeaf, CompactionBreak::KeptOffBranch];

    /// How `--plan probe:` names the probe.
    pub fn name(self) -> &'static str {
        match self {
            CompactionBreak::OffLeaf => "rule-compaction-off-leaf",
            CompactionBreak::KeptOffBranch => "rule-compaction-kept-off-branch",
        }
    }

    fn from_name(name: &str) -> Option<CompactionBreak> {
        CompactionBreak::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// How a replay's `--plan` names a probe.
pub const PLAN_PREFIX: &str = "probe:";

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Probe::Damage { file, offset } => write!(f, "damage@{}:{offset}", file.display()),
            Probe::Fused { file, newline } => write!(f, "fused@{}:{newline}", file.display()),
            Probe::Zeros { file, offset, len } => {
                write!(f, "zeros@{}:{offset}+{len}", file.display())
            }
            Probe::Ledger {
                operation,
                another_call: false,
            } => write!(f, "ledger@{operation}"),
            Probe::Ledger {
                operation,
                another_call: true,
            } => write!(f, "ledger-retry@{operation}"),
            Probe::Rule { case, operation } => write!(f, "rule-{}@{operation}", case.name()),
            Probe::CompactionRule { compaction, breaks } => {
                write!(f, "{}@{compaction}", breaks.name())
            }
            Probe::Lock => f.write_str("lock"),
            Probe::Limit => f.write_str("limit"),
            Probe::Tail { file, tail } => write!(f, "tail@{}:{tail}", file.display()),
            Probe::Cut {
                file,
                len,
                unreadable_snapshot,
            } => {
                let kind = if *unreadable_snapshot {
                    "cut-unreadable-snapshot"
                } else {
                    "cut"
                };
                write!(f, "{kind}@{}:{len}", file.display())
            }
        }
    }
}

/// A probe's plan that is not one (`agentchaos replay --plan probe:…`):
/// bad input, naming the plan and every form a plan may take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadProbePlan(String);

impl FromStr for Probe {
    type Err = BadProbePlan;

    fn from_str(s: &str) -> Result<Probe, BadProbePlan> {
        let bad = || {
            BadProbePlan(format!(
                "probe {s:?} is not damage@FILE:OFFSET, fused@FILE:OFFSET, zeros@FILE:OFFSET+LEN, tail@FILE:lines-N, tail@FILE:zeros-N, tail@FILE:lost-sector, tail@FILE:misplaced-zeros, tail@FILE:unterminated-N (N >= 8), cut@FILE:LEN, cut-unreadable-snapshot@FILE:LEN, ledger@OPERATION, ledger-retry@OPERATION, rule-CASE@OPERATION (CASE: {}), rule-compaction-off-leaf@EVENT_ID, rule-compaction-kept-off-branch@EVENT_ID, limit or lock",
                RuleCase::ALL.map(RuleCase::name).join(", ")
            ))
        };
        // FILE:REST, FILE relative to the store's root and never out of it.
        let file_and = |arg: &str| -> Result<(PathBuf, String), BadProbePlan> {
            let (file, rest) = arg.rsplit_once(':').ok_or_else(bad)?;
            let file = PathBuf::from(file);
            if file.as_os_str().is_empty()
                || !file
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
            {
                return Err(bad());
            }
            Ok((file, rest.to_string()))
        };
        match s {
            "lock" => return Ok(Probe::Lock),
            "limit" => return Ok(Probe::Limit),
            _ => {}
        }
        match s.split_once('@') {
            Some(("damage", arg)) => {
                let (file, offset) = file_and(arg)?;
                Ok(Probe::Damage {
                    file,
                    offset: offset.parse().map_err(|_| bad())?,
                })
            }
            Some(("fused", arg)) => {
                let (file, newline) = file_and(arg)?;
                Ok(Probe::Fused {
                    file,
                    newline: newline.parse().map_err(|_| bad())?,
                })
            }
            Some(("zeros", arg)) => {
                let (file, range) = file_and(arg)?;
                let (offset, len) = range.split_once('+').ok_or_else(bad)?;
                match (offset.parse(), len.parse()) {
                    (Ok(offset), Ok(len)) if len > 0 => Ok(Probe::Zeros { file, offset, len }),
                    _ => Err(bad()),
                }
            }
            Some((kind @ ("cut" | "cut-unreadable-snapshot"), arg)) => {
                let (file, len) = file_and(arg)?;
                Ok(Probe::Cut {
                    file,
                    len: len.parse().map_err(|_| bad())?,
                    unreadable_snapshot: kind == "cut-unreadable-snapshot",
                })
            }
            Some(("tail", arg)) => {
                let (file, tail) = file_and(arg)?;
                let count = |n: &str| n.parse::<u64>().ok().filter(|n| *n > 0);
                let tail = match tail.split_once('-') {
                    _ if tail == "lost-sector" => Some(Tail::LostSector),
                    _ if tail == "misplaced-zeros" => Some(Tail::MisplacedZeros),
                    Some(("lines", n)) => count(n).map(Tail::Lines),
                    Some(("zeros", n)) => count(n).map(Tail::Zeros),
                    Some(("unterminated", n)) => {
                        count(n).filter(|&n| n >= 8).map(Tail::Unterminated)
                    }
                    _ => None,
                };
                Ok(Probe::Tail {
                    file,
                    tail: tail.ok_or_else(bad)?,
                })
            }
            Some((kind @ ("ledger" | "ledger-retry"), op)) if !op.is_empty() => Ok(Probe::Ledger {
                operation: op.to_string(),
                another_call: kind == "ledger-retry",
            }),
            Some((kind, id)) if !id.is_empty() && CompactionBreak::from_name(kind).is_some() => {
                Ok(Probe::CompactionRule {
                    compaction: id.to_string(),
                    breaks: CompactionBreak::from_name(kind).expect("matched"),
                })
            }
            Some((kind, op)) if !op.is_empty() => {
                let case = kind.strip_prefix("rule-").and_then(RuleCase::from_name);
                let case = case.ok_or_else(bad)?;
                Ok(Probe::Rule {
                    case,
                    operation: op.to_string(),
                })
            }
            _ => Err(bad()),
        }
    }
}

/// The probes for a store claiming `claimed`, on the crash-free run's
/// store at `root` whose events are `reference`: the faults
/// ([`Probe::is_fault`]: [`DAMAGE_POSITIONS`] and more per non-empty file,
/// and, in-process, the cuts and tails of agentstore's log) whatever it
/// claims; the promises only where claimed: two ledger probes per
/// committed operation, the rules probes on the first committed operation
/// (the rules do not depend on which), the lock. The probes of the store
/// as a whole, not of a scenario's session (the limit, the lock: one run a
/// campaign says all they can), only when `store_wide`.
pub fn plan(
    claimed: &[Capability],
    root: &Path,
    agentstore: Option<&AgentstoreFiles>,
    reference: &[Record],
    rng: &mut Rng,
    store_wide: bool,
) -> Result<Vec<Probe>, ProbeError> {
    let mut probes = Vec::new();
    for (file, len) in files(root)? {
        // The middle half; a file of fewer than 4 bytes has no halves.
        let (lo, hi) = if len >= 4 {
            (len / 4, 3 * len / 4 - 1)
        } else {
            (0, len - 1)
        };
        let mut offsets: Vec<u64> = (0..DAMAGE_POSITIONS).map(|_| rng.range(lo, hi)).collect();
        let bytes = std::fs::read(root.join(&file))
            .map_err(|e| ProbeError::Harness(format!("cannot read {}: {e}", file.display())))?;
        let lines = complete_lines(&bytes);
        if let Some(last) = lines.last().filter(|l| l.end - l.start > 1) {
            offsets.push((last.start + last.end - 1) / 2);
        }
        // The newline before the last line: flipped, it fuses the last
        // two lines into one bad line with a whole line inside it (a
        // lost newline), which is damage, never a torn tail.
        if let [.., before, _] = lines.as_slice() {
            offsets.push(before.end - 1);
        }
        offsets.sort_unstable();
        offsets.dedup();
        probes.extend(offsets.into_iter().map(|offset| Probe::Damage {
            file: file.clone(),
            offset,
        }));
        // The same newline flipped and the last one dropped: the two
        // lines fused end the file as a torn write would, with a whole
        // valid line inside.
        if let [.., before, _] = lines.as_slice() {
            probes.push(Probe::Fused {
                file: file.clone(),
                newline: before.end - 1,
            });
        }
        // The last line alone, unless its newline sits at a sector
        // boundary: zeros from a line's start to there are what a lost
        // sector reads as, and a store may cut them as a torn tail.
        if let Some(last) = lines
            .last()
            .filter(|l| lines.len() >= 2 && (l.end - 1) % SECTOR_BYTES != 0)
        {
            probes.push(Probe::Zeros {
                file: file.clone(),
                offset: last.start,
                len: last.end - last.start,
            });
        }
        // The middle half of the last line: zeros that start and stop
        // inside it, after its first bytes, where no lost sector puts them.
        if let Some(last) = lines.last().filter(|l| l.end - l.start >= 8) {
            let (from, len) = (
                last.start + (last.end - last.start) / 4,
                (last.end - last.start) / 2,
            );
            if from % SECTOR_BYTES != 0 || (from + len) % SECTOR_BYTES != 0 {
                probes.push(Probe::Zeros {
                    file: file.clone(),
                    offset: from,
                    len,
                });
            }
        }
        if lines.len() >= 4 {
            let from = lines[lines.len() - 3].start;
            probes.push(Probe::Zeros {
                file: file.clone(),
                offset: from,
                len: len - from,
            });
        }
    }
    if let Some(AgentstoreFiles { log, covered }) = agentstore {
        let bytes = std::fs::read(root.join(log))
            .map_err(|e| ProbeError::Harness(format!("cannot read {}: {e}", log.display())))?;
        let lines = complete_lines(&bytes);
        // Cut inside the last line the snapshot covers: the snapshot says
        // that line was acknowledged, so it is no torn tail.
        let under = lines
            .iter()
            .find(|l| Some(l.end) == *covered && l.end - l.start > 1);
        if let Some(line) = under {
            for unreadable_snapshot in [false, true] {
                probes.push(Probe::Cut {
                    file: log.clone(),
                    len: (line.start + line.end) / 2,
                    unreadable_snapshot,
                });
            }
        }
        if !lines.is_empty() {
            probes.extend(
                [
                    Tail::Lines(TAIL_MAX_LINES),
                    Tail::Lines(TAIL_MAX_LINES + 1),
                    Tail::Zeros(TAIL_MAX_ZERO_BYTES),
                    Tail::Zeros(TAIL_MAX_ZERO_BYTES + 1),
                    Tail::LostSector,
                    Tail::MisplacedZeros,
                    Tail::Unterminated(TAIL_MAX_LINE_BYTES),
                    Tail::Unterminated(TAIL_MAX_LINE_BYTES + 1),
                ]
                .map(|tail| Probe::Tail {
                    file: log.to_path_buf(),
                    tail,
                }),
            );
        }
    }
    // Every store owes it: an acknowledged event reads back.
    if store_wide
        && reference
            .iter()
            .any(|r| matches!(r.event(), Some(Event::UserMessage { .. })))
    {
        probes.push(Probe::Limit);
    }
    if store_wide && claimed.contains(&Capability::WriterLock) {
        probes.push(Probe::Lock);
    }
    if claimed.contains(&Capability::EffectLedger) {
        for r in reference {
            if let Some(Event::EffectCommitted { operation_id, .. }) = r.event() {
                for another_call in [false, true] {
                    let p = Probe::Ledger {
                        operation: operation_id.clone(),
                        another_call,
                    };
                    if !probes.contains(&p) {
                        probes.push(p);
                    }
                }
            }
        }
    }
    let first = reference.iter().find_map(|r| match r.event() {
        Some(Event::EffectCommitted { operation_id, .. }) => Some(operation_id),
        _ => None,
    });
    if let Some(situation) = first.and_then(|op| Situation::find(reference, op).ok()) {
        for case in RuleCase::ALL {
            // Only a side effect must be reconciled before a re-run.
            let applies = case != RuleCase::RestartUnreconciled || situation.side_effect;
            if applies && claimed.contains(&case.capability()) {
                probes.push(Probe::Rule {
                    case,
                    operation: situation.operation.clone(),
                });
            }
        }
    }
    if claimed.contains(&Capability::Compaction) {
        let compaction = reference
            .iter()
            .enumerate()
            .find(|(_, r)| matches!(r.event(), Some(Event::Compaction { .. })));
        if let Some((k, c)) = compaction {
            let parent = match c.event() {
                Some(Event::Compaction { parent, .. }) => parent.as_deref(),
                _ => None,
            };
            // Nothing to hang it under but its own parent: no off-leaf probe.
            let off_leaf = entry_off_leaf(&reference[1..k], parent).is_some();
            probes.extend(
                CompactionBreak::ALL
                    .into_iter()
                    .filter(|b| off_leaf || *b != CompactionBreak::OffLeaf)
                    .map(|breaks| Probe::CompactionRule {
                        compaction: event_id(c.seq),
                        breaks,
                    }),
            );
        }
    }
    Ok(probes)
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

/// Every non-empty regular file under `root`, relative to it, sorted, with its length.
fn files(root: &Path) -> Result<Vec<(PathBuf, u64)>, ProbeError> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, u64)>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let ty = entry.file_type()?;
            if ty.is_dir() {
                walk(root, &entry.path(), out)?;
            } else if ty.is_file() {
                let len = entry.metadata()?.len();
                if len > 0 {
                    let rel = entry
                        .path()
                        .strip_prefix(root)
                        .map(Path::to_path_buf)
                        .unwrap_or_else(|_| entry.path());
                    out.push((rel, len));
                }
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    match walk(root, root, &mut out) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(ProbeError::Harness(format!(
                "cannot list {}: {e}",
                root.display()
            )))
        }
    }
    out.sort();
    Ok(out)
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
    /// The store refused to replay its own crash-free events, so the
    /// probe had nothing to test (not evidence, not an error: the trials
    /// judge that log).
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
            Probe::Ledger {
                operation,
                another_call,
            } => ledger(setup, operation, *another_call, dir),
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

/// How a damage probe changes its file.
enum Change {
    /// Flip the low bit of the byte at this offset.
    Flip(u64),
    /// Zero LEN bytes from OFFSET, keeping newlines.
    Zeros(u64, u64),
    /// Flip the low bit of the newline at this offset and drop the last
    /// byte, a newline too.
    Fuse(u64),
}

impl Change {
    /// Applies the change to `bytes` of `file`; says what it did.
    fn apply(&self, file: &Path, bytes: &mut Vec<u8>) -> Result<String, ProbeError> {
        let short = |end: u64| {
            ProbeError::Harness(format!(
                "{} has {} bytes: no byte offset {}",
                file.display(),
                bytes.len(),
                end
            ))
        };
        match *self {
            Change::Flip(offset) => {
                let missing = short(offset);
                let byte = bytes.get_mut(offset as usize).ok_or(missing)?;
                let was = *byte;
                *byte ^= 1;
                Ok(format!(
                    "{}, byte offset {offset}: {was:#04x} flipped to {:#04x}",
                    file.display(),
                    *byte
                ))
            }
            Change::Fuse(newline) => {
                let is_newline = |at: usize| bytes.get(at) == Some(&b'\n');
                let last = bytes.len().checked_sub(1).filter(|&l| is_newline(l));
                let last = last.filter(|&l| (newline as usize) < l && is_newline(newline as usize));
                let Some(last) = last else {
                    return Err(ProbeError::Harness(format!(
                        "{}: byte offset {newline} and the last byte are not two newlines",
                        file.display()
                    )));
                };
                bytes[newline as usize] ^= 1;
                bytes.truncate(last);
                Ok(format!(
                    "{}, byte offset {newline}: the newline before the last line flipped to {:#04x}, and the last line's newline at byte offset {last} dropped (two complete lines fused, ending the file unterminated)",
                    file.display(),
                    bytes[newline as usize]
                ))
            }
            Change::Zeros(offset, len) => {
                let end = offset.checked_add(len).filter(|e| *e <= bytes.len() as u64);
                let end = end.ok_or_else(|| short(offset.saturating_add(len)))?;
                let range = &mut bytes[offset as usize..end as usize];
                let lines = range.iter().filter(|b| **b == b'\n').count();
                range
                    .iter_mut()
                    .filter(|b| **b != b'\n')
                    .for_each(|b| *b = 0);
                Ok(format!(
                    "{}, byte offsets {offset}..{end}: {len} bytes over {lines} complete line(s) zeroed, newlines kept",
                    file.display()
                ))
            }
        }
    }
}

/// Copies the store's root into `dir`, lets `alter` change the copy (it
/// returns what it did, in words), and opens the altered copy in a probe
/// child: what was done, and the child's reply.
fn open_altered(
    setup: &ProbeSetup<'_>,
    dir: &Path,
    alter: impl FnOnce(&Path) -> Result<String, ProbeError>,
) -> Result<(String, ProbeReply), ProbeError> {
    let root = dir.join("root");
    crate::campaign::scratch::copy_dir(&setup.spec.root, &root)
        .map_err(|e| ProbeError::Harness(format!("cannot copy the store's root: {e}")))?;
    let what = alter(&root)?;
    let reply = child(setup, "damage", &root, &setup.spec.session, None, &[])?;
    Ok((what, reply))
}

/// Rewrites `file` under `root` with `edit` (which says what it did).
fn rewrite(
    root: &Path,
    file: &Path,
    edit: impl FnOnce(&mut Vec<u8>) -> Result<String, ProbeError>,
) -> Result<String, ProbeError> {
    let path = root.join(file);
    let mut bytes = std::fs::read(&path)
        .map_err(|e| ProbeError::Harness(format!("{}: {e}", path.display())))?;
    let what = edit(&mut bytes)?;
    std::fs::write(&path, &bytes)
        .map_err(|e| ProbeError::Harness(format!("{}: {e}", path.display())))?;
    Ok(what)
}

fn damage(
    setup: &ProbeSetup<'_>,
    file: &Path,
    change: &Change,
    dir: &Path,
) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    let (what, reply) = open_altered(setup, dir, |root| {
        rewrite(root, file, |bytes| change.apply(file, bytes))
    })?;
    let told = format!("{what}; {}", tell(&reply));
    let verdict = judge_fault(setup, Capability::DamageRefusal, &what, &reply, || {
        judge_damage(&what, setup.reference, &reply)
    })?;
    Ok((told, verdict.into_iter().collect(), false))
}

fn torn_tail(
    setup: &ProbeSetup<'_>,
    file: &Path,
    tail: Tail,
    dir: &Path,
) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    let (what, reply) = open_altered(setup, dir, |root| {
        rewrite(root, file, |bytes| tail.append(file, bytes))
    })?;
    let told = format!("{what}; {}", tell(&reply));
    let verdict = judge_fault(setup, Capability::TornTailRepair, &what, &reply, || {
        judge_tail(&what, tail, setup.reference, &reply)
    })?;
    Ok((told, verdict.into_iter().collect(), false))
}

fn cut(
    setup: &ProbeSetup<'_>,
    file: &Path,
    len: u64,
    unreadable_snapshot: bool,
    dir: &Path,
) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    let (what, reply) = open_altered(setup, dir, |root| {
        let path = root.join(file);
        let was = std::fs::metadata(&path)
            .map_err(|e| ProbeError::Harness(format!("{}: {e}", path.display())))?
            .len();
        if len >= was {
            return Err(ProbeError::Harness(format!(
                "{} has {was} bytes: no cut to {len}",
                file.display()
            )));
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(len))
            .map_err(|e| ProbeError::Harness(format!("{}: {e}", path.display())))?;
        let mut what = format!(
            "{} cut from {was} to {len} bytes, inside the last line snapshot.json covers",
            file.display()
        );
        if unreadable_snapshot {
            let id = SessionId::new(&setup.spec.session)
                .map_err(|e| ProbeError::Harness(e.to_string()))?;
            let snapshot = SessionPaths::new(root, &id).snapshot();
            std::fs::remove_file(&snapshot)
                .and_then(|()| std::fs::create_dir(&snapshot))
                .map_err(|e| ProbeError::Harness(format!("{}: {e}", snapshot.display())))?;
            what.push_str(
                ", and snapshot.json replaced by a directory (reading it fails, so an `io` refusal passes too)",
            );
        }
        Ok(what)
    })?;
    let told = format!("{what}; {}", tell(&reply));
    // A store that cannot read its own snapshot may say so (`io`).
    let io = matches!(&reply, ProbeReply::Refused { kind, .. } if kind == ErrorKind::Io.name());
    let verdict = if unreadable_snapshot && io {
        None
    } else {
        judge_fault(setup, Capability::DamageRefusal, &what, &reply, || {
            judge_damage(&what, setup.reference, &reply)
        })?
    };
    Ok((told, verdict.into_iter().collect(), false))
}

/// A fault probe's verdict (`what` says what it broke): by `claimed`, the
/// capability's own judge, where the store claims `capability`; by what
/// every store owes ([`judge_owed`]) where it does not, as
/// [`Probe::judged_by`] scores it.
fn judge_fault(
    setup: &ProbeSetup<'_>,
    capability: Capability,
    what: &str,
    reply: &ProbeReply,
    claimed: impl FnOnce() -> Result<Option<Violation>, ProbeError>,
) -> Result<Option<Violation>, ProbeError> {
    if setup.claimed.contains(&capability) {
        claimed()
    } else {
        judge_owed(what, capability, setup.reference, reply)
    }
}

/// The events around `reference[i]` (the one before, it, the one after), described.
fn around(reference: &[Record], i: usize) -> Vec<String> {
    reference[i.saturating_sub(1)..(i + 2).min(reference.len())]
        .iter()
        .map(describe_record)
        .collect()
}

/// What is wrong with `records`, served for the acknowledged `reference`
/// without a refusal: the first event gone (with those around it), an
/// event the store never had, or the order; `None` when they are the same.
fn served_problem(reference: &[Record], records: &[String]) -> Option<(String, Vec<String>)> {
    let want: Vec<String> = reference.iter().map(record_key).collect();
    if want == records {
        return None;
    }
    let served: std::collections::BTreeSet<&String> = records.iter().collect();
    Some(match want.iter().position(|k| !served.contains(k)) {
        Some(i) => (
            format!(
                "it served {} of {} events without refusing: {} is gone (a silent skip)",
                records.len(),
                want.len(),
                describe_record(&reference[i])
            ),
            around(reference, i),
        ),
        None => match records.iter().find(|k| !want.contains(k)) {
            Some(extra) => (
                format!("it served a record the undamaged store does not have: {extra:?}"),
                vec![],
            ),
            None => (
                "it served the same records in another order".to_string(),
                vec![],
            ),
        },
    })
}

/// The tail verdict: `what` says what was appended. Within the rules the
/// store must open and serve every acknowledged event (the tail cut);
/// past them it must refuse with `damage`. Losing or changing an
/// acknowledged event fails either way.
pub fn judge_tail(
    what: &str,
    tail: Tail,
    reference: &[Record],
    reply: &ProbeReply,
) -> Result<Option<Violation>, ProbeError> {
    let rule = match tail {
        Tail::Lines(_) => format!("at most {TAIL_MAX_LINES} torn lines"),
        Tail::LostSector | Tail::MisplacedZeros => format!(
            "zeros in a torn line are whole {SECTOR_BYTES}-byte sectors of the file"
        ),
        Tail::Unterminated(_) => format!(
            "a final piece with no newline is at most one line, {TAIL_MAX_LINE_BYTES} bytes"
        ),
        Tail::Zeros(_) => format!(
            "zeros to the end of the file are at most {TAIL_MAX_ZERO_BYTES} bytes (a lost line and a pre-allocated step)"
        ),
    };
    let within = tail.within_rules();
    let violation = |found: String, events: Vec<String>| Violation {
        invariant: Invariant::TailRules,
        when: "after the crash-free run, on a copy of its store with bytes appended to the log"
            .into(),
        expected: if within {
            format!(
                "{what}: one write could leave that ({rule}), so open cuts it as a torn tail and the store serves the {} acknowledged events unchanged",
                reference.len()
            )
        } else {
            format!(
                "{what}: more than one write can leave ({rule}), so opening refuses with `damage`"
            )
        },
        found,
        events,
    };
    match reply {
        ProbeReply::Refused { kind, .. } if !within && kind == ErrorKind::Damage.name() => Ok(None),
        ProbeReply::Refused {
            at, kind, message, ..
        } => Ok(Some(violation(
            format!("a `{kind}` refusal at {at}: {message}"),
            vec![],
        ))),
        ProbeReply::Crashed { at, message } => Ok(Some(violation(
            format!("the store died at {at}: {message}"),
            vec![],
        ))),
        ProbeReply::Served { records, types, .. } => {
            // The store's own record of its cut may follow the events.
            let n = reference.len();
            let recorded = records.len() > n
                && types.len() == records.len()
                && types[n..].iter().all(|t| t == "tail_quarantined");
            let records = if recorded {
                &records[..n]
            } else {
                &records[..]
            };
            match served_problem(reference, records) {
                Some((found, events)) => Ok(Some(violation(found, events))),
                None if within => Ok(None),
                None => Ok(Some(violation(
                    "it cut the appended bytes as a torn tail and served every event".into(),
                    vec![],
                ))),
            }
        }
        ProbeReply::Accepted { .. }
        | ProbeReply::NotReplayed { .. }
        | ProbeReply::SecondOpened
        | ProbeReply::Limit { .. } => Err(ProbeError::Harness(
            "the tail probe got another probe's reply".into(),
        )),
    }
}

/// The verdict on a store that does not claim `unclaimed`, the capability
/// whose fault the probe applied (`what` says which): it owes what every
/// store owes, that no acknowledged event is lost without a word
/// (`acked-durable`). A refusal of any kind passes, and so does a store
/// that dies on the bytes (nothing is lost silently), or one that serves
/// at least as many events as were acknowledged (some may be changed by
/// the damage: telling that is the unclaimed capability's promise).
/// Serving fewer, without a refusal, is a silent skip.
pub fn judge_owed(
    what: &str,
    unclaimed: Capability,
    reference: &[Record],
    reply: &ProbeReply,
) -> Result<Option<Violation>, ProbeError> {
    let records = match reply {
        ProbeReply::Refused { .. } | ProbeReply::Crashed { .. } => return Ok(None),
        ProbeReply::Served { records, .. } => records,
        ProbeReply::Accepted { .. }
        | ProbeReply::NotReplayed { .. }
        | ProbeReply::SecondOpened
        | ProbeReply::Limit { .. } => {
            return Err(ProbeError::Harness(format!(
                "the {unclaimed} probe got another probe's reply"
            )))
        }
    };
    if records.len() >= reference.len() {
        return Ok(None);
    }
    let served: std::collections::BTreeSet<&String> = records.iter().collect();
    let first = reference
        .iter()
        .position(|r| !served.contains(&record_key(r)))
        .unwrap_or(records.len());
    let events = around(reference, first);
    Ok(Some(Violation {
        invariant: Invariant::AckedDurable,
        when: format!("after the crash-free run, on a copy of its store with bytes broken (the store does not claim `{unclaimed}`: judged by what every store owes)"),
        expected: format!(
            "{what}: a refusal of any kind, or the {} acknowledged events served (those the bytes belonged to may differ)",
            reference.len()
        ),
        found: format!(
            "it served {} of {} acknowledged events without refusing: the first not served as written is {} (a silent skip)",
            records.len(),
            reference.len(),
            describe_record(&reference[first])
        ),
        events,
    }))
}

/// The damage verdict: `what` says which byte was flipped.
pub fn judge_damage(
    what: &str,
    reference: &[Record],
    reply: &ProbeReply,
) -> Result<Option<Violation>, ProbeError> {
    let violation = |found: String, events: Vec<String>| {
        Violation {
        invariant: Invariant::DamageRefused,
        when: "after the crash-free run, on a damaged copy of its store".into(),
        expected: format!(
            "{what}: opening or reading refuses with `damage`, or the store serves the {} undamaged events unchanged",
            reference.len()
        ),
        found,
        events,
    }
    };
    match reply {
        ProbeReply::Refused { kind, .. } if kind == ErrorKind::Damage.name() => Ok(None),
        ProbeReply::Refused {
            at, kind, message, ..
        } => Ok(Some(violation(
            format!("a `{kind}` refusal at {at}, not `damage`: {message}"),
            vec![],
        ))),
        ProbeReply::Crashed { at, message } => Ok(Some(violation(
            format!("the store died at {at} instead of refusing: {message}"),
            vec![],
        ))),
        ProbeReply::Served {
            records,
            wrong_blobs,
            ..
        } => Ok(served_problem(reference, records)
            .or_else(|| {
                (!wrong_blobs.is_empty()).then(|| {
                    (
                        format!(
                            "it served a damaged blob without refusing: {}",
                            wrong_blobs.join("; ")
                        ),
                        vec![],
                    )
                })
            })
            .map(|(found, events)| violation(found, events))),
        ProbeReply::Accepted { .. }
        | ProbeReply::NotReplayed { .. }
        | ProbeReply::SecondOpened
        | ProbeReply::Limit { .. } => Err(ProbeError::Harness(
            "the damage probe got another probe's reply".into(),
        )),
    }
}

/// The events a ledger probe's child replays, then those it appends as the
/// probe (the last is the second commit).
#[derive(Debug, Serialize, Deserialize)]
struct LedgerEvents {
    replay: Vec<Event>,
    then: Vec<Event>,
}

fn ledger(
    setup: &ProbeSetup<'_>,
    operation: &str,
    another_call: bool,
    dir: &Path,
) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    let reference = setup.reference;
    let commit = reference
        .iter()
        .position(|r| matches!(r.event(), Some(Event::EffectCommitted { operation_id, .. }) if operation_id == operation))
        .ok_or_else(|| ProbeError::Harness(format!("the crash-free run never commits operation {operation:?}")))?;
    let event = |r: &Record| {
        r.event().cloned().ok_or_else(|| {
            ProbeError::Harness(format!(
                "{} is not an event the agent writes",
                describe_record(r)
            ))
        })
    };
    let first = &reference[commit];
    let commit_event = event(first)?;
    // Event 0 (session_created) is the store's own, written by open.
    let (events, how) = if another_call {
        let Event::EffectCommitted {
            call_id,
            operation_id,
            external_ref,
        } = &commit_event
        else {
            unreachable!("found as an effect_committed")
        };
        let call = reference[..commit]
            .iter()
            .find_map(|r| match r.event() {
                Some(Event::ToolCall {
                    call_id: c,
                    parent,
                    tool,
                    args,
                    effect,
                    target,
                    needs_approval,
                    ..
                }) if c == call_id => Some((parent, tool, args, effect, target, *needs_approval)),
                _ => None,
            })
            .ok_or_else(|| {
                ProbeError::Harness(format!(
                    "no tool_call for call {call_id:?} before its commit"
                ))
            })?;
        let (parent, tool, args, effect, target, needs_approval) = call;
        let retry = format!("{call_id}-retry");
        let mut then = vec![Event::ToolCall {
            parent: parent.clone(),
            call_id: retry.clone(),
            tool: tool.clone(),
            args: args.clone(),
            effect: *effect,
            operation_id: Some(operation_id.clone()),
            target: target.clone(),
            needs_approval,
        }];
        if needs_approval {
            then.push(Event::Approval {
                call_id: retry.clone(),
                decision: agentchaos_protocol::event::Decision::Approved,
            });
        }
        then.extend([
            Event::ToolStarted {
                call_id: retry.clone(),
            },
            commit_event.clone(),
            Event::EffectCommitted {
                call_id: retry.clone(),
                operation_id: operation_id.clone(),
                external_ref: format!("{external_ref}-again"),
            },
        ]);
        let replay = reference[1..commit]
            .iter()
            .map(event)
            .collect::<Result<_, _>>()?;
        (
            LedgerEvents { replay, then },
            format!(
                "replaying {} event(s) up to before {}, then call {retry} with the same operation id, its intent, both commits",
                commit - 1,
                describe_record(first)
            ),
        )
    } else {
        let replay = reference[1..=commit]
            .iter()
            .map(event)
            .collect::<Result<_, _>>()?;
        (
            LedgerEvents {
                replay,
                then: vec![commit_event.clone()],
            },
            format!(
                "replaying {commit} event(s) up to {}, then the same commit again",
                describe_record(first)
            ),
        )
    };
    let reply = child_with_events(setup, dir, "ledger", "ledger-probe", &events)?;
    let told = format!("{how}: {}", tell(&reply));
    Ok((
        told,
        judge_ledger(operation, first, another_call, &reply)?
            .into_iter()
            .collect(),
        matches!(reply, ProbeReply::NotReplayed { .. }),
    ))
}

/// The ledger verdict: `first` is the first commit; `another_call`: the
/// second comes from another call with the same operation id.
pub fn judge_ledger(
    operation: &str,
    first: &Record,
    another_call: bool,
    reply: &ProbeReply,
) -> Result<Option<Violation>, ProbeError> {
    let violation = |found: String| {
        Violation {
        invariant: Invariant::LedgerRefusesDoubleCommit,
        when: if another_call {
            "after the crash-free run, in a fresh session replaying its events, with the operation retried under a new call id"
        } else {
            "after the crash-free run, in a fresh session replaying its events up to the first commit"
        }.into(),
        expected: format!(
            "a second effect_committed for operation {operation} ({}) refused with `rule`, nothing written",
            if another_call {
                "from another call, after the first call's commit"
            } else {
                "from the same call"
            }
        ),
        found,
        events: vec![describe_record(first)],
    }
    };
    Ok(not_refused_by_rule(reply, "the ledger probe", |seq| {
        format!("accepted and acknowledged at seq {seq}: operation {operation} is committed twice")
    })?
    .map(violation))
}

/// Where the first commit of an operation sits in the crash-free run.
struct Situation<'a> {
    operation: String,
    call_id: String,
    /// Indexes into the reference: the call's `tool_call`, its first
    /// `tool_started` after it, the commit.
    call: usize,
    started: usize,
    commit: usize,
    side_effect: bool,
    reference: &'a [Record],
}

impl<'a> Situation<'a> {
    fn find(reference: &'a [Record], operation: &str) -> Result<Situation<'a>, ProbeError> {
        let commit = reference
            .iter()
            .position(|r| matches!(r.event(), Some(Event::EffectCommitted { operation_id, .. }) if operation_id == operation))
            .ok_or_else(|| ProbeError::Harness(format!("the crash-free run never commits operation {operation:?}")))?;
        let Some(Event::EffectCommitted { call_id, .. }) = reference[commit].event() else {
            unreachable!("found as an effect_committed")
        };
        let is_call = |r: &Record| matches!(r.event(), Some(Event::ToolCall { call_id: c, .. }) if c == call_id);
        let call = reference[..commit]
            .iter()
            .rposition(is_call)
            .ok_or_else(|| {
                ProbeError::Harness(format!(
                    "no tool_call for call {call_id:?} before its commit"
                ))
            })?;
        let started = reference[call..commit]
            .iter()
            .position(
                |r| matches!(r.event(), Some(Event::ToolStarted { call_id: c }) if c == call_id),
            )
            .map(|i| call + i)
            .ok_or_else(|| {
                ProbeError::Harness(format!(
                    "no tool_started for call {call_id:?} before its commit"
                ))
            })?;
        let side_effect = matches!(
            reference[call].event(),
            Some(Event::ToolCall {
                effect: agentchaos_protocol::event::Effect::SideEffect,
                ..
            })
        );
        Ok(Situation {
            operation: operation.to_string(),
            call_id: call_id.clone(),
            call,
            started,
            commit,
            side_effect,
            reference,
        })
    }

    fn replay(&self, end: usize) -> Result<Vec<Event>, ProbeError> {
        replay_events(self.reference, end)
    }

    fn event(&self, i: usize) -> Event {
        self.reference[i]
            .event()
            .cloned()
            .expect("found as a known event")
    }
}

/// The events a rules probe's child replays, the recovery it runs, the
/// events after it, then the one append the rule forbids.
#[derive(Debug, Serialize, Deserialize)]
struct RuleEvents {
    replay: Vec<Event>,
    /// Recover after the replay; this call must come out marked with this phase.
    recover: Option<(String, agentchaos_protocol::event::Phase)>,
    then: Vec<Event>,
    forbidden: Event,
}

fn rule(
    setup: &ProbeSetup<'_>,
    case: RuleCase,
    operation: &str,
    dir: &Path,
) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    use agentchaos_protocol::event::{Effect, Phase, ReconcileOutcome};
    let at = Situation::find(setup.reference, operation)?;
    let call_id = at.call_id.clone();
    let call = || describe_record(&at.reference[at.call]);
    let commit = || describe_record(&at.reference[at.commit]);
    let restart = Event::ToolStarted {
        call_id: call_id.clone(),
    };
    let (events, how) = match case {
        RuleCase::NoOperationId => {
            let Event::ToolCall {
                parent,
                call_id,
                tool,
                args,
                target,
                needs_approval,
                ..
            } = at.event(at.call)
            else {
                unreachable!("found as a tool_call")
            };
            let forbidden = Event::ToolCall {
                parent,
                call_id,
                tool,
                args,
                effect: Effect::SideEffect,
                operation_id: None,
                target,
                needs_approval,
            };
            let how = format!("replaying up to before {}, then that call as a side effect without an operation_id", call());
            (
                RuleEvents {
                    replay: at.replay(at.call)?,
                    recover: None,
                    then: vec![],
                    forbidden,
                },
                how,
            )
        }
        RuleCase::CallCommittedOperation => {
            let Event::ToolCall {
                parent,
                tool,
                args,
                effect,
                target,
                needs_approval,
                ..
            } = at.event(at.call)
            else {
                unreachable!("found as a tool_call")
            };
            let again = format!("{call_id}-again");
            let forbidden = Event::ToolCall {
                parent,
                call_id: again.clone(),
                tool,
                args,
                effect,
                operation_id: Some(at.operation.clone()),
                target,
                needs_approval,
            };
            let how = format!(
                "replaying up to {}, then a new call {again} with operation id {operation}",
                commit()
            );
            (
                RuleEvents {
                    replay: at.replay(at.commit + 1)?,
                    recover: None,
                    then: vec![],
                    forbidden,
                },
                how,
            )
        }
        RuleCase::CommitBeforeIntent => {
            let how = format!(
                "replaying up to before {}, then the call's commit",
                describe_record(&at.reference[at.started])
            );
            (
                RuleEvents {
                    replay: at.replay(at.started)?,
                    recover: None,
                    then: vec![],
                    forbidden: at.event(at.commit),
                },
                how,
            )
        }
        RuleCase::RestartCommittedCall => {
            let how = format!(
                "replaying up to {}, recovering (call {call_id} marked committed), a tool_reconciled saying not_applied, then start_tool {call_id}",
                commit()
            );
            let reconciled = Event::ToolReconciled {
                call_id: call_id.clone(),
                outcome: ReconcileOutcome::NotApplied,
                evidence: "the rules probe: a reconciliation that contradicts the commit".into(),
            };
            (
                RuleEvents {
                    replay: at.replay(at.commit + 1)?,
                    recover: Some((call_id.clone(), Phase::Committed)),
                    then: vec![reconciled],
                    forbidden: restart,
                },
                how,
            )
        }
        RuleCase::RestartUnreconciled => {
            let how = format!(
                "replaying up to {}, recovering (call {call_id} marked started), then start_tool {call_id} with no reconciliation",
                describe_record(&at.reference[at.started])
            );
            (
                RuleEvents {
                    replay: at.replay(at.started + 1)?,
                    recover: Some((call_id.clone(), Phase::Started)),
                    then: vec![],
                    forbidden: restart,
                },
                how,
            )
        }
        RuleCase::ParentMissing => {
            let mut forbidden = at.event(at.call);
            let missing = event_id(MISSING_PARENT_SEQ);
            if let Event::ToolCall { parent, .. } = &mut forbidden {
                *parent = Some(missing.clone());
            }
            let how = format!(
                "replaying up to before {}, then that call hung under {missing:?}, which names no entry",
                call()
            );
            (
                RuleEvents {
                    replay: at.replay(at.call)?,
                    recover: None,
                    then: vec![],
                    forbidden,
                },
                how,
            )
        }
    };
    let reply = child_with_events(setup, dir, "rule", "rule-probe", &events)?;
    let told = format!("{how}: {}", tell(&reply));
    Ok((
        told,
        judge_rule(case, &how, &at.reference[at.call], &reply)?
            .into_iter()
            .collect(),
        matches!(reply, ProbeReply::NotReplayed { .. }),
    ))
}

/// The crash-free run's events 1..`end` (event 0 is the store's own), as a
/// probe replays them into a fresh session.
fn replay_events(reference: &[Record], end: usize) -> Result<Vec<Event>, ProbeError> {
    reference[1..end]
        .iter()
        .map(|r| {
            r.event().cloned().ok_or_else(|| {
                ProbeError::Harness(format!(
                    "{} is not an event the agent writes",
                    describe_record(r)
                ))
            })
        })
        .collect()
}

/// The entry an off-leaf compaction hangs under: the first user message
/// of `before` that is not the active `leaf`, else its first other entry
/// of the history tree (a scenario whose only user message is the leaf).
/// None when the leaf is the only entry.
fn entry_off_leaf(before: &[Record], leaf: Option<&str>) -> Option<String> {
    let other = |r: &&Record| Some(event_id(r.seq)).as_deref() != leaf;
    let entries = || {
        before
            .iter()
            .filter(|r| r.event().is_some_and(|e| e.parent().is_some()))
            .filter(other)
    };
    entries()
        .find(|r| matches!(r.event(), Some(Event::UserMessage { .. })))
        .or_else(|| entries().next())
        .map(|r| event_id(r.seq))
}

/// A seq past the end of any log the harness writes: the parent the
/// `parent-missing` rule probe names.
const MISSING_PARENT_SEQ: u64 = 999_999_999;

/// The compaction rule's probe: the crash-free run's `compaction` (an
/// event id) appended, after the events before it, with the half of its
/// rule that `breaks` names broken.
fn compaction_rule(
    setup: &ProbeSetup<'_>,
    compaction: &str,
    breaks: CompactionBreak,
    dir: &Path,
) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    let reference = setup.reference;
    let k = reference
        .iter()
        .position(|r| {
            event_id(r.seq) == compaction && matches!(r.event(), Some(Event::Compaction { .. }))
        })
        .ok_or_else(|| {
            ProbeError::Harness(format!(
                "the crash-free run has no compaction {compaction:?}"
            ))
        })?;
    let mut forbidden = reference[k]
        .event()
        .cloned()
        .expect("found as a compaction");
    let Event::Compaction {
        parent,
        first_kept_id,
        ..
    } = &mut forbidden
    else {
        unreachable!("found as a compaction")
    };
    let leaf = parent.clone();
    let leaf_name = leaf.as_deref().unwrap_or("(none)").to_string();
    let broken = match breaks {
        CompactionBreak::OffLeaf => {
            let other = entry_off_leaf(&reference[1..k], leaf.as_deref()).ok_or_else(|| {
                ProbeError::Harness(format!(
                    "no entry before compaction {compaction:?} other than its parent"
                ))
            })?;
            *parent = Some(other.clone());
            format!("hung under {other} instead of the active leaf {leaf_name}")
        }
        CompactionBreak::KeptOffBranch => {
            let (off, what) = entry_off_branch(&reference[1..k], leaf.as_deref());
            let kept = std::mem::replace(first_kept_id, off.clone());
            format!(
                "hung under the active leaf {leaf_name} but keeping from {off} ({what}) instead of {kept}"
            )
        }
    };
    let replay = replay_events(reference, k)?;
    let how = format!(
        "replaying up to before {}, then that compaction {broken}",
        describe_record(&reference[k]),
    );
    let events = RuleEvents {
        replay,
        recover: None,
        then: vec![],
        forbidden,
    };
    let reply = child_with_events(setup, dir, "rule", "rule-probe", &events)?;
    let told = format!("{how}: {}", tell(&reply));
    let rule = "a compaction hangs under the active leaf and keeps an entry of the active branch";
    Ok((
        told,
        judge_rule_text(rule, &how, &reference[k], &reply)?
            .into_iter()
            .collect(),
        matches!(reply, ProbeReply::NotReplayed { .. }),
    ))
}

/// An entry of `records` off the branch from `leaf` up to the root (the
/// harness's own model of the tree), and what it is: the first such entry,
/// else an id no entry has.
fn entry_off_branch(records: &[Record], leaf: Option<&str>) -> (String, &'static str) {
    let model = crate::model::Model::fold(records);
    let branch: std::collections::HashSet<Seq> = leaf
        .and_then(agentchaos_protocol::event::seq_of_event_id)
        .map_or_else(Vec::new, |leaf| model.ancestry(leaf))
        .into_iter()
        .collect();
    model
        .entries()
        .into_iter()
        .find(|seq| !branch.contains(seq))
        .map_or_else(
            || (event_id(MISSING_PARENT_SEQ), "no entry has that id"),
            |seq| (event_id(seq), "an entry of another branch"),
        )
}

/// The rules verdict: `how` says what the probe did, `call` is the
/// crash-free run's call it is about.
pub fn judge_rule(
    case: RuleCase,
    how: &str,
    call: &Record,
    reply: &ProbeReply,
) -> Result<Option<Violation>, ProbeError> {
    judge_rule_text(case.rule(), how, call, reply)
}

/// The verdict on an append that `rule` (as PROTOCOL.md §3 states it)
/// forbids; `record` is the crash-free run's event it is about.
fn judge_rule_text(
    rule: &str,
    how: &str,
    record: &Record,
    reply: &ProbeReply,
) -> Result<Option<Violation>, ProbeError> {
    let violation = |found: String| {
        Violation {
        invariant: Invariant::RuleRefused,
        when: format!("after the crash-free run, in a fresh session: {how}"),
        expected: format!(
            "the last append refused with `rule` ({}), and not in the log after the session is opened again",
            rule
        ),
        found,
        events: vec![describe_record(record)],
    }
    };
    Ok(not_refused_by_rule(reply, "the rules probe", |seq| {
        format!("accepted and acknowledged at seq {seq}: the store does not enforce \"{rule}\"")
    })?
    .map(violation))
}

/// What is wrong with `reply` to an append the session rules forbid: None
/// for a `rule` refusal after which the reopened session holds no more
/// events than before (or a probe not carried out), else what was found;
/// `accepted` words an acknowledgement at a seq. `probe` names the probe
/// in the error for another probe's reply.
fn not_refused_by_rule(
    reply: &ProbeReply,
    probe: &str,
    accepted: impl FnOnce(u64) -> String,
) -> Result<Option<String>, ProbeError> {
    Ok(match reply {
        ProbeReply::Refused {
            kind,
            events_before,
            events_after,
            ..
        } if kind == ErrorKind::Rule.name() => match (events_before, events_after) {
            (Some(b), Some(a)) if a > b => Some(format!(
                "refused, but after reopening the session holds {a} events, not the {b} it held before: the refused event was written"
            )),
            _ => None,
        },
        ProbeReply::Refused {
            at, kind, message, ..
        } => Some(format!("a `{kind}` refusal at {at}, not `rule`: {message}")),
        ProbeReply::Accepted { seq } => Some(accepted(*seq)),
        ProbeReply::NotReplayed { .. } => None,
        ProbeReply::Served { .. }
        | ProbeReply::Crashed { .. }
        | ProbeReply::SecondOpened
        | ProbeReply::Limit { .. } => {
            return Err(ProbeError::Harness(format!("{probe} got another probe's reply")))
        }
    })
}

/// The limit probe's first message: bytes of text.
pub const LIMIT_FIRST_BYTES: u64 = 1024;

/// The limit probe's largest message: bytes of text (twice agentstore's
/// line limit). A store that takes it has no limit the probe looks for.
pub const LIMIT_CAP_BYTES: u64 = 8 * 1024 * 1024;

/// The limit probe's messages start at this seq or later, so that every
/// one's seq and parent id have as many digits (two, for the at most 45
/// appends of a search) and a line's size varies with its text alone.
const LIMIT_FIRST_SEQ: Seq = 10;

/// What the limit probe's child replays (the crash-free run up to its
/// first user message) and the entry its messages hang under.
#[derive(Debug, Serialize, Deserialize)]
struct LimitEvents {
    replay: Vec<Event>,
    leaf: String,
}

fn limit(setup: &ProbeSetup<'_>, dir: &Path) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    let reference = setup.reference;
    let k = reference
        .iter()
        .position(|r| matches!(r.event(), Some(Event::UserMessage { .. })))
        .ok_or_else(|| ProbeError::Harness("the crash-free run has no user message".into()))?;
    let events = LimitEvents {
        replay: replay_events(reference, k + 1)?,
        leaf: event_id(reference[k].seq),
    };
    let reply = child_with_events(setup, dir, "limit", "limit-probe", &events)?;
    let told = format!(
        "replaying up to {}, then assistant messages of growing size under it, the session closed and opened again: {}",
        describe_record(&reference[k]),
        tell(&reply)
    );
    let skipped = matches!(reply, ProbeReply::NotReplayed { .. });
    Ok((told, judge_limit(&reply)?.into_iter().collect(), skipped))
}

/// The limit verdict.
pub fn judge_limit(reply: &ProbeReply) -> Result<Option<Violation>, ProbeError> {
    let violation = |found: String| {
        Violation {
        invariant: Invariant::AckedDurable,
        when: "after the crash-free run, in a fresh session: assistant messages up to the largest the store takes, then the session opened again".into(),
        expected: "every acknowledged message read back as written (a store may refuse a size it cannot take, never lose one it took)".into(),
        found,
        events: vec![],
    }
    };
    Ok(match reply {
        ProbeReply::NotReplayed { .. } => None,
        ProbeReply::Limit { not_read_back, .. } if not_read_back.is_empty() => None,
        ProbeReply::Limit {
            largest,
            not_read_back,
            ..
        } => Some(violation(format!(
            "{} of the acknowledged messages not read back as written (the largest acknowledged: {largest} bytes of text): {}",
            not_read_back.len(),
            not_read_back.join("; ")
        ))),
        ProbeReply::Refused {
            at, kind, message, ..
        } => Some(violation(format!(
            "{at} refused with `{kind}`: {message}"
        ))),
        _ => {
            return Err(ProbeError::Harness(
                "the limit probe got another probe's reply".into(),
            ))
        }
    })
}

fn lock(setup: &ProbeSetup<'_>, dir: &Path) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    let root = dir.join("root");
    crate::campaign::scratch::copy_dir(&setup.spec.root, &root)
        .map_err(|e| ProbeError::Harness(format!("cannot copy the store's root: {e}")))?;
    let reply = child(setup, "lock", &root, &setup.spec.session, None, &[])?;
    let told = format!(
        "the session opened, then opened again while the first held it: {}",
        tell(&reply)
    );
    Ok((told, judge_lock(&reply)?.into_iter().collect(), false))
}

/// The lock verdict.
pub fn judge_lock(reply: &ProbeReply) -> Result<Option<Violation>, ProbeError> {
    let violation = |found: String| Violation {
        invariant: Invariant::SecondWriterRefused,
        when: "after the crash-free run, on a copy of its store opened for writing".into(),
        expected: "a second open while the first holds the session refused with `locked`".into(),
        found,
        events: vec![],
    };
    Ok(match reply {
        ProbeReply::Refused { kind, .. } if kind == ErrorKind::Locked.name() => None,
        ProbeReply::Refused {
            at, kind, message, ..
        } => Some(violation(format!(
            "a `{kind}` refusal at {at}, not `locked`: {message}"
        ))),
        ProbeReply::SecondOpened => Some(violation(
            "the second open succeeded: two writers hold the session, and would append at the same seqs".into(),
        )),
        _ => return Err(ProbeError::Harness("the lock probe got another probe's reply".into())),
    })
}

/// Writes `events` where the probe child reads them (`--events FILE`) and
/// runs probe `kind` on a fresh session `session` under `dir`, with a
/// workspace.
fn child_with_events(
    setup: &ProbeSetup<'_>,
    dir: &Path,
    kind: &str,
    session: &str,
    events: &impl serde::Serialize,
) -> Result<ProbeReply, ProbeError> {
    let file = dir.join("events.json");
    std::fs::write(&file, serde_json::to_vec(events).expect("events serialize"))
        .map_err(|e| ProbeError::Harness(format!("{}: {e}", file.display())))?;
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws)
        .map_err(|e| ProbeError::Harness(format!("{}: {e}", ws.display())))?;
    child(
        setup,
        kind,
        &dir.join("root"),
        session,
        Some(&ws),
        &[std::ffi::OsStr::new("--events"), file.as_os_str()],
    )
}

/// The most times a probe child opens the session (the rule probe: to
/// replay and append, then again to read the log back).
const PROBE_OPENS: usize = 2;

/// Runs `cmd` to its end, its output captured; `None` when it ran for
/// `hang_timeout` and was killed (SIGKILL). The child is reaped only after
/// the watchdog stood down or fired, so the kill never reaches a recycled pid.
fn output_unless_hung(
    mut cmd: Command,
    hang_timeout: std::time::Duration,
) -> std::io::Result<Option<std::process::Output>> {
    use std::process::Stdio;
    let mut running = crate::child::spawn(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )?;
    let pid = nix::unistd::Pid::from_raw(running.id() as i32);
    let watchdog = crate::child::Watchdog::arm(hang_timeout, move || {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    });
    // Both pipes drained on their own threads: a chatty child never blocks.
    let stderr = running.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = std::io::Read::read_to_end(&mut e, &mut bytes);
            bytes
        })
    });
    let mut stdout = Vec::new();
    if let Some(mut out) = running.stdout.take() {
        let _ = std::io::Read::read_to_end(&mut out, &mut stdout);
    }
    let stderr = stderr.map_or_else(Vec::new, |t| t.join().unwrap_or_default());
    let hung = watchdog.disarm();
    let status = running.wait()?;
    Ok((!hung).then_some(std::process::Output {
        status,
        stdout,
        stderr,
    }))
}

/// Runs `agentchaos probe` with the store's flags and parses its reply.
fn child(
    setup: &ProbeSetup<'_>,
    what: &str,
    root: &Path,
    session: &str,
    workspace: Option<&Path>,
    extra: &[&std::ffi::OsStr],
) -> Result<ProbeReply, ProbeError> {
    let mut cmd = Command::new(setup.agent_exe);
    // Waited for on this thread: a harness killed mid-probe takes it along.
    crate::child::tell_to_die_with_harness(&mut cmd);
    cmd.args(["probe", "--what", what, "--session", session, "--root"])
        .arg(root)
        .args(extra)
        .args(setup.backend.agent_args());
    // A probe opens the session at most twice, never crashes, never is traced.
    let adapters = setup.backend.fork_life(PROBE_OPENS).map_err(|e| {
        ProbeError::Harness(format!(
            "cannot fork the store processes of the {what} probe: {e}"
        ))
    })?;
    if let Some(adapters) = &adapters {
        adapters
            .hand_down(&mut cmd)
            .map_err(|e| ProbeError::Harness(format!("the {what} probe: {e}")))?;
    }
    if let Some(ws) = workspace {
        cmd.arg("--workspace").arg(ws);
    }
    cmd.env_remove(agentstore::fault::FAULT_ENV);
    for var in [
        "AGENTCHAOS_TRACE",
        "AGENTCHAOS_KILL_AT",
        "AGENTCHAOS_TEAR",
        "AGENTCHAOS_SYNC_LOG",
    ] {
        cmd.env_remove(var);
    }
    if let Some(f) = setup.store_fault {
        cmd.env(agentstore::fault::FAULT_ENV, f);
    }
    let out = output_unless_hung(cmd, setup.hang_timeout).map_err(|e| {
        ProbeError::Harness(format!(
            "cannot start the probe {}: {e}",
            setup.agent_exe.display()
        ))
    });
    // The probe is gone: kill and reap its store processes.
    drop(adapters);
    let Some(out) = out? else {
        return Err(ProbeError::Store(format!(
            "the {what} probe hung: no reply from the store in {} s (--hang-timeout); killed",
            setup.hang_timeout.as_secs()
        )));
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let message = format!(
            "the {what} probe failed ({}): {}",
            out.status,
            stderr.lines().last().unwrap_or("(no message)")
        );
        // The child exits 1 when the store failed it, as the agent does
        // (`agentchaos probe`); any other failure is the harness's.
        return Err(if out.status.code() == Some(1) {
            ProbeError::Store(message)
        } else {
            ProbeError::Harness(message)
        });
    }
    serde_json::from_str(stdout.trim()).map_err(|e| {
        ProbeError::Harness(format!("the {what} probe replied {:?}: {e}", stdout.trim()))
    })
}

/// `agentchaos replay --plan probe:…`: the crash-free run again, then the
/// one probe on its store, told in words. `keep` keeps the probe's scratch
/// directory (the damaged copy, or the fresh session) there.
pub fn replay(
    cfg: &crate::campaign::config::Config<'_>,
    source: crate::campaign::config::ScenarioSource,
    probe: &Probe,
    keep: Option<&Path>,
) -> Result<crate::campaign::replay::Replayed, crate::campaign::trial::TrialError> {
    let dir = crate::campaign::scratch::campaign_dir(&cfg.dir)?;
    let result = replay_in(cfg, source, probe, keep, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn replay_in(
    cfg: &crate::campaign::config::Config<'_>,
    source: crate::campaign::config::ScenarioSource,
    probe: &Probe,
    keep: Option<&Path>,
    dir: &Path,
) -> Result<crate::campaign::replay::Replayed, crate::campaign::trial::TrialError> {
    use std::fmt::Write as _;
    let trace = crate::campaign::scratch::trace_dir(dir, 0);
    let prepared = crate::campaign::prepare::prepare_keeping(cfg, source, &trace)?;
    let name = prepared.source.scenario.name.clone();
    let mut narrative = format!(
        "scenario {name} ({}), probe {probe}\nthe crash-free run wrote {} events\n",
        prepared.source.path.display(),
        prepared.reference.records.len()
    );
    if let Some(u) = &prepared.unusable {
        return Ok(crate::campaign::replay::Replayed {
            narrative,
            violations: Vec::new(),
            error: Some(u.clone()),
            crash: None,
            timeline: None,
        });
    }
    let spec = crate::campaign::trial::TrialDir { dir: trace.clone() }.spec();
    let claimed = cfg
        .backend
        .capabilities()
        .map_err(|e| ProbeError::Harness(format!("cannot learn what the store claims: {e}")))?;
    let setup = probe_setup(cfg, &prepared, &spec, &claimed);
    let scratch = dir.join("probe");
    let outcome = run(&setup, probe, &scratch);
    let replay = crate::campaign::config::replay_command(
        &prepared.source.path,
        &probe.plan(),
        cfg.store_fault.as_deref(),
        &cfg.backend.agent_args(),
    );
    if !outcome.told.is_empty() {
        let _ = writeln!(narrative, "{}", outcome.told);
    }
    let _ = writeln!(
        narrative,
        "{}",
        match (&outcome.error, outcome.violations.is_empty()) {
            (Some(_), _) => "the probe could not be carried out".to_string(),
            (None, true) => format!("the store kept its promise ({})", probe.judged_by(&claimed)),
            (None, false) => format!(
                "the store broke its promise ({})",
                probe.judged_by(&claimed)
            ),
        }
    );
    for v in &outcome.violations {
        narrative.push('\n');
        narrative.push_str(&crate::check::explain(
            v,
            &name,
            &format!("none (probe {probe}, after the crash-free run)"),
            &replay,
        ));
    }
    if let Some(keep) = keep {
        let what = probe.to_string().replace('/', "_");
        let dest = crate::campaign::scratch::keep_dir(keep, &name, &what)
            .and_then(|dest| crate::campaign::scratch::copy_dir(&scratch, &dest).map(|()| dest))
            .map_err(|e| {
                ProbeError::Harness(format!("cannot keep the probe in {}: {e}", keep.display()))
            })?;
        let _ = writeln!(narrative, "probe directory kept in {}", dest.display());
    }
    Ok(crate::campaign::replay::Replayed {
        narrative,
        violations: outcome.violations,
        error: outcome.error.map(crate::campaign::trial::TrialError::from),
        crash: Some(crate::report::probe_point(probe)),
        timeline: None,
    })
}

/// What the probe child meets from the store: a refusal (with its kind),
/// the store broken (its adapter broke the protocol or died), or the
/// child's own side of the conversation failed.
#[derive(Debug)]
pub enum ChildError {
    Refused {
        kind: ErrorKind,
        message: String,
    },
    /// The store's adapter broke the protocol (a reply that is not JSON,
    /// the wrong id or shape, EOF, a timeout): the store's fault.
    Broken(String),
    /// The adapter could not be started, or a request not encoded.
    Harness(String),
}

impl ChildError {
    /// The probe's error when `at` (the operation) met this where the
    /// probe needs it to succeed: a refusal other than `io` and a broken
    /// adapter are the store's, an `io` refusal (the machine's) and the
    /// child's own failure the harness's.
    fn at(self, at: &str) -> ProbeError {
        match self {
            ChildError::Refused {
                kind: ErrorKind::Io,
                message,
            } => ProbeError::Harness(format!("{at} refused with `io`: {message}")),
            ChildError::Refused { kind, message } => {
                ProbeError::Store(format!("{at} refused with `{kind}`: {message}"))
            }
            ChildError::Broken(m) => ProbeError::Store(format!("{at}: {m}")),
            ChildError::Harness(m) => ProbeError::Harness(format!("{at}: {m}")),
        }
    }
}

impl From<agentstore::Error> for ChildError {
    fn from(e: agentstore::Error) -> ChildError {
        use agentstore::Error as E;
        let kind = match &e {
            E::Io { .. } | E::Poisoned { .. } => ErrorKind::Io,
            E::Damage { .. } | E::UnknownEventType { .. } | E::Foreign { .. } => ErrorKind::Damage,
            E::SessionLocked { .. } => ErrorKind::Locked,
            E::NoSuchSession { .. } | E::IncompleteSession { .. } => ErrorKind::NotFound,
            E::SessionExists { .. } => ErrorKind::Exists,
            E::Rule(_) => ErrorKind::Rule,
            E::InvalidSessionId { .. } | E::EventTooLarge { .. } | E::Invalid(_) => {
                ErrorKind::Invalid
            }
            E::LeaseHeld { .. } => ErrorKind::LeaseHeld,
            E::Fenced { .. } => ErrorKind::Fenced,
        };
        ChildError::Refused {
            kind,
            message: e.to_string(),
        }
    }
}

impl From<crate::store::adapter::ClientError> for ChildError {
    fn from(e: crate::store::adapter::ClientError) -> ChildError {
        match e.refusal_kind() {
            Some(kind) => ChildError::Refused {
                kind,
                message: e.to_string(),
            },
            None if matches!(
                e,
                crate::store::adapter::ClientError::Spawn { .. }
                    | crate::store::adapter::ClientError::Encode { .. }
            ) =>
            {
                ChildError::Harness(e.to_string())
            }
            None => ChildError::Broken(e.to_string()),
        }
    }
}

/// The store as the probe child drives it: agentstore in this process, or an adapter.
enum Target {
    Reference {
        paths: SessionPaths,
        session: Box<Session>,
    },
    Adapter(Box<Client>),
}

impl Target {
    fn open(args: &ChildArgs, workspace: Option<&Path>) -> Result<Target, ChildError> {
        let (root, session) = (args.root.as_path(), args.session.as_str());
        match args.adapter.as_ref() {
            None => {
                let id = SessionId::new(session)?;
                let options = || SessionOptions {
                    durability: args.durability,
                    ..SessionOptions::default()
                };
                let session = match workspace {
                    Some(ws) => Session::open_or_create(root, &id, ws, options())?.0,
                    None => Session::open(root, &id, options())?.0,
                };
                Ok(Target::Reference {
                    paths: SessionPaths::new(root, &id),
                    session: Box::new(session),
                })
            }
            Some(backend) => {
                let mut client = backend.client().map_err(|e| {
                    if e.store_fault() {
                        ChildError::Broken(e.message)
                    } else {
                        ChildError::Harness(e.message)
                    }
                })?;
                client.open(&OpenArgs {
                    root: root.to_path_buf(),
                    session: session.to_string(),
                    workspace: workspace.map(Path::to_path_buf),
                    create: workspace.is_some(),
                    lease: None,
                })?;
                Ok(Target::Adapter(Box::new(client)))
            }
        }
    }

    fn append(&mut self, event: &Event) -> Result<Seq, ChildError> {
        match (self, event) {
            (Target::Reference { session, .. }, Event::ToolStarted { call_id }) => {
                let due = session.log().next_seq();
                let intent = session.start_tool(call_id)?;
                Ok(intent.ack().map_or(due, |a| a.seq()))
            }
            (Target::Reference { session, .. }, e) => Ok(session.append(e.clone())?.seq()),
            (Target::Adapter(c), Event::ToolStarted { call_id }) => Ok(c.start_tool(call_id)?.seq),
            (Target::Adapter(c), e) => Ok(c.append(e)?.seq),
        }
    }

    fn recover(&mut self) -> Result<agentchaos_protocol::message::RecoveryState, ChildError> {
        match self {
            Target::Reference { session, .. } => Ok(session.recover()?),
            Target::Adapter(c) => Ok(c.recover()?),
        }
    }

    fn put_blob(&mut self, bytes: &[u8]) -> Result<BlobRef, ChildError> {
        match self {
            Target::Reference { session, .. } => Ok(session.put_blob(bytes)?),
            Target::Adapter(c) => Ok(c.put_blob(bytes)?),
        }
    }

    fn get_blob(&mut self, reference: &BlobRef) -> Result<Vec<u8>, ChildError> {
        match self {
            Target::Reference { session, .. } => Ok(session.get_blob(reference)?),
            Target::Adapter(c) => Ok(c.get_blob(reference)?),
        }
    }

    fn events(&mut self) -> Result<Vec<Record>, ChildError> {
        match self {
            Target::Reference { paths, .. } => {
                let mut out = Vec::new();
                for item in Scanner::open(&paths.events(), LogPosition::START)? {
                    out.push(item?.1);
                }
                Ok(out)
            }
            Target::Adapter(c) => Ok(c.events(None)?),
        }
    }

    /// The records at `seqs` that the store serves, one `events` page
    /// each through an adapter (a reply stays under the client's limit
    /// however large the log).
    fn records_at(&mut self, seqs: &[Seq]) -> Result<Vec<Record>, ChildError> {
        match self {
            Target::Reference { .. } => {
                let mut all = self.events()?;
                all.retain(|r| seqs.contains(&r.seq));
                Ok(all)
            }
            Target::Adapter(c) => {
                let mut out = Vec::new();
                for &seq in seqs {
                    let page = c.events_page(seq.checked_sub(1), Some(1))?;
                    out.extend(page.into_iter().filter(|r| r.seq == seq));
                }
                Ok(out)
            }
        }
    }
}

/// The child's arguments.
#[derive(Debug, Clone)]
pub struct ChildArgs {
    /// `damage`, `ledger`, `rule` or `lock`.
    pub what: String,
    pub root: PathBuf,
    pub session: String,
    /// Ledger and rule: the workspace of the fresh session.
    pub workspace: Option<PathBuf>,
    /// Ledger and rule: the events to replay and append, as JSON.
    pub events: Option<PathBuf>,
    /// The store behind `--adapter` (with the store processes the harness
    /// forked for this probe, if it did), or agentstore in this process.
    pub adapter: Option<AdapterBackend>,
    /// The reference store's durability (no adapter).
    pub durability: agentstore::Durability,
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

/// A refusal as the child reports it; `events`: the session's event count
/// before and after it (ledger).
fn refused(at: &str, e: ChildError, events: Option<(u64, u64)>) -> Result<ProbeReply, ProbeError> {
    match e {
        ChildError::Refused { kind, message } => Ok(ProbeReply::Refused {
            at: at.to_string(),
            kind: kind.name().to_string(),
            message,
            events_before: events.map(|e| e.0),
            events_after: events.map(|e| e.1),
        }),
        e => Err(e.at(at)),
    }
}

fn child_damage(args: &ChildArgs) -> Result<ProbeReply, ProbeError> {
    // Damaged data must be refused, not crash the store: a panic of the
    // in-process store or an adapter that fails the protocol is a finding.
    let died = |at: &str, e: ChildError| match e {
        ChildError::Broken(message) => Ok(ProbeReply::Crashed {
            at: at.to_string(),
            message,
        }),
        e => refused(at, e, None),
    };
    let caught = std::panic::catch_unwind(|| {
        let mut target = match Target::open(args, None) {
            Ok(t) => t,
            Err(e) => return died("open", e),
        };
        let records = match target.events() {
            Ok(records) => records,
            Err(e) => return died("events", e),
        };
        // Every blob a served event references is read back: a damaged
        // blob must be refused as damage too, never served changed.
        let mut wrong_blobs = Vec::new();
        for (seq, reference) in referenced_blobs(&records) {
            match target.get_blob(reference) {
                Ok(bytes) => wrong_blobs.extend(
                    blob_problem(reference, &bytes)
                        .map(|p| format!("the blob of event {seq} ({}): {p}", reference.digest)),
                ),
                Err(e) => return died("get_blob", e),
            }
        }
        Ok(ProbeReply::Served {
            records: records.iter().map(record_key).collect(),
            types: records
                .iter()
                .map(|r| r.body.type_name().to_string())
                .collect(),
            wrong_blobs,
        })
    });
    caught.unwrap_or_else(|p| {
        let message = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".to_string());
        Ok(ProbeReply::Crashed {
            at: "open".to_string(),
            message: format!("panicked: {}", message.replace('\n', " ")),
        })
    })
}

fn child_lock(args: &ChildArgs) -> Result<ProbeReply, ProbeError> {
    let open = || Target::open(args, None);
    let _first = open().map_err(|e| e.at("first open"))?;
    match open() {
        Ok(_second) => Ok(ProbeReply::SecondOpened),
        Err(e) => refused("second open", e, None),
    }
}

/// The JSON events file of a ledger or rule probe.
fn read_events<T: serde::de::DeserializeOwned>(args: &ChildArgs) -> Result<T, ProbeError> {
    let file = args
        .events
        .as_ref()
        .ok_or_else(|| ProbeError::Harness("--events is required".into()))?;
    let text =
        std::fs::read(file).map_err(|e| ProbeError::Harness(format!("{}: {e}", file.display())))?;
    serde_json::from_slice(&text)
        .map_err(|e| ProbeError::Harness(format!("{}: {e}", file.display())))
}

fn fail(what: &str) -> impl FnOnce(ChildError) -> ProbeError + '_ {
    move |e| e.at(what)
}

/// Appends the crash-free run's `events` (a referenced blob's bytes are
/// not in the log: any stored blob will do); a refusal is the probe's
/// situation not reached ([`ProbeReply::NotReplayed`]).
fn replay_into(target: &mut Target, events: &[Event]) -> Result<Option<ProbeReply>, ProbeError> {
    for e in events {
        let e = match e {
            Event::ToolResult {
                parent,
                call_id,
                status,
                output,
                blob: Some(_),
            } => Event::ToolResult {
                parent: parent.clone(),
                call_id: call_id.clone(),
                status: *status,
                output: output.clone(),
                blob: Some(
                    target
                        .put_blob(format!("ledger probe stand-in for {call_id}").as_bytes())
                        .map_err(fail("put_blob"))?,
                ),
            },
            other => other.clone(),
        };
        if let Err(err) = target.append(&e) {
            return match err {
                ChildError::Refused { kind, message } => Ok(Some(ProbeReply::NotReplayed {
                    message: format!("{} refused with `{kind}`: {message}", e.type_name()),
                })),
                err => Err(err.at(&format!("replaying {}", e.type_name()))),
            };
        }
    }
    Ok(None)
}

/// Opens the probe's session in `--workspace` and replays the crash-free
/// run's `replay` into it: the target, or the reply saying the probe's
/// situation was not reached.
fn open_replayed(
    args: &ChildArgs,
    replay: &[Event],
) -> Result<Result<Target, ProbeReply>, ProbeError> {
    let ws = args
        .workspace
        .as_deref()
        .ok_or_else(|| ProbeError::Harness("--workspace is required".into()))?;
    let mut target = Target::open(args, Some(ws)).map_err(fail("open"))?;
    Ok(match replay_into(&mut target, replay)? {
        None => Ok(target),
        Some(not_replayed) => Err(not_replayed),
    })
}

fn child_ledger(args: &ChildArgs) -> Result<ProbeReply, ProbeError> {
    let events: LedgerEvents = read_events(args)?;
    let mut target = match open_replayed(args, &events.replay)? {
        Ok(target) => target,
        Err(not_replayed) => return Ok(not_replayed),
    };
    let mut last = None;
    for e in &events.then {
        let before = target.events().map_err(fail("events"))?.len() as u64;
        match target.append(e) {
            Ok(seq) => last = Some(seq),
            Err(err) => {
                let after = target.events().map_err(fail("events"))?.len() as u64;
                return refused(
                    &format!("append of {}", e.type_name()),
                    err,
                    Some((before, after)),
                );
            }
        }
    }
    let seq = last.ok_or_else(|| ProbeError::Harness("the ledger probe appends nothing".into()))?;
    Ok(ProbeReply::Accepted { seq })
}

/// An assistant message of `len` bytes of text, under `parent`.
fn sized_message(parent: Seq, len: u64) -> Event {
    Event::AssistantMessage {
        parent: Some(event_id(parent)),
        text: "x".repeat(len as usize),
    }
}

fn child_limit(args: &ChildArgs) -> Result<ProbeReply, ProbeError> {
    let events: LimitEvents = read_events(args)?;
    let mut target = match open_replayed(args, &events.replay)? {
        Ok(target) => target,
        Err(not_replayed) => return Ok(not_replayed),
    };
    let mut leaf = agentchaos_protocol::event::seq_of_event_id(&events.leaf)
        .ok_or_else(|| ProbeError::Harness(format!("{:?} is not an event id", events.leaf)))?;
    // Short messages until the seqs have their final digit count (each
    // under the one before, the seqs consecutive as in any replay).
    let padding: Vec<Event> = (leaf..(LIMIT_FIRST_SEQ - 1).max(leaf))
        .map(|parent| sized_message(parent, 1))
        .collect();
    if let Some(not_replayed) = replay_into(&mut target, &padding)? {
        return Ok(not_replayed);
    }
    leaf += padding.len() as Seq;
    let mut acknowledged: Vec<(Seq, u64)> = Vec::new();
    let mut attempt = |len: u64, leaf: &mut Seq| -> Result<bool, ProbeError> {
        match target.append(&sized_message(*leaf, len)) {
            Ok(seq) => {
                acknowledged.push((seq, len));
                *leaf = seq;
                Ok(true)
            }
            Err(ChildError::Refused { .. }) => Ok(false),
            Err(e) => Err(e.at(&format!("append of a {len}-byte assistant_message"))),
        }
    };
    // Doubling, then bisecting between the largest taken and the smallest refused.
    let mut largest = None;
    let mut refused = None;
    let mut len = LIMIT_FIRST_BYTES;
    while len <= LIMIT_CAP_BYTES {
        if attempt(len, &mut leaf)? {
            largest = Some(len);
            len *= 2;
        } else {
            refused = Some(len);
            break;
        }
    }
    let Some(mut taken) = largest else {
        return Ok(ProbeReply::NotReplayed {
            message: format!(
                "an assistant message of {LIMIT_FIRST_BYTES} bytes of text was refused"
            ),
        });
    };
    if let Some(mut over) = refused {
        while over - taken > 1 {
            let mid = taken + (over - taken) / 2;
            if attempt(mid, &mut leaf)? {
                taken = mid;
            } else {
                over = mid;
            }
        }
        refused = Some(over);
    }
    drop(target);
    let mut again = match Target::open(args, None) {
        Ok(again) => again,
        Err(e @ ChildError::Refused { .. }) => return refused_reopen(e),
        Err(e) => return Err(e.at("open again")),
    };
    let seqs: Vec<Seq> = acknowledged.iter().map(|&(seq, _)| seq).collect();
    let served = again.records_at(&seqs).map_err(fail("events"))?;
    let not_read_back = acknowledged
        .iter()
        .filter_map(|&(seq, len)| {
            let found = served.iter().find(|r| r.seq == seq);
            let fits = |text: &str| text.len() as u64 == len && text.bytes().all(|b| b == b'x');
            match found.and_then(|r| r.event()) {
                Some(Event::AssistantMessage { text, .. }) if fits(text) => None,
                Some(other) => Some(format!(
                    "seq {seq} (a {len}-byte message) is now {}",
                    crate::model::describe_event(other)
                )),
                None => Some(format!("seq {seq} (a {len}-byte message) is gone")),
            }
        })
        .collect();
    Ok(ProbeReply::Limit {
        largest: taken,
        smallest_refused: refused,
        acknowledged: acknowledged.len(),
        not_read_back,
    })
}

/// The limit probe's reopen, refused: the messages it acknowledged are lost with the session.
fn refused_reopen(e: ChildError) -> Result<ProbeReply, ProbeError> {
    refused("open, after the messages were acknowledged,", e, None)
}

fn child_rule(args: &ChildArgs) -> Result<ProbeReply, ProbeError> {
    let events: RuleEvents = read_events(args)?;
    let mut target = match open_replayed(args, &events.replay)? {
        Ok(target) => target,
        Err(not_replayed) => return Ok(not_replayed),
    };
    if let Some((call_id, phase)) = &events.recover {
        let state = target.recover().map_err(fail("recover"))?;
        let marked = state.uncertain.iter().find(|u| &u.call_id == call_id);
        if marked.map(|u| u.phase) != Some(*phase) {
            // Not this probe's to judge: the crash trials check the marks.
            return Ok(ProbeReply::NotReplayed {
                message: format!(
                    "recovery marked call {call_id} {}, not {phase:?} (the crash trials judge the marks)",
                    marked.map_or("not at all".to_string(), |u| format!("{:?}", u.phase))
                ),
            });
        }
    }
    if let Some(not_replayed) = replay_into(&mut target, &events.then)? {
        return Ok(not_replayed);
    }
    let before = target.events().map_err(fail("events"))?.len() as u64;
    match target.append(&events.forbidden) {
        Ok(seq) => Ok(ProbeReply::Accepted { seq }),
        Err(ChildError::Refused { kind, message }) => {
            // Closed and opened again: a refused event must not be on disk.
            drop(target);
            let at = format!("append of {}", events.forbidden.type_name());
            let mut again = match Target::open(args, None) {
                Ok(again) => again,
                // What it wrote of the refused event keeps the session from opening.
                Err(ChildError::Refused {
                    kind: reopen_kind,
                    message: reopen_message,
                }) => {
                    return Ok(ProbeReply::Refused {
                        at: format!("open, after the {at} was refused with `{}`", kind.name()),
                        kind: reopen_kind.name().to_string(),
                        message: format!("{reopen_message} (the append's refusal: {message})"),
                        events_before: Some(before),
                        events_after: None,
                    })
                }
                Err(e) => return Err(e.at("open again")),
            };
            let after = again.events().map_err(fail("events"))?.len() as u64;
            refused(
                &at,
                ChildError::Refused { kind, message },
                Some((before, after)),
            )
        }
        Err(err) => Err(err.at(&format!("append of {}", events.forbidden.type_name()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentchaos_protocol::event::{event_id, Body, Redaction};

    fn rec(seq: u64, e: Event) -> Record {
        Record {
            seq,
            id: event_id(seq),
            ts: "2026-01-01T00:00:00.000Z".into(),
            redaction: Redaction::Public,
            body: Body::Known(e),
        }
    }

    fn log() -> Vec<Record> {
        vec![
            rec(
                0,
                Event::SessionCreated {
                    session_id: "s".into(),
                    schema_version: 1,
                    workspace: "/w".into(),
                },
            ),
            rec(1, Event::RunStarted { run_id: "r".into() }),
            rec(
                2,
                Event::EffectCommitted {
                    call_id: "c".into(),
                    operation_id: "op".into(),
                    external_ref: "x".into(),
                },
            ),
        ]
    }

    #[test]
    fn a_fuse_flips_the_newline_and_drops_the_last_one() {
        let file = Path::new("log");
        let mut bytes = b"a\nbb\ncc\n".to_vec();
        let told = Change::Fuse(4).apply(file, &mut bytes).unwrap();
        assert_eq!(bytes, b"a\nbb\x0bcc".to_vec(), "{told}");
        // Not two newlines: a harness error, the file left as it was.
        for (newline, text) in [(1u64, &b"a\nb"[..]), (0, b"a\nb\n"), (3, b"a\nb\n")] {
            let mut bytes = text.to_vec();
            assert!(Change::Fuse(newline).apply(file, &mut bytes).is_err());
            assert_eq!(bytes, text);
        }
    }

    #[test]
    fn probes_round_trip_through_their_plan_form() {
        for s in [
            "damage@sessions/s/events.jsonl:120",
            "zeros@sessions/s/events.jsonl:40+62",
            "fused@sessions/s/events.jsonl:99",
            "ledger@op-deploy-1",
            "ledger-retry@op-deploy-1",
            "rule-no-operation-id@op-deploy-1",
            "rule-restart-unreconciled@op:with:colons",
            "rule-parent-missing@op-deploy-1",
            "rule-compaction-off-leaf@e15",
            "rule-compaction-kept-off-branch@e15",
            "lock",
            "limit",
            "tail@sessions/s/events.jsonl:lines-64",
            "tail@sessions/s/events.jsonl:zeros-4194305",
            "tail@sessions/s/events.jsonl:lost-sector",
            "tail@sessions/s/events.jsonl:misplaced-zeros",
            "tail@sessions/s/events.jsonl:unterminated-4194304",
            "cut@sessions/s/events.jsonl:77",
            "cut-unreadable-snapshot@sessions/s/events.jsonl:77",
        ] {
            let p: Probe = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
        }
        for bad in [
            "damage@x",
            "damage@:3",
            "damage@../x:3",
            "damage@/etc/passwd:3",
            "ledger@",
            "zap@1",
            "zeros@x:3",
            "zeros@x:3+0",
            "fused@x",
            "fused@../x:3",
            "zeros@../x:3+1",
            "rule-no-operation-id@",
            "rule-compaction-off-leaf@",
            "rule-compaction-kept-off-branch@",
            "rule-zap@op",
            "rule@op",
            "tail@x:lines-0",
            "tail@x:lines",
            "tail@x:ones-3",
            "tail@x:zeros-x",
            "tail@../x:zeros-1",
            "cut@x:",
            "cut@x:-1",
        ] {
            assert!(bad.parse::<Probe>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_silent_skip_is_a_violation_and_a_damage_refusal_or_redundancy_is_not() {
        let reference = log();
        let all: Vec<String> = reference.iter().map(record_key).collect();
        let served = |n: usize| ProbeReply::Served {
            records: all[..n].to_vec(),
            types: vec![],
            wrong_blobs: vec![],
        };
        assert!(judge_damage("f", &reference, &served(3)).unwrap().is_none());
        let refused = |kind: &str| ProbeReply::Refused {
            at: "open".into(),
            kind: kind.into(),
            message: "m".into(),
            events_before: None,
            events_after: None,
        };
        assert!(judge_damage("f", &reference, &refused("damage"))
            .unwrap()
            .is_none());
        // The broken store: it skips the damaged line and serves the rest.
        let skipped = judge_damage("f, byte offset 9", &reference, &served(2))
            .unwrap()
            .expect("a silent skip is caught");
        assert_eq!(skipped.invariant, Invariant::DamageRefused);
        assert!(skipped.found.contains("silent skip"), "{}", skipped.found);
        assert!(skipped.expected.contains("byte offset 9"));
        let wrong = judge_damage("f", &reference, &refused("io"))
            .unwrap()
            .unwrap();
        assert!(wrong.found.contains("`io` refusal"), "{}", wrong.found);
        let died = ProbeReply::Crashed {
            at: "open".into(),
            message: "panicked: boom".into(),
        };
        let died = judge_damage("f", &reference, &died).unwrap().unwrap();
        assert!(died.found.contains("died at open"), "{}", died.found);
        // The broken store: every event served, a damaged blob too.
        let changed_blob = ProbeReply::Served {
            records: all.clone(),
            types: vec![],
            wrong_blobs: vec!["the blob of event 2 (ab12): it served 3 bytes".into()],
        };
        let blob = judge_damage("f", &reference, &changed_blob)
            .unwrap()
            .expect("a damaged blob served is caught");
        assert_eq!(blob.invariant, Invariant::DamageRefused);
        assert!(blob.found.contains("damaged blob"), "{}", blob.found);
        assert!(blob.found.contains("event 2"), "{}", blob.found);
    }

    #[test]
    fn a_store_without_the_claim_owes_only_that_nothing_is_lost_silently() {
        let reference = log();
        let all: Vec<String> = reference.iter().map(record_key).collect();
        let owed = |reply: &ProbeReply| {
            judge_owed(
                "f, byte offset 9",
                Capability::DamageRefusal,
                &reference,
                reply,
            )
            .unwrap()
        };
        for kind in ["damage", "io", "rule"] {
            let refused = ProbeReply::Refused {
                at: "open".into(),
                kind: kind.into(),
                message: "m".into(),
                events_before: None,
                events_after: None,
            };
            assert!(owed(&refused).is_none(), "a `{kind}` refusal loses nothing");
        }
        // Every event served, the damaged one changed: it never said it
        // would tell.
        let mut changed = all.clone();
        changed[1].push('x');
        let served = |records: Vec<String>| ProbeReply::Served {
            records,
            types: vec![],
            wrong_blobs: vec!["the blob of event 2".into()],
        };
        assert!(owed(&served(changed)).is_none());
        // The broken store: it skips the damaged line and serves the rest.
        let skipped = owed(&served(vec![all[0].clone(), all[2].clone()]))
            .expect("a silent skip is caught without the claim");
        assert_eq!(skipped.invariant, Invariant::AckedDurable);
        assert!(
            skipped.found.contains("served 2 of 3")
                && skipped.found.contains(&describe_record(&reference[1])),
            "{}",
            skipped.found
        );
        assert!(skipped.when.contains("does not claim `damage_refusal`"));
        assert!(skipped.expected.contains("byte offset 9"));
    }

    #[test]
    fn a_tail_within_the_rules_must_be_cut_and_one_past_them_refused() {
        let reference = log();
        let all: Vec<String> = reference.iter().map(record_key).collect();
        let served = |n: usize| ProbeReply::Served {
            records: all[..n].to_vec(),
            types: vec![],
            wrong_blobs: vec![],
        };
        let damage = ProbeReply::Refused {
            at: "open".into(),
            kind: "damage".into(),
            message: "m".into(),
            events_before: None,
            events_after: None,
        };
        let group = Tail::Lines(TAIL_MAX_LINES);
        let past = Tail::Zeros(TAIL_MAX_ZERO_BYTES + 1);
        assert!(group.within_rules() && !past.within_rules());
        assert!(judge_tail("t", group, &reference, &served(3))
            .unwrap()
            .is_none());
        // The store's record of its cut after the events is its own.
        let mut types: Vec<String> = reference
            .iter()
            .map(|r| r.body.type_name().to_string())
            .collect();
        types.push("tail_quarantined".into());
        let mut records = all.clone();
        records.push("3 e3 quarantined".into());
        let recorded = ProbeReply::Served {
            records,
            types,
            wrong_blobs: vec![],
        };
        assert!(judge_tail("t", group, &reference, &recorded)
            .unwrap()
            .is_none());
        assert!(judge_tail("t", past, &reference, &damage)
            .unwrap()
            .is_none());
        // A store whose bound is one line short refuses the whole group.
        let strict = judge_tail("t, 64 line(s)", group, &reference, &damage)
            .unwrap()
            .expect("a refused torn tail is caught");
        assert_eq!(strict.invariant, Invariant::TailRules);
        assert!(
            strict.found.contains("`damage` refusal"),
            "{}",
            strict.found
        );
        assert!(strict.expected.contains("cuts it as a torn tail"));
        // One past the rules, cut without a word.
        let cut = judge_tail("t", past, &reference, &served(3))
            .unwrap()
            .unwrap();
        assert!(
            cut.found.contains("cut the appended bytes"),
            "{}",
            cut.found
        );
        assert!(cut.expected.contains("refuses with `damage`"));
        // Losing an acknowledged event fails either way.
        for tail in [group, past] {
            let lost = judge_tail("t", tail, &reference, &served(2))
                .unwrap()
                .unwrap();
            assert!(lost.found.contains("is gone"), "{}", lost.found);
        }
    }

    #[test]
    fn a_tail_is_appended_after_the_last_line() {
        let text = b"{\"crc\":\"0123abcd\",\"seq\":0}\n".to_vec();
        let mut bytes = text.clone();
        let what = Tail::Lines(20)
            .append(Path::new("log"), &mut bytes)
            .unwrap();
        let pieces: Vec<&[u8]> = bytes[text.len()..].split(|&b| b == b'\n').collect();
        assert_eq!(pieces.len(), 21, "20 newline-terminated pieces");
        assert_eq!(pieces[0], b"{");
        assert_eq!(pieces[17], b"{\"crc\":\"0123abcd\",");
        assert_eq!(pieces[18], b"{", "the lengths start again");
        assert!(what.contains("20 line(s)"), "{what}");
        let mut bytes = text.clone();
        Tail::Zeros(5).append(Path::new("log"), &mut bytes).unwrap();
        assert_eq!(&bytes[text.len()..], &[0; 5]);
        let mut bytes = text.clone();
        Tail::LostSector
            .append(Path::new("log"), &mut bytes)
            .unwrap();
        let pieces: Vec<&[u8]> = bytes[text.len()..].split(|&b| b == b'\n').collect();
        assert_eq!(pieces.len(), 3, "two newline-terminated pieces");
        let first_zeros = pieces[0].iter().take_while(|&&b| b == 0).count();
        assert_eq!(
            (text.len() + first_zeros) as u64 % SECTOR_BYTES,
            0,
            "the first piece's zeros run from its start to a sector boundary"
        );
        let second = bytes.len() - pieces[1].len() - 1;
        let zeros = second + pieces[1].iter().position(|&b| b == 0).unwrap();
        assert_eq!(
            zeros as u64 % SECTOR_BYTES,
            0,
            "the zeros start at a sector boundary"
        );
        assert_eq!(
            bytes.len(),
            zeros + SECTOR_BYTES as usize + 1,
            "one sector, then the newline"
        );
        assert!(
            pieces[1].starts_with(b"{\"crc\":\""),
            "{:?}",
            &pieces[1][..9]
        );
        assert!(Tail::Lines(1)
            .append(Path::new("log"), &mut b"no newline".to_vec())
            .is_err());
        // The harness's statement of agentstore's rules is agentstore's.
        assert_eq!(TAIL_MAX_LINES, agentstore::scan::TORN_TAIL_MAX_LINES);
        assert_eq!(
            TAIL_MAX_LINE_BYTES,
            agentstore::framing::MAX_LINE_BYTES as u64
        );
        assert_eq!(SECTOR_BYTES, agentstore::scan::SECTOR_BYTES);
        assert_eq!(TAIL_MAX_ZERO_BYTES, agentstore::scan::ZERO_TAIL_MAX_BYTES);
    }

    #[test]
    fn an_accepted_second_commit_is_a_violation() {
        let reference = log();
        for another_call in [false, true] {
            let accepted = judge_ledger(
                "op",
                &reference[2],
                another_call,
                &ProbeReply::Accepted { seq: 3 },
            )
            .unwrap()
            .expect("caught");
            assert_eq!(accepted.invariant, Invariant::LedgerRefusesDoubleCommit);
            assert!(accepted.found.contains("committed twice"));
            assert_eq!(
                accepted.expected.contains("from another call"),
                another_call,
                "{}",
                accepted.expected
            );
        }
        let refused = |kind: &str, after: u64| ProbeReply::Refused {
            at: "append".into(),
            kind: kind.into(),
            message: "m".into(),
            events_before: Some(3),
            events_after: Some(after),
        };
        assert!(
            judge_ledger("op", &reference[2], false, &refused("rule", 3))
                .unwrap()
                .is_none()
        );
        assert!(
            judge_ledger("op", &reference[2], false, &refused("rule", 4))
                .unwrap()
                .is_some()
        );
        assert!(judge_ledger("op", &reference[2], true, &refused("io", 3))
            .unwrap()
            .is_some());
    }

    #[test]
    fn a_store_may_refuse_a_size_but_never_lose_one_it_took() {
        let reply = |not_read_back: Vec<String>| ProbeReply::Limit {
            largest: 4_194_181,
            smallest_refused: Some(4_194_182),
            acknowledged: 28,
            not_read_back,
        };
        assert_eq!(judge_limit(&reply(vec![])).unwrap(), None);
        let lost = judge_limit(&reply(vec![
            "seq 37 (a 4194181-byte message) is gone".into()
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(lost.invariant, Invariant::AckedDurable);
        assert!(lost.found.contains("seq 37"), "{}", lost.found);
        let unopenable = ProbeReply::Refused {
            at: "open, after the messages were acknowledged,".into(),
            kind: "damage".into(),
            message: "no newline within 4194304 bytes".into(),
            events_before: None,
            events_after: None,
        };
        let v = judge_limit(&unopenable).unwrap().unwrap();
        assert!(v.found.contains("refused with `damage`"), "{}", v.found);
        let not_reached = ProbeReply::NotReplayed {
            message: "refused".into(),
        };
        assert_eq!(judge_limit(&not_reached).unwrap(), None);
        assert!(judge_limit(&ProbeReply::SecondOpened).is_err());
    }

    #[test]
    fn the_kept_entry_off_the_branch_is_of_another_branch_else_of_none() {
        let message = |seq: u64, parent: Option<u64>| {
            rec(
                seq,
                Event::AssistantMessage {
                    parent: parent.map(event_id),
                    text: "t".into(),
                },
            )
        };
        // e1 ← e2 and e1 ← e3 ← e4: on the branch of e4, e2 is the one off it.
        let forked = vec![
            message(1, None),
            message(2, Some(1)),
            message(3, Some(1)),
            message(4, Some(3)),
        ];
        assert_eq!(
            entry_off_branch(&forked, Some("e4")),
            ("e2".to_string(), "an entry of another branch")
        );
        // One line of entries: none is off the branch.
        assert_eq!(
            entry_off_branch(&forked[..2], Some("e2")),
            (event_id(MISSING_PARENT_SEQ), "no entry has that id")
        );
    }

    /// A run that calls a side effect, starts and commits it.
    fn side_effect_log() -> Vec<Record> {
        use agentchaos_protocol::event::Effect;
        let mut log = log();
        log.truncate(2);
        log.push(rec(
            2,
            Event::UserMessage {
                parent: None,
                text: "deploy".into(),
            },
        ));
        log.push(rec(
            3,
            Event::ToolCall {
                parent: Some(event_id(2)),
                call_id: "c".into(),
                tool: "deploy".into(),
                args: serde_json::json!({}),
                effect: Effect::SideEffect,
                operation_id: Some("op".into()),
                target: None,
                needs_approval: false,
            },
        ));
        log.push(rec(
            4,
            Event::ToolStarted {
                call_id: "c".into(),
            },
        ));
        log.push(rec(
            5,
            Event::EffectCommitted {
                call_id: "c".into(),
                operation_id: "op".into(),
                external_ref: "x".into(),
            },
        ));
        log
    }

    #[test]
    fn the_rules_probes_run_once_on_the_first_committed_operation() {
        let dir = tempfile::tempdir().unwrap();
        let reference = side_effect_log();
        let probes = plan(
            &[Capability::EffectLedger],
            dir.path(),
            None,
            &reference,
            &mut Rng::new(1),
            true,
        )
        .unwrap();
        let rules: Vec<&Probe> = probes
            .iter()
            .filter(|p| matches!(p, Probe::Rule { .. }))
            .collect();
        // The ledger's cases only: the parent rule is the tree's (`branches`).
        assert_eq!(rules.len(), RuleCase::ALL.len() - 1, "{probes:?}");
        assert!(rules
            .iter()
            .all(|p| p.capability() == Capability::EffectLedger));
        let with_tree = plan(
            &[Capability::EffectLedger, Capability::Branches],
            dir.path(),
            None,
            &reference,
            &mut Rng::new(1),
            true,
        )
        .unwrap();
        assert!(with_tree.contains(&Probe::Rule {
            case: RuleCase::ParentMissing,
            operation: "op".into()
        }));
        let at = Situation::find(&reference, "op").unwrap();
        assert_eq!((at.call, at.started, at.commit), (3, 4, 5));
        assert!(at.side_effect);
        // The replay stops before the append the rule is about.
        assert_eq!(at.replay(at.call).unwrap().len(), 2);
        // Not claimed: no rules probe.
        let none = plan(
            &[Capability::DamageRefusal],
            dir.path(),
            None,
            &reference,
            &mut Rng::new(1),
            true,
        )
        .unwrap();
        assert!(none.iter().all(|p| !matches!(p, Probe::Rule { .. })));
    }

    #[test]
    fn a_forbidden_append_accepted_or_left_in_the_log_is_a_violation() {
        let reference = side_effect_log();
        let call = &reference[3];
        let case = RuleCase::NoOperationId;
        let refused = |kind: &str, after: u64| ProbeReply::Refused {
            at: "append of tool_call".into(),
            kind: kind.into(),
            message: "m".into(),
            events_before: Some(3),
            events_after: Some(after),
        };
        assert!(judge_rule(case, "how", call, &refused("rule", 3))
            .unwrap()
            .is_none());
        let kept = judge_rule(case, "how", call, &refused("rule", 4))
            .unwrap()
            .expect("a refused event on disk after reopening");
        assert_eq!(kept.invariant, Invariant::RuleRefused);
        assert!(kept.found.contains("was written"), "{}", kept.found);
        let io = judge_rule(case, "how", call, &refused("io", 3))
            .unwrap()
            .unwrap();
        assert!(io.found.contains("`io` refusal"), "{}", io.found);
        let accepted = judge_rule(case, "how", call, &ProbeReply::Accepted { seq: 3 })
            .unwrap()
            .unwrap();
        assert!(
            accepted
                .found
                .contains("a side effect needs an operation id"),
            "{}",
            accepted.found
        );
        assert!(
            accepted.events[0].contains("tool_call c"),
            "{:?}",
            accepted.events
        );
        let not_reached = ProbeReply::NotReplayed {
            message: "m".into(),
        };
        assert!(judge_rule(case, "how", call, &not_reached)
            .unwrap()
            .is_none());
        assert!(judge_rule(case, "how", call, &ProbeReply::SecondOpened).is_err());
    }

    #[test]
    fn what_the_child_meets_is_the_stores_fault_unless_io_or_its_own() {
        let refused = |kind| ChildError::Refused {
            kind,
            message: "no".into(),
        };
        assert!(refused(ErrorKind::Locked).at("first open").store_fault());
        assert!(!refused(ErrorKind::Io).at("first open").store_fault());
        assert!(ChildError::Broken("EOF".into()).at("open").store_fault());
        assert!(!ChildError::Harness("spawn".into()).at("open").store_fault());
        assert_eq!(
            refused(ErrorKind::Locked).at("first open").to_string(),
            "the store under test failed: first open refused with `locked`: no"
        );
    }

    #[test]
    fn a_second_writer_let_in_is_a_violation_and_locked_is_not() {
        let refused = |kind: &str| ProbeReply::Refused {
            at: "second open".into(),
            kind: kind.into(),
            message: "m".into(),
            events_before: None,
            events_after: None,
        };
        assert!(judge_lock(&refused("locked")).unwrap().is_none());
        let io = judge_lock(&refused("io")).unwrap().expect("not `locked`");
        assert_eq!(io.invariant, Invariant::SecondWriterRefused);
        assert!(io.found.contains("`io` refusal"), "{}", io.found);
        let let_in = judge_lock(&ProbeReply::SecondOpened).unwrap().unwrap();
        assert!(let_in.found.contains("two writers"), "{}", let_in.found);
        assert!(judge_lock(&ProbeReply::Accepted { seq: 1 }).is_err());
    }

    #[test]
    fn a_line_based_file_is_probed_in_its_last_line_and_zeroed_over_its_last_three() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [
            "{\"a\":1}\n",
            "{\"b\":22}\n",
            "{\"c\":333}\n",
            "{\"d\":4}\n",
            "{\"e\":55}\n",
        ];
        let text = lines.concat();
        std::fs::write(dir.path().join("log"), &text).unwrap();
        let covered = (text.len() - lines[4].len()) as u64;
        let files = AgentstoreFiles {
            log: "log".into(),
            covered: Some(covered),
        };
        let probes = plan(
            &Capability::ALL,
            dir.path(),
            Some(&files),
            &[],
            &mut Rng::new(1),
            true,
        )
        .unwrap();
        let last_start = (text.len() - lines[4].len()) as u64;
        assert!(
            probes.contains(&Probe::Zeros {
                file: "log".into(),
                offset: last_start,
                len: lines[4].len() as u64,
            }),
            "the last line zeroed alone: {probes:?}"
        );
        // The newline before it flipped.
        assert!(
            probes.contains(&Probe::Damage {
                file: "log".into(),
                offset: last_start - 1,
            }),
            "the last newline but one flipped: {probes:?}"
        );
        // Its middle half (9 bytes: from 2 bytes in, 4 of them).
        assert!(
            probes.contains(&Probe::Zeros {
                file: "log".into(),
                offset: last_start + 2,
                len: 4,
            }),
            "the last line's middle zeroed: {probes:?}"
        );
        for tail in [
            Tail::Lines(TAIL_MAX_LINES),
            Tail::Lines(TAIL_MAX_LINES + 1),
            Tail::Zeros(TAIL_MAX_ZERO_BYTES),
            Tail::Zeros(TAIL_MAX_ZERO_BYTES + 1),
            Tail::LostSector,
            Tail::Unterminated(TAIL_MAX_LINE_BYTES),
            Tail::Unterminated(TAIL_MAX_LINE_BYTES + 1),
        ] {
            assert!(probes.contains(&Probe::Tail {
                file: "log".into(),
                tail
            }));
        }
        // Cut inside the fourth line, the last the snapshot covers.
        let fourth = covered - lines[3].len() as u64;
        for unreadable_snapshot in [false, true] {
            assert!(
                probes.contains(&Probe::Cut {
                    file: "log".into(),
                    len: (fourth + covered) / 2,
                    unreadable_snapshot,
                }),
                "{probes:?}"
            );
        }
        assert!(
            probes
                .iter()
                .any(|p| matches!(p, Probe::Damage { offset, .. }
                if (last_start..text.len() as u64 - 1).contains(offset))),
            "no flip in the last complete line: {probes:?}"
        );
        let zeros_from = (lines[0].len() + lines[1].len()) as u64;
        assert!(
            probes.contains(&Probe::Zeros {
                file: "log".into(),
                offset: zeros_from,
                len: text.len() as u64 - zeros_from,
            }),
            "{probes:?}"
        );
        let mut bytes = text.clone().into_bytes();
        let what = Change::Zeros(zeros_from, text.len() as u64 - zeros_from)
            .apply(Path::new("log"), &mut bytes)
            .unwrap();
        assert!(what.contains("over 3 complete line(s)"), "{what}");
        let zeroed = &bytes[zeros_from as usize..];
        assert_eq!(zeroed.iter().filter(|b| **b == b'\n').count(), 3);
        assert!(zeroed.iter().all(|b| *b == 0 || *b == b'\n'));
        assert_eq!(
            &bytes[..zeros_from as usize],
            &text.as_bytes()[..zeros_from as usize]
        );
        // A file that is not lines gets no tail probes.
        assert!(complete_lines(b"abc\ndef").is_empty());
        assert!(Change::Flip(99)
            .apply(Path::new("log"), &mut bytes)
            .is_err());
    }

    #[test]
    fn an_off_leaf_compaction_hangs_under_another_user_message_else_any_entry() {
        let user = |seq, parent: Option<Seq>| {
            rec(
                seq,
                Event::UserMessage {
                    parent: parent.map(event_id),
                    text: "u".into(),
                },
            )
        };
        let answer = rec(
            2,
            Event::AssistantMessage {
                parent: Some(event_id(1)),
                text: "a".into(),
            },
        );
        let run = rec(0, Event::RunStarted { run_id: "r".into() });
        let two_users = [run.clone(), user(1, None), answer.clone(), user(3, Some(2))];
        assert_eq!(
            entry_off_leaf(&two_users, Some(&event_id(3))),
            Some(event_id(1))
        );
        // The only user message is the leaf: the answer, an entry all the same.
        let one_user = [run.clone(), user(1, None), answer];
        assert_eq!(
            entry_off_leaf(&one_user, Some(&event_id(1))),
            Some(event_id(2))
        );
        assert_eq!(
            entry_off_leaf(&[run, user(1, None)], Some(&event_id(1))),
            None
        );
    }

    #[test]
    fn plans_every_fault_and_only_the_promises_claimed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("s")).unwrap();
        let mut bytes = vec![b'x'; 99];
        bytes.push(b'\n');
        std::fs::write(dir.path().join("s/log"), bytes).unwrap();
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        let reference = log();
        let plan_all = |store_wide| {
            plan(
                &Capability::ALL,
                dir.path(),
                None,
                &reference,
                &mut Rng::new(1),
                store_wide,
            )
            .unwrap()
        };
        let all = plan_all(true);
        assert!(!all.iter().any(|p| matches!(p, Probe::Tail { .. })));
        assert!(all.contains(&Probe::Lock));
        // The store as a whole is probed in one scenario of a campaign.
        let not_store_wide = plan_all(false);
        assert_eq!(not_store_wide.len(), all.len() - 1);
        assert!(!not_store_wide.contains(&Probe::Lock));
        let damage: Vec<&Probe> = all
            .iter()
            .filter(|p| matches!(p, Probe::Damage { .. }))
            .collect();
        // The seeded offsets and the middle of the one (last) line.
        assert!(!damage.is_empty() && damage.len() <= DAMAGE_POSITIONS + 1);
        for p in &damage {
            let Probe::Damage { file, offset } = p else {
                unreachable!()
            };
            assert_eq!(file, Path::new("s/log"));
            assert!((25..75).contains(offset), "{offset}");
        }
        for another_call in [false, true] {
            assert!(all.contains(&Probe::Ledger {
                operation: "op".into(),
                another_call,
            }));
        }
        let none = plan(
            &[Capability::DurableAppend],
            dir.path(),
            Some(&AgentstoreFiles {
                log: "s/log".into(),
                covered: Some(100),
            }),
            &reference,
            &mut Rng::new(1),
            true,
        )
        .unwrap();
        // Claims decide how a fault is judged, never whether it is applied.
        let faults: Vec<&Probe> = none.iter().filter(|p| p.is_fault()).collect();
        assert!(faults.iter().any(|p| matches!(p, Probe::Damage { .. })));
        assert!(faults.iter().any(|p| matches!(p, Probe::Zeros { .. })));
        assert!(faults.iter().any(|p| matches!(p, Probe::Cut { .. })));
        assert!(faults.iter().any(|p| matches!(p, Probe::Tail { .. })));
        let claimed = [Capability::DurableAppend];
        assert!(faults
            .iter()
            .all(|p| p.judged_by(&claimed) == Capability::DurableAppend));
        // A promise nobody made is not tried (nor the limit, owed by all:
        // this reference has no user message to start it from).
        assert!(none.iter().all(Probe::is_fault));
        assert_eq!(
            all.iter()
                .find(|p| p.is_fault())
                .unwrap()
                .judged_by(&Capability::ALL),
            Capability::DamageRefusal
        );
    }
}
