//! Reading a session back from its tables: calls, runs, the active branch,
//! the projection the protocol defines, and the model's context.
//!
//! Everything here is a query; nothing writes.

use std::fmt::Write;

use agentchaos_protocol::event::{
    Decision, Effect, Event, Phase, PlanStep, ReconcileOutcome, StepStatus,
};
use agentchaos_protocol::view::{CallView, Plan, ProjectionView};
use rusqlite::{Connection, OptionalExtension, Row};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::mutant::{self, Mutant};

/// The wire word of a unit enum (`side_effect`, `started`, ...), as stored.
pub fn word<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        other => unreachable!("a unit enum serializes to a string, got {other:?}"),
    }
}

fn from_word<T: DeserializeOwned>(s: String) -> rusqlite::Result<T> {
    serde_json::from_value(Value::String(s)).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn opt_word<T: DeserializeOwned>(s: Option<String>) -> rusqlite::Result<Option<T>> {
    s.map(from_word).transpose()
}

/// A tool call as the tables know it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRow {
    pub seq: i64,
    pub call_id: String,
    pub tool: String,
    pub args: Value,
    pub effect: Effect,
    pub operation_id: Option<String>,
    pub target: Option<String>,
    pub needs_approval: bool,
    pub approval: Option<Decision>,
    pub started: bool,
    pub recovery: Option<Phase>,
    pub reconciled: Option<ReconcileOutcome>,
    /// From the effect ledger: the call's effect is committed.
    pub external_ref: Option<String>,
}

impl CallRow {
    /// How far it got: a ledger entry, else a durable intent, else nothing.
    pub fn phase(&self) -> Phase {
        if self.external_ref.is_some() {
            Phase::Committed
        } else if self.started {
            Phase::Started
        } else {
            Phase::Requested
        }
    }

    /// Marked by recovery and not reconciled since.
    pub fn is_uncertain(&self) -> bool {
        self.recovery.is_some() && self.reconciled.is_none()
    }

    fn from_row(r: &Row) -> rusqlite::Result<CallRow> {
        let args: String = r.get(3)?;
        Ok(CallRow {
            seq: r.get(0)?,
            call_id: r.get(1)?,
            tool: r.get(2)?,
            args: serde_json::from_str(&args).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    3,
                    rusqlite::types::Type::Text,
                    Box::new(e),
                )
            })?,
            effect: from_word(r.get(4)?)?,
            operation_id: r.get(5)?,
            target: r.get(6)?,
            needs_approval: r.get(7)?,
            approval: opt_word(r.get(8)?)?,
            started: r.get(9)?,
            recovery: opt_word(r.get(10)?)?,
            reconciled: opt_word(r.get(11)?)?,
            external_ref: r.get(12)?,
        })
    }

    fn view(&self) -> CallView {
        CallView {
            call_id: self.call_id.clone(),
            tool: self.tool.clone(),
            args: self.args.clone(),
            effect: self.effect,
            operation_id: self.operation_id.clone(),
            target: self.target.clone(),
            needs_approval: self.needs_approval,
            approval: self.approval,
            phase: self.phase(),
            external_ref: self.external_ref.clone(),
            recovery: self.recovery,
            reconciled: self.reconciled,
        }
    }
}

const OPEN_CALLS: &str =
    "SELECT c.seq, c.call_id, c.tool, c.args, c.effect, c.operation_id, c.target,
        c.needs_approval, c.approval, c.started, c.recovery, c.reconciled, e.external_ref
    FROM calls c LEFT JOIN effects e ON e.call_seq = c.seq
    WHERE c.result_seq IS NULL";

/// The open call with this id.
pub fn open_call(conn: &Connection, call_id: &str) -> Result<Option<CallRow>> {
    conn.query_row(
        &format!("{OPEN_CALLS} AND c.call_id = ?1"),
        [call_id],
        CallRow::from_row,
    )
    .optional()
    .map_err(StoreError::sqlite("read calls"))
}

/// Every call without a result, in call order.
pub fn open_calls(conn: &Connection) -> Result<Vec<CallRow>> {
    let mut stmt = conn
        .prepare_cached(&format!("{OPEN_CALLS} ORDER BY c.seq"))
        .map_err(StoreError::sqlite("read calls"))?;
    let rows = stmt
        .query_map([], CallRow::from_row)
        .map_err(StoreError::sqlite("read calls"))?;
    rows.collect::<rusqlite::Result<_>>()
        .map_err(StoreError::sqlite("read calls"))
}

