//! The model's view of a session: what the next request is built from.
//!
//! Rendered from the active branch only: the latest compaction summary,
//! the plan, the kept entries (messages, tool calls, tool results or their
//! blob references) and a `<recovery>` block that names every interrupted
//! run and every uncertain call with what to verify before relying on it.
//! A token budget drops the oldest entries first; it never trims the
//! recovery block, which disappears only once every uncertain call is
//! reconciled (and a new run has started).

use std::fmt::Write;

use crate::error::Result;
use crate::event::{Event, Phase, ResultStatus, StepStatus};
use crate::fault::{self, Fault};
use crate::index::SparseIndex;
use crate::layout::SessionPaths;
use crate::projection::{OpenCall, Projection};
use crate::scan::Scanner;

/// Rough token estimate used for budgets: four bytes per token.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// Renders the context of the active branch.
pub fn render(
    paths: &SessionPaths,
    projection: &Projection,
    index: &SparseIndex,
    budget_tokens: Option<u64>,
) -> Result<String> {
    let mut head = String::new();
    // Broken on purpose: the model never sees what the compaction summarized.
    let summary = projection
        .compaction()
        .filter(|_| !fault::active(Fault::ContextDropsSummary));
    if let Some(c) = summary {
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
    let entries = branch_entries(paths, projection, index)?;
    let mut recovery = if fault::active(Fault::DropRecoveryBlock) {
        String::new() // Broken on purpose: the model never hears of the crash.
    } else {
        recovery_block(projection)
    };

    let entry_tokens = entries.iter().map(|e| estimate_tokens(e)).sum::<u64>();
    if budget_tokens
        .is_some_and(|b| estimate_tokens(&head) + estimate_tokens(&recovery) + entry_tokens > b)
        && fault::active(Fault::ContextBudgetDropsRecovery)
    {
        recovery.clear(); // Broken on purpose: the block is trimmed first.
    }
    let fixed = estimate_tokens(&head) + estimate_tokens(&recovery);
    let mut keep_from = 0;
    if let Some(budget) = budget_tokens {
        let mut total = fixed + entry_tokens;
        while total > budget && keep_from < entries.len() {
            total -= estimate_tokens(&entries[keep_from]);
            keep_from += 1;
        }
    }
    let mut entries = &entries[..];
    if fault::active(Fault::ContextBudgetDropsNewest) {
        // Broken on purpose: the newest entries go, the oldest stay.
        entries = &entries[..entries.len() - keep_from];
        keep_from = 0;
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
    Ok(out)
}

/// One rendered line (or block) per entry of the active branch window.
fn branch_entries(
    paths: &SessionPaths,
    projection: &Projection,
    index: &SparseIndex,
) -> Result<Vec<String>> {
    let branch = projection.branch();
    let Some(&first) = branch.first() else {
        return Ok(Vec::new());
    };
    let compaction_seq = projection.compaction().map(|c| c.seq);
    let mut out = Vec::with_capacity(branch.len());
    let mut wanted = branch.iter().copied().peekable();
    let mut scanner = Scanner::open(&paths.events(), index.seek(first))?;
    while let Some(&next) = wanted.peek() {
        let Some((_, rec)) = scanner.next_record()? else {
            break;
        };
        if rec.seq < next {
            continue;
        }
        wanted.next();
        if Some(rec.seq) == compaction_seq {
            continue; // shown as the summary at the top
        }
        if let Some(event) = rec.event() {
            if let Some(line) = render_entry(event) {
                out.push(line);
            }
        }
    }
    Ok(out)
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

fn describe_call(call: &OpenCall) -> String {
    let mut s = format!("call {} (tool {}", call.call_id, call.tool);
    if let Some(t) = &call.target {
        let _ = write!(s, ", target {t}");
    }
    if let Some(op) = &call.operation_id {
        let _ = write!(s, ", operation {op}");
    }
    s.push(')');
    s
}

/// The `<recovery>` block, or nothing when there is nothing uncertain.
pub fn recovery_block(projection: &Projection) -> String {
    let uncertain = projection.uncertain_calls();
    let interrupted = projection.interrupted_runs();
    if uncertain.is_empty() && interrupted.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<recovery>\nThe previous process stopped before finishing. Verify the following before relying on it.\n",
    );
    for run in interrupted {
        let _ = writeln!(out, "- run {run} was interrupted: it has no run_finished.");
    }
    for call in uncertain {
        let what = describe_call(call);
        let phase = call.recovery.unwrap_or(call.phase());
        let advice = match phase {
            Phase::Requested => "uncertain, phase requested: it never started; it is safe to run.".to_string(),
            Phase::Started => match &call.operation_id {
                Some(op) => format!(
                    "uncertain, phase started: its intent is durable but its outcome is unknown; ask the tool about operation {op} before relying on it or running it again."
                ),
                None => "uncertain, phase started: it may or may not have run; check its effect before relying on it.".to_string(),
            },
            Phase::Committed => format!(
                "uncertain, phase committed: its effect happened (external ref {}) but the result was lost; never run it again.",
                call.committed.as_deref().unwrap_or("unknown")
            ),
        };
        let _ = writeln!(out, "- {what}: {advice}");
    }
    out.push_str("</recovery>\n");
    out
}
