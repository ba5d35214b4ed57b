//! LangGraph's SQLite checkpointer through the adapter protocol
//! (`chaos/adapters/langgraph`): what it keeps across SIGKILL, how its
//! recovery marks calls, and what it does not guarantee (no effect ledger,
//! no writer lock, and, as a stock graph, a re-run of every unfinished node).
//!
//! The adapter is built on the Python adapter kit (`chaos/adapters/python`),
//! which these tests put on `PYTHONPATH` from this checkout. Skipped, with a
//! line on stderr, when `python3` cannot import `langgraph.checkpoint.sqlite`
//! or the kit (it needs `jsonschema`); under `CI=true`, where `.ci/run`
//! installs them, a missing package fails instead.

use crate::campaign;
use crate::python;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agentchaos::store::adapter::{
    Capability, Client, ClientError, ClientOptions, ErrorKind, OpenArgs,
};
use agentchaos_protocol::event::{
    Effect, Event, Phase, PlanStep, ReconcileOutcome, ResultStatus, StepStatus,
};
use agentchaos_protocol::message::Ack;
use agentchaos_protocol::Record;
use serde_json::json;

fn adapter_dir() -> PathBuf {
    python::store_adapter_dir("langgraph")
}

/// Whether LangGraph and the kit can be imported; if not, says so on
/// stderr (or fails, under CI).
fn langgraph_available(test: &str) -> bool {
    python::store_available(test, "langgraph", "import langgraph.checkpoint.sqlite")
}

fn spawn(args: &[&str]) -> Client {
    let mut cmd = python::python3();
    cmd.arg(adapter_dir().join("adapter.py")).args(args);
    let options = ClientOptions {
        timeout: Duration::from_secs(30),
    };
    Client::spawn(cmd, options).unwrap_or_else(|e| panic!("langgraph adapter: {e}"))
}

fn open(root: &Path, workspace: Option<&Path>, create: bool) -> OpenArgs {
    OpenArgs {
        root: root.to_path_buf(),
        session: "lg".into(),
        workspace: workspace.map(Path::to_path_buf),
        create,
        lease: None,
    }
}

/// The agent's side: appends, remembering every acknowledged event.
struct Agent {
    client: Client,
    acked: Vec<(Ack, Event)>,
}

impl Agent {
    fn try_append(&mut self, event: Event) -> Result<String, ClientError> {
        let ack = self.client.append(&event)?;
        self.acked.push((ack.clone(), event));
        Ok(ack.id)
    }

    fn append(&mut self, event: Event) -> String {
        let what = event.type_name();
        self.try_append(event)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    }

    fn try_start(&mut self, call_id: &str) -> Result<(), ClientError> {
        let ack = self.client.start_tool(call_id)?;
        let event = Event::ToolStarted {
            call_id: call_id.into(),
        };
        let ack = Ack {
            seq: ack.seq,
            id: ack.id,
        };
        self.acked.push((ack, event));
        Ok(())
    }

    fn start(&mut self, call_id: &str) {
        self.try_start(call_id).unwrap();
    }

    fn tool_call(parent: &str, call_id: &str, effect: Effect) -> Event {
        let operation_id = (effect == Effect::SideEffect).then(|| format!("op-{call_id}"));
        Event::ToolCall {
            parent: Some(parent.into()),
            call_id: call_id.into(),
            tool: "deploy".into(),
            args: json!({"call": call_id}),
            effect,
            operation_id,
            target: Some("prod".into()),
            needs_approval: false,
        }
    }

    fn call(&mut self, parent: &str, call_id: &str, effect: Effect) -> String {
        self.append(Self::tool_call(parent, call_id, effect))
    }

    fn say(&mut self, parent: &str, text: &str) -> String {
        self.append(Event::AssistantMessage {
            parent: Some(parent.into()),
            text: text.into(),
        })
    }

    fn commit(&mut self, call_id: &str) {
        self.append(Event::EffectCommitted {
            call_id: call_id.into(),
            operation_id: format!("op-{call_id}"),
            external_ref: format!("ref-{call_id}"),
        });
    }

