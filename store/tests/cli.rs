//! The `agentstore` binary: output formats (insta snapshots, timestamps and
//! the temp root normalized), error lines and exit codes.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use agentstore::event::{event_id, now_ts, Redaction};
use agentstore::{framing, Event};

use common::binary;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn agentstore(args: &[&str], stdin: &str) -> Run {
    let mut child = Command::new(binary())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let run = Run {
        code: out.status.code().expect("killed by a signal"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    assert!(
        !run.stderr.contains("panicked") && !run.stderr.contains("RUST_BACKTRACE"),
        "{args:?} panicked: {}",
        run.stderr
    );
    run
}

/// Asserts a failure: exit `code` and exactly one `agentstore: ...` line
/// on stderr containing every one of `wanted`.
fn assert_fails(run: &Run, code: i32, wanted: &[&str]) {
    assert_eq!(run.code, code, "stderr: {}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "stderr: {}", run.stderr);
    assert!(run.stderr.starts_with("agentstore: "), "{}", run.stderr);
    for w in wanted {
        assert!(run.stderr.contains(w), "{w:?} not in {}", run.stderr);
    }
}

/// Replaces each `2026-11-29T08:00:00.000Z`-shaped timestamp with `[ts]`
/// and the temp root with `[ROOT]`.
fn normalize(text: &str, root: &Path) -> String {
    const SHAPE: &[u8] = b"dddd-dd-ddTdd:dd:dd.dddZ";
    let fits = |w: &[u8]| {
        w.iter().zip(SHAPE).all(|(&b, &s)| match s {
            b'd' => b.is_ascii_digit(),
            _ => b == s,
        })
    };
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if i + SHAPE.len() <= bytes.len() && fits(&bytes[i..i + SHAPE.len()]) {
            out.extend_from_slice(b"[ts]");
            i += SHAPE.len();
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .unwrap()
        .replace(root.to_str().unwrap(), "[ROOT]")
}

const EVENTS: &str = r#"{"type":"run_started","run_id":"r1"}
{"type":"request_header","run_id":"r1","model":"m1","system_prompt_hash":"h1","tools_hash":"h2"}
{"type":"user_message","parent":null,"text":"fix the failing test"}
{"type":"tool_call","parent":"e3","call_id":"c1","tool":"bash","args":{"cmd":"cargo test"},"effect":"none"}
{"type":"tool_started","call_id":"c1"}

{"type":"tool_result","parent":"e4","call_id":"c1","status":"ok","output":"1 failed","redaction":"sensitive"}
{"type":"assistant_message","parent":"e6","text":"Found it: an off-by-one."}
{"type":"run_finished","run_id":"r1","status":"completed"}
"#;

/// A root with session `s1` made from `EVENTS` by `agentstore append`.
fn store_with_session() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path())
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let run = agentstore(&["append", &root, "s1", "--workspace", &root], EVENTS);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr, "");
    (dir, root)
}

#[test]
fn append_prints_one_ack_per_durable_event() {
    let (_dir, root) = store_with_session();
    let run = agentstore(
        &["append", &root, "s1"],
        "{\"type\":\"leaf_moved\",\"leaf\":\"e3\"}\n",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let ack: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(ack["seq"], 9);
    assert_eq!(ack["id"], "e9");
    assert_eq!(ack["type"], "leaf_moved");
    let size = std::fs::metadata(Path::new(&root).join("sessions/s1/events.jsonl"))
        .unwrap()
        .len();
    assert_eq!(ack["end"], size);
}

/// `append` goes through the session rules: each refused line exits 1
/// naming its line and the rule, and writes nothing; a `tool_started` is
/// the call's intent.
#[test]
fn append_enforces_the_session_rules() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let setup = concat!(
        "{\"type\":\"run_started\",\"run_id\":\"r1\"}\n",
        "{\"type\":\"tool_call\",\"parent\":null,\"call_id\":\"c1\",\"tool\":\"deploy\",\"args\":{},\"effect\":\"side_effect\",\"operation_id\":\"op1\"}\n",
        "{\"type\":\"tool_started\",\"call_id\":\"c1\"}\n",
        "{\"type\":\"effect_committed\",\"call_id\":\"c1\",\"operation_id\":\"op1\",\"external_ref\":\"x\"}\n",
    );
    let run = agentstore(&["append", root, "s", "--workspace", root], setup);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.lines().count(), 5, "{}", run.stdout);
    assert!(run.stdout.contains("\"type\":\"tool_started\""));
    let log = dir.path().join("sessions/s/events.jsonl");
    let before = std::fs::read(&log).unwrap();
    for (event, rule) in [
        (
            "{\"type\":\"effect_committed\",\"call_id\":\"c1\",\"operation_id\":\"op1\",\"external_ref\":\"y\"}",
            "op1",
        ),
        (
            "{\"type\":\"tool_call\",\"parent\":null,\"call_id\":\"c2\",\"tool\":\"deploy\",\"args\":{},\"effect\":\"side_effect\"}",
            "operation_id",
        ),
        (
            "{\"type\":\"tool_result\",\"parent\":null,\"call_id\":\"nope\",\"status\":\"ok\",\"output\":\"x\"}",
            "\"nope\"",
        ),
        ("{\"type\":\"run_started\",\"run_id\":\"r2\"}", "r1"),
        (
            "{\"type\":\"user_message\",\"parent\":\"e42\",\"text\":\"x\"}",
            "\"e42\"",
        ),
        ("{\"type\":\"tool_started\",\"call_id\":\"zz\"}", "\"zz\""),
    ] {
        let run = agentstore(&["append", root, "s"], &format!("{event}\n"));
        assert_fails(&run, 1, &["stdin line 1", "refused, nothing written", rule]);
        assert_eq!(run.stdout, "", "{event}: nothing acknowledged");
        assert_eq!(std::fs::read(&log).unwrap(), before, "{event}: nothing written");
    }
}

