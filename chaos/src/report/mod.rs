//! Reports: the summary table and the violations for people, JSON for
//! machines, JUnit XML for CI dashboards, and an HTML page with a timeline
//! of each violation ([`html`]).
//!
//! Every violation carries its one-line replay command (all of them in the
//! JSON; on the terminal the first few causes per scenario and invariant,
//! those most trials reached first, each once with the simplest replay of
//! the trials that reached it ([`causes`]), then a count). This module formats; it must never run or
//! judge anything.

pub mod causes;
pub mod html;
pub mod powerloss;
pub mod scorecard;
pub mod timings;

use std::fmt::Write;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde_json::{json, Value};

use crate::campaign::config::replay_command;
use crate::campaign::probe::{Probe, ProbeOutcome};
use crate::campaign::runner::{CampaignResult, ScenarioResult};
use crate::check::{explain, Invariant, Violation};
use crate::store::NotApplicable;

/// How many causes per (scenario, invariant) the terminal shows in full.
pub const SHOWN_PER_GROUP: usize = 2;

/// What the report needs besides the results.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub store: String,
    /// The flags that choose the store (`--adapter 'CMD'`), for replay commands.
    pub store_args: Vec<String>,
    /// The checks the store cannot be judged on (reported, never passed).
    pub not_applicable: &'static [NotApplicable],
    pub store_fault: Option<&'a str>,
    pub seed: u64,
    pub mode: String,
    pub jobs: usize,
    pub shard: Option<(usize, usize)>,
}

impl Context<'_> {
    /// The flags a replay command needs to choose the same store.
    pub fn store_flags(&self) -> Vec<String> {
        crate::campaign::config::store_flags(self.store_fault, &self.store_args)
    }
}

pub(crate) fn probe_replay(s: &ScenarioResult, probe: &Probe, ctx: &Context<'_>) -> String {
    replay_of(s, &probe.plan(), ctx)
}

pub(crate) fn replay_of(
    s: &ScenarioResult,
    plan: &dyn std::fmt::Display,
    ctx: &Context<'_>,
) -> String {
    replay_command(
        &s.prepared.source.path,
        plan,
        ctx.store_fault,
        &ctx.store_args,
    )
}

/// The violations and errors, for the terminal.
pub fn violations_text(result: &CampaignResult, ctx: &Context<'_>) -> String {
    let mut out = String::new();
    for (s, why) in &result.skipped {
        let _ = writeln!(
            out,
            "SKIPPED scenario {} ({}): {why}\n",
            s.scenario.name,
            s.path.display()
        );
    }
    for s in &result.scenarios {
        let causes = causes::of_scenario(s);
        for inv in Invariant::ALL {
            let (mut mine, violations) = causes.of_invariant(inv);
            // The causes most trials reached first.
            mine.sort_by_key(|c| std::cmp::Reverse(c.trials));
            for c in mine.iter().take(SHOWN_PER_GROUP) {
                out.push_str(&explain(
                    c.violation,
                    s.name(),
                    &c.crash_point,
                    &replay_of(s, &c.plan, ctx),
                ));
                if c.trials > 1 {
                    let _ = writeln!(
                        out,
                        "  reached:  by {} trials, the same crashes ({}) before the same observation; the replay is the simplest",
                        c.trials, c.key.origin
                    );
                }
                out.push('\n');
            }
            if mine.len() > SHOWN_PER_GROUP {
                let _ = writeln!(
                    out,
                    "… and {} more distinct cause(s) of {inv} in {} ({violations} violation(s) in all, every one with --json)\n",
                    mine.len() - SHOWN_PER_GROUP,
                    s.name()
                );
            }
        }
        for p in s.probes.iter().filter(|p| p.skipped) {
            let charged = charged_to(p, &result.capabilities);
            let _ = writeln!(
                out,
                "NOT REACHED in {} (probe {}): {}{}\n",
                s.name(),
                p.probe,
                p.told,
                if charged.is_empty() {
                    String::new()
                } else {
                    format!(
                        "\n  charged to {} (its violation above), not to {}",
                        charged.join(", "),
                        p.probe.capability()
                    )
                }
            );
        }
        for (p, e) in s.probe_errors() {
            let _ = writeln!(
                out,
                "ERROR in {} (probe {p}): {e}\n  replay: {}\n",
                s.name(),
                probe_replay(s, p, ctx)
            );
        }
        for (plan, e) in s.errors() {
            let _ = writeln!(
                out,
                "ERROR in {} ({plan}): {e}\n  replay: {}\n",
                s.name(),
                replay_of(s, &plan, ctx)
            );
        }
    }
    for sc in result.power_loss.iter().flat_map(|p| &p.scenarios) {
        for f in &sc.failures {
            out.push_str(&powerloss::describe_failure(
                f,
                &sc.source,
                &ctx.store_flags(),
            ));
            out.push('\n');
        }
        if let Some(e) = &sc.error {
            let _ = writeln!(
                out,
                "ERROR in {} (power loss): {e}\n",
                sc.source.scenario.name
            );
        }
    }
    if let Some(p) = &result.power_loss {
        out.push_str(&powerloss::refusals(p));
    }
    out.push_str(&leaks_text(&result.leaked));
    out
}