    fn result_event(parent: &str, call_id: &str) -> Event {
        Event::ToolResult {
            parent: Some(parent.into()),
            call_id: call_id.into(),
            status: ResultStatus::Ok,
            output: Some(json!("done")),
            blob: None,
        }
    }

    fn result(&mut self, parent: &str, call_id: &str) -> String {
        self.append(Self::result_event(parent, call_id))
    }
}

/// Every acknowledged event is in `records` at its seq, unchanged.
fn check_acked_survived(acked: &[(Ack, Event)], records: &[Record]) {
    for (ack, event) in acked {
        let found = records.iter().find(|r| r.seq == ack.seq);
        assert_eq!(
            found.and_then(|r| r.event()),
            Some(event),
            "acknowledged event {} lost or changed after SIGKILL",
            ack.id
        );
    }
}

fn names(context: &str, a: &str, b: &str) -> bool {
    context.lines().any(|l| l.contains(a) && l.contains(b))
}

/// A run with four calls left in four states, then SIGKILL between two
/// requests: c1 finished, c2 committed (result lost), c3 started (outcome
/// unknown), c4 requested. Returns the reopened client and the acks.
fn crashed_session(root: &Path, workspace: &Path, args: &[&str]) -> (Client, Vec<(Ack, Event)>) {
    let mut client = spawn(args);
    assert_eq!(
        client
            .open(&open(root, Some(workspace), true))
            .unwrap()
            .next_seq,
        1
    );
    let mut agent = Agent {
        client,
        acked: Vec::new(),
    };
    agent.append(Event::RunStarted {
        run_id: "r1".into(),
    });
    let question = agent.append(Event::UserMessage {
        parent: None,
        text: "deploy v2".into(),
    });
    let c1 = agent.call(&question, "c1", Effect::SideEffect);
    agent.start("c1");
    agent.commit("c1");
    let r1 = agent.result(&c1, "c1");
    let c2 = agent.call(&r1, "c2", Effect::SideEffect);
    agent.start("c2");
    agent.commit("c2");
    let c3 = agent.call(&c2, "c3", Effect::SideEffect);
    agent.start("c3");
    agent.call(&c3, "c4", Effect::Idempotent);
    let Agent { client, acked } = agent;
    client.kill().unwrap();

    let mut client = spawn(args);
    let reopened = client.open(&open(root, None, false)).unwrap();
    assert_eq!(reopened.next_seq, acked.len() as u64 + 1);
    check_acked_survived(&acked, &client.events(None).unwrap());
    (client, acked)
}

fn phases(recovery: &agentchaos_protocol::message::RecoveryState) -> Vec<(&str, Phase)> {
    recovery
        .uncertain
        .iter()
        .map(|u| (u.call_id.as_str(), u.phase))
        .collect()
}

