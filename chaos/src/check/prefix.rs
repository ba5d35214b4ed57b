//! log-prefix: no damage ever and no torn tail once recovered; what the
//! first process left is a prefix of the crash-free log; each process
//! only appended, recovery events first, then exactly what it announced;
//! a finished log starts with its creation. The expected log comes from
//! the child's announcements and the crash-free run, never from the store.

use agentchaos_protocol::event::{Event, Record};

use crate::check::{ended, events, first_diff, tail, v, Invariant, Moment, Reference, Violation};
use crate::history::{Append, History, Life};
use crate::model::{describe_record, store_authored};
use crate::store::Observation;

/// log-prefix: no damage ever; no torn tail once recovered.
pub(super) fn well_formed(m: &Moment<'_>, out: &mut Vec<Violation>) {
    if let Some(d) = &m.obs.damage {
        out.push(v(
            Invariant::LogPrefix,
            &m.when,
            "every record of the log whole and valid (only the last write may be torn, before recovery)".into(),
            format!("damage: {d}"),
            tail(&m.obs.records, 3),
        ));
    } else if let (true, Some(t)) = (m.recovered, &m.obs.torn) {
        out.push(v(
            Invariant::LogPrefix,
            &m.when,
            "no torn tail after recovery (it must be cut before anything is appended)".into(),
            t.clone(),
            tail(&m.obs.records, 3),
        ));
    }
}

fn normalized(e: &Event) -> Event {
    match e {
        Event::SessionCreated {
            session_id,
            schema_version,
            ..
        } => Event::SessionCreated {
            session_id: session_id.clone(),
            schema_version: *schema_version,
            workspace: String::new(),
        },
        other => other.clone(),
    }
}

/// log-prefix: what the first process left is a prefix of the crash-free log.
pub(super) fn prefix_of_reference(
    h: &History,
    first: &Observation,
    reference: &Reference,
    out: &mut Vec<Violation>,
) {
    let when = &format!("after life 0 {}, before recovery", ended(h.lives[0].end));
    // Opening the log to observe it may cut a torn tail and record the cut
    // (`tail_quarantined`, store-authored): not part of what the agent wrote.
    let written = first
        .records
        .iter()
        .filter(|r| !matches!(r.event(), Some(Event::TailQuarantined { .. })));
    for (i, rec) in written.enumerate() {
        let Some(want) = reference.records.get(i) else {
            out.push(v(
                Invariant::LogPrefix,
                when,
                format!(
                    "at most {} (the crash-free run's log)",
                    events(reference.records.len())
                ),
                format!("extra event {}", describe_record(rec)),
                vec![describe_record(rec)],
            ));
            return;
        };
        let same = match (rec.event(), want.event()) {
            (Some(a), Some(b)) => normalized(a) == normalized(b),
            _ => rec.body.type_name() == want.body.type_name(),
        };
        if !same {
            out.push(v(
                Invariant::LogPrefix,
                when,
                format!("{} (as in the crash-free run)", describe_record(want)),
                describe_record(rec),
                tail(&first.records[..=i], 3),
            ));
            return;
        }
    }
}

fn start_records(h: &History, life: usize) -> &[Record] {
    match life {
        0 => &[],
        i => &h.after_kill[i - 1].records,
    }
}

fn end_obs(h: &History, life: usize) -> &Observation {
    h.after_kill.get(life).unwrap_or(&h.final_obs)
}

/// log-prefix: each process only ever added to the log: recovery events
/// first, then exactly what it announced, in order.
pub(super) fn segments(h: &History, out: &mut Vec<Violation>) {
    for (i, life) in h.lives.iter().enumerate() {
        if i > 0 && i > h.after_kill.len() {
            break;
        }
        let start = start_records(h, i);
        let end = end_obs(h, i);
        let when = if i < h.after_kill.len() {
            format!("after life {i} {}", ended(life.end))
        } else {
            "at the end of the trial".to_string()
        };
        if let Some(bad) = first_divergence(start, &end.records) {
            out.push(v(
                Invariant::LogPrefix,
                &when,
                format!(
                    "the {} events present when life {i} started to stay as they were",
                    start.len()
                ),
                bad,
                tail(&end.records, 3),
            ));
            continue;
        }
        for obs in [&life.after_recovery, &life.after_second_recovery]
            .into_iter()
            .flatten()
        {
            if let Some(bad) = first_divergence(&obs.records, &end.records) {
                out.push(v(
                    Invariant::LogPrefix,
                    &when,
                    format!("the events present after life {i}'s recovery to stay as they were"),
                    bad,
                    tail(&end.records, 3),
                ));
            }
        }
        if let Some(found) = suffix_problem(&end.records[start.len()..], life) {
            out.push(v(
                Invariant::LogPrefix,
                &when,
                format!("the events after seq {} to be recovery events, then what life {i} wrote, in order", start.len().saturating_sub(1)),
                found,
                tail(&end.records, 4),
            ));
        }
    }
}

