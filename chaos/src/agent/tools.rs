//! The tools the child agent runs, and how each one is reconciled.
//!
//! Remote effects go to the [`world`](crate::agent::world); local effects land in
//! the trial's workspace directory. Each tool knows how to answer, after a
//! crash, "did operation X happen?" without running it again:
//!
//! | tool          | effect      | reconciled by |
//! |---------------|-------------|---------------|
//! | `read_file`   | none        | nothing to verify: runs again |
//! | `run_tests`   | none        | nothing to verify: runs again |
//! | `large_output`| none        | nothing to verify: runs again (its blob is content-addressed) |
//! | `write_file`  | idempotent  | content hash of the file against the intended content |
//! | `append_line` | side effect | a line tagged with the operation id (`  # op-…`) in the file |
//! | `remote`      | side effect | world status query by operation id |
//!
//! `append_line` is not idempotent on purpose: a second run adds a second
//! tagged line, which the checker counts. This module must never consult
//! the session store: reconciliation asks the tool, not the log.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use agentchaos_protocol::event::{ReconcileOutcome, ResultStatus};
use serde_json::Value;

use crate::agent::world::{WorldClient, WorldError};
use crate::bounded::ReadError;
use crate::scenario::limits::MAX_LOG_BYTES;
use crate::scenario::{TestSpec, ToolKind};

/// Where the tools act.
#[derive(Debug)]
pub struct ToolContext<'a> {
    pub workspace: &'a Path,
    pub world: &'a mut WorldClient,
    pub tests: &'a [TestSpec],
    /// The agent's life, told to the world with every application.
    pub life: u32,
}

/// What a tool produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Small enough to live in the `tool_result` event.
    Inline(Value),
    /// Goes to a content-addressed blob; the event carries its reference.
    Blob(Vec<u8>),
}

/// The outcome of running a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    pub status: ResultStatus,
    pub output: Output,
    /// For side effects: the reference the effect left.
    pub external_ref: Option<String>,
}

/// What asking the tool about an uncertain call found.
#[derive(Debug, Clone, PartialEq)]
pub struct Reconciliation {
    pub outcome: ReconcileOutcome,
    pub evidence: String,
    pub external_ref: Option<String>,
}

/// A tool that could not run or be asked in the workspace: a missing
/// argument, the workspace's files, the world. The harness's side of the
/// agent, never the store's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(String);

impl From<WorldError> for ToolError {
    fn from(e: WorldError) -> ToolError {
        ToolError(e.to_string())
    }
}

fn arg<'v>(args: &'v Value, key: &str) -> Result<&'v str, ToolError> {
    args.get(key).and_then(Value::as_str).ok_or_else(|| {
        ToolError(format!(
            "tool argument {key:?} is missing or not a string in {args}"
        ))
    })
}

fn in_workspace(ctx: &ToolContext<'_>, args: &Value) -> Result<(String, PathBuf), ToolError> {
    let rel = arg(args, "path")?.to_string();
    let full = ctx.workspace.join(&rel);
    Ok((rel, full))
}

/// The tag `append_line` puts at the end of its line.
pub fn line_tag(operation_id: &str) -> String {
    format!("  # {operation_id}")
}

/// The operation id a workspace line is tagged with, if any.
pub fn tagged_operation(line: &str) -> Option<&str> {
    let (_, op) = line.rsplit_once("  # ")?;
    op.starts_with("op-").then_some(op)
}

/// The largest workspace file the tools and the checker read back: twice
/// all the events of a scenario may hold ([`MAX_LOG_BYTES`]), which bounds
/// what its steps write into one file; a larger one is refused, never
/// read into memory.
pub const MAX_WORKSPACE_FILE_BYTES: u64 = 2 * MAX_LOG_BYTES as u64;

/// A workspace file's bytes, within [`MAX_WORKSPACE_FILE_BYTES`].
fn read_back(full: &Path) -> Result<Vec<u8>, ReadError> {
    crate::bounded::read(full, MAX_WORKSPACE_FILE_BYTES)
}

