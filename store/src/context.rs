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

/// Renders the context of the active branch (see [`write()`]).
pub fn render(
    paths: &SessionPaths,
    projection: &Projection,
    index: &SparseIndex,
    budget_tokens: Option<u64>,
) -> Result<String> {
    let mut out = Vec::new();
    write(&mut out, paths, projection, index, budget_tokens)?;
    String::from_utf8(out)
        .map_err(|e| crate::Error::Invalid(format!("the rendered context is not UTF-8: {e}")))
}

/// Writes the context of the active branch to `out` while it reads the
/// branch from the log, holding one entry at a time: memory does not grow
/// with the branch (an uncompacted session's is every message). With a
/// budget the branch is read twice: once to size the entries, once to
/// write those kept. A failed write is an [`crate::Error::Io`] on
/// `<context output>`.
pub fn write(
    out: &mut dyn std::io::Write,
    paths: &SessionPaths,
    projection: &Projection,
    index: &SparseIndex,
    budget_tokens: Option<u64>,
) -> Result<()> {
    // Broken on purpose: the model never sees what the compaction summarized.
    let mut head = head(projection, !fault::active(Fault::ContextDropsSummary));
    let mut recovery = if fault::active(Fault::DropRecoveryBlock) {
        String::new() // Broken on purpose: the model never hears of the crash.
    } else {
        recovery_block(projection)
    };

    let mut keep_from = 0;
    let mut entry_count = 0;
    if let Some(budget) = budget_tokens {
        let mut sizes = Vec::new();
        for_each_entry(paths, projection, index, |e| {
            sizes.push(estimate_tokens(e));
            Ok(())
        })?;
        entry_count = sizes.len();
        let entry_tokens = sizes.iter().sum::<u64>();
        if estimate_tokens(&head) + estimate_tokens(&recovery) + entry_tokens > budget
            && fault::active(Fault::ContextBudgetDropsRecovery)
        {
            recovery.clear(); // Broken on purpose: the block is trimmed first.
        }
        let fixed = estimate_tokens(&head) + estimate_tokens(&recovery);
        let mut total = fixed + entry_tokens;
        while total > budget && keep_from < sizes.len() {
            total -= sizes[keep_from];
            keep_from += 1;
        }
    }
    // Entries [keep_from, keep_until) are written.
    let mut keep_until = usize::MAX;
    if fault::active(Fault::ContextBudgetDropsNewest) && keep_from > 0 {
        // Broken on purpose: the newest entries go, the oldest stay.
        keep_until = entry_count - keep_from;
        keep_from = 0;
    }
    let failed = crate::Error::io("write", std::path::Path::new("<context output>"));
    if keep_from > 0 {
        let _ = writeln!(
            head,
            "[{keep_from} earlier entries omitted to fit the token budget]"
        );
    }
    let mut written = out.write_all(head.as_bytes());
    let mut n = 0;
    for_each_entry(paths, projection, index, |e| {
        if n >= keep_from && n < keep_until && written.is_ok() {
            written = out.write_all(e.as_bytes());
        }
        n += 1;
        Ok(())
    })?;
    written
        .and_then(|()| out.write_all(recovery.as_bytes()))
        .map_err(failed)
}

/// Calls `f` with the rendered line (or block) of each entry of the active
/// branch window, in order.
fn for_each_entry(
    paths: &SessionPaths,
    projection: &Projection,
    index: &SparseIndex,
    mut f: impl FnMut(&str) -> Result<()>,
) -> Result<()> {
    let branch = projection.branch();
    let Some(&first) = branch.first() else {
        return Ok(());
    };
    let compaction_seq = projection.compaction().map(|c| c.seq);
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
        if let Some(line) = rec.event().and_then(render_entry) {
            f(&line)?;
        }
    }
    Ok(())
}

/// The context's opening: the compaction summary (when `summary` and the
/// branch has one), then the plan. Every store rendering agentstore's
/// context shape starts with it (the PostgreSQL store does).
pub fn head(projection: &Projection, summary: bool) -> String {
    let mut head = String::new();
    if let Some(c) = projection.compaction().filter(|_| summary) {
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
    head
}

/// One entry of the window as the context shows it (messages, tool calls
/// and results; other events show nothing).
pub fn render_entry(event: &Event) -> Option<String> {
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
