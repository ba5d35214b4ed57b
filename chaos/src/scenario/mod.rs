//! Scenarios: the declarative JSON script an agent follows (Jepsen's generator).
//!
//! A scenario names the initial workspace files, the tests `run_tests`
//! checks, and one or more runs of steps (messages, tool calls, plan
//! updates, compaction, branch switches, checkpoints). This module owns the
//! format, its parsing with file/line errors, its validation, and its
//! compilation into the flat list of [`Op`]s the agent executes. It must
//! never touch a store, a workspace or the world. The format is documented
//! in `scenarios/README.md`; the shipped ones are built in ([`builtin`]).

pub mod builtin;
pub mod generate;
pub mod interleaving;
pub mod limits;
pub mod name;
pub mod rng;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use agentchaos_protocol::event::{Decision, Effect, PlanStep};
use serde::{Deserialize, Serialize};

use name::is_name;
pub use name::SafeName;

/// Largest workspace file or tool output a scenario may ask for.
pub const MAX_FILE_BYTES: usize = 1 << 20;
/// Largest output of a `large_output` step.
pub const MAX_LARGE_OUTPUT: u64 = 8 << 20;

/// Most calls one `parallel` step runs at once (an agent's parallel tool
/// calls; each one a waiter of the store's group commit).
pub const MAX_PARALLEL_CALLS: usize = 8;

/// Bad input: one line naming the file, the line when known, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.file, line, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for InputError {}

/// A whole scenario file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Validated when parsed: it names directories and files.
    pub name: SafeName,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Initial workspace: relative path -> content.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// What `run_tests` checks.
    #[serde(default)]
    pub tests: Vec<TestSpec>,
    pub runs: Vec<Run>,
}

/// One test: passes when `file` contains `contains`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestSpec {
    pub name: String,
    pub file: String,
    pub contains: String,
}

/// One run of the agent: `run_started`, a request header, the steps, `run_finished`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    pub id: String,
    #[serde(default = "default_model")]
    pub model: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub system_prompt: String,
    pub steps: Vec<Step>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn default_model() -> String {
    "model-1".to_string()
}

/// One step of a run. Tool steps may carry `approval`: the human's scripted
/// decision, which makes the call gated (`needs_approval`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    User {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// The labelled message this one answers: its parent, in place of
        /// the active leaf. It starts a branch without a `leaf_moved` (an
        /// implicit branch) and becomes the active leaf.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply_to: Option<String>,
    },
    Assistant {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// As for `user`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply_to: Option<String>,
    },
    Plan {
        goal: String,
        steps: Vec<PlanStep>,
    },
    ReadFile {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval: Option<Decision>,
    },
    RunTests {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval: Option<Decision>,
    },
    WriteFile {
        path: String,
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval: Option<Decision>,
    },
    AppendLine {
        path: String,
        line: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval: Option<Decision>,
    },
    Remote {
        service: String,
        action: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval: Option<Decision>,
    },
    LargeOutput {
        bytes: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval: Option<Decision>,
    },
    Compact {
        summary: String,
        keep: usize,
    },
    SwitchTo {
        label: String,
    },
    Checkpoint {},
    /// Tool calls made at once, as an agent's parallel tool calls: their
    /// `tool_call`s are written as one group, then their `tool_started`s,
    /// each group waited for from one thread per call; the effects run in
    /// order; then the commits and the results, as groups again. `calls`
    /// are 2 to [`MAX_PARALLEL_CALLS`] tool steps without approval.
    Parallel {
        calls: Vec<Step>,
        /// The seed of the harness's interleaving of the calls' waiters
        /// (which waits next, when a group's leader syncs, in which order
        /// the answers are reported): the same seed, the same interleaving.
        #[serde(default, skip_serializing_if = "is_zero")]
        schedule: u64,
    },
}

/// The tools an agent can call (see `tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    ReadFile,
    RunTests,
    WriteFile,
    AppendLine,
    Remote,
    LargeOutput,
}

