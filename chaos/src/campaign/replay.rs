//! `agentchaos replay`: one trial again, deterministically, told step by step.
//!
//! A replay makes the scenario's crash-free trace run (the reference), then
//! runs the one planned trial and prints what each agent process did, what
//! the disk held, and every violation. Whitebox plans (kill, tear, power
//! cut, double crash) kill at the same hit every time, so the same store
//! gives the same verdict; a timer plan is only as repeatable as timing is.
//! This module must never change what a trial does compared to a campaign.

use std::fmt::Write;
use std::path::Path;

use crate::campaign::config::{replay_command, Config, ScenarioSource};
use crate::campaign::describe::{describe_crash, describe_crashes};
use crate::campaign::trial::{self, TrialError};
use crate::check::explain;
use crate::check::{self, Violation};
use crate::history::{History, LifeEnd, RunKind};
use crate::model::describe_record;
use crate::nemesis::{Crash, Plan};
use crate::timeline::Timeline;

/// What a replay found.
#[derive(Debug)]
pub struct Replayed {
    pub narrative: String,
    pub violations: Vec<Violation>,
    /// The trial or probe could not be carried out, and whose fault that is.
    pub error: Option<TrialError>,
    /// Where the plan crashed the agent (or what the probe did), in words.
    pub crash: Option<String>,
    /// What the trial's lives did (a trial that ran; not a probe).
    pub timeline: Option<Box<Timeline>>,
}

fn story(h: &History, root: &Path) -> String {
    let trial_root = root.display().to_string();
    let mut s = String::new();
    for (i, life) in h.lives.iter().enumerate() {
        let acked = life.writes.iter().filter(|w| w.acked.is_some()).count();
        let end = match life.end {
            LifeEnd::Killed => match (life.kill_at, &life.syscalls) {
                (Some(k), _) => format!("killed (SIGKILL) at its hit {k}"),
                (None, Some(_)) => "killed (SIGKILL) by the syscall nemesis".to_string(),
                (None, None) => "killed (SIGKILL) by the timer".to_string(),
            },
            LifeEnd::Exited(0) if life.done => "finished the scenario".to_string(),
            LifeEnd::Exited(c) => format!(
                "exited with status {c}: {}",
                life.stderr.replace(&trial_root, "ROOT")
            ),
            LifeEnd::Signaled(sig) => format!("died of signal {sig}"),
            LifeEnd::Hung => "hung and was killed by the watchdog".to_string(),
        };
        let _ = writeln!(
            s,
            "life {i}: {end}; {} append(s) announced, {acked} acknowledged",
            life.writes.len()
        );
        if let Some(sys) = &life.syscalls {
            let root = sys.root.display().to_string();
            let _ = writeln!(
                s,
                "  under the syscall tracer: {} store syscall(s){}{}",
                sys.events.len(),
                match sys.reads.len() {
                    0 => String::new(),
                    n => format!(", {n} read(s) of its files"),
                },
                sys.fault
                    .as_ref()
                    .map(|f| format!("; {}", f.to_string().replace(&root, "ROOT")))
                    .unwrap_or_default()
            );
        }
        if let Some(r) = &life.recovered {
            let calls: Vec<String> = r
                .uncertain
                .iter()
                .map(|u| format!("{} {}", u.call_id, crate::model::phase_name(u.phase)))
                .collect();
            let _ = writeln!(
                s,
                "  recovery appended {}; interrupted runs {:?}; uncertain calls [{}]; the context {}",
                r.appended,
                r.interrupted,
                calls.join(", "),
                if r.block.is_some() {
                    "has a <recovery> block"
                } else {
                    "has no <recovery> block"
                }
            );
        }
        if let Some(n) = life.recovered_again {
            let _ = writeln!(s, "  second recovery appended {n}");
        }
        if i == 0 {
            for (path, from, to) in &h.power_cut {
                let _ = writeln!(
                    s,
                    "  power cut: {} cut from {from} to {to} bytes",
                    path.display()
                );
            }
        }
        if let Some(obs) = h.after_kill.get(i) {
            let _ = writeln!(
                s,
                "  disk after it {}: {} event(s){}{}{}",
                if life.end == LifeEnd::Killed {
                    "was killed"
                } else {
                    "gave up"
                },
                obs.records.len(),
                obs.bytes
                    .map(|b| format!(", {} bytes", b.len))
                    .unwrap_or_default(),
                obs.torn
                    .as_ref()
                    .map(|t| format!(", {t}"))
                    .unwrap_or_default(),
                obs.records
                    .last()
                    .map(|r| format!(", last {}", describe_record(r)))
                    .unwrap_or_default()
            );
        }
    }
    let _ = writeln!(
        s,
        "end: {} event(s) in the log; {} world application(s); {} workspace file(s)",
        h.final_obs.records.len(),
        h.world.len(),
        h.workspace.len()
    );
    s
}

