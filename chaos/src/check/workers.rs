//! The many-workers invariants: what a store that claims `lease` owes
//! when its owners are paused, killed and taken over
//! (`chaos/PROTOCOL.md`, section 9). Each judges the campaign's history
//! ([`WorkerEvent`]s, in the order the store served them) and the world's
//! record of applied effects; none runs anything.

use std::collections::BTreeMap;

use agentchaos_protocol::event::{Event, Phase, Record};
use agentchaos_protocol::message::LeaseGrant;

use crate::agent::worker::{workload_operations, AppliedEffect, WorkerReply};
use crate::history::{FinalLog, WorkerEvent};

mod transitions;

/// The invariants, by stable name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkerInvariant {
    /// No event, intent, effect commit or renewal of a fenced epoch is
    /// accepted after a takeover.
    FencedEpochRefused,
    /// At most one live owner per session at any instant, by the grants
    /// and renewals the store itself issued (its clock).
    OneLiveOwner,
    /// Every effect applied at most once across all workers.
    EffectOnceAcrossWorkers,
    /// Every takeover marks the previous owner's orphans uncertain (with
    /// their phase) and closes its run before the new owner acts.
    TakeoverMarksOrphans,
    /// Every event (effect commits included) acknowledged to a worker
    /// under the session's current epoch is in the log at its seq, in
    /// order, at every later grant and in the final log: after every
    /// takeover and every database crash.
    AckedSurviveTakeover,
    /// Every session's workload is done: its final owner's writes all
    /// acknowledged up to its `done`, every effect of the workload applied
    /// (at least once: more is effect-once-across-workers'), unless the
    /// history names the strike that stopped it.
    WorkCompletes,
}

impl WorkerInvariant {
    pub const ALL: [WorkerInvariant; 6] = [
        WorkerInvariant::FencedEpochRefused,
        WorkerInvariant::OneLiveOwner,
        WorkerInvariant::EffectOnceAcrossWorkers,
        WorkerInvariant::TakeoverMarksOrphans,
        WorkerInvariant::AckedSurviveTakeover,
        WorkerInvariant::WorkCompletes,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WorkerInvariant::FencedEpochRefused => "fenced-epoch-refused",
            WorkerInvariant::OneLiveOwner => "one-live-owner",
            WorkerInvariant::EffectOnceAcrossWorkers => "effect-once-across-workers",
            WorkerInvariant::TakeoverMarksOrphans => "takeover-marks-orphans",
            WorkerInvariant::AckedSurviveTakeover => "acked-survive-takeover",
            WorkerInvariant::WorkCompletes => "work-completes",
        }
    }
}

/// One broken promise, explained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerViolation {
    pub invariant: WorkerInvariant,
    pub session: String,
    pub expected: String,
    pub found: String,
    /// The observations it rests on, one line each.
    pub events: Vec<String>,
}

/// Every violation the history shows.
pub fn check(history: &[WorkerEvent], effects: &[AppliedEffect]) -> Vec<WorkerViolation> {
    let mut out = fenced_epoch_refused(history);
    out.extend(one_live_owner(history));
    out.extend(transitions::one_holder_per_epoch(history));
    out.extend(transitions::acked_close_ends_lease(history));
    out.extend(effect_once_across_workers(effects));
    out.extend(takeover_marks_orphans(history));
    out.extend(acked_survive_takeover(history));
    out.extend(work_completes(history, effects));
    out
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Requested => "requested",
        Phase::Started => "started",
        Phase::Committed => "committed",
    }
}

fn grant_line(worker: &str, g: &LeaseGrant) -> String {
    format!(
        "{worker} holds epoch {} from {} to {} ms (store clock)",
        g.epoch, g.granted_at_ms, g.expires_at_ms
    )
}

