//! effect-at-most-once, at the end of a trial: no operation applied twice
//! in the world or the workspace, at most one commit per operation id and
//! one approval per call, no call started again after its commit, no gated
//! call started before its approval. The world and the workspace are the
//! harness's records, never the store's.

use std::collections::BTreeMap;

use agentchaos_protocol::event::{Decision, Event, Record};

use crate::agent::tools::tagged_operation;
use crate::agent::world::Application;
use crate::check::{v, Invariant, Violation};
use crate::history::History;
use crate::model::{describe_record, Model};

fn call_events(records: &[Record], call_id: &str) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.event().and_then(crate::model::call_of) == Some(call_id))
        .map(describe_record)
        .collect()
}

/// effect-at-most-once: in the world, the workspace and the log.
pub(super) fn effect_at_most_once(h: &History, model: &Model, out: &mut Vec<Violation>) {
    let when = "at the end of the trial";
    let records = &h.final_obs.records;
    let call_of_op = |op: &str| {
        model
            .calls
            .values()
            .find(|c| c.operation_id.as_deref() == Some(op))
            .map(|c| c.call_id.clone())
    };
    let mut by_op: BTreeMap<&str, Vec<&Application>> = BTreeMap::new();
    for a in &h.world {
        by_op.entry(&a.id).or_default().push(a);
    }
    for (op, apps) in by_op {
        if apps.len() > 1 {
            let lives: Vec<String> = apps.iter().map(|a| a.life.to_string()).collect();
            out.push(v(
                Invariant::EffectAtMostOnce,
                when,
                format!(
                    "operation {op} ({}: {}) applied at most once in the world",
                    apps[0].service, apps[0].action
                ),
                format!(
                    "applied {} times, by lives {}",
                    apps.len(),
                    lives.join(", ")
                ),
                call_of_op(op)
                    .map(|c| call_events(records, &c))
                    .unwrap_or_default(),
            ));
        }
    }
    let mut tags: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    for (file, bytes) in &h.workspace {
        for line in std::str::from_utf8(bytes).unwrap_or_default().lines() {
            if let Some(op) = tagged_operation(line) {
                tags.entry(op).or_insert((0, file)).0 += 1;
            }
        }
    }
    for (op, (n, file)) in tags {
        if n > 1 {
            out.push(v(
                Invariant::EffectAtMostOnce,
                when,
                format!("operation {op} appended to {file} at most once"),
                format!("{n} lines tagged {op} in {file}"),
                call_of_op(op)
                    .map(|c| call_events(records, &c))
                    .unwrap_or_default(),
            ));
        }
    }
    for call in model.calls.values() {
        let events = || call_events(records, &call.call_id);
        if call.approvals.len() > 1 {
            out.push(v(
                Invariant::EffectAtMostOnce,
                when,
                format!("the human asked once about call {}", call.call_id),
                format!("{} approval events", call.approvals.len()),
                events(),
            ));
        }
        if let Some(&(commit, _)) = call.commits.first() {
            if let Some(&s) = call.starts.iter().find(|&&s| s > commit) {
                out.push(v(
                    Invariant::EffectAtMostOnce,
                    when,
                    format!(
                        "call {} never started again after its effect was committed (seq {commit})",
                        call.call_id
                    ),
                    format!("tool_started again at seq {s}"),
                    events(),
                ));
            }
        }
        if call.needs_approval {
            let approved_at = call
                .approvals
                .iter()
                .find(|(_, d)| *d == Decision::Approved)
                .map(|&(s, _)| s);
            if let Some(&s) = call
                .starts
                .iter()
                .find(|&&s| approved_at.is_none_or(|a| s < a))
            {
                out.push(v(
                    Invariant::EffectAtMostOnce,
                    when,
                    format!(
                        "gated call {} starts only after a durable approval",
                        call.call_id
                    ),
                    format!("tool_started at seq {s} without one before it"),
                    events(),
                ));
            }
        }
    }
    let mut commits: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for r in records {
        if let Some(Event::EffectCommitted { operation_id, .. }) = r.event() {
            commits
                .entry(operation_id)
                .or_default()
                .push(describe_record(r));
        }
    }
    for (op, seen) in commits {
        if seen.len() > 1 {
            out.push(v(
                Invariant::EffectAtMostOnce,
                when,
                format!("at most one effect_committed for operation {op} in the log"),
                format!("{} commits", seen.len()),
                seen,
            ));
        }
    }
}
