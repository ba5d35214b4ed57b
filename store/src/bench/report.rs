//! The report of one `agentstore bench` run: its JSON shape, the text tables
//! and the ratios between them. Figures and ratios only: what a user's disk
//! should reach is theirs to judge, not the report's.
//!
//! Everything here is pure: numbers in, text or JSON out. Ratios are always
//! against a baseline measured in the same run, never against a constant.

use std::fmt::Write as _;

use serde::Serialize;

use super::machine::Machine;
use super::measure::Summary;
use super::methods::{SyncMethod, Workload};

/// Version of the JSON shape; bump when a field changes meaning.
pub const REPORT_FORMAT: u32 = 4;

/// One complete run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub format: u32,
    /// The agentstore version that measured (for trend lines across releases).
    pub agentstore_version: String,
    pub machine: Machine,
    /// The directory given with `--dir` (the run wrote in a fresh subdirectory of it).
    pub dir: String,
    pub seconds_per_measurement: f64,
    pub methods: Vec<MethodRow>,
    pub store: StoreSection,
    pub group_commit: GroupSection,
    pub ratios: Vec<Ratio>,
}

/// One sync method under one workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodRow {
    pub workload: Workload,
    pub method: SyncMethod,
    pub outcome: Outcome,
}

/// A measurement, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Measured(Summary),
    Unsupported { reason: String },
}

/// What the store section compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Raw `pwrite` + `fdatasync` of the same line bytes: the floor.
    Floor,
    /// The same line written back to back into a pre-zeroed file, then
    /// `fdatasync`: the floor of an append into pre-allocated space.
    ZeroedFdatasync,
    /// The same, on a file opened with `O_DSYNC`.
    ZeroedODsync,
    /// The same, with `pwritev2(RWF_DSYNC)`.
    ZeroedRwfDsync,
    StoreSync,
    /// Batch mode with a single appender (pays the batch delay alone).
    StoreBatch,
    StoreNone,
    /// SQLite, WAL, synchronous=FULL, one transaction per event.
    Sqlite,
}

impl Target {
    pub fn label(self) -> &'static str {
        match self {
            Target::Floor => "raw write+fdatasync (floor)",
            Target::ZeroedFdatasync => "raw pre-zeroed write+fdatasync",
            Target::ZeroedODsync => "raw pre-zeroed O_DSYNC write",
            Target::ZeroedRwfDsync => "raw pre-zeroed RWF_DSYNC write",
            Target::StoreSync => "store, Sync",
            Target::StoreBatch => "store, Batch, 1 appender",
            Target::StoreNone => "store, None (not durable)",
            Target::Sqlite => "SQLite WAL FULL, 1 txn/event",
        }
    }
}

/// The store against the floor and SQLite, appending the same line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreSection {
    /// Bytes per appended line (newline included).
    pub line_bytes: usize,
    pub rows: Vec<StoreRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreRow {
    pub target: Target,
    pub summary: Summary,
    /// p50 latency divided by the floor's p50.
    pub p50_vs_floor: f64,
    /// p99 latency divided by the floor's p99.
    pub p99_vs_floor: f64,
}

impl StoreSection {
    /// Builds the rows, computing ratios against the `Floor` row.
    pub fn new(line_bytes: usize, measured: Vec<(Target, Summary)>) -> StoreSection {
        let floor = measured
            .iter()
            .find(|(t, _)| *t == Target::Floor)
            .map(|(_, s)| *s);
        let rows = measured
            .into_iter()
            .map(|(target, summary)| StoreRow {
                target,
                summary,
                p50_vs_floor: floor.map_or(f64::NAN, |f| ratio(summary.p50_us, f.p50_us)),
                p99_vs_floor: floor.map_or(f64::NAN, |f| ratio(summary.p99_us, f.p99_us)),
            })
            .collect();
        StoreSection { line_bytes, rows }
    }

