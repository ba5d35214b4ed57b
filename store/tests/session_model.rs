//! Model-based tests of the session layer: random valid sessions, cut at
//! random event boundaries, recovered, and checked against a tiny model;
//! and the checkpoint property snapshot(k) + replay(k..n) == replay(0..n).

use std::collections::BTreeMap;

use agentstore::event::{Effect, Event, Phase, ResultStatus, RunStatus};
use agentstore::projection::{fold, Projection, SeenNodes};
use agentstore::{Record, Scanner, Session, SessionId, SessionOptions, SessionPaths};
use proptest::prelude::*;
use serde_json::json;

/// One step an agent may take; turned into a valid event (or nothing) by `Driver`.
#[derive(Debug, Clone)]
enum Op {
    StartRun,
    FinishRun,
    User,
    Assistant,
    Call(Effect),
    Start,
    Commit,
    Result,
    Compact,
    MoveLeaf(usize),
    Checkpoint,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::StartRun),
        1 => Just(Op::FinishRun),
        2 => Just(Op::User),
        2 => Just(Op::Assistant),
        1 => Just(Op::Call(Effect::None)),
        1 => Just(Op::Call(Effect::Idempotent)),
        2 => Just(Op::Call(Effect::SideEffect)),
        3 => Just(Op::Start),
        2 => Just(Op::Commit),
        2 => Just(Op::Result),
        1 => Just(Op::Compact),
        1 => (0usize..50).prop_map(Op::MoveLeaf),
        1 => Just(Op::Checkpoint),
    ]
}

/// What the model expects of each call.
#[derive(Debug, Clone, PartialEq)]
struct ModelCall {
    seq: u64,
    effect: Effect,
    started: bool,
    committed: bool,
}

#[derive(Debug, Default, Clone)]
struct Model {
    open_run: Option<String>,
    runs: u32,
    calls: BTreeMap<String, ModelCall>,
    next_call: u32,
    /// Seqs of message-like entries (any branch).
    nodes: Vec<u64>,
    leaf: Option<u64>,
}

impl Model {
    fn phase(c: &ModelCall) -> Phase {
        if c.committed {
            Phase::Committed
        } else if c.started {
            Phase::Started
        } else {
            Phase::Requested
        }
    }
}

/// Drives a session with ops, keeping the model in step.
fn drive(s: &mut Session, model: &mut Model, ops: &[Op]) {
    for op in ops {
        let leaf = model.leaf.map(agentstore::event::event_id);
        let seq = s.projection().next_seq();
        match op {
            Op::StartRun if model.open_run.is_none() => {
                model.runs += 1;
                let run_id = format!("r{}", model.runs);
                s.append(Event::RunStarted {
                    run_id: run_id.clone(),
                })
                .unwrap();
                model.open_run = Some(run_id);
            }
            Op::FinishRun => {
                if let Some(run_id) = model.open_run.take() {
                    s.append(Event::RunFinished {
                        run_id,
                        status: RunStatus::Completed,
                    })
                    .unwrap();
                }
            }
            Op::User | Op::Assistant => {
                let text = format!("message at {seq}");
                let event = if matches!(op, Op::User) {
                    Event::UserMessage { parent: leaf, text }
                } else {
                    Event::AssistantMessage { parent: leaf, text }
                };
                s.append(event).unwrap();
                model.nodes.push(seq);
                model.leaf = Some(seq);
            }
            Op::Call(effect) => {
                model.next_call += 1;
                let call_id = format!("c{}", model.next_call);
                s.append(Event::ToolCall {
                    parent: leaf,
                    call_id: call_id.clone(),
                    tool: "t".into(),
                    args: json!({"n": model.next_call}),
                    effect: *effect,
                    operation_id: (*effect == Effect::SideEffect).then(|| format!("op-{call_id}")),
                    target: None,
                    needs_approval: false,
                })
                .unwrap();
                model.nodes.push(seq);
                model.leaf = Some(seq);
                model.calls.insert(
                    call_id,
                    ModelCall {
                        seq,
                        effect: *effect,
                        started: false,
                        committed: false,
                    },
                );
            }
            Op::Start => {
                if let Some((id, c)) = model.calls.iter_mut().find(|(_, c)| !c.started) {
                    s.start_tool(id).unwrap();
                    c.started = true;
                }
            }
            Op::Commit => {
                if let Some((id, c)) = model
                    .calls
                    .iter_mut()
                    .find(|(_, c)| c.started && !c.committed && c.effect == Effect::SideEffect)
                {
                    s.append(Event::EffectCommitted {
                        call_id: id.clone(),
                        operation_id: format!("op-{id}"),
                        external_ref: format!("ref-{id}"),
                    })
                    .unwrap();
                    c.committed = true;
                }
            }
            Op::Result => {
                let done = model
                    .calls
                    .iter()
                    .find(|(_, c)| c.started && (c.committed || c.effect != Effect::SideEffect))
                    .map(|(id, _)| id.clone());
                if let Some(id) = done {
                    s.append(Event::ToolResult {
                        parent: leaf,
                        call_id: id.clone(),
                        status: ResultStatus::Ok,
                        output: Some(json!("ok")),
                        blob: None,
                    })
                    .unwrap();
                    model.calls.remove(&id);
                    model.nodes.push(seq);
                    model.leaf = Some(seq);
                }
            }
            Op::Compact => {
                let branch = s.projection().branch().to_vec();
                if branch.len() >= 2 {
                    s.append(Event::Compaction {
                        parent: leaf,
                        summary: format!("summary at {seq}"),
                        first_kept_id: agentstore::event::event_id(branch[branch.len() / 2]),
                        tokens_before: seq * 10,
                    })
                    .unwrap();
                    model.nodes.push(seq);
                    model.leaf = Some(seq);
                }
            }
            Op::MoveLeaf(i) if !model.nodes.is_empty() => {
                let to = model.nodes[i % model.nodes.len()];
                s.append(Event::LeafMoved {
                    leaf: agentstore::event::event_id(to),
                })
                .unwrap();
                model.leaf = Some(to);
            }
            Op::Checkpoint => {
                s.checkpoint().unwrap();
            }
            _ => {}
        }
    }
}

