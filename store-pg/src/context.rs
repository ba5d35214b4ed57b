//! The model's context, rendered from the fold and the events this process
//! holds: the compaction summary nearest to the leaf, the plan, every entry
//! of the active branch's window (messages verbatim, tool calls and
//! results), then agentstore's `<recovery>` block. A budget drops the
//! oldest entries first; the summary and the recovery block always stay.
//!
//! It only reads; nothing here writes.

use std::fmt::Write;

use agentchaos_protocol::event::{Event, ResultStatus, StepStatus};
use agentstore::context::{estimate_tokens, recovery_block};
use agentstore::projection::Projection;

/// The context of the active branch, within `budget_tokens` if given.
pub fn render(projection: &Projection, events: &[Event], budget_tokens: Option<u64>) -> String {
    let mut head = String::new();
    if let Some(c) = projection.compaction() {
        let _ = writeln!(
            head,
            "<summary tokens_before=\"{}\">\n{}\n</summary>",
            c.tokens_before, c.summary
        );
    }
    if let Some(plan) = projection.plan() {
        let _ = writeln!(head, "<plan goal={:?}>", plan.goal);
        for step in &plan.steps {
            let status = match &step.status {
                StepStatus::Pending => "pending".to_string(),
                StepStatus::InProgress => "in progress".to_string(),
                StepStatus::Done => "done".to_string(),
                StepStatus::Blocked(why) => format!("blocked: {why}"),
            };
            let _ = writeln!(head, "- [{status}] {} {}", step.id, step.title);
        }
        let _ = writeln!(head, "</plan>");
    }
    let recovery = recovery_block(projection);
    let compaction_seq = projection.compaction().map(|c| c.seq);
    let entries: Vec<String> = projection
        .branch()
        .iter()
        .filter(|&&seq| Some(seq) != compaction_seq)
        .filter_map(|&seq| events.get(seq as usize).and_then(render_entry))
        .collect();
    let mut keep_from = 0;
    if let Some(budget) = budget_tokens {
        let mut total = estimate_tokens(&head)
            + estimate_tokens(&recovery)
            + entries.iter().map(|e| estimate_tokens(e)).sum::<u64>();
        while total > budget && keep_from < entries.len() {
            total -= estimate_tokens(&entries[keep_from]);
            keep_from += 1;
        }
    }
    let mut out = head;
    if keep_from > 0 {
        let _ = writeln!(
            out,
            "[{keep_from} earlier entries omitted to fit the token budget]"
        );
    }
    for e in &entries[keep_from..] {
        out.push_str(e);
    }
    out.push_str(&recovery);
    out
}

fn render_entry(event: &Event) -> Option<String> {
    Some(match event {
        Event::UserMessage { text, .. } => format!("[user] {text}\n"),
        Event::AssistantMessage { text, .. } => format!("[assistant] {text}\n"),
        Event::ToolCall {
            call_id,
            tool,
            args,
            target,
            ..
        } => {
            let target = target
                .as_ref()
                .map(|t| format!(" target={t}"))
                .unwrap_or_default();
            format!("[tool_call {call_id} {tool}{target}] {args}\n")
        }
        Event::ToolResult {
            call_id,
            status,
            output,
            blob,
            ..
        } => {
            let status = match status {
                ResultStatus::Ok => "ok",
                ResultStatus::Error => "error",
            };
            let body = match (output, blob) {
                (_, Some(b)) => format!("<blob sha256:{} {} bytes>", b.digest, b.size),
                (Some(serde_json::Value::String(s)), None) => s.clone(),
                (Some(v), None) => v.to_string(),
                (None, None) => String::new(),
            };
            format!("[tool_result {call_id} {status}] {body}\n")
        }
        _ => return None,
    })
}