/// log-prefix: a finished session's log starts with its creation.
pub(super) fn created(h: &History, out: &mut Vec<Violation>) {
    if !h.last().done {
        return;
    }
    let first = h.final_obs.records.first();
    if !matches!(
        first.and_then(Record::event),
        Some(Event::SessionCreated { .. })
    ) {
        out.push(v(
            Invariant::LogPrefix,
            "at the end of the trial",
            "the log to start with session_created at seq 0 (a crash inside the session's creation must be finished by the next open)".into(),
            first.map_or("an empty log".to_string(), |r| format!("it starts with {}", describe_record(r))),
            tail(&h.final_obs.records[..h.final_obs.records.len().min(2)], 2),
        ));
    }
}

/// Is `before` a prefix of `after`? If not, says where it differs.
fn first_divergence(before: &[Record], after: &[Record]) -> Option<String> {
    for (i, b) in before.iter().enumerate() {
        match after.get(i) {
            None => {
                return Some(format!(
                    "the log now ends at seq {} and {} is gone",
                    after.len(),
                    describe_record(b)
                ))
            }
            Some(a) if a != b => {
                let json = |r: &Record| {
                    serde_json::json!({
                        "seq": r.seq,
                        "id": r.id.to_string(),
                        "ts": r.ts,
                        "redaction": format!("{:?}", r.redaction),
                        "event": match &r.body {
                            agentchaos_protocol::event::Body::Known(e) => {
                                serde_json::to_value(e).expect("an event serializes")
                            }
                            agentchaos_protocol::event::Body::Ignorable { fields, .. } => fields.clone(),
                        },
                    })
                };
                let (was, now) = (json(b), json(a));
                let changed = first_diff(&was, &now, "")
                    .map(|d| format!(" (first change: {}, was vs now)", d.trim_start_matches('.')))
                    .unwrap_or_default();
                return Some(format!(
                    "{} was rewritten as {}{changed}",
                    describe_record(b),
                    describe_record(a)
                ));
            }
            Some(_) => {}
        }
    }
    None
}

/// The attempts of each refused append, by write: for a write in a run
/// of refused appends, or in the appends right after the run that repeat
/// the run's events (the agent's retries: at once for a lone append, after
/// the whole group for a group refused together), the index of the first
/// attempt of the same event there. Other writes have none.
fn attempt_chains(writes: &[Append]) -> Vec<Option<usize>> {
    let mut chain = vec![None; writes.len()];
    let mut i = 0;
    while i < writes.len() {
        if !writes[i].refused {
            i += 1;
            continue;
        }
        let start = i;
        while writes.get(i).is_some_and(|w| w.refused) {
            i += 1;
        }
        let run = &writes[start..i];
        while writes
            .get(i)
            .is_some_and(|w| run.iter().any(|r| r.fingerprint == w.fingerprint))
        {
            i += 1;
        }
        for k in start..i {
            chain[k] = (start..=k).find(|&j| writes[j].fingerprint == writes[k].fingerprint);
        }
    }
    chain
}