impl ToolKind {
    pub fn name(self) -> &'static str {
        match self {
            ToolKind::ReadFile => "read_file",
            ToolKind::RunTests => "run_tests",
            ToolKind::WriteFile => "write_file",
            ToolKind::AppendLine => "append_line",
            ToolKind::Remote => "remote",
            ToolKind::LargeOutput => "large_output",
        }
    }

    /// Every tool kind, in the order the agent's request header lists them.
    pub const ALL: [ToolKind; 6] = [
        ToolKind::ReadFile,
        ToolKind::RunTests,
        ToolKind::WriteFile,
        ToolKind::AppendLine,
        ToolKind::Remote,
        ToolKind::LargeOutput,
    ];

    pub fn from_name(name: &str) -> Option<ToolKind> {
        ToolKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// What the call does to the world, which decides what recovery may do.
    pub fn effect(self) -> Effect {
        match self {
            ToolKind::ReadFile | ToolKind::RunTests | ToolKind::LargeOutput => Effect::None,
            ToolKind::WriteFile => Effect::Idempotent,
            ToolKind::AppendLine | ToolKind::Remote => Effect::SideEffect,
        }
    }
}

/// A tool step, ready to become a `tool_call` event.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInvocation {
    pub kind: ToolKind,
    pub call_id: String,
    /// Idempotency key, for side-effecting tools only.
    pub operation_id: Option<String>,
    pub args: serde_json::Value,
    pub target: String,
    pub approval: Option<Decision>,
}

/// One thing the agent does, in order. Runs are bracketed by `RunStart` and `RunEnd`.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    RunStart {
        run: usize,
    },
    /// A message; `reply_to` (a label) hangs it under that message
    /// instead of the active leaf.
    User {
        text: String,
        reply_to: Option<String>,
    },
    Assistant {
        text: String,
        reply_to: Option<String>,
    },
    Plan {
        goal: String,
        steps: Vec<PlanStep>,
    },
    Tool(ToolInvocation),
    /// A `parallel` step's calls, in the order their events are written,
    /// and the seed of its waiters' interleaving.
    Parallel {
        calls: Vec<ToolInvocation>,
        schedule: u64,
    },
    Compact {
        summary: String,
        keep: usize,
    },
    SwitchTo {
        label: String,
    },
    Checkpoint,
    RunEnd {
        run: usize,
    },
}

/// An [`Op`] with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacedOp {
    pub op: Op,
    /// Index of the run it belongs to.
    pub run: usize,
    /// The label its message carries, if any.
    pub label: Option<String>,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::RunStart { run } => write!(f, "start of run #{run}"),
            Op::User { .. } => write!(f, "user message"),
            Op::Assistant { .. } => write!(f, "assistant message"),
            Op::Plan { .. } => write!(f, "plan update"),
            Op::Tool(t) => write!(f, "{} call {}", t.kind.name(), t.call_id),
            Op::Parallel { calls, .. } => {
                let ids: Vec<&str> = calls.iter().map(|c| c.call_id.as_str()).collect();
                write!(f, "parallel calls {}", ids.join(", "))
            }
            Op::Compact { .. } => write!(f, "compaction"),
            Op::SwitchTo { label } => write!(f, "branch switch to {label:?}"),
            Op::Checkpoint => write!(f, "checkpoint"),
            Op::RunEnd { run } => write!(f, "end of run #{run}"),
        }
    }
}

impl Step {
    fn tool(&self) -> Option<(ToolKind, Option<Decision>)> {
        Some(match self {
            Step::ReadFile { approval, .. } => (ToolKind::ReadFile, *approval),
            Step::RunTests { approval } => (ToolKind::RunTests, *approval),
            Step::WriteFile { approval, .. } => (ToolKind::WriteFile, *approval),
            Step::AppendLine { approval, .. } => (ToolKind::AppendLine, *approval),
            Step::Remote { approval, .. } => (ToolKind::Remote, *approval),
            Step::LargeOutput { approval, .. } => (ToolKind::LargeOutput, *approval),
            _ => return None,
        })
    }

    fn label(&self) -> Option<&str> {
        match self {
            Step::User { label, .. } | Step::Assistant { label, .. } => label.as_deref(),
            _ => None,
        }
    }
}

/// The call id of step `step` of run `run_id`.
pub fn call_id(run_id: &str, step: usize) -> String {
    format!("{run_id}-{step}")
}

/// The call id of call `k` of the `parallel` step `step` of run `run_id`.
pub fn parallel_call_id(run_id: &str, step: usize, k: usize) -> String {
    format!("{run_id}-{step}.{k}")
}

