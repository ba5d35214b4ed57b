//! The adapter client against scripted fake adapters: every way an adapter
//! can break the conversation ends in one exact line, never a hang or a panic.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use agentchaos::store::adapter::client::MAX_REPLY_BYTES;
use agentchaos::store::adapter::{
    AdapterCommand, Capability, Client, ClientError, ClientOptions, ErrorKind, OpenArgs,
};
use agentchaos_protocol::event::Event;

const HELLO: &str =
    r#"{"id":1,"ok":{"name":"fake","protocol":1,"capabilities":["durable_append"]}}"#;

/// A fake adapter: a `sh` script in a temp dir (run as `sh FILE`, so no
/// executable bit and no "text file busy" race with parallel tests).
struct Fake {
    _dir: tempfile::TempDir,
    script: PathBuf,
}

impl Fake {
    fn new(body: &str) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("fake-adapter.sh");
        std::fs::write(&script, body).unwrap();
        Fake { _dir: dir, script }
    }

    fn label(&self) -> String {
        format!("sh {}", self.script.display())
    }

    fn spawn_with(&self, timeout: Duration) -> Result<Client, ClientError> {
        let mut cmd = Command::new("sh");
        cmd.arg(&self.script);
        Client::spawn(cmd, ClientOptions { timeout })
    }

    fn spawn(&self) -> Result<Client, ClientError> {
        self.spawn_with(Duration::from_secs(10))
    }

    /// The error spawning it ends in, as its one line minus the adapter label.
    fn spawn_error(&self) -> String {
        let err = self.spawn().expect_err("the fake adapter must fail");
        self.strip(&err)
    }

    fn strip(&self, err: &ClientError) -> String {
        let line = err.to_string();
        assert!(!line.contains('\n'), "one line: {line}");
        line.replace(&self.label(), "FAKE")
    }
}

fn open_args() -> OpenArgs {
    OpenArgs {
        root: "/nonexistent".into(),
        session: "s".into(),
        workspace: None,
        create: false,
        lease: None,
    }
}

#[test]
fn a_line_that_is_not_json() {
    let fake = Fake::new("read l; echo 'garbage'");
    assert_eq!(
        fake.spawn_error(),
        "adapter protocol error (FAKE): stdout line 1 (reply to hello, request 1) is not JSON (expected value at line 1 column 1): garbage"
    );
}

