//! The worker pool and the progress bar every campaign runs on: `--jobs`
//! workers take items in order, a signal stops them between items, and
//! the results come back in item order whoever finished first.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The one progress bar of every campaign: `total` items, each `what`
/// (`trials`, `crash points of small`), hidden when not `enabled`.
pub fn progress_bar(enabled: bool, total: usize, what: &str) -> Option<indicatif::ProgressBar> {
    if !enabled {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{bar:40}} {{pos}}/{{len}} {what}  {{per_sec}}  eta {{eta}}"
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}

/// Why an index of [`parallel`] has no result; both are the harness's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// `f` panicked on it: a harness bug.
    #[error("harness bug (panic): {0}")]
    Panicked(String),
    /// SIGINT or SIGTERM arrived before it started.
    #[error("{NOT_RUN}")]
    NotRun,
}

/// What an item not run says: SIGINT or SIGTERM arrived before it started.
pub const NOT_RUN: &str = "not run: interrupted by a signal";

/// Runs `f(0..n)` on `jobs` threads; results in index order. A panic in
/// `f` (a harness bug) becomes that index's [`PoolError::Panicked`], never a crash of the
/// campaign. Once SIGINT or SIGTERM arrived ([`agentstore::interrupt`]), no
/// thread starts another index (those that run finish, their children
/// waited for) and each index not started is `Err(PoolError::NotRun)`.
pub fn parallel<T: Send>(
    jobs: usize,
    n: usize,
    f: impl Fn(usize) -> T + Sync,
) -> Vec<Result<T, PoolError>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<T, PoolError>>>> =
        Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, n.max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n || agentstore::interrupt::requested() {
                    break;
                }
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i))).map_err(|p| {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_else(|| "unknown panic".to_string());
                        PoolError::Panicked(msg)
                    });
                results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|r| r.unwrap_or(Err(PoolError::NotRun)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_keeps_order_and_runs_everything() {
        let out = parallel(3, 20, |i| i * 2);
        assert_eq!(out, (0..20).map(|i| Ok(i * 2)).collect::<Vec<_>>());
        assert!(parallel(2, 0, |i| i).is_empty());
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let out = parallel(2, 3, |i| if i == 1 { panic!("boom") } else { i });
        std::panic::set_hook(hook);
        assert_eq!(out[0], Ok(0));
        assert_eq!(out[1], Err(PoolError::Panicked("boom".into())));
    }
}
