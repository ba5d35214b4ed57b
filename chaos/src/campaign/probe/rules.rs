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
    Ok(match not_reached(&reply, setup.claimed) {
        Some(charged) => (told, charged, true),
        None => (
            told,
            judge_rule(case, &how, &at.reference[at.call], &reply)?
                .into_iter()
                .collect(),
            false,
        ),
    })
}

/// Whether a rules probe stopped short of its rule's situation, and what
/// it then charges to the promise that broke on the way: `None` when it
/// reached the append the rule forbids. The store refused to replay its
/// own crash-free events: nothing (the trials judge that log). The session
/// lost what the store acknowledged in it (it no longer opens, or serves
/// fewer events): `acked-durable`, `durable_append`'s, whatever rule the
/// probe was about. Its `recover` did not mark the call as the situation
/// needs: `orphan-marked-uncertain` where the store claims
/// `orphan_marking`, else nothing. The violation says what the setup did,
/// not which rule was next: two probes that lose the same events are one
/// cause ([`crate::report::causes`]).
pub(super) fn not_reached(reply: &ProbeReply, claimed: &[Capability]) -> Option<Vec<Violation>> {
    let when = || {
        "after the crash-free run, in a fresh session a probe replayed its events into".to_string()
    };
    match reply {
        ProbeReply::NotReplayed { .. } => Some(vec![]),
        ProbeReply::SessionLost {
            at,
            acknowledged,
            found,
        } => Some(vec![Violation {
            invariant: Invariant::AckedDurable,
            when: when(),
            expected: format!(
                "the {acknowledged} event(s) the store acknowledged in that session served {at}"
            ),
            found: found.clone(),
            events: vec![],
        }]),
        ProbeReply::NotMarked {
            call_id,
            phase,
            found,
        } => Some(
            claimed
                .contains(&Capability::OrphanMarking)
                .then(|| Violation {
                    invariant: Invariant::OrphanMarkedUncertain,
                    when: when(),
                    expected: format!(
                        "call {call_id} had no result when the probe recovered: one tool_recovery with phase {}",
                        crate::model::phase_name(*phase)
                    ),
                    found: format!("recovery marked it {found}"),
                    events: vec![],
                })
                .into_iter()
                .collect(),
        ),
        _ => None,
    }
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
        // Not reached: [`not_reached`] charges what broke on the way.
        ProbeReply::NotReplayed { .. }
        | ProbeReply::SessionLost { .. }
        | ProbeReply::NotMarked { .. } => None,
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
            return Ok(ProbeReply::NotMarked {
                call_id: call_id.clone(),
                phase: *phase,
                found: marked.map_or("not at all".to_string(), |u| {
                    format!("with phase {}", crate::model::phase_name(u.phase))
                }),
            });
        }
    }
    if let Some(not_replayed) = replay_into(&mut target, &events.then)? {
        return Ok(not_replayed);
    }
    let before = target.events().map_err(fail("events"))?.len() as u64;
    // The creation, the replayed events and those after the recovery were
    // acknowledged: a store that serves fewer lost some before the rule.
    let acknowledged = (1 + events.replay.len() + events.then.len()) as u64;
    if before < acknowledged {
        return Ok(ProbeReply::SessionLost {
            at: "before the append the rule forbids".into(),
            acknowledged,
            found: format!("it serves {before} event(s)"),
        });
    }
    match target.append(&events.forbidden) {
        Ok(seq) => Ok(ProbeReply::Accepted { seq }),
        Err(ChildError::Refused { kind, message }) => {
            // Closed and opened again: a refused event must not be on disk.
            drop(target);
            let at = format!("append of {}", events.forbidden.type_name());
            let reopened = format!(
                "when the session was opened again after the {at} was refused with `{}`",
                kind.name()
            );
            let mut again = match Target::open(args, None) {
                Ok(again) => again,
                // What it wrote of the refused event keeps the session
                // from opening (any refusal but `not_found`): the rule's.
                Err(ChildError::Refused {
                    kind: reopen_kind,
                    message: reopen_message,
                }) if reopen_kind != ErrorKind::NotFound => {
                    return Ok(ProbeReply::Refused {
                        at: format!("open, after the {at} was refused with `{}`", kind.name()),
                        kind: reopen_kind.name().to_string(),
                        message: format!("{reopen_message} (the append's refusal: {message})"),
                        events_before: Some(before),
                        events_after: None,
                    })
                }
                // No session (a store that wrote nothing yet): what it
                // acknowledged is gone, the rule not reached.
                Err(ChildError::Refused {
                    kind: reopen_kind,
                    message: reopen_message,
                }) => {
                    return Ok(ProbeReply::SessionLost {
                        at: reopened,
                        acknowledged: before,
                        found: format!(
                            "open refused with `{}`: {reopen_message}",
                            reopen_kind.name()
                        ),
                    })
                }
                Err(e) => return Err(e.at("open again")),
            };
            let after = again.events().map_err(fail("events"))?.len() as u64;
            if after < before {
                return Ok(ProbeReply::SessionLost {
                    at: reopened,
                    acknowledged: before,
                    found: format!("it serves {after} event(s)"),
                });
            }
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

    /// A rules probe whose session no longer opens after the refused append
    /// (a store that writes nothing until the first assistant message)
    /// is not reached, and the loss is `durable_append`'s, never the rule's
    /// row; a recovery that did not mark the call is `orphan_marking`'s
    /// where claimed, else nothing; a probe that got to its append is judged.
    #[test]
    fn a_setup_that_breaks_another_promise_is_charged_to_it_and_the_rule_not_reached() {
        use crate::campaign::probe::Probe;
        let reference = side_effect_log();
        let call = &reference[3];
        let lost = ProbeReply::SessionLost {
            at: "when the session was opened again after the append of tool_call was refused with `rule`".into(),
            acknowledged: 4,
            found: "open refused with `not_found`: no session rule-probe".into(),
        };
        let every = Capability::ALL;
        let charged = not_reached(&lost, &every).expect("not reached");
        assert_eq!(charged.len(), 1, "{charged:?}");
        assert_eq!(charged[0].invariant, Invariant::AckedDurable);
        assert!(
            charged[0].expected.contains("the 4 event(s)"),
            "{:?}",
            charged[0]
        );
        assert!(charged[0].found.contains("not_found"), "{:?}", charged[0]);
        // The rule itself has nothing to say about it.
        assert!(judge_rule(RuleCase::NoOperationId, "how", call, &lost)
            .unwrap()
            .is_none());
        for case in [RuleCase::NoOperationId, RuleCase::ParentMissing] {
            let probe = Probe::Rule {
                case,
                operation: "op".into(),
            };
            assert_eq!(
                probe.charged(&charged[0], &every),
                Capability::DurableAppend
            );
            let own = judge_rule(case, "how", call, &ProbeReply::Accepted { seq: 4 })
                .unwrap()
                .unwrap();
            assert_eq!(probe.charged(&own, &every), case.capability());
        }
        let unmarked = ProbeReply::NotMarked {
            call_id: "c".into(),
            phase: agentchaos_protocol::event::Phase::Committed,
            found: "not at all".into(),
        };
        let marks = not_reached(&unmarked, &every).expect("not reached");
        assert_eq!(marks[0].invariant, Invariant::OrphanMarkedUncertain);
        assert!(
            marks[0].expected.contains("phase committed"),
            "{:?}",
            marks[0]
        );
        let no_marks = not_reached(&unmarked, &[Capability::EffectLedger]).expect("not reached");
        assert_eq!(
            no_marks,
            vec![],
            "orphan_marking not claimed: nothing charged"
        );
        let refused_own = ProbeReply::NotReplayed {
            message: "m".into(),
        };
        assert_eq!(not_reached(&refused_own, &every), Some(vec![]));
        let refused = ProbeReply::Refused {
            at: "append of tool_call".into(),
            kind: "rule".into(),
            message: "m".into(),
            events_before: Some(4),
            events_after: Some(4),
        };
        assert_eq!(not_reached(&refused, &every), None, "reached and judged");
    }
}
