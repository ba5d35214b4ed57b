//! The compaction-rule probes (`rule-compaction-off-leaf@ID`,
//! `rule-compaction-kept-off-branch@ID`): the crash-free run's compaction
//! appended with one half of its rule broken ([`CompactionBreak`]), judged
//! as the session rules are. The tree it reasons about is the harness's
//! own model of the log, never the store's.

use std::path::Path;

use agentchaos_protocol::event::{event_id, Event, Record, Seq};

use crate::campaign::probe::rules::{judge_rule_text, not_reached, RuleEvents, MISSING_PARENT_SEQ};
use crate::campaign::probe::spawn::{child_with_events, replay_events};
use crate::campaign::probe::{tell, ProbeError, ProbeSetup};
use crate::check::Violation;
use crate::model::describe_record;

/// The half of the compaction rule (PROTOCOL.md §3) a probe breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionBreak {
    /// Hung under the session's first user message, not the active leaf
    /// (or, if that is the leaf, under another entry).
    OffLeaf,
    /// Hung under the active leaf, its `first_kept_id` an entry of
    /// another branch (or, with no other branch yet, of no branch).
    KeptOffBranch,
}

impl CompactionBreak {
    pub const ALL: [CompactionBreak; 2] =
        [CompactionBreak::OffLeaf, CompactionBreak::KeptOffBranch];

    /// How `--plan probe:` names the probe.
    pub fn name(self) -> &'static str {
        match self {
            CompactionBreak::OffLeaf => "rule-compaction-off-leaf",
            CompactionBreak::KeptOffBranch => "rule-compaction-kept-off-branch",
        }
    }

    pub(super) fn from_name(name: &str) -> Option<CompactionBreak> {
        CompactionBreak::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// The entry an off-leaf compaction hangs under: the first user message
/// of `before` that is not the active `leaf`, else its first other entry
/// of the history tree (a scenario whose only user message is the leaf).
/// None when the leaf is the only entry.
pub(super) fn entry_off_leaf(before: &[Record], leaf: Option<&str>) -> Option<String> {
    let other = |r: &&Record| Some(event_id(r.seq)).as_deref() != leaf;
    let entries = || {
        before
            .iter()
            .filter(|r| r.event().is_some_and(|e| e.parent().is_some()))
            .filter(other)
    };
    entries()
        .find(|r| matches!(r.event(), Some(Event::UserMessage { .. })))
        .or_else(|| entries().next())
        .map(|r| event_id(r.seq))
}

/// The compaction rule's probe: the crash-free run's `compaction` (an
/// event id) appended, after the events before it, with the half of its
/// rule that `breaks` names broken.
pub(super) fn compaction_rule(
    setup: &ProbeSetup<'_>,
    compaction: &str,
    breaks: CompactionBreak,
    dir: &Path,
) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    let reference = setup.reference;
    let k = reference
        .iter()
        .position(|r| {
            event_id(r.seq) == compaction && matches!(r.event(), Some(Event::Compaction { .. }))
        })
        .ok_or_else(|| {
            ProbeError::Harness(format!(
                "the crash-free run has no compaction {compaction:?}"
            ))
        })?;
    let mut forbidden = reference[k]
        .event()
        .cloned()
        .expect("found as a compaction");
    let Event::Compaction {
        parent,
        first_kept_id,
        ..
    } = &mut forbidden
    else {
        unreachable!("found as a compaction")
    };
    let leaf = parent.clone();
    let leaf_name = leaf.as_deref().unwrap_or("(none)").to_string();
    let broken = match breaks {
        CompactionBreak::OffLeaf => {
            let other = entry_off_leaf(&reference[1..k], leaf.as_deref()).ok_or_else(|| {
                ProbeError::Harness(format!(
                    "no entry before compaction {compaction:?} other than its parent"
                ))
            })?;
            *parent = Some(other.clone());
            format!("hung under {other} instead of the active leaf {leaf_name}")
        }
        CompactionBreak::KeptOffBranch => {
            let (off, what) = entry_off_branch(&reference[1..k], leaf.as_deref());
            let kept = std::mem::replace(first_kept_id, off.clone());
            format!(
                "hung under the active leaf {leaf_name} but keeping from {off} ({what}) instead of {kept}"
            )
        }
    };
    let replay = replay_events(reference, k)?;
    let how = format!(
        "replaying up to before {}, then that compaction {broken}",
        describe_record(&reference[k]),
    );
    let events = RuleEvents {
        replay,
        recover: None,
        then: vec![],
        forbidden,
    };
    let reply = child_with_events(setup, dir, "rule", "rule-probe", &events)?;
    let told = format!("{how}: {}", tell(&reply));
    let rule = "a compaction hangs under the active leaf and keeps an entry of the active branch";
    Ok(match not_reached(&reply, setup.claimed) {
        Some(charged) => (told, charged, true),
        None => (
            told,
            judge_rule_text(rule, &how, &reference[k], &reply)?
                .into_iter()
                .collect(),
            false,
        ),
    })
}

