//! Conformance through the adapter protocol: the same session, SIGKILL,
//! reopen and recovery against the reference store (`agentstore adapter`)
//! and the SQLite store. Each must serve the projection the harness's oracle
//! (`agentchaos::model::oracle`) reads from its events, keep every acknowledged event, and the two must agree with each
//! other on events, recovery, refusals and projection.

use crate::support;

use std::path::Path;
use std::time::Duration;

use agentchaos::store::adapter::{
    AdapterCommand, Capability, Client, ClientOptions, ErrorKind, OpenArgs, ProjectionView,
};
use agentchaos_protocol::event::{
    Body, Effect, Event, Phase, PlanStep, ReconcileOutcome, ResultStatus, RunStatus, StepStatus,
};
use agentchaos_protocol::message::Ack;
use agentchaos_protocol::message::RecoveryState;
use serde_json::json;

struct Adapter {
    name: &'static str,
    command: AdapterCommand,
    /// A deliberately broken behaviour of agentstore (`AGENTSTORE_FAULT`).
    fault: Option<&'static str>,
}

impl Adapter {
    /// The SQLite store with one mutant switched on.
    fn sqlite_mutant(mutant: &str) -> Adapter {
        let mut sqlite = adapters().swap_remove(1);
        sqlite.command.args = vec!["--mutant".into(), mutant.into()];
        sqlite
    }
}

fn adapters() -> Vec<Adapter> {
    let path = |p: std::path::PathBuf| p.to_str().expect("UTF-8 target dir").to_string();
    vec![
        Adapter {
            name: "agentstore",
            command: AdapterCommand {
                program: path(support::workspace_bin("agentstore")),
                args: vec!["adapter".into()],
            },
            fault: None,
        },
        Adapter {
            name: "sqlite",
            command: AdapterCommand {
                program: path(support::workspace_bin("agentchaos-sqlite-adapter")),
                args: vec![],
            },
            fault: None,
        },
    ]
}

fn spawn(a: &Adapter) -> Client {
    let options = ClientOptions {
        timeout: Duration::from_secs(30),
    };
    let mut command = a.command.to_command();
    if let Some(fault) = a.fault {
        command.env(agentstore::fault::FAULT_ENV, fault);
    }
    Client::spawn(command, options).unwrap_or_else(|e| panic!("{}: {e}", a.name))
}

fn open(root: &Path, workspace: Option<&Path>, create: bool) -> OpenArgs {
    OpenArgs {
        root: root.to_path_buf(),
        session: "conformance".into(),
        workspace: workspace.map(Path::to_path_buf),
        create,
        lease: None,
    }
}

/// The agent's side of the session: appends, remembering every ack and the leaf.
struct Agent {
    client: Client,
    acked: Vec<(Ack, Event)>,
    leaf: Option<String>,
}

impl Agent {
    fn append(&mut self, event: Event) -> String {
        let ack = self
            .client
            .append(&event)
            .unwrap_or_else(|e| panic!("{}: {e}", event.type_name()));
        if event.parent().is_some() {
            self.leaf = Some(ack.id.clone());
        }
        self.acked.push((ack.clone(), event));
        ack.id
    }

    fn start(&mut self, call_id: &str) {
        let ack = self.client.start_tool(call_id).unwrap();
        let event = Event::ToolStarted {
            call_id: call_id.into(),
        };
        self.acked.push((
            Ack {
                seq: ack.seq,
                id: ack.id,
            },
            event,
        ));
    }

    fn say(&mut self, text: &str) -> String {
        let parent = self.leaf.clone();
        self.append(Event::AssistantMessage {
            parent,
            text: text.into(),
        })
    }

    fn call(&mut self, call_id: &str, effect: Effect, op: Option<&str>) -> String {
        let parent = self.leaf.clone();
        self.append(Event::ToolCall {
            parent,
            call_id: call_id.into(),
            tool: "deploy".into(),
            args: json!({"service": "web", "call": call_id}),
            effect,
            operation_id: op.map(String::from),
            target: Some("prod".into()),
            needs_approval: false,
        })
    }