/// The operation id (idempotency key) of a call.
pub fn operation_id(call_id: &str) -> String {
    format!("op-{call_id}")
}

impl Scenario {
    /// Compiles the scenario into the ops the agent executes, in order.
    pub fn ops(&self) -> Vec<PlacedOp> {
        let mut ops = Vec::new();
        for (r, run) in self.runs.iter().enumerate() {
            let placed = |op| PlacedOp {
                op,
                run: r,
                label: None,
            };
            ops.push(placed(Op::RunStart { run: r }));
            for (s, step) in run.steps.iter().enumerate() {
                let op = match step {
                    Step::User { text, reply_to, .. } => Op::User {
                        text: text.clone(),
                        reply_to: reply_to.clone(),
                    },
                    Step::Assistant { text, reply_to, .. } => Op::Assistant {
                        text: text.clone(),
                        reply_to: reply_to.clone(),
                    },
                    Step::Plan { goal, steps } => Op::Plan {
                        goal: goal.clone(),
                        steps: steps.clone(),
                    },
                    Step::Compact { summary, keep } => Op::Compact {
                        summary: summary.clone(),
                        keep: *keep,
                    },
                    Step::SwitchTo { label } => Op::SwitchTo {
                        label: label.clone(),
                    },
                    Step::Checkpoint {} => Op::Checkpoint,
                    Step::Parallel { calls, schedule } => Op::Parallel {
                        calls: calls
                            .iter()
                            .enumerate()
                            .map(|(k, call)| self.invocation(parallel_call_id(&run.id, s, k), call))
                            .collect(),
                        schedule: *schedule,
                    },
                    _ => Op::Tool(self.invocation(call_id(&run.id, s), step)),
                };
                ops.push(PlacedOp {
                    op,
                    run: r,
                    label: step.label().map(str::to_string),
                });
            }
            ops.push(placed(Op::RunEnd { run: r }));
        }
        ops
    }

    fn invocation(&self, call_id: String, step: &Step) -> ToolInvocation {
        let (kind, approval) = step.tool().expect("only tool steps are invocations");
        let operation_id = (kind.effect() == Effect::SideEffect).then(|| operation_id(&call_id));
        let (args, target) = match step {
            Step::ReadFile { path, .. } => (serde_json::json!({ "path": path }), path.clone()),
            Step::RunTests { .. } => (serde_json::json!({}), "tests".to_string()),
            Step::WriteFile { path, content, .. } => (
                serde_json::json!({ "path": path, "content": content }),
                path.clone(),
            ),
            Step::AppendLine { path, line, .. } => (
                serde_json::json!({ "path": path, "line": line }),
                path.clone(),
            ),
            Step::Remote {
                service, action, ..
            } => (
                serde_json::json!({ "service": service, "action": action }),
                service.clone(),
            ),
            Step::LargeOutput { bytes, .. } => {
                (serde_json::json!({ "bytes": bytes }), "output".to_string())
            }
            _ => unreachable!("checked by step.tool()"),
        };
        ToolInvocation {
            kind,
            call_id,
            operation_id,
            args,
            target,
            approval,
        }
    }

    /// Whether the agent stores a blob (a `large_output` step's output).
    pub fn uses_blobs(&self) -> bool {
        self.runs
            .iter()
            .flat_map(|r| &r.steps)
            .flat_map(|s| match s {
                Step::Parallel { calls, .. } => calls.as_slice(),
                one => std::slice::from_ref(one),
            })
            .any(|s| matches!(s, Step::LargeOutput { .. }))
    }

    /// Total number of steps over all runs, a `parallel` step counted as
    /// its calls and one more (so making it sequential makes it smaller).
    pub fn step_count(&self) -> usize {
        self.runs
            .iter()
            .flat_map(|r| &r.steps)
            .map(|s| match s {
                Step::Parallel { calls, .. } => calls.len() + 1,
                _ => 1,
            })
            .sum()
    }