fn fenced_epoch_refused(history: &[WorkerEvent]) -> Vec<WorkerViolation> {
    // The latest takeover of each session: (epoch, who, line).
    let mut latest: BTreeMap<&str, (u64, String)> = BTreeMap::new();
    let mut out: Vec<WorkerViolation> = Vec::new();
    // One violation per fenced owner: its first accepted write, the rest counted.
    let mut reported: BTreeMap<(&str, &str, u64), usize> = BTreeMap::new();
    // Workers with a write in flight across a cut link, by session.
    let mut in_flight: std::collections::BTreeSet<(&str, &str)> = Default::default();
    for event in history {
        match event {
            WorkerEvent::InFlight { worker, session } => {
                in_flight.insert((worker, session));
            }
            WorkerEvent::Granted {
                worker,
                session,
                grant,
                ..
            } => {
                let newer = latest
                    .get(session.as_str())
                    .is_none_or(|(e, _)| grant.epoch > *e);
                if newer {
                    latest.insert(session, (grant.epoch, grant_line(worker, grant)));
                }
            }
            WorkerEvent::Replied {
                worker,
                session,
                reply,
            } => {
                let accepted = match reply {
                    WorkerReply::Acked { epoch, seq, what } => {
                        Some((*epoch, format!("acknowledged {what} at seq {seq}")))
                    }
                    WorkerReply::Renewed { grant } => {
                        Some((grant.epoch, "renewed its lease".to_string()))
                    }
                    WorkerReply::Applied {
                        epoch,
                        operation_id,
                        ..
                    } => Some((
                        *epoch,
                        format!("renewed its lease, and the worker applied {operation_id}"),
                    )),
                    _ => None,
                };
                let sent_cut_off = in_flight.remove(&(worker.as_str(), session.as_str()));
                let (Some((epoch, mut what)), Some((current, taken))) =
                    (accepted, latest.get(session.as_str()))
                else {
                    continue;
                };
                if sent_cut_off {
                    what.push_str(" (sent while its link was cut, before the takeover)");
                }
                if epoch < *current {
                    if let Some(&at) = reported.get(&(session.as_str(), worker.as_str(), epoch)) {
                        out[at].events.push(format!("then {worker}: {what}"));
                        continue;
                    }
                    reported.insert((session, worker, epoch), out.len());
                    out.push(WorkerViolation {
                        invariant: WorkerInvariant::FencedEpochRefused,
                        session: session.clone(),
                        expected: format!(
                            "every write of {worker} at epoch {epoch} refused with fenced once session {session} was taken over at epoch {current}"
                        ),
                        found: format!("the store {what} for {worker} at epoch {epoch}"),
                        events: vec![format!("takeover: {taken}"), format!("then {worker}: {what}")],
                    });
                }
            }
            _ => {}
        }
    }
    out
}

