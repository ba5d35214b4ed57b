//! The session subcommands of the real `agentstore` binary: recover,
//! context, checkpoint, export.

use std::process::Command;

use agentstore::event::{Effect, Event, Redaction};
use agentstore::{Session, SessionId, SessionOptions};
use serde_json::json;

/// The tests take writer locks in this process and spawn children: run
/// them one at a time (see `common::serial` in the other test binaries).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

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
    let _serial = serial();
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

/// Every file under `dir` with its length, sorted: what a read must not change.
fn listing(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            let name = entry
                .path()
                .strip_prefix(dir)
                .unwrap()
                .display()
                .to_string();
            if meta.is_dir() {
                stack.push(entry.path());
            }
            out.push((name, if meta.is_dir() { 0 } else { meta.len() }));
        }
    }
    out.sort();
    out
}

/// `context` took the writer lock: it failed while an agent wrote. Every
/// command that only reads (context, show, fsck, export, ls) must work
/// while another `Session` holds the lock, and must write nothing: no
/// file created, none changed, a torn tail left for the writer to cut.
#[test]
fn read_only_commands_work_while_a_writer_holds_the_lock_and_write_nothing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let id = SessionId::new("s1").unwrap();
    let mut writer = Session::create(&root, &id, &ws, SessionOptions::default()).unwrap();
    writer
        .append(Event::UserMessage {
            parent: None,
            text: "hello from the agent".into(),
        })
        .unwrap();
    let root_s = root.to_str().unwrap();
    let before = listing(&root);
    for args in [
        &["context", root_s, "s1"][..],
        &["show", root_s, "s1"],
        &["fsck", root_s, "s1"],
        &["fsck", root_s],
        &["export", root_s, "s1", "--redact"],
        &["ls", root_s],
    ] {
        let (code, out, err) = agentstore(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!out.is_empty(), "{args:?}");
        assert_eq!(listing(&root), before, "{args:?} changed the store");
    }
    let (_, out, _) = agentstore(&["context", root_s, "s1"]);
    assert_eq!(out, "[user] hello from the agent\n");

    // A line the writer is still writing: context shows what is complete
    // and leaves the bytes alone.
    // It lands at the log's end, over the zeros pre-allocated after it.
    use std::os::unix::fs::FileExt;
    let events = agentstore::SessionPaths::new(&root, &id).events();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&events)
        .unwrap()
        .write_all_at(b"{\"crc\":\"0000", writer.log().end().offset)
        .unwrap();
    let before = listing(&root);
    let (code, out, err) = agentstore(&["context", root_s, "s1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "[user] hello from the agent\n");
    assert_eq!(listing(&root), before);

    // The library view too, with the lock still held and a snapshot to use.
    // The writer dies (no clean close, which would cut its zeros and the
    // fragment in them): the file stays as it is.
    let crashed = std::fs::read(&events).unwrap();
    drop(writer);
    std::fs::write(&events, crashed).unwrap();
    let mut writer = Session::open(&root, &id, SessionOptions::default())
        .unwrap()
        .0;
    writer.checkpoint().unwrap();
    writer
        .append(Event::AssistantMessage {
            parent: Some("e1".into()),
            text: "after the snapshot".into(),
        })
        .unwrap();
    let view = agentstore::SessionView::open(&root, &id).unwrap();
    // session_created, the message, the tail_quarantined of the cut that
    // reopening made, the message after the snapshot.
    assert_eq!(view.projection().next_seq(), 4);
    assert_eq!(view.context(None).unwrap(), writer.context(None).unwrap());
}

/// Input echoed into an error is quoted short and on one line: a 10 000
/// character session id, one with a newline, an unknown --type.
#[test]
fn errors_quote_long_or_multi_line_input_on_one_short_line() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let root_s = dir.path().to_str().unwrap();
    let long = "x".repeat(10_000);
    let bad_type = format!("no\n{}", "t".repeat(5_000));
    for (args, expected) in [
        (
            vec!["show", root_s, long.as_str()],
            format!(
                "agentstore: invalid session id \"{}…\" (10000 chars): ",
                "x".repeat(80)
            ),
        ),
        (
            vec!["context", root_s, "a\nb"],
            "agentstore: invalid session id \"a\\nb\": ".to_string(),
        ),
        (
            vec!["show", root_s, "s", "--type", bad_type.as_str()],
            "agentstore: --type \"no\\nttt".to_string(),
        ),
    ] {
        let (code, _, err) = agentstore(&args);
        assert_eq!(code, 2, "{err}");
        assert!(err.starts_with(&expected), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.len() < 500, "{} bytes: {err}", err.len());
    }
}
