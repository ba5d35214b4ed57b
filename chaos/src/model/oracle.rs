//! The oracle: what a store must serve, computed from its events by the
//! harness's own [`Model`], never by a store's code.
//!
//! [`projection`] is the `projection` a store must serve after the events
//! it holds (the protocol's [`ProjectionView`], `chaos/PROTOCOL.md`
//! `projection`); [`context`] is what its rendered context must show
//! (`chaos/PROTOCOL.md` `context`): a line for every interrupted run and
//! uncertain call, the active compaction's summary, then the text of every
//! message of the active branch inside the compaction window, in order, and
//! no message from before the window or from another branch. A budget drops
//! the oldest messages first, never the recovery lines or the summary.
//!
//! This module owns the harness's reading of those two definitions. It
//! must never call agentstore's projection or context code (a bug there
//! would be compared with itself, and other stores judged by it), and it
//! never does I/O. What a store renders is its own layout: the checks look
//! for texts and lines the protocol promises, never for agentstore's format.

use std::collections::HashMap;

use agentchaos_protocol::event::{event_id, Event, Phase, Record, Seq};
use agentchaos_protocol::view::{CallView, ProjectionView};

use crate::model::{describe_record, phase_name, CallState, Model};

/// The projection a store must serve after `records`.
pub fn projection(records: &[Record]) -> ProjectionView {
    view(&Model::fold(records))
}

/// [`projection`] as JSON, as the checker compares it.
pub fn projection_value(records: &[Record]) -> serde_json::Value {
    serde_json::to_value(projection(records)).expect("a projection view serializes")
}

/// The protocol's view of a model.
pub fn view(m: &Model) -> ProjectionView {
    let mut open: Vec<&CallState> = m.open_calls().collect();
    open.sort_by_key(|c| c.seq);
    ProjectionView {
        next_seq: m.next_seq,
        open_run: m.open_run_id().map(str::to_string),
        interrupted_runs: m.interrupted.clone(),
        leaf: m.leaf(),
        branch: m.active_branch().into_iter().map(event_id).collect(),
        open_calls: open.into_iter().map(call_view).collect(),
        committed_operations: m.committed_ops.iter().cloned().collect(),
        plan: m.plan.clone(),
    }
}

fn call_view(c: &CallState) -> CallView {
    CallView {
        call_id: c.call_id.clone(),
        tool: c.tool.clone(),
        args: c.args.clone(),
        effect: c.effect,
        operation_id: c.operation_id.clone(),
        target: c.target.clone(),
        needs_approval: c.needs_approval,
        approval: c.approval(),
        phase: c.phase(),
        external_ref: c.commits.last().map(|(_, r)| r.clone()),
        recovery: c.mark,
        reconciled: c.reconciled,
    }
}

/// Tokens of `text` as the protocol estimates them: four bytes each.
pub fn tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// The budgets the harness renders a recovered context with, besides none:
/// one just large enough for the recovery block (every message must go,
/// the block and the summary stay), half of the unbudgeted context, and
/// one token less than it (the oldest entry must go first).
pub fn budgets(full: &str, block: Option<&str>) -> Vec<u64> {
    let whole = tokens(full);
    let mut b = vec![block.map_or(1, tokens).max(1)];
    for more in [whole / 2, whole.saturating_sub(1)] {
        if more > *b.last().expect("one budget at least") {
            b.push(more);
        }
    }
    b
}

/// A text shorter than this is not looked for where it must be absent,
/// nor relied on to tell which messages a budget kept: it could be a word
/// of the store's own layout (`done`, `user`).
const DISTINCT_LEN: usize = 8;

/// One message-like text of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text {
    pub seq: Seq,
    /// `seq 4 user_message`.
    pub event: String,
    pub text: String,
    /// Long enough, and contained in no other text or tool payload of the
    /// log: its presence or absence in a context means this entry.
    pub distinct: bool,
}

/// What the context served after `records` must show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedContext {
    /// The summary of the compaction nearest to the leaf on the active branch.
    pub summary: Option<Text>,
    /// Every user and assistant message of the active branch inside the
    /// window, oldest first.
    pub messages: Vec<Text>,
    /// The distinct messages of the log outside the window or the branch.
    pub excluded: Vec<Text>,
    /// Calls marked uncertain and not reconciled, in call order.
    pub uncertain: Vec<(String, Phase)>,
    /// Runs interrupted since the last `run_started`.
    pub interrupted: Vec<String>,
    /// The first and the last seq of the active branch inside the window.
    pub window: Option<(Seq, Seq)>,
}

/// Which promise a context problem breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// An interrupted run or an uncertain call is not shown.
    Recovery,
    /// The summary, the window or the branch is wrong.
    Window,
}

