//! Helpers shared by the integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};

use agentstore::event::{Effect, ResultStatus};
use agentstore::{Event, SessionId, SessionPaths};

/// A scratch directory on tmpfs when there is one (the heavy loops only
/// need a file system, not a disk), else the default temp dir.
pub fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

pub fn paths(root: &Path, id: &str) -> SessionPaths {
    SessionPaths::new(root, &SessionId::new(id).unwrap())
}

/// A deterministic event of varied type and size.
pub fn sample_event(i: u64) -> Event {
    match i % 5 {
        0 => Event::RunStarted {
            run_id: format!("r{i}"),
        },
        1 => Event::UserMessage {
            parent: None,
            text: format!("message {i}: {}", "words ".repeat((i % 7) as usize)),
        },
        2 => Event::ToolCall {
            parent: Some(format!("e{}", i.saturating_sub(1))),
            call_id: format!("c{i}"),
            tool: "bash".into(),
            args: serde_json::json!({ "cmd": format!("echo {i}") }),
            effect: Effect::SideEffect,
            operation_id: Some(format!("op-{i}")),
            target: None,
            needs_approval: false,
        },
        3 => Event::ToolResult {
            parent: Some(format!("e{}", i.saturating_sub(1))),
            call_id: format!("c{}", i.saturating_sub(1)),
            status: ResultStatus::Ok,
            output: Some(serde_json::json!(format!("out {i} \u{e9}\n"))),
            blob: None,
        },
        _ => Event::AssistantMessage {
            parent: None,
            text: "x".repeat((i % 300) as usize),
        },
    }
}

/// Byte offsets where each line of `bytes` starts, plus the total length.
pub fn line_starts(bytes: &[u8]) -> Vec<u64> {
    let mut starts = vec![0];
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' && i + 1 < bytes.len() {
            starts.push(i as u64 + 1);
        }
    }
    starts
}

/// The `agentstore` binary built for these tests.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agentstore"))
}

/// Serializes the tests of a binary that both take writer locks in this
/// process and spawn child processes. A child being spawned holds copies of
/// the parent's file descriptors until it execs, the flock'ed `lock` file
/// among them, so a test re-taking a lock while another thread spawns a
/// child could find it held for that moment: a race, so a flaky test.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A deterministic event of varied size that breaks no session rule in any
/// order (a user message with no parent): for logs that `fsck` and
/// `salvage` fold through the rules.
pub fn message_event(i: u64) -> Event {
    Event::UserMessage {
        parent: None,
        text: format!("message {i}: {}", "words ".repeat((i % 7) as usize)),
    }
}