    fn commit(&mut self, call_id: &str, op: &str) {
        self.append(Event::EffectCommitted {
            call_id: call_id.into(),
            operation_id: op.into(),
            external_ref: format!("ref-{op}"),
        });
    }

    fn result(&mut self, call_id: &str) -> String {
        let parent = self.leaf.clone();
        self.append(Event::ToolResult {
            parent,
            call_id: call_id.into(),
            status: ResultStatus::Ok,
            output: Some(json!(format!("{call_id} done"))),
            blob: None,
        })
    }
}

/// Every acknowledged event must be in `records` with its seq.
fn check_acked_survived(
    store: &str,
    acked: &[(Ack, Event)],
    records: &[agentchaos_protocol::Record],
) {
    for (ack, event) in acked {
        let found = records.iter().find(|r| r.seq == ack.seq);
        assert_eq!(
            found.and_then(|r| r.event()),
            Some(event),
            "{store}: acknowledged event {} lost or changed after SIGKILL",
            ack.id
        );
    }
}

/// What one store did with the session, for comparison across stores.
#[derive(Debug, PartialEq)]
struct Outcome {
    recovery: RecoveryState,
    events: Vec<(u64, String, Body)>,
    after_recovery: ProjectionView,
    refusals: Vec<(String, Option<ErrorKind>)>,
    end: ProjectionView,
}

/// The projection the harness's oracle reads from `records` (never agentstore's fold).
fn projection_of(records: &[agentchaos_protocol::Record]) -> ProjectionView {
    agentchaos::model::oracle::projection(records)
}

/// A line of the context naming `a` and `b` together (the protocol's rule
/// for how a context shows an interrupted run or an uncertain call).
fn names(context: &str, a: &str, b: &str) -> bool {
    context.lines().any(|l| l.contains(a) && l.contains(b))
}

