//! The small logs the probe tests judge against. Test-only: the harness
//! itself must never use them.

use agentchaos_protocol::event::{event_id, Body, Event, Record, Redaction};

pub(super) fn rec(seq: u64, e: Event) -> Record {
    Record {
        seq,
        id: event_id(seq),
        ts: "2026-01-01T00:00:00.000Z".into(),
        redaction: Redaction::Public,
        body: Body::Known(e),
    }
}

pub(super) fn log() -> Vec<Record> {
    vec![
        rec(
            0,
            Event::SessionCreated {
                session_id: "s".into(),
                schema_version: 1,
                workspace: "/w".into(),
            },
        ),
        rec(1, Event::RunStarted { run_id: "r".into() }),
        rec(
            2,
            Event::EffectCommitted {
                call_id: "c".into(),
                operation_id: "op".into(),
                external_ref: "x".into(),
            },
        ),
    ]
}

/// A run that calls a side effect, starts and commits it.
pub(super) fn side_effect_log() -> Vec<Record> {
    use agentchaos_protocol::event::Effect;
    let mut log = log();
    log.truncate(2);
    log.push(rec(
        2,
        Event::UserMessage {
            parent: None,
            text: "deploy".into(),
        },
    ));
    log.push(rec(
        3,
        Event::ToolCall {
            parent: Some(event_id(2)),
            call_id: "c".into(),
            tool: "deploy".into(),
            args: serde_json::json!({}),
            effect: Effect::SideEffect,
            operation_id: Some("op".into()),
            target: None,
            needs_approval: false,
        },
    ));
    log.push(rec(
        4,
        Event::ToolStarted {
            call_id: "c".into(),
        },
    ));
    log.push(rec(
        5,
        Event::EffectCommitted {
            call_id: "c".into(),
            operation_id: "op".into(),
            external_ref: "x".into(),
        },
    ));
    log
}