/// One thing a served context gets wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextProblem {
    pub shown: Shown,
    pub expected: String,
    pub found: String,
    pub events: Vec<String>,
}

/// The message text of an event, if it has one a context shows verbatim.
fn message_text(event: &Event) -> Option<&str> {
    match event {
        Event::UserMessage { text, .. } | Event::AssistantMessage { text, .. } => Some(text),
        _ => None,
    }
}

/// Every string of the log a context may render: message texts,
/// summaries, tool payloads, plan text.
fn material(records: &[Record]) -> Vec<String> {
    let mut out = Vec::new();
    for e in records.iter().filter_map(Record::event) {
        match e {
            Event::UserMessage { text, .. } | Event::AssistantMessage { text, .. } => {
                out.push(text.clone())
            }
            Event::Compaction { summary, .. } => out.push(summary.clone()),
            Event::ToolCall {
                tool, args, target, ..
            } => {
                out.push(tool.clone());
                out.push(args.to_string());
                out.extend(target.clone());
            }
            Event::ToolResult {
                output: Some(o), ..
            } => {
                out.push(o.to_string());
                out.extend(o.as_str().map(str::to_string));
            }
            Event::PlanUpdated { goal, steps } => {
                out.push(goal.clone());
                out.extend(steps.iter().map(|s| s.title.clone()));
            }
            _ => {}
        }
    }
    out
}

/// What the context after `records` must show.
pub fn context(records: &[Record]) -> ExpectedContext {
    let m = Model::fold(records);
    let by_seq: HashMap<Seq, &Record> = records.iter().map(|r| (r.seq, r)).collect();
    let branch = m.active_branch();
    let material = material(records);
    // Distinct: no other string of the log contains it (a string equal to
    // it counts once: its own).
    let distinct =
        |t: &str| t.len() >= DISTINCT_LEN && material.iter().filter(|s| s.contains(t)).count() <= 1;
    let text = |r: &Record, t: &str| Text {
        seq: r.seq,
        event: describe_record(r),
        text: t.to_string(),
        distinct: distinct(t),
    };
    let summary = branch.iter().rev().find_map(|s| {
        let r = by_seq.get(s)?;
        match r.event()? {
            Event::Compaction { summary, .. } => Some(text(r, summary)),
            _ => None,
        }
    });
    let messages = branch
        .iter()
        .filter_map(|s| {
            let r = by_seq.get(s)?;
            Some(text(r, message_text(r.event()?)?))
        })
        .collect();
    let excluded = records
        .iter()
        .filter(|r| branch.binary_search(&r.seq).is_err())
        .filter_map(|r| Some(text(r, message_text(r.event()?)?)))
        .filter(|t| t.distinct)
        .collect();
    let mut uncertain: Vec<&CallState> =
        m.open_calls().filter(|c| c.uncertain().is_some()).collect();
    uncertain.sort_by_key(|c| c.seq);
    ExpectedContext {
        summary,
        messages,
        excluded,
        uncertain: uncertain
            .into_iter()
            .filter_map(|c| Some((c.call_id.clone(), c.uncertain()?)))
            .collect(),
        interrupted: m.interrupted.clone(),
        window: branch.first().zip(branch.last()).map(|(&a, &b)| (a, b)),
    }
}

/// Does `line` name `what id` (`call c1`, `run r1`), the id not a prefix of a longer one?
pub fn names(line: &str, what: &str, id: &str) -> bool {
    let needle = format!("{what} {id}");
    line.match_indices(&needle).any(|(i, _)| {
        !line[i + needle.len()..]
            .starts_with(|c: char| c.is_alphanumeric() || c == '-' || c == '_' || c == '.')
    })
}

/// `the context` or `the context rendered with a budget of 12 tokens`.
fn rendered(budget: Option<u64>) -> String {
    match budget {
        None => "the context".to_string(),
        Some(b) => format!("the context rendered with a budget of {b} tokens"),
    }
}

/// A served context, shortened to one line for a report.
fn excerpt(text: &str) -> String {
    let one = text.replace('\n', " | ");
    match one.char_indices().nth(240) {
        Some((i, _)) => format!("{}…", &one[..i]),
        None => one,
    }
}