    /// The scenario as pretty JSON (for random and shrunk scenarios).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a scenario serializes");
        s.push('\n');
        s
    }

    /// Checks everything serde cannot: names, ids, paths, labels, sizes.
    /// The error carries a JSON path such as `runs[0].steps[3].label`.
    pub fn validate(&self) -> Result<(), (Vec<Seg>, String)> {
        use Seg::{Index as I, Key as K};
        let key = |k: &str| K(k.to_string());
        for (path, content) in &self.files {
            let at = vec![key("files"), key(path)];
            check_path(path).map_err(|m| (at.clone(), m.to_string()))?;
            if content.len() > MAX_FILE_BYTES {
                return Err((at, format!("file is larger than {MAX_FILE_BYTES} bytes")));
            }
        }
        let mut test_names = BTreeSet::new();
        for (i, t) in self.tests.iter().enumerate() {
            let at = |k: &str| vec![key("tests"), I(i), key(k)];
            if t.name.is_empty() || !test_names.insert(t.name.as_str()) {
                return Err((
                    at("name"),
                    format!("test name {:?} is empty or repeated", t.name),
                ));
            }
            check_path(&t.file).map_err(|m| (at("file"), m.to_string()))?;
        }
        if self.runs.is_empty() {
            return Err((
                vec![key("runs")],
                "a scenario needs at least one run".into(),
            ));
        }
        let mut run_ids = BTreeSet::new();
        let mut labels = BTreeSet::new();
        // Entries of the history tree so far: a compaction needs one to keep.
        let mut entries = 0usize;
        for (r, run) in self.runs.iter().enumerate() {
            let at_run = |k: &str| vec![key("runs"), I(r), key(k)];
            if !is_name(&run.id, 32) || !run_ids.insert(run.id.as_str()) {
                return Err((
                    at_run("id"),
                    format!(
                        "run id {:?} must be unique and 1-32 characters of a-z, 0-9, '-', '_' or '.', and not \".\" or \"..\"",
                        run.id
                    ),
                ));
            }
            if run.model.is_empty() {
                return Err((at_run("model"), "model must not be empty".into()));
            }
            if run.steps.is_empty() {
                return Err((at_run("steps"), "a run needs at least one step".into()));
            }
            for (s, step) in run.steps.iter().enumerate() {
                let at = |k: &str| vec![key("runs"), I(r), key("steps"), I(s), key(k)];
                // Checked before this step's own label is known: a message
                // cannot answer itself.
                if let Step::User {
                    reply_to: Some(to), ..
                }
                | Step::Assistant {
                    reply_to: Some(to), ..
                } = step
                {
                    if !labels.contains(to) {
                        return Err((
                            at("reply_to"),
                            format!(
                                "label {to:?} is not set by any earlier user or assistant step"
                            ),
                        ));
                    }
                }
                if let Some(label) = step.label() {
                    if label.is_empty() || !labels.insert(label.to_string()) {
                        return Err((at("label"), format!("label {label:?} is empty or repeated")));
                    }
                }
                check_tool_fields(step).map_err(|(field, m)| (at(field), m))?;
                match step {
                    Step::Parallel { calls, .. } => {
                        if !(2..=MAX_PARALLEL_CALLS).contains(&calls.len()) {
                            return Err((
                                at("calls"),
                                format!("a parallel step makes 2 to {MAX_PARALLEL_CALLS} calls"),
                            ));
                        }
                        for (k, call) in calls.iter().enumerate() {
                            let at_call = |f: &str| {
                                vec![
                                    key("runs"),
                                    I(r),
                                    key("steps"),
                                    I(s),
                                    key("calls"),
                                    I(k),
                                    key(f),
                                ]
                            };
                            match call.tool() {
                                None => {
                                    return Err((
                                        at_call("do"),
                                        "a parallel step's calls are tool steps".into(),
                                    ))
                                }
                                Some((_, Some(_))) => {
                                    return Err((
                                        at_call("approval"),
                                        "a parallel call cannot wait for approval: the scripted human answers one call at a time".into(),
                                    ))
                                }
                                Some((_, None)) => {}
                            }
                            check_tool_fields(call).map_err(|(field, m)| (at_call(field), m))?;
                        }
                    }
                    Step::Compact { keep, .. } if *keep == 0 => {
                        return Err((at("keep"), "keep must be at least 1".into()));
                    }
                    Step::Compact { .. } if entries == 0 => {
                        return Err((
                            at("do"),
                            "compact needs an earlier message or tool step to keep".into(),
                        ));
                    }
                    Step::SwitchTo { label } if !labels.contains(label) => {
                        return Err((
                            at("label"),
                            format!(
                                "label {label:?} is not set by any earlier user or assistant step"
                            ),
                        ));
                    }
                    _ => {}
                }
                if !matches!(
                    step,
                    Step::SwitchTo { .. } | Step::Checkpoint {} | Step::Plan { .. }
                ) {
                    entries += 1;
                }
            }
        }
        limits::check(self)
    }
}

