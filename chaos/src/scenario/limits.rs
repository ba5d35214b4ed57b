//! How large a scenario may make a session: the sizes every store must
//! take (`chaos/PROTOCOL.md`, "Sizes"), checked before anything runs.
//!
//! A store may refuse a larger event, and an `events` reply holds the
//! whole log in one line of at most
//! [`MAX_REPLY_BYTES`](crate::store::adapter::client::MAX_REPLY_BYTES): a
//! scenario beyond these limits would fail on a store that does nothing
//! wrong, so it is refused as bad input (exit 2), never run and blamed on
//! the store. This module owns those limits and the estimate of the
//! events a scenario makes; it must never touch a store or a file.

use std::collections::BTreeMap;

use crate::scenario::{operation_id, parallel_call_id, Scenario, Seg, Step};

/// The largest event a scenario may make the agent append, as JSON: every
/// store must take one this large.
pub const MAX_EVENT_BYTES: usize = 2 << 20;

/// The most JSON all the events of a scenario may add up to: half of one
/// `events` reply, leaving room for what the store writes itself and for
/// appends retried after an `io` error.
pub const MAX_LOG_BYTES: usize = 32 << 20;

/// The most steps a scenario may have (a `parallel` step counts as its
/// calls and one more): a crash-free run of every step must end well
/// within `--hang-timeout`, even through a slow adapter.
pub const MAX_STEPS: usize = 4096;

/// What each event may hold besides the scenario's own text: its type,
/// ids, parent, seq, hashes, timestamps.
const EVENT_OVERHEAD: usize = 1024;

/// The length of `s` as a JSON string, quotes included.
fn json_len(s: &str) -> usize {
    2 + s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum::<usize>()
}

/// The events a scenario makes, as far as their size goes: each step's
/// largest event and the total, step by step.
struct Tally {
    /// Workspace files: path -> length of the content as JSON, quotes
    /// excluded (a `read_file` returns it).
    files: BTreeMap<String, usize>,
    total: usize,
}

impl Tally {
    /// Counts one event whose scenario-given content is `payload` bytes of
    /// JSON; the event's size, overhead included.
    fn event(&mut self, payload: usize) -> usize {
        let size = payload + EVENT_OVERHEAD;
        self.total += size;
        size
    }

    /// The events of one tool call: `tool_call`, `approval`,
    /// `tool_started`, `effect_committed`, `tool_result` (and after a
    /// crash `tool_reconciled`, no larger than the result); the largest.
    fn tool(&mut self, call_id: &str, step: &Step, scenario: &Scenario) -> usize {
        let inv = scenario.invocation(call_id.to_string(), step);
        let mut largest =
            self.event(inv.args.to_string().len() + json_len(&inv.target) + call_id.len());
        // approval, tool_started, effect_committed: ids and the target.
        for _ in 0..3 {
            largest = largest.max(self.event(2 * json_len(&inv.target)));
        }
        let result = match step {
            Step::ReadFile { path, .. } => self
                .files
                .get(path)
                .map_or(json_len(path) + 64, |content| content + 2),
            Step::RunTests { .. } => {
                scenario
                    .tests
                    .iter()
                    .map(|t| json_len(&t.name) + 32)
                    .sum::<usize>()
                    + 96
            }
            Step::WriteFile { path, content, .. } => {
                self.files.insert(path.clone(), json_len(content) - 2);
                json_len(path) + 64
            }
            Step::AppendLine { path, line, .. } => {
                let tag = format!("  # {}\n", operation_id(call_id));
                let added = json_len(line) - 2 + json_len(&tag) - 2;
                *self.files.entry(path.clone()).or_insert(0) += added;
                json_len(path) + 64
            }
            Step::Remote {
                service, action, ..
            } => 2 * json_len(service) + json_len(action) + 64,
            _ => 0,
        };
        largest.max(self.event(result))
    }
}