fn one_live_owner(history: &[WorkerEvent]) -> Vec<WorkerViolation> {
    // Every interval the store granted, per session: (holder, grant). A
    // holder is one process: a worker restarted under its id is another.
    let mut held: BTreeMap<&str, Vec<(String, &LeaseGrant)>> = BTreeMap::new();
    let mut lives: BTreeMap<&str, usize> = BTreeMap::new();
    // An acknowledged close ends its holder's intervals of the session:
    // (session, holder) -> the grants made before it.
    let mut closed: BTreeMap<(&str, String), usize> = BTreeMap::new();
    let holder_of =
        |lives: &BTreeMap<&str, usize>, worker: &String| match lives.get(worker.as_str()) {
            Some(life) => format!("{worker} (life {life})"),
            None => worker.clone(),
        };
    for event in history {
        if let WorkerEvent::Restarted { worker } = event {
            *lives.entry(worker).or_insert(1) += 1;
        }
        if let WorkerEvent::Replied {
            worker,
            session,
            reply: WorkerReply::Closed,
        } = event
        {
            let before = held.get(session.as_str()).map_or(0, Vec::len);
            closed.insert((session, holder_of(&lives, worker)), before);
        }
        let (worker, session, grant) = match event {
            WorkerEvent::Granted {
                worker,
                session,
                grant,
                ..
            } => (worker, session, grant),
            WorkerEvent::Replied {
                worker,
                session,
                reply: WorkerReply::Renewed { grant } | WorkerReply::Applied { renewed: grant, .. },
            } => (worker, session, grant),
            _ => continue,
        };
        let holder = holder_of(&lives, worker);
        held.entry(session).or_default().push((holder, grant));
    }
    let mut out = Vec::new();
    for (session, grants) in held {
        'pairs: for (i, (wa, a)) in grants.iter().enumerate() {
            // Grants after `wa` closed the session come after its lease.
            let ended = closed
                .get(&(session, wa.clone()))
                .copied()
                .filter(|&before| before > i)
                .unwrap_or(usize::MAX);
            for (wb, b) in &grants[i + 1..ended.max(i + 1).min(grants.len())] {
                let overlap =
                    a.granted_at_ms < b.expires_at_ms && b.granted_at_ms < a.expires_at_ms;
                // Two holders of one epoch are two owners as much as two epochs are.
                if overlap && (a.epoch != b.epoch || wa != wb) {
                    let (first, second) = if a.epoch < b.epoch {
                        ((wa, a), (wb, b))
                    } else {
                        ((wb, b), (wa, a))
                    };
                    let expected = if a.epoch == b.epoch {
                        format!(
                            "one holder of epoch {} of session {session} at a time: {} granted it only after {}'s lease expired ({} ms by the store's clock)",
                            a.epoch, wb, wa, a.expires_at_ms
                        )
                    } else {
                        format!(
                            "epoch {} of session {session} live only after epoch {}'s lease expired ({} ms by the store's clock)",
                            second.1.epoch, first.1.epoch, first.1.expires_at_ms
                        )
                    };
                    out.push(WorkerViolation {
                        invariant: WorkerInvariant::OneLiveOwner,
                        session: session.to_string(),
                        expected,
                        found: format!(
                            "two live owners from {} to {} ms",
                            a.granted_at_ms.max(b.granted_at_ms),
                            a.expires_at_ms.min(b.expires_at_ms)
                        ),
                        events: vec![grant_line(first.0, first.1), grant_line(second.0, second.1)],
                    });
                    break 'pairs;
                }
            }
        }
    }
    out
}

fn effect_once_across_workers(effects: &[AppliedEffect]) -> Vec<WorkerViolation> {
    let mut by_op: BTreeMap<&str, Vec<&AppliedEffect>> = BTreeMap::new();
    for e in effects {
        by_op.entry(&e.operation_id).or_default().push(e);
    }
    by_op
        .into_iter()
        .filter(|(_, applied)| applied.len() > 1)
        .map(|(op, applied)| WorkerViolation {
            invariant: WorkerInvariant::EffectOnceAcrossWorkers,
            session: applied[0].session.clone(),
            expected: format!("operation {op} applied to the world at most once"),
            found: format!("applied {} times", applied.len()),
            events: applied
                .iter()
                .map(|e| format!("{} applied {op} at epoch {}", e.worker_id, e.epoch))
                .collect(),
        })
        .collect()
}

fn takeover_marks_orphans(history: &[WorkerEvent]) -> Vec<WorkerViolation> {
    let mut out = Vec::new();
    for event in history {
        let WorkerEvent::Granted {
            worker,
            session,
            grant,
            records,
        } = event
        else {
            continue;
        };
        let view = crate::model::oracle::projection(records);
        let at = |what: String| WorkerViolation {
            invariant: WorkerInvariant::TakeoverMarksOrphans,
            session: session.clone(),
            expected: String::new(),
            found: what,
            events: vec![format!(
                "{} ({} events served after the grant)",
                grant_line(worker, grant),
                records.len()
            )],
        };
        if let Some(run) = &view.open_run {
            out.push(WorkerViolation {
                expected: format!(
                    "run {run}, left open by the previous owner, interrupted before {worker} acts at epoch {}",
                    grant.epoch
                ),
                ..at(format!("run {run} still open after the grant"))
            });
        }
        for (call_id, first, again) in marked_twice(records) {
            out.push(WorkerViolation {
                expected: format!(
                    "call {call_id} marked uncertain once for its attempt: a recovery marks only what no recovery marked before (a takeover after one that died halfway goes on from its marks)"
                ),
                ..at(format!(
                    "call {call_id} marked at seq {first} and again at seq {again}, no event of the call between them"
                ))
            });
        }
        for call in &view.open_calls {
            if call.recovery != Some(call.phase) {
                out.push(WorkerViolation {
                    expected: format!(
                        "call {} (no result: an orphan of the previous owner) marked uncertain with phase {} before {worker} acts at epoch {}",
                        call.call_id,
                        phase_name(call.phase),
                        grant.epoch
                    ),
                    ..at(match call.recovery {
                        None => format!("no tool_recovery for call {}", call.call_id),
                        Some(p) => format!("call {} marked with phase {}", call.call_id, phase_name(p)),
                    })
                });
            }
        }
    }
    out
}

