//! What the fault probes (damage, fused, zeros, cut, tail) share: a copy
//! of the store's root altered and opened in a probe child, the verdict by
//! what every store owes ([`judge_owed`]) where the store does not claim
//! the capability, and the child's side, which opens the copy and reads
//! everything back. It works on copies: it must never touch the crash-free
//! run's own files.

use std::path::Path;

use agentchaos_protocol::event::Record;

use crate::campaign::probe::child::{refused, ChildArgs, ChildError, Target};
use crate::campaign::probe::spawn::child;
use crate::campaign::probe::{record_key, ProbeError, ProbeReply, ProbeSetup};
use crate::check::{Invariant, Violation};
use crate::model::describe_record;
use crate::store::adapter::Capability;
use crate::store::{blob_problem, referenced_blobs};

/// Copies the store's root into `dir`, lets `alter` change the copy (it
/// returns what it did, in words), and opens the altered copy in a probe
/// child: what was done, and the child's reply.
pub(super) fn open_altered(
    setup: &ProbeSetup<'_>,
    dir: &Path,
    alter: impl FnOnce(&Path) -> Result<String, ProbeError>,
) -> Result<(String, ProbeReply), ProbeError> {
    let root = dir.join("root");
    crate::campaign::scratch::copy_dir(&setup.spec.root, &root)
        .map_err(|e| ProbeError::Harness(format!("cannot copy the store's root: {e}")))?;
    let what = alter(&root)?;
    let reply = child(setup, "damage", &root, &setup.spec.session, None, &[])?;
    Ok((what, reply))
}

/// Rewrites `file` under `root` with `edit` (which says what it did).
pub(super) fn rewrite(
    root: &Path,
    file: &Path,
    edit: impl FnOnce(&mut Vec<u8>) -> Result<String, ProbeError>,
) -> Result<String, ProbeError> {
    let path = root.join(file);
    let mut bytes = std::fs::read(&path)
        .map_err(|e| ProbeError::Harness(format!("{}: {e}", path.display())))?;
    let what = edit(&mut bytes)?;
    std::fs::write(&path, &bytes)
        .map_err(|e| ProbeError::Harness(format!("{}: {e}", path.display())))?;
    Ok(what)
}

/// A fault probe's verdict (`what` says what it broke): by `claimed`, the
/// capability's own judge, where the store claims `capability`; by what
/// every store owes ([`judge_owed`]) where it does not, as
/// [`Probe::judged_by`] scores it.
pub(super) fn judge_fault(
    setup: &ProbeSetup<'_>,
    capability: Capability,
    what: &str,
    reply: &ProbeReply,
    claimed: impl FnOnce() -> Result<Option<Violation>, ProbeError>,
) -> Result<Option<Violation>, ProbeError> {
    if setup.claimed.contains(&capability) {
        claimed()
    } else {
        judge_owed(what, capability, setup.reference, reply)
    }
}

/// The events around `reference[i]` (the one before, it, the one after), described.
fn around(reference: &[Record], i: usize) -> Vec<String> {
    reference[i.saturating_sub(1)..(i + 2).min(reference.len())]
        .iter()
        .map(describe_record)
        .collect()
}

/// What is wrong with `records`, served for the acknowledged `reference`
/// without a refusal: the first event gone (with those around it), an
/// event the store never had, or the order; `None` when they are the same.
pub(super) fn served_problem(
    reference: &[Record],
    records: &[String],
) -> Option<(String, Vec<String>)> {
    let want: Vec<String> = reference.iter().map(record_key).collect();
    if want == records {
        return None;
    }
    let served: std::collections::BTreeSet<&String> = records.iter().collect();
    Some(match want.iter().position(|k| !served.contains(k)) {
        Some(i) => (
            format!(
                "it served {} of {} events without refusing: {} is gone (a silent skip)",
                records.len(),
                want.len(),
                describe_record(&reference[i])
            ),
            around(reference, i),
        ),
        None => match records.iter().find(|k| !want.contains(k)) {
            Some(extra) => (
                format!("it served a record the undamaged store does not have: {extra:?}"),
                vec![],
            ),
            None => (
                "it served the same records in another order".to_string(),
                vec![],
            ),
        },
    })
}

