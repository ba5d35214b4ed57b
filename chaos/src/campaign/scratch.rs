//! The scratch directories a campaign owns: one fresh directory per
//! campaign under the base (`--dir`), trial directories inside it, and
//! what is kept of a failing trial. Nothing outside a campaign's own
//! directory is ever written or removed.

use crate::campaign::config::ScenarioSource;
use std::path::{Path, PathBuf};

use crate::check::Violation;
use crate::nemesis::Plan;

/// The default place for trial directories: tmpfs when there is one.
/// A SIGKILL keeps the page cache, so kill trials lose nothing to tmpfs;
/// power cuts are modelled explicitly (see `nemesis`).
pub fn default_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && can_write(shm).is_ok() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn can_write(dir: &Path) -> std::io::Result<()> {
    let p = dir.join(format!(".agentchaos-probe-{}", std::process::id()));
    std::fs::write(&p, b"")?;
    std::fs::remove_file(&p)
}

/// Copies a directory tree (trial directories hold only files and directories).
pub fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let ty = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if ty.is_dir() {
            copy_dir(&entry.path(), &dest)?;
        } else if ty.is_file() {
            std::fs::copy(entry.path(), dest)?;
        }
    }
    Ok(())
}

/// The campaign directory could not be made (the harness's side).
#[derive(Debug, thiserror::Error)]
#[error("cannot create the trial directory {}: {source}", dir.display())]
pub struct CampaignDirError {
    dir: PathBuf,
    #[source]
    source: std::io::Error,
}

/// The most scenarios, and the most trials, one campaign names a
/// directory for: the widths of [`trace_dir`]'s and [`trial_dir`]'s names.
pub const MAX_SCENARIOS: usize = 1_000_000;
pub const MAX_TRIALS: usize = 10_000_000_000;

/// Where scenario `scenario`'s crash-free run is traced, in `campaign`.
///
/// Every name a campaign, a replay or a shrink gives a crash-free run's or
/// a trial's directory is as long as every other: the workspace path is in
/// `session_created`, so the store's bytes sit at the same offsets (a
/// damage probe's offset, a tear's byte count) only if the path is as long.
pub fn trace_dir(campaign: &Path, scenario: usize) -> PathBuf {
    assert!(
        scenario < MAX_SCENARIOS,
        "scenario {scenario} of at most {MAX_SCENARIOS}"
    );
    campaign.join(format!("{scenario:06}-crash-free"))
}

/// Where trial `trial` of scenario `scenario` runs, in `campaign`: a name
/// as long as [`trace_dir`]'s.
pub fn trial_dir(campaign: &Path, scenario: usize, trial: usize) -> PathBuf {
    assert!(
        scenario < MAX_SCENARIOS,
        "scenario {scenario} of at most {MAX_SCENARIOS}"
    );
    assert!(trial < MAX_TRIALS, "trial {trial} of at most {MAX_TRIALS}");
    campaign.join(format!("{scenario:06}-{trial:010}"))
}

/// A fresh, unique campaign directory under `base`.
pub fn campaign_dir(base: &Path) -> Result<PathBuf, CampaignDirError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    // Fixed width: the workspace path is in `session_created`, so a replay
    // writes the same bytes as the campaign only if its path is as long.
    let dir = base.join(format!("agentchaos-{:010}-{nanos:08x}", std::process::id()));
    match std::fs::create_dir_all(&dir) {
        Ok(()) => Ok(dir),
        Err(source) => Err(CampaignDirError { dir, source }),
    }
}

pub fn keep_trial(
    keep: &Path,
    dir: &Path,
    source: &ScenarioSource,
    plan: &Plan,
    violations: &[Violation],
    error: Option<&str>,
    replay: &str,
) {
    let dest = keep.join(&source.scenario.name).join(plan.to_string());
    let _ = std::fs::remove_dir_all(&dest);
    if copy_dir(dir, &dest).is_err() {
        return;
    }
    let mut notes = format!(
        "scenario: {}\nplan: {plan}\nreplay: {replay}\n",
        source.path.display(),
    );
    if let Some(e) = error {
        notes.push_str(&format!("error: {e}\n"));
    }
    for v in violations {
        notes.push_str(&format!(
            "\n{} ({})\n  expected: {}\n  found: {}\n  events: {}\n",
            v.invariant,
            v.when,
            v.expected,
            v.found,
            v.events.join(", ")
        ));
    }
    let _ = std::fs::write(dest.join("VIOLATIONS.txt"), notes);
}