fn run_session(a: &Adapter, workspace: &Path) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut client = spawn(a);
    let opened = client.open(&open(&root, Some(workspace), true)).unwrap();
    assert_eq!(opened.next_seq, 1, "{}: session_created is event 0", a.name);
    let mut agent = Agent {
        client,
        acked: Vec::new(),
        leaf: None,
    };

    // A run, a branch switch, then four calls left in four states.
    agent.append(Event::RunStarted {
        run_id: "r1".into(),
    });
    let question = agent.append(Event::UserMessage {
        parent: None,
        text: "deploy v2".into(),
    });
    agent.say("let me check the tests first");
    agent.append(Event::LeafMoved {
        leaf: question.clone(),
    });
    agent.leaf = Some(question);
    let deploying = agent.say("deploying");
    agent.call("c1", Effect::SideEffect, Some("op1"));
    agent.start("c1");
    agent.commit("c1", "op1");
    agent.result("c1");
    agent.call("c2", Effect::SideEffect, Some("op2"));
    agent.start("c2");
    agent.commit("c2", "op2"); // committed, result lost
    agent.call("c3", Effect::SideEffect, Some("op3"));
    agent.start("c3"); // started, outcome unknown
    agent.call("c4", Effect::Idempotent, None); // requested only
    agent.append(Event::PlanUpdated {
        goal: "ship v2".into(),
        steps: vec![PlanStep {
            id: "deploy".into(),
            title: "deploy web".into(),
            status: StepStatus::InProgress,
        }],
    });
    agent.client.checkpoint().unwrap();
    agent.say("waiting for the deploys");
    // The user goes back to an earlier entry just before the crash: the
    // leaf must survive it.
    agent.append(Event::LeafMoved {
        leaf: deploying.clone(),
    });
    agent.leaf = Some(deploying);

    // Crash: SIGKILL between two requests, then a new process.
    let leaf = agent.leaf.clone();
    let Agent { client, acked, .. } = agent;
    client.kill().unwrap();
    let mut client = spawn(a);
    let reopened = client.open(&open(&root, None, false)).unwrap();
    check_acked_survived(a.name, &acked, &client.events(None).unwrap());
    assert_eq!(reopened.next_seq, acked.len() as u64 + 1, "{}", a.name);
    let mut agent = Agent {
        client,
        acked,
        leaf,
    };

    let recovery = agent.client.recover().unwrap();
    assert_eq!(
        agent.client.recover().unwrap().appended,
        0,
        "{}: a second recovery appends nothing",
        a.name
    );
    let events = agent.client.events(None).unwrap();
    let after_recovery = agent.client.projection().unwrap();
    assert_eq!(
        after_recovery,
        projection_of(&events),
        "{}: the store's projection is not the fold of its events",
        a.name
    );
    let context = agent.client.context(None).unwrap();
    assert!(
        names(&context, "run r1", "interrupted"),
        "{}: context does not show run r1 as interrupted:\n{context}",
        a.name
    );
    for (call, phase) in [("c2", "committed"), ("c3", "started"), ("c4", "requested")] {
        assert!(
            names(&context, &format!("call {call}"), &format!("phase {phase}")),
            "{}: context does not show {call} as {phase}:\n{context}",
            a.name
        );
    }

    // What must be refused, and nothing of it written.
    let refused = [
        Event::EffectCommitted {
            call_id: "c2".into(),
            operation_id: "op2".into(),
            external_ref: "again".into(),
        },
        Event::ToolResult {
            parent: None,
            call_id: "c9".into(),
            status: ResultStatus::Ok,
            output: None,
            blob: None,
        },
        Event::RunFinished {
            run_id: "r1".into(),
            status: RunStatus::Completed,
        },
        Event::UserMessage {
            parent: Some("e999".into()),
            text: "hello?".into(),
        },
        Event::ToolCall {
            parent: None,
            call_id: "c5".into(),
            tool: "deploy".into(),
            args: json!({}),
            effect: Effect::SideEffect,
            operation_id: None,
            target: None,
            needs_approval: false,
        },
    ];
    let mut refusals: Vec<(String, Option<ErrorKind>)> = refused
        .iter()
        .map(|e| {
            let kind = agent.client.append(e).err().and_then(|e| e.refusal_kind());
            (e.type_name().to_string(), kind)
        })
        .collect();
    for call in ["c2", "c3"] {
        // c2 committed: never again; c3 started: reconcile first.
        let kind = agent
            .client
            .start_tool(call)
            .err()
            .and_then(|e| e.refusal_kind());
        refusals.push((format!("start_tool {call}"), kind));
    }
    let accepted: Vec<&str> = refusals
        .iter()
        .filter(|(_, k)| *k != Some(ErrorKind::Rule))
        .map(|(what, _)| what.as_str())
        .collect();
    assert!(
        accepted.is_empty(),
        "{}: accepted what the rules refuse: {accepted:?}",
        a.name
    );
    assert_eq!(
        agent.client.events(None).unwrap().len(),
        events.len(),
        "{}: a refused event was written",
        a.name
    );

    // Resolve everything the way the recovery said, then compact.
    agent.result("c2");
    agent.append(Event::ToolReconciled {
        call_id: "c3".into(),
        outcome: ReconcileOutcome::NotApplied,
        evidence: "no deploy op3 on the server".into(),
    });
    agent.start("c3");
    agent.commit("c3", "op3");
    agent.result("c3");
    agent.start("c4");
    // A large output goes to a blob first, durable before the result names it.
    let output: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    let blob = agent.client.put_blob(&output).unwrap();
    assert_eq!(blob.digest, agentstore::blob::digest(&output), "{}", a.name);
    let parent = agent.leaf.clone();
    let first_kept = agent.append(Event::ToolResult {
        parent,
        call_id: "c4".into(),
        status: ResultStatus::Ok,
        output: None,
        blob: Some(blob.clone()),
    });
    agent.append(Event::RunStarted {
        run_id: "r2".into(),
    });
    agent.say("all deployed");
    agent.append(Event::Compaction {
        parent: agent.leaf.clone(),
        summary: "deployed v2 in three calls".into(),
        first_kept_id: first_kept,
        tokens_before: 1234,
    });
    agent.say("anything else?");
    agent.append(Event::RunFinished {
        run_id: "r2".into(),
        status: RunStatus::Completed,
    });
    let end_events = agent.client.events(None).unwrap();
    let end = agent.client.projection().unwrap();
    assert_eq!(end, projection_of(&end_events), "{}", a.name);
    let context = agent.client.context(None).unwrap();
    assert!(
        !context.contains("phase "),
        "{}: nothing is uncertain any more:\n{context}",
        a.name
    );
    assert!(context.contains("deployed v2 in three calls"), "{}", a.name);

    // Crash again after a clean stretch: nothing to recover, same projection.
    let Agent { client, acked, .. } = agent;
    client.kill().unwrap();
    let mut client = spawn(a);
    client.open(&open(&root, None, false)).unwrap();
    assert_eq!(client.projection().unwrap(), end, "{}", a.name);
    assert_eq!(client.recover().unwrap().appended, 0, "{}", a.name);
    check_acked_survived(a.name, &acked, &client.events(None).unwrap());
    assert_eq!(client.get_blob(&blob).unwrap(), output, "{}", a.name);
    let missing = agentchaos_protocol::event::BlobRef {
        digest: "0".repeat(64),
        size: 1,
    };
    let refused = client.get_blob(&missing).unwrap_err();
    assert_eq!(
        refused.refusal_kind(),
        Some(ErrorKind::NotFound),
        "{}",
        a.name
    );
    client.close().unwrap();
    assert!(client.shutdown().unwrap().success(), "{}", a.name);

    Outcome {
        recovery,
        events: events.into_iter().map(|r| (r.seq, r.id, r.body)).collect(),
        after_recovery,
        refusals,
        end,
    }
}

