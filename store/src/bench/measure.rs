//! Timing loops and latency summaries.
//!
//! Every operation is timed on its own and recorded in an HDR histogram (ns,
//! 3 significant digits), so percentiles are exact to 0.1 % whatever the
//! spread. This module owns the loops and the arithmetic; it never decides
//! what is measured.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

/// Largest latency the histograms track exactly (longer ones saturate).
const MAX_TRACKED_NS: u64 = 60_000_000_000;

/// How long one measurement runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Wall time of the measured loop (warm-up excluded).
    pub time: Duration,
    /// Stop earlier after this many operations, so that a no-sync loop does
    /// not fill the disk with page-cache writes.
    pub max_ops: u64,
}

impl Budget {
    /// Time spent warming up before a measurement (not recorded).
    pub fn warmup(&self) -> Duration {
        (self.time / 10).min(Duration::from_millis(200))
    }
}

/// The raw outcome of one measurement: every latency, and the wall time of
/// the loop that produced them.
#[derive(Debug, Clone)]
pub struct Latencies {
    hist: Histogram<u64>,
    elapsed: Duration,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            hist: Histogram::new_with_bounds(1, MAX_TRACKED_NS, 3)
                .expect("constant histogram bounds are valid"),
            elapsed: Duration::ZERO,
        }
    }
}

impl Latencies {
    /// Records one operation that took `d`.
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.hist.saturating_record(ns);
    }

    /// Adds wall time during which the recorded operations ran.
    pub fn add_elapsed(&mut self, d: Duration) {
        self.elapsed += d;
    }

    /// Adds a later slice of the same measurement (counts and wall times add up).
    pub fn absorb(&mut self, slice: &Latencies) {
        self.hist
            .add(&slice.hist)
            .expect("histograms built with the same bounds always merge");
        self.elapsed += slice.elapsed;
    }

    /// Merges another measurement of the same thing taken concurrently
    /// (latencies add up, wall time is the longer of the two).
    pub fn merge_concurrent(&mut self, other: &Latencies) {
        self.hist
            .add(&other.hist)
            .expect("histograms built with the same bounds always merge");
        self.elapsed = self.elapsed.max(other.elapsed);
    }

    /// Number of operations recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The numbers a report shows.
    pub fn summary(&self) -> Summary {
        let count = self.hist.len();
        let secs = self.elapsed.as_secs_f64();
        let us = |ns: u64| ns as f64 / 1000.0;
        Summary {
            count,
            ops_per_s: if secs > 0.0 { count as f64 / secs } else { 0.0 },
            us_per_op: if count > 0 {
                secs * 1e6 / count as f64
            } else {
                0.0
            },
            p50_us: us(self.hist.value_at_quantile(0.5)),
            p99_us: us(self.hist.value_at_quantile(0.99)),
            p999_us: us(self.hist.value_at_quantile(0.999)),
            max_us: us(self.hist.max()),
        }
    }

    /// Points of the latency CDF: (latency in µs, fraction of operations at
    /// or below it), on a fixed grid of quantiles that is dense in the tail.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        if self.hist.is_empty() {
            return Vec::new();
        }
        let mut qs: Vec<f64> = (0..=198).map(|i| f64::from(i) / 200.0).collect();
        qs.extend([0.995, 0.999, 0.9995, 0.9999, 1.0]);
        qs.into_iter()
            .map(|q| (self.hist.value_at_quantile(q) as f64 / 1000.0, q))
            .collect()
    }
}

/// What a report shows for one measurement. Times are in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub count: u64,
    pub ops_per_s: f64,
    /// Wall time per operation (the inverse of `ops_per_s`, as pg_test_fsync prints it).
    pub us_per_op: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// Something measured in time slices: runs for up to `time` (or `max_ops`
/// operations) and records each operation's latency and the slice's wall
/// time into the given [`Latencies`].
pub type Slice<'a, E> = dyn FnMut(Duration, u64, &mut Latencies) -> Result<(), E> + 'a;

/// A slice runner calling `op` back to back on this thread.
pub fn sequential<'a, E: 'a>(
    mut op: impl FnMut() -> Result<(), E> + 'a,
) -> impl FnMut(Duration, u64, &mut Latencies) -> Result<(), E> + 'a {
    move |time, max_ops, lat| run_for(lat, time, max_ops, &mut op)
}

