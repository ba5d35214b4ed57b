//! The worker pool and the progress every campaign runs on: `--jobs`
//! workers take items in order, a signal stops them between items, and
//! the results come back in item order whoever finished first. Progress is
//! a bar on a terminal, else a line on stderr every 10 s; it never writes
//! to stdout (the report's).

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the progress line is printed when stderr is no terminal.
pub const PROGRESS_PERIOD: Duration = Duration::from_secs(10);

/// Overrides [`PROGRESS_PERIOD`], in milliseconds (for tests).
pub const PROGRESS_PERIOD_ENV: &str = "AGENTCHAOS_PROGRESS_PERIOD_MS";

/// The progress of one campaign phase: `total` items, each `what`
/// (`trials`, `crash points of small`), with the violations found so far.
#[derive(Debug)]
pub struct Progress {
    counts: Arc<Counts>,
    shown: Shown,
}

#[derive(Debug)]
struct Counts {
    what: String,
    total: usize,
    done: AtomicUsize,
    violations: AtomicUsize,
    started: Instant,
}

impl Counts {
    fn line(&self) -> String {
        format!(
            "agentchaos: {}/{} {}, {} violation(s) so far, {}s elapsed",
            self.done.load(Ordering::SeqCst),
            self.total,
            self.what,
            self.violations.load(Ordering::SeqCst),
            self.started.elapsed().as_secs()
        )
    }
}

#[derive(Debug)]
enum Shown {
    Bar(indicatif::ProgressBar),
    /// A thread printing [`Counts::line`] every period, and once at the end.
    Lines {
        stop: mpsc::Sender<()>,
        thread: std::thread::JoinHandle<()>,
    },
}

impl Progress {
    /// `None` when not `enabled` (`--quiet`).
    pub fn start(enabled: bool, total: usize, what: &str) -> Option<Progress> {
        if !enabled {
            return None;
        }
        let counts = Arc::new(Counts {
            what: what.to_string(),
            total,
            done: AtomicUsize::new(0),
            violations: AtomicUsize::new(0),
            started: Instant::now(),
        });
        let shown = if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(&format!(
                    "{{bar:40}} {{pos}}/{{len}} {what}  {{per_sec}}  eta {{eta}}"
                ))
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            Shown::Bar(bar)
        } else {
            let period = std::env::var(PROGRESS_PERIOD_ENV)
                .ok()
                .and_then(|ms| ms.parse().ok())
                .map_or(PROGRESS_PERIOD, Duration::from_millis);
            let (stop, told) = mpsc::channel::<()>();
            let c = Arc::clone(&counts);
            // Silent once a signal arrived: the signal's line is the last.
            let thread = std::thread::spawn(move || loop {
                let end = !matches!(
                    told.recv_timeout(period),
                    Err(mpsc::RecvTimeoutError::Timeout)
                );
                if agentstore::interrupt::requested() {
                    return;
                }
                eprintln!("{}", c.line());
                if end {
                    return;
                }
            });
            Shown::Lines { stop, thread }
        };
        Some(Progress { counts, shown })
    }

    /// One more item done, which found `violations`.
    pub fn inc(&self, violations: usize) {
        self.counts.done.fetch_add(1, Ordering::SeqCst);
        self.counts
            .violations
            .fetch_add(violations, Ordering::SeqCst);
        if let Shown::Bar(bar) = &self.shown {
            bar.inc(1);
        }
    }

    /// Clears the bar, or prints the last line.
    pub fn finish(self) {
        match self.shown {
            Shown::Bar(bar) => bar.finish_and_clear(),
            Shown::Lines { stop, thread } => {
                drop(stop);
                let _ = thread.join();
            }
        }
    }
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
