//! Random scenarios, generated from a seed (`agentchaos run --random N`).
//!
//! Small on purpose: most crash-consistency bugs need only a few
//! operations (CrashMonkey's finding), and a small failing scenario shrinks
//! fast. Every generated scenario passes validation. This module must never
//! draw randomness from anything but its seed.

use std::collections::BTreeMap;

use agentchaos_protocol::event::Decision;

use crate::scenario::rng::Rng;
use crate::scenario::{Run, SafeName, Scenario, Step, TestSpec};

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
            let approval = |rng: &mut Rng| {
                rng.chance(1, 5).then(|| {
                    if rng.chance(1, 3) {
                        Decision::Denied
                    } else {
                        Decision::Approved
                    }
                })
            };
            let step = match rng.below(13) {
                0 | 1 => {
                    let label = rng.chance(1, 2).then(|| {
                        n_label += 1;
                        format!("l{n_label}")
                    });
                    labels.extend(label.clone());
                    Step::User {
                        text: format!("request {r}.{s}"),
                        label,
                        reply_to: None,
                    }
                }
                2 => Step::Assistant {
                    text: format!("answer {r}.{s}"),
                    label: None,
                    reply_to: (!labels.is_empty() && rng.chance(1, 3))
                        .then(|| rng.pick(&labels).clone()),
                },
                3 => Step::ReadFile {
                    path: rng
                        .pick(&["src/lib.rs", "NOTES.md", "missing.txt"])
                        .to_string(),
                    approval: None,
                },
                4 => Step::RunTests { approval: None },
                5 => Step::WriteFile {
                    path: "src/lib.rs".into(),
                    content: format!("fn answer() -> u32 {{ 42 }} // {r}.{s}\n"),
                    approval: approval(&mut rng),
                },
                6 => Step::AppendLine {
                    path: "NOTES.md".into(),
                    line: format!("note {r}.{s}"),
                    approval: approval(&mut rng),
                },
                7 | 8 => Step::Remote {
                    service: rng.pick(&["deploy", "chat", "ci"]).to_string(),
                    action: format!("action {r}.{s}"),
                    approval: approval(&mut rng),
                },
                9 if entries > 0 => Step::Compact {
                    summary: format!("summary at {r}.{s}"),
                    keep: rng.range(1, 3) as usize,
                },
                10 if !labels.is_empty() => Step::SwitchTo {
                    label: rng.pick(&labels).clone(),
                },
                11 => Step::Checkpoint {},
                12 => Step::Parallel {
                    calls: (0..rng.range(2, 4))
                        .map(|k| match rng.below(3) {
                            0 => Step::ReadFile {
                                path: "NOTES.md".into(),
                                approval: None,
                            },
                            1 => Step::AppendLine {
                                path: "NOTES.md".into(),
                                line: format!("note {r}.{s}.{k}"),
                                approval: None,
                            },
                            _ => Step::Remote {
                                service: rng.pick(&["deploy", "chat", "ci"]).to_string(),
                                action: format!("action {r}.{s}.{k}"),
                                approval: None,
                            },
                        })
                        .collect(),
                    schedule: 0,
                },
                _ => Step::LargeOutput {
                    bytes: rng.range(20_000, 40_000),
                    approval: None,
                },
            };
            if !matches!(step, Step::Checkpoint {} | Step::SwitchTo { .. }) {
                entries += 1;
            }
            scenario.runs[r].steps.push(step);
        }
    }
    debug_assert!(scenario.validate().is_ok(), "generated scenarios are valid");
    scenario
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
}