/// The verdict on a store that does not claim `unclaimed`, the capability
/// whose fault the probe applied (`what` says which): it owes what every
/// store owes, that no acknowledged event is lost without a word
/// (`acked-durable`). A refusal of any kind passes, and so does a store
/// that dies on the bytes (nothing is lost silently), or one that serves
/// at least as many events as were acknowledged (some may be changed by
/// the damage: telling that is the unclaimed capability's promise).
/// Serving fewer, without a refusal, is a silent skip.
pub fn judge_owed(
    what: &str,
    unclaimed: Capability,
    reference: &[Record],
    reply: &ProbeReply,
) -> Result<Option<Violation>, ProbeError> {
    let records = match reply {
        ProbeReply::Refused { .. } | ProbeReply::Crashed { .. } => return Ok(None),
        ProbeReply::Served { records, .. } => records,
        ProbeReply::Accepted { .. }
        | ProbeReply::NotReplayed { .. }
        | ProbeReply::SessionLost { .. }
        | ProbeReply::NotMarked { .. }
        | ProbeReply::SecondOpened
        | ProbeReply::Limit { .. } => {
            return Err(ProbeError::Harness(format!(
                "the {unclaimed} probe got another probe's reply"
            )))
        }
    };
    if records.len() >= reference.len() {
        return Ok(None);
    }
    let served: std::collections::BTreeSet<&String> = records.iter().collect();
    let first = reference
        .iter()
        .position(|r| !served.contains(&record_key(r)))
        .unwrap_or(records.len());
    let events = around(reference, first);
    Ok(Some(Violation {
        invariant: Invariant::AckedDurable,
        when: format!("after the crash-free run, on a copy of its store with bytes broken (the store does not claim `{unclaimed}`: judged by what every store owes)"),
        expected: format!(
            "{what}: a refusal of any kind, or the {} acknowledged events served (those the bytes belonged to may differ)",
            reference.len()
        ),
        found: format!(
            "it served {} of {} acknowledged events without refusing: the first not served as written is {} (a silent skip)",
            records.len(),
            reference.len(),
            describe_record(&reference[first])
        ),
        events,
    }))
}

pub(super) fn child_damage(args: &ChildArgs) -> Result<ProbeReply, ProbeError> {
    // Damaged data must be refused, not crash the store: a panic of the
    // in-process store or an adapter that fails the protocol is a finding.
    let died = |at: &str, e: ChildError| match e {
        ChildError::Broken(message) => Ok(ProbeReply::Crashed {
            at: at.to_string(),
            message,
        }),
        e => refused(at, e, None),
    };
    let caught = std::panic::catch_unwind(|| {
        let mut target = match Target::open(args, None) {
            Ok(t) => t,
            Err(e) => return died("open", e),
        };
        let records = match target.events() {
            Ok(records) => records,
            Err(e) => return died("events", e),
        };
        // Every blob a served event references is read back: a damaged
        // blob must be refused as damage too, never served changed.
        let mut wrong_blobs = Vec::new();
        for (seq, reference) in referenced_blobs(&records) {
            match target.get_blob(reference) {
                Ok(bytes) => wrong_blobs.extend(
                    blob_problem(reference, &bytes)
                        .map(|p| format!("the blob of event {seq} ({}): {p}", reference.digest)),
                ),
                Err(e) => return died("get_blob", e),
            }
        }
        Ok(ProbeReply::Served {
            records: records.iter().map(record_key).collect(),
            types: records
                .iter()
                .map(|r| r.body.type_name().to_string())
                .collect(),
            wrong_blobs,
        })
    });
    caught.unwrap_or_else(|p| {
        let message = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".to_string());
        Ok(ProbeReply::Crashed {
            at: "open".to_string(),
            message: format!("panicked: {}", message.replace('\n', " ")),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::probe::fixture::log;

    #[test]
    fn a_store_without_the_claim_owes_only_that_nothing_is_lost_silently() {
        let reference = log();
        let all: Vec<String> = reference.iter().map(record_key).collect();
        let owed = |reply: &ProbeReply| {
            judge_owed(
                "f, byte offset 9",
                Capability::DamageRefusal,
                &reference,
                reply,
            )
            .unwrap()
        };
        for kind in ["damage", "io", "rule"] {
            let refused = ProbeReply::Refused {
                at: "open".into(),
                kind: kind.into(),
                message: "m".into(),
                events_before: None,
                events_after: None,
            };
            assert!(owed(&refused).is_none(), "a `{kind}` refusal loses nothing");
        }
        // Every event served, the damaged one changed: it never said it
        // would tell.
        let mut changed = all.clone();
        changed[1].push('x');
        let served = |records: Vec<String>| ProbeReply::Served {
            records,
            types: vec![],
            wrong_blobs: vec!["the blob of event 2".into()],
        };
        assert!(owed(&served(changed)).is_none());
        // The broken store: it skips the damaged line and serves the rest.
        let skipped = owed(&served(vec![all[0].clone(), all[2].clone()]))
            .expect("a silent skip is caught without the claim");
        assert_eq!(skipped.invariant, Invariant::AckedDurable);
        assert!(
            skipped.found.contains("served 2 of 3")
                && skipped.found.contains(&describe_record(&reference[1])),
            "{}",
            skipped.found
        );
        assert!(skipped.when.contains("does not claim `damage_refusal`"));
        assert!(skipped.expected.contains("byte offset 9"));
    }
}