/// The fields of a tool step that serde cannot check: the field at fault
/// and why.
fn check_tool_fields(step: &Step) -> Result<(), (&'static str, String)> {
    match step {
        Step::ReadFile { path, .. }
        | Step::WriteFile { path, .. }
        | Step::AppendLine { path, .. } => check_path(path).map_err(|m| ("path", m.to_string()))?,
        _ => {}
    }
    match step {
        Step::WriteFile { content, .. } if content.len() > MAX_FILE_BYTES => Err((
            "content",
            format!("content is larger than {MAX_FILE_BYTES} bytes"),
        )),
        Step::AppendLine { line, .. } if line.contains('\n') || line.is_empty() => {
            Err(("line", "line must be non-empty and hold no newline".into()))
        }
        Step::Remote { service, .. } if !is_name(service, 32) => Err((
            "service",
            format!("service {service:?} must be 1-32 characters of a-z, 0-9, '-', '_' or '.', and not \".\" or \"..\""),
        )),
        Step::Remote { action, .. } if action.is_empty() => {
            Err(("action", "action must not be empty".into()))
        }
        Step::LargeOutput { bytes, .. } if *bytes == 0 || *bytes > MAX_LARGE_OUTPUT => {
            Err(("bytes", format!("bytes must be 1..={MAX_LARGE_OUTPUT}")))
        }
        _ => Ok(()),
    }
}

/// A workspace path that would leave the workspace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("path {0:?} must be relative and stay inside the workspace (no '..', no leading '/')")]
struct PathEscapes(String);

/// A workspace path must stay inside the workspace.
fn check_path(path: &str) -> Result<(), PathEscapes> {
    let p = Path::new(path);
    let ok = !path.is_empty()
        && !path.contains('\0')
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if ok {
        Ok(())
    } else {
        Err(PathEscapes(path.to_string()))
    }
}

/// Parses and validates scenario text; `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<Scenario, InputError> {
    let scenario: Scenario = serde_json::from_str(text).map_err(|e| InputError {
        file: file.to_string(),
        line: (e.line() > 0).then(|| error_line(text, &e)),
        message: strip_position(&e.to_string()),
    })?;
    scenario.validate().map_err(|(path, message)| InputError {
        file: file.to_string(),
        line: line_of(text, &path),
        message: format!("{}: {message}", render_path(&path)),
    })?;
    Ok(scenario)
}

/// The line of a serde error. Inside a tagged step serde reports where the
/// object ended; for an unknown field, the line of the field itself is
/// what helps, so look for it backwards from there.
fn error_line(text: &str, e: &serde_json::Error) -> usize {
    let msg = e.to_string();
    let field = msg
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| format!("\"{name}\""));
    let offset: usize = text
        .split_inclusive('\n')
        .take(e.line().saturating_sub(1))
        .map(str::len)
        .sum::<usize>()
        + e.column();
    let offset = offset.min(text.len());
    match field.and_then(|f| text.get(..offset)?.rfind(&f)) {
        Some(at) => text[..at].matches('\n').count() + 1,
        None => e.line(),
    }
}

/// serde_json appends " at line L column C"; the line is already in front.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// The largest scenario file `agentchaos` reads unless told otherwise
/// (`--max-input-bytes`): far above any scenario whose events fit the
/// limits [`Scenario::validate`] holds them to.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 16 << 20;

/// Reads and parses one scenario file of at most `max_bytes` bytes (a
/// regular file: anything else is refused without opening it).
/// `builtin:NAME` is the built-in scenario NAME ([`builtin`]).
pub fn load(path: &Path, max_bytes: u64) -> Result<Scenario, InputError> {
    load_text(path, max_bytes).map(|(scenario, _)| scenario)
}