    pub fn get(&self, target: Target) -> Option<&StoreRow> {
        self.rows.iter().find(|r| r.target == target)
    }
}

/// Batch-mode group commit with concurrent appenders sharing one log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSection {
    pub batch_max_delay_us: u64,
    pub batch_max_events: usize,
    /// Sync mode with one appender, measured in this section: the reference.
    pub sync: Summary,
    pub rows: Vec<GroupRow>,
    /// This machine's group commit ceilings, measured raw (no store) in the
    /// same interleaved rounds ([`super::group`]).
    pub ceilings: Vec<CeilingRow>,
}

/// What bounds a group commit of `lines` lines on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ceiling {
    /// That many threads in a raw leader/follower group commit whose leader
    /// waits for all of them: the scheduler's bound.
    RawGroupCommit,
    /// One thread writing that many lines per fdatasync: the disk's bound.
    LinesPerSync,
}

impl Ceiling {
    pub fn label(self, lines: usize) -> String {
        match self {
            Ceiling::RawGroupCommit => format!("raw group commit, {lines} threads"),
            Ceiling::LinesPerSync => format!("raw {lines} lines per fdatasync"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CeilingRow {
    pub ceiling: Ceiling,
    /// Lines per group: threads of the raw group commit, lines per sync of
    /// the single writer.
    pub lines: usize,
    /// Events (lines) per second.
    pub summary: Summary,
    /// Events/s divided by Sync mode's.
    pub vs_sync: f64,
    /// Lines per fdatasync, measured.
    pub events_per_sync: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupRow {
    pub appenders: usize,
    /// Events/s over all appenders, and per-append latencies.
    pub summary: Summary,
    /// Events/s divided by Sync mode's.
    pub vs_sync: f64,
    /// Events appended per fdatasync of the log: the mean group size.
    pub events_per_sync: f64,
}

impl GroupSection {
    pub fn new(
        batch_max_delay_us: u64,
        batch_max_events: usize,
        sync: Summary,
        measured: Vec<(usize, Summary, f64)>,
        ceilings: Vec<(Ceiling, usize, Summary, f64)>,
    ) -> GroupSection {
        let rows = measured
            .into_iter()
            .map(|(appenders, summary, events_per_sync)| GroupRow {
                appenders,
                summary,
                vs_sync: ratio(summary.ops_per_s, sync.ops_per_s),
                events_per_sync,
            })
            .collect();
        let ceilings = ceilings
            .into_iter()
            .map(|(ceiling, lines, summary, events_per_sync)| CeilingRow {
                ceiling,
                lines,
                summary,
                vs_sync: ratio(summary.ops_per_s, sync.ops_per_s),
                events_per_sync,
            })
            .collect();
        GroupSection {
            batch_max_delay_us,
            batch_max_events,
            sync,
            rows,
            ceilings,
        }
    }

    /// The ceiling of kind `ceiling` for groups of `lines`, if measured.
    pub fn ceiling(&self, ceiling: Ceiling, lines: usize) -> Option<&CeilingRow> {
        self.ceilings
            .iter()
            .find(|c| c.ceiling == ceiling && c.lines == lines)
    }
}

/// One ratio of two figures of the same run: a comparison the tables
/// hold, worked out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ratio {
    pub id: &'static str,
    /// What is divided by what.
    pub description: &'static str,
    pub ratio: f64,
    /// The two numbers the ratio came from.
    pub detail: String,
}

/// `a / b`, NaN when `b` is zero (printed `-`, `null` in JSON).
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

/// The ratios the report prints under its tables.
pub fn ratios(store: &StoreSection, group: &GroupSection) -> Vec<Ratio> {
    let mut ratios = Vec::new();
    if let (Some(sync), Some(floor)) = (store.get(Target::StoreSync), store.get(Target::Floor)) {
        let (s, f) = (sync.summary, floor.summary);
        ratios.push(Ratio {
            id: "sync_p50_vs_floor",
            description: "Sync append p50 / raw write+fdatasync p50 (growing file)",
            ratio: sync.p50_vs_floor,
            detail: format!("{} vs {} µs", us(s.p50_us), us(f.p50_us)),
        });
        ratios.push(Ratio {
            id: "sync_p99_vs_floor",
            description: "Sync append p99 / raw write+fdatasync p99 (growing file)",
            ratio: sync.p99_vs_floor,
            detail: format!("{} vs {} µs", us(s.p99_us), us(f.p99_us)),
        });
    }
    if let (Some(sync), Some(zeroed)) = (
        store.get(Target::StoreSync),
        store.get(Target::ZeroedFdatasync),
    ) {
        let (s, z) = (sync.summary, zeroed.summary);
        ratios.push(Ratio {
            id: "sync_p50_vs_zeroed",
            description: "Sync append p50 / raw pre-zeroed write+fdatasync p50",
            ratio: ratio(s.p50_us, z.p50_us),
            detail: format!("{} vs {} µs", us(s.p50_us), us(z.p50_us)),
        });
    }
    if let Some(b8) = group.rows.iter().find(|r| r.appenders == 8) {
        ratios.push(Ratio {
            id: "batch8_vs_sync",
            description: "Batch with 8 appenders / Sync, events/s",
            ratio: b8.vs_sync,
            detail: format!(
                "{} vs {} events/s{}",
                rate(b8.summary.ops_per_s),
                rate(group.sync.ops_per_s),
                match group.ceiling(Ceiling::RawGroupCommit, 8) {
                    Some(raw) => format!(
                        "; this machine's raw group commit of 8 threads: {}",
                        times(raw.vs_sync)
                    ),
                    None => String::new(),
                }
            ),
        });
    }
    if let (Some(sync), Some(sql)) = (store.get(Target::StoreSync), store.get(Target::Sqlite)) {
        ratios.push(Ratio {
            id: "sync_vs_sqlite",
            description: "Sync append / SQLite transaction, time per event",
            ratio: ratio(sync.summary.us_per_op, sql.summary.us_per_op),
            detail: format!(
                "{} vs {} µs/event",
                us(sync.summary.us_per_op),
                us(sql.summary.us_per_op)
            ),
        });
    }
    ratios
}

fn us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn rate(v: f64) -> String {
    format!("{v:.0}")
}

fn times(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v:.2}x")
    }
}

impl Report {
    /// The human-readable report, pg_test_fsync style.
    pub fn render_text(&self) -> String {
        let m = &self.machine;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "agentstore bench: {} ({}), {} s per measurement",
            self.dir, m.fs_type, self.seconds_per_measurement
        );
        let _ = writeln!(
            out,
            "machine: {}, {}, {} cores, {}, {} (load average {})",
            m.hostname, m.cpu_model, m.cores, m.kernel, m.date, m.load_average
        );
        if m.fs_is_volatile() {
            let _ = writeln!(
                out,
                "warning: {} is RAM-backed: fsync is a no-op there and these numbers say nothing about a disk",
                m.fs_type
            );
        }
        let head = format!(
            "{:<32} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "", "ops/s", "µs/op", "p50 µs", "p99 µs", "p99.9 µs"
        );
        let mut workloads: Vec<Workload> = Vec::new();
        for r in &self.methods {
            if !workloads.contains(&r.workload) {
                workloads.push(r.workload);
            }
        }
        for w in workloads {
            let _ = writeln!(out, "\nSync methods, {}", w.label());
            let _ = writeln!(out, "{head}");
            for r in self.methods.iter().filter(|r| r.workload == w) {
                match &r.outcome {
                    Outcome::Measured(s) => {
                        let _ = writeln!(out, "{:<32} {}", r.method.label(), cells(s));
                    }
                    Outcome::Unsupported { reason } => {
                        let _ = writeln!(out, "{:<32} {:>9}  {reason}", r.method.label(), "n/a");
                    }
                }
            }
        }
        let _ = writeln!(
            out,
            "\nThe store, {}-byte lines (all but None measured interleaved)",
            self.store.line_bytes
        );
        let _ = writeln!(out, "{head} {:>8} {:>8}", "p50/flr", "p99/flr");
        for r in &self.store.rows {
            let _ = writeln!(
                out,
                "{:<32} {} {:>8} {:>8}",
                r.target.label(),
                cells(&r.summary),
                times(r.p50_vs_floor),
                times(r.p99_vs_floor)
            );
        }
        let g = &self.group_commit;
        let _ = writeln!(
            out,
            "\nGroup commit: appenders (threads) sharing one log, Batch mode (max delay {} µs, max {} events)",
            g.batch_max_delay_us, g.batch_max_events
        );
        let _ = writeln!(
            out,
            "{:<32} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "", "events/s", "x Sync", "p50 µs", "p99 µs", "ev/sync"
        );
        let _ = writeln!(
            out,
            "{:<32} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "Sync, 1 appender",
            rate(g.sync.ops_per_s),
            times(1.0),
            us(g.sync.p50_us),
            us(g.sync.p99_us),
            "1.0"
        );
        for r in &g.rows {
            let _ = writeln!(
                out,
                "{:<32} {:>9} {:>9} {:>9} {:>9} {:>9.1}",
                format!(
                    "Batch, {} appender{}",
                    r.appenders,
                    if r.appenders == 1 { "" } else { "s" }
                ),
                rate(r.summary.ops_per_s),
                times(r.vs_sync),
                us(r.summary.p50_us),
                us(r.summary.p99_us),
                r.events_per_sync
            );
        }
        if !g.ceilings.is_empty() {
            let _ = writeln!(
                out,
                "This machine's ceilings, raw (no store), the same lines into a pre-zeroed file:"
            );
        }
        for c in &g.ceilings {
            let _ = writeln!(
                out,
                "{:<32} {:>9} {:>9} {:>9} {:>9} {:>9.1}",
                c.ceiling.label(c.lines),
                rate(c.summary.ops_per_s),
                times(c.vs_sync),
                us(c.summary.p50_us),
                us(c.summary.p99_us),
                c.events_per_sync
            );
        }
        let _ = writeln!(out, "\nRatios, from this run");
        for r in &self.ratios {
            let _ = writeln!(out, "{}: {} ({})", r.description, times(r.ratio), r.detail);
        }
        out
    }
}

fn cells(s: &Summary) -> String {
    format!(
        "{:>9} {:>9} {:>9} {:>9} {:>9}",
        rate(s.ops_per_s),
        us(s.us_per_op),
        us(s.p50_us),
        us(s.p99_us),
        us(s.p999_us)
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn summary(p50: f64, p99: f64, ops: f64) -> Summary {
        Summary {
            count: 1000,
            ops_per_s: ops,
            us_per_op: 1e6 / ops,
            p50_us: p50,
            p99_us: p99,
            p999_us: p99 * 2.0,
            max_us: p99 * 4.0,
        }
    }

    /// A report built from fixed numbers, for shape and rendering tests.
    pub(crate) fn sample() -> Report {
        let store = StoreSection::new(
            200,
            vec![
                (Target::Floor, summary(300.0, 500.0, 3200.0)),
                (Target::ZeroedFdatasync, summary(200.0, 400.0, 4800.0)),
                (Target::ZeroedODsync, summary(190.0, 380.0, 5000.0)),
                (Target::ZeroedRwfDsync, summary(195.0, 390.0, 4900.0)),
                (Target::StoreSync, summary(210.0, 700.0, 3100.0)),
                (Target::StoreBatch, summary(1400.0, 1600.0, 700.0)),
                (Target::StoreNone, summary(1.5, 3.0, 500_000.0)),
                (Target::Sqlite, summary(600.0, 900.0, 1600.0)),
            ],
        );
        let group = GroupSection::new(
            1000,
            64,
            summary(310.0, 520.0, 3100.0),
            vec![
                (1, summary(1400.0, 1600.0, 700.0), 1.0),
                (8, summary(1400.0, 1700.0, 20_000.0), 7.9),
            ],
            vec![
                (
                    Ceiling::RawGroupCommit,
                    8,
                    summary(900.0, 1500.0, 22_000.0),
                    7.9,
                ),
                (
                    Ceiling::LinesPerSync,
                    8,
                    summary(10.0, 400.0, 25_000.0),
                    8.0,
                ),
            ],
        );
        let ratios = ratios(&store, &group);
        Report {
            format: REPORT_FORMAT,
            agentstore_version: "0.1.0".into(),
            machine: Machine {
                hostname: "box".into(),
                cpu_model: "Some CPU @ 2.0GHz".into(),
                cores: 2,
                kernel: "Linux 6.1.0 x86_64".into(),
                fs_type: "ext4".into(),
                fs_magic: "0xef53".into(),
                date: "2026-01-01T00:00:00Z".into(),
                load_average: "0.10 0.20 0.30".into(),
            },
            dir: "/work".into(),
            seconds_per_measurement: 1.0,
            methods: vec![
                MethodRow {
                    workload: Workload::Append { len: 200 },
                    method: SyncMethod::Fdatasync,
                    outcome: Outcome::Measured(summary(300.0, 500.0, 3200.0)),
                },
                MethodRow {
                    workload: Workload::Append { len: 200 },
                    method: SyncMethod::ODirectODsync,
                    outcome: Outcome::Unsupported {
                        reason: "the file system refuses O_DIRECT (Invalid argument (os error 22))"
                            .into(),
                    },
                },
            ],
            store,
            group_commit: group,
            ratios,
        }
    }

    #[test]
    fn ratios_are_against_the_floor_of_the_same_run() {
        let r = sample();
        let sync = r.store.get(Target::StoreSync).unwrap();
        assert!((sync.p50_vs_floor - 0.7).abs() < 1e-9);
        assert!((sync.p99_vs_floor - 1.4).abs() < 1e-9);
        let floor = r.store.get(Target::Floor).unwrap();
        assert_eq!(floor.p50_vs_floor, 1.0);
    }

    #[test]
    fn the_ratios_are_figures_of_the_same_run_and_judge_nothing() {
        let r = sample();
        let got: Vec<(&str, String)> = r.ratios.iter().map(|x| (x.id, times(x.ratio))).collect();
        let want = [
            ("sync_p50_vs_floor", "0.70x"),
            ("sync_p99_vs_floor", "1.40x"),
            ("sync_p50_vs_zeroed", "1.05x"),
            ("batch8_vs_sync", "6.45x"),
            ("sync_vs_sqlite", "0.52x"),
        ];
        assert_eq!(got, want.map(|(id, v)| (id, v.to_string())));
        let text = r.render_text();
        for verdict in ["Goal", "NOT MET", "\nmet ", "(want "] {
            assert!(!text.contains(verdict), "{verdict:?} in:\n{text}");
        }
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("goals").is_none());
    }

    #[test]
    fn a_zero_baseline_gives_no_ratio() {
        let store = StoreSection::new(
            200,
            vec![
                (Target::Floor, summary(0.0, 0.0, 1.0)),
                (Target::StoreSync, summary(1.0, 1.0, 1.0)),
            ],
        );
        let group = GroupSection::new(1, 1, summary(1.0, 1.0, 0.0), vec![], vec![]);
        let r = ratios(&store, &group);
        assert!(!r.is_empty());
        assert!(r.iter().all(|r| r.ratio.is_nan()), "{r:?}");
    }

    #[test]
    fn json_shape_is_stable() {
        insta::assert_json_snapshot!(sample());
    }

    #[test]
    fn text_report_has_every_section_and_ratio() {
        insta::assert_snapshot!(sample().render_text());
    }
}