#[test]
fn sigkill_keeps_acked_events_and_recovery_reads_phases_from_pending_writes() {
    if !langgraph_available(
        "sigkill_keeps_acked_events_and_recovery_reads_phases_from_pending_writes",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let (mut client, _) = crashed_session(&root, dir.path(), &[]);

    let recovery = client.recover().unwrap();
    assert_eq!(recovery.interrupted_runs, ["r1"]);
    assert_eq!(
        phases(&recovery),
        [
            ("c2", Phase::Committed),
            ("c3", Phase::Started),
            ("c4", Phase::Requested)
        ]
    );
    assert_eq!(
        recovery.uncertain[0].external_ref.as_deref(),
        Some("ref-c2")
    );
    assert_eq!(recovery.appended, 4);
    assert_eq!(
        client.recover().unwrap().appended,
        0,
        "recovery is idempotent"
    );

    let events = client.events(None).unwrap();
    let expected = agentchaos::model::oracle::projection(&events);
    let found = client.projection().unwrap();
    assert!(
        expected.differences(&found).is_empty(),
        "projection is not the oracle's reading of the events: {:?}",
        expected.differences(&found)
    );
    let context = client.context(None).unwrap();
    assert!(names(&context, "run r1", "interrupted"), "{context}");
    for (call, phase) in [("c2", "committed"), ("c3", "started"), ("c4", "requested")] {
        assert!(
            names(&context, &format!("call {call}"), &format!("phase {phase}")),
            "{context}"
        );
    }

    // What LangGraph does not guard: no effect ledger, no restart rule.
    let again = Event::EffectCommitted {
        call_id: "c2".into(),
        operation_id: "op-c2".into(),
        external_ref: "ref-c2-twice".into(),
    };
    assert!(
        client.append(&again).is_ok(),
        "LangGraph keeps no ledger: a second commit of op-c2 is stored"
    );
    assert!(
        client.start_tool("c3").is_ok(),
        "LangGraph re-runs an unfinished node: c3 starts again without reconciliation"
    );

    // Branches, compaction and a plan live in the state channel: they
    // survive the next crash and fold the same way.
    let mut agent = Agent {
        client,
        acked: Vec::new(),
    };
    let leaf = found.leaf.clone().expect("c4's call is the leaf");
    let r2 = agent.result(&leaf, "c2");
    let r3 = agent.result(&r2, "c3");
    let r4 = agent.result(&r3, "c4");
    agent.say(&r4, "deployed; anything else?");
    agent.append(Event::LeafMoved { leaf: r4.clone() });
    let kept = agent.say(&r4, "on second thought: all deployed");
    agent.append(Event::Compaction {
        parent: Some(kept.clone()),
        summary: "deployed v2 in four calls".into(),
        first_kept_id: r3,
        tokens_before: 1234,
    });
    agent.append(Event::PlanUpdated {
        goal: "ship v2".into(),
        steps: vec![PlanStep {
            id: "deploy".into(),
            title: "deploy web".into(),
            status: StepStatus::Done,
        }],
    });
    agent.client.checkpoint().unwrap();
    let Agent { client, acked } = agent;
    client.kill().unwrap();
    let mut client = spawn(&[]);
    client.open(&open(&root, None, false)).unwrap();
    let events = client.events(None).unwrap();
    check_acked_survived(&acked, &events);
    let expected = agentchaos::model::oracle::projection(&events);
    let found = client.projection().unwrap();
    assert!(
        expected.differences(&found).is_empty(),
        "after branching and compaction: {:?}",
        expected.differences(&found)
    );
    assert_eq!(
        found.branch.first().map(String::as_str),
        Some(r3_id(&events))
    );
    let context = client.context(Some(40)).unwrap();
    assert!(context.contains("deployed v2 in four calls"), "{context}");
    assert!(
        !context.contains("phase "),
        "nothing is uncertain any more:\n{context}"
    );
    client.close().unwrap();
    assert!(client.shutdown().unwrap().success());
}

/// The id of c3's result, the first entry the compaction kept.
fn r3_id(events: &[Record]) -> &str {
    events
        .iter()
        .find(|r| matches!(r.event(), Some(Event::ToolResult { call_id, .. }) if call_id == "c3"))
        .map(|r| r.id.as_str())
        .expect("c3 has a result")
}

#[test]
fn as_a_stock_graph_every_unfinished_node_runs_again() {
    if !langgraph_available("as_a_stock_graph_every_unfinished_node_runs_again") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let (mut client, _) = crashed_session(&root, dir.path(), &["--recovery", "rerun"]);
    let recovery = client.recover().unwrap();
    assert_eq!(
        phases(&recovery),
        [
            ("c2", Phase::Requested),
            ("c3", Phase::Requested),
            ("c4", Phase::Requested)
        ],
        "LangGraph's resume knows one thing: run the node again"
    );
    // The durable facts say otherwise: c2's deploy happened, c3's may have.
    let projection = client.projection().unwrap();
    let durable: Vec<(&str, Phase)> = projection
        .open_calls
        .iter()
        .map(|c| (c.call_id.as_str(), c.phase))
        .collect();
    assert_eq!(
        durable,
        [
            ("c2", Phase::Committed),
            ("c3", Phase::Started),
            ("c4", Phase::Requested)
        ]
    );
    let context = client.context(None).unwrap();
    assert!(
        names(&context, "call c2", "phase requested"),
        "the model is told to run the committed deploy again:\n{context}"
    );
}

#[test]
fn sigkill_in_flight_loses_nothing_acknowledged() {
    if !langgraph_available("sigkill_in_flight_loses_nothing_acknowledged") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut client = spawn(&[]);
    client.open(&open(&root, Some(dir.path()), true)).unwrap();
    let pid = client.pid().to_string();
    let mut agent = Agent {
        client,
        acked: Vec::new(),
    };
    let mut leaf = agent.append(Event::UserMessage {
        parent: None,
        text: "go".into(),
    });
    // SIGKILL from another thread while requests are in flight: it lands
    // inside a put, a put_writes, or between two requests.
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        Command::new("kill").args(["-KILL", &pid]).status()
    });
    let died = loop {
        let call_id = format!("c{}", agent.acked.len());
        let step = agent
            .try_append(Agent::tool_call(&leaf, &call_id, Effect::Idempotent))
            .and_then(|call| {
                agent.try_start(&call_id)?;
                agent.try_append(Agent::result_event(&call, &call_id))
            });
        match step {
            Ok(id) => leaf = id,
            Err(e) => break e,
        }
    };
    assert!(killer.join().unwrap().unwrap().success());
    assert!(
        died.protocol().is_some(),
        "the adapter must have died mid-request, not refused: {died}"
    );
    let acked = agent.acked.len() as u64;
    assert!(acked > 3, "the kill came before any tool ran");

    let mut client = spawn(&[]);
    let next = client.open(&open(&root, None, false)).unwrap().next_seq;
    let events = client.events(None).unwrap();
    check_acked_survived(&agent.acked, &events);
    assert!(
        next == acked + 1 || next == acked + 2,
        "{acked} acked, next seq {next}: only the request in flight may have landed"
    );
    let expected = agentchaos::model::oracle::projection(&events);
    assert!(expected
        .differences(&client.projection().unwrap())
        .is_empty());
}