/// An entry of `records` off the branch from `leaf` up to the root (the
/// harness's own model of the tree), and what it is: the first such entry,
/// else an id no entry has.
fn entry_off_branch(records: &[Record], leaf: Option<&str>) -> (String, &'static str) {
    let model = crate::model::Model::fold(records);
    let branch: std::collections::HashSet<Seq> = leaf
        .and_then(agentchaos_protocol::event::seq_of_event_id)
        .map_or_else(Vec::new, |leaf| model.ancestry(leaf))
        .into_iter()
        .collect();
    model
        .entries()
        .into_iter()
        .find(|seq| !branch.contains(seq))
        .map_or_else(
            || (event_id(MISSING_PARENT_SEQ), "no entry has that id"),
            |seq| (event_id(seq), "an entry of another branch"),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::probe::fixture::rec;

    #[test]
    fn the_kept_entry_off_the_branch_is_of_another_branch_else_of_none() {
        let message = |seq: u64, parent: Option<u64>| {
            rec(
                seq,
                Event::AssistantMessage {
                    parent: parent.map(event_id),
                    text: "t".into(),
                },
            )
        };
        // e1 ← e2 and e1 ← e3 ← e4: on the branch of e4, e2 is the one off it.
        let forked = vec![
            message(1, None),
            message(2, Some(1)),
            message(3, Some(1)),
            message(4, Some(3)),
        ];
        assert_eq!(
            entry_off_branch(&forked, Some("e4")),
            ("e2".to_string(), "an entry of another branch")
        );
        // One line of entries: none is off the branch.
        assert_eq!(
            entry_off_branch(&forked[..2], Some("e2")),
            (event_id(MISSING_PARENT_SEQ), "no entry has that id")
        );
    }

    #[test]
    fn an_off_leaf_compaction_hangs_under_another_user_message_else_any_entry() {
        let user = |seq, parent: Option<Seq>| {
            rec(
                seq,
                Event::UserMessage {
                    parent: parent.map(event_id),
                    text: "u".into(),
                },
            )
        };
        let answer = rec(
            2,
            Event::AssistantMessage {
                parent: Some(event_id(1)),
                text: "a".into(),
            },
        );
        let run = rec(0, Event::RunStarted { run_id: "r".into() });
        let two_users = [run.clone(), user(1, None), answer.clone(), user(3, Some(2))];
        assert_eq!(
            entry_off_leaf(&two_users, Some(&event_id(3))),
            Some(event_id(1))
        );
        // The only user message is the leaf: the answer, an entry all the same.
        let one_user = [run.clone(), user(1, None), answer];
        assert_eq!(
            entry_off_leaf(&one_user, Some(&event_id(1))),
            Some(event_id(2))
        );
        assert_eq!(
            entry_off_leaf(&[run, user(1, None)], Some(&event_id(1))),
            None
        );
    }
}