/// Checks the scenario against [`MAX_STEPS`], [`MAX_EVENT_BYTES`] and
/// [`MAX_LOG_BYTES`]; the error names the step where a limit is passed.
pub fn check(scenario: &Scenario) -> Result<(), (Vec<Seg>, String)> {
    let steps = scenario.step_count();
    let mut tally = Tally {
        files: scenario
            .files
            .iter()
            .map(|(p, c)| (p.clone(), json_len(c) - 2))
            .collect(),
        total: 0,
    };
    let mut counted = 0;
    for (r, run) in scenario.runs.iter().enumerate() {
        // run_started, request_header, run_finished.
        tally.event(json_len(&run.id));
        tally.event(json_len(&run.id) + json_len(&run.model));
        tally.event(json_len(&run.id));
        for (s, step) in run.steps.iter().enumerate() {
            let at = || {
                vec![
                    Seg::Key("runs".into()),
                    Seg::Index(r),
                    Seg::Key("steps".into()),
                    Seg::Index(s),
                ]
            };
            counted += match step {
                Step::Parallel { calls, .. } => calls.len() + 1,
                _ => 1,
            };
            if counted > MAX_STEPS {
                return Err((
                    at(),
                    format!("the scenario has {steps} steps, more than the {MAX_STEPS} a scenario may have"),
                ));
            }
            let (what, largest) = match step {
                Step::User { text, .. } => ("user_message", tally.event(json_len(text))),
                Step::Assistant { text, .. } => ("assistant_message", tally.event(json_len(text))),
                Step::Plan { goal, steps } => (
                    "plan_updated",
                    tally.event(
                        json_len(goal) + serde_json::to_string(steps).map_or(0, |s| s.len()),
                    ),
                ),
                Step::Compact { summary, .. } => ("compaction", tally.event(json_len(summary))),
                Step::SwitchTo { label } => ("leaf_moved", tally.event(json_len(label))),
                Step::Checkpoint {} => ("checkpoint", 0),
                Step::Parallel { calls, .. } => {
                    let largest = calls
                        .iter()
                        .enumerate()
                        .map(|(k, call)| {
                            tally.tool(&parallel_call_id(&run.id, s, k), call, scenario)
                        })
                        .max()
                        .unwrap_or(0);
                    ("call", largest)
                }
                tool => (
                    "call",
                    tally.tool(&crate::scenario::call_id(&run.id, s), tool, scenario),
                ),
            };
            if largest > MAX_EVENT_BYTES {
                return Err((
                    at(),
                    format!(
                        "this step's {what} would be an event of about {largest} bytes of JSON, over the {MAX_EVENT_BYTES} bytes every store must take (chaos/PROTOCOL.md, \"Sizes\")"
                    ),
                ));
            }
            if tally.total > MAX_LOG_BYTES {
                return Err((
                    at(),
                    format!(
                        "by this step the scenario's events add up to about {} bytes of JSON, over the {MAX_LOG_BYTES} one session may hold (chaos/PROTOCOL.md, \"Sizes\")",
                        tally.total
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lengths_count_escapes() {
        for s in ["", "abc", "a\"b\\c", "\n\t\u{1}\u{7f}", "é€😀"] {
            assert_eq!(
                json_len(s),
                serde_json::to_string(s).unwrap().len(),
                "{s:?}"
            );
        }
    }

    fn scenario(steps: &str) -> Result<Scenario, crate::scenario::InputError> {
        crate::scenario::parse(
            &format!(
                "{{\"name\": \"s\", \"files\": {{\"a.txt\": \"x\"}},\n\"runs\": [{{\"id\": \"r\", \"steps\": [\n{steps}\n]}}]}}"
            ),
            "s.json",
        )
    }

    #[test]
    fn an_event_larger_than_every_store_takes_is_refused_at_its_step() {
        let big = "x".repeat(MAX_EVENT_BYTES);
        let e = scenario(&format!(
            "{{\"do\": \"user\", \"text\": \"hi\"}},\n{{\"do\": \"user\", \"text\": \"{big}\"}}"
        ))
        .unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(
            e.message.starts_with(
                "runs[0].steps[1]: this step's user_message would be an event of about "
            ),
            "{e}"
        );
        // 1 MiB of control characters is 6 MiB of JSON.
        let ctrl = "\\u0001".repeat(1 << 20);
        let e = scenario(&format!(
            "{{\"do\": \"write_file\", \"path\": \"b.bin\", \"content\": \"{ctrl}\"}}"
        ))
        .unwrap_err();
        assert!(
            e.message.starts_with("runs[0].steps[0]: this step's call "),
            "{e}"
        );
        let half = "y".repeat(1 << 20);
        assert!(scenario(&format!(
            "{{\"do\": \"write_file\", \"path\": \"b.txt\", \"content\": \"{half}\"}}"
        ))
        .is_ok());
    }

    #[test]
    fn a_file_grown_past_the_limit_cannot_be_read_back() {
        let line = "z".repeat(900 << 10);
        let append =
            format!("{{\"do\": \"append_line\", \"path\": \"a.txt\", \"line\": \"{line}\"}}");
        let read = "{\"do\": \"read_file\", \"path\": \"a.txt\"}";
        assert!(scenario(&format!("{append},\n{append},\n{read}")).is_ok());
        let e = scenario(&format!("{append},\n{append},\n{append},\n{read}")).unwrap_err();
        assert!(
            e.message.starts_with("runs[0].steps[3]: this step's call "),
            "{e}"
        );
    }

    #[test]
    fn too_many_steps_or_too_large_a_session_is_refused() {
        let step = "{\"do\": \"checkpoint\"}";
        let steps = vec![step; MAX_STEPS + 1].join(",\n");
        let e = scenario(&steps).unwrap_err();
        assert!(
            e.message
                .starts_with(&format!("runs[0].steps[{MAX_STEPS}]: the scenario has")),
            "{e}"
        );
        let text = "w".repeat(MAX_EVENT_BYTES / 2);
        let user = format!("{{\"do\": \"user\", \"text\": \"{text}\"}}");
        let n = MAX_LOG_BYTES / (MAX_EVENT_BYTES / 2);
        let e = scenario(&vec![user.as_str(); n].join(",\n")).unwrap_err();
        assert!(e.message.contains("events add up to about"), "{e}");
    }
}