#[test]
fn no_writer_lock_a_second_writer_hides_acknowledged_events() {
    if !langgraph_available("no_writer_lock_a_second_writer_hides_acknowledged_events") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut first = spawn(&[]);
    first.open(&open(&root, Some(dir.path()), true)).unwrap();
    let mut second = spawn(&[]);
    second
        .open(&open(&root, None, false))
        .expect("LangGraph has no writer lock: a second process opens the thread");
    let mine = Event::UserMessage {
        parent: None,
        text: "first writer".into(),
    };
    let theirs = Event::UserMessage {
        parent: None,
        text: "second writer".into(),
    };
    let ack = first.append(&mine).unwrap();
    let other = second.append(&theirs).unwrap();
    assert_eq!(ack.seq, other.seq, "both writers were given the same seq");

    // The latest checkpoint (by id) is the thread: the first writer's
    // acknowledged event is on a sibling checkpoint nobody reads.
    first.close().unwrap();
    first.open(&open(&root, None, false)).unwrap();
    let events = first.events(None).unwrap();
    assert_eq!(events.len() as u64, ack.seq + 1);
    assert_eq!(events[ack.seq as usize].event(), Some(&theirs));
}

#[test]
fn claims_and_refusals() {
    if !langgraph_available("claims_and_refusals") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let kind = |c: &mut Client, a: &OpenArgs| c.open(a).err().and_then(|e| e.refusal_kind());
    let mut client = spawn(&[]);
    for c in [
        Capability::OrphanMarking,
        Capability::CheckpointProjection,
        Capability::Branches,
        Capability::Compaction,
    ] {
        assert!(client.claims(c), "{c}");
    }
    for c in [
        Capability::EffectLedger,
        Capability::TornTailRepair,
        Capability::DamageRefusal,
    ] {
        assert!(!client.claims(c), "{c} is not something LangGraph provides");
    }
    let version = client.hello().version.clone().unwrap_or_default();
    assert!(
        version.contains("langgraph-checkpoint-sqlite 3.1.2"),
        "{version}"
    );

    assert_eq!(
        kind(&mut client, &open(&root, None, false)),
        Some(ErrorKind::NotFound)
    );
    let escape = OpenArgs {
        session: "../escape".into(),
        ..open(&root, Some(dir.path()), true)
    };
    assert_eq!(kind(&mut client, &escape), Some(ErrorKind::Invalid));
    client.open(&open(&root, Some(dir.path()), true)).unwrap();
    let refusal = |c: &mut Client, e: &Event| c.append(e).err().and_then(|e| e.refusal_kind());
    let intent = Event::ToolStarted {
        call_id: "c1".into(),
    };
    assert_eq!(refusal(&mut client, &intent), Some(ErrorKind::BadRequest));
    let orphan_result = Event::ToolResult {
        parent: None,
        call_id: "c9".into(),
        status: ResultStatus::Ok,
        output: None,
        blob: None,
    };
    assert_eq!(refusal(&mut client, &orphan_result), Some(ErrorKind::Rule));
    let dangling = Event::UserMessage {
        parent: Some("e999".into()),
        text: "hello?".into(),
    };
    assert_eq!(refusal(&mut client, &dangling), Some(ErrorKind::Rule));
    let unreconciled = Event::ToolReconciled {
        call_id: "c9".into(),
        outcome: ReconcileOutcome::NotApplied,
        evidence: "none".into(),
    };
    assert_eq!(refusal(&mut client, &unreconciled), Some(ErrorKind::Rule));
    assert_eq!(
        client.events(None).unwrap().len(),
        1,
        "a refused event was written"
    );
    client.close().unwrap();
    let mut other = spawn(&[]);
    assert_eq!(
        kind(&mut other, &open(&root, Some(dir.path()), true)),
        Some(ErrorKind::Exists)
    );
}

