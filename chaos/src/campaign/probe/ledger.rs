//! The ledger probes (`ledger@OP`, `ledger-retry@OP`, `ledger-race@OP`):
//! an operation's commit appended a second time, from the same call or from
//! a retry under a new call id, after the first commit's ack or written
//! into the same group as the first ([`SecondCommit`]), in a fresh session
//! replaying the crash-free run; their verdict ([`judge_ledger`],
//! `ledger-refuses-double-commit`) and the child's side. It must never
//! append to the crash-free run's session.

use std::path::Path;

use agentchaos_protocol::event::{Event, Record};
use serde::{Deserialize, Serialize};

use crate::campaign::probe::child::{fail, open_replayed, read_events, refused, ChildArgs};
use crate::campaign::probe::rules::not_refused_by_rule;
use crate::campaign::probe::spawn::child_with_events;
use crate::campaign::probe::{tell, ProbeError, ProbeReply, ProbeSetup, SecondCommit};
use crate::check::{Invariant, Violation};
use crate::model::describe_record;

/// The events a ledger probe's child replays, then those it appends as the
/// probe (the last is the second commit); with `commits_in_one_group`, the
/// last two (both commits) are written as one group, the second before the
/// first is acknowledged.
#[derive(Debug, Serialize, Deserialize)]
struct LedgerEvents {
    replay: Vec<Event>,
    then: Vec<Event>,
    commits_in_one_group: bool,
}

pub(super) fn ledger(
    setup: &ProbeSetup<'_>,
    operation: &str,
    second: SecondCommit,
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
    let (events, how) = if second != SecondCommit::SameCall {
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
        let commits_in_one_group = second == SecondCommit::RetryInOneGroup;
        let commits = if commits_in_one_group {
            "both commits written into one group before either was acknowledged"
        } else {
            "both commits"
        };
        (
            LedgerEvents {
                replay,
                then,
                commits_in_one_group,
            },
            format!(
                "replaying {} event(s) up to before {}, then call {retry} with the same operation id, its intent, {commits}",
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
                commits_in_one_group: false,
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
        judge_ledger(operation, first, second, &reply)?
            .into_iter()
            .collect(),
        matches!(reply, ProbeReply::NotReplayed { .. }),
    ))
}

/// The ledger verdict: `first` is the first commit; `second`: where the
/// second one comes from.
pub fn judge_ledger(
    operation: &str,
    first: &Record,
    second: SecondCommit,
    reply: &ProbeReply,
) -> Result<Option<Violation>, ProbeError> {
    let violation = |found: String| {
        Violation {
        invariant: Invariant::LedgerRefusesDoubleCommit,
        when: match second {
            SecondCommit::SameCall => "after the crash-free run, in a fresh session replaying its events up to the first commit",
            SecondCommit::Retry => "after the crash-free run, in a fresh session replaying its events, with the operation retried under a new call id",
            SecondCommit::RetryInOneGroup => "after the crash-free run, in a fresh session replaying its events, with the operation retried under a new call id and both commits written into one group",
        }.into(),
        expected: format!(
            "a second effect_committed for operation {operation} ({}) refused with `rule`, nothing written",
            match second {
                SecondCommit::SameCall => "from the same call",
                SecondCommit::Retry => "from another call, after the first call's commit",
                SecondCommit::RetryInOneGroup => "from another call, written right after the first call's commit, before a sync covered either",
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

pub(super) fn child_ledger(args: &ChildArgs) -> Result<ProbeReply, ProbeError> {
    let events: LedgerEvents = read_events(args)?;
    let mut target = match open_replayed(args, &events.replay)? {
        Ok(target) => target,
        Err(not_replayed) => return Ok(not_replayed),
    };
    let mut last = None;
    let in_group = if events.commits_in_one_group { 2 } else { 0 };
    let (one_by_one, group) = events
        .then
        .split_at(events.then.len().saturating_sub(in_group));
    for e in one_by_one {
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
    if !group.is_empty() {
        let before = target.events().map_err(fail("events"))?.len() as u64;
        match target.write_group(group) {
            Ok(seqs) => last = seqs.last().copied(),
            Err((i, err)) => {
                let after = target.events().map_err(fail("events"))?.len() as u64;
                // The group's writes before the refused one are its own
                // to keep: what the refused write left is judged.
                return refused(
                    &format!(
                        "write {} of {} in one group ({})",
                        i + 1,
                        group.len(),
                        group[i].type_name()
                    ),
                    err,
                    Some((before + i as u64, after)),
                );
            }
        }
    }
    let seq = last.ok_or_else(|| ProbeError::Harness("the ledger probe appends nothing".into()))?;
    Ok(ProbeReply::Accepted { seq })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::probe::fixture::log;

    #[test]
    fn an_accepted_second_commit_is_a_violation() {
        let reference = log();
        for second in [
            SecondCommit::SameCall,
            SecondCommit::Retry,
            SecondCommit::RetryInOneGroup,
        ] {
            let accepted = judge_ledger(
                "op",
                &reference[2],
                second,
                &ProbeReply::Accepted { seq: 3 },
            )
            .unwrap()
            .expect("caught");
            assert_eq!(accepted.invariant, Invariant::LedgerRefusesDoubleCommit);
            assert!(accepted.found.contains("committed twice"));
            assert_eq!(
                accepted.expected.contains("from another call"),
                second != SecondCommit::SameCall,
                "{}",
                accepted.expected
            );
            assert_eq!(
                accepted.when.contains("into one group"),
                second == SecondCommit::RetryInOneGroup,
                "{}",
                accepted.when
            );
        }
        let refused = |kind: &str, after: u64| ProbeReply::Refused {
            at: "append".into(),
            kind: kind.into(),
            message: "m".into(),
            events_before: Some(3),
            events_after: Some(after),
        };
        assert!(judge_ledger(
            "op",
            &reference[2],
            SecondCommit::SameCall,
            &refused("rule", 3)
        )
        .unwrap()
        .is_none());
        assert!(judge_ledger(
            "op",
            &reference[2],
            SecondCommit::SameCall,
            &refused("rule", 4)
        )
        .unwrap()
        .is_some());
        assert!(
            judge_ledger("op", &reference[2], SecondCommit::Retry, &refused("io", 3))
                .unwrap()
                .is_some()
        );
    }
}
