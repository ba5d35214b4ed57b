//! How the trial ended: every run closed exactly once (runs-closed), and
//! the agent resumed to completion with the world and the workspace of
//! the crash-free run (exactly-once-outcome). A trial not carried out as
//! planned is not judged here: its error says why.

use std::collections::BTreeMap;

use crate::agent::world::Application;
use crate::check::{tail, v, Invariant, Reference, Violation};
use crate::history::{History, LifeEnd};
use crate::model::{Model, RunClose};

/// runs-closed at the end: every run closed exactly once.
pub(super) fn runs_closed_at_end(h: &History, model: &Model, out: &mut Vec<Violation>) {
    let done = h.last().done;
    for run in &model.runs {
        let bad = match run.closes.len() {
            0 if done => Some("no run_finished or run_interrupted".to_string()),
            0 | 1 => None,
            n => Some(format!(
                "{n} closes ({})",
                run.closes
                    .iter()
                    .map(|(s, c)| format!(
                        "seq {s} {}",
                        if *c == RunClose::Finished {
                            "run_finished"
                        } else {
                            "run_interrupted"
                        }
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
        if let Some(found) = bad {
            out.push(v(
                Invariant::RunsClosed,
                "at the end of the trial",
                format!("run {} (seq {}) closed exactly once", run.run_id, run.seq),
                found,
                vec![],
            ));
        }
    }
}

/// exactly-once-outcome: the agent finished, and the world and the
/// workspace equal the crash-free run's.
pub(super) fn exactly_once_outcome(
    h: &History,
    reference: Option<&Reference>,
    out: &mut Vec<Violation>,
) {
    let when = "at the end of the trial";
    let last = h.last();
    if h.error.is_some() {
        // Not carried out as planned (the trial's error says why, and whose
        // fault): no resumed outcome to judge.
        return;
    }
    if !(last.done && last.end == LifeEnd::Exited(0)) {
        let how = match last.end {
            LifeEnd::Exited(c) => format!("exited with status {c}"),
            LifeEnd::Signaled(s) => format!("died of signal {s}"),
            LifeEnd::Killed => "was killed".to_string(),
            LifeEnd::Hung => "hung".to_string(),
        };
        out.push(v(
            Invariant::ExactlyOnceOutcome,
            when,
            format!("life {} to resume the scenario to completion", last.index),
            format!(
                "it {how}: {}",
                if last.stderr.is_empty() {
                    "(no message)"
                } else {
                    &last.stderr
                }
            ),
            tail(&h.final_obs.records, 3),
        ));
        return;
    }
    let Some(reference) = reference else { return };
    let count = |apps: &[Application]| {
        let mut m: BTreeMap<(String, String, String), usize> = BTreeMap::new();
        for a in apps {
            *m.entry((a.id.clone(), a.service.clone(), a.action.clone()))
                .or_default() += 1;
        }
        m
    };
    let (want, got) = (count(&reference.world), count(&h.world));
    let keys: std::collections::BTreeSet<_> = want.keys().chain(got.keys()).collect();
    let mut diffs = Vec::new();
    for k in keys {
        let (w, g) = (
            want.get(k).copied().unwrap_or(0),
            got.get(k).copied().unwrap_or(0),
        );
        if w != g {
            diffs.push(format!(
                "{} ({}: {}) applied {g} time(s), the crash-free run {w}",
                k.0, k.1, k.2
            ));
        }
    }
    let files: std::collections::BTreeSet<&String> = reference
        .workspace
        .keys()
        .chain(h.workspace.keys())
        .collect();
    for f in files {
        match (reference.workspace.get(f), h.workspace.get(f)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(_), None) => diffs.push(format!("{f} is missing")),
            (None, Some(_)) => diffs.push(format!("{f} should not exist")),
            (Some(a), Some(b)) => diffs.push(format!("{f} differs: {}", line_diff(a, b))),
            (None, None) => {}
        }
    }
    if !diffs.is_empty() {
        out.push(v(
            Invariant::ExactlyOnceOutcome,
            when,
            "the world and the workspace of the crash-free run".to_string(),
            diffs.join("; "),
            vec![],
        ));
    }
}

fn line_diff(want: &[u8], got: &[u8]) -> String {
    let (w, g) = (String::from_utf8_lossy(want), String::from_utf8_lossy(got));
    let (mut wl, mut gl) = (w.lines(), g.lines());
    for n in 1.. {
        match (wl.next(), gl.next()) {
            (Some(a), Some(b)) if a == b => continue,
            (a, b) => {
                return format!(
                    "line {n}: expected {:?}, found {:?}",
                    a.unwrap_or("(end of file)"),
                    b.unwrap_or("(end of file)")
                )
            }
        }
    }
    unreachable!("the loop returns at the first difference")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check;
    use crate::check::fixture::history;

    #[test]
    fn the_outcome_of_a_trial_not_carried_out_is_not_judged() {
        let mut h = history(true);
        h.lives[1].end = LifeEnd::Hung;
        h.lives[1].done = false;
        // The crash-free run touched the workspace; the trial never got there.
        let reference = Reference {
            records: h.final_obs.records.clone(),
            world: vec![],
            workspace: BTreeMap::from([("notes.txt".to_string(), b"done\n".to_vec())]),
        };
        let outcome = |h: &History| {
            check(h, Some(&reference))
                .into_iter()
                .filter(|v| v.invariant == Invariant::ExactlyOnceOutcome)
                .count()
        };
        assert_eq!(outcome(&h), 1, "a life that did not finish is judged");
        h.error = Some(crate::history::TrialError {
            message: "life 1 hung".into(),
            store_fault: true,
        });
        assert_eq!(outcome(&h), 0, "the trial's error says it all");
    }

    #[test]
    fn line_diff_points_at_the_first_different_line() {
        assert_eq!(
            line_diff(b"a\nb\n", b"a\nc\n"),
            "line 2: expected \"b\", found \"c\""
        );
        assert_eq!(
            line_diff(b"a\n", b"a\nx\n"),
            "line 2: expected \"(end of file)\", found \"x\""
        );
    }
}