/// [`read_back`], as UTF-8 text.
fn read_back_text(full: &Path) -> Result<String, ReadError> {
    crate::bounded::read_to_string(full, MAX_WORKSPACE_FILE_BYTES)
}

/// Why a workspace file could not be read back, in a few words: the I/O
/// error's kind, or what the bounded read refused.
fn why(e: &ReadError) -> String {
    match e {
        ReadError::Io(e) => e.kind().to_string(),
        e => e.to_string(),
    }
}

fn hash(bytes: &[u8]) -> String {
    format!("{:08x}", crc32c::crc32c(bytes))
}

/// The deterministic text a `large_output` step produces.
pub fn large_output(bytes: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes as usize);
    let mut i = 0u64;
    while (out.len() as u64) < bytes {
        let _ = writeln!(out, "{i:08} build log: compiling module {} ... ok", i % 97);
        i += 1;
    }
    out.truncate(bytes as usize);
    out
}

/// Runs a tool once. `operation_id` is the idempotency key of side effects.
pub fn run(
    ctx: &mut ToolContext<'_>,
    kind: ToolKind,
    args: &Value,
    operation_id: Option<&str>,
) -> Result<Ran, ToolError> {
    let inline = |status, v: Value| Ran {
        status,
        output: Output::Inline(v),
        external_ref: None,
    };
    let need_op =
        || operation_id.ok_or_else(|| ToolError(format!("{} needs an operation id", kind.name())));
    match kind {
        ToolKind::ReadFile => {
            let (rel, full) = in_workspace(ctx, args)?;
            Ok(match read_back_text(&full) {
                Ok(text) => inline(ResultStatus::Ok, Value::String(text)),
                Err(e) => inline(
                    ResultStatus::Error,
                    Value::String(format!("cannot read {rel}: {}", why(&e))),
                ),
            })
        }
        ToolKind::RunTests => {
            let (report, passed) = run_tests(ctx.workspace, ctx.tests);
            let status = if passed {
                ResultStatus::Ok
            } else {
                ResultStatus::Error
            };
            Ok(inline(status, Value::String(report)))
        }
        ToolKind::WriteFile => {
            let (rel, full) = in_workspace(ctx, args)?;
            let content = arg(args, "content")?;
            if let Some(dir) = full.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| ToolError(format!("mkdir for {rel}: {e}")))?;
            }
            std::fs::write(&full, content).map_err(|e| ToolError(format!("write {rel}: {e}")))?;
            Ok(inline(
                ResultStatus::Ok,
                Value::String(format!("wrote {} bytes to {rel}", content.len())),
            ))
        }
        ToolKind::AppendLine => {
            let op = need_op()?;
            let (rel, full) = in_workspace(ctx, args)?;
            let line = format!("{}{}\n", arg(args, "line")?, line_tag(op));
            if let Some(dir) = full.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| ToolError(format!("mkdir for {rel}: {e}")))?;
            }
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&full)
                .map_err(|e| ToolError(format!("open {rel}: {e}")))?;
            // One write call: the line lands whole or not at all.
            f.write_all(line.as_bytes())
                .map_err(|e| ToolError(format!("append to {rel}: {e}")))?;
            Ok(Ran {
                status: ResultStatus::Ok,
                output: Output::Inline(Value::String(format!("appended a line to {rel}"))),
                external_ref: Some(format!("{rel}#{op}")),
            })
        }
        ToolKind::Remote => {
            let op = need_op()?;
            let service = arg(args, "service")?;
            let action = arg(args, "action")?;
            let reply = ctx.world.apply(op, service, action, ctx.life)?;
            let external_ref = reply.external_ref.ok_or_else(|| {
                ToolError("the world applied the operation but returned no reference".into())
            })?;
            Ok(Ran {
                status: ResultStatus::Ok,
                output: Output::Inline(Value::String(format!(
                    "{service}: {action} -> {external_ref}"
                ))),
                external_ref: Some(external_ref),
            })
        }
        ToolKind::LargeOutput => {
            let bytes = args.get("bytes").and_then(Value::as_u64).ok_or_else(|| {
                ToolError(format!("tool argument \"bytes\" is missing in {args}"))
            })?;
            Ok(Ran {
                status: ResultStatus::Ok,
                output: Output::Blob(large_output(bytes)),
                external_ref: None,
            })
        }
    }
}

