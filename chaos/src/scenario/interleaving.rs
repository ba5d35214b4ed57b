//! Interleavings named by the plan: a plan's `,sched:S` chooses, by its
//! seed `S`, the order in which the parallel appenders of every `parallel`
//! step join their groups, sync and hear their answers.
//!
//! This module owns the map from `S` (and a step's own `schedule` seed) to
//! that order: the seeded generator the agent's schedule draws
//! each group's choices from, and the environment variable that carries
//! `S` from the harness to every life of the agent. It must never run a
//! thread or call the store: the agent's schedule does that.

use crate::scenario::rng::Rng;

/// Carries a plan's schedule seed to every life of the agent (absent: 0).
pub const SCHEDULE_ENV: &str = "AGENTCHAOS_SCHEDULE";

/// The agent's environment for schedule `sched` (none for the default).
pub fn env(sched: u64) -> Option<(&'static str, String)> {
    (sched != 0).then(|| (SCHEDULE_ENV, sched.to_string()))
}

/// The schedule seed the harness gave this agent process.
pub fn from_env() -> Result<u64, BadSchedule> {
    match std::env::var(SCHEDULE_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(0),
        Ok(v) => v.parse().map_err(|_| BadSchedule(v)),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(BadSchedule(v.to_string_lossy().into_owned()))
        }
    }
}

/// The harness gave the agent a schedule seed that is not a number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{SCHEDULE_ENV}={0:?} is not a schedule seed (0 to 2^64-1)")]
pub struct BadSchedule(pub String);

/// The generator that schedules group `group` of a parallel step whose
/// scenario names `step` as its own `schedule`, under the plan's schedule
/// `sched`. Schedule 0 uses the step's own seed alone; any other mixes the
/// two, so every step of a scenario gets its own interleaving under `S`.
pub fn group_rng(sched: u64, step: u64, group: u64) -> Rng {
    let seed = match sched {
        0 => step,
        s => Rng::derive(s, "interleaving", step).next_u64(),
    };
    Rng::derive(seed, "parallel group", group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_schedule_is_the_steps_own_and_others_differ() {
        let draws = |sched| {
            let mut r = group_rng(sched, 5, 1);
            (0..4).map(|_| r.next_u64()).collect::<Vec<_>>()
        };
        let mut own = Rng::derive(5, "parallel group", 1);
        assert_eq!(draws(0), (0..4).map(|_| own.next_u64()).collect::<Vec<_>>());
        assert_eq!(draws(3), draws(3));
        assert_ne!(draws(3), draws(0));
        assert_ne!(draws(3), draws(4));
    }
}
