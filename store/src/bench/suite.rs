//! The measurements of one `agentstore bench` run, in order.
//!
//! Whatever is compared by a ratio is measured interleaved (alternating
//! slices), because cloud disks drift: a host-side rate limiter or a
//! neighbour can double fsync latency for seconds. Each measurement gets its
//! own subdirectory of the scratch directory, removed right after it; no-sync
//! runs are capped in operations, so they leave little for write-back.

use std::path::{Path, PathBuf};

use super::group::{LinesPerSync, RawGroupCommit};
use super::measure::{self, Budget, Latencies};
use super::methods::{self, human_bytes, OpenError, RawWriter, SyncMethod, Workload};
use super::plot::{Panel, Series};
use super::report::{Ceiling, GroupSection, MethodRow, Outcome, StoreSection, Target};
use super::sqlite::SqliteLog;
use super::workload::{event_of_line_size, line_for};
use super::{BenchError, Progress};
use crate::durability::Durability;
use crate::event::Event;
use crate::layout::{SessionId, SessionPaths};
use crate::log::EventLog;

/// The append size of the store section and of the small-append methods.
pub const APPEND_BYTES: usize = 200;
/// The fixed write size of the pg_test_fsync-like methods.
pub const WRITE_BYTES: usize = 8192;
/// Concurrent appenders of the group commit section.
pub const APPENDERS: [usize; 5] = [1, 2, 4, 8, 16];
/// Lines per group of this machine's raw group commit ceilings: the
/// appenders of the Batch ratio.
pub const CEILING_LINES: usize = 8;
/// The ceilings measured beside the group commit rows, in report order.
const CEILINGS: [Ceiling; 2] = [Ceiling::RawGroupCommit, Ceiling::LinesPerSync];
/// Slices each interleaved measurement is cut into.
const ROUNDS: u32 = 20;

/// Everything measured, before the ratios are worked out.
#[derive(Debug)]
pub(super) struct Measured {
    pub methods: Vec<MethodRow>,
    pub store: StoreSection,
    pub group: GroupSection,
    pub panels: Vec<Panel>,
}

pub(super) struct Suite<'a> {
    scratch: &'a Path,
    budget: Budget,
    progress: &'a mut dyn Progress,
    next_dir: u32,
}

/// The store section's contenders measured interleaved, in report order.
const STORE_INTERLEAVED: [Target; 7] = [
    Target::Floor,
    Target::ZeroedFdatasync,
    Target::ZeroedODsync,
    Target::ZeroedRwfDsync,
    Target::StoreSync,
    Target::StoreBatch,
    Target::Sqlite,
];