impl ExpectedContext {
    /// What `text`, the context served with `budget` (tokens), gets wrong.
    pub fn problems(&self, text: &str, budget: Option<u64>) -> Vec<ContextProblem> {
        let ctx = rendered(budget);
        let mut out = Vec::new();
        let problem =
            |shown, expected: String, found: String, events: Vec<String>| ContextProblem {
                shown,
                expected,
                found,
                events,
            };
        for (call, phase) in &self.uncertain {
            let p = format!("phase {}", phase_name(*phase));
            if !text
                .lines()
                .any(|l| names(l, "call", call) && l.contains(&p))
            {
                out.push(problem(
                    Shown::Recovery,
                    format!("{ctx} to name call {call} with {p} on one line (never trimmed)"),
                    format!("no such line; it reads: {}", excerpt(text)),
                    vec![],
                ));
            }
        }
        for run in &self.interrupted {
            if !text
                .lines()
                .any(|l| names(l, "run", run) && l.contains("interrupted"))
            {
                out.push(problem(
                    Shown::Recovery,
                    format!("{ctx} to name run {run} as interrupted on one line (never trimmed)"),
                    format!("no such line; it reads: {}", excerpt(text)),
                    vec![],
                ));
            }
        }
        // The summary comes first; messages are looked for after it.
        let mut from = 0;
        if let Some(s) = &self.summary {
            match text.find(&s.text) {
                Some(at) => from = at + s.text.len(),
                None => out.push(problem(
                    Shown::Window,
                    format!(
                        "{ctx} to show the summary of the compaction at {:?} (never trimmed)",
                        s.text
                    ),
                    format!("it does not; it reads: {}", excerpt(text)),
                    vec![s.event.clone()],
                )),
            }
        }
        match budget {
            // Unbudgeted: every message of the window, in order.
            None => {
                for m in &self.messages {
                    match text[from..].find(&m.text) {
                        Some(at) => from += at + m.text.len(),
                        None => {
                            out.push(problem(
                                Shown::Window,
                                format!(
                                    "{ctx} to show the message {:?} of the active branch, after the summary and the messages before it",
                                    m.text
                                ),
                                format!("it does not, in that order; it reads: {}", excerpt(text)),
                                vec![m.event.clone()],
                            ));
                            break;
                        }
                    }
                }
            }
            // Budgeted: the messages kept are the newest ones.
            Some(_) => {
                let distinct: Vec<&Text> = self.messages.iter().filter(|m| m.distinct).collect();
                let kept = |m: &Text| text.contains(&m.text);
                if let Some(i) = distinct.iter().position(|m| kept(m)) {
                    if let Some(gone) = distinct[i..].iter().find(|m| !kept(m)) {
                        out.push(problem(
                            Shown::Window,
                            format!(
                                "{ctx} to drop the oldest messages first: it keeps {:?}, so the newer {:?} too",
                                distinct[i].text, gone.text
                            ),
                            format!("{:?} is gone; it reads: {}", gone.text, excerpt(text)),
                            vec![distinct[i].event.clone(), gone.event.clone()],
                        ));
                    }
                }
            }
        }
        if let Some(x) = self.excluded.iter().find(|x| text.contains(&x.text)) {
            out.push(problem(
                Shown::Window,
                format!(
                    "{ctx} to show only the active branch inside the compaction window: not {:?}",
                    x.text
                ),
                format!(
                    "it shows it; the window is {}; it reads: {}",
                    self.window(),
                    excerpt(text)
                ),
                vec![x.event.clone()],
            ));
        }
        out
    }