/// A slice runner calling `op` from `threads` threads at once, all starting
/// and stopping together; the slice's rate is over all threads. The first
/// error stops every thread and is returned.
pub fn concurrent<'a, E: Send + 'a>(
    threads: usize,
    op: impl Fn() -> Result<(), E> + Sync + 'a,
) -> impl FnMut(Duration, u64, &mut Latencies) -> Result<(), E> + 'a {
    let threads = threads.max(1);
    move |time, max_ops, lat| {
        let failed = AtomicBool::new(false);
        let per_thread = (max_ops / threads as u64).max(1);
        let results: Vec<Result<Latencies, E>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let (op, failed) = (&op, &failed);
                    scope.spawn(move || {
                        let mut mine = Latencies::default();
                        let mut checked = || {
                            if failed.load(Ordering::Relaxed) {
                                return Err(None);
                            }
                            op().map_err(Some)
                        };
                        match run_for(&mut mine, time, per_thread, &mut checked) {
                            Ok(()) => Ok(mine),
                            Err(Some(e)) => {
                                failed.store(true, Ordering::Relaxed);
                                Err(Some(e))
                            }
                            // Another thread failed: its error is the one returned.
                            Err(None) => Ok(mine),
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .map(|r| r.map_err(|e| e.expect("only the failing thread returns an error")))
                .collect()
        });
        let mut slice = Latencies::default();
        for r in results {
            slice.merge_concurrent(&r?);
        }
        lat.absorb(&slice);
        Ok(())
    }
}

/// Runs one slice runner for a warm-up, then for `budget`.
pub fn measure<E>(budget: Budget, slice: &mut Slice<'_, E>) -> Result<Latencies, E> {
    let mut out = measure_interleaved(budget, 1, &mut [slice])?;
    Ok(out.remove(0))
}

