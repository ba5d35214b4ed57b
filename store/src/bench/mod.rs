//! `agentstore bench`: how fast this disk really syncs, and what the store
//! costs on top of it, measured side by side in one run.
//!
//! A pg_test_fsync-style suite (Linux-only): raw sync methods ([`methods`]),
//! the store's durability modes against the raw `write`+`fdatasync` floor and
//! SQLite ([`sqlite`]), and group commit scaling against this machine's
//! raw group commit ceilings ([`group`]). [`run`] returns a
//! [`report::Report`] (text and JSON) plus latency curves for [`plot`].
//!
//! It writes only inside a fresh scratch subdirectory of the directory it is
//! given, and removes that subdirectory when it ends, on success or error.
//! It never times anything in unit tests: numbers come from real runs only.

pub mod group;
pub mod machine;
pub mod measure;
pub mod methods;
pub mod plot;
pub mod report;
pub mod sqlite;
mod suite;
pub mod workload;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use self::machine::Machine;
use self::measure::Budget;
use self::report::{Report, REPORT_FORMAT};

/// What a run measures and where.
#[derive(Debug, Clone)]
pub struct Config {
    /// The directory whose file system is measured (a scratch subdirectory is made in it).
    pub dir: PathBuf,
    /// Wall time of each measurement.
    pub per_measurement: Duration,
    /// Cap on operations per measurement (keeps no-sync loops from filling the disk).
    pub max_ops: u64,
}

impl Config {
    /// A run in `dir` with `per_measurement` per measurement and the default op cap.
    pub fn new(dir: &Path, per_measurement: Duration) -> Config {
        Config {
            dir: dir.to_path_buf(),
            per_measurement,
            max_ops: 50_000,
        }
    }
}

/// Where a run reports how far it got (a progress bar in the CLI).
pub trait Progress {
    /// The run takes `total` units (one unit: one measurement's budget).
    fn begin(&mut self, total: u64);
    /// Measurement `what` starts; it takes `units` units.
    fn step(&mut self, what: &str, units: u64);
    /// All measurements are done.
    fn finish(&mut self);
}

/// A [`Progress`] that shows nothing.
#[derive(Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn begin(&mut self, _total: u64) {}
    fn step(&mut self, _what: &str, _units: u64) {}
    fn finish(&mut self) {}
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The directory to measure is missing or unwritable (a usage error).
    #[error("cannot benchmark in {}: {reason}", path.display())]
    Dir { path: PathBuf, reason: String },
    /// An I/O call failed during a measurement.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The SQLite baseline failed.
    #[error("sqlite {}: {reason}", path.display())]
    Sqlite { path: PathBuf, reason: String },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::Error),
    /// SIGINT or SIGTERM arrived ([`crate::interrupt`]): stopped between
    /// measurements, the scratch directory removed on the way out.
    #[error("interrupted")]
    Interrupted,
}

impl BenchError {
    pub(crate) fn io(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> BenchError {
        let path = path.to_path_buf();
        move |source| BenchError::Io { op, path, source }
    }

    pub(crate) fn sqlite(path: &Path, e: rusqlite::Error) -> BenchError {
        BenchError::Sqlite {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    }
}

/// The result of a run: the report, and the latency curves to plot.
#[derive(Debug, Clone)]
pub struct Run {
    pub report: Report,
    pub panels: Vec<plot::Panel>,
}

impl Run {
    /// The `--plot` figure.
    pub fn svg(&self) -> String {
        let m = &self.report.machine;
        plot::render_svg(
            &format!(
                "Latency CDF: {} ({}), {} s per measurement",
                self.report.dir, m.fs_type, self.report.seconds_per_measurement
            ),
            &format!(
                "{}, {} cores, {}, {}",
                m.cpu_model, m.cores, m.kernel, m.date
            ),
            &self.panels,
        )
    }
}

/// Creates the fresh scratch subdirectory of `dir`; a missing or unwritable
/// `dir` is a [`BenchError::Dir`].
pub fn scratch_dir(dir: &Path) -> Result<tempfile::TempDir, BenchError> {
    let refuse = |reason: String| BenchError::Dir {
        path: dir.to_path_buf(),
        reason,
    };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(refuse("no such directory".into()))
        }
        Err(e) => return Err(refuse(e.to_string())),
        Ok(m) if !m.is_dir() => return Err(refuse("not a directory".into())),
        Ok(_) => {}
    }
    tempfile::Builder::new()
        .prefix(".agentstore-bench-")
        .tempdir_in(dir)
        .map_err(|e| refuse(format!("cannot create a scratch directory in it: {e}")))
}

/// Runs the whole suite in a scratch subdirectory of `config.dir`.
pub fn run(config: &Config, progress: &mut dyn Progress) -> Result<Run, BenchError> {
    let scratch = scratch_dir(&config.dir)?;
    let machine = Machine::probe(scratch.path());
    let budget = Budget {
        time: config.per_measurement,
        max_ops: config.max_ops,
    };
    let mut suite = suite::Suite::new(scratch.path(), budget, progress);
    let measured = suite.run_all()?;
    let scratch_path = scratch.path().to_path_buf();
    scratch
        .close()
        .map_err(BenchError::io("remove scratch directory", &scratch_path))?;
    let ratios = report::ratios(&measured.store, &measured.group);
    Ok(Run {
        report: Report {
            format: REPORT_FORMAT,
            agentstore_version: env!("CARGO_PKG_VERSION").to_string(),
            machine,
            dir: config.dir.display().to_string(),
            seconds_per_measurement: config.per_measurement.as_secs_f64(),
            methods: measured.methods,
            store: measured.store,
            group_commit: measured.group,
            ratios,
        },
        panels: measured.panels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_non_directory_dir_is_a_usage_error() {
        let d = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let missing = d.path().join("nope");
        let e = scratch_dir(&missing).unwrap_err();
        assert!(matches!(e, BenchError::Dir { .. }));
        assert!(e.to_string().ends_with("nope: no such directory"), "{e}");
        let file = d.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let e = scratch_dir(&file).unwrap_err();
        assert!(e.to_string().ends_with("f: not a directory"), "{e}");
    }

    #[test]
    fn a_tiny_run_fills_every_section_and_leaves_nothing_behind() {
        let d = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let mut config = Config::new(d.path(), Duration::from_millis(5));
        config.max_ops = 20;
        let run = run(&config, &mut Quiet).unwrap();
        let r = &run.report;
        assert_eq!(r.methods.len(), 12);
        assert_eq!(r.store.rows.len(), 8);
        assert_eq!(r.group_commit.rows.len(), 5);
        assert_eq!(r.group_commit.ceilings.len(), 2);
        assert_eq!(r.ratios.len(), 5);
        assert!(r.store.rows.iter().all(|row| row.summary.count > 0));
        assert_eq!(run.panels.len(), 3);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }
}
