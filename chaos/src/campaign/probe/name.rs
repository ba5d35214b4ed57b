//! How `agentchaos replay --plan probe:…` names a probe: [`Probe`]'s
//! `Display` and `FromStr`, each the other's inverse. A plan names files
//! relative to the store's root: this module must never accept one that
//! leads out of it.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::campaign::probe::compaction::CompactionBreak;
use crate::campaign::probe::rules::RuleCase;
use crate::campaign::probe::tail::Tail;
use crate::campaign::probe::{Probe, SecondCommit};

/// How a replay's `--plan` names a probe.
pub const PLAN_PREFIX: &str = "probe:";

impl Probe {
    /// What the probe did, as the crash point of its violations.
    pub fn crash_point(&self) -> String {
        format!("none (probe {self}, after the crash-free run)")
    }
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Probe::Damage { file, offset } => write!(f, "damage@{}:{offset}", file.display()),
            Probe::Fused { file, newline } => write!(f, "fused@{}:{newline}", file.display()),
            Probe::Zeros { file, offset, len } => {
                write!(f, "zeros@{}:{offset}+{len}", file.display())
            }
            Probe::Ledger { operation, second } => {
                let kind = match second {
                    SecondCommit::SameCall => "ledger",
                    SecondCommit::Retry => "ledger-retry",
                    SecondCommit::RetryInOneGroup => "ledger-race",
                };
                write!(f, "{kind}@{operation}")
            }
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
                "probe {s:?} is not damage@FILE:OFFSET, fused@FILE:OFFSET, zeros@FILE:OFFSET+LEN, tail@FILE:lines-N, tail@FILE:zeros-N, tail@FILE:lost-sector, tail@FILE:misplaced-zeros, tail@FILE:unterminated-N (N >= 8), cut@FILE:LEN, cut-unreadable-snapshot@FILE:LEN, ledger@OPERATION, ledger-retry@OPERATION, ledger-race@OPERATION, rule-CASE@OPERATION (CASE: {}), rule-compaction-off-leaf@EVENT_ID, rule-compaction-kept-off-branch@EVENT_ID, limit or lock",
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
            Some((kind @ ("ledger" | "ledger-retry" | "ledger-race"), op)) if !op.is_empty() => {
                Ok(Probe::Ledger {
                    operation: op.to_string(),
                    second: match kind {
                        "ledger" => SecondCommit::SameCall,
                        "ledger-retry" => SecondCommit::Retry,
                        _ => SecondCommit::RetryInOneGroup,
                    },
                })
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_round_trip_through_their_plan_form() {
        for s in [
            "damage@sessions/s/events.jsonl:120",
            "zeros@sessions/s/events.jsonl:40+62",
            "fused@sessions/s/events.jsonl:99",
            "ledger@op-deploy-1",
            "ledger-retry@op-deploy-1",
            "ledger-race@op-deploy-1",
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
}