#[test]
fn creating_append_acks_session_created_first() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let run = agentstore(&["append", root, "new"], EVENTS);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let acks: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = acks.iter().map(|a| a["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "session_created",
            "run_started",
            "request_header",
            "user_message",
            "tool_call",
            "tool_started",
            "tool_result",
            "assistant_message",
            "run_finished"
        ]
    );
    for (i, a) in acks.iter().enumerate() {
        assert_eq!(a["seq"], i as u64);
        if i > 0 {
            assert_eq!(a["offset"], acks[i - 1]["end"]);
        }
    }
}

#[test]
fn show_human_format() {
    let (dir, root) = store_with_session();
    let run = agentstore(&["show", &root, "s1"], "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!("show_human", normalize(&run.stdout, dir.path()));
}

#[test]
fn show_json_format() {
    let (dir, root) = store_with_session();
    let run = agentstore(&["show", &root, "s1", "--json"], "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    for line in run.stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v.get("crc").is_none());
    }
    insta::assert_snapshot!("show_json", normalize(&run.stdout, dir.path()));
}

#[test]
fn show_filters_by_seq_and_type() {
    let (dir, root) = store_with_session();
    let run = agentstore(
        &[
            "show",
            &root,
            "s1",
            "--after",
            "3",
            "--type",
            "tool_call,tool_result",
            "--type",
            "run_finished",
        ],
        "",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!("show_filtered", normalize(&run.stdout, dir.path()));
}

#[test]
fn ls_lists_sessions_from_their_metadata() {
    let (dir, root) = store_with_session();
    agentstore(&["append", &root, "another-one", "--workspace", &root], "");
    let run = agentstore(&["ls", &root], "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!("ls", normalize(&run.stdout, dir.path()));
}

#[test]
fn bad_session_ids_are_usage_errors() {
    let (_dir, root) = store_with_session();
    for args in [
        vec!["show", &root, "../x"],
        vec!["append", &root, "a/b"],
        vec!["fsck", &root, ".hidden"],
        vec!["repair", &root, ""],
        vec!["salvage", &root, "s1", "../../etc"],
    ] {
        let run = agentstore(&args, "");
        assert_fails(&run, 2, &["invalid session id"]);
    }
}

#[test]
fn missing_sessions_and_roots_are_usage_errors() {
    let (_dir, root) = store_with_session();
    for cmd in ["show", "repair", "fsck"] {
        let run = agentstore(&[cmd, &root, "nope"], "");
        assert_fails(&run, 2, &["no session \"nope\" under ", &root]);
    }
    let run = agentstore(&["salvage", &root, "nope", "new"], "");
    assert_fails(&run, 2, &["no session \"nope\""]);
    let run = agentstore(&["salvage", &root, "s1", "s1"], "");
    assert_fails(&run, 2, &["session \"s1\" already exists"]);
    let run = agentstore(&["ls", "/nonexistent/agentstore-root"], "");
    assert_fails(
        &run,
        2,
        &["/nonexistent/agentstore-root is not a directory"],
    );
}

#[test]
fn bad_usage_is_one_line_and_exit_2() {
    for args in [
        vec!["frobnicate"],
        vec!["show", "/tmp"],
        vec!["show", "/tmp", "s1", "--after", "minus-one"],
    ] {
        let run = agentstore(&args, "");
        assert_fails(&run, 2, &["see agentstore --help"]);
    }
    let (_dir, root) = store_with_session();
    let run = agentstore(&["show", &root, "s1", "--type", "tool_cal"], "");
    assert_fails(&run, 2, &["--type \"tool_cal\" is not an event type"]);
}

#[test]
fn bad_stdin_stops_append_with_the_line_number() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let input = "{\"type\":\"run_started\",\"run_id\":\"r1\"}\nnot json\n{\"type\":\"run_started\",\"run_id\":\"r3\"}\n";
    let run = agentstore(&["append", root, "s"], input);
    assert_fails(&run, 2, &["stdin line 2: not JSON"]);
    assert_eq!(
        run.stdout.lines().count(),
        2,
        "session_created and r1 acked"
    );
    let shown = agentstore(&["show", root, "s"], "");
    assert_eq!(shown.stdout.lines().count(), 2, "r3 must not be appended");

    let run = agentstore(
        &["append", root, "s"],
        "{\"type\":\"run_started\",\"run_id\":\"r\",\"seq\":7}\n",
    );
    assert_fails(
        &run,
        2,
        &["stdin line 1: field \"seq\" is assigned by the store"],
    );
    let run = agentstore(&["append", root, "s"], "{\"type\":\"tool_call\"}\n");
    assert_fails(&run, 2, &["stdin line 1: tool_call: missing field"]);
}

#[test]
fn a_field_the_schema_does_not_know_is_refused_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let run = agentstore(
        &["append", root, "s"],
        "{\"type\":\"run_started\",\"run_id\":\"r1\"}\n",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let log = std::fs::read(events_path(root, "s")).unwrap();
    for input in [
        r#"{"type":"user_message","text":"x","bogus":1}"#,
        r#"{"type":"plan_updated","goal":"g","steps":[{"id":"1","title":"t","status":"done","bogus":1}]}"#,
        r#"{"type":"tool_result","parent":null,"call_id":"c","status":"ok","blob":{"digest":"ab","size":1,"bogus":1}}"#,
    ] {
        let run = agentstore(&["append", root, "s"], &format!("{input}\n"));
        assert_fails(&run, 2, &["stdin line 1: ", "unknown field `bogus`"]);
        assert_eq!(run.stdout, "", "{input}: nothing acknowledged");
    }
    assert_eq!(std::fs::read(events_path(root, "s")).unwrap(), log);
}

fn events_path(root: &str, id: &str) -> std::path::PathBuf {
    Path::new(root)
        .join("sessions")
        .join(id)
        .join("events.jsonl")
}

#[test]
fn damage_is_reported_refused_by_repair_and_salvaged() {
    let (_dir, root) = store_with_session();
    let path = events_path(&root, "s1");
    let mut bytes = std::fs::read(&path).unwrap();
    let starts = common::line_starts(&bytes);
    let offset = starts[2]; // line 3
    bytes[offset as usize + 30] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let at = format!("line 3, byte offset {offset}");

    let run = agentstore(&["fsck", &root], "");
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
    assert!(run.stdout.starts_with(&format!("s1: damage at {at}: ")));
    assert!(run.stdout.contains(&format!(
        "not repairable: agentstore salvage {root} s1 NEW_SESSION keeps the 2 event(s) before it"
    )));

    let run = agentstore(&["show", &root, "s1"], "");
    assert_fails(&run, 1, &[&at, "damaged "]);
    assert_eq!(run.stdout.lines().count(), 2, "the lines before the damage");

    let run = agentstore(&["append", &root, "s1"], "");
    assert_fails(&run, 1, &[&at]);

    let run = agentstore(&["repair", &root, "s1"], "");
    assert_fails(&run, 1, &[&at, "repair never removes damage", "salvage"]);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "repair changed the log"
    );

    let run = agentstore(&["salvage", &root, "s1", "s1-saved"], "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.starts_with("s1-saved: kept 2 event(s)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains(&at));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "salvage changed the original"
    );
    assert_eq!(agentstore(&["fsck", &root, "s1-saved"], "").code, 0);
    assert_eq!(
        agentstore(&["show", &root, "s1-saved"], "")
            .stdout
            .lines()
            .count(),
        2
    );
    assert_eq!(
        agentstore(&["fsck", &root], "").code,
        1,
        "s1 is still damaged"
    );
}

