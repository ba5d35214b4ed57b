//! The pages: `run`'s (header and verdict, the scenarios, the scorecard,
//! every violation, the power-loss states, what could not run) and
//! `replay`'s (the story of one trial, its violations with its timeline,
//! or one power-loss state). Violations with the same scenario, invariant,
//! expected and found are one group: its first trial's timeline, then
//! every trial that showed it, each with its replay command.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

use super::escape;
use super::svg::svg;
use crate::campaign::powercampaign::{self, Failure, StateId};
use crate::campaign::runner::{CampaignResult, ScenarioResult};
use crate::check::{Invariant, Violation};
use crate::nemesis::powerloss::{self, Fate, FateKind, Loss};
use crate::report::scorecard::{self, Verdict};
use crate::report::{probe_replay, replay_of, score, verdict_line, Context};
use crate::timeline::Timeline;

const STYLE: &str = r#"
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1300px;padding:0 1em;color:#1b1b1b;background:#fff}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.25em;border-bottom:1px solid #ccc;margin-top:1.6em}h3{font-size:1.05em;margin:.2em 0}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
code,pre{font-family:ui-monospace,monospace;font-size:13px}
pre{background:#f4f4f4;border:1px solid #ddd;padding:.5em;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
code.replay{user-select:all}
.verdict{font-weight:bold;padding:.3em .6em;display:inline-block;border-radius:3px}
.verdict.pass,td.pass{background:#dff3df;color:#124d12}.verdict.fail,td.fail{background:#fbdada;color:#7a0d0d}
td.not-supported,td.not-exercised,td.not-reached{background:#f3f0dc}
article.violation{border:1px solid #d99;border-left:5px solid #c33;border-radius:3px;padding:.6em .9em;margin:1em 0}
article.finding{border-left-color:#c73}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.15em .8em;margin:.4em 0}dl.facts dt{font-weight:bold;color:#555}dl.facts dd{margin:0}
.lost-list{background:#fff0f0;border:1px solid #e5a0a0;padding:.3em .8em}
figure.timeline{margin:.6em 0;overflow-x:auto;border:1px solid #e4e4e4;background:#fcfcfc}
figcaption{font-size:12px;color:#555;padding:.3em .5em}
svg.timeline text{fill:#1b1b1b;white-space:pre}svg.timeline .lane-head{font-weight:bold;fill:#333}
svg.timeline .lane-rule{stroke:#ccc}svg.timeline .band{fill:#f2f5fa}
svg.timeline .row rect{fill:#fff;stroke:#9aa}
svg.timeline .append.acked rect{fill:#e9f6e9;stroke:#6a6}svg.timeline .append.unacked rect{fill:#f4f4f4;stroke:#999;stroke-dasharray:3 2}
svg.timeline .append.refused rect{fill:#fff4d6;stroke:#c90}svg.timeline .append.across-fault rect{stroke:#d80;stroke-width:2.5}

svg.timeline .crash rect{fill:#5c1010;stroke:#5c1010}svg.timeline .crash text{fill:#fff}
svg.timeline .fault rect{fill:#ffe1b3;stroke:#d80}svg.timeline .recovery rect{fill:#e3ecfb;stroke:#68c}
svg.timeline .observed rect{fill:#f0eefa;stroke:#87b}svg.timeline .observed.missing rect{fill:#ffd6d6;stroke:#c00;stroke-width:2.5}
svg.timeline .end rect{fill:#eee;stroke:#888}svg.timeline .applied rect{fill:#f7f7ee;stroke:#aa8}
svg.timeline .lost rect,svg.timeline .repeated rect{fill:#ffd6d6;stroke:#c00;stroke-width:2.5}svg.timeline .lost text,svg.timeline .repeated text{font-weight:bold;fill:#900}
svg.timeline .lost-link{fill:none;stroke:#c00;stroke-width:1.5;stroke-dasharray:5 3}
table.fates td.kept{background:#e9f6e9}table.fates td.dropped,table.fates td.torn,table.fates td.garbled{background:#ffd6d6;font-weight:bold}
details{margin:.4em 0}
"#;

fn head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(title)
    )
}

const FOOT: &str = "</body>\n</html>\n";

/// One violation's or finding's facts.
fn facts(rows: &[(&str, &str)]) -> String {
    let mut s = String::from("<dl class=\"facts\">");
    for (k, v) in rows {
        let _ = write!(s, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(v));
    }
    s.push_str("</dl>\n");
    s
}

fn replay_block(command: &str) -> String {
    format!(
        "<p>replay:</p><pre><code class=\"replay\">{}</code></pre>\n",
        escape(command)
    )
}

fn list(class: &str, items: &[String]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let mut s = format!("<ul class=\"{class}\">");
    for i in items {
        let _ = write!(s, "<li>{}</li>", escape(i));
    }
    s.push_str("</ul>\n");
    s
}

/// The timeline figure, with what it highlights spelled out beside it.
fn figure(t: &Timeline) -> String {
    let mut s = String::from("<figure class=\"timeline\">");
    s.push_str(&svg(t));
    s.push_str("<figcaption>One lane per life of the agent, time flowing down; each event the agent sent with the store's answer; the crash or fault; each restart's recovery; each time the harness looked at the disk. Red: acknowledged events later missing (linked to the observation that missed them) and operations the world applied more than once.</figcaption></figure>\n");
    let lost: Vec<String> = t
        .lost()
        .filter_map(|a| {
            a.lost
                .as_ref()
                .map(|l| format!("{}: missing {}: {}", a.label, l.when, l.holds))
        })
        .collect();
    if !lost.is_empty() {
        s.push_str("<div class=\"lost-list\"><p>Acknowledged, then lost:</p>");
        s.push_str(&list("lost", &lost));
        s.push_str("</div>\n");
    }
    let repeated: Vec<String> = t
        .repeated()
        .filter(|a| a.nth > 1)
        .map(|a| {
            format!(
                "{} ({}: {}) applied {} times in the world",
                a.operation, a.service, a.action, a.of
            )
        })
        .chain(t.workspace.iter().map(|w| {
            format!(
                "{} tagged on {} lines of {} in the workspace",
                w.operation, w.lines, w.file
            )
        }))
        .collect();
    if !repeated.is_empty() {
        s.push_str("<div class=\"lost-list\"><p>Applied more than once:</p>");
        s.push_str(&list("repeated", &repeated));
        s.push_str("</div>\n");
    }
    s
}

/// One violation of a trial (or a group of them with the same finding):
/// its facts, the first trial's timeline, its replay; the other trials
/// that showed it, each with its crash point and replay command.
struct Shown<'a> {
    scenario: &'a str,
    crash: String,
    violation: &'a Violation,
    replay: String,
    timeline: Option<&'a Timeline>,
}

/// How many timelines of one scenario and invariant are shown open; the
/// others are folded (`<details>`, in the page all the same), so a
/// campaign with hundreds of failing trials opens quickly.
const OPEN_TIMELINES: usize = 5;

fn violation_article(n: usize, group: &[Shown<'_>], open: bool) -> String {
    let first = group
        .iter()
        .find(|s| s.timeline.is_some())
        .unwrap_or(&group[0]);
    let v = first.violation;
    let mut s = format!(
        "<article class=\"violation\" id=\"v{n}\" data-invariant=\"{}\">\n<h3>{} · scenario {}</h3>\n<p class=\"promise\">{}</p>\n",
        escape(v.invariant.name()),
        escape(v.invariant.name()),
        escape(first.scenario),
        escape(v.invariant.promise())
    );
    s.push_str(&facts(&[
        ("crash", &first.crash),
        ("when", &v.when),
        ("expected", &v.expected),
        ("found", &v.found),
    ]));
    if !v.events.is_empty() {
        s.push_str("<p>events:</p>");
        s.push_str(&list("events", &v.events));
    }
    s.push_str(&replay_block(&first.replay));
    match first.timeline {
        Some(t) if open => s.push_str(&figure(t)),
        Some(t) => {
            s.push_str("<details class=\"timeline\"><summary>timeline</summary>");
            s.push_str(&figure(t));
            s.push_str("</details>\n");
        }
        None => s.push_str(
            "<p class=\"no-timeline\">No timeline: a probe of the crash-free run's store, not a trial of agent lives.</p>\n",
        ),
    }
    if group.len() > 1 {
        let _ = write!(
            s,
            "<details><summary>{} more trial(s) with the same finding</summary><ol class=\"same\">",
            group.len() - 1
        );
        for other in group.iter().filter(|o| !std::ptr::eq(*o, first)) {
            let _ = write!(
                s,
                "<li>{} (when: {})<pre><code class=\"replay\">{}</code></pre></li>",
                escape(&other.crash),
                escape(&other.violation.when),
                escape(&other.replay)
            );
        }
        s.push_str("</ol></details>\n");
    }
    s.push_str("</article>\n");
    s
}

/// Every violation of a scenario's trials and probes, grouped.
fn scenario_violations<'a>(s: &'a ScenarioResult, ctx: &Context<'_>) -> Vec<Shown<'a>> {
    let mut shown: Vec<Shown<'a>> = Vec::new();
    for v in &s.prepared.trace_violations {
        shown.push(Shown {
            scenario: s.name(),
            crash: "none (the crash-free run)".to_string(),
            violation: v,
            replay: replay_of(s, &s.prepared.crash_free(), ctx),
            timeline: s.prepared.trace_timeline.as_deref(),
        });
    }
    for o in &s.outcomes {
        for v in &o.violations {
            shown.push(Shown {
                scenario: s.name(),
                crash: o.crash_point.clone(),
                violation: v,
                replay: replay_of(s, &o.plan, ctx),
                timeline: o.timeline.as_deref(),
            });
        }
    }
    for p in &s.probes {
        for v in &p.violations {
            shown.push(Shown {
                scenario: s.name(),
                crash: p.probe.crash_point(),
                violation: v,
                replay: probe_replay(s, &p.probe, ctx),
                timeline: None,
            });
        }
    }
    shown
}

fn groups<'a>(shown: Vec<Shown<'a>>) -> Vec<Vec<Shown<'a>>> {
    let mut by: BTreeMap<(Invariant, usize), Vec<Shown<'a>>> = BTreeMap::new();
    let mut keys: Vec<(&str, Invariant, &str, &str)> = Vec::new();
    for s in shown {
        let key = (
            s.scenario,
            s.violation.invariant,
            s.violation.expected.as_str(),
            s.violation.found.as_str(),
        );
        let i = match keys.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                keys.push(key);
                keys.len() - 1
            }
        };
        by.entry((s.violation.invariant, i)).or_default().push(s);
    }
    by.into_values().collect()
}

fn scorecard_table(card: &scorecard::Scorecard) -> String {
    let mut s = format!(
        "<table class=\"scorecard\"><caption>{} of {} capabilities claimed</caption><tr><th>capability</th><th>verdict</th><th>detail</th></tr>",
        card.claimed.len(),
        crate::store::adapter::Capability::ALL.len()
    );
    for (row, verdict) in &card.rows {
        let class = verdict.word().replace(' ', "-");
        let mut detail = escape(&verdict.detail());
        if let Verdict::Fail { first, .. } = verdict {
            let _ = write!(
                detail,
                "<br>replay: <code class=\"replay\">{}</code>",
                escape(&first.replay)
            );
        }
        let _ = write!(
            s,
            "<tr><td>{}</td><td class=\"{class}\">{}</td><td>{detail}</td></tr>",
            escape(row.name()),
            escape(verdict.word())
        );
    }
    s.push_str("</table>\n");
    s
}

fn verdict_class(line: &str) -> &'static str {
    if line.starts_with("PASS") {
        "pass"
    } else {
        "fail"
    }
}

fn fates_table(fates: &Result<Vec<Fate>, Arc<powerloss::Error>>) -> String {
    let fates = match fates {
        Ok(f) => f,
        Err(e) => {
            return format!(
                "<p>The un-synced items of this state could not be rebuilt: {}</p>\n",
                escape(&e.to_string())
            )
        }
    };
    if fates.is_empty() {
        return "<p>Nothing was un-synced at the power loss: the state is what the process wrote.</p>\n".to_string();
    }
    let mut s = String::from(
        "<table class=\"fates\"><caption>Every un-synced item at the power loss, and what this state kept of it</caption><tr><th>ops</th><th>un-synced</th><th>in this state</th></tr>",
    );
    for f in fates {
        let ops: Vec<String> = f.ops.iter().map(|o| format!("#{o}")).collect();
        let what = if f.kind == FateKind::Kept {
            "kept".to_string()
        } else {
            format!("{}: {}", f.kind.name(), f.how)
        };
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
            escape(&ops.join(", ")),
            escape(&f.what),
            f.kind.name(),
            escape(&what)
        );
    }
    s.push_str("</table>\n");
    s
}

fn relies_on(losses: &[Loss]) -> String {
    if losses.is_empty() {
        return "<p>It relies on nothing being lost: the state keeps everything the process wrote.</p>\n".to_string();
    }
    let items: Vec<String> = losses
        .iter()
        .map(|l| {
            format!(
                "relies on {} surviving: {} (in this state: {})",
                l.what, l.why, l.how
            )
        })
        .collect();
    format!("<p>The assumption:</p>{}", list("relies-on", &items))
}

fn power_loss_article(n: usize, scenario: &str, f: &Failure, replay: &str) -> String {
    let at = match &f.after_op {
        Some(op) => format!("after {op}"),
        None => "before the first op".to_string(),
    };
    let mut s = format!(
        "<article class=\"violation finding\" id=\"p{n}\" data-invariant=\"{}\">\n<h3>power loss · {} · scenario {}</h3>\n",
        escape(f.findings.first().map_or("", |x| x.check.as_str())),
        escape(
            &f.findings
                .iter()
                .map(|x| x.check.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        escape(scenario)
    );
    s.push_str(&facts(&[("model", f.model.name()), ("power lost", &at)]));
    for x in &f.findings {
        let _ = write!(s, "<h4>{}</h4>", escape(&x.check));
        s.push_str(&facts(&[
            ("when", &x.when),
            ("expected", &x.expected),
            ("found", &x.found),
        ]));
        s.push_str(&list("events", &x.events));
    }
    s.push_str(&relies_on(&f.losses));
    s.push_str(&fates_table(&f.fates));
    s.push_str(&replay_block(replay));
    s.push_str("</article>\n");
    s
}

/// The page of a campaign (`agentchaos run --html DIR`).
pub fn campaign(result: &CampaignResult, ctx: &Context<'_>) -> String {
    let mut s = head("agentchaos run");
    let verdict = verdict_line(result);
    let _ = write!(
        s,
        "<header><h1>agentchaos run</h1><p class=\"verdict {}\">{}</p>\n<p>store: {}{} · mode: {} · seed: {}</p></header>\n",
        verdict_class(&verdict),
        escape(&verdict),
        escape(&ctx.store),
        escape(&ctx.store_fault.map(|f| format!(" with fault {f}")).unwrap_or_default()),
        escape(&ctx.mode),
        ctx.seed
    );
    s.push_str("<section id=\"scenarios\"><h2>Scenarios</h2><table><tr><th>scenario</th><th>crash points covered</th><th>trials</th><th>violations</th></tr>");
    for sc in &result.scenarios {
        let by = sc.by_invariant();
        let viol = if by.is_empty() {
            "none".to_string()
        } else {
            by.iter()
                .map(|(i, n)| format!("{i} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td></tr>",
            escape(sc.name()),
            sc.covered_hits(),
            sc.prepared.trace.len(),
            sc.outcomes.len(),
            escape(&viol)
        );
    }
    s.push_str("</table></section>\n");
    s.push_str("<section id=\"scorecard\"><h2>Scorecard</h2>");
    s.push_str(&scorecard_table(&score(result, ctx)));
    let _ = writeln!(
        s,
        "<p class=\"verdict {}\">{}</p></section>",
        verdict_class(&verdict),
        escape(&verdict)
    );
    s.push_str("<section id=\"violations\"><h2>Violations</h2>\n");
    let mut n = 0;
    for sc in &result.scenarios {
        let mut shown: BTreeMap<Invariant, usize> = BTreeMap::new();
        for group in groups(scenario_violations(sc, ctx)) {
            n += 1;
            let open = shown.entry(group[0].violation.invariant).or_default();
            *open += 1;
            s.push_str(&violation_article(n, &group, *open <= OPEN_TIMELINES));
        }
    }
    let mut p = 0;
    for sc in result.power_loss.iter().flat_map(|p| &p.scenarios) {
        for f in &sc.failures {
            p += 1;
            let id = StateId {
                model: f.model,
                crash_after: f.crash_after,
                choice: f.choice.clone(),
            };
            let replay = powercampaign::replay_command(&sc.source.path, &ctx.store_flags(), &id);
            s.push_str(&power_loss_article(p, &sc.source.scenario.name, f, &replay));
        }
    }
    if n + p == 0 {
        s.push_str("<p class=\"none\">no violations</p>\n");
    }
    s.push_str("</section>\n");
    let mut errors: Vec<String> = Vec::new();
    for sc in &result.scenarios {
        for (plan, e) in sc.errors() {
            errors.push(format!(
                "{} ({plan}): {e} — replay: {}",
                sc.name(),
                replay_of(sc, &plan, ctx)
            ));
        }
        for (probe, e) in sc.probe_errors() {
            errors.push(format!(
                "{} (probe {probe}, {}): {e} — replay: {}",
                sc.name(),
                probe.crash_point(),
                probe_replay(sc, probe, ctx)
            ));
        }
    }
    for sc in result.power_loss.iter().flat_map(|p| &p.scenarios) {
        if let Some(e) = &sc.error {
            errors.push(format!("{} (power loss): {e}", sc.source.scenario.name));
        }
    }
    if !errors.is_empty() {
        s.push_str("<section id=\"errors\"><h2>Could not be carried out</h2>");
        s.push_str(&list("errors", &errors));
        s.push_str("</section>\n");
    }
    s.push_str(FOOT);
    s
}

/// What a replay's page shows.
#[derive(Debug)]
pub struct ReplayPage<'a> {
    pub scenario: &'a str,
    pub plan: &'a str,
    /// The story of the trial, as the terminal shows it.
    pub narrative: &'a str,
    pub crash: &'a str,
    pub violations: &'a [Violation],
    pub timeline: Option<&'a Timeline>,
    pub replay: &'a str,
    /// `result: …`, as the terminal ends.
    pub result: &'a str,
    pub passed: bool,
}

/// The page of one replayed trial (`agentchaos replay --html DIR`).
pub fn replay(r: &ReplayPage<'_>) -> String {
    let mut s = head("agentchaos replay");
    let _ = writeln!(
        s,
        "<header><h1>agentchaos replay</h1><p>scenario {} · plan <code>{}</code></p><p class=\"verdict {}\">{}</p></header>",
        escape(r.scenario),
        escape(r.plan),
        if r.passed { "pass" } else { "fail" },
        escape(r.result)
    );
    s.push_str("<section id=\"violations\"><h2>Violations</h2>\n");
    for (n, v) in r.violations.iter().enumerate() {
        s.push_str(&violation_article(
            n + 1,
            &[Shown {
                scenario: r.scenario,
                crash: r.crash.to_string(),
                violation: v,
                replay: r.replay.to_string(),
                timeline: r.timeline,
            }],
            true,
        ));
    }
    if r.violations.is_empty() {
        s.push_str("<p class=\"none\">no violations</p>\n");
        if let Some(t) = r.timeline {
            s.push_str(&figure(t));
        }
    }
    s.push_str("</section>\n<section id=\"story\"><h2>What happened</h2>");
    let _ = writeln!(s, "<pre>{}</pre></section>", escape(r.narrative));
    s.push_str(FOOT);
    s
}

/// The page of one replayed power-loss state.
pub fn power_loss_replay(
    scenario: &str,
    id: &StateId,
    out: &powercampaign::Replayed,
    replay: &str,
) -> String {
    let mut s = head("agentchaos replay");
    let findings = match &out.verdict {
        powercampaign::Verdict::Fail(f) => f.as_slice(),
        _ => &[],
    };
    let result = match &out.verdict {
        powercampaign::Verdict::Pass => "result: no violations".to_string(),
        powercampaign::Verdict::Refused(why) => {
            format!("result: refused with damage, no acknowledged event lost: {why}")
        }
        powercampaign::Verdict::Fail(f) => format!("result: {} violation(s)", f.len()),
    };
    let _ = write!(
        s,
        "<header><h1>agentchaos replay</h1><p>scenario {} · power-loss state <code>{}</code></p><p class=\"verdict {}\">{}</p></header>\n<section id=\"violations\"><h2>Violations</h2>\n",
        escape(scenario),
        escape(&id.to_string()),
        if findings.is_empty() { "pass" } else { "fail" },
        escape(&result)
    );
    let failure = Failure {
        model: id.model,
        crash_after: id.crash_after,
        choice: id.choice.clone(),
        after_op: out.op.clone(),
        losses: out.state.losses.clone(),
        findings: findings.to_vec(),
        fates: Ok(out.fates.clone()),
    };
    if findings.is_empty() {
        s.push_str("<p class=\"none\">no violations</p>\n");
        s.push_str(&relies_on(&failure.losses));
        s.push_str(&fates_table(&failure.fates));
    } else {
        s.push_str(&power_loss_article(1, scenario, &failure, replay));
    }
    s.push_str("</section>\n");
    s.push_str(FOOT);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{Ack, Append, Applied, Lane, Lost, Observed, Row};
    use scraper::{Html, Selector};

    /// Text a store could write into an event, a call id or a message.
    const HOSTILE: &str = "<script>alert('x')</script> \"q\" & ]]> <!-- é ✓ \u{1}";

    fn observed(when: &str) -> Observed {
        Observed {
            when: when.to_string(),
            events: 1,
            missing: 1,
            torn: Some(HOSTILE.to_string()),
            damage: None,
        }
    }

    fn hostile_timeline() -> Timeline {
        Timeline {
            lives: vec![Lane {
                life: 0,
                rows: vec![
                    Row::Append(Append {
                        label: format!("seq 1 {HOSTILE}"),
                        ack: Ack::Acked(1),
                        lost: Some(Lost {
                            at: Some((0, 2)),
                            when: "after life 0 was killed".into(),
                            holds: HOSTILE.into(),
                        }),
                    }),
                    Row::Crash {
                        text: HOSTILE.into(),
                    },
                    Row::Observed(observed(HOSTILE)),
                ],
                world: vec![Applied {
                    operation: HOSTILE.into(),
                    service: "s".into(),
                    action: "a".into(),
                    nth: 2,
                    of: 2,
                }],
            }],
            end: observed("at the end"),
            workspace: Vec::new(),
        }
    }

    #[test]
    fn hostile_event_text_stays_text() {
        let t = hostile_timeline();
        let v = Violation {
            invariant: Invariant::AckedDurable,
            when: HOSTILE.into(),
            expected: HOSTILE.into(),
            found: HOSTILE.into(),
            events: vec![HOSTILE.into()],
        };
        let html = violation_article(
            1,
            &[Shown {
                scenario: HOSTILE,
                crash: HOSTILE.into(),
                violation: &v,
                replay: format!("agentchaos replay --scenario '{HOSTILE}'"),
                timeline: Some(&t),
            }],
            true,
        );
        let doc = Html::parse_fragment(&html);
        let sel = |s: &str| Selector::parse(s).unwrap();
        assert_eq!(doc.select(&sel("script")).count(), 0, "{html}");
        assert!(!html.contains("<!--"));
        // What the page shows is the text itself, controls aside.
        let shown = HOSTILE.replace('\u{1}', "\u{FFFD}");
        let texts =
            |s: &str| -> Vec<String> { doc.select(&sel(s)).map(|e| e.text().collect()).collect() };
        assert_eq!(
            texts("dd")[1..],
            [shown.clone(), shown.clone(), shown.clone()]
        );
        assert_eq!(texts("ul.events li").join("|"), shown);
        assert_eq!(
            texts("code.replay"),
            [format!("agentchaos replay --scenario '{shown}'")]
        );
        let lost = texts("svg .row.lost title");
        assert_eq!(lost.len(), 1);
        assert!(lost[0].contains(&format!("seq 1 {shown}")), "{lost:?}");
        assert!(lost[0].ends_with(&shown), "{lost:?}");
        assert_eq!(doc.select(&sel("svg .row.repeated")).count(), 1);
        assert_eq!(doc.select(&sel("svg .lost-link")).count(), 1);
        assert_eq!(texts("h3"), [format!("acked-durable · scenario {shown}")]);
    }
}
