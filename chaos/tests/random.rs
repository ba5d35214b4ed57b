//! Random scenarios, generated with proptest, through a short campaign
//! against the unmodified store: it must pass all of them. On failure
//! proptest shrinks the step list to a minimal failing scenario.

use std::collections::BTreeMap;
use std::path::PathBuf;

use agentchaos::campaign::config::{Config, Mode, ScenarioSource};
use agentchaos::campaign::runner;
use agentchaos::scenario::{Run, SafeName, Scenario, Step, TestSpec};
use agentchaos::store::ReferenceBackend;
use agentchaos_protocol::event::Decision;
use proptest::prelude::*;

fn approval() -> impl Strategy<Value = Option<Decision>> {
    prop_oneof![
        6 => Just(None),
        2 => Just(Some(Decision::Approved)),
        1 => Just(Some(Decision::Denied)),
    ]
}

fn label() -> impl Strategy<Value = String> {
    (0..3u8).prop_map(|i| format!("l{i}"))
}

/// A tool step a `parallel` step may hold: no approval.
fn parallel_call() -> impl Strategy<Value = Step> {
    prop_oneof![
        prop_oneof![Just("a.txt"), Just("missing.txt")].prop_map(|p| Step::ReadFile {
            path: p.into(),
            approval: None
        }),
        Just(Step::RunTests { approval: None }),
        (0..3u8).prop_map(|v| Step::WriteFile {
            path: "a.txt".into(),
            content: format!("fixed {v}\n"),
            approval: None
        }),
        Just(Step::AppendLine {
            path: "log.txt".into(),
            line: "entry".into(),
            approval: None
        }),
        prop_oneof![Just("deploy"), Just("chat")].prop_map(|s| Step::Remote {
            service: s.into(),
            action: "go".into(),
            approval: None,
        }),
        (17_000..30_000u64).prop_map(|bytes| Step::LargeOutput {
            bytes,
            approval: None
        }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (prop::collection::vec(parallel_call(), 2..4), 0..1000u64)
            .prop_map(|(calls, schedule)| Step::Parallel { calls, schedule }),
        (proptest::option::of(label())).prop_map(|label| Step::User {
            text: "do it".into(),
            label,
            reply_to: None
        }),
        (proptest::option::of(label())).prop_map(|reply_to| Step::Assistant {
            text: "ok".into(),
            label: None,
            reply_to
        }),
        prop_oneof![Just("a.txt"), Just("missing.txt")].prop_map(|p| Step::ReadFile {
            path: p.into(),
            approval: None
        }),
        Just(Step::RunTests { approval: None }),
        (0..3u8, approval()).prop_map(|(v, approval)| Step::WriteFile {
            path: "a.txt".into(),
            content: format!("fixed {v}\n"),
            approval
        }),
        approval().prop_map(|approval| Step::AppendLine {
            path: "log.txt".into(),
            line: "entry".into(),
            approval
        }),
        (prop_oneof![Just("deploy"), Just("chat")], approval()).prop_map(|(s, approval)| {
            Step::Remote {
                service: s.into(),
                action: "go".into(),
                approval,
            }
        }),
        (17_000..30_000u64).prop_map(|bytes| Step::LargeOutput {
            bytes,
            approval: None
        }),
        (1..3usize).prop_map(|keep| Step::Compact {
            summary: "so far".into(),
            keep
        }),
        label().prop_map(|label| Step::SwitchTo { label }),
        Just(Step::Checkpoint {}),
    ]
}

fn scenario(runs: Vec<Vec<Step>>) -> Scenario {
    Scenario {
        name: SafeName::new("proptest").unwrap(),
        description: String::new(),
        files: BTreeMap::from([("a.txt".into(), "broken\n".into())]),
        tests: vec![TestSpec {
            name: "fixed".into(),
            file: "a.txt".into(),
            contains: "fixed".into(),
        }],
        runs: runs
            .into_iter()
            .enumerate()
            .map(|(i, steps)| Run {
                id: format!("r{i}"),
                model: "m".into(),
                system_prompt: String::new(),
                steps,
            })
            .collect(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_scenarios_pass_a_short_campaign(
        runs in prop::collection::vec(prop::collection::vec(step(), 1..6), 1..3),
        seed in any::<u64>(),
    ) {
        let s = scenario(runs);
        prop_assume!(s.validate().is_ok());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proptest.json");
        std::fs::write(&path, s.to_json()).unwrap();
        let cfg = Config {
            backend: &ReferenceBackend::default(),
            agent_exe: PathBuf::from(env!("CARGO_BIN_EXE_agentchaos")),
            store_fault: None,
            mode: Mode::Sampled(10),
            nemesis: agentchaos::nemesis::Nemeses::POINTS,
            // The deepest restart keeps restarted lives under fault at a fraction
            // of the trials every restart costs.
            restarts: agentchaos::nemesis::Restarts::Deepest,
            seed,
            jobs: 2,
            shard: None,
            dir: dir.path().to_path_buf(),
            keep_failures: None,
            progress: false,
            power_loss: Default::default(),
            hang_timeout: agentchaos::campaign::trial::HANG_TIMEOUT,
            max_input_bytes: agentchaos::scenario::DEFAULT_MAX_INPUT_BYTES,
            schedules: 1,
        };
        let result = runner::run(&cfg, vec![ScenarioSource { path, scenario: s.clone(), random_seed: None, schedule: 0 }]).unwrap();
        let found: Vec<String> = result.scenarios[0]
            .violations()
            .map(|(plan, crash, v)| format!("{plan}: {} ({crash}): expected {}, found {}", v.invariant, v.expected, v.found))
            .chain(result.scenarios[0].errors().iter().map(|(p, e)| format!("{p}: error {e}")))
            .collect();
        prop_assert!(found.is_empty(), "{}\n{}", s.to_json(), found.join("\n"));
    }
}