#[test]
fn both_stores_recover_the_same_session_the_same_way() {
    let workspace = tempfile::tempdir().unwrap();
    let outcomes: Vec<(&str, Outcome)> = adapters()
        .iter()
        .map(|a| (a.name, run_session(a, workspace.path())))
        .collect();
    let (reference, expected) = &outcomes[0];
    let uncertain: Vec<(&str, Phase, Option<&str>)> = expected
        .recovery
        .uncertain
        .iter()
        .map(|u| (u.call_id.as_str(), u.phase, u.external_ref.as_deref()))
        .collect();
    assert_eq!(
        uncertain,
        [
            ("c2", Phase::Committed, Some("ref-op2")),
            ("c3", Phase::Started, None),
            ("c4", Phase::Requested, None),
        ]
    );
    assert_eq!(expected.recovery.interrupted_runs, ["r1"]);
    assert_eq!(expected.recovery.appended, 4);
    for (name, outcome) in &outcomes[1..] {
        assert_eq!(
            outcome.recovery, expected.recovery,
            "{name} vs {reference}: recovery"
        );
        assert_eq!(
            outcome.events, expected.events,
            "{name} vs {reference}: events"
        );
        let diff = expected.after_recovery.differences(&outcome.after_recovery);
        assert!(diff.is_empty(), "{name} vs {reference}: {diff:?}");
        assert_eq!(outcome.refusals, expected.refusals, "{name} vs {reference}");
        let diff = expected.end.differences(&outcome.end);
        assert!(diff.is_empty(), "{name} vs {reference}: {diff:?}");
    }
}

#[test]
fn both_stores_refuse_opens_the_same_way() {
    let workspace = tempfile::tempdir().unwrap();
    for a in adapters() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let kind =
            |c: &mut Client, args: &OpenArgs| c.open(args).err().and_then(|e| e.refusal_kind());
        let mut first = spawn(&a);
        assert_eq!(
            kind(&mut first, &open(&root, None, false)),
            Some(ErrorKind::NotFound),
            "{}",
            a.name
        );
        first
            .open(&open(&root, Some(workspace.path()), true))
            .unwrap();
        let mut second = spawn(&a);
        assert_eq!(
            kind(&mut second, &open(&root, None, false)),
            Some(ErrorKind::Locked),
            "{}: a second writer",
            a.name
        );
        first.close().unwrap();
        assert_eq!(
            kind(&mut second, &open(&root, Some(workspace.path()), true)),
            Some(ErrorKind::Exists),
            "{}",
            a.name
        );
        let bad_id = OpenArgs {
            session: "../escape".into(),
            ..open(&root, Some(workspace.path()), true)
        };
        assert_eq!(
            kind(&mut second, &bad_id),
            Some(ErrorKind::Invalid),
            "{}",
            a.name
        );
        second.open(&open(&root, None, false)).unwrap();
        let event = Event::ToolStarted {
            call_id: "c".into(),
        };
        let refused = second.append(&event).unwrap_err();
        assert_eq!(
            refused.refusal_kind(),
            Some(ErrorKind::BadRequest),
            "{}",
            a.name
        );
    }
}

