//! quarantine-recorded: after a recovery, every torn tail an earlier crash
//! left is kept whole in a quarantine file that a durable
//! `tail_quarantined` names, and every quarantine file is named by one.
//! Judged only where the harness reads the session directory.

use agentchaos_protocol::event::{Event, Record};

use crate::check::{v, Invariant, Moment, Violation};
use crate::history::History;
use crate::model::describe_record;

/// quarantine-recorded, after a recovery, where the harness reads the
/// session directory: every torn tail an earlier life's crash left (seen
/// after that crash) is kept whole, byte for byte, in a quarantine file
/// that a durable `tail_quarantined` names with the offset the tail was
/// cut from; and every quarantine file in the directory is named by one.
/// A cut that overwrites an earlier one (two cuts at one offset), or one
/// that no event records, fails it.
pub(super) fn quarantine_recorded(h: &History, m: &Moment<'_>, out: &mut Vec<Violation>) {
    let Some(files) = m.obs.quarantine.as_ref().filter(|_| m.recovered) else {
        return;
    };
    let named: Vec<(&str, u64, &Record)> = m
        .obs
        .records
        .iter()
        .filter_map(|r| match r.event() {
            Some(Event::TailQuarantined { file, offset, .. }) => Some((file.as_str(), *offset, r)),
            _ => None,
        })
        .collect();
    for (name, bytes) in files {
        if !named.iter().any(|(f, _, _)| f == name) {
            out.push(v(
                Invariant::QuarantineRecorded,
                &m.when,
                "every quarantine file in the session directory named by a durable tail_quarantined".into(),
                format!(
                    "{name} ({} bytes) is named by no event: the cut it keeps is silent",
                    bytes.len()
                ),
                vec![],
            ));
        }
    }
    for (life, seen) in h.after_kill.iter().enumerate().take(m.acked_by_lives) {
        let Some((offset, torn)) = &seen.torn_bytes else {
            continue;
        };
        let at_offset: Vec<_> = named.iter().filter(|(_, o, _)| o == offset).collect();
        let kept = at_offset
            .iter()
            .any(|(f, _, _)| files.iter().any(|(name, bytes)| name == f && bytes == torn));
        if kept {
            continue;
        }
        let found = if at_offset.is_empty() {
            format!("no tail_quarantined names a cut at offset {offset}")
        } else {
            let held: Vec<String> = at_offset
                .iter()
                .map(|(f, _, _)| match files.iter().find(|(name, _)| name == f) {
                    Some((_, b)) => format!("{f} holds {} other bytes", b.len()),
                    None => format!("{f} is not in the session directory"),
                })
                .collect();
            format!(
                "{}: the torn bytes are gone (a later cut at the same offset overwrote them?)",
                held.join("; ")
            )
        };
        out.push(v(
            Invariant::QuarantineRecorded,
            &m.when,
            format!(
                "the torn tail seen after life {life}'s crash ({} bytes from offset {offset}) kept whole in a quarantine file a durable tail_quarantined names at offset {offset}",
                torn.len()
            ),
            found,
            at_offset.iter().map(|(_, _, r)| describe_record(r)).collect(),
        ));
    }
}