#[test]
fn python_self_test_passes() {
    if !langgraph_available("python_self_test_passes") {
        return;
    }
    let out = python::python3()
        .arg(adapter_dir().join("selftest.py"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "selftest.py failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The kit's conformance self-test, as an author would run it on this adapter.
#[test]
fn the_kit_self_test_passes() {
    if !langgraph_available("the_kit_self_test_passes") {
        return;
    }
    let out = python::python3()
        .args(["-m", "agentchaos_adapter.selftest", "--"])
        .arg(python::python3_path())
        .arg(adapter_dir().join("adapter.py"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("7 passed, 0 failed, 2 skipped"), "{text}");
    for unclaimed in ["effect_ledger", "writer_lock"] {
        assert!(
            text.contains(&format!("{unclaimed} is not claimed")),
            "{text}"
        );
    }
}

/// A sampled campaign of a shipped scenario under the crash points, once
/// per recovery mode: recording intents as pending writes
/// (`--recovery phases`) passes every claimed row; a stock graph's re-run
/// of every unfinished node (`--recovery rerun`) applies a started or
/// committed side effect again, and the finding's replay names the mode.
#[test]
fn a_sampled_campaign_passes_with_phases_and_fails_with_rerun() {
    if !langgraph_available("a_sampled_campaign_passes_with_phases_and_fails_with_rerun") {
        return;
    }
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/deploy-and-notify.json");
    let campaign_of = |mode: &str| {
        let adapter =
            python::adapter_command(&adapter_dir().join("adapter.py"), &["--recovery", mode]);
        campaign::run(
            &scenario,
            &[
                "--adapter",
                &adapter,
                "--nemesis",
                "points",
                "--trials",
                "24",
            ],
        )
    };

    let (code, report, stdout) = campaign_of("phases");
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(report["trials"], 24, "{stdout}");
    campaign::assert_rows(
        &report,
        "pass",
        &["orphan_marking", "checkpoint_projection", "outcome"],
        &stdout,
    );

    let (code, report, stdout) = campaign_of("rerun");
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(report["error_count"], 0, "{stdout}");
    let effect = campaign::first_violation(&report, "effect-at-most-once");
    assert!(
        effect["replay"]
            .as_str()
            .is_some_and(|r| r.contains("--plan kill@") && r.contains("--recovery rerun")),
        "{effect}"
    );
    campaign::assert_rows(&report, "fail", &["orphan_marking", "outcome"], &stdout);
}