#[test]
fn a_reply_with_a_wrong_id() {
    let fake = Fake::new(r#"read l; echo '{"id":7,"ok":{}}'"#);
    assert_eq!(
        fake.spawn_error(),
        r#"adapter protocol error (FAKE): stdout line 1 (reply to hello, request 1) has id 7, expected 1: {"id":7,"ok":{}}"#
    );
}

#[test]
fn a_reply_without_an_id() {
    let fake = Fake::new(r#"read l; echo '{"ok":{}}'"#);
    assert_eq!(
        fake.spawn_error(),
        r#"adapter protocol error (FAKE): stdout line 1 (reply to hello, request 1) has no "id": {"ok":{}}"#
    );
}

#[test]
fn a_reply_out_of_order() {
    // Answers open with the id of hello again.
    let fake = Fake::new(&format!("read l; echo '{HELLO}'; read l; echo '{HELLO}'"));
    let mut client = fake.spawn().unwrap();
    let err = client.open(&open_args()).unwrap_err();
    assert_eq!(
        fake.strip(&err),
        format!("adapter protocol error (FAKE): stdout line 2 (reply to open, request 2) has id 1, the id of an earlier request (out of order): {HELLO}")
    );
}

#[test]
fn a_reply_of_the_wrong_shape() {
    let fake = Fake::new(r#"read l; echo '{"id":1,"ok":{"name":"x","capabilities":[]}}'"#);
    assert_eq!(
        fake.spawn_error(),
        r#"adapter protocol error (FAKE): stdout line 1 (reply to hello, request 1) does not fit the hello reply (missing field `protocol`): {"id":1,"ok":{"name":"x","capabilities":[]}}"#
    );
    let fake = Fake::new(r#"read l; echo '{"id":1,"ok":{},"error":{}}'"#);
    assert_eq!(
        fake.spawn_error(),
        r#"adapter protocol error (FAKE): stdout line 1 (reply to hello, request 1) does not fit the hello reply (both "ok" and "error"): {"id":1,"ok":{},"error":{}}"#
    );
    let fake = Fake::new(r#"read l; echo '{"id":1,"error":{"kind":"exploded","message":"m"}}'"#);
    assert_eq!(
        fake.spawn_error(),
        r#"adapter protocol error (FAKE): stdout line 1 (reply to hello, request 1) does not fit the hello reply (error: unknown variant `exploded`, expected one of `rule`, `io`, `damage`, `locked`, `not_found`, `exists`, `invalid`, `bad_request`, `unsupported`, `lease_held`, `fenced`): {"id":1,"error":{"kind":"exploded","message":"m"}}"#
    );
}

#[test]
fn another_protocol_version() {
    let fake =
        Fake::new(r#"read l; echo '{"id":1,"ok":{"name":"x","protocol":2,"capabilities":[]}}'"#);
    assert_eq!(
        fake.spawn_error(),
        r#"adapter protocol error (FAKE): stdout line 1 (reply to hello, request 1) does not fit the hello reply (the adapter speaks protocol 2, this harness speaks 1): {"id":1,"ok":{"name":"x","protocol":2,"capabilities":[]}}"#
    );
}

#[test]
fn silence_is_a_timeout_not_a_hang() {
    let fake = Fake::new("read l; exec sleep 30");
    let started = Instant::now();
    let err = fake.spawn_with(Duration::from_millis(300)).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(
        fake.strip(&err),
        "adapter protocol error (FAKE): no reply to hello (request 1) within 300ms (stdout has 0 line(s)); the adapter was killed"
    );
}

/// Whether process `pid` is gone (or a zombie, dead but not yet reaped by
/// whoever adopted it).
fn dead(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "PID (COMM) STATE ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[test]
fn a_hung_adapter_is_killed_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    // Starts a child, answers hello, then hangs on the next request.
    let fake = Fake::new(&format!(
        "read l; sleep 300 & echo $! > {}; echo '{HELLO}'; read l; sleep 300",
        pidfile.display()
    ));
    let mut client = fake.spawn_with(Duration::from_millis(300)).unwrap();
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .to_string();
    assert!(!dead(&pid), "the adapter's child {pid} runs");
    let err = client.open(&open_args()).unwrap_err();
    assert!(fake.strip(&err).contains("the adapter was killed"), "{err}");
    // SIGKILL is delivered at once; the adopted child is reaped soon after.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dead(&pid) {
        assert!(
            Instant::now() < deadline,
            "the adapter's child {pid} outlived it"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn eof_says_how_the_adapter_ended_and_what_it_said() {
    let fake = Fake::new("read l; echo 'cannot open db: disk on fire' >&2; exit 3");
    assert_eq!(
        fake.spawn_error(),
        "adapter protocol error (FAKE): stdout closed after 0 line(s) without a reply to hello (request 1); the adapter exited (exit status: 3); adapter stderr ends: cannot open db: disk on fire"
    );
}

#[test]
fn eof_in_the_middle_of_a_line() {
    let fake = Fake::new(r#"read l; printf '{"id":1'"#);
    assert_eq!(
        fake.spawn_error(),
        r#"adapter protocol error (FAKE): stdout line 1 (reply to hello, request 1) ends at EOF without a newline: {"id":1"#
    );
}

#[test]
fn a_line_too_long_is_refused() {
    // One line of MAX_REPLY_BYTES + 1 bytes of 'a', then a newline.
    let n = MAX_REPLY_BYTES + 1;
    let fake = Fake::new(&format!("read l; head -c {n} /dev/zero | tr '\\0' a; echo"));
    assert_eq!(
        fake.spawn_error(),
        format!("adapter protocol error (FAKE): stdout line 1 (reply to hello, request 1) is longer than {MAX_REPLY_BYTES} bytes")
    );
}

#[test]
fn a_refusal_is_a_store_error_and_the_conversation_goes_on() {
    let fake = Fake::new(&format!(
        r#"read l; echo '{HELLO}'
read l; echo '{{"id":2,"error":{{"kind":"locked","message":"held by pid 9"}}}}'
read l; echo '{{"id":3,"ok":{{"next_seq":4}}}}'"#
    ));
    let mut client = fake.spawn().unwrap();
    assert_eq!(client.hello().name, "fake");
    assert!(client.claims(Capability::DurableAppend));
    assert!(!client.claims(Capability::Branches));
    let err = client.open(&open_args()).unwrap_err();
    assert_eq!(err.refusal_kind(), Some(ErrorKind::Locked));
    assert_eq!(
        err.to_string(),
        "adapter refused open (locked): held by pid 9"
    );
    assert_eq!(client.open(&open_args()).unwrap().next_seq, 4);
}

#[test]
fn after_a_protocol_error_the_client_is_spent() {
    let fake = Fake::new(&format!(
        r#"read l; echo '{HELLO}'
read l; echo '{{"id":2,"ok":{{"seq":3,"id":"x3"}}}}'
read l; echo '{{"id":3,"ok":{{"seq":4,"id":"e4"}}}}'"#
    ));
    let mut client = fake.spawn().unwrap();
    let event = Event::RunStarted { run_id: "r".into() };
    let first = fake.strip(&client.append(&event).unwrap_err());
    assert_eq!(
        first,
        r#"adapter protocol error (FAKE): stdout line 2 (reply to append, request 2) does not fit the append reply (event id "x3" for seq 3, protocol 1 ids are "e<seq>" ("e3")): {"id":2,"ok":{"seq":3,"id":"x3"}}"#
    );
    let again = fake.strip(&client.append(&event).unwrap_err());
    assert_eq!(again, first);
}

#[test]
fn records_whose_event_does_not_fit_are_protocol_errors() {
    let fake = Fake::new(&format!(
        r#"read l; echo '{HELLO}'
read l; echo '{{"id":2,"ok":{{"records":[{{"seq":0,"id":"e0","event":{{"type":"run_started"}}}}]}}}}'"#
    ));
    let mut client = fake.spawn().unwrap();
    let err = fake.strip(&client.events(None).unwrap_err());
    assert_eq!(
        err,
        r#"adapter protocol error (FAKE): stdout line 2 (reply to events, request 2) does not fit the events reply (record 0: run_started event does not fit: missing field `run_id`): {"id":2,"ok":{"records":[{"seq":0,"id":"e0","event":{"type":"run_started"}}]}}"#
    );
}

#[test]
fn an_adapter_that_cannot_start() {
    let err = Client::spawn(
        Command::new("/nonexistent/adapter"),
        ClientOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot start adapter /nonexistent/adapter: No such file or directory (os error 2)"
    );
}

#[test]
fn adapter_commands_split_like_a_shell_without_one() {
    let c = AdapterCommand::parse(r#"python3 "my adapter.py" --db 'a b' x\ y"#).unwrap();
    assert_eq!(c.program, "python3");
    assert_eq!(c.args, ["my adapter.py", "--db", "a b", "x y"]);
    assert_eq!(c.to_string(), "python3 'my adapter.py' --db 'a b' 'x y'");
    assert_eq!(
        AdapterCommand::parse("python3 'oops")
            .unwrap_err()
            .to_string(),
        r#"cannot split adapter command "python3 'oops": unbalanced quotes or a trailing backslash"#
    );
    assert_eq!(
        AdapterCommand::parse("  ").unwrap_err().to_string(),
        r#"adapter command "  " is empty"#
    );
}

/// A pipelining fake: says `pipeline` in `hello`, reads a batch of three
/// requests, then writes `replies`.
fn pipelining(replies: &[&str]) -> Fake {
    let hello = r#"{"id":1,"ok":{"name":"fake","protocol":1,"capabilities":["durable_append"],"pipeline":true}}"#;
    let echoes: String = replies.iter().map(|r| format!("echo '{r}'; ")).collect();
    Fake::new(&format!(
        "read l; echo '{hello}'; read a; read b; read c; {echoes}"
    ))
}

fn batch_of_three(client: &mut Client) -> Vec<u64> {
    use agentchaos_protocol::Request;
    let append = |text: &str| Request::Append {
        event: Event::UserMessage {
            parent: None,
            text: text.into(),
        },
    };
    let requests = vec![
        append("a"),
        append("b"),
        Request::StartTool {
            call_id: "c1".into(),
        },
    ];
    client.send_batch(requests).unwrap()
}

#[test]
fn pipelined_replies_in_any_order_are_handed_out_by_id() {
    let fake = pipelining(&[
        r#"{"id":4,"ok":{"seq":7,"id":"e7"}}"#,
        r#"{"id":2,"ok":{"seq":5,"id":"e5"}}"#,
        r#"{"id":3,"ok":{"seq":6,"id":"e6"}}"#,
    ]);
    let mut client = fake.spawn().unwrap();
    assert!(client.pipelines());
    assert_eq!(batch_of_three(&mut client), [2, 3, 4]);
    assert_eq!(client.take_seq(3).unwrap(), 6);
    assert_eq!(client.take_seq(2).unwrap(), 5);
    assert_eq!(client.take_seq(4).unwrap(), 7);
}

#[test]
fn pipelined_seqs_out_of_request_order_are_a_protocol_error() {
    let fake = pipelining(&[
        r#"{"id":2,"ok":{"seq":6,"id":"e6"}}"#,
        r#"{"id":3,"ok":{"seq":5,"id":"e5"}}"#,
    ]);
    let mut client = fake.spawn().unwrap();
    batch_of_three(&mut client);
    assert_eq!(client.take_seq(2).unwrap(), 6);
    let err = client.take_seq(3).unwrap_err();
    assert_eq!(
        fake.strip(&err),
        r#"adapter protocol error (FAKE): stdout line 3 (reply to append, request 3) does not fit the append reply (seq 5 for request 3, and seq 6 for request 2: pipelined events take seqs in request order (chaos/PROTOCOL.md, section 10)): {"id":3,"ok":{"seq":5,"id":"e5"}}"#
    );
}

#[test]
fn a_pipelined_reply_to_no_request_of_the_batch_is_a_protocol_error() {
    let fake = pipelining(&[
        r#"{"id":2,"ok":{"seq":5,"id":"e5"}}"#,
        r#"{"id":2,"ok":{"seq":5,"id":"e5"}}"#,
    ]);
    let mut client = fake.spawn().unwrap();
    batch_of_three(&mut client);
    let err = client.take_seq(3).unwrap_err();
    assert_eq!(
        fake.strip(&err),
        r#"adapter protocol error (FAKE): stdout line 3 (reply to append, request 3) has id 2, which names no unanswered request of the batch, expected 3: {"id":2,"ok":{"seq":5,"id":"e5"}}"#
    );
}
