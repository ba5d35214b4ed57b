//! Counting trials of the many-workers campaign: the strike points of
//! each request of the first session's owner, of the heir's takeover and
//! of the owner's close, counted in a trial whose strikes never fire on
//! the path the plans take, from which the `--every-point` and
//! `--every-statement` plans are enumerated. A count from a trial with a
//! violation is the store's failure: it would plan nothing real.

use std::path::Path;

use super::{
    kill_before_takeover, leave_before_close, trial_in, Database, WorkersConfig, WorkersError,
};
use crate::nemesis::workers::{LeaseFault, Strike, WorkerPlan};
use crate::store::StoreBackend;

/// The strike points of each request of the first session's owner in a
/// strike-free trial, request 0 first: with `db` (the campaign's cluster)
/// its statements, through the proxies, what [`super::statement_plans`]
/// enumerates; without, agentstore in-process's crash points, what
/// [`super::crash_point_every_plans`] enumerates.
pub fn strike_point_counts(
    cfg: &WorkersConfig,
    backend: &dyn StoreBackend,
    scratch: &Path,
    db: Option<&mut Database>,
) -> Result<Vec<usize>, WorkersError> {
    counting_trial(cfg, backend, scratch, db, WorkerPlan::default()).map(|c| c.requests)
}

/// The strike points of the heir's takeover after [`super::kill_before_takeover`],
/// what [`super::takeover_every_plans`] enumerates: with `db` its statements,
/// without agentstore in-process's crash points. Counted in a trial whose
/// takeover kill is armed past any point it has, the same path the plans
/// take.
pub fn takeover_point_count(
    cfg: &WorkersConfig,
    backend: &dyn StoreBackend,
    scratch: &Path,
    db: Option<&mut Database>,
) -> Result<usize, WorkersError> {
    let mut plan =
        kill_before_takeover().then(Strike::TakeoverStatement(LeaseFault::Kill, usize::MAX), 0);
    if db.is_none() {
        plan = plan.at_crash_points();
    }
    let counted = counting_trial(cfg, backend, scratch, db, plan)?;
    counted.takeover.ok_or_else(|| {
        WorkersError::Harness(format!(
            "the trial that counts a takeover's strike points took nothing over after {}",
            kill_before_takeover()
        ))
    })
}

/// The statements of the owner's close in [`super::leave_before_close`], what
/// [`super::close_every_plans`] enumerates (`--postgres` only). Counted in a
/// trial whose close kill is armed past any statement it has, the same
/// path the plans take.
pub fn close_point_count(
    cfg: &WorkersConfig,
    backend: &dyn StoreBackend,
    scratch: &Path,
    db: &mut Database,
) -> Result<usize, WorkersError> {
    let plan = leave_before_close().then(Strike::CloseStatement(LeaseFault::Kill, usize::MAX), 0);
    let counted = counting_trial(cfg, backend, scratch, Some(db), plan)?;
    counted.close.ok_or_else(|| {
        WorkersError::Harness(format!(
            "the trial that counts a close's statements closed nothing after {}",
            leave_before_close()
        ))
    })
}

/// What a counting trial counted.
#[derive(Debug, Default)]
pub(super) struct PointCounts {
    /// The strike points of each request of the first session's owner.
    pub(super) requests: Vec<usize>,
    /// The crash points of a takeover that passed its armed kill.
    pub(super) takeover: Option<usize>,
    /// The statements of a close that passed its armed kill.
    pub(super) close: Option<usize>,
}

/// Runs `plan` counting strike points ([`PointCounts`]); a violation is
/// the store's failure: a count from a broken run would plan nothing real.
fn counting_trial(
    cfg: &WorkersConfig,
    backend: &dyn StoreBackend,
    scratch: &Path,
    db: Option<&mut Database>,
    plan: WorkerPlan,
) -> Result<PointCounts, WorkersError> {
    let dir = crate::campaign::scratch::campaign_dir(scratch)
        .map_err(|e| WorkersError::Harness(e.to_string()))?;
    let outcome = trial_in(cfg, backend, plan, &dir, db, true);
    let _ = std::fs::remove_dir_all(&dir);
    let (trial, counts) = outcome?;
    match trial.violations.first() {
        None => Ok(counts),
        Some(v) => Err(WorkersError::Store(format!(
            "the trial that counts the strike points failed {}: {}",
            v.invariant.name(),
            v.found
        ))),
    }
}
