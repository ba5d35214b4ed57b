//! The observations and histories the checker's tests judge. Test-only:
//! the checker itself must never use them.

use std::collections::BTreeMap;

use agentchaos_protocol::event::{event_id, Body, Event, Record, Redaction};
use serde_json::Value;

use crate::history::{Append, History, Life, LifeEnd, RecoveryReport};
use crate::store::{CheckpointView, Observation};

pub(super) fn obs(events: &[Event]) -> Observation {
    let records: Vec<Record> = events
        .iter()
        .enumerate()
        .map(|(i, e)| Record {
            seq: i as u64,
            id: event_id(i as u64),
            ts: "2026-01-01T00:00:00.000Z".into(),
            redaction: Redaction::Public,
            body: Body::Known(e.clone()),
        })
        .collect();
    Observation {
        fold: None,
        ends: Vec::new(),
        torn: None,
        damage: None,
        bytes: Some(crate::store::LogBytes {
            len: records.len() as u64,
            crc: records.len() as u32,
        }),
        checkpoint: CheckpointView::Absent,
        records,
        blobs: Vec::new(),
        torn_bytes: None,
        quarantine: None,
    }
}

pub(super) fn life(index: u32, writes: &[(&Event, u64)], end: LifeEnd) -> Life {
    Life {
        writes: writes
            .iter()
            .map(|(e, seq)| Append {
                type_name: e.type_name().into(),
                fingerprint: crate::agent::wire::fingerprint(e),
                line: 0,
                acked: Some(*seq),
                refused: false,
            })
            .collect(),
        done: end == LifeEnd::Exited(0),
        end,
        ..Life::started(index, None)
    }
}

/// A store whose recovery leaves the open run open (or closes it, for the control).
pub(super) fn history(recovery_closes_the_run: bool) -> History {
    let created = Event::SessionCreated {
        session_id: "s".into(),
        schema_version: 1,
        workspace: String::new(),
    };
    let started = Event::RunStarted { run_id: "r".into() };
    let interrupted = Event::RunInterrupted { run_id: "r".into() };
    let resumed = Event::RunStarted {
        run_id: "r~1".into(),
    };
    let finished = Event::RunFinished {
        run_id: "r~1".into(),
        status: agentchaos_protocol::event::RunStatus::Completed,
    };
    let killed = obs(&[created.clone(), started.clone()]);
    let mut recovered = vec![created.clone(), started.clone()];
    if recovery_closes_the_run {
        recovered.push(interrupted);
    }
    let after = obs(&recovered);
    let n = recovered.len() as u64;
    recovered.extend([resumed.clone(), finished.clone()]);
    let mut second = life(1, &[(&resumed, n), (&finished, n + 1)], LifeEnd::Exited(0));
    second.recovered = Some(RecoveryReport {
        appended: u64::from(recovery_closes_the_run),
        interrupted: if recovery_closes_the_run {
            vec!["r".into()]
        } else {
            vec![]
        },
        uncertain: vec![],
        block: None,
        contexts: vec![],
        projection: Value::Null,
    });
    second.after_recovery = Some(after.clone());
    second.recovered_again = Some(0);
    second.after_second_recovery = Some(after);
    History {
        lives: vec![life(0, &[(&started, 1)], LifeEnd::Killed), second],
        after_kill: vec![killed],
        power_cut: vec![],
        final_obs: obs(&recovered),
        world: vec![],
        workspace: BTreeMap::new(),
        error: None,
    }
}