/// Measures several contenders in alternating slices over `rounds` rounds,
/// so that a drift of the disk during the run (other tenants, a host-side
/// rate limiter, write-back) hits all of them alike and their ratios stay
/// fair. Each gets `budget.time` in total, after its share of the warm-up.
pub fn measure_interleaved<E>(
    budget: Budget,
    rounds: u32,
    contenders: &mut [&mut Slice<'_, E>],
) -> Result<Vec<Latencies>, E> {
    let n = contenders.len();
    let share = u32::try_from(n).unwrap_or(u32::MAX).max(1);
    for c in contenders.iter_mut() {
        let warm_ops = (budget.max_ops / 10 / u64::from(share)).max(1);
        c(budget.warmup() / share, warm_ops, &mut Latencies::default())?;
    }
    let rounds = rounds.max(1);
    let slice = budget.time / rounds;
    let max_ops = (budget.max_ops / u64::from(rounds)).max(1);
    let mut out: Vec<Latencies> = contenders.iter().map(|_| Latencies::default()).collect();
    for round in 0..rounds as usize {
        // Rotate who goes first, so that whatever one slice leaves behind
        // (write-back, a drained rate limiter) does not always hit the same one.
        for k in 0..n {
            let i = (round + k) % n;
            contenders[i](slice, max_ops, &mut out[i])?;
        }
    }
    Ok(out)
}

/// Times calls of `op` until `time` has passed or `max_ops` were made, or
/// until SIGINT or SIGTERM arrived (the suite then stops, see
/// [`crate::interrupt`]).
fn run_for<E>(
    lat: &mut Latencies,
    time: Duration,
    max_ops: u64,
    op: &mut dyn FnMut() -> Result<(), E>,
) -> Result<(), E> {
    let start = Instant::now();
    let mut done = 0u64;
    let mut now = start;
    while now.duration_since(start) < time && done < max_ops && !crate::interrupt::requested() {
        let t0 = now;
        op()?;
        now = Instant::now();
        lat.record(now - t0);
        done += 1;
    }
    lat.add_elapsed(now - start);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_reads_percentiles_and_rates_from_recorded_values() {
        let mut lat = Latencies::default();
        // 1000 operations: 990 of 100 µs, 9 of 1 ms, 1 of 10 ms.
        for _ in 0..990 {
            lat.record(Duration::from_micros(100));
        }
        for _ in 0..9 {
            lat.record(Duration::from_millis(1));
        }
        lat.record(Duration::from_millis(10));
        lat.add_elapsed(Duration::from_millis(200));
        let s = lat.summary();
        assert_eq!(s.count, 1000);
        assert!((s.ops_per_s - 5000.0).abs() < 1e-6);
        assert!((s.us_per_op - 200.0).abs() < 1e-6);
        // 3 significant digits: values come back within 0.1 %.
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.001;
        assert!(close(s.p50_us, 100.0), "{}", s.p50_us);
        assert!(close(s.p99_us, 100.0), "{}", s.p99_us);
        assert!(close(s.p999_us, 1000.0), "{}", s.p999_us);
        assert!(close(s.max_us, 10_000.0), "{}", s.max_us);
    }

    #[test]
    fn empty_measurement_summarises_to_zeros_not_nan() {
        let s = Latencies::default().summary();
        assert_eq!(s.count, 0);
        assert_eq!(s.ops_per_s, 0.0);
        assert_eq!(s.us_per_op, 0.0);
        assert!(Latencies::default().cdf().is_empty());
    }

    #[test]
    fn cdf_is_monotonic_and_ends_at_one() {
        let mut lat = Latencies::default();
        for i in 1..=500u64 {
            lat.record(Duration::from_micros(i));
        }
        let cdf = lat.cdf();
        assert_eq!(cdf.last().map(|p| p.1), Some(1.0));
        for w in cdf.windows(2) {
            assert!(w[0].0 <= w[1].0 && w[0].1 < w[1].1, "{w:?}");
        }
    }

    #[test]
    fn concurrent_merge_adds_counts_and_keeps_the_longer_wall_time() {
        let mut a = Latencies::default();
        let mut b = Latencies::default();
        a.record(Duration::from_micros(5));
        b.record(Duration::from_micros(7));
        b.record(Duration::from_micros(9));
        a.add_elapsed(Duration::from_secs(1));
        b.add_elapsed(Duration::from_secs(2));
        a.merge_concurrent(&b);
        assert_eq!(a.count(), 3);
        assert!((a.summary().ops_per_s - 1.5).abs() < 1e-9);
    }

    #[test]
    fn loops_stop_at_the_op_cap_and_propagate_errors() {
        let budget = Budget {
            time: Duration::from_secs(60),
            max_ops: 25,
        };
        let lat = measure::<()>(budget, &mut sequential(|| Ok(()))).unwrap();
        assert_eq!(lat.count(), 25);
        let mut calls = 0;
        let err = measure(
            budget,
            &mut sequential(|| {
                calls += 1;
                if calls == 3 {
                    Err("boom")
                } else {
                    Ok(())
                }
            }),
        );
        assert_eq!(err.unwrap_err(), "boom");
    }

    #[test]
    fn concurrent_loops_share_the_op_cap_and_stop_on_the_first_error() {
        let budget = Budget {
            time: Duration::from_secs(60),
            max_ops: 40,
        };
        let lat = measure::<()>(budget, &mut concurrent(4, || Ok(()))).unwrap();
        assert_eq!(lat.count(), 40);
        let calls = std::sync::atomic::AtomicU32::new(0);
        let err = measure(
            budget,
            &mut concurrent(4, || {
                if calls.fetch_add(1, Ordering::SeqCst) == 20 {
                    Err("disk on fire")
                } else {
                    Ok(())
                }
            }),
        );
        assert_eq!(err.unwrap_err(), "disk on fire");
    }

    #[test]
    fn interleaving_gives_each_operation_its_share() {
        let budget = Budget {
            time: Duration::from_secs(60),
            max_ops: 40,
        };
        let mut a = sequential(|| -> Result<(), ()> { Ok(()) });
        let mut b = concurrent(2, || -> Result<(), ()> { Ok(()) });
        let lats = measure_interleaved(budget, 4, &mut [&mut a, &mut b]).unwrap();
        // 4 rounds of at most 10 each.
        assert_eq!(lats[0].count(), 40);
        assert_eq!(lats[1].count(), 40);
    }
}
