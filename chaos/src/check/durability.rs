//! acked-durable: every event the store acknowledged is there afterwards,
//! at its seq and unchanged, at every observation of a trial and across a
//! crash of the database server under the store. What was acknowledged
//! comes from the child's pipe or the harness's own requests, never from
//! the store.

use agentchaos_protocol::event::{Event, Record, Seq};

use crate::check::{events, tail, v, Invariant, Moment, Violation};
use crate::history::History;
use crate::model::{describe_record, store_authored};

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
                lost.push(LostAck {
                    life: at,
                    write,
                    seq,
                    holds: held(m, seq),
                });
            }
        }
    }
    lost
}

/// An event the store wrote itself and acknowledged to a life: the
/// session's creation, acknowledged by the open (with `create`) of the
/// first life whose open went through (the agent announces nothing and
/// reports no recovery before its open answered), and what a restarted
/// life's open and recovery added, acknowledged by their replies (as the
/// harness saw it right after that recovery).
#[derive(Debug, Clone, PartialEq, Eq)]
struct StoreAck {
    /// Its place in [`History::lives`].
    life: usize,
    seq: Seq,
    type_name: String,
    /// None for the creation: any `session_created` at seq 0 keeps it (the
    /// harness never sees the store's record of it before a crash).
    fingerprint: Option<String>,
}

fn store_acks(h: &History) -> Vec<StoreAck> {
    let mut acks = Vec::new();
    let opened = h
        .lives
        .iter()
        .position(|l| !l.writes.is_empty() || l.recovered.is_some());
    if let Some(life) = opened {
        acks.push(StoreAck {
            life,
            seq: 0,
            type_name: "session_created".into(),
            fingerprint: None,
        });
    }
    for (i, life) in h.lives.iter().enumerate().skip(1) {
        let Some(after) = &life.after_recovery else {
            continue;
        };
        let start = h.after_kill.get(i - 1).map_or(0, |o| o.records.len());
        for r in after.records.iter().skip(start) {
            match r.event() {
                Some(e) if store_authored(e) && !matches!(e, Event::SessionCreated { .. }) => {
                    acks.push(StoreAck {
                        life: i,
                        seq: r.seq,
                        type_name: e.type_name().into(),
                        fingerprint: Some(crate::agent::wire::fingerprint(e)),
                    });
                }
                _ => {}
            }
        }
    }
    acks
}

/// What the log holds at `seq` (or that it ends before it), in words.
fn held(m: &Moment<'_>, seq: Seq) -> String {
    match m.obs.records.get(seq as usize) {
        Some(r) => format!("the log holds {} there", describe_record(r)),
        None => format!(
            "the log ends before seq {seq} ({})",
            events(m.obs.records.len())
        ),
    }
}

/// acked-durable: every ack the child reported is in the log at its seq,
/// and every event the store wrote itself and acknowledged (the session's
/// creation, a recovery's marks). One violation per moment, saying how
/// many acknowledged events are missing or changed, and which (the first
/// and the last).
pub(super) fn acked_durable(h: &History, m: &Moment<'_>, out: &mut Vec<Violation>) {
    let lives = m.acked_by_lives.min(h.lives.len());
    let store = store_acks(h);
    // (life, type, seq, what the log holds there) of every broken ack.
    let mut lost: Vec<(u32, &str, Seq, String)> = lost_acks(h, m)
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
    for a in store.iter().filter(|a| a.life < lives) {
        let kept = m
            .obs
            .records
            .get(a.seq as usize)
            .and_then(Record::event)
            .is_some_and(|e| match &a.fingerprint {
                Some(f) => crate::agent::wire::fingerprint(e) == *f,
                None => matches!(e, Event::SessionCreated { .. }),
            });
        if !kept {
            lost.push((
                h.lives[a.life].index,
                a.type_name.as_str(),
                a.seq,
                held(m, a.seq),
            ));
        }
    }
    lost.sort_by_key(|l| l.2);
    let (Some(first), Some(last)) = (lost.first(), lost.last()) else {
        return;
    };
    let acked: usize = h.lives[..lives]
        .iter()
        .flat_map(|l| &l.writes)
        .filter(|w| w.acked.is_some())
        .count()
        + store.iter().filter(|a| a.life < lives).count();
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
        // The creation the open acknowledged is one of them, kept.
        assert_eq!(
            lost[0].expected,
            "all 5 acknowledged events in the log at their seqs"
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

    /// The acked-durable violations the checker finds in `h`.
    fn acked(h: &History) -> Vec<Violation> {
        check(h, None)
            .into_iter()
            .filter(|v| v.invariant == Invariant::AckedDurable)
            .collect()
    }

    /// A session whose creation the open acknowledged to life 0 (which
    /// then announced its first append) and that the next open no longer
    /// finds: the creation is an acknowledged event, lost.
    #[test]
    fn acked_durable_counts_the_acknowledged_creation() {
        let mut h = history(true);
        h.lives[0].writes[0].acked = None;
        h.after_kill = vec![obs(&[])];
        let lost = acked(&h);
        assert_eq!(lost.len(), 1, "{lost:#?}");
        assert_eq!(lost[0].when, "after life 0 was killed, before recovery");
        assert_eq!(
            lost[0].expected,
            "session_created at seq 0 (acknowledged to life 0), acknowledged as durable"
        );
        assert_eq!(lost[0].found, "the log ends before seq 0 (0 events)");
        // A life killed inside its open announced nothing: no creation was
        // acknowledged to it.
        h.lives[0].writes.clear();
        assert_eq!(acked(&h), vec![]);
    }

    /// What a recovery appended and reported is acknowledged to the life
    /// it reported to: lost at that life's crash, it is acked-durable's.
    #[test]
    fn acked_durable_counts_what_a_recovery_acknowledged() {
        let mut h = history(true);
        assert_eq!(acked(&h), vec![], "kept: {h:#?}");
        h.lives[1].end = LifeEnd::Killed;
        h.lives[1].writes.clear();
        h.lives[1].done = false;
        let marked = h.lives[1].after_recovery.clone().unwrap();
        let mut kept = marked.records.clone();
        kept.pop();
        let unmarked: Vec<Event> = kept.iter().filter_map(|r| r.event().cloned()).collect();
        h.after_kill.push(obs(&unmarked));
        h.final_obs = marked;
        let lost = acked(&h);
        assert_eq!(lost.len(), 1, "{lost:#?}");
        assert_eq!(lost[0].when, "after life 1 was killed, before recovery");
        assert_eq!(
            lost[0].expected,
            "run_interrupted at seq 2 (acknowledged to life 1), acknowledged as durable"
        );
    }
}