impl<'a> Suite<'a> {
    pub fn new(scratch: &'a Path, budget: Budget, progress: &'a mut dyn Progress) -> Suite<'a> {
        Suite {
            scratch,
            budget,
            progress,
            next_dir: 0,
        }
    }

    /// Measurement budgets the whole run takes (for a progress bar).
    fn total_units() -> u64 {
        let methods = 2 * SyncMethod::ALL.len();
        let store = STORE_INTERLEAVED.len() + 1;
        let group = 1 + APPENDERS.len() + CEILINGS.len();
        (methods + store + group) as u64
    }

    pub fn run_all(&mut self) -> Result<Measured, BenchError> {
        self.progress.begin(Self::total_units());
        let mut methods = Vec::new();
        let mut panels = Vec::new();
        for workload in [
            Workload::Append { len: APPEND_BYTES },
            Workload::Overwrite { len: WRITE_BYTES },
        ] {
            let (rows, panel) = self.methods(workload)?;
            methods.extend(rows);
            panels.push(panel);
        }
        let (store, store_panel) = self.store()?;
        panels.push(store_panel);
        let group = self.group()?;
        // A signal during the last measurement cut it short.
        if crate::interrupt::requested() {
            return Err(BenchError::Interrupted);
        }
        self.progress.finish();
        Ok(Measured {
            methods,
            store,
            group,
            panels,
        })
    }

    /// Measurement `what` starts, unless SIGINT or SIGTERM arrived.
    fn step(&mut self, what: &str, units: u64) -> Result<(), BenchError> {
        if crate::interrupt::requested() {
            return Err(BenchError::Interrupted);
        }
        self.progress.step(what, units);
        Ok(())
    }

    /// A fresh, empty measurement directory.
    fn fresh_dir(&mut self) -> Result<PathBuf, BenchError> {
        let dir = self.scratch.join(format!("m{}", self.next_dir));
        self.next_dir += 1;
        std::fs::create_dir(&dir).map_err(BenchError::io("mkdir", &dir))?;
        Ok(dir)
    }

    /// Every sync method under one workload, one after the other (no-sync last).
    fn methods(&mut self, workload: Workload) -> Result<(Vec<MethodRow>, Panel), BenchError> {
        let dir = self.fresh_dir()?;
        let line = line_for(&event_of_line_size(APPEND_BYTES, 0), 0);
        let shared = dir.join("prewritten");
        if let Workload::Overwrite { .. } = workload {
            methods::prewrite(&shared).map_err(BenchError::io("pre-write", &shared))?;
        }
        let mut rows = Vec::new();
        let mut series = Vec::new();
        for (i, method) in SyncMethod::ALL.into_iter().enumerate() {
            self.step(&format!("{}, {}", method.label(), short_label(workload)), 1)?;
            let path = match workload {
                Workload::Append { .. } => dir.join(format!("append{i}")),
                Workload::Overwrite { .. } | Workload::PreZeroed { .. } => shared.clone(),
            };
            let (outcome, points) = match RawWriter::create(&path, method, workload, &line) {
                Ok(mut w) => {
                    let lat = measure::measure(self.budget, &mut measure::sequential(|| w.op()))
                        .map_err(BenchError::io(method.label(), &path))?;
                    (Outcome::Measured(lat.summary()), lat.cdf())
                }
                Err(OpenError::Unsupported(reason)) => {
                    (Outcome::Unsupported { reason }, Vec::new())
                }
                Err(OpenError::Io(path, op, e)) => return Err(BenchError::io(op, &path)(e)),
            };
            if let Workload::Append { .. } = workload {
                // Before write-back: a deleted never-synced file costs the disk nothing.
                std::fs::remove_file(&path).map_err(BenchError::io("remove", &path))?;
            }
            series.push(Series {
                label: method.label().to_string(),
                points,
            });
            rows.push(MethodRow {
                workload,
                method,
                outcome,
            });
        }
        remove(&dir)?;
        let panel = Panel {
            title: format!("Sync methods, {}", short_label(workload)),
            series,
        };
        Ok((rows, panel))
    }

    fn new_log(&mut self, durability: Durability) -> Result<(PathBuf, EventLog), BenchError> {
        let dir = self.fresh_dir()?;
        let id = SessionId::new("bench")?;
        let log = EventLog::create(&SessionPaths::new(&dir, &id), durability)?;
        Ok((dir, log))
    }

    /// The store in each durability mode against the floor and SQLite.
    fn store(&mut self) -> Result<(StoreSection, Panel), BenchError> {
        let event = event_of_line_size(APPEND_BYTES, 0);
        let line = line_for(&event, 0);
        self.step(
            "the store: raw floors, Sync, Batch and SQLite (interleaved)",
            STORE_INTERLEAVED.len() as u64,
        )?;
        let floor_dir = self.fresh_dir()?;
        let raw = |path: PathBuf, method, workload| {
            RawWriter::create(&path, method, workload, &line).map_err(|e| unmeasurable(&path, e))
        };
        let floor_path = floor_dir.join("floor");
        let mut floor = raw(
            floor_path.clone(),
            SyncMethod::Fdatasync,
            Workload::Append { len: line.len() },
        )?;
        // The same line into pre-zeroed files: the floor of an append into
        // pre-allocated log space, made durable three ways.
        let zeroed_method = [
            SyncMethod::Fdatasync,
            SyncMethod::ODsync,
            SyncMethod::RwfDsync,
        ];
        let mut zeroed = Vec::new();
        for (i, method) in zeroed_method.into_iter().enumerate() {
            let path = floor_dir.join(format!("zeroed{i}"));
            methods::prewrite(&path).map_err(BenchError::io("pre-write", &path))?;
            let w = raw(
                path.clone(),
                method,
                Workload::PreZeroed { len: line.len() },
            )?;
            zeroed.push((path, method, w));
        }
        let (sync_dir, sync_log) = self.new_log(Durability::Sync)?;
        let (batch_dir, batch_log) = self.new_log(Durability::batch())?;
        let sql_dir = self.fresh_dir()?;
        let mut sql = SqliteLog::create(&sql_dir.join("events.db"), &line)?;
        let lats = {
            let mut floor_op = measure::sequential(|| {
                floor
                    .op()
                    .map_err(BenchError::io("write+fdatasync", &floor_path))
            });
            let mut zeroed_ops: Vec<_> = zeroed
                .iter_mut()
                .map(|(path, method, w)| {
                    let (path, label) = (path.clone(), method.label());
                    measure::sequential(move || w.op().map_err(BenchError::io(label, &path)))
                })
                .collect();
            let mut sync_op = measure::sequential(|| append(&sync_log, &event));
            let mut batch_op = measure::sequential(|| append(&batch_log, &event));
            let mut sql_op = measure::sequential(|| sql.op());
            let mut contenders: Vec<&mut measure::Slice<'_, BenchError>> = vec![&mut floor_op];
            for op in &mut zeroed_ops {
                contenders.push(op);
            }
            contenders.extend([
                &mut sync_op as &mut measure::Slice<'_, BenchError>,
                &mut batch_op,
                &mut sql_op,
            ]);
            measure::measure_interleaved(self.budget, ROUNDS, &mut contenders)?
        };
        drop((sync_log, batch_log, sql, zeroed));
        for d in [&floor_dir, &sync_dir, &batch_dir, &sql_dir] {
            remove(d)?;
        }

        self.step("the store: None (not durable)", 1)?;
        let (none_dir, none_log) = self.new_log(Durability::None)?;
        let none_lat = measure::measure(
            self.budget,
            &mut measure::sequential(|| append(&none_log, &event)),
        )?;
        drop(none_log);
        remove(&none_dir)?;

        let mut measured: Vec<(Target, Latencies)> =
            STORE_INTERLEAVED.into_iter().zip(lats).collect();
        let after_batch = 1 + STORE_INTERLEAVED
            .iter()
            .position(|t| *t == Target::StoreBatch)
            .expect("Batch is measured interleaved");
        measured.insert(after_batch, (Target::StoreNone, none_lat));
        let panel = Panel {
            title: format!("The store, {} B lines", line.len()),
            series: measured
                .iter()
                .map(|(t, l)| Series {
                    label: t.label().to_string(),
                    points: l.cdf(),
                })
                .collect(),
        };
        let section = StoreSection::new(
            line.len(),
            measured.iter().map(|(t, l)| (*t, l.summary())).collect(),
        );
        Ok((section, panel))
    }

    /// Batch mode with 1..16 threads sharing one log, interleaved with Sync
    /// mode and one appender (the reference) and with this machine's raw
    /// group commit ceilings for groups of [`CEILING_LINES`].
    fn group(&mut self) -> Result<GroupSection, BenchError> {
        let event = event_of_line_size(APPEND_BYTES, 0);
        let line = line_for(&event, 0);
        self.step(
            "group commit: Sync, Batch with 1-16 appenders, raw ceilings (interleaved)",
            (1 + APPENDERS.len() + CEILINGS.len()) as u64,
        )?;
        let batch = Durability::batch();
        let Durability::Batch {
            max_delay,
            max_events,
        } = batch
        else {
            unreachable!("Durability::batch() is a Batch mode")
        };
        let (sync_dir, sync_log) = self.new_log(Durability::Sync)?;
        let mut batch_logs = Vec::new();
        for _ in APPENDERS {
            batch_logs.push(self.new_log(batch)?);
        }
        let raw_dir = self.fresh_dir()?;
        let raw_group_path = raw_dir.join("raw-group");
        let raw_group = RawGroupCommit::create(&raw_group_path, &line, CEILING_LINES)
            .map_err(|e| unmeasurable(&raw_group_path, e))?;
        let per_sync_path = raw_dir.join("lines-per-sync");
        let mut per_sync = LinesPerSync::create(&per_sync_path, &line, CEILING_LINES)
            .map_err(|e| unmeasurable(&per_sync_path, e))?;
        let lats = {
            let mut sync_op = measure::sequential(|| append(&sync_log, &event));
            let mut batch_ops: Vec<_> = APPENDERS
                .iter()
                .zip(&batch_logs)
                .map(|(&n, (_, log))| measure::concurrent(n, || append(log, &event)))
                .collect();
            let mut raw_group_op = measure::concurrent(CEILING_LINES, || {
                raw_group
                    .append()
                    .map(drop)
                    .map_err(BenchError::io("raw group commit", &raw_group_path))
            });
            let mut per_sync_op = measure::sequential(|| {
                per_sync
                    .op()
                    .map_err(BenchError::io("lines per fdatasync", &per_sync_path))
            });
            let mut contenders: Vec<&mut measure::Slice<'_, BenchError>> = vec![&mut sync_op];
            for op in &mut batch_ops {
                contenders.push(op);
            }
            // In the order of CEILINGS.
            contenders.push(&mut raw_group_op);
            contenders.push(&mut per_sync_op);
            measure::measure_interleaved(self.budget, ROUNDS, &mut contenders)?
        };
        drop(sync_log);
        remove(&sync_dir)?;
        let raw_per_sync = raw_group.lines_per_sync();
        drop((raw_group, per_sync));
        remove(&raw_dir)?;
        let mut events_per_sync = Vec::new();
        for (dir, log) in batch_logs {
            events_per_sync.push(log.end().seq as f64 / log.syncs().max(1) as f64);
            drop(log);
            remove(&dir)?;
        }
        let mut lats = lats.into_iter();
        let sync = lats
            .next()
            .expect("one result per interleaved contender")
            .summary();
        let rows = APPENDERS
            .into_iter()
            .zip(lats.by_ref().map(|l| l.summary()))
            .zip(events_per_sync)
            .map(|((appenders, summary), per_sync)| (appenders, summary, per_sync))
            .collect();
        let ceilings = CEILINGS
            .into_iter()
            .zip(lats)
            .map(|(ceiling, l)| {
                let per_sync = match ceiling {
                    Ceiling::RawGroupCommit => raw_per_sync,
                    Ceiling::LinesPerSync => CEILING_LINES as f64,
                };
                (ceiling, CEILING_LINES, l.summary(), per_sync)
            })
            .collect();
        Ok(GroupSection::new(
            u64::try_from(max_delay.as_micros()).unwrap_or(u64::MAX),
            max_events,
            sync,
            rows,
            ceilings,
        ))
    }
}

/// A raw writer the run needs and cannot open, at `path`: an error of the
/// run (the optional methods' refusals are rows, see [`Suite::methods`]).
fn unmeasurable(path: &Path, e: OpenError) -> BenchError {
    match e {
        OpenError::Unsupported(reason) => BenchError::Io {
            op: "open",
            path: path.to_path_buf(),
            source: std::io::Error::other(reason),
        },
        OpenError::Io(path, op, e) => BenchError::io(op, &path)(e),
    }
}

fn append(log: &EventLog, event: &Event) -> Result<(), BenchError> {
    log.append(event).map(drop).map_err(BenchError::from)
}

fn short_label(w: Workload) -> String {
    match w {
        Workload::Append { len } => format!("{} appends", human_bytes(len)),
        Workload::Overwrite { len } => format!("{} writes", human_bytes(len)),
        Workload::PreZeroed { len } => format!("{} pre-zeroed appends", human_bytes(len)),
    }
}

fn remove(dir: &Path) -> Result<(), BenchError> {
    std::fs::remove_dir_all(dir).map_err(BenchError::io("remove", dir))
}