fn records(paths: &SessionPaths) -> Vec<Record> {
    Scanner::open(&paths.events(), agentstore::LogPosition::START)
        .unwrap()
        .map(|r| r.unwrap().1)
        .collect()
}

/// Replays the first `k` events into a model of what recovery must find.
fn model_of_prefix(recs: &[Record]) -> (Option<String>, Vec<(String, Phase)>) {
    let mut open_run = None;
    let mut calls: BTreeMap<String, ModelCall> = BTreeMap::new();
    for r in recs {
        match r.event().unwrap() {
            Event::RunStarted { run_id } => open_run = Some(run_id.clone()),
            Event::RunFinished { .. } | Event::RunInterrupted { .. } => open_run = None,
            Event::ToolCall {
                call_id, effect, ..
            } => {
                calls.insert(
                    call_id.clone(),
                    ModelCall {
                        seq: r.seq,
                        effect: *effect,
                        started: false,
                        committed: false,
                    },
                );
            }
            Event::ToolStarted { call_id } => calls.get_mut(call_id).unwrap().started = true,
            Event::EffectCommitted { call_id, .. } => {
                calls.get_mut(call_id).unwrap().committed = true
            }
            Event::ToolResult { call_id, .. } => {
                calls.remove(call_id);
            }
            _ => {}
        }
    }
    let mut orphans: Vec<(u64, String, Phase)> = calls
        .iter()
        .map(|(id, c)| (c.seq, id.clone(), Model::phase(c)))
        .collect();
    orphans.sort();
    (
        open_run,
        orphans.into_iter().map(|(_, id, p)| (id, p)).collect(),
    )
}