/// [`load`], and the file's text.
fn load_text(path: &Path, max_bytes: u64) -> Result<(Scenario, String), InputError> {
    let file = path.display().to_string();
    let err = |message: String| InputError {
        file: file.clone(),
        line: None,
        message,
    };
    if let Some(name) = builtin::named(path) {
        let b = name.and_then(builtin::get).ok_or_else(|| {
            err(format!(
                "no such built-in scenario; known: {}",
                builtin::names()
            ))
        })?;
        return Ok((parse(b.text, &file)?, b.text.to_string()));
    }
    let text = crate::bounded::read_to_string(path, max_bytes).map_err(|e| match e {
        crate::bounded::ReadError::TooLarge { .. } => {
            err(format!("{e} (--max-input-bytes raises it)"))
        }
        e => err(e.to_string()),
    })?;
    Ok((parse(&text, &file)?, text))
}

/// A loaded scenario and the file it came from.
#[derive(Debug, Clone)]
pub struct ScenarioFile {
    pub path: PathBuf,
    pub scenario: Scenario,
}

/// Loads one file, or every `*.json` in a directory (sorted by name), or
/// every built-in scenario (`builtin:`), each file of at most `max_bytes`
/// bytes. Scenario names must be unique across what is loaded.
pub fn load_all(path: &Path, max_bytes: u64) -> Result<Vec<ScenarioFile>, InputError> {
    let err = |message: String| InputError {
        file: path.display().to_string(),
        line: None,
        message,
    };
    let files = if builtin::named(path) == Some(None) {
        builtin::ALL
            .iter()
            .map(|b| PathBuf::from(format!("{}{}", builtin::PREFIX, b.name)))
            .collect()
    } else if path.is_dir() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| err(format!("cannot list: {e}")))? {
            let p = entry.map_err(|e| err(format!("cannot list: {e}")))?.path();
            if p.extension().is_some_and(|x| x == "json") {
                files.push(p);
            }
        }
        files.sort();
        if files.is_empty() {
            return Err(err("no *.json scenario files in this directory".into()));
        }
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut out: Vec<ScenarioFile> = Vec::new();
    for f in files {
        let (scenario, text) = load_text(&f, max_bytes)?;
        if let Some(other) = out.iter().find(|o| o.scenario.name == scenario.name) {
            return Err(InputError {
                file: f.display().to_string(),
                line: line_of(&text, &[Seg::Key("name".into())]),
                message: format!(
                    "scenario name {:?} is already used by {}",
                    scenario.name.as_str(),
                    other.path.display()
                ),
            });
        }
        out.push(ScenarioFile { path: f, scenario });
    }
    Ok(out)
}

/// One segment of a JSON path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

fn render_path(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// The 1-based line where the value at `path` starts in the JSON `text`,
/// if the text is well-formed up to it. (serde_json reports lines for
/// syntax and type errors; this finds them for validation errors.)
pub fn line_of(text: &str, path: &[Seg]) -> Option<usize> {
    let mut finder = LineFinder {
        b: text.as_bytes(),
        i: 0,
        target: path,
        current: Vec::new(),
    };
    let pos = finder.value()?.ok()?;
    Some(
        text.as_bytes()[..pos]
            .iter()
            .filter(|&&c| c == b'\n')
            .count()
            + 1,
    )
}

/// A minimal JSON walker: `value()` returns `Some(Ok(pos))` when the target
/// path starts at `pos`, `Some(Err(()))` when the value was walked without
/// finding it, `None` on malformed input.
struct LineFinder<'a> {
    b: &'a [u8],
    i: usize,
    target: &'a [Seg],
    current: Vec<Seg>,
}

