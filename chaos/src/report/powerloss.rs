//! The power-loss nemesis in the report: a failing state in words (its
//! findings, the persistence assumption it relied on, the replay), the
//! states per scenario and model, and the JSON section. It formats; it
//! must never rebuild or judge a state.

use std::fmt::Write;

use serde_json::{json, Value};

use crate::campaign::config::ScenarioSource;
use crate::campaign::powercampaign::{replay_command, CampaignReport, Failure, StateId};
use crate::nemesis::powerloss::Loss;

/// A failure in words: the findings, the assumption, the ops, the replay.
pub fn describe_failure(f: &Failure, source: &ScenarioSource, store_flags: &[String]) -> String {
    let mut s = String::new();
    let id = StateId {
        model: f.model,
        crash_after: f.crash_after,
        choice: f.choice.clone(),
    };
    let at = match &f.after_op {
        Some(op) => format!("after {op}"),
        None => "before the first op".to_string(),
    };
    for x in &f.findings {
        let _ = writeln!(
            s,
            "VIOLATION {} in {} (model {}, power lost {at})",
            x.check, source.scenario.name, f.model
        );
        let _ = writeln!(s, "  when: {}", x.when);
        let _ = writeln!(s, "  expected: {}", x.expected);
        let _ = writeln!(s, "  found: {}", x.found);
        if !x.events.is_empty() {
            let _ = writeln!(s, "  events: {}", x.events.join(", "));
        }
    }
    s.push_str(&assumptions(&f.losses));
    let _ = writeln!(
        s,
        "  replay: {}",
        replay_command(&source.path, store_flags, &id)
    );
    s
}

/// "relies on …" lines, one per loss of the state.
pub fn assumptions(losses: &[Loss]) -> String {
    let mut s = String::new();
    if losses.is_empty() {
        s.push_str("  relies on: nothing lost (the state keeps everything the process wrote)\n");
    }
    for l in losses {
        let ops: Vec<String> = l.ops.iter().map(|o| format!("#{o}")).collect();
        let subject = if l.how.starts_with("are ") {
            "they"
        } else {
            "it"
        };
        let _ = writeln!(
            s,
            "  relies on {} surviving: {} (in this state {subject} {}; ops {})",
            l.what,
            l.why,
            l.how,
            ops.join(", ")
        );
    }
    s
}

/// The states per scenario and model, and their verdicts.
pub fn table(report: &CampaignReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<30} {:<13} {:>6} {:>7} {:>8} {:>7} {:>7} {:>6}",
        "scenario", "model", "ops", "points", "states", "passed", "refused", "failed"
    );
    for sc in &report.scenarios {
        for (m, st) in &sc.models {
            let m = m.name();
            let _ = writeln!(
                s,
                "{:<30} {:<13} {:>6} {:>7} {:>8} {:>7} {:>7} {:>6}",
                sc.source.scenario.name,
                m,
                sc.ops,
                format!(
                    "{}{}",
                    st.points,
                    if st.sampled_points > 0 { "*" } else { "" }
                ),
                st.states,
                st.passed,
                st.refused,
                st.failed
            );
        }
    }
    if report
        .scenarios
        .iter()
        .flat_map(|s| &s.models)
        .any(|(_, m)| m.sampled_points > 0)
    {
        s.push_str("(* some crash points sampled their states)\n");
    }
    s
}

/// The durability-site line: how many sites of the recordings a crash
/// state reached, and which it did not.
pub fn sites_line(report: &CampaignReport) -> String {
    let sites = report.durability_sites();
    let reached = sites.iter().filter(|(_, r)| *r).count();
    let names = |want: bool| {
        sites
            .iter()
            .filter(|(_, r)| *r == want)
            .map(|(s, _)| s.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = format!(
        "power-loss durability sites: {reached} of {} reached by a crash state right after one of their ops ({})",
        sites.len(),
        names(true)
    );
    if reached < sites.len() {
        let _ = write!(
            s,
            "; not reached: {} (raise --powerloss-points)",
            names(false)
        );
    }
    s.push('\n');
    s
}

/// The refusals a campaign found justified (no acknowledged event lost).
pub fn refusals(report: &CampaignReport) -> String {
    let mut s = String::new();
    for sc in &report.scenarios {
        for r in &sc.refusals {
            let _ = writeln!(
                s,
                "refused (justified: no acknowledged event lost) in {}: {r}",
                sc.source.scenario.name
            );
        }
    }
    s
}

/// The power-loss section of the JSON report (key names as in the rest of it).
pub fn json(report: &CampaignReport, store_flags: &[String]) -> Value {
    let secs = report.elapsed.as_secs_f64().max(1e-9);
    json!({
        "recovered_through": report.adapter,
        "elapsed_seconds": secs,
        "states": report.states(),
        "distinct_states": report.judged(),
        "states_per_second": report.states() as f64 / secs,
        "durability_sites": report.durability_sites().len(),
        "durability_sites_reached": report.durability_sites().iter().filter(|(_, r)| *r).count(),
        "scenarios": report.scenarios.iter().map(|sc| json!({
            "name": sc.source.scenario.name,
            "path": sc.source.path,
            "ops": sc.ops,
            "acked": sc.acked,
            "crash_points": sc.crash_points,
            "sites": sc.sites.iter().map(|c| json!({
                "site": c.site.to_string(),
                "ops": c.ops,
                "crash_after": c.crash_after,
            })).collect::<Vec<_>>(),
            "record_seconds": sc.record_time.as_secs_f64(),
            "check_seconds": sc.check_time.as_secs_f64(),
            "error": sc.error.as_ref().map(ToString::to_string),
            "models": sc.models.iter().map(|(m, st)| (m.to_string(), json!({
                "points": st.points,
                "states": st.states,
                "sampled_points": st.sampled_points,
                "passed": st.passed,
                "refused": st.refused,
                "failed": st.failed,
            }))).collect::<serde_json::Map<String, Value>>(),
            "refusals": sc.refusals,
            "violations": sc.failures.iter().map(|f| {
                let id = StateId { model: f.model, crash_after: f.crash_after, choice: f.choice.clone() };
                json!({
                    "model": f.model,
                    "crash_after": f.crash_after,
                    "state": id.to_string(),
                    "findings": f.findings.iter().map(|x| json!({
                        "invariant": x.check,
                        "when": x.when,
                        "expected": x.expected,
                        "found": x.found,
                        "events": x.events,
                    })).collect::<Vec<_>>(),
                    "relies_on": f.losses.iter().map(|l| json!({
                        "what": l.what, "how": l.how, "why": l.why, "ops": l.ops,
                    })).collect::<Vec<_>>(),
                    "replay": replay_command(&sc.source.path, store_flags, &id),
                })
            }).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
