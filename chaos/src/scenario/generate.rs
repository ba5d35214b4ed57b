//! Random scenarios, generated from a seed (`agentchaos run --random N`).
//!
//! Small on purpose: most crash-consistency bugs need only a few
//! operations (CrashMonkey's finding), and a small failing scenario shrinks
//! fast. Every generated scenario passes validation. This module must never
//! draw randomness from anything but its seed.

use std::collections::BTreeMap;

use agentchaos_protocol::event::{Decision, PlanStep, StepStatus};

use crate::scenario::rng::Rng;
use crate::scenario::{Run, SafeName, Scenario, Step, TestSpec, MAX_PARALLEL_CALLS};

/// A random, valid scenario of at most `max_steps` steps per run.
pub fn random_scenario(seed: u64, max_steps: usize) -> Scenario {
    let mut rng = Rng::derive(seed, "scenario", 0);
    let files = BTreeMap::from([
        (
            "src/lib.rs".to_string(),
            "fn answer() -> u32 { 41 }\n".to_string(),
        ),
        ("NOTES.md".to_string(), "# notes\n".to_string()),
    ]);
    let tests = vec![TestSpec {
        name: "answer".into(),
        file: "src/lib.rs".into(),
        contains: "42".into(),
    }];
    let runs = (0..rng.range(1, 2))
        .map(|r| Run {
            id: format!("r{r}"),
            model: "model-1".into(),
            system_prompt: String::new(),
            steps: Vec::new(),
        })
        .collect::<Vec<_>>();
    let mut scenario = Scenario {
        name: SafeName::new(format!("random-{seed:x}")).expect("random-HEX is a safe name"),
        description: format!("generated from seed {seed}"),
        files,
        tests,
        runs,
    };
    let mut labels: Vec<String> = Vec::new();
    let mut entries = 0usize;
    let mut n_label = 0;
    for r in 0..scenario.runs.len() {
        let n = rng.range(1, max_steps.max(1) as u64);
        for s in 0..n {
            let mut label = |rng: &mut Rng| {
                rng.chance(1, 2).then(|| {
                    n_label += 1;
                    format!("l{n_label}")
                })
            };
            let step = match rng.below(15) {
                0 | 1 => Step::User {
                    text: format!("request {r}.{s}"),
                    label: label(&mut rng),
                    reply_to: reply_to(&mut rng, &labels),
                },
                2 => Step::Assistant {
                    text: format!("answer {r}.{s}"),
                    label: label(&mut rng),
                    reply_to: reply_to(&mut rng, &labels),
                },
                9 if entries > 0 => Step::Compact {
                    summary: format!("summary at {r}.{s}"),
                    // Up to one more than there is to keep: the store
                    // keeps what exists.
                    keep: rng.range(1, entries as u64 + 1) as usize,
                },
                10 if !labels.is_empty() => Step::SwitchTo {
                    label: rng.pick(&labels).clone(),
                },
                11 => Step::Checkpoint {},
                12 => Step::Parallel {
                    calls: (0..rng.range(2, MAX_PARALLEL_CALLS as u64))
                        .map(|k| tool(&mut rng, &format!("{r}.{s}.{k}"), false))
                        .collect(),
                    schedule: rng.below(1 << 16),
                },
                13 => Step::Plan {
                    goal: format!("goal {r}.{s}"),
                    steps: (0..rng.range(1, 4))
                        .map(|k| PlanStep {
                            id: format!("p{k}"),
                            title: format!("step {k}"),
                            status: match rng.below(4) {
                                0 => StepStatus::Pending,
                                1 => StepStatus::InProgress,
                                2 => StepStatus::Done,
                                _ => StepStatus::Blocked(format!("waiting on {r}.{s}")),
                            },
                        })
                        .collect(),
                },
                _ => tool(&mut rng, &format!("{r}.{s}"), true),
            };
            if let Some(l) = step.label() {
                labels.push(l.to_string());
            }
            if !matches!(
                step,
                Step::Checkpoint {} | Step::SwitchTo { .. } | Step::Plan { .. }
            ) {
                entries += 1;
            }
            scenario.runs[r].steps.push(step);
        }
    }
    assert!(scenario.validate().is_ok(), "generated scenarios are valid");
    scenario
}

/// A label an earlier message set, now and then: a reply to it.
fn reply_to(rng: &mut Rng, labels: &[String]) -> Option<String> {
    (!labels.is_empty() && rng.chance(1, 3)).then(|| rng.pick(labels).clone())
}