/// The capabilities a probe's violations are charged to, in order, each once.
fn charged_to(
    p: &ProbeOutcome,
    claimed: &[crate::store::adapter::Capability],
) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for v in &p.violations {
        let c = p.probe.charged(v, claimed).name();
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// The processes the store's adapters left running, for the terminal: how
/// many, and the first few (all of them with --json).
pub fn leaks_text(leaked: &[crate::child::Leak]) -> String {
    let mut out = String::new();
    if leaked.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "LEAKED PROCESSES: the store's adapter left {} process(es) running out of its process group (setsid); the harness killed them:",
        leaked.len()
    );
    for leak in leaked.iter().take(SHOWN_PER_GROUP) {
        let _ = writeln!(
            out,
            "  pid {} after {}: {}",
            leak.pid, leak.during, leak.command
        );
    }
    if leaked.len() > SHOWN_PER_GROUP {
        let _ = writeln!(
            out,
            "  … and {} more (all of them with --json)",
            leaked.len() - SHOWN_PER_GROUP
        );
    }
    out.push('\n');
    out
}

/// The summary table.
pub fn table(result: &CampaignResult, ctx: &Context<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "store: {}{} · mode: {} · seed: {} · jobs: {}{}",
        ctx.store,
        ctx.store_fault
            .map(|f| format!(" with fault {f}"))
            .unwrap_or_default(),
        ctx.mode,
        ctx.seed,
        ctx.jobs,
        ctx.shard
            .map(|(k, n)| format!(" · shard {k}/{n}"))
            .unwrap_or_default()
    );
    let width = result
        .scenarios
        .iter()
        .map(|s| s.name().len())
        .max()
        .unwrap_or(8)
        .max(8);
    let _ = writeln!(
        out,
        "{:<width$}  {:>13}  {:>7}  {:>9}  violations",
        "scenario", "crash points", "trials", "trials/s"
    );
    let mut distinct = 0;
    for s in &result.scenarios {
        let causes = causes::of_scenario(s);
        distinct += causes.causes.len();
        let by = s.by_invariant();
        let viol = if by.is_empty() {
            "none".to_string()
        } else {
            by.iter()
                .map(|(i, n)| {
                    format!(
                        "{i} {} ({n} violation(s))",
                        plural(causes.of_invariant(*i).0.len(), "cause")
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let rate = if s.wall.is_zero() {
            "-".to_string()
        } else {
            format!("{:.1}", s.outcomes.len() as f64 / s.wall.as_secs_f64())
        };
        let _ = writeln!(
            out,
            "{:<width$}  {:>13}  {:>7}  {:>9}  {viol}",
            s.name(),
            format!("{}/{}", s.covered_hits(), s.prepared.trace.len()),
            s.outcomes.len(),
            rate
        );
    }
    let _ = writeln!(
        out,
        "{:<width$}  {:>13}  {:>7}  {:>9}  {} of {} violation(s), {} error(s), {:.1}s in all",
        "total",
        "",
        result.trials,
        result
            .trials_per_second()
            .map_or_else(|| "-".to_string(), |r| format!("{r:.1}")),
        plural(
            distinct + result.power_loss_findings().count(),
            "distinct cause"
        ),
        result.violation_count(),
        result.error_count(),
        result.elapsed.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "trials/s: trials per second from the first trial's start to the last one's end ({:.1}s for the total; the crash-free runs and probes before them are in the {:.1}s in all)",
        result.trial_wall().as_secs_f64(),
        result.elapsed.as_secs_f64()
    );
    for s in &result.scenarios {
        if !s.prepared.later.is_empty() {
            let (trials, distinct) = s.covered_later();
            let _ = writeln!(
                out,
                "restarted lives: {}: {} traced (lives 1 and 2, after a kill), {trials} trials crashed them at {distinct} distinct points or syscalls",
                s.name(),
                s.prepared.later.len()
            );
        }
    }
    for s in &result.scenarios {
        if let Some(sys) = &s.prepared.syscalls {
            let _ = writeln!(
                out,
                "syscall nemesis: {}: {}/{} store syscalls of the first process faulted",
                s.name(),
                s.covered_syscalls(),
                sys.len()
            );
        }
    }
    if let Some(p) = &result.power_loss {
        let models = || p.scenarios.iter().flat_map(|s| &s.models).map(|(_, m)| m);
        let failing: usize = models().map(|m| m.failed).sum();
        let refused: usize = models().map(|m| m.refused).sum();
        // One finding per broken invariant and scenario (its first crash
        // point) is printed; the count says how many states failed.
        let reported: usize = p.scenarios.iter().map(|s| s.failures.len()).sum();
        let failing = match failing {
            0 => "0 failing states".to_string(),
            n => format!(
                "{n} failing state(s) ({reported} reported: the first per broken invariant)"
            ),
        };
        let _ = writeln!(
            out,
            "power-loss nemesis: {} states ({} distinct) at {} crash points under {}, at most {} per crash point and model: {failing}, {refused} refused with damage (no acknowledged event lost), {:.1}s",
            p.states(),
            p.judged(),
            p.scenarios.iter().map(|s| s.crash_points).sum::<usize>(),
            p.models.iter().map(|m| m.name()).collect::<Vec<_>>().join(", "),
            p.max_states,
            p.elapsed.as_secs_f64()
        );
        out.push_str(&powerloss::sites_line(p));
        out.push_str(&powerloss::table(p));
    }
    let mut by: std::collections::BTreeMap<Invariant, usize> = Default::default();
    for s in &result.scenarios {
        for (i, n) in s.by_invariant() {
            *by.entry(i).or_default() += n;
        }
    }
    for (_, _, x) in result.power_loss_findings() {
        if let Some(i) = Invariant::ALL.iter().find(|i| i.name() == x.check) {
            *by.entry(*i).or_default() += 1;
        }
    }
    let _ = writeln!(
        out,
        "by invariant: {}",
        Invariant::ALL
            .iter()
            .map(|i| format!("{i} {}", by.get(i).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join(" · ")
    );
    for na in ctx.not_applicable {
        let _ = writeln!(
            out,
            "not applicable to this store (not checked, not passed): {}: {}",
            na.invariant, na.check
        );
    }
    out.push_str(&scorecard::text(&score(result, ctx)));
    out.push_str(&verdict_line(result));
    out.push('\n');
    out
}

/// `n thing` or `n things`.
fn plural(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// The campaign's verdict in one line, `PASS` or `FAIL`, with the exit
/// code `agentchaos run` gives it (0, 1 the store's failure, 3 the harness's).
pub fn verdict_line(result: &CampaignResult) -> String {
    let violations = result.violation_count();
    let store_errors = result.store_error_count();
    let errors = result.error_count();
    if violations + store_errors > 0 {
        format!("FAIL: {violations} violation(s), {store_errors} error(s) of the store (exit 1)")
    } else if errors > 0 {
        format!("FAIL: {errors} trial(s) or probe(s) could not be carried out, the harness's errors (exit 3)")
    } else {
        "PASS: no violations, every trial carried out (exit 0)".to_string()
    }
}

pub(crate) fn score(result: &CampaignResult, ctx: &Context<'_>) -> scorecard::Scorecard {
    scorecard::score(result, ctx.store_fault, &ctx.store_args)
}

fn violation_json(
    s: &ScenarioResult,
    plan: &str,
    crash: &str,
    v: &Violation,
    cause: usize,
    ctx: &Context<'_>,
) -> Value {
    json!({
        "cause": cause,
        "invariant": v.invariant.name(),
        "scenario": s.name(),
        "scenario_file": s.prepared.source.path.display().to_string(),
        "plan": plan.to_string(),
        "crash_point": crash,
        "when": v.when,
        "expected": v.expected,
        "found": v.found,
        "events": v.events,
        "replay": replay_of(s, &plan, ctx),
    })
}

/// The JSON report's format (`format`), described by
/// `chaos/schema/report.schema.json`: it changes only when a key is removed
/// or changes meaning; new keys may appear within a format.
pub const REPORT_FORMAT: u32 = 1;

/// The whole campaign as JSON.
pub fn json(result: &CampaignResult, ctx: &Context<'_>) -> Value {
    let grouped: Vec<causes::Causes<'_>> =
        result.scenarios.iter().map(causes::of_scenario).collect();
    // Each scenario's causes are numbered after the previous scenarios'.
    let first_cause: Vec<usize> = grouped
        .iter()
        .scan(0, |next, g| {
            let first = *next;
            *next += g.causes.len();
            Some(first)
        })
        .collect();
    let scenarios: Vec<Value> = result
        .scenarios
        .iter()
        .zip(&grouped)
        .map(|(s, g)| {
            let by: serde_json::Map<String, Value> = Invariant::ALL
                .iter()
                .map(|i| (i.name().to_string(), json!(s.by_invariant().get(i).copied().unwrap_or(0))))
                .collect();
            let causes_by: serde_json::Map<String, Value> = Invariant::ALL
                .iter()
                .map(|i| (i.name().to_string(), json!(g.of_invariant(*i).0.len())))
                .collect();
            json!({
                "name": s.name(),
                "file": s.prepared.source.path.display().to_string(),
                "random_seed": s.prepared.source.random_seed,
                "crash_points_total": s.prepared.trace.len(),
                "crash_points_covered": s.covered_hits(),
                "syscalls_total": s.prepared.syscalls.as_ref().map(|t| t.len()),
                "syscalls_covered": s.prepared.syscalls.as_ref().map(|_| s.covered_syscalls()),
                "syscall_trace_stops": s.prepared.syscall_stops,
                "restarted_lives_traced": s.prepared.later.len(),
                "restarted_lives_syscall_traced": s.prepared.later.iter().filter(|t| t.syscalls.is_some()).count(),
                "restarted_life_trials": s.covered_later().0,
                "trials": s.outcomes.len(),
                "trials_per_second": if s.wall.is_zero() { Value::Null } else { json!(s.outcomes.len() as f64 / s.wall.as_secs_f64()) },
                "violations_by_invariant": by,
                "causes_by_invariant": causes_by,
                "errors": s.errors().iter().map(|(p, e)| json!({"plan": p.to_string(), "error": e}))
                    .chain(s.probe_errors().map(|(p, e)| json!({"plan": p.plan(), "error": e.to_string()})))
                    .collect::<Vec<_>>(),
                "probes": s.probes.len(),
                "probes_not_carried_out": s.probes.iter().filter(|p| p.skipped).map(|p| json!({
                    "probe": p.probe.plan(),
                    "capability": p.probe.capability().name(),
                    "why": p.told,
                    "charged_to": charged_to(p, &result.capabilities),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut violations: Vec<Value> = Vec::new();
    let mut causes_json: Vec<Value> = Vec::new();
    for ((s, g), first) in result.scenarios.iter().zip(&grouped).zip(&first_cause) {
        let of = |k: usize| first + g.of[k];
        let probes = s
            .probe_violations()
            .map(|(p, v)| (p.plan(), p.crash_point(), v));
        let all = s
            .violations()
            .map(|(p, c, v)| (p.to_string(), c.to_string(), v))
            .chain(probes);
        for (k, (plan, crash, v)) in all.enumerate() {
            violations.push(violation_json(s, &plan, &crash, v, of(k), ctx));
        }
        for (i, c) in g.causes.iter().enumerate() {
            causes_json.push(json!({
                "id": first + i,
                "invariant": c.key.invariant.name(),
                "scenario": s.name(),
                "origin": c.key.origin,
                "when": c.key.when,
                "expected": c.key.expected,
                "found": c.key.found,
                "events": c.violation.events,
                "trials": c.trials,
                "plan": c.plan,
                "crash_point": c.crash_point,
                "replay": replay_of(s, &c.plan, ctx),
            }));
        }
    }
    json!({
        "format": REPORT_FORMAT,
        "store": ctx.store,
        "store_fault": ctx.store_fault,
        "mode": ctx.mode,
        "seed": ctx.seed,
        "jobs": ctx.jobs,
        "shard": ctx.shard.map(|(k, n)| format!("{k}/{n}")),
        "trials": result.trials,
        "elapsed_seconds": result.elapsed.as_secs_f64(),
        "trials_per_second": result.trials_per_second(),
        "trial_seconds": result.trial_wall().as_secs_f64(),
        "adapter_processes": json!({"spawned": result.adapter_processes.spawned, "forked": result.adapter_processes.forked}),
        "leaked_processes": result.leaked,
        "violation_count": result.violation_count(),
        "cause_count": causes_json.len(),
        "error_count": result.error_count(),
        "scenarios": scenarios,
        "causes": causes_json,
        "violations": violations,
        "not_applicable": ctx.not_applicable.iter().map(|na| json!({"invariant": na.invariant, "check": na.check})).collect::<Vec<_>>(),
        "capabilities": result.capabilities.iter().map(|c| c.name()).collect::<Vec<_>>(),
        "scorecard": scorecard::json(&score(result, ctx)),
        "power_loss": result.power_loss.as_ref().map(|p| powerloss::json(p, &ctx.store_flags())),
        "timings": timings::json(result),
        "skipped_scenarios": result.skipped.iter().map(|(s, why)| json!({"name": s.scenario.name, "file": s.path.display().to_string(), "why": why})).collect::<Vec<_>>(),
    })
}

/// JUnit XML: one suite per scenario, one test case per invariant (the
/// trials', the probes' and the power-loss states' violations) plus one for
/// what could not run as planned, failures carrying the explanations; then
/// the scorecard as one suite.
pub fn junit(result: &CampaignResult, ctx: &Context<'_>) -> String {
    let mut report = Report::new("agentchaos");
    report.set_time(result.elapsed);
    let card = score(result, ctx);
    for s in &result.scenarios {
        let mut suite = TestSuite::new(s.name());
        suite.set_time(s.wall);
        let power = result
            .power_loss
            .iter()
            .flat_map(|p| &p.scenarios)
            .find(|p| p.source.scenario.name == s.name());
        for inv in Invariant::ALL {
            let texts: Vec<String> = s
                .violations()
                .filter(|(_, _, v)| v.invariant == inv)
                .map(|(p, c, v)| explain(v, s.name(), c, &replay_of(s, &p, ctx)))
                .chain(
                    s.probe_violations()
                        .filter(|(_, v)| v.invariant == inv)
                        .map(|(p, v)| {
                            explain(v, s.name(), &p.crash_point(), &probe_replay(s, p, ctx))
                        }),
                )
                .chain(power.into_iter().flat_map(|p| {
                    p.failures
                        .iter()
                        .filter(|f| f.findings.iter().any(|x| x.check == inv.name()))
                        .map(|f| powerloss::describe_failure(f, &p.source, &ctx.store_flags()))
                }))
                .collect();
            let status = if texts.is_empty() {
                TestCaseStatus::success()
            } else {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                st.set_message(format!("{} violation(s) of {inv}", texts.len()));
                st.set_description(texts.into_iter().take(10).collect::<Vec<_>>().join("\n"));
                st
            };
            let mut case = TestCase::new(inv.name(), status);
            case.set_classname(format!("agentchaos.{}", s.name()));
            suite.add_test_case(case);
        }
        let errors: Vec<String> = s
            .errors()
            .iter()
            .map(|(p, e)| format!("{p}: {e}"))
            .chain(s.probe_errors().map(|(p, e)| format!("{}: {e}", p.plan())))
            .chain(
                power
                    .and_then(|p| p.error.as_ref())
                    .map(|e| format!("power loss: {e}")),
            )
            .collect();
        let status = if errors.is_empty() {
            TestCaseStatus::success()
        } else {
            let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
            st.set_message(format!("{} trial error(s)", errors.len()));
            st.set_description(errors.join("\n"));
            st
        };
        let mut case = TestCase::new("trials-run-as-planned", status);
        case.set_classname(format!("agentchaos.{}", s.name()));
        suite.add_test_case(case);
        report.add_test_suite(suite);
    }
    report.add_test_suite(scorecard::junit(&card));
    report
        .to_string()
        .expect("a report of strings serializes to a string")
}