/// The calls `records` mark uncertain twice for one attempt: a
/// `tool_recovery` at the first seq and another at the second, with no
/// event of the call between them (no new start, result or
/// reconciliation).
fn marked_twice(records: &[Record]) -> Vec<(String, u64, u64)> {
    let mut last_mark: BTreeMap<&str, u64> = BTreeMap::new();
    let mut out = Vec::new();
    for r in records {
        let Some(event) = r.event() else { continue };
        let call = match event {
            Event::ToolCall { call_id, .. }
            | Event::ToolStarted { call_id }
            | Event::EffectCommitted { call_id, .. }
            | Event::ToolResult { call_id, .. }
            | Event::ToolReconciled { call_id, .. }
            | Event::Approval { call_id, .. } => call_id,
            Event::ToolRecovery { call_id, .. } => {
                if let Some(first) = last_mark.insert(call_id, r.seq) {
                    out.push((call_id.clone(), first, r.seq));
                }
                continue;
            }
            _ => continue,
        };
        last_mark.remove(call.as_str());
    }
    out
}

/// One acknowledgement the store owes: `what` at `seq`, to `worker` under `epoch`.
struct Owed<'a> {
    worker: &'a str,
    epoch: u64,
    seq: u64,
    what: &'a str,
}

/// What the store served of a session's log: its records, or what it
/// gave instead of any.
enum Found<'a> {
    Records(&'a [Record]),
    NoLog(String),
}

/// The first acknowledged event `records` does not hold at its seq.
fn first_missing<'a, 'o>(
    owed: &'o [Owed<'a>],
    records: &[Record],
) -> Option<(&'o Owed<'a>, String)> {
    owed.iter().find_map(|o| {
        match records
            .iter()
            .find(|r| r.seq == o.seq)
            .map(|r| r.body.type_name())
        {
            Some(what) if what == o.what => None,
            Some(what) => Some((o, format!("{what} at seq {}", o.seq))),
            None => Some((
                o,
                format!("nothing at seq {} ({} records)", o.seq, records.len()),
            )),
        }
    })
}

