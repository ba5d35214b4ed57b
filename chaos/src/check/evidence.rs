//! Evidence: what one trial exercised, from its history and its plan, so
//! that the scorecard credits a capability only where a trial tested it.
//! Facts only (a torn tail was repaired, a projection was compared, the
//! fault landed inside the store's own I/O); the verdicts are the
//! invariants' ([`crate::check`]), the rows the scorecard's.

use agentchaos_protocol::event::Event;

use crate::history::History;
use crate::model::Model;
use crate::nemesis::{Crash, Plan};
use crate::store::CheckpointView;

/// What one trial exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evidence {
    /// A crash trial whose first fault landed inside one of the store's own writes
    /// or syncs, the window where an acknowledged event can be lost: a
    /// syscall fault (kill, tear, ENOSPC, EIO at a file-mutating syscall of
    /// the store), a torn write or a power cut, or a kill at one of the
    /// store's I/O crash points. A kill between requests or a timer is not.
    pub in_store_io: bool,
    /// The first crash left a torn tail that recovery had to repair.
    pub torn_tail: bool,
    /// The log at the crash had an open run or a call to mark.
    pub recovery_work: bool,
    /// A resumed projection was compared with the fold, or a snapshot checked.
    pub projection: bool,
    /// ... while the log at the crash held a `leaf_moved`.
    pub leaf_moved: bool,
    /// ... while the log at the crash held a `compaction`.
    pub compaction: bool,
    /// The log held a `compaction` at a crash, whether or not a
    /// projection was compared: the context's window is the compaction's.
    pub log_compaction: bool,
    /// The log held a `leaf_moved` at a crash, likewise: the context's
    /// branch is the tree's.
    pub log_leaf_moved: bool,
    /// A resumed projection had another active leaf than the fold.
    pub leaf_differs: bool,
    /// A resumed projection had the fold's leaf but another branch window.
    pub window_differs: bool,
    /// The agent finished: the outcome was compared with the crash-free run's.
    pub finished: bool,
    /// An observation after the crash read a referenced blob back.
    pub blobs_read: bool,
}

/// The last part of a store crash point that is a write, sync, rename,
/// truncate or creation (`log.write`, `snapshot.fsync`, `fsync_dir`, …).
const STORE_IO_POINTS: &[&str] = &[
    "write",
    "fdatasync",
    "fsync",
    "fsync_dir",
    "rename",
    "truncate",
    "mkdir",
    "create_file",
];

/// Did `plan`'s first fault land inside the store's own I/O? `hits` names
/// the crash-point hits of the crash-free trace run.
pub fn lands_in_store_io(plan: &Plan, hits: &[String]) -> bool {
    match plan.crash {
        Some(Crash::Syscall { .. } | Crash::Tear { .. } | Crash::PowerCut { .. }) => true,
        Some(Crash::Kill { at }) => hits.get(at as usize).is_some_and(|name| {
            let last = name.rsplit('.').next().unwrap_or(name);
            STORE_IO_POINTS.contains(&last)
        }),
        Some(Crash::Timer { .. }) | None => false,
    }
}

impl Evidence {
    /// What `h`, a trial of `plan`, exercised; `hits` as in [`lands_in_store_io`].
    pub fn of(h: &History, plan: &Plan, hits: &[String]) -> Evidence {
        let Some(crash) = h.after_kill.first() else {
            return Evidence {
                finished: h.last().done,
                ..Evidence::default()
            };
        };
        let model = Model::fold(&crash.records);
        let recovered = h.lives.iter().skip(1).any(|l| l.recovered.is_some());
        // Every observation of the trial's store after the first crash.
        let observed = || {
            h.lives
                .iter()
                .filter_map(|l| l.after_recovery.as_ref())
                .chain(&h.after_kill)
                .chain([&h.final_obs])
        };
        let projection = h.lives.iter().any(|l| {
            l.recovered.is_some() && l.after_recovery.as_ref().is_some_and(|o| o.fold.is_some())
        }) || observed()
            .any(|o| matches!(o.checkpoint, CheckpointView::Present(_)));
        let holds = |f: fn(&Event) -> bool| crash.records.iter().any(|r| r.event().is_some_and(f));
        let ever = |f: fn(&Event) -> bool| {
            h.after_kill
                .iter()
                .any(|o| o.records.iter().any(|r| r.event().is_some_and(f)))
        };
        let (mut leaf_differs, mut window_differs) = (false, false);
        for l in &h.lives {
            if let (Some(r), Some(Some(fold))) = (
                &l.recovered,
                l.after_recovery.as_ref().map(|o| o.fold.as_ref()),
            ) {
                if r.projection.get("leaf") != fold.get("leaf") {
                    leaf_differs = true;
                } else if r.projection.get("branch") != fold.get("branch") {
                    window_differs = true;
                }
            }
        }
        Evidence {
            in_store_io: lands_in_store_io(plan, hits),
            torn_tail: crash.torn.is_some(),
            recovery_work: recovered
                && (model.open_run.is_some() || model.open_calls().any(|c| c.needs_mark())),
            projection,
            leaf_moved: projection && holds(|e| matches!(e, Event::LeafMoved { .. })),
            compaction: projection && holds(|e| matches!(e, Event::Compaction { .. })),
            log_compaction: ever(|e| matches!(e, Event::Compaction { .. })),
            log_leaf_moved: ever(|e| matches!(e, Event::LeafMoved { .. })),
            leaf_differs,
            window_differs,
            finished: h.last().done,
            blobs_read: observed().any(|o| !o.blobs.is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_faults_inside_the_store_s_own_io_earn_durable_append() {
        let hits: Vec<String> = [
            "adapter.append",
            "log.write",
            "log.fdatasync",
            "agent.before_effect",
        ]
        .map(String::from)
        .to_vec();
        let kill = |at| Plan::kill(at);
        assert!(!lands_in_store_io(&kill(0), &hits), "between requests");
        assert!(lands_in_store_io(&kill(1), &hits));
        assert!(lands_in_store_io(&kill(2), &hits));
        assert!(!lands_in_store_io(&kill(3), &hits), "in the agent");
        let timer = Plan::first(Crash::Timer { micros: 10 });
        assert!(!lands_in_store_io(&timer, &hits));
        let sys = Plan::first(Crash::Syscall {
            at: 4,
            fault: crate::nemesis::SysFault::KillBefore,
        });
        assert!(lands_in_store_io(&sys, &hits));
        assert!(!lands_in_store_io(&Plan::NONE, &hits));
    }
}