#[test]
fn claims_are_what_the_stores_can_keep() {
    let claims: Vec<Vec<Capability>> = adapters()
        .iter()
        .map(|a| spawn(a).hello().capabilities.clone())
        .collect();
    assert_eq!(claims[0], Capability::ALL);
    assert!(!claims[1].contains(&Capability::TornTailRepair));
    assert!(!claims[1].contains(&Capability::DamageRefusal));
    assert!(claims[1].contains(&Capability::EffectLedger));
}

/// The checks above are shown to fail: agentstore with one promise broken
/// on purpose (`AGENTSTORE_FAULT`) must not get through the session.
fn broken_reference(fault: &'static str) {
    let mut reference = adapters().swap_remove(0);
    reference.fault = Some(fault);
    let workspace = tempfile::tempdir().unwrap();
    run_session(&reference, workspace.path());
}

#[test]
#[should_panic(expected = "agentstore: a second recovery appends nothing")]
fn catches_a_recovery_that_marks_twice() {
    broken_reference("mark-twice");
}

#[test]
#[should_panic(expected = "agentstore: context does not show c2 as committed")]
fn catches_a_recovery_that_invites_a_rerun() {
    broken_reference("rerun-uncertain");
}

#[test]
#[should_panic(expected = "agentstore: context does not show run r1 as interrupted")]
fn catches_a_context_without_the_recovery_block() {
    broken_reference("drop-recovery-block");
}

#[test]
#[should_panic(expected = "acknowledged event e7 lost or changed after SIGKILL")]
fn catches_an_intent_acknowledged_but_never_written() {
    broken_reference("skip-intent");
}

/// The mutant corpus (`chaos/mutants/README.md`): each deliberately broken
/// SQLite store is caught by the check that guards the promise it breaks.
fn broken_sqlite(mutant: &str) {
    let workspace = tempfile::tempdir().unwrap();
    run_session(&Adapter::sqlite_mutant(mutant), workspace.path());
}

#[test]
#[should_panic(expected = "sqlite: context does not show c2 as committed")]
fn mutant_rerun_uncertain() {
    broken_sqlite("rerun-uncertain");
}

#[test]
#[should_panic(expected = "sqlite: a second recovery appends nothing")]
fn mutant_mark_twice() {
    broken_sqlite("mark-twice");
}

#[test]
#[should_panic(expected = "sqlite: context does not show c2 as committed")]
fn mutant_forget_started() {
    broken_sqlite("forget-started");
}

#[test]
#[should_panic(expected = "sqlite: a second recovery appends nothing")]
fn mutant_recovery_uncommitted() {
    broken_sqlite("recovery-uncommitted");
}

#[test]
#[should_panic(expected = "sqlite: accepted what the rules refuse: [\"effect_committed\"]")]
fn mutant_double_commit() {
    broken_sqlite("double-commit");
}

#[test]
#[should_panic(expected = "sqlite: accepted what the rules refuse: [\"start_tool c2\"]")]
fn mutant_rerun_committed() {
    broken_sqlite("rerun-committed");
}

#[test]
#[should_panic(expected = "sqlite: acknowledged event e7 lost or changed after SIGKILL")]
fn mutant_lose_intent() {
    broken_sqlite("lose-intent");
}

#[test]
#[should_panic(expected = "sqlite: the store's projection is not the fold of its events")]
fn mutant_leaf_from_last_line() {
    broken_sqlite("leaf-from-last-line");
}

#[test]
#[should_panic(expected = "sqlite: context does not show run r1 as interrupted")]
fn mutant_drop_recovery_notice() {
    broken_sqlite("drop-recovery-notice");
}