fn acked_survive_takeover(history: &[WorkerEvent]) -> Vec<WorkerViolation> {
    let mut current: BTreeMap<&str, u64> = BTreeMap::new();
    let mut owed: BTreeMap<&str, Vec<Owed>> = BTreeMap::new();
    // What happened to the session since its first acknowledgement, for the report.
    let mut story: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut broken: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    // `log`: the records served, or what was found instead of any.
    let judge = |session: &str,
                 log: Found<'_>,
                 when: String,
                 owed: &BTreeMap<&str, Vec<Owed>>,
                 story: &BTreeMap<&str, Vec<String>>| {
        let owed = owed.get(session)?;
        let (o, found) = match log {
            Found::Records(records) => first_missing(owed, records)?,
            Found::NoLog(found) => (owed.first()?, found),
        };
        let mut events = story.get(session).cloned().unwrap_or_default();
        events.push(when.clone());
        Some(WorkerViolation {
            invariant: WorkerInvariant::AckedSurviveTakeover,
            session: session.to_string(),
            expected: format!(
                "{} at seq {}, acknowledged to {} at epoch {} (then current), in the log {when}",
                o.what, o.seq, o.worker, o.epoch
            ),
            found: format!("{found}; {} acknowledged event(s) owed in all", owed.len()),
            events,
        })
    };
    for event in history {
        match event {
            WorkerEvent::Granted {
                worker,
                session,
                grant,
                records,
            } => {
                let e = current.entry(session).or_insert(0);
                *e = (*e).max(grant.epoch);
                if !broken.contains(session.as_str()) {
                    let when = format!("served to {worker} at its grant of epoch {}", grant.epoch);
                    if let Some(v) = judge(session, Found::Records(records), when, &owed, &story) {
                        broken.insert(session);
                        out.push(v);
                    }
                }
                story
                    .entry(session)
                    .or_default()
                    .push(grant_line(worker, grant));
            }
            WorkerEvent::Replied {
                worker,
                session,
                reply: WorkerReply::Acked { epoch, seq, what },
            } if current.get(session.as_str()) == Some(epoch) => {
                owed.entry(session).or_default().push(Owed {
                    worker,
                    epoch: *epoch,
                    seq: *seq,
                    what,
                });
            }
            WorkerEvent::DatabaseCrashed { model } => {
                for lines in story.values_mut() {
                    lines.push(format!(
                        "the database server crashed ({model}) and restarted"
                    ));
                }
            }
            WorkerEvent::Final { session, log } if !broken.contains(session.as_str()) => {
                let log = match log {
                    FinalLog::Served(records) => Found::Records(records.as_slice()),
                    FinalLog::Missing => Found::NoLog("no such session".to_string()),
                    FinalLog::Unreadable(why) => {
                        Found::NoLog(format!("the store cannot serve the log: {why}"))
                    }
                };
                let when = "at the end (every worker gone, its lease expired)".to_string();
                if let Some(v) = judge(session, log, when, &owed, &story) {
                    broken.insert(session);
                    out.push(v);
                }
            }
            _ => {}
        }
    }
    out
}

/// One line for a reply that ended a worker's part in a session.
fn reply_line(worker: &str, reply: &WorkerReply) -> String {
    match reply {
        WorkerReply::Fenced {
            epoch,
            what,
            message,
        } => format!("{worker}: {what} at epoch {epoch} refused with fenced: {message}"),
        WorkerReply::Failed { what, message } => format!("{worker}: {what} failed: {message}"),
        WorkerReply::Done => format!("{worker}: done"),
        other => format!("{worker}: {other:?}"),
    }
}

