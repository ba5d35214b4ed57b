//! `--timings`: where the trials' time went, summed over the campaign's
//! trials (text, with the top three costs) and trial by trial (JSON).

use std::fmt::Write;

use serde_json::{json, Map, Value};

use crate::campaign::runner::CampaignResult;
use crate::timing::{Counts, Part, TrialTimings};

/// The trials' figures added up: their wall times and their parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub trials: usize,
    pub wall_micros: u64,
    pub counts: Counts,
    /// Trials whose parts did not add up to their wall time within 10 % (or 5 ms for a trial under 50 ms).
    pub mismatched: usize,
}

impl Summary {
    pub fn of(result: &CampaignResult) -> Option<Summary> {
        let mut sum = Summary::default();
        let trials = result
            .scenarios
            .iter()
            .flat_map(|s| &s.outcomes)
            .filter_map(|o| o.timings.as_ref());
        for t in trials {
            sum.trials += 1;
            sum.wall_micros += t.wall_micros;
            sum.counts.merge(&t.counts);
            sum.mismatched += usize::from(t.check().is_err());
        }
        (sum.trials > 0 || result.outside_trials.is_some()).then_some(sum)
    }

    fn other_micros(&self) -> i64 {
        self.wall_micros as i64 - self.counts.total() as i64
    }

    /// The three largest costs: the parts that add up, and the rest (`other`).
    pub fn top(&self) -> Vec<(&'static str, u64)> {
        let mut costs: Vec<(&'static str, u64)> = Part::ALL
            .iter()
            .filter(|p| p.adds_up())
            .map(|p| (p.name(), self.counts.get(*p).1))
            .chain(std::iter::once((
                "other",
                self.other_micros().max(0) as u64,
            )))
            .filter(|(_, us)| *us > 0)
            .collect();
        costs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        costs.truncate(3);
        costs
    }
}

fn secs(micros: u64) -> f64 {
    micros as f64 / 1e6
}

fn share(micros: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        100.0 * micros as f64 / of as f64
    }
}

/// What a part is, for people.
fn meaning(part: Part) -> &'static str {
    match part {
        Part::Start(_) => "store processes started or forked",
        Part::Hello(_) => "their hello answered (start-up, imports)",
        Part::RoundTrip => "requests to store processes",
        Part::Store => "the in-process store's own work",
        Part::Checker => "judging the trials",
        Part::AgentStart => "agent processes started",
        Part::Agent => "the agents' own work, reaping their store processes",
        Part::Ptrace => "tracer CPU; ptrace stops",
        Part::Excess => "reported beyond a life's wall time",
        Part::Beside => "the agents' closes while the harness observed",
    }
}

/// The text `--timings` prints after the table.
pub fn text(result: &CampaignResult) -> String {
    let mut out = String::new();
    let Some(sum) = Summary::of(result) else {
        return out;
    };
    let n = sum.trials.max(1) as f64;
    let _ = writeln!(
        out,
        "\nwhere the trials' time went (--timings): {} trials, {:.2} s of trial wall time summed over them",
        sum.trials,
        secs(sum.wall_micros)
    );
    let _ = writeln!(
        out,
        "  {:<16} {:>8} {:>10} {:>12} {:>6}  what",
        "part", "count", "seconds", "ms/trial", "share"
    );
    let row = |out: &mut String, name: &str, count: String, micros: u64, what: &str| {
        let _ = writeln!(
            out,
            "  {name:<16} {count:>8} {:>10.3} {:>12.2} {:>5.1}%  {what}",
            secs(micros),
            micros as f64 / 1e3 / n,
            share(micros, sum.wall_micros),
        );
    };
    for part in Part::ALL.iter().filter(|p| p.adds_up()) {
        let (count, micros) = sum.counts.get(*part);
        if count > 0 || micros > 0 {
            row(
                &mut out,
                part.name(),
                count.to_string(),
                micros,
                meaning(*part),
            );
        }
    }
    let other = sum.other_micros();
    row(
        &mut out,
        "other",
        String::new(),
        other.max(0) as u64,
        "the harness's own work (directories, the world, the workspace)",
    );
    for part in [Part::Ptrace, Part::Beside, Part::Excess] {
        let (count, micros) = sum.counts.get(part);
        if count > 0 || micros > 0 {
            row(
                &mut out,
                part.name(),
                count.to_string(),
                micros,
                meaning(part),
            );
        }
    }
    if sum.counts.get(Part::Ptrace).1 > 0 {
        let _ = writeln!(
            out,
            "  (ptrace overlaps the lives' parts: a stopped store waits inside them; not added up)"
        );
    }
    let top: Vec<String> = sum
        .top()
        .iter()
        .map(|(name, us)| format!("{name} {:.1}%", share(*us, sum.wall_micros)))
        .collect();
    let _ = writeln!(out, "top costs: {}", top.join(", "));
    if sum.mismatched > 0 {
        let _ = writeln!(
            out,
            "{} trial(s) whose parts do not add up to their wall time within 10 % (or 5 ms): a harness bug",
            sum.mismatched
        );
    }
    if let Some(c) = &result.outside_trials {
        let outside: Vec<String> = Part::ALL
            .iter()
            .filter(|p| c.get(**p).0 > 0)
            .map(|p| {
                let (count, micros) = c.get(*p);
                format!("{} {count} in {:.2} s", p.name(), secs(micros))
            })
            .collect();
        if !outside.is_empty() {
            let _ = writeln!(
                out,
                "outside the trials (probes, power-loss recoveries): {}",
                outside.join(", ")
            );
        }
    }
    out
}

fn parts_json(counts: &Counts, other_micros: i64) -> Value {
    let mut m = Map::new();
    for part in Part::ALL {
        let (count, micros) = counts.get(part);
        m.insert(
            part.name().to_string(),
            json!({"count": count, "seconds": secs(micros)}),
        );
    }
    m.insert(
        "other".to_string(),
        json!({"count": 0, "seconds": other_micros as f64 / 1e6}),
    );
    Value::Object(m)
}

fn trial_json(scenario: &str, plan: String, t: &TrialTimings) -> Value {
    json!({
        "scenario": scenario,
        "plan": plan,
        "wall_seconds": secs(t.wall_micros),
        "parts": parts_json(&t.counts, t.other_micros()),
        "adds_up": t.check().is_ok(),
    })
}

/// The JSON report's `timings` (null without `--timings`).
pub fn json(result: &CampaignResult) -> Value {
    let Some(sum) = Summary::of(result) else {
        return Value::Null;
    };
    let trials: Vec<Value> = result
        .scenarios
        .iter()
        .flat_map(|s| {
            s.outcomes.iter().filter_map(move |o| {
                o.timings
                    .as_ref()
                    .map(|t| trial_json(s.name(), o.plan.to_string(), t))
            })
        })
        .collect();
    json!({
        "trials": trials,
        "total": {
            "trials": sum.trials,
            "wall_seconds": secs(sum.wall_micros),
            "parts": parts_json(&sum.counts, sum.other_micros()),
        },
        "top": sum.top().iter().map(|(name, us)| json!({"part": name, "seconds": secs(*us), "share": share(*us, sum.wall_micros) / 100.0})).collect::<Vec<_>>(),
        "outside_trials": result.outside_trials.as_ref().map(|c| parts_json(c, 0)),
    })
}