/// What life `i` added to the log must be recovery events, then exactly
/// what it announced, in order. An append the store refused with an I/O
/// error may be absent or present; if the agent tried it again, one of
/// its attempts at most may be present, and the acknowledged one if any
/// (a refused attempt kept beside it is a duplicate).
fn suffix_problem(suffix: &[Record], life: &Life) -> Option<String> {
    let writes = &life.writes;
    let chain = attempt_chains(writes);
    let acked_chain =
        |c: usize| (c..writes.len()).any(|k| chain[k] == Some(c) && !writes[k].refused);
    let mut next = 0;
    // The chains of attempts one of which is in the log already.
    let mut present: Vec<usize> = Vec::new();
    let mut agent_started = false;
    let cut_record = |r: &Record| matches!(r.event(), Some(Event::TailQuarantined { .. }));
    for (k, rec) in suffix.iter().enumerate() {
        let Some(e) = rec.event() else {
            return Some(format!(
                "{} is not an event the agent or recovery writes",
                describe_record(rec)
            ));
        };
        if store_authored(e) {
            // The open after this life's crash may cut its torn last write
            // and record the cut: after the life's appends, at the end.
            let records_the_last_cut = suffix[k..].iter().all(cut_record);
            if agent_started && !records_the_last_cut {
                return Some(format!(
                    "{} appears after life {}'s own appends had begun",
                    describe_record(rec),
                    life.index
                ));
            }
            continue;
        }
        agent_started = true;
        let found = crate::agent::wire::fingerprint(e);
        let duplicate = |present: &[usize]| {
            present
                .iter()
                .map(|&c| &writes[c])
                .find(|w| w.fingerprint == found)
                .map(|w| {
                    format!(
                        "{} again: the store refused that {} with an I/O error, kept it, and the agent's retry added it a second time",
                        describe_record(rec),
                        w.type_name
                    )
                })
        };
        loop {
            let Some(w) = writes.get(next) else {
                return Some(duplicate(&present).unwrap_or_else(|| {
                    format!(
                        "{} was never written by life {} (it wrote {} events)",
                        describe_record(rec),
                        life.index,
                        writes.len()
                    )
                }));
            };
            let c = chain[next];
            next += 1;
            if w.refused {
                // An acknowledged attempt of the same event stands for it.
                if c.is_some_and(acked_chain) || w.fingerprint != found {
                    continue; // Refused and absent: as it should be.
                }
            } else if w.fingerprint != found {
                return Some(duplicate(&present).unwrap_or_else(|| {
                    format!(
                        "{} where life {} wrote {} (a gap, duplicate, reordering or altered event)",
                        describe_record(rec),
                        life.index,
                        w.type_name
                    )
                }));
            }
            if let Some(c) = c {
                if present.contains(&c) {
                    return duplicate(&present);
                }
                present.push(c);
            }
            break;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixture::{life, obs};
    use crate::history::LifeEnd;

    #[test]
    fn a_rewritten_event_names_the_field_that_changed() {
        let before = obs(&[Event::UserMessage {
            parent: None,
            text: "deploy to staging".into(),
        }]);
        let after = obs(&[Event::UserMessage {
            parent: None,
            text: "deploy to production".into(),
        }]);
        let found = first_divergence(&before.records, &after.records).unwrap();
        assert!(
            found.contains("was rewritten as")
                && found.contains("text: \"deploy to staging\" vs \"deploy to production\""),
            "{found}"
        );
    }

    #[test]
    fn a_refused_append_may_be_absent_but_its_retry_must_not_duplicate_it() {
        let (a, b) = (user("a"), user("b"));
        // Announced a, refused; retried a, acknowledged; then b.
        let mut l = life(0, &[(&a, 0), (&b, 1)], LifeEnd::Exited(0));
        l.writes.insert(0, refused(&a));
        let log = |events: &[Event]| obs(events).records;
        assert_eq!(suffix_problem(&log(&[a.clone(), b.clone()]), &l), None);
        let twice = suffix_problem(&log(&[a.clone(), a.clone(), b.clone()]), &l)
            .expect("the kept refused append and its retry are a duplicate");
        assert!(
            twice.ends_with("again: the store refused that user_message with an I/O error, kept it, and the agent's retry added it a second time"),
            "{twice}"
        );
        // Refused for good (the agent gave up): present or absent, both allowed.
        let mut gave_up = life(0, &[], LifeEnd::Exited(1));
        gave_up.writes.push(refused(&a));
        assert_eq!(
            suffix_problem(&log(std::slice::from_ref(&a)), &gave_up),
            None
        );
        assert_eq!(suffix_problem(&[], &gave_up), None);
        assert!(suffix_problem(&log(std::slice::from_ref(&b)), &gave_up).is_some());
    }

    /// A pipelined group whose requests were refused together (the first
    /// for an I/O error, the second for want of the first as its parent)
    /// is appended again one by one: the refused pair is retried, and a
    /// retry kept twice is still a duplicate. A refused event announced
    /// again only after another event is not a retry of it.
    #[test]
    fn a_group_refused_together_and_appended_again_is_a_retry_and_kept_at_most_once() {
        let (a, b, c) = (user("a"), user("b"), user("c"));
        let mut l = life(0, &[(&a, 0), (&b, 1), (&c, 2)], LifeEnd::Exited(0));
        l.writes.insert(0, refused(&a));
        l.writes.insert(1, refused(&b));
        let log = |events: &[Event]| obs(events).records;
        assert_eq!(
            suffix_problem(&log(&[a.clone(), b.clone(), c.clone()]), &l),
            None
        );
        assert!(suffix_problem(&log(&[a.clone(), a.clone(), b.clone(), c.clone()]), &l).is_some());
        assert_eq!(
            attempt_chains(&l.writes)[..4],
            [Some(0), Some(1), Some(0), Some(1)]
        );

        // A group refused together, its first event tried again and
        // refused until the agent gave up: the group may be kept whole,
        // but no attempt twice.
        let mut gave_up = life(0, &[], LifeEnd::Exited(1));
        gave_up.writes = [&a, &b, &a, &a].into_iter().map(refused).collect();
        assert_eq!(
            suffix_problem(&log(&[a.clone(), b.clone()]), &gave_up),
            None
        );
        assert_eq!(
            suffix_problem(&log(std::slice::from_ref(&b)), &gave_up),
            None
        );
        let twice = suffix_problem(&log(&[a.clone(), a.clone()]), &gave_up).expect("a duplicate");
        assert!(
            twice.contains("again: the store refused that user_message"),
            "{twice}"
        );

        // a refused, then c, then a again: a's refused attempt may be kept.
        let mut l = life(0, &[(&c, 0), (&a, 1)], LifeEnd::Exited(0));
        l.writes.insert(0, refused(&a));
        assert_eq!(attempt_chains(&l.writes), [Some(0), None, None]);
        assert_eq!(
            suffix_problem(&log(&[a.clone(), c.clone(), a.clone()]), &l),
            None
        );
    }

    /// An append of `e` the store refused with an I/O error.
    fn refused(e: &Event) -> Append {
        Append {
            type_name: e.type_name().into(),
            fingerprint: crate::agent::wire::fingerprint(e),
            line: 0,
            acked: None,
            refused: true,
        }
    }

    fn user(text: &str) -> Event {
        Event::UserMessage {
            parent: None,
            text: text.into(),
        }
    }
}
