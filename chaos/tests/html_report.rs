//! `--html DIR`: the self-contained HTML report of `run` and `replay`,
//! read back with a real HTML5 parser (html5ever, through scraper) as a
//! browser would read it: the scorecard, one timeline per violation with
//! the lost acknowledged events highlighted, the replay commands, nothing
//! fetched from elsewhere; snapshots of two fixed violations; and a
//! target that cannot be written refused up front (exit 2).

use std::path::Path;
use std::process::{Command, Output};

use scraper::{ElementRef, Html, Selector};
use serde_json::Value;

fn agentchaos(args: &[&str]) -> Output {
    // From the crate's directory, so the scenario path in every replay
    // command is the relative one the test gave (the snapshots hold it).
    Command::new(env!("CARGO_BIN_EXE_agentchaos"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .unwrap()
}

const SMALL: &str = "tests/fixtures/small.json";

fn sel(s: &str) -> Selector {
    Selector::parse(s).unwrap()
}

fn text(e: ElementRef<'_>) -> String {
    e.text().collect()
}

fn page(dir: &Path, out: &Output) -> Html {
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap_or_else(|e| {
        panic!(
            "no DIR/index.html ({e}); stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    Html::parse_document(&html)
}

/// Nothing on the page loads anything: no script at all, no stylesheet
/// link, no `http` anywhere in the markup.
fn assert_self_contained(doc: &Html) {
    assert_eq!(doc.select(&sel("script")).count(), 0);
    assert_eq!(doc.select(&sel("link")).count(), 0);
    assert_eq!(doc.select(&sel("[src]")).count(), 0);
    let markup = doc.root_element().html();
    assert!(!markup.contains("http"), "a URL on the page");
}

#[test]
fn a_run_with_lost_acknowledged_events_draws_them() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report");
    let json = dir.path().join("report.json");
    let out = agentchaos(&[
        "run",
        "--quiet",
        "--scenario",
        SMALL,
        "--nemesis",
        "points",
        "--restarts",
        "none",
        "--store-fault",
        "ack-before-fsync",
        "--html",
        html.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let doc = page(&html, &out);
    assert_self_contained(&doc);
    let verdict = text(doc.select(&sel("header .verdict.fail")).next().unwrap());
    assert!(verdict.starts_with("FAIL: "), "{verdict}");
    // The scorecard: the text report's rows, verdicts and details
    // (`  {row:<23}  {verdict:<13}  {detail}`, a failing row's replay
    // command on the next line).
    let rows: Vec<(String, String, String)> = doc
        .select(&sel("table.scorecard tr"))
        .skip(1)
        .map(|tr| {
            let td: Vec<String> = tr.select(&sel("td")).map(text).collect();
            let detail = td[2].split("replay: ").next().unwrap().to_string();
            (td[0].clone(), td[1].clone(), detail)
        })
        .collect();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let expected: Vec<(String, String, String)> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("scorecard ("))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.trim_start().starts_with("replay:"))
        .map(|l| {
            let c: Vec<char> = l.chars().collect();
            let part = |a: usize, b: usize| c[a..b.min(c.len())].iter().collect::<String>();
            (
                part(2, 25).trim().to_string(),
                part(27, 40).trim().to_string(),
                part(42, c.len()),
            )
        })
        .collect();
    assert_eq!(rows.len(), report["scorecard"].as_array().unwrap().len());
    assert_eq!(rows, expected);
    // Every violation is shown: each group's first trial with a timeline,
    // the others listed with their replay commands.
    let articles: Vec<ElementRef<'_>> = doc.select(&sel("article.violation")).collect();
    assert!(!articles.is_empty());
    let mut shown = 0;
    for a in &articles {
        assert_eq!(a.select(&sel("svg.timeline")).count(), 1, "{}", a.html());
        let replays: Vec<String> = a.select(&sel("code.replay")).map(text).collect();
        assert!(
            replays.iter().all(|r| r
                .starts_with("agentchaos replay --scenario tests/fixtures/small.json --plan ")
                && r.ends_with(" --store-fault ack-before-fsync")),
            "{replays:?}"
        );
        shown += replays.len();
    }
    assert_eq!(shown as u64, report["violation_count"].as_u64().unwrap());
    // acked-durable: the lost events are highlighted, named, and linked
    // to the observation that missed them.
    let lost_articles: Vec<&ElementRef<'_>> = articles
        .iter()
        .filter(|a| a.value().attr("data-invariant") == Some("acked-durable"))
        .collect();
    assert!(!lost_articles.is_empty());
    let mut drawn = 0;
    for a in lost_articles {
        // The creation the open acknowledged (lost to a power cut before
        // its fsync) is no append of the agent's: its article names it.
        let facts: Vec<String> = a.select(&sel("dl.facts dd")).map(text).collect();
        if facts.iter().any(|f| {
            f == "session_created at seq 0 (acknowledged to life 0), acknowledged as durable"
        }) {
            continue;
        }
        drawn += 1;
        let lost: Vec<String> = a.select(&sel("svg .row.lost")).map(text).collect();
        assert!(!lost.is_empty(), "{}", a.html());
        assert!(lost.iter().all(|l| l.contains("LOST")), "{lost:?}");
        assert!(a.select(&sel("svg .lost-link")).count() >= 1);
        assert!(a.select(&sel("svg .row.observed.missing")).count() >= 1);
        assert!(a.select(&sel("svg .row.crash")).count() >= 1);
        assert_eq!(
            a.select(&sel("ul.lost li")).count(),
            a.select(&sel("svg .row.lost")).count()
        );
    }
    assert!(drawn > 0, "no lost append drawn");
}

/// A power-loss finding: what the failing state kept, tore or dropped of
/// every un-synced write, and the state's replay command.
#[test]
fn a_power_loss_finding_tables_what_the_state_kept_and_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report");
    let out = agentchaos(&[
        "run",
        "--quiet",
        "--scenario",
        SMALL,
        "--nemesis",
        "powerloss",
        "--store-fault",
        "ack-before-fsync",
        "--powerloss-model",
        "weak",
        "--powerloss-states",
        "4",
        "--html",
        html.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let doc = page(&html, &out);
    assert_self_contained(&doc);
    let findings: Vec<ElementRef<'_>> = doc.select(&sel("article.finding")).collect();
    assert!(!findings.is_empty());
    let acked = findings
        .iter()
        .find(|a| a.value().attr("data-invariant") == Some("acked-durable"))
        .expect("an acked-durable finding");
    let fates: Vec<(String, String)> = acked
        .select(&sel("table.fates tr"))
        .skip(1)
        .map(|tr| {
            let td: Vec<ElementRef<'_>> = tr.select(&sel("td")).collect();
            (
                td[2].value().attr("class").unwrap().to_string(),
                text(td[1]),
            )
        })
        .collect();
    // The log's un-synced write is gone (the failure is minimized to it);
    // whatever else was un-synced is listed as kept.
    assert!(
        fates
            .iter()
            .any(|(c, what)| c == "dropped" && what.contains("sessions/session/events.jsonl")),
        "{fates:?}"
    );
    assert!(fates
        .iter()
        .all(|(c, _)| ["kept", "dropped", "torn", "garbled"].contains(&c.as_str())));
    let replay = text(acked.select(&sel("code.replay")).next().unwrap());
    assert!(
        replay.starts_with(
            "agentchaos replay --scenario tests/fixtures/small.json --plan powerloss:weak:"
        ),
        "{replay}"
    );
}

#[test]
fn a_clean_run_shows_the_scorecard_and_no_violations() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("nested/report");
    let out = agentchaos(&[
        "run",
        "--quiet",
        "--scenario",
        SMALL,
        "--nemesis",
        "points",
        "--restarts",
        "none",
        "--trials",
        "3",
        "--html",
        html.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let doc = page(&html, &out);
    assert_self_contained(&doc);
    let verdicts: Vec<String> = doc.select(&sel(".verdict.pass")).map(text).collect();
    assert!(
        verdicts.contains(&"PASS: no violations, every trial carried out (exit 0)".to_string()),
        "{verdicts:?}"
    );
    assert!(doc.select(&sel("table.scorecard td.pass")).count() > 0);
    assert_eq!(doc.select(&sel("table.scorecard td.fail")).count(), 0);
    assert_eq!(doc.select(&sel("article.violation")).count(), 0);
    assert_eq!(
        text(doc.select(&sel("#violations p.none")).next().unwrap()),
        "no violations"
    );
}

/// `--html` names a directory; one that cannot hold `index.html` is bad
/// input before anything runs, for `run` and `replay` alike.
#[test]
fn an_html_target_that_cannot_be_written_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let taken = dir.path().join("taken");
    std::fs::create_dir_all(taken.join("index.html")).unwrap();
    for target in [&file, &taken] {
        for args in [
            &["run", "--quiet", "--scenario", SMALL, "--trials", "1"][..],
            &["replay", "--scenario", SMALL, "--plan", "kill@3"][..],
        ] {
            let mut args = args.to_vec();
            args.extend(["--html", target.to_str().unwrap()]);
            let out = agentchaos(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(stderr.contains("--html"), "{stderr}");
        }
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

/// The violations section of a replay's page, one element a line.
fn replayed(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r");
    let mut all = vec!["replay", "--scenario", SMALL];
    all.extend_from_slice(args);
    all.extend(["--html", html.to_str().unwrap()]);
    let out = agentchaos(&all);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let doc = page(&html, &out);
    assert_self_contained(&doc);
    let section = doc.select(&sel("section#violations")).next().unwrap();
    assert_eq!(
        section.select(&sel("article.violation")).count(),
        section.select(&sel("svg.timeline")).count()
    );
    section.html().replace("><", ">\n<")
}

#[test]
fn snapshot_of_acked_events_lost_to_a_power_cut() {
    let html = replayed(&["--plan", "powercut@16", "--store-fault", "ack-before-fsync"]);
    assert!(html.contains("class=\"row append acked lost\""));
    insta::assert_snapshot!(html);
}

#[test]
fn snapshot_of_an_effect_applied_twice() {
    let html = replayed(&["--plan", "kill@26", "--store-fault", "rerun-uncertain"]);
    assert!(html.contains("class=\"row applied repeated\""));
    insta::assert_snapshot!(html);
}
