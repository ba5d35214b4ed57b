//! The limit probe (`limit`): assistant messages of doubling, then
//! bisected, sizes up to the largest the store takes, read back after the
//! session is opened again; its verdict ([`judge_limit`], `acked-durable`)
//! and the child's search. A store may refuse a size: this module must
//! never count a refusal as a loss, only an acknowledged message not read
//! back.

use std::path::Path;

use agentchaos_protocol::event::{event_id, Event, Seq};
use serde::{Deserialize, Serialize};

use crate::campaign::probe::child::{
    fail, open_replayed, read_events, refused, replay_into, ChildArgs, ChildError, Target,
};
use crate::campaign::probe::spawn::{child_with_events, replay_events};
use crate::campaign::probe::{tell, ProbeError, ProbeReply, ProbeSetup};
use crate::check::{Invariant, Violation};
use crate::model::describe_record;

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

pub(super) fn limit(
    setup: &ProbeSetup<'_>,
    dir: &Path,
) -> Result<(String, Vec<Violation>, bool), ProbeError> {
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

/// An assistant message of `len` bytes of text, under `parent`.
fn sized_message(parent: Seq, len: u64) -> Event {
    Event::AssistantMessage {
        parent: Some(event_id(parent)),
        text: "x".repeat(len as usize),
    }
}

pub(super) fn child_limit(args: &ChildArgs) -> Result<ProbeReply, ProbeError> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