fn new_session(dir: &std::path::Path) -> (std::path::PathBuf, SessionId, Session) {
    let root = dir.join("root");
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let id = SessionId::new("model").unwrap();
    let s = Session::create(&root, &id, &ws, SessionOptions::default()).unwrap();
    (root, id, s)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A crash after any event: recovery finds exactly the model's orphans,
    /// with the model's phases, marks each once, and a second recovery adds nothing.
    #[test]
    fn recovery_matches_the_model_at_every_cut(ops in prop::collection::vec(op(), 1..40), cut_frac in 0.0f64..=1.0) {
        let dir = tempfile::tempdir().unwrap();
        let (root, id, mut s) = new_session(dir.path());
        let mut model = Model::default();
        drive(&mut s, &mut model, &ops);
        let paths = s.paths().clone();
        drop(s);
        let recs = records(&paths);
        let k = 1 + ((recs.len() - 1) as f64 * cut_frac) as usize;
        // Cut the log after event k (a crash right after its fdatasync):
        // a checkpoint taken after that never happened.
        let text = std::fs::read(paths.events()).unwrap();
        let end = text.iter().enumerate().filter(|(_, &b)| b == b'\n').nth(k - 1).unwrap().0 + 1;
        std::fs::write(paths.events(), &text[..end]).unwrap();
        if agentstore::checkpoint::read_snapshot(&paths).unwrap().is_some_and(|c| c.next_seq > k as u64) {
            std::fs::remove_file(paths.snapshot()).unwrap();
        }
        let (expected_run, expected_orphans) = model_of_prefix(&recs[..k]);

        let (mut s, _) = Session::open(&root, &id, SessionOptions::default()).unwrap();
        let state = s.recover().unwrap();
        prop_assert_eq!(state.interrupted_runs.clone(), expected_run.iter().cloned().collect::<Vec<_>>());
        let found: Vec<(String, Phase)> = state.uncertain.iter().map(|c| (c.call_id.clone(), c.phase)).collect();
        prop_assert_eq!(&found, &expected_orphans);
        prop_assert_eq!(state.appended as usize, expected_orphans.len() + expected_run.iter().count());
        let ctx = s.context(None).unwrap();
        for (call_id, _) in &expected_orphans {
            let needle = format!("- call {call_id} (");
            prop_assert!(ctx.contains(&needle), "context misses {}: {}", call_id, ctx);
        }
        prop_assert_eq!(s.recover().unwrap().appended, 0);
        drop(s);
        // Reopened (from a snapshot if one is trusted) = full replay from disk.
        let (s, _) = Session::open(&root, &id, SessionOptions::default()).unwrap();
        let (replayed, torn) = agentstore::projection::replay(&paths).unwrap();
        prop_assert!(torn.is_none());
        prop_assert_eq!(s.projection(), &replayed);
    }

    /// For every k: fold(0..k) then apply(k..n) == fold(0..n), and a snapshot
    /// written on disk at k resumes to the same projection as a full replay.
    #[test]
    fn snapshot_plus_tail_equals_full_replay(ops in prop::collection::vec(op(), 1..30)) {
        let dir = tempfile::tempdir().unwrap();
        let (root, id, mut s) = new_session(dir.path());
        let mut model = Model::default();
        drive(&mut s, &mut model, &ops);
        let paths = s.paths().clone();
        drop(s);
        let recs = records(&paths);
        let full = fold(&recs).unwrap();
        let mut all_nodes = SeenNodes::default();
        for r in &recs {
            all_nodes.observe(r);
        }
        for k in 0..=recs.len() {
            let mut p: Projection = fold(&recs[..k]).unwrap();
            for r in &recs[k..] {
                p.apply(r, &mut all_nodes).unwrap();
            }
            prop_assert_eq!(&p, &full, "in memory, k = {}", k);
        }
        // On disk: a checkpoint at every k, then a cold resume (k grows,
        // so each log prefix is at least what the last snapshot covers).
        let text = std::fs::read(paths.events()).unwrap();
        let _ = std::fs::remove_file(paths.snapshot());
        let ends: Vec<usize> = text.iter().enumerate().filter(|(_, &b)| b == b'\n').map(|(i, _)| i + 1).collect();
        for k in 1..=recs.len() {
            std::fs::write(paths.events(), &text[..ends[k - 1]]).unwrap();
            let (mut s, _) = Session::open(&root, &id, SessionOptions::default()).unwrap();
            s.checkpoint().unwrap();
            drop(s);
            std::fs::write(paths.events(), &text).unwrap();
            let (s, report) = Session::open(&root, &id, SessionOptions::default()).unwrap();
            prop_assert_eq!(&report.snapshot, &agentstore::SnapshotUse::Used { next_seq: k as u64 });
            prop_assert_eq!(s.projection(), &full, "on disk, k = {}", k);
        }
    }
}