#[test]
fn a_torn_tail_is_repairable_and_repaired() {
    let (_dir, root) = store_with_session();
    let path = events_path(&root, "s1");
    let len = std::fs::metadata(&path).unwrap().len();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b"{\"crc\":\"0000").unwrap();
    drop(f);

    let run = agentstore(&["fsck", &root, "s1"], "");
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stdout.trim(),
        format!(
            "s1: torn tail: 12 byte(s) at byte offset {len} (line 10): final line has no trailing newline (interrupted write); repairable: agentstore repair {root} s1"
        )
    );
    // Readers stop before it without an error.
    assert_eq!(agentstore(&["show", &root, "s1"], "").code, 0);

    let run = agentstore(&["repair", &root, "s1"], "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with(&format!(
        "s1: cut torn tail: 12 byte(s) at byte offset {len}"
    )));
    assert!(
        run.stdout.contains("recorded as event 9, tail_quarantined"),
        "{}",
        run.stdout
    );
    // The cut went to where the torn line began; the record of it follows.
    let show = agentstore(
        &["show", &root, "s1", "--type", "tail_quarantined", "--json"],
        "",
    );
    assert!(
        show.stdout
            .contains(&format!("\"file\":\"events.jsonl.torn-{len}\"")),
        "{}",
        show.stdout
    );
    let run = agentstore(&["fsck", &root], "");
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (0, "ok: 1 session(s), 10 event(s) verified\n")
    );
    let run = agentstore(&["repair", &root, "s1"], "");
    assert_eq!(
        run.stdout,
        "s1: nothing to repair (10 event(s), no torn tail)\n"
    );
}