/// Asks the tool whether an uncertain call's effect happened, without running it.
pub fn reconcile(
    ctx: &mut ToolContext<'_>,
    kind: ToolKind,
    args: &Value,
    operation_id: Option<&str>,
) -> Result<Reconciliation, ToolError> {
    let not_applied = |evidence: String| Reconciliation {
        outcome: ReconcileOutcome::NotApplied,
        evidence,
        external_ref: None,
    };
    match kind {
        ToolKind::ReadFile | ToolKind::RunTests | ToolKind::LargeOutput => Ok(not_applied(
            "read-only tool: nothing to verify, it runs again".to_string(),
        )),
        ToolKind::WriteFile => {
            let (rel, full) = in_workspace(ctx, args)?;
            let want = hash(arg(args, "content")?.as_bytes());
            Ok(match read_back(&full) {
                Ok(bytes) if hash(&bytes) == want => Reconciliation {
                    outcome: ReconcileOutcome::Applied,
                    evidence: format!("{rel} has the intended content (crc32c {want})"),
                    external_ref: None,
                },
                Ok(bytes) => not_applied(format!(
                    "{rel} has crc32c {}, the intended content has {want}",
                    hash(&bytes)
                )),
                Err(e) => not_applied(format!("{rel} cannot be read ({})", why(&e))),
            })
        }
        ToolKind::AppendLine => {
            let op = operation_id
                .ok_or_else(|| ToolError("append_line needs an operation id".into()))?;
            let (rel, full) = in_workspace(ctx, args)?;
            let text = match read_back_text(&full) {
                Ok(text) => text,
                Err(e) if e.not_found() => String::new(),
                // Lines it cannot count are not "none".
                Err(e) => return Err(ToolError(format!("{rel} {e}"))),
            };
            let n = text
                .lines()
                .filter(|l| tagged_operation(l) == Some(op))
                .count();
            Ok(if n > 0 {
                Reconciliation {
                    outcome: ReconcileOutcome::Applied,
                    evidence: format!("{rel} has {n} line(s) tagged {op}"),
                    external_ref: Some(format!("{rel}#{op}")),
                }
            } else {
                not_applied(format!("{rel} has no line tagged {op}"))
            })
        }
        ToolKind::Remote => {
            let op =
                operation_id.ok_or_else(|| ToolError("remote needs an operation id".into()))?;
            let reply = ctx.world.status(op)?;
            Ok(if reply.count > 0 {
                Reconciliation {
                    outcome: ReconcileOutcome::Applied,
                    evidence: format!("the world reports {op} applied {} time(s)", reply.count),
                    external_ref: reply.external_ref,
                }
            } else {
                not_applied(format!("the world has no record of {op}"))
            })
        }
    }
}

/// Runs the scenario's tests against the workspace: a test passes when its
/// file contains its string. Returns the report and whether all passed.
pub fn run_tests(workspace: &Path, tests: &[TestSpec]) -> (String, bool) {
    let mut report = String::new();
    let mut failed = 0;
    for t in tests {
        let ok =
            read_back_text(&workspace.join(&t.file)).is_ok_and(|text| text.contains(&t.contains));
        if !ok {
            failed += 1;
        }
        report.push_str(&format!(
            "test {} ... {}\n",
            t.name,
            if ok { "ok" } else { "FAILED" }
        ));
    }
    report.push_str(&format!(
        "test result: {}. {} passed; {failed} failed\n",
        if failed == 0 { "ok" } else { "FAILED" },
        tests.len() - failed
    ));
    (report, failed == 0)
}

/// Writes the scenario's initial files into an empty workspace.
pub fn populate(workspace: &Path, files: &BTreeMap<String, String>) -> std::io::Result<()> {
    std::fs::create_dir_all(workspace)?;
    for (rel, content) in files {
        let full = workspace.join(rel);
        if let Some(dir) = full.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(full, content)?;
    }
    Ok(())
}