/// Replays `plan` on `source`. `keep` keeps the trial directory there.
pub fn replay(
    cfg: &Config<'_>,
    source: ScenarioSource,
    plan: Plan,
    keep: Option<&Path>,
) -> Result<Replayed, TrialError> {
    let dir = crate::campaign::scratch::campaign_dir(&cfg.dir)?;
    let result = replay_in(cfg, source, plan, keep, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn replay_in(
    cfg: &Config<'_>,
    source: ScenarioSource,
    plan: Plan,
    keep: Option<&Path>,
    dir: &Path,
) -> Result<Replayed, TrialError> {
    let mut prepared = crate::campaign::prepare::prepare(
        cfg,
        source,
        &crate::campaign::scratch::trace_dir(dir, 0),
    )?;
    // The traces of the restarted lives the plan crashes, where the
    // campaign's defaults did not trace them.
    for life in 1..plan.crashed_lives() {
        let before = plan.prefix(life);
        let syscalls = matches!(plan.crash_of(life as u32), Some(Crash::Syscall { .. }));
        let traced = prepared
            .later_of(before)
            .is_some_and(|t| !syscalls || t.syscalls.is_some());
        if !traced && prepared.unusable.is_none() {
            let dir = dir.join(format!("later{life}"));
            let later = crate::campaign::prepare::trace_later(
                cfg,
                &prepared.source,
                before,
                syscalls,
                &dir,
            )?;
            prepared.later.retain(|t| t.before != before);
            prepared.later.extend(later);
        }
    }
    let mut narrative = format!(
        "scenario {} ({}), plan {plan}\nthe crash-free run passed {} crash-point hits and wrote {} events\n",
        prepared.source.scenario.name,
        prepared.source.path.display(),
        prepared.trace.len(),
        prepared.reference.records.len()
    );
    if let Some(sys) = &prepared.syscalls {
        let _ = writeln!(
            narrative,
            "its first process made {} store syscalls and {} reads of its files under the tracer",
            sys.len(),
            sys.reads.len()
        );
    }
    let replay = replay_command(
        &prepared.source.path,
        &plan,
        cfg.store_fault.as_deref(),
        &cfg.backend.agent_args(),
    );
    if plan.crash.is_none() || prepared.unusable.is_some() {
        let violations = prepared.trace_violations.clone();
        for v in &violations {
            narrative.push_str(&explain(
                v,
                &prepared.source.scenario.name,
                "none (the crash-free run)",
                &replay,
            ));
        }
        return Ok(Replayed {
            narrative,
            violations,
            error: prepared.unusable.clone(),
            crash: Some("none (the crash-free run)".to_string()),
            timeline: prepared.trace_timeline,
        });
    }
    let trial_dir = crate::campaign::scratch::trial_dir(dir, 0, 0);
    let setup = crate::campaign::prepare::setup(cfg, &prepared.source);
    let history = trial::run(&setup, plan, &trial_dir, RunKind::Trial)?;
    let crash = describe_crash(&plan, &prepared, Some(&history));
    let error = history.error.clone().or_else(|| {
        crate::campaign::describe::syscall_mismatch(&plan, &prepared, &history)
            .map(TrialError::from)
    });
    let _ = writeln!(narrative, "crash: {crash}");
    let root = trial::TrialDir {
        dir: trial_dir.clone(),
    }
    .root();
    narrative.push_str(&story(&history, &root));
    let violations = check::check_rooted(&history, &prepared.reference, &root);
    for v in &violations {
        narrative.push('\n');
        narrative.push_str(&explain(v, &prepared.source.scenario.name, &crash, &replay));
    }
    if let Some(keep) = keep {
        let name = &prepared.source.scenario.name;
        let dest = crate::campaign::scratch::keep_dir(keep, name, &plan.to_string())
            .and_then(|dest| crate::campaign::scratch::copy_dir(&trial_dir, &dest).map(|()| dest))
            .map_err(|e| format!("cannot keep the trial in {}: {e}", keep.display()))?;
        let _ = writeln!(narrative, "trial directory kept in {}", dest.display());
    }
    let timeline = Timeline::of(
        &history,
        &plan,
        &describe_crashes(&plan, &prepared, Some(&history)),
        &prepared.reference.records,
    );
    Ok(Replayed {
        narrative,
        violations,
        error,
        crash: Some(crash),
        timeline: Some(Box::new(timeline)),
    })
}
