//! The scratch directories a campaign owns: one fresh directory per
//! campaign under the base (`--dir`), trial directories inside it, and
//! what is kept of a failing trial. Nothing outside a campaign's own
//! directory is ever written or removed, and what is kept only ever goes
//! into directories made for it ([`keep_dir`]).

use crate::campaign::config::ScenarioSource;
use crate::scenario::SafeName;
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

/// Makes `keep/SCENARIO/WHAT`, the directory one failing trial or probe
/// is kept in (`WHAT` its plan), and returns it. `keep` was absent or
/// empty when the run started (`agentchaos` refuses any other), so
/// everything under it is this run's: the directory is made here, never
/// one that existed, and nothing is removed or overwritten. An
/// `AlreadyExists` error says this run already kept that plan (a sampled
/// plan drawn twice).
pub fn keep_dir(keep: &Path, scenario: &SafeName, what: &str) -> std::io::Result<PathBuf> {
    // A plan or probe is printed from a parsed, typed value; this keeps
    // any that could leave `keep/SCENARIO/` (a '/', "..") from becoming a path.
    let one_component = !what.is_empty()
        && what.len() <= 255
        && what != "."
        && what != ".."
        && !what.chars().any(|c| c == '/' || c.is_control());
    if !one_component {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what:?} is not one path component"),
        ));
    }
    let parent = keep.join(scenario);
    std::fs::create_dir_all(&parent)?;
    let dest = parent.join(what);
    std::fs::create_dir(&dest)?;
    Ok(dest)
}

/// Keeps a failing trial's directory `dir` in [`keep_dir`] with a
/// `VIOLATIONS.txt`; returns where.
pub fn keep_trial(
    keep: &Path,
    dir: &Path,
    source: &ScenarioSource,
    plan: &Plan,
    violations: &[Violation],
    error: Option<&str>,
    replay: &str,
) -> std::io::Result<PathBuf> {
    let dest = keep_dir(keep, &source.scenario.name, &plan.to_string())?;
    copy_dir(dir, &dest)?;
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
    std::fs::write(dest.join("VIOLATIONS.txt"), notes)?;
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_directory_is_always_new_and_inside_keep() {
        let tmp = tempfile::tempdir().unwrap();
        let keep = tmp.path().join("keep");
        let name = SafeName::new("small").unwrap();
        let plans = [
            Plan::kill(5).to_string(),
            "kill@9+tear@3:10".parse::<Plan>().unwrap().to_string(),
            "sys-tear@4:7".parse::<Plan>().unwrap().to_string(),
        ];
        for plan in &plans {
            let dest = keep_dir(&keep, &name, plan).unwrap();
            assert_eq!(dest, keep.join("small").join(plan));
        }
        let again = keep_dir(&keep, &name, &plans[0]).unwrap_err();
        assert_eq!(again.kind(), std::io::ErrorKind::AlreadyExists);
        for bad in ["", ".", "..", "a/b", "../x", "a\nb"] {
            let e = keep_dir(&keep, &name, bad).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad:?}");
        }
        let made: Vec<_> = std::fs::read_dir(keep.join("small")).unwrap().collect();
        assert_eq!(made.len(), plans.len());
    }
}
