//! The many-workers nemeses (`agentchaos workers`): what happens to the
//! owner of the first session, and when. This module names and parses
//! plans; the campaign (`crate::campaign::workers`) carries them out with
//! real signals, and it must never judge what they did.
//!
//! - `pause@K`: after the owner's K-th step on the session, the harness has
//!   it renew its lease, SIGSTOPs it, lets another worker take the session
//!   over once the lease has expired by the store's clock (the other
//!   worker's `open` is refused with `lease_held` until then) and finish
//!   the session, then SIGCONTs it: the zombie writer's next write must be
//!   fenced.
//! - `kill@K`: after the owner's K-th step, SIGKILL (between two of its
//!   requests, so in the middle of a tool call when K lands inside one);
//!   another worker takes over every session it owned after expiry.
//!
//! Both are ordered by observed states (replies, grants), never by sleeps:
//! a plan replays the same.

use std::fmt;
use std::str::FromStr;

/// What the nemesis does to the first session's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerPlan {
    /// Nothing: every worker serves its sessions to the end.
    None,
    Pause {
        after_step: usize,
    },
    Kill {
        after_step: usize,
    },
}

impl WorkerPlan {
    /// The step after which the nemesis acts, if it does.
    pub fn after_step(self) -> Option<usize> {
        match self {
            WorkerPlan::None => None,
            WorkerPlan::Pause { after_step } | WorkerPlan::Kill { after_step } => Some(after_step),
        }
    }
}

impl fmt::Display for WorkerPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerPlan::None => f.write_str("none"),
            WorkerPlan::Pause { after_step } => write!(f, "pause@{after_step}"),
            WorkerPlan::Kill { after_step } => write!(f, "kill@{after_step}"),
        }
    }
}

/// A plan that does not parse, said in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("worker plan {0:?} is not none, pause@K or kill@K (K: a step of the first session's owner, 0 = right after its grant)")]
pub struct BadWorkerPlan(String);

impl FromStr for WorkerPlan {
    type Err = BadWorkerPlan;

    fn from_str(s: &str) -> Result<WorkerPlan, BadWorkerPlan> {
        let bad = || BadWorkerPlan(s.to_string());
        if s == "none" {
            return Ok(WorkerPlan::None);
        }
        let (kind, step) = s.split_once('@').ok_or_else(bad)?;
        let after_step = step.parse().map_err(|_| bad())?;
        match kind {
            "pause" => Ok(WorkerPlan::Pause { after_step }),
            "kill" => Ok(WorkerPlan::Kill { after_step }),
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_round_trip_and_bad_ones_are_named() {
        for p in ["none", "pause@0", "pause@7", "kill@12"] {
            assert_eq!(p.parse::<WorkerPlan>().unwrap().to_string(), p);
        }
        for bad in ["", "pause", "pause@", "kill@x", "stop@1", "pause@-1"] {
            let e = bad.parse::<WorkerPlan>().unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }
}
