//! The session subcommands of the real `agentstore` binary: recover,
//! context, checkpoint, export.

use std::process::Command;

use agentstore::event::{Effect, Event, Redaction};
use agentstore::{Session, SessionId, SessionOptions};
use serde_json::json;

fn agentstore(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentstore"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn recover_context_checkpoint_and_export_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let id = SessionId::new("s1").unwrap();
    let mut s = Session::create(&root, &id, &ws, SessionOptions::default()).unwrap();
    s.append(Event::RunStarted {
        run_id: "r1".into(),
    })
    .unwrap();
    let u = s
        .append_redacted(
            Event::UserMessage {
                parent: None,
                text: "deploy with token hunter2".into(),
            },
            Redaction::Sensitive,
        )
        .unwrap();
    s.append(Event::ToolCall {
        parent: Some(u.id().clone()),
        call_id: "c1".into(),
        tool: "deploy".into(),
        args: json!({"env": "prod"}),
        effect: Effect::SideEffect,
        operation_id: Some("op-1".into()),
        target: Some("prod".into()),
        needs_approval: false,
    })
    .unwrap();
    s.start_tool("c1").unwrap();
    drop(s); // the crash
    let root_s = root.to_str().unwrap();

    let (code, out, err) = agentstore(&["recover", root_s, "s1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "interrupted run: r1\nuncertain call: c1 tool=deploy target=prod operation=op-1 phase=started\ns1: recovery appended 2 event(s)\n"
    );
    let (_, out, _) = agentstore(&["recover", root_s, "s1"]);
    assert!(out.ends_with("s1: recovery appended 0 event(s)\n"), "{out}");
    let (_, json_out, _) = agentstore(&["recover", root_s, "s1", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(v["uncertain"][0]["phase"], "started");

    let (code, out, _) = agentstore(&["context", root_s, "s1", "--budget", "5"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("<recovery>") && out.contains("operation op-1"),
        "{out}"
    );

    let (code, out, _) = agentstore(&["checkpoint", root_s, "s1"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("s1: snapshot covers 7 event(s)"), "{out}");

    let (code, out, err) = agentstore(&["export", root_s, "s1", "--redact"]);
    assert_eq!(code, 0);
    assert!(!out.contains("hunter2"), "{out}");
    assert_eq!(out.lines().count(), 7);
    assert_eq!(
        err,
        "agentstore: exported 7 event(s); masked 1 value(s) in 1 event(s)\n  masked seq 2 text [sensitive event]\n"
    );

    let (code, _, err) = agentstore(&["recover", root_s, "nope"]);
    assert_eq!(code, 2);
    assert!(err.starts_with("agentstore: no session \"nope\""), "{err}");
    std::fs::rename(&ws, dir.path().join("ws2")).unwrap();
    let (code, _, err) = agentstore(&["context", root_s, "s1"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("has moved") && err.contains("--workspace"),
        "{err}"
    );
}