impl LineFinder<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn string(&mut self) -> Option<String> {
        if self.b.get(self.i) != Some(&b'"') {
            return None;
        }
        self.i += 1;
        let start = self.i;
        while self.i < self.b.len() {
            match self.b[self.i] {
                b'\\' => self.i += 2,
                b'"' => {
                    let s = String::from_utf8_lossy(&self.b[start..self.i]).into_owned();
                    self.i += 1;
                    return Some(s);
                }
                _ => self.i += 1,
            }
        }
        None
    }

    fn value(&mut self) -> Option<Result<usize, ()>> {
        self.ws();
        if self.current == self.target {
            return Some(Ok(self.i));
        }
        match *self.b.get(self.i)? {
            b'{' => {
                self.i += 1;
                loop {
                    self.ws();
                    if self.b.get(self.i) == Some(&b'}') {
                        self.i += 1;
                        return Some(Err(()));
                    }
                    let key = self.string()?;
                    self.ws();
                    if self.b.get(self.i) != Some(&b':') {
                        return None;
                    }
                    self.i += 1;
                    self.current.push(Seg::Key(key));
                    if let Ok(pos) = self.value()? {
                        return Some(Ok(pos));
                    }
                    self.current.pop();
                    self.ws();
                    match self.b.get(self.i)? {
                        b',' => self.i += 1,
                        b'}' => {
                            self.i += 1;
                            return Some(Err(()));
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut index = 0;
                loop {
                    self.ws();
                    if self.b.get(self.i) == Some(&b']') {
                        self.i += 1;
                        return Some(Err(()));
                    }
                    self.current.push(Seg::Index(index));
                    if let Ok(pos) = self.value()? {
                        return Some(Ok(pos));
                    }
                    self.current.pop();
                    index += 1;
                    self.ws();
                    match self.b.get(self.i)? {
                        b',' => self.i += 1,
                        b']' => {
                            self.i += 1;
                            return Some(Err(()));
                        }
                        _ => return None,
                    }
                }
            }
            b'"' => self.string().map(|_| Err(())),
            _ => {
                while self.i < self.b.len()
                    && !matches!(self.b[self.i], b',' | b']' | b'}')
                    && !self.b[self.i].is_ascii_whitespace()
                {
                    self.i += 1;
                }
                Some(Err(()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{
  "name": "tiny",
  "files": {"a.txt": "x"},
  "runs": [
    {
      "id": "r1",
      "steps": [
        {"do": "user", "text": "hi", "label": "start"},
        {"do": "remote", "service": "chat", "action": "post", "approval": "approved"},
        {"do": "switch_to", "label": "start"}
      ]
    }
  ]
}"#;

    #[test]
    fn parses_and_compiles_ops_with_stable_ids() {
        let s = parse(GOOD, "tiny.json").unwrap();
        let ops = s.ops();
        assert_eq!(ops.len(), 5);
        match &ops[2].op {
            Op::Tool(t) => {
                assert_eq!(t.call_id, "r1-1");
                assert_eq!(t.operation_id.as_deref(), Some("op-r1-1"));
                assert_eq!(t.approval, Some(Decision::Approved));
                assert_eq!(t.kind.effect(), Effect::SideEffect);
            }
            other => panic!("expected a tool op, got {other:?}"),
        }
        assert_eq!(ops[1].label.as_deref(), Some("start"));
        let again = parse(&s.to_json(), "again.json").unwrap();
        assert_eq!(again, s);
    }

    #[test]
    fn unknown_fields_and_syntax_errors_name_the_line() {
        let bad = GOOD.replace("\"label\": \"start\"}", "\"lable\": \"start\"}");
        let e = parse(&bad, "f.json").unwrap_err();
        assert_eq!(e.line, Some(8), "{e}");
        assert!(e.message.contains("lable"), "{e}");
        let e = parse("{\n\"name\": \"x\",\n  \"runs\": [,]\n}", "g.json").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.to_string().starts_with("g.json:3: "), "{e}");
    }

    #[test]
    fn validation_errors_name_the_field_and_its_line() {
        let bad = GOOD.replace(
            r#""do": "switch_to", "label": "start""#,
            r#""do": "switch_to", "label": "nowhere""#,
        );
        let e = parse(&bad, "f.json").unwrap_err();
        assert_eq!(e.line, Some(10), "{e}");
        assert!(e.message.starts_with("runs[0].steps[2].label: "), "{e}");
        // A reply to a label no earlier message set, its own included.
        for to in ["nowhere", "start"] {
            let bad = GOOD.replace(
                r#"{"do": "user", "text": "hi", "label": "start"}"#,
                &format!(r#"{{"do": "user", "text": "hi", "label": "start", "reply_to": "{to}"}}"#),
            );
            let e = parse(&bad, "f.json").unwrap_err();
            assert_eq!(e.line, Some(8), "{e}");
            assert!(e.message.starts_with("runs[0].steps[0].reply_to: "), "{e}");
        }
        let bad = GOOD.replace("\"a.txt\"", "\"../a.txt\"");
        let e = parse(&bad, "f.json").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("stay inside the workspace"), "{e}");
        let bad = GOOD.replace("\"id\": \"r1\"", "\"id\": \"R 1\"");
        assert_eq!(parse(&bad, "f.json").unwrap_err().line, Some(6));
    }

    #[test]
    fn a_parallel_step_compiles_to_one_op_and_is_validated_call_by_call() {
        let parallel = |calls: &str| {
            GOOD.replace(
                r#"{"do": "switch_to", "label": "start"}"#,
                &format!("{{\"do\": \"parallel\", \"calls\": [\n{calls}\n]}}"),
            )
        };
        let two = r#"{"do": "remote", "service": "chat", "action": "post"},
{"do": "append_line", "path": "a.txt", "line": "y"}"#;
        let s = parse(&parallel(two), "p.json").unwrap();
        match &s.ops()[3].op {
            Op::Parallel { calls, .. } => {
                let ids: Vec<&str> = calls.iter().map(|c| c.call_id.as_str()).collect();
                assert_eq!(ids, ["r1-2.0", "r1-2.1"]);
                assert_eq!(calls[1].operation_id.as_deref(), Some("op-r1-2.1"));
            }
            other => panic!("expected a parallel op, got {other:?}"),
        }
        assert_eq!(parse(&s.to_json(), "again.json").unwrap(), s);
        let one = r#"{"do": "read_file", "path": "a.txt"}"#;
        let e = parse(&parallel(one), "p.json").unwrap_err();
        assert!(e.message.starts_with("runs[0].steps[2].calls: "), "{e}");
        let gated = two.replace(r#""post"}"#, r#""post", "approval": "approved"}"#);
        let e = parse(&parallel(&gated), "p.json").unwrap_err();
        assert!(
            e.message
                .starts_with("runs[0].steps[2].calls[0].approval: "),
            "{e}"
        );
        assert_eq!(e.line, Some(11), "{e}");
        let escapes = two.replace(r#""a.txt""#, r#""../a.txt""#);
        let e = parse(&parallel(&escapes), "p.json").unwrap_err();
        assert!(
            e.message.starts_with("runs[0].steps[2].calls[1].path: "),
            "{e}"
        );
        let message = two.replace(
            r#"{"do": "remote", "service": "chat", "action": "post"}"#,
            r#"{"do": "user", "text": "hi"}"#,
        );
        let e = parse(&parallel(&message), "p.json").unwrap_err();
        assert!(
            e.message.starts_with("runs[0].steps[2].calls[0].do: "),
            "{e}"
        );
    }

    #[test]
    fn a_parallel_step_names_its_schedule_and_nothing_else_does() {
        let with = |schedule: &str, step: &str| {
            GOOD.replace(
                r#"{"do": "switch_to", "label": "start"}"#,
                &format!("{step}\n, \"schedule\": {schedule}}}"),
            )
        };
        let calls = r#"{"do": "parallel", "calls": [
{"do": "read_file", "path": "a.txt"}, {"do": "read_file", "path": "a.txt"}]"#;
        let s = parse(&with("17", calls), "p.json").unwrap();
        assert!(
            matches!(s.ops()[3].op, Op::Parallel { schedule: 17, .. }),
            "{:?}",
            s.ops()[3].op
        );
        assert_eq!(parse(&s.to_json(), "again.json").unwrap(), s);
        let e = parse(&with("-1", calls), "p.json").unwrap_err();
        assert_eq!(e.line, Some(13), "{e}");
        assert!(e.to_string().starts_with("p.json:13: "), "{e}");
        let e = parse(&with("\"fast\"", calls), "p.json").unwrap_err();
        assert_eq!(e.line, Some(13), "{e}");
        let e = parse(
            &with("3", r#"{"do": "read_file", "path": "a.txt""#),
            "p.json",
        )
        .unwrap_err();
        assert!(e.message.contains("schedule"), "{e}");
    }

    #[test]
    fn line_of_walks_nested_values() {
        let text = "{\"a\": [1,\n {\"b\":\n  2}], \"c\": \"x\"}";
        assert_eq!(
            line_of(
                text,
                &[Seg::Key("a".into()), Seg::Index(1), Seg::Key("b".into())]
            ),
            Some(3)
        );
        assert_eq!(line_of(text, &[Seg::Key("c".into())]), Some(3));
        assert_eq!(line_of(text, &[Seg::Key("zzz".into())]), None);
    }
}