#[test]
fn fsck_names_strays_and_bad_metadata() {
    let (_dir, root) = store_with_session();
    std::fs::create_dir(Path::new(&root).join("sessions/half-made")).unwrap();
    std::fs::write(Path::new(&root).join("sessions/s1/session.json"), "{").unwrap();
    let run = agentstore(&["fsck", &root], "");
    assert_eq!(run.code, 1);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert_eq!(
        lines[0],
        "sessions/half-made: not a session: no events.jsonl"
    );
    assert!(lines[1].starts_with("s1: session.json: "), "{}", lines[1]);
}

/// Reads `show --follow` lines on a thread, so the test can wait with a timeout.
fn follow(root: &str) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = Command::new(binary())
        .args(["show", root, "s1", "--follow", "--json", "--after", "7"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

fn seq_of(line: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["seq"].as_u64().unwrap()
}

#[test]
fn follow_streams_new_events_and_never_a_partial_line() {
    let (_dir, root) = store_with_session();
    let (mut child, rx) = follow(&root);
    let wait = Duration::from_secs(10);
    assert_eq!(seq_of(&rx.recv_timeout(wait).unwrap()), 8);

    // An append by a writer process shows up.
    let run = agentstore(
        &["append", &root, "s1"],
        "{\"type\":\"run_started\",\"run_id\":\"r2\"}\n",
    );
    assert_eq!(run.code, 0);
    assert_eq!(seq_of(&rx.recv_timeout(wait).unwrap()), 9);

    // Half a line is not shown until its newline lands.
    let mut line = Vec::new();
    let event = Event::RunStarted {
        run_id: "slow".into(),
    };
    framing::encode_into(
        &mut line,
        10,
        &event_id(10),
        &now_ts(),
        Redaction::Public,
        &event,
    );
    let path = events_path(&root, "s1");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    let half = line.len() / 2;
    f.write_all(&line[..half]).unwrap();
    assert!(
        rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "a partial line was shown"
    );
    f.write_all(&line[half..]).unwrap();
    let shown = rx.recv_timeout(wait).unwrap();
    assert_eq!(seq_of(&shown), 10);
    assert!(shown.contains("\"run_id\":\"slow\""), "{shown}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A log whose lines all verify but whose last event has a dangling
/// parent (written past the rules): fsck names the event and the rule,
/// and salvage keeps the events before it, a session the store resumes.
#[test]
fn fsck_folds_the_rules_and_salvage_stops_before_a_broken_event() {
    let (_dir, root) = store_with_session();
    let log = Path::new(&root).join("sessions/s1/events.jsonl");
    let held = agentstore(&["show", &root, "s1", "--json"], "")
        .stdout
        .lines()
        .count() as u64;
    let mut line = Vec::new();
    framing::encode_into(
        &mut line,
        held,
        &event_id(held),
        &now_ts(),
        Redaction::Public,
        &Event::UserMessage {
            parent: Some("e999".into()),
            text: "orphan".into(),
        },
    );
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(&line).unwrap();
    drop(f);
    let run = agentstore(&["fsck", &root, "s1"], "");
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let text = format!("{}{}", run.stdout, run.stderr);
    assert!(
        text.contains(&format!("event seq {held} (line {})", held + 1))
            && text.contains("breaks a session rule")
            && text.contains("\"e999\"")
            && text.contains(&format!("keeps the {held} event(s) before it")),
        "{text}"
    );
    let run = agentstore(&["salvage", &root, "s1", "s2"], "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(&format!("kept {held} event(s)")),
        "{}",
        run.stdout
    );
    assert_eq!(agentstore(&["fsck", &root, "s2"], "").code, 0);
    let run = agentstore(&["recover", &root, "s2"], "");
    assert_eq!(run.code, 0, "the salvaged session resumes: {}", run.stderr);
}

/// `open` of a session whose log holds nothing loadable (more than one
/// unreadable line) answers `damage`, never `not_found`, which would let
/// the harness create the session again over it.
#[test]
fn the_adapter_refuses_a_log_with_nothing_loadable_as_damage() {
    let (_dir, root) = store_with_session();
    let log = Path::new(&root).join("sessions/s1/events.jsonl");
    std::fs::write(&log, b"#not a line of ours\n#nor this\n").unwrap();
    let requests = format!(
        "{{\"id\":1,\"op\":\"hello\",\"protocol\":1}}\n{{\"id\":2,\"op\":\"open\",\"root\":\"{root}\",\"session\":\"s1\",\"create\":false}}\n"
    );
    let run = agentstore(&["adapter"], &requests);
    let replies: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(replies[1]["error"]["kind"], "damage", "{}", run.stdout);
    assert_eq!(
        std::fs::read(&log).unwrap(),
        b"#not a line of ours\n#nor this\n",
        "nothing cut"
    );
}
