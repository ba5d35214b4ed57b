//! `agentchaos replay --plan probe:…`: the crash-free run again, then one
//! probe on its store, told in words. It removes its scratch directory
//! when done; only `--keep` keeps the probe's, as a copy.

use std::path::Path;

use crate::campaign::probe::{probe_setup, run, Probe, ProbeError};

/// `agentchaos replay --plan probe:…`: the crash-free run again, then the
/// one probe on its store, told in words. `keep` keeps the probe's scratch
/// directory (the damaged copy, or the fresh session) there.
pub fn replay(
    cfg: &crate::campaign::config::Config<'_>,
    source: crate::campaign::config::ScenarioSource,
    probe: &Probe,
    keep: Option<&Path>,
) -> Result<crate::campaign::replay::Replayed, crate::campaign::trial::TrialError> {
    let dir = crate::campaign::scratch::campaign_dir(&cfg.dir)?;
    let result = replay_in(cfg, source, probe, keep, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn replay_in(
    cfg: &crate::campaign::config::Config<'_>,
    source: crate::campaign::config::ScenarioSource,
    probe: &Probe,
    keep: Option<&Path>,
    dir: &Path,
) -> Result<crate::campaign::replay::Replayed, crate::campaign::trial::TrialError> {
    use std::fmt::Write as _;
    let trace = crate::campaign::scratch::trace_dir(dir, 0);
    let prepared = crate::campaign::prepare::prepare_keeping(cfg, source, &trace)?;
    let name = prepared.source.scenario.name.clone();
    let mut narrative = format!(
        "scenario {name} ({}), probe {probe}\nthe crash-free run wrote {} events\n",
        prepared.source.path.display(),
        prepared.reference.records.len()
    );
    if let Some(u) = &prepared.unusable {
        return Ok(crate::campaign::replay::Replayed {
            narrative,
            violations: Vec::new(),
            error: Some(u.clone()),
            crash: None,
            timeline: None,
        });
    }
    let spec = crate::campaign::trial::TrialDir { dir: trace.clone() }.spec();
    let claimed = cfg
        .backend
        .capabilities()
        .map_err(|e| ProbeError::Harness(format!("cannot learn what the store claims: {e}")))?;
    let setup = probe_setup(cfg, &prepared, &spec, &claimed);
    let scratch = dir.join("probe");
    let outcome = run(&setup, probe, &scratch);
    let replay = crate::campaign::config::replay_command(
        &prepared.source.path,
        &probe.plan(),
        cfg.store_fault.as_deref(),
        &cfg.backend.agent_args(),
    );
    if !outcome.told.is_empty() {
        let _ = writeln!(narrative, "{}", outcome.told);
    }
    let _ = writeln!(
        narrative,
        "{}",
        match (&outcome.error, outcome.violations.is_empty()) {
            (Some(_), _) => "the probe could not be carried out".to_string(),
            (None, true) => format!("the store kept its promise ({})", probe.judged_by(&claimed)),
            (None, false) => format!(
                "the store broke its promise ({})",
                probe.judged_by(&claimed)
            ),
        }
    );
    for v in &outcome.violations {
        narrative.push('\n');
        narrative.push_str(&crate::check::explain(
            v,
            &name,
            &format!("none (probe {probe}, after the crash-free run)"),
            &replay,
        ));
    }
    if let Some(keep) = keep {
        let what = probe.to_string().replace('/', "_");
        let dest = crate::campaign::scratch::keep_dir(keep, &name, &what)
            .and_then(|dest| crate::campaign::scratch::copy_dir(&scratch, &dest).map(|()| dest))
            .map_err(|e| {
                ProbeError::Harness(format!("cannot keep the probe in {}: {e}", keep.display()))
            })?;
        let _ = writeln!(narrative, "probe directory kept in {}", dest.display());
    }
    Ok(crate::campaign::replay::Replayed {
        narrative,
        violations: outcome.violations,
        error: outcome.error.map(crate::campaign::trial::TrialError::from),
        crash: Some(probe.crash_point()),
        timeline: None,
    })
}
