//! The interleavings a campaign explores: which schedule seeds
//! (`--schedules N`), the scenario rows they run as (`NAME.sched-S`), and
//! the order shrinking tries schedules in. What a seed means is
//! [`crate::scenario::interleaving`]'s. Schedule 0 is the fixed default
//! schedule: a plan without `,sched:` runs it, and scenarios without
//! parallel steps run only it. This module must never run a trial.

use crate::campaign::config::ScenarioSource;
use crate::scenario::name::{SafeName, MAX_NAME_LEN};
use crate::scenario::rng::Rng;
use crate::scenario::{Scenario, Step};

/// Does `scenario` have a parallel step (so that its schedule matters)?
pub fn has_parallel(scenario: &Scenario) -> bool {
    scenario
        .runs
        .iter()
        .flat_map(|r| &r.steps)
        .any(|s| matches!(s, Step::Parallel { .. }))
}

/// The `n` schedules a campaign seeded `campaign_seed` explores: the
/// default schedule 0, then `n - 1` distinct seeds below 1000 drawn from
/// the campaign seed (small seeds: short replay commands).
pub fn seeds(campaign_seed: u64, n: usize) -> Vec<u64> {
    let mut rng = Rng::derive(campaign_seed, "schedules", 0);
    let mut out = vec![0];
    while out.len() < n.min(1000) {
        let s = rng.range(1, 999);
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The scenario row of `name` under schedule `sched`: `NAME.sched-S`
/// (the name cut short if it would be too long to name a directory).
fn row_name(name: &str, sched: u64) -> SafeName {
    let suffix = format!(".sched-{sched}");
    let keep = name.len().min(MAX_NAME_LEN - suffix.len());
    SafeName::new(format!("{}{suffix}", &name[..keep]))
        .expect("a safe name's prefix and a suffix of digits are a safe name")
}

/// Every source, each with a parallel step followed by its copies under
/// the other `schedules` (each its own row `NAME.sched-S`).
pub fn expand(sources: Vec<ScenarioSource>, schedules: &[u64]) -> Vec<ScenarioSource> {
    let mut out = Vec::with_capacity(sources.len());
    for source in sources {
        let copies: Vec<ScenarioSource> = if has_parallel(&source.scenario) {
            schedules
                .iter()
                .filter(|&&s| s != 0)
                .map(|&s| {
                    let mut copy = source.clone();
                    copy.scenario.name = row_name(source.scenario.name.as_str(), s);
                    copy.schedule = s;
                    copy
                })
                .collect()
        } else {
            Vec::new()
        };
        out.push(source);
        out.extend(copies);
    }
    out
}

/// The schedules shrinking tries a failure found under `failing` in: the
/// simplest replays 0, 1 and 2 first, then the failing one.
pub fn shrink_order(failing: u64) -> Vec<u64> {
    let mut order = vec![0, 1, 2];
    if !order.contains(&failing) {
        order.push(failing);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_campaign_explores_the_default_then_distinct_small_seeds() {
        assert_eq!(seeds(1, 1), [0]);
        let four = seeds(1, 4);
        assert_eq!(four.len(), 4);
        assert_eq!(four[0], 0);
        assert!(four[1..].iter().all(|&s| (1..1000).contains(&s)));
        assert_eq!(
            seeds(1, 4),
            four,
            "the same campaign seed, the same schedules"
        );
        assert_eq!(shrink_order(1), [0, 1, 2]);
        assert_eq!(shrink_order(77), [0, 1, 2, 77]);
        let long = "a".repeat(MAX_NAME_LEN);
        assert!(row_name(&long, 999).as_str().ends_with(".sched-999"));
    }
}