    /// The window in words: `seq 3 to seq 9 (4 messages, after a compaction)`.
    fn window(&self) -> String {
        match self.window {
            None => "empty".to_string(),
            Some((a, b)) => format!(
                "seq {a} to seq {b} ({} message{}{})",
                self.messages.len(),
                if self.messages.len() == 1 { "" } else { "s" },
                if self.summary.is_some() {
                    ", after a compaction"
                } else {
                    ""
                }
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentchaos_protocol::event::{Body, Effect, RecoveryStatus, Redaction};

    fn records(events: &[Event]) -> Vec<Record> {
        events
            .iter()
            .enumerate()
            .map(|(i, e)| Record {
                seq: i as u64,
                id: event_id(i as u64),
                ts: "2026-01-01T00:00:00.000Z".into(),
                redaction: Redaction::Public,
                body: Body::Known(e.clone()),
            })
            .collect()
    }

    fn user(parent: Option<Seq>, text: &str) -> Event {
        Event::UserMessage {
            parent: parent.map(event_id),
            text: text.into(),
        }
    }

    /// A run with a committed side effect, a compaction and a branch
    /// switch, interrupted and recovered.
    fn session() -> Vec<Record> {
        records(&[
            Event::RunStarted {
                run_id: "r1".into(),
            },
            user(None, "first question asked"),
            Event::ToolCall {
                parent: Some(event_id(1)),
                call_id: "c1".into(),
                tool: "deploy".into(),
                args: serde_json::json!({"v": 2}),
                effect: Effect::SideEffect,
                operation_id: Some("op-c1".into()),
                target: Some("prod".into()),
                needs_approval: false,
            },
            Event::ToolStarted {
                call_id: "c1".into(),
            },
            Event::EffectCommitted {
                call_id: "c1".into(),
                operation_id: "op-c1".into(),
                external_ref: "x-7".into(),
            },
            user(Some(2), "second question asked"),
            user(Some(5), "third question asked"),
            Event::Compaction {
                parent: Some(event_id(6)),
                summary: "the summary of it all".into(),
                first_kept_id: event_id(5),
                tokens_before: 9,
            },
            user(Some(7), "fourth question asked"),
            Event::RunInterrupted {
                run_id: "r1".into(),
            },
            Event::ToolRecovery {
                call_id: "c1".into(),
                status: RecoveryStatus::Uncertain,
                phase: Phase::Committed,
            },
        ])
    }

    #[test]
    fn the_projection_follows_the_protocol_and_agrees_with_agentstore_on_a_valid_log() {
        let log = session();
        let view = projection(&log);
        assert_eq!(view.next_seq, 11);
        assert_eq!(view.open_run, None);
        assert_eq!(view.interrupted_runs, ["r1"]);
        assert_eq!(view.leaf.as_deref(), Some("e8"));
        assert_eq!(view.branch, ["e5", "e6", "e7", "e8"]);
        let c = &view.open_calls[0];
        assert_eq!(
            (
                c.phase,
                c.external_ref.as_deref(),
                c.recovery,
                c.target.as_deref()
            ),
            (
                Phase::Committed,
                Some("x-7"),
                Some(Phase::Committed),
                Some("prod")
            )
        );
        assert_eq!(view.committed_operations, ["op-c1"]);
        // Two independent readings of one valid log: the test's only use of
        // agentstore's fold, as a cross-check, never as the expected value.
        let theirs =
            agentstore::adapter::projection_view(&agentstore::projection::fold(&log).unwrap());
        assert_eq!(view.differences(&theirs), Vec::<String>::new());
        // Back to the first question: off the compacted branch, no window.
        let mut moved = log.clone();
        moved.extend(
            records(&[Event::LeafMoved { leaf: event_id(1) }])
                .into_iter()
                .map(|mut r| {
                    r.seq = 11;
                    r.id = event_id(11);
                    r
                }),
        );
        assert_eq!(projection(&moved).branch, ["e1"]);
    }

    const GOOD: &str = "<summary>\nthe summary of it all\n</summary>\n[user] second question asked\n[user] third question asked\n[user] fourth question asked\n<recovery>\n- run r1 was interrupted.\n- call c1 (tool deploy): uncertain, phase committed.\n</recovery>\n";

    #[test]
    fn a_context_shows_the_summary_the_window_in_order_and_the_recovery_lines() {
        let want = context(&session());
        assert_eq!(want.summary.as_ref().unwrap().text, "the summary of it all");
        assert_eq!(want.messages.len(), 3);
        assert_eq!(want.excluded[0].text, "first question asked");
        assert_eq!(want.problems(GOOD, None), vec![]);
        let shown = |text: &str, budget| -> Vec<(Shown, String)> {
            want.problems(text, budget)
                .into_iter()
                .map(|p| (p.shown, p.expected))
                .collect()
        };
        let no_summary = GOOD.replace("the summary of it all", "");
        assert!(shown(&no_summary, None)[0]
            .1
            .contains("the summary of the compaction"));
        let old = GOOD.replace(
            "[user] second",
            "[user] first question asked\n[user] second",
        );
        assert_eq!(shown(&old, None)[0].0, Shown::Window);
        assert!(shown(&old, None)[0]
            .1
            .contains("not \"first question asked\""));
        let reordered = GOOD
            .replace("third", "XX")
            .replace("fourth", "third")
            .replace("XX", "fourth");
        assert!(shown(&reordered, None)[0]
            .1
            .contains("\"fourth question asked\""));
        let no_phase = GOOD.replace("phase committed", "phase started");
        assert_eq!(shown(&no_phase, Some(3))[0].0, Shown::Recovery);
        // A budget drops the oldest first: keeping the oldest without the newest is wrong.
        let trimmed = GOOD.replace("[user] second question asked\n", "");
        assert_eq!(want.problems(&trimmed, Some(20)), vec![]);
        let newest_gone = GOOD.replace("[user] fourth question asked\n", "");
        assert!(shown(&newest_gone, Some(20))[0]
            .1
            .contains("drop the oldest messages first"));
        // Unbudgeted, every message must be there.
        assert!(!want.problems(&trimmed, None).is_empty());
    }

    #[test]
    fn budgets_leave_room_for_the_recovery_block_half_the_context_and_all_but_a_token() {
        assert_eq!(
            budgets(&"x".repeat(400), Some(&"y".repeat(41))),
            [11, 50, 99]
        );
        assert_eq!(budgets("short", None), [1]);
    }
}
