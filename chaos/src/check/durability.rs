//! acked-durable: every event the store acknowledged is there afterwards,
//! at its seq and unchanged, at every observation of a trial and across a
//! crash of the database server under the store. What was acknowledged
//! comes from the child's pipe or the harness's own requests, never from
//! the store.

use agentchaos_protocol::event::{Event, Record, Seq};

use crate::check::{events, tail, v, Invariant, Moment, Violation};
use crate::history::History;
use crate::model::describe_record;

/// `acked-durable` across a crash of the database server under the store
/// (`crate::nemesis::database`): every event in `acked` (seq and event,
/// as the harness sent it and the store acknowledged it before the
/// crash) must be served at its seq with the same content by a fresh
/// adapter after the server restarted. `served` is `None` when the store
/// answered that the session does not exist.
pub fn acked_survived_database_crash(
    acked: &[(Seq, Event)],
    served: Option<&[Record]>,
    when: &str,
) -> Vec<Violation> {
    let Some(served) = served else {
        return match acked.last() {
            None => Vec::new(),
            Some((last, _)) => vec![v(
                Invariant::AckedDurable,
                when,
                format!(
                    "the session with {} acknowledged event(s), up to seq {last}",
                    acked.len()
                ),
                "the store says the session does not exist (not_found)".into(),
                acked
                    .iter()
                    .map(|(seq, e)| format!("seq {seq} {}", crate::model::describe_event(e)))
                    .collect(),
            )],
        };
    };
    let mut out = Vec::new();
    for (seq, event) in acked {
        let found = served.iter().find(|r| r.seq == *seq);
        let same = found.and_then(|r| r.event()).is_some_and(|e| e == event);
        if !same {
            out.push(v(
                Invariant::AckedDurable,
                when,
                format!("seq {seq} {}", crate::model::describe_event(event)),
                match found {
                    None => format!(
                        "no event at seq {seq} (the store serves {} event(s))",
                        served.len()
                    ),
                    Some(r) => crate::model::describe_record(r),
                },
                vec![format!("seq {seq} {}", crate::model::describe_event(event))],
            ));
        }
    }
    out
}

/// An acknowledged event an observation does not hold at its seq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostAck {
    /// The life it was acknowledged to (its place in [`History::lives`]),
    /// and its index in that life's writes.
    pub life: usize,
    pub write: usize,
    pub seq: Seq,
    /// What the log holds there instead, in words.
    pub holds: String,
}

/// The events acknowledged to the lives before `m.acked_by_lives` that
/// `m`'s observation does not hold at their seq with the same content
/// (fingerprint): what `acked-durable` reports.
pub fn lost_acks(h: &History, m: &Moment<'_>) -> Vec<LostAck> {
    let mut lost = Vec::new();
    for (at, life) in h.lives[..m.acked_by_lives.min(h.lives.len())]
        .iter()
        .enumerate()
    {
        for (write, w) in life.writes.iter().enumerate() {
            let Some(seq) = w.acked else { continue };
            let found = m.obs.records.get(seq as usize);
            let ok = found
                .and_then(Record::event)
                .is_some_and(|e| crate::agent::wire::fingerprint(e) == w.fingerprint);
            if !ok {
                let holds = match found {
                    Some(r) => format!("the log holds {} there", describe_record(r)),
                    None => format!(
                        "the log ends before seq {seq} ({})",
                        events(m.obs.records.len())
                    ),
                };
                lost.push(LostAck {
                    life: at,
                    write,
                    seq,
                    holds,
                });
            }
        }
    }
    lost
}

/// acked-durable: every ack the child reported is in the log at its seq.
/// One violation per moment, saying how many acknowledged events are
/// missing or changed, and which (the first and the last).
pub(super) fn acked_durable(h: &History, m: &Moment<'_>, out: &mut Vec<Violation>) {
    // (life, type, seq, what the log holds there) of every broken ack.
    let lost: Vec<(u32, &str, Seq, String)> = lost_acks(h, m)
        .into_iter()
        .map(|l| {
            let life = &h.lives[l.life];
            (
                life.index,
                life.writes[l.write].type_name.as_str(),
                l.seq,
                l.holds,
            )
        })
        .collect();
    let (Some(first), Some(last)) = (lost.first(), lost.last()) else {
        return;
    };
    let acked: usize = h.lives[..m.acked_by_lives.min(h.lives.len())]
        .iter()
        .flat_map(|l| &l.writes)
        .filter(|w| w.acked.is_some())
        .count();
    let name = |(life, ty, seq, _): &(u32, &str, Seq, String)| {
        format!("{ty} at seq {seq} (acknowledged to life {life})")
    };
    let (expected, found) = if lost.len() == 1 {
        (
            format!("{}, acknowledged as durable", name(first)),
            first.3.clone(),
        )
    } else {
        (
            format!("all {acked} acknowledged events in the log at their seqs"),
            format!(
                "{} of them missing or changed: from {} to {}; at the first, {}",
                lost.len(),
                name(first),
                name(last),
                first.3
            ),
        )
    };
    out.push(v(
        Invariant::AckedDurable,
        &m.when,
        expected,
        found,
        tail(&m.obs.records, 2),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check;
    use crate::check::fixture::history;
    use crate::check::fixture::{life, obs};
    use crate::history::LifeEnd;

    #[test]
    fn acked_durable_says_how_many_acknowledged_events_are_gone_and_which() {
        let created = Event::SessionCreated {
            session_id: "s".into(),
            schema_version: 1,
            workspace: String::new(),
        };
        let messages: Vec<Event> = (0..4)
            .map(|i| Event::UserMessage {
                parent: None,
                text: format!("m{i}"),
            })
            .collect();
        let writes: Vec<(&Event, u64)> = messages.iter().zip(1..).collect();
        let mut h = history(true);
        h.lives = vec![life(0, &writes, LifeEnd::Killed)];
        // A store that rewrote its file and lost everything after session_created.
        h.after_kill = vec![obs(std::slice::from_ref(&created))];
        h.final_obs = obs(std::slice::from_ref(&created));
        let lost: Vec<Violation> = check(&h, None)
            .into_iter()
            .filter(|v| v.invariant == Invariant::AckedDurable)
            .collect();
        assert!(!lost.is_empty());
        assert_eq!(
            lost[0].expected,
            "all 4 acknowledged events in the log at their seqs"
        );
        assert_eq!(
            lost[0].found,
            "4 of them missing or changed: from user_message at seq 1 (acknowledged to life 0) \
             to user_message at seq 4 (acknowledged to life 0); at the first, the log ends \
             before seq 1 (1 event)"
        );
        // One lost event is named alone.
        h.after_kill = vec![obs(&[
            created.clone(),
            messages[0].clone(),
            messages[1].clone(),
            messages[2].clone(),
        ])];
        h.final_obs = h.after_kill[0].clone();
        let one = check(&h, None)
            .into_iter()
            .find(|v| v.invariant == Invariant::AckedDurable)
            .expect("the last ack is gone");
        assert_eq!(
            one.expected,
            "user_message at seq 4 (acknowledged to life 0), acknowledged as durable"
        );
    }
}
