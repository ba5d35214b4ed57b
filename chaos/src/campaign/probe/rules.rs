//! The session-rule probes (`rule-CASE@OP`): the [`RuleCase`]s, set up on
//! the situation of an operation's first commit in a fresh session, the
//! one append each forbids, and the verdict ([`judge_rule`],
//! `rule-refused`) the compaction probes share. The child's side replays,
//! recovers where the rule is about a restart, appends, and opens the
//! session again to see that a refused event is not on disk. It works in a
//! fresh session only.

use std::path::Path;

use agentchaos_protocol::event::{event_id, Event, Record};
use serde::{Deserialize, Serialize};

use crate::campaign::probe::child::{
    fail, open_replayed, read_events, refused, replay_into, ChildArgs, ChildError, Target,
};
use crate::campaign::probe::spawn::{child_with_events, replay_events};
use crate::campaign::probe::{tell, ProbeError, ProbeReply, ProbeSetup};
use crate::check::{Invariant, Violation};
use crate::model::describe_record;
use crate::store::adapter::{Capability, ErrorKind};

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

    pub(super) fn from_name(name: &str) -> Option<RuleCase> {
        RuleCase::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// Where the first commit of an operation sits in the crash-free run.
pub(super) struct Situation<'a> {
    pub(super) operation: String,
    call_id: String,
    /// Indexes into the reference: the call's `tool_call`, its first
    /// `tool_started` after it, the commit.
    pub(super) call: usize,
    pub(super) started: usize,
    pub(super) commit: usize,
    pub(super) side_effect: bool,
    reference: &'a [Record],
}

impl<'a> Situation<'a> {
    pub(super) fn find(
        reference: &'a [Record],
        operation: &str,
    ) -> Result<Situation<'a>, ProbeError> {
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

    pub(super) fn replay(&self, end: usize) -> Result<Vec<Event>, ProbeError> {
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
pub(super) struct RuleEvents {
    pub(super) replay: Vec<Event>,
    /// Recover after the replay; this call must come out marked with this phase.
    pub(super) recover: Option<(String, agentchaos_protocol::event::Phase)>,
    pub(super) then: Vec<Event>,
    pub(super) forbidden: Event,
}

pub(super) fn rule(
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

/// A seq past the end of any log the harness writes: the parent the
/// `parent-missing` rule probe names.
pub(super) const MISSING_PARENT_SEQ: u64 = 999_999_999;

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
pub(super) fn judge_rule_text(
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
pub(super) fn not_refused_by_rule(
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

pub(super) fn child_rule(args: &ChildArgs) -> Result<ProbeReply, ProbeError> {
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
    use crate::campaign::probe::fixture::side_effect_log;

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
}