/// A tool step of any kind; `approval` whether it may wait for the
/// scripted human (a parallel call may not), with either outcome.
fn tool(rng: &mut Rng, tag: &str, approval: bool) -> Step {
    let approval = if approval && rng.chance(1, 5) {
        Some(if rng.chance(1, 3) {
            Decision::Denied
        } else {
            Decision::Approved
        })
    } else {
        None
    };
    match rng.below(7) {
        0 => Step::ReadFile {
            path: rng
                .pick(&["src/lib.rs", "NOTES.md", "missing.txt"])
                .to_string(),
            approval,
        },
        1 => Step::RunTests { approval },
        2 => Step::WriteFile {
            path: "src/lib.rs".into(),
            content: format!("fn answer() -> u32 {{ 42 }} // {tag}\n"),
            approval,
        },
        3 => Step::AppendLine {
            path: "NOTES.md".into(),
            line: format!("note {tag}"),
            approval,
        },
        4 | 5 => Step::Remote {
            service: rng.pick(&["deploy", "chat", "ci"]).to_string(),
            action: format!("action {tag}"),
            approval,
        },
        _ => Step::LargeOutput {
            bytes: blob_size(rng),
            approval,
        },
    }
}

/// A blob size from each class a store may treat apart: a byte, less than
/// a page, around a page boundary, tens of kilobytes, and (rarely, as it
/// costs every trial its writing) a quarter of a mebibyte and more.
fn blob_size(rng: &mut Rng) -> u64 {
    match rng.below(10) {
        0 => 1,
        1 | 2 => rng.range(2, 4095),
        3 => rng.range(4095, 4097),
        9 => rng.range(256 << 10, 300 << 10),
        _ => rng.range(20_000, 40_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_scenarios_are_valid_and_deterministic() {
        for seed in 0..200 {
            let s = random_scenario(seed, 6);
            assert!(s.validate().is_ok(), "seed {seed}: {:?}", s.validate());
            assert_eq!(s, random_scenario(seed, 6));
            assert!(s
                .runs
                .iter()
                .all(|r| !r.steps.is_empty() && r.steps.len() <= 6));
        }
    }

    /// Every kind of step, each approval outcome, each plan-step status
    /// and each blob size class appears within 200 seeds: a kind the
    /// generator never draws is a part of the store no random trial reaches.
    #[test]
    fn generated_scenarios_use_every_step_kind_and_option() {
        let mut seen = std::collections::BTreeSet::new();
        let mut note = |step: &Step, parallel: bool| {
            let kind = serde_json::to_value(step).expect("a step serializes")["do"]
                .as_str()
                .expect("a step names what it does")
                .to_string();
            seen.insert(kind.clone());
            if parallel {
                seen.insert(format!("parallel {kind}"));
            }
            if let Some((_, approval)) = step.tool() {
                seen.insert(format!("approval {approval:?}"));
            }
            match step {
                Step::Plan { steps, .. } => seen.extend(steps.iter().map(|p| match &p.status {
                    StepStatus::Blocked(_) => "plan blocked".to_string(),
                    other => format!("plan {other:?}"),
                })),
                Step::LargeOutput { bytes, .. } => {
                    seen.insert(
                        match bytes {
                            1 => "blob 1 byte",
                            2..=4094 => "blob under a page",
                            4095..=4097 => "blob at a page",
                            20_000..=40_000 => "blob tens of KiB",
                            _ => "blob over 256 KiB",
                        }
                        .to_string(),
                    );
                }
                Step::User {
                    reply_to: Some(_), ..
                } => {
                    seen.insert("user reply".into());
                }
                Step::Assistant { label: Some(_), .. } => {
                    seen.insert("assistant label".into());
                }
                Step::Parallel { schedule, .. } if *schedule != 0 => {
                    seen.insert("parallel schedule".into());
                }
                _ => {}
            }
        };
        for seed in 0..200 {
            for step in random_scenario(seed, 8).runs.iter().flat_map(|r| &r.steps) {
                note(step, false);
                if let Step::Parallel { calls, .. } = step {
                    calls.iter().for_each(|c| note(c, true));
                }
            }
        }
        let tools = crate::scenario::ToolKind::ALL.map(crate::scenario::ToolKind::name);
        let kinds = [
            "user",
            "assistant",
            "plan",
            "compact",
            "switch_to",
            "checkpoint",
            "parallel",
        ]
        .into_iter()
        .chain(tools);
        let options = [
            "approval None",
            "approval Some(Approved)",
            "approval Some(Denied)",
            "plan Pending",
            "plan InProgress",
            "plan Done",
            "plan blocked",
            "blob 1 byte",
            "blob under a page",
            "blob at a page",
            "blob tens of KiB",
            "blob over 256 KiB",
            "user reply",
            "assistant label",
            "parallel schedule",
        ];
        let missing: Vec<String> = kinds
            .chain(options)
            .map(|k| k.to_string())
            .chain(tools.iter().map(|t| format!("parallel {t}")))
            .filter(|k| !seen.contains(k))
            .collect();
        assert!(missing.is_empty(), "never generated: {missing:?}");
    }
}
