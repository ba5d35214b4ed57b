//! What a campaign is asked to do: its [`Config`], the scenarios it runs
//! ([`ScenarioSource`]) and the one-line replay command of any trial.
//! Plain data; it must never run anything.

use std::path::{Path, PathBuf};

use crate::nemesis::{Nemeses, Restarts};
use crate::scenario::Scenario;
use crate::store::StoreBackend;

/// How many trials per scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every hit killed, every write torn, every unsynced point power-cut;
    /// every hit of each traced restarted life killed and every write torn.
    Exhaustive,
    /// This many trials per scenario, sampled from the seed.
    Sampled(usize),
}

/// A scenario to test and where its file is (the child reads the file).
#[derive(Debug, Clone)]
pub struct ScenarioSource {
    pub path: PathBuf,
    pub scenario: Scenario,
    /// For generated scenarios: the seed that generated it.
    pub random_seed: Option<u64>,
    /// The parallel appenders' interleaving seed its trials run under
    /// (0: the default schedule; see [`crate::campaign::interleavings`]).
    pub schedule: u64,
}

/// Everything a campaign needs.
#[derive(Debug)]
pub struct Config<'a> {
    pub backend: &'a dyn StoreBackend,
    pub agent_exe: PathBuf,
    pub store_fault: Option<String>,
    pub mode: Mode,
    /// Which nemeses plan the trials.
    pub nemesis: Nemeses,
    /// Which restarted lives are traced and crashed.
    pub restarts: Restarts,
    pub seed: u64,
    pub jobs: usize,
    /// `(k, n)`: run only trials whose index is `k-1` modulo `n`.
    pub shard: Option<(usize, usize)>,
    /// Parent of the campaign directory.
    pub dir: PathBuf,
    pub keep_failures: Option<PathBuf>,
    pub progress: bool,
    /// How far the power-loss nemesis goes, when it runs.
    pub power_loss: PowerLossLimits,
    /// An agent life or a probe that runs this long is hung: killed, and
    /// the store's failure.
    pub hang_timeout: std::time::Duration,
    /// The largest scenario file read (`--max-input-bytes`).
    pub max_input_bytes: u64,
    /// How many interleavings of the parallel appenders a campaign runs
    /// each scenario with a parallel step under (`--schedules`; 1: the
    /// default schedule only).
    pub schedules: usize,
}

/// The bounds of the power-loss nemesis: which persistence models, how
/// many crash points per scenario, how many on-disk states per point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerLossLimits {
    pub models: Vec<crate::nemesis::powerloss::Model>,
    /// States per crash point and model: enumerated up to it, sampled beyond.
    pub max_states: usize,
    /// Crash points per scenario (seeded, always the first and the last
    /// op); `None`: [`PowerLossLimits::DEFAULT_POINTS`] in an exhaustive
    /// campaign, N with `--trials N`.
    pub max_points: Option<usize>,
}

impl PowerLossLimits {
    /// States per point by default: enough to reach every ordering of a
    /// few unsynced writes.
    pub const DEFAULT_STATES: usize = 64;
    /// Crash points per scenario by default: through an adapter every
    /// state costs a store process, and this keeps the nemesis within
    /// about what the trials cost.
    pub const DEFAULT_POINTS: usize = 48;

    /// The crash points per scenario a campaign in `mode` takes.
    pub fn points(&self, mode: Mode) -> usize {
        self.max_points.unwrap_or(match mode {
            Mode::Exhaustive => Self::DEFAULT_POINTS,
            Mode::Sampled(n) => n,
        })
    }
}

impl Default for PowerLossLimits {
    fn default() -> Self {
        PowerLossLimits {
            models: crate::nemesis::powerloss::Model::ALL.to_vec(),
            max_states: Self::DEFAULT_STATES,
            max_points: None,
        }
    }
}

/// The generated scenarios could not be written where the agents read
/// them: the harness's failure (exit 3), naming the path.
#[derive(Debug, thiserror::Error)]
pub enum RandomSourcesError {
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// `n` generated scenarios (seeded from `seed`), written to `dir` so the
/// child agents and replay commands can read them.
pub fn random_sources(
    dir: &Path,
    seed: u64,
    n: usize,
) -> Result<Vec<ScenarioSource>, RandomSourcesError> {
    std::fs::create_dir_all(dir).map_err(|source| RandomSourcesError::Create {
        path: dir.to_path_buf(),
        source,
    })?;
    (0..n)
        .map(|i| {
            let seed = seed.wrapping_mul(1_000_003).wrapping_add(i as u64);
            let scenario = crate::scenario::generate::random_scenario(seed, 6);
            let path = dir.join(format!("{}.json", scenario.name));
            std::fs::write(&path, scenario.to_json()).map_err(|source| {
                RandomSourcesError::Write {
                    path: path.clone(),
                    source,
                }
            })?;
            Ok(ScenarioSource {
                path,
                scenario,
                random_seed: Some(seed),
                schedule: 0,
            })
        })
        .collect()
}

/// The one-line command that reruns a trial (or a probe: its `plan` is
/// `probe:…`); `store_args` are the flags that choose the store
/// (`--adapter 'CMD'`), as the agent gets them.
pub fn replay_command(
    path: &Path,
    plan: &dyn std::fmt::Display,
    store_fault: Option<&str>,
    store_args: &[String],
) -> String {
    let mut cmd = format!(
        "agentchaos replay --scenario {} --plan {plan}",
        crate::shell::word(&path.display().to_string())
    );
    if let Some(f) = store_fault {
        cmd.push_str(&format!(" --store-fault {f}"));
    }
    for a in store_args {
        cmd.push(' ');
        cmd.push_str(&crate::shell::word(a));
    }
    cmd
}

/// The flags a replay command passes to choose the campaign's store:
/// `--store-fault NAME` and/or the backend's (`--adapter 'LINE'`).
pub fn store_flags(store_fault: Option<&str>, store_args: &[String]) -> Vec<String> {
    store_fault
        .iter()
        .flat_map(|f| ["--store-fault".to_string(), f.to_string()])
        .chain(store_args.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::Plan;
    use std::path::Path;

    #[test]
    fn replay_commands_quote_odd_paths() {
        let p = Plan::kill(3);
        assert_eq!(
            replay_command(Path::new("scenarios/a.json"), &p, Some("mark-twice"), &[]),
            "agentchaos replay --scenario scenarios/a.json --plan kill@3 --store-fault mark-twice"
        );
        assert!(
            replay_command(Path::new("my dir/a.json"), &p, None, &[]).contains("'my dir/a.json'")
        );
        let adapter = ["--adapter".to_string(), "/bin/store adapter".to_string()];
        assert!(replay_command(Path::new("a.json"), &p, None, &adapter)
            .ends_with("--plan kill@3 --adapter '/bin/store adapter'"));
    }
}