fn work_completes(history: &[WorkerEvent], effects: &[AppliedEffect]) -> Vec<WorkerViolation> {
    let mut out = Vec::new();
    for event in history {
        let WorkerEvent::Final { session, .. } = event else {
            continue;
        };
        let excused = history
            .iter()
            .any(|e| matches!(e, WorkerEvent::GaveUp { session: s, .. } if s == session));
        if excused {
            // The campaign reports which strike stopped it.
            continue;
        }
        // The final owner: the session's grant at the highest epoch (the
        // last of them). A grant's reply can reach the harness after a
        // newer one's: a takeover held after its commit is recorded when
        // it is let go.
        let Some((at, owner, grant)) = history
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                WorkerEvent::Granted {
                    worker,
                    session: s,
                    grant,
                    ..
                } if s == session => Some((i, worker.as_str(), grant)),
                _ => None,
            })
            .max_by_key(|&(i, _, grant)| (grant.epoch, i))
        else {
            continue;
        };
        let last = history[at + 1..].iter().rev().find_map(|e| match e {
            WorkerEvent::Replied {
                worker,
                session: s,
                reply,
            } if s == session && worker == owner => Some(reply),
            _ => None,
        });
        let mut events = vec![grant_line(owner, grant)];
        let mut found = Vec::new();
        // Another worker's open refused after that grant: no takeover.
        let mut refusals = Vec::new();
        for e in &history[at + 1..] {
            if let WorkerEvent::Replied {
                worker,
                session: s,
                reply: reply @ WorkerReply::Failed { what, .. },
            } = e
            {
                if s == session && worker != owner && what == "open" {
                    refusals.push(format!("then {}", reply_line(worker, reply)));
                    found.push(format!("the store refused {worker}'s takeover"));
                }
            }
        }
        match last {
            Some(WorkerReply::Done) => {}
            Some(reply) => {
                events.push(format!("its last reply: {}", reply_line(owner, reply)));
                found.push(match reply {
                    WorkerReply::Fenced { what, .. } => {
                        format!("the store refused {owner}'s {what} with fenced, no one else holding the session")
                    }
                    WorkerReply::Failed { what, .. } => {
                        format!("{owner}'s {what} failed")
                    }
                    _ => format!("{owner} never reported done"),
                });
            }
            None => found.push(format!("{owner} never wrote after its grant")),
        }
        events.extend(refusals);
        let operations = workload_operations(session);
        let missing: Vec<&String> = operations
            .iter()
            .filter(|op| !effects.iter().any(|e| &e.operation_id == *op))
            .collect();
        if !missing.is_empty() {
            found.push(format!(
                "{} of {} effects applied ({} missing)",
                operations.len() - missing.len(),
                operations.len(),
                missing
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if found.is_empty() {
            continue;
        }
        out.push(WorkerViolation {
            invariant: WorkerInvariant::WorkCompletes,
            session: session.clone(),
            expected: format!(
                "session {session}'s workload finished by its final owner {owner} (epoch {}): every write acknowledged up to done, each of its {} effects applied",
                grant.epoch,
                operations.len()
            ),
            found: found.join("; "),
            events,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(epoch: u64, from: u64, to: u64) -> LeaseGrant {
        LeaseGrant {
            worker_id: format!("w{epoch}"),
            epoch,
            granted_at_ms: from,
            expires_at_ms: to,
        }
    }

    fn granted(worker: &str, g: LeaseGrant) -> WorkerEvent {
        WorkerEvent::Granted {
            worker: worker.into(),
            session: "s0".into(),
            grant: g,
            records: Vec::new(),
        }
    }

    fn replied(worker: &str, reply: WorkerReply) -> WorkerEvent {
        WorkerEvent::Replied {
            worker: worker.into(),
            session: "s0".into(),
            reply,
        }
    }

    /// A served record of `event` at `seq`.
    fn record(seq: u64, event: Event) -> Record {
        use agentchaos_protocol::event::{event_id, Body};
        Record {
            seq,
            id: event_id(seq),
            ts: String::new(),
            redaction: Default::default(),
            body: Body::Known(event),
        }
    }

    #[test]
    fn a_write_of_an_older_epoch_after_a_takeover_is_a_violation_and_before_it_is_not() {
        let ack = |epoch| WorkerReply::Acked {
            epoch,
            seq: 5,
            what: "effect_committed".into(),
        };
        let fine = [
            granted("w0", grant(1, 0, 10)),
            replied("w0", ack(1)),
            granted("w1", grant(2, 20, 30)),
            replied("w1", ack(2)),
        ];
        assert!(fenced_epoch_refused(&fine).is_empty());
        let mut broken = fine.to_vec();
        broken.push(replied("w0", ack(1)));
        let v = fenced_epoch_refused(&broken);
        assert_eq!(v.len(), 1);
        assert!(
            v[0].found
                .contains("acknowledged effect_committed at seq 5"),
            "{v:?}"
        );
    }

    #[test]
    fn a_write_in_flight_across_a_cut_is_named_when_accepted() {
        let history = [
            granted("w0", grant(1, 0, 10)),
            WorkerEvent::Partitioned {
                worker: "w0".into(),
            },
            WorkerEvent::InFlight {
                worker: "w0".into(),
                session: "s0".into(),
            },
            granted("w1", grant(2, 20, 30)),
            WorkerEvent::Healed {
                worker: "w0".into(),
            },
            replied(
                "w0",
                WorkerReply::Acked {
                    epoch: 1,
                    seq: 4,
                    what: "effect_committed".into(),
                },
            ),
        ];
        let v = fenced_epoch_refused(&history);
        assert!(
            v[0].found.contains(
                "acknowledged effect_committed at seq 4 (sent while its link was cut, before the takeover)"
            ),
            "{v:?}"
        );
    }

    #[test]
    fn overlapping_grants_of_two_epochs_are_two_live_owners() {
        let apart = [
            granted("w0", grant(1, 0, 10)),
            granted("w1", grant(2, 10, 20)),
        ];
        assert!(one_live_owner(&apart).is_empty());
        let overlapping = [
            granted("w0", grant(1, 0, 10)),
            granted("w1", grant(2, 9, 20)),
        ];
        let v = one_live_owner(&overlapping);
        assert_eq!(v.len(), 1);
        assert!(v[0].found.contains("from 9 to 10 ms"), "{v:?}");
    }

    #[test]
    fn two_holders_of_the_same_epoch_are_two_live_owners() {
        // One holder renewing its own epoch: one owner.
        let renewed = [
            granted("w0", grant(1, 0, 10)),
            granted("w0", grant(1, 5, 15)),
        ];
        assert!(one_live_owner(&renewed).is_empty());
        let shared = [
            granted("w0", grant(1, 0, 10)),
            granted("w1", grant(1, 5, 15)),
        ];
        let v = one_live_owner(&shared);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].expected.starts_with("one holder of epoch 1 of session s0 at a time: w1 granted it only after w0's lease expired (10 ms"),
            "{v:?}"
        );
        assert!(v[0].found.contains("from 5 to 10 ms"), "{v:?}");
    }

    #[test]
    fn a_workload_left_undone_is_a_violation_unless_a_strike_stopped_it() {
        let applied = |op: &str| AppliedEffect {
            session: "s0".into(),
            operation_id: op.into(),
            worker_id: "w1".into(),
            epoch: 2,
        };
        let all: Vec<AppliedEffect> = workload_operations("s0")
            .iter()
            .map(|op| applied(op))
            .collect();
        let fin = WorkerEvent::Final {
            session: "s0".into(),
            log: FinalLog::Served(Vec::new()),
        };
        let done = [
            granted("w0", grant(1, 0, 10)),
            granted("w1", grant(2, 20, 30)),
            replied("w1", WorkerReply::Done),
            replied(
                "w0",
                WorkerReply::Fenced {
                    epoch: 1,
                    what: "tool_started".into(),
                    message: "taken over".into(),
                },
            ),
            fin.clone(),
        ];
        assert!(work_completes(&done, &all).is_empty());
        // The final owner refused, nothing applied.
        let refused = [
            granted("w0", grant(1, 0, 10)),
            replied(
                "w0",
                WorkerReply::Fenced {
                    epoch: 1,
                    what: "run_started".into(),
                    message: "refused".into(),
                },
            ),
            fin.clone(),
        ];
        let v = work_completes(&refused, &[]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].found
                .starts_with("the store refused w0's run_started with fenced")
                && v[0].found.contains("0 of 3 effects applied"),
            "{v:?}"
        );
        // Done, but an effect never applied.
        let v = work_completes(&done, &all[1..]);
        assert!(
            v[0].found
                .contains("2 of 3 effects applied (op-s0-0 missing)"),
            "{v:?}"
        );
        // A strike that stopped the session is the campaign's to report.
        let mut gave_up = refused.to_vec();
        gave_up.insert(
            2,
            WorkerEvent::GaveUp {
                session: "s0".into(),
                strike: "db-crash:kill@4".into(),
                why: "not_found".into(),
            },
        );
        assert!(work_completes(&gave_up, &[]).is_empty());
    }

    /// A grant's reply recorded after a newer grant's (a takeover held
    /// after its commit, let go later) does not make its holder the final
    /// owner: the highest epoch does.
    #[test]
    fn the_final_owner_is_the_highest_epoch_whatever_order_the_grants_were_recorded_in() {
        let all: Vec<AppliedEffect> = workload_operations("s0")
            .iter()
            .map(|op| AppliedEffect {
                session: "s0".into(),
                operation_id: op.clone(),
                worker_id: "w2".into(),
                epoch: 3,
            })
            .collect();
        let fenced = WorkerReply::Fenced {
            epoch: 2,
            what: "run_started".into(),
            message: "taken over".into(),
        };
        let history = [
            granted("w0", grant(1, 0, 10)),
            granted("w2", grant(3, 40, 50)),
            replied("w2", WorkerReply::Done),
            granted("w1", grant(2, 20, 30)),
            replied("w1", fenced),
            WorkerEvent::Final {
                session: "s0".into(),
                log: FinalLog::Served(Vec::new()),
            },
        ];
        assert!(work_completes(&history, &all).is_empty());
        // Recorded in epoch order, the same verdict.
        let mut ordered = history.to_vec();
        ordered.swap(1, 3);
        ordered.swap(2, 4);
        assert!(work_completes(&ordered, &all).is_empty());
    }

    #[test]
    fn a_call_marked_twice_without_an_event_of_it_between_is_named() {
        use agentchaos_protocol::event::RecoveryStatus;
        let mark = |call: &str| Event::ToolRecovery {
            call_id: call.into(),
            status: RecoveryStatus::Uncertain,
            phase: Phase::Started,
        };
        let started = |call: &str| Event::ToolStarted {
            call_id: call.into(),
        };
        // c1 marked, started again, marked again: two attempts, once each.
        let once = vec![
            record(1, mark("c1")),
            record(2, mark("c2")),
            record(3, started("c1")),
            record(4, mark("c1")),
        ];
        assert!(marked_twice(&once).is_empty());
        let twice = vec![
            record(1, mark("c1")),
            record(2, mark("c2")),
            record(3, mark("c1")),
        ];
        assert_eq!(marked_twice(&twice), [("c1".to_string(), 1, 3)]);
    }

    #[test]
    fn an_operation_applied_twice_names_both_workers() {
        let e = |w: &str, epoch| AppliedEffect {
            session: "s0".into(),
            operation_id: "op-s0-1".into(),
            worker_id: w.into(),
            epoch,
        };
        assert!(effect_once_across_workers(&[e("w0", 1)]).is_empty());
        let v = effect_once_across_workers(&[e("w0", 1), e("w1", 2)]);
        assert_eq!(v[0].events.len(), 2);
    }

    #[test]
    fn an_acknowledged_event_missing_after_a_takeover_is_a_violation() {
        let started = Event::RunStarted {
            run_id: "r1".into(),
        };
        let ack = |epoch, seq| WorkerReply::Acked {
            epoch,
            seq,
            what: "run_started".into(),
        };
        let kept = vec![record(1, started.clone())];
        let history = |records: Vec<Record>| {
            vec![
                granted("w0", grant(1, 0, 10)),
                replied("w0", ack(1, 1)),
                WorkerEvent::DatabaseCrashed {
                    model: "kill".into(),
                },
                WorkerEvent::Granted {
                    worker: "w0".into(),
                    session: "s0".into(),
                    grant: grant(2, 20, 30),
                    records,
                },
            ]
        };
        assert!(acked_survive_takeover(&history(kept.clone())).is_empty());
        let v = acked_survive_takeover(&history(Vec::new()));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].found.starts_with("nothing at seq 1"), "{v:?}");
        assert!(
            v[0].events.iter().any(|e| e.contains("crashed (kill)")),
            "{v:?}"
        );
        // A fenced epoch's ack is fenced-epoch-refused's to report, not owed.
        let mut fenced = history(kept);
        fenced.push(replied("w1", ack(1, 2)));
        fenced.push(WorkerEvent::Final {
            session: "s0".into(),
            log: FinalLog::Served(vec![record(1, started)]),
        });
        assert!(acked_survive_takeover(&fenced).is_empty());
        let mut gone = history(vec![record(
            1,
            Event::RunStarted {
                run_id: "r1".into(),
            },
        )]);
        gone.push(WorkerEvent::Final {
            session: "s0".into(),
            log: FinalLog::Missing,
        });
        assert!(acked_survive_takeover(&gone)[0]
            .found
            .starts_with("no such session"));
    }
}