/// Every file of a workspace: relative path -> content.
pub fn snapshot(workspace: &Path) -> std::io::Result<BTreeMap<String, Vec<u8>>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                walk(base, &path, out)?;
            } else {
                let rel = path
                    .strip_prefix(base)
                    .expect("walked under base")
                    .to_string_lossy()
                    .into_owned();
                let bytes = read_back(&path)
                    .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?;
                out.insert(rel, bytes);
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    if workspace.exists() {
        walk(workspace, workspace, &mut out)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::world::World;

    #[test]
    fn append_line_is_not_idempotent_and_reconciles_by_tag() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let world = World::start(&dir.path().join("w.sock")).unwrap();
        let mut client = WorldClient::new(world.path());
        let mut ctx = ToolContext {
            workspace: &ws,
            world: &mut client,
            tests: &[],
            life: 0,
        };
        let args = serde_json::json!({"path": "CHANGES", "line": "fixed add"});
        let r = reconcile(&mut ctx, ToolKind::AppendLine, &args, Some("op-r1-2")).unwrap();
        assert_eq!(r.outcome, ReconcileOutcome::NotApplied);
        run(&mut ctx, ToolKind::AppendLine, &args, Some("op-r1-2")).unwrap();
        run(&mut ctx, ToolKind::AppendLine, &args, Some("op-r1-2")).unwrap();
        let text = std::fs::read_to_string(ws.join("CHANGES")).unwrap();
        assert_eq!(
            text.lines()
                .filter(|l| tagged_operation(l) == Some("op-r1-2"))
                .count(),
            2
        );
        let r = reconcile(&mut ctx, ToolKind::AppendLine, &args, Some("op-r1-2")).unwrap();
        assert_eq!(r.outcome, ReconcileOutcome::Applied);
    }

    #[test]
    fn write_file_reconciles_by_content_hash_and_remote_by_world_status() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let world = World::start(&dir.path().join("w.sock")).unwrap();
        let mut client = WorldClient::new(world.path());
        let mut ctx = ToolContext {
            workspace: &ws,
            world: &mut client,
            tests: &[],
            life: 0,
        };
        let args = serde_json::json!({"path": "src/a.rs", "content": "new"});
        assert_eq!(
            reconcile(&mut ctx, ToolKind::WriteFile, &args, None)
                .unwrap()
                .outcome,
            ReconcileOutcome::NotApplied
        );
        run(&mut ctx, ToolKind::WriteFile, &args, None).unwrap();
        assert_eq!(
            reconcile(&mut ctx, ToolKind::WriteFile, &args, None)
                .unwrap()
                .outcome,
            ReconcileOutcome::Applied
        );
        let remote = serde_json::json!({"service": "deploy", "action": "v2"});
        assert_eq!(
            reconcile(&mut ctx, ToolKind::Remote, &remote, Some("op-x"))
                .unwrap()
                .outcome,
            ReconcileOutcome::NotApplied
        );
        let ran = run(&mut ctx, ToolKind::Remote, &remote, Some("op-x")).unwrap();
        let rec = reconcile(&mut ctx, ToolKind::Remote, &remote, Some("op-x")).unwrap();
        assert_eq!(rec.outcome, ReconcileOutcome::Applied);
        assert_eq!(rec.external_ref, ran.external_ref);
    }

    #[test]
    fn tests_pass_only_when_the_file_holds_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let files = BTreeMap::from([("src/calc.rs".to_string(), "a - b".to_string())]);
        populate(dir.path(), &files).unwrap();
        let tests = [TestSpec {
            name: "adds".into(),
            file: "src/calc.rs".into(),
            contains: "a + b".into(),
        }];
        let (report, ok) = run_tests(dir.path(), &tests);
        assert!(!ok && report.contains("test adds ... FAILED"), "{report}");
        std::fs::write(dir.path().join("src/calc.rs"), "a + b").unwrap();
        assert!(run_tests(dir.path(), &tests).1);
        assert_eq!(snapshot(dir.path()).unwrap()["src/calc.rs"], b"a + b");
        assert_eq!(large_output(1000).len(), 1000);
    }
}