/// The seq the next event gets.
pub fn next_seq(conn: &Connection) -> Result<u64> {
    let n: i64 = conn
        .query_row("SELECT COALESCE(MAX(seq) + 1, 0) FROM events", [], |r| {
            r.get(0)
        })
        .map_err(StoreError::sqlite("read events"))?;
    Ok(n as u64)
}

/// The run started and not ended.
pub fn open_run(conn: &Connection) -> Result<Option<String>> {
    conn.query_row("SELECT run_id FROM runs WHERE ended IS NULL", [], |r| {
        r.get(0)
    })
    .optional()
    .map_err(StoreError::sqlite("read runs"))
}

/// The latest run, if it was interrupted (no run started since).
pub fn interrupted_runs(conn: &Connection) -> Result<Vec<String>> {
    let run: Option<String> = conn
        .query_row(
            "SELECT run_id FROM runs WHERE ended = 'interrupted'
               AND started_seq = (SELECT MAX(started_seq) FROM runs)",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(StoreError::sqlite("read runs"))?;
    Ok(run.into_iter().collect())
}

/// The active leaf.
pub fn leaf(conn: &Connection) -> Result<Option<i64>> {
    conn.query_row("SELECT leaf FROM session", [], |r| r.get(0))
        .map_err(StoreError::sqlite("read session"))
}

/// The active branch, oldest first: the path from the root to the leaf,
/// cut at the first kept entry of the compaction nearest to the leaf.
pub fn branch(conn: &Connection) -> Result<Vec<i64>> {
    let mut stmt = conn
        .prepare_cached("SELECT parent, first_kept FROM nodes WHERE seq = ?1")
        .map_err(StoreError::sqlite("read nodes"))?;
    let mut path = Vec::new();
    let mut cut: Option<i64> = None;
    let mut cursor = leaf(conn)?;
    while let Some(seq) = cursor {
        if cut.is_some_and(|k| seq < k) {
            break;
        }
        let (parent, first_kept): (Option<i64>, Option<i64>) = stmt
            .query_row([seq], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(StoreError::sqlite("read nodes"))?;
        cut = cut.or(first_kept);
        path.push(seq);
        cursor = parent;
    }
    path.reverse();
    Ok(path)
}

fn event_at(conn: &Connection, seq: i64) -> Result<Event> {
    let json: String = conn
        .query_row("SELECT json FROM events WHERE seq = ?1", [seq], |r| {
            r.get(0)
        })
        .map_err(StoreError::sqlite("read events"))?;
    serde_json::from_str(&json)
        .map_err(|e| StoreError::Damage(format!("event {seq} does not fit its type: {e}")))
}

fn plan(conn: &Connection) -> Result<Option<Plan>> {
    let row: Option<(String, String)> = conn
        .query_row("SELECT goal, steps FROM plan", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()
        .map_err(StoreError::sqlite("read plan"))?;
    row.map(|(goal, steps)| {
        serde_json::from_str::<Vec<PlanStep>>(&steps)
            .map(|steps| Plan { goal, steps })
            .map_err(|e| StoreError::Damage(format!("plan steps do not fit: {e}")))
    })
    .transpose()
}

/// The projection as protocol version 1 defines it.
pub fn projection(conn: &Connection) -> Result<ProjectionView> {
    let mut ops = conn
        .prepare_cached("SELECT operation_id FROM effects ORDER BY operation_id")
        .map_err(StoreError::sqlite("read effects"))?;
    let committed: Vec<String> = ops
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(StoreError::sqlite("read effects"))?;
    let id = |s: i64| format!("e{s}");
    Ok(ProjectionView {
        next_seq: next_seq(conn)?,
        open_run: open_run(conn)?,
        interrupted_runs: interrupted_runs(conn)?,
        leaf: leaf(conn)?.map(id),
        branch: branch(conn)?.into_iter().map(id).collect(),
        open_calls: open_calls(conn)?.iter().map(CallRow::view).collect(),
        committed_operations: committed,
        plan: plan(conn)?,
    })
}

fn tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

fn entry_text(event: &Event) -> Option<String> {
    Some(match event {
        Event::UserMessage { text, .. } => format!("user: {text}\n"),
        Event::AssistantMessage { text, .. } => format!("assistant: {text}\n"),
        Event::ToolCall {
            call_id,
            tool,
            args,
            target,
            ..
        } => match target {
            Some(t) => format!("tool call {call_id}: {tool} on {t} {args}\n"),
            None => format!("tool call {call_id}: {tool} {args}\n"),
        },
        Event::ToolResult {
            call_id,
            status,
            output,
            blob,
            ..
        } => {
            let body = match (blob, output) {
                (Some(b), _) => format!("(blob {}, {} bytes)", b.digest, b.size),
                (None, Some(Value::String(s))) => s.clone(),
                (None, Some(v)) => v.to_string(),
                (None, None) => String::new(),
            };
            format!("tool result {call_id} ({}): {body}\n", word(status))
        }
        _ => return None,
    })
}

/// The recovery notice: every interrupted run and every uncertain call,
/// each on its own line (`run <id> … interrupted`, `call <id> … phase <phase>`).
pub fn recovery_notice(conn: &Connection) -> Result<String> {
    if mutant::active(Mutant::DropRecoveryNotice) {
        return Ok(String::new()); // Broken on purpose: the model never hears of the crash.
    }
    let runs = interrupted_runs(conn)?;
    let calls: Vec<CallRow> = open_calls(conn)?
        .into_iter()
        .filter(CallRow::is_uncertain)
        .collect();
    if runs.is_empty() && calls.is_empty() {
        return Ok(String::new());
    }
    let mut out = String::from(
        "RECOVERY: the previous process crashed. Check these before relying on them:\n",
    );
    for run in runs {
        let _ = writeln!(out, "  run {run} was interrupted before it finished.");
    }
    for c in calls {
        let phase = c.recovery.unwrap_or(c.phase());
        let mut what = format!("call {} ({}", c.call_id, c.tool);
        if let Some(t) = &c.target {
            let _ = write!(what, " on {t}");
        }
        if let Some(op) = &c.operation_id {
            let _ = write!(what, ", operation {op}");
        }
        let advice = match (phase, &c.operation_id) {
            (Phase::Requested, _) => "it never started, so it is safe to run.".to_string(),
            (Phase::Started, Some(op)) => format!(
                "it may have run; ask the tool whether operation {op} happened before running it again."
            ),
            (Phase::Started, None) => {
                "it may have run; check its effect before relying on it.".to_string()
            }
            (Phase::Committed, _) => format!(
                "its effect happened (ref {}) but its result was lost; do not run it again.",
                c.external_ref.as_deref().unwrap_or("unknown")
            ),
        };
        let _ = writeln!(
            out,
            "  {what}) is uncertain, phase {}: {advice}",
            word(&phase)
        );
    }
    Ok(out)
}

/// The model's view of the active branch: the compaction summary, the
/// plan, the kept entries (oldest dropped first to fit `budget` tokens) and
/// the recovery notice, which no budget trims.
pub fn context(conn: &Connection, budget: Option<u64>) -> Result<String> {
    let mut head = String::new();
    let mut entries = Vec::new();
    for seq in branch(conn)? {
        match event_at(conn, seq)? {
            Event::Compaction {
                summary,
                tokens_before,
                ..
            } => {
                // The latest compaction on the branch wins; the entries it
                // kept (from its first_kept) are on the branch already.
                head = format!(
                    "Summary of the earlier conversation ({tokens_before} tokens):\n{summary}\n"
                );
            }
            event => entries.extend(entry_text(&event)),
        }
    }
    if let Some(Plan { goal, steps }) = plan(conn)? {
        let _ = writeln!(head, "Plan: {goal}");
        for s in steps {
            let status = match s.status {
                StepStatus::Pending => "pending".to_string(),
                StepStatus::InProgress => "in progress".to_string(),
                StepStatus::Done => "done".to_string(),
                StepStatus::Blocked(why) => format!("blocked: {why}"),
            };
            let _ = writeln!(head, "  {} {} ({status})", s.id, s.title);
        }
    }
    let notice = recovery_notice(conn)?;
    let mut skip = 0;
    if let Some(budget) = budget {
        let mut total =
            tokens(&head) + tokens(&notice) + entries.iter().map(|e| tokens(e)).sum::<u64>();
        while total > budget && skip < entries.len() {
            total -= tokens(&entries[skip]);
            skip += 1;
        }
    }
    let mut out = head;
    if skip > 0 {
        let _ = writeln!(out, "({skip} earlier entries left out to fit the budget)");
    }
    for e in &entries[skip..] {
        out.push_str(e);
    }
    out.push_str(&notice);
    Ok(out)
}
