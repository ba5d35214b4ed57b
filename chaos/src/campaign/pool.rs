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
    parallel_ready(jobs, n, |_| {}, f)
}

/// [`parallel`], with each thread made ready for its items by `ready(next)`
/// (`next`: the index the thread will likely take next, as a hint; another
/// thread may take it first): once on every thread before any thread takes
/// an index (every thread's first `ready` has returned when the first `f`
/// starts), and again after each of its items while indices remain. What a
/// thread keeps for its items (an adapter's fork server) is started there,
/// off the items' clock. A panic in `ready` is ignored: whatever it did not
/// start, `f` starts when it needs it.
pub fn parallel_ready<T: Send>(
    jobs: usize,
    n: usize,
    ready: impl Fn(usize) + Sync,
    f: impl Fn(usize) -> T + Sync,
) -> Vec<Result<T, PoolError>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<T, PoolError>>>> =
        Mutex::new((0..n).map(|_| None).collect());
    let threads = jobs.clamp(1, n.max(1));
    let all_ready = std::sync::Barrier::new(threads);
    let get_ready = |hint: usize| {
        if hint < n && !agentstore::interrupt::requested() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ready(hint)));
        }
    };
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (next, results, all_ready, get_ready, f) =
                (&next, &results, &all_ready, &get_ready, &f);
            scope.spawn(move || {
                get_ready(t);
                all_ready.wait();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n || agentstore::interrupt::requested() {
                        break;
                    }
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i)))
                        .map_err(|p| {
                            let msg = p
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_else(|| "unknown panic".to_string());
                            PoolError::Panicked(msg)
                        });
                    results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(r);
                    get_ready(next.load(Ordering::SeqCst));
                }
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

    #[test]
    fn every_thread_is_ready_before_the_first_item_starts() {
        let readied = AtomicUsize::new(0);
        let seen = parallel_ready(
            3,
            20,
            |next| {
                assert!(next < 20, "a hint past the items: {next}");
                readied.fetch_add(1, Ordering::SeqCst);
            },
            |i| (i, readied.load(Ordering::SeqCst)),
        );
        for r in seen {
            let (_, readied_before) = r.unwrap();
            assert!(
                readied_before >= 3,
                "an item started before every thread was ready"
            );
        }
        // A panic in `ready` leaves the items to run.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let out = parallel_ready(2, 3, |_| panic!("not ready"), |i| i);
        std::panic::set_hook(hook);
        assert_eq!(out, vec![Ok(0), Ok(1), Ok(2)]);
    }
}
