//! The one-live-owner rules of the lease transitions that grant intervals
//! alone do not show: one process per epoch (a second process under the
//! same worker id is another holder, whatever the clock says), and an
//! acknowledged close ends the lease. Each judges the history only; none
//! runs anything.

use std::collections::BTreeMap;

use super::{WorkerInvariant, WorkerViolation};
use crate::agent::worker::WorkerReply;
use crate::history::WorkerEvent;

/// A write accepted at an epoch the store granted to another holder: two
/// processes held one epoch at once (`reclaim-same-epoch`, a renewal that
/// adopts the session's current epoch).
pub(super) fn one_holder_per_epoch(history: &[WorkerEvent]) -> Vec<WorkerViolation> {
    // Per session, each epoch's holder as the store granted it: (worker, line).
    let mut holders: BTreeMap<&str, BTreeMap<u64, (&str, String)>> = BTreeMap::new();
    let mut out = Vec::new();
    let mut reported = std::collections::BTreeSet::new();
    for event in history {
        match event {
            WorkerEvent::Granted {
                worker,
                session,
                grant,
                ..
            } => {
                let line = format!(
                    "{worker} was granted epoch {} of {session} from {} to {} ms (store clock)",
                    grant.epoch, grant.granted_at_ms, grant.expires_at_ms
                );
                holders
                    .entry(session)
                    .or_default()
                    .insert(grant.epoch, (worker, line));
            }
            WorkerEvent::Replied {
                worker,
                session,
                reply,
            } => {
                let (epoch, what) = match reply {
                    WorkerReply::Acked { epoch, seq, what } => {
                        (*epoch, format!("{what} at seq {seq}"))
                    }
                    WorkerReply::Applied {
                        operation_id,
                        renewed,
                        ..
                    } => (
                        renewed.epoch,
                        format!("its renewal before the effect of {operation_id}"),
                    ),
                    WorkerReply::Renewed { grant } => (grant.epoch, "a renewal".to_string()),
                    _ => continue,
                };
                let Some((holder, granted)) =
                    holders.get(session.as_str()).and_then(|h| h.get(&epoch))
                else {
                    continue;
                };
                if holder == worker || !reported.insert(session.as_str()) {
                    continue;
                }
                out.push(WorkerViolation {
                    invariant: WorkerInvariant::OneLiveOwner,
                    session: session.clone(),
                    expected: format!(
                        "epoch {epoch} of session {session} held by one process: {holder}, the last the store granted it to; every other process's write refused (fenced)"
                    ),
                    found: format!(
                        "the store accepted {what} from {worker} at epoch {epoch} while {holder} held it: two processes held one epoch at once"
                    ),
                    events: vec![granted.clone(), format!("then {worker}: {reply:?}")],
                });
            }
            _ => {}
        }
    }
    out
}

/// An acknowledged close by the session's current holder, then another
/// worker's open refused with `lease_held` before any new grant: the close
/// did not end the lease (`release-keeps-lease`).
pub(super) fn acked_close_ends_lease(history: &[WorkerEvent]) -> Vec<WorkerViolation> {
    // Per session: the last grant (worker, epoch), and the holder that closed it.
    let mut current: BTreeMap<&str, (&str, u64)> = BTreeMap::new();
    let mut released: BTreeMap<&str, (&str, u64)> = BTreeMap::new();
    let mut out = Vec::new();
    for event in history {
        match event {
            WorkerEvent::Granted {
                worker,
                session,
                grant,
                ..
            } => {
                current.insert(session, (worker, grant.epoch));
                released.remove(session.as_str());
            }
            WorkerEvent::Replied {
                worker,
                session,
                reply: WorkerReply::Closed,
            } => {
                if let Some(&(holder, epoch)) = current.get(session.as_str()) {
                    if holder == worker {
                        released.insert(session, (holder, epoch));
                    }
                }
            }
            WorkerEvent::Replied {
                worker,
                session,
                reply: WorkerReply::Held { message },
            } => {
                if let Some((holder, epoch)) = released.remove(session.as_str()) {
                    out.push(WorkerViolation {
                        invariant: WorkerInvariant::OneLiveOwner,
                        session: session.clone(),
                        expected: format!(
                            "{holder}'s acknowledged close of session {session} ends its lease (epoch {epoch}): the next worker's open is granted at once"
                        ),
                        found: format!(
                            "{worker}'s open was refused lease_held after the close: {message}"
                        ),
                        events: vec![
                            format!("{holder} closed {session} at epoch {epoch}: Closed"),
                            format!("then {worker} asked for it: lease_held"),
                        ],
                    });
                }
            }
            _ => {}
        }
    }
    out
}
