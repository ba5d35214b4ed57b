//! acked-after-sync: in a life where the in-process store reported its
//! syncs (a `Batch` store, whose parallel appenders the harness schedules:
//! [`crate::agent::schedule`]), every ack on the pipe comes after a
//! successful sync that covers its seq. A follower acknowledged while its
//! group's sync is still in flight, or a waiter woken as acknowledged by a
//! sync that failed, breaks it: its event was never durable by the store's
//! own account, and a power cut would take it. The syncs are the store's
//! account (as the power-loss nemesis's sync log is); the acks are the
//! agent's pipe, in the order the schedule let them out.

use crate::check::{v, Invariant, Violation};
use crate::history::{History, Life, SyncLine};

/// acked-after-sync, each life on its own (a sync of an earlier life
/// covers nothing this life acknowledges: each of its appends waits for a
/// sync of its own).
pub(super) fn acked_after_sync(h: &History, out: &mut Vec<Violation>) {
    for (i, life) in h.lives.iter().enumerate() {
        acked_after_sync_in(i, life, out);
    }
}

fn acked_after_sync_in(i: usize, life: &Life, out: &mut Vec<Violation>) {
    let reported = life
        .syncs
        .iter()
        .any(|s| matches!(s, SyncLine::Synced(_) | SyncLine::SyncFailed));
    if !reported {
        return; // A store that reports no sync (an adapter, or Sync mode).
    }
    // Every event below `durable` is covered by a successful sync so far.
    let mut durable = 0;
    let mut failed = false;
    for line in &life.syncs {
        match *line {
            SyncLine::Synced(next_seq) => durable = durable.max(next_seq),
            SyncLine::SyncFailed => failed = true,
            SyncLine::Acked { write, seq } if seq >= durable => {
                let event = life
                    .writes
                    .get(write)
                    .map_or_else(String::new, |w| w.type_name.clone());
                let after = if failed {
                    "; a sync of the log failed before it, and no later sync covers it"
                } else {
                    ""
                };
                out.push(v(
                    Invariant::AckedAfterSync,
                    &format!("in life {i}"),
                    format!("the ack of seq {seq} after a successful sync covering it"),
                    format!(
                        "it came when the store's successful syncs covered seqs below {durable} only{after}"
                    ),
                    vec![format!("seq {seq} {event}")],
                ));
                return; // The first one says it; the rest follow from it.
            }
            SyncLine::Acked { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Append;

    fn life(syncs: Vec<SyncLine>) -> Life {
        let mut life = Life::started(0, None);
        life.writes = (0..3)
            .map(|k| Append {
                type_name: "tool_call".into(),
                fingerprint: format!("{k}"),
                line: k,
                acked: None,
                refused: false,
            })
            .collect();
        life.syncs = syncs;
        life
    }

    fn found(syncs: Vec<SyncLine>) -> Vec<Violation> {
        let mut out = Vec::new();
        acked_after_sync_in(0, &life(syncs), &mut out);
        out
    }

    #[test]
    fn an_ack_needs_a_successful_sync_before_it_that_covers_it() {
        use SyncLine::*;
        let ok = found(vec![
            Synced(3),
            Acked { write: 0, seq: 1 },
            Acked { write: 1, seq: 2 },
        ]);
        assert!(ok.is_empty(), "{ok:?}");
        let early = found(vec![
            Synced(2),
            Acked { write: 0, seq: 1 },
            Acked { write: 1, seq: 2 },
            Synced(3),
        ]);
        assert_eq!(early.len(), 1);
        assert_eq!(early[0].invariant, Invariant::AckedAfterSync);
        assert_eq!(early[0].events, ["seq 2 tool_call"]);
        let woken = found(vec![Synced(2), SyncFailed, Acked { write: 2, seq: 2 }]);
        assert!(woken[0].found.contains("failed"), "{:?}", woken[0]);
        // A store that reports no sync is not judged here.
        assert!(found(vec![Acked { write: 0, seq: 1 }]).is_empty());
    }
}
