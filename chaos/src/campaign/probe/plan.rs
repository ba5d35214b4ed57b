//! Which probes a crash-free run's store gets ([`plan`]): from the files
//! under its root, agentstore's log and snapshot as the harness reads them
//! in-process ([`AgentstoreFiles`]), the run's events and what the store
//! claims. It reads the store's files and must never change them.

use std::path::{Path, PathBuf};

use agentchaos_protocol::event::{event_id, Event, Record};
use agentstore::{SessionId, SessionPaths};
use serde_json::Value;

use crate::campaign::probe::compaction::{entry_off_leaf, CompactionBreak};
use crate::campaign::probe::rules::{RuleCase, Situation};
use crate::campaign::probe::tail::{
    Tail, TAIL_MAX_LINES, TAIL_MAX_LINE_BYTES, TAIL_MAX_ZERO_BYTES,
};
use crate::campaign::probe::{complete_lines, Probe, ProbeError, SecondCommit, SECTOR_BYTES};
use crate::scenario::rng::Rng;
use crate::store::adapter::Capability;
use crate::store::SessionSpec;

/// Bytes damaged per file, one probe each.
pub const DAMAGE_POSITIONS: usize = 3;

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
        // Two commits in one group need writes whose acks are deferred,
        // which only agentstore in-process has (`SecondCommit::RetryInOneGroup`).
        let seconds: &[SecondCommit] = if agentstore.is_some() {
            &[
                SecondCommit::SameCall,
                SecondCommit::Retry,
                SecondCommit::RetryInOneGroup,
            ]
        } else {
            &[SecondCommit::SameCall, SecondCommit::Retry]
        };
        for r in reference {
            if let Some(Event::EffectCommitted { operation_id, .. }) = r.event() {
                for &second in seconds {
                    let p = Probe::Ledger {
                        operation: operation_id.clone(),
                        second,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::probe::damage::Change;
    use crate::campaign::probe::fixture::{log, side_effect_log};

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
        for second in [SecondCommit::SameCall, SecondCommit::Retry] {
            assert!(all.contains(&Probe::Ledger {
                operation: "op".into(),
                second,
            }));
        }
        // Not through an adapter: it acknowledges every write before the next.
        assert!(!all.contains(&Probe::Ledger {
            operation: "op".into(),
            second: SecondCommit::RetryInOneGroup,
        }));
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
