//! Where a trial's time goes (`agentchaos run --timings`): process starts
//! by kind, the adapters' `hello` (their start-up and imports), round
//! trips, the in-process store's own work, the checker, the agent's own
//! work, and (beside them, not added up) the tracer's CPU under ptrace.
//!
//! Costs are measured with [`Instant`]s where they happen and handed to
//! [`record`]. On a harness thread they go to that thread's collector
//! ([`collect`]; one trial runs on one thread). In an agent life they go
//! to a small file shared with the harness (`agent --timings FILE`,
//! [`share_into`]): mapped into memory, so recording costs no syscall (the
//! syscall nemesis would stop at it) and a SIGKILL loses nothing. Once the
//! life has ended the harness adds the file's figures to the trial's
//! ([`life_ended`]), and counts what remains of the life's wall time as
//! the agent's own work. Nothing is recorded unless [`enable`] was called
//! (or, in an agent, [`share_into`]).

use std::cell::{Cell, RefCell};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Whose store process a start or a `hello` was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A process an agent life talks to (exec'd by the agent, or forked
    /// for it by the harness).
    Life,
    /// A fresh process that reads the disk after a kill, a recovery or at the end.
    Observer,
    /// A probe's process.
    Probe,
    /// A power-loss state's recovery.
    Recovery,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Life, Role::Observer, Role::Probe, Role::Recovery];

    pub fn name(self) -> &'static str {
        match self {
            Role::Life => "life",
            Role::Observer => "observer",
            Role::Probe => "probe",
            Role::Recovery => "recovery",
        }
    }
}

/// One kind of cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// A store process started (`exec`) or forked by a fork server, until it exists.
    Start(Role),
    /// Its `hello` answered: for a started process, the adapter's start-up and imports.
    Hello(Role),
    /// A request to a store process and its reply (any but `hello` and `fork`).
    RoundTrip,
    /// The in-process store's own work (agentstore, in the agent or observing).
    Store,
    /// The checker's judging of the trial.
    Checker,
    /// An agent process started (fork and exec, by the harness).
    AgentStart,
    /// What remains of an agent life's wall time: the agent's own work
    /// (scenario, tools, world, reporting) and its killed store processes' reaping.
    Agent,
    /// The tracer thread's CPU time on a traced life's stops, and how many
    /// times it stopped the life's processes (seccomp, syscall, event and
    /// signal stops, as `syscall_trace_stops` counts them). It overlaps the lives' parts
    /// (a stopped process waits inside them), so it is not added up.
    Ptrace,
    /// What an agent reported beyond its life's wall time: a double count,
    /// always 0 when the parts are disjoint ([`TrialTimings::check`]).
    Excess,
    /// An agent's work while the harness observed the disk (the session it
    /// closes after reporting a recovery): hidden behind the observation,
    /// whose time it is; not added up.
    Beside,
}

/// Slots in [`Counts`], in display order.
const SLOTS: usize = 16;

impl Part {
    /// Every part, in the order the report shows them.
    pub const ALL: [Part; SLOTS] = [
        Part::Start(Role::Life),
        Part::Start(Role::Observer),
        Part::Start(Role::Probe),
        Part::Start(Role::Recovery),
        Part::Hello(Role::Life),
        Part::Hello(Role::Observer),
        Part::Hello(Role::Probe),
        Part::Hello(Role::Recovery),
        Part::RoundTrip,
        Part::Store,
        Part::Checker,
        Part::AgentStart,
        Part::Agent,
        Part::Ptrace,
        Part::Excess,
        Part::Beside,
    ];

    fn slot(self) -> usize {
        match self {
            Part::Start(r) => r as usize,
            Part::Hello(r) => 4 + r as usize,
            Part::RoundTrip => 8,
            Part::Store => 9,
            Part::Checker => 10,
            Part::AgentStart => 11,
            Part::Agent => 12,
            Part::Ptrace => 13,
            Part::Excess => 14,
            Part::Beside => 15,
        }
    }

    /// Its name in the report and the JSON (`start_life`, `hello_observer`, `round_trips`, …).
    pub fn name(self) -> &'static str {
        match self {
            Part::Start(Role::Life) => "start_life",
            Part::Start(Role::Observer) => "start_observer",
            Part::Start(Role::Probe) => "start_probe",
            Part::Start(Role::Recovery) => "start_recovery",
            Part::Hello(Role::Life) => "hello_life",
            Part::Hello(Role::Observer) => "hello_observer",
            Part::Hello(Role::Probe) => "hello_probe",
            Part::Hello(Role::Recovery) => "hello_recovery",
            Part::RoundTrip => "round_trips",
            Part::Store => "store",
            Part::Checker => "checker",
            Part::AgentStart => "agent_start",
            Part::Agent => "agent",
            Part::Ptrace => "ptrace",
            Part::Excess => "excess",
            Part::Beside => "beside_observations",
        }
    }

    /// Whether it is one of the disjoint parts a trial's wall time is made of.
    pub fn adds_up(self) -> bool {
        !matches!(self, Part::Ptrace | Part::Excess | Part::Beside)
    }
}

/// How many of each part, and their time in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub n: [u64; SLOTS],
    pub micros: [u64; SLOTS],
}

impl Counts {
    pub fn add(&mut self, part: Part, count: u64, micros: u64) {
        self.n[part.slot()] += count;
        self.micros[part.slot()] += micros;
    }

    pub fn merge(&mut self, other: &Counts) {
        for i in 0..SLOTS {
            self.n[i] += other.n[i];
            self.micros[i] += other.micros[i];
        }
    }

    pub fn get(&self, part: Part) -> (u64, u64) {
        (self.n[part.slot()], self.micros[part.slot()])
    }

    /// Microseconds of the parts that add up ([`Part::adds_up`]).
    pub fn total(&self) -> u64 {
        Part::ALL
            .iter()
            .filter(|p| p.adds_up())
            .map(|p| self.micros[p.slot()])
            .sum()
    }

    fn from_words(words: &[u64]) -> Counts {
        let mut c = Counts::default();
        for i in 0..SLOTS {
            c.n[i] = words.get(2 * i).copied().unwrap_or(0);
            c.micros[i] = words.get(2 * i + 1).copied().unwrap_or(0);
        }
        c
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static COLLECTOR: RefCell<Option<Counts>> = const { RefCell::new(None) };
    static ROLE: Cell<Role> = const { Cell::new(Role::Life) };
    /// Inside [`beside_the_harness`]: every part is recorded as [`Part::Beside`].
    static BESIDE: Cell<bool> = const { Cell::new(false) };
}

/// Costs of the campaign outside its trials (probes, power-loss recoveries).
static OUTSIDE_TRIALS: Mutex<Counts> = Mutex::new(Counts {
    n: [0; SLOTS],
    micros: [0; SLOTS],
});

/// Turns recording on in this process (`--timings`).
pub fn enable() {
    ENABLED.store(true, Ordering::SeqCst);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::SeqCst)
}

/// Records `took` for one `part` (where a collector or a shared file takes it).
pub fn record(part: Part, took: Duration) {
    record_n(part, 1, took.as_micros() as u64);
}

fn record_n(part: Part, count: u64, micros: u64) {
    let part = if BESIDE.with(Cell::get) {
        Part::Beside
    } else {
        part
    };
    if let Some(shared) = SHARED.get() {
        shared.add(part, count, micros);
        return;
    }
    COLLECTOR.with(|c| {
        if let Some(c) = c.borrow_mut().as_mut() {
            c.add(part, count, micros);
        }
    });
}

/// Runs `f` and records its time as `part`.
pub fn timed<T>(part: Part, f: impl FnOnce() -> T) -> T {
    let at = Instant::now();
    let out = f();
    record(part, at.elapsed());
    out
}

/// Runs `f`, work an agent does while the harness observes the disk
/// (after it reported a recovery), recording its parts as [`Part::Beside`]:
/// the observation's time is the trial's, and this runs beside it.
pub fn beside_the_harness<T>(f: impl FnOnce() -> T) -> T {
    let before = BESIDE.with(|b| b.replace(true));
    let out = f();
    BESIDE.with(|b| b.set(before));
    out
}

/// The role of the store processes this thread starts now.
pub fn role() -> Role {
    ROLE.with(Cell::get)
}

/// Runs `f` with the store processes this thread starts counted as `role`.
pub fn as_role<T>(role: Role, f: impl FnOnce() -> T) -> T {
    let before = ROLE.with(|r| r.replace(role));
    let out = f();
    ROLE.with(|r| r.set(before));
    out
}

/// Runs `f` collecting what this thread records (when enabled): its result,
/// and the figures if enabled.
pub fn collect<T>(f: impl FnOnce() -> T) -> (T, Option<Counts>) {
    if !enabled() {
        return (f(), None);
    }
    let (out, got) = collect_always(f);
    (out, Some(got))
}

/// Runs `f` collecting what this thread records.
fn collect_always<T>(f: impl FnOnce() -> T) -> (T, Counts) {
    let outer = COLLECTOR.with(|c| c.replace(Some(Counts::default())));
    let out = f();
    let got = COLLECTOR.with(|c| c.replace(outer));
    (out, got.unwrap_or_default())
}

/// [`collect`]s `f` as costs of the campaign outside its trials, under `role`.
pub fn outside_trials<T>(role: Role, f: impl FnOnce() -> T) -> T {
    let (out, got) = collect(|| as_role(role, f));
    if let Some(c) = got {
        OUTSIDE_TRIALS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .merge(&c);
    }
    out
}

/// What [`outside_trials`] collected so far.
pub fn outside_trials_counts() -> Counts {
    *OUTSIDE_TRIALS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether this thread collects what it records now (inside [`collect`], when enabled).
pub fn collecting() -> bool {
    COLLECTOR.with(|c| c.borrow().is_some())
}

/// This thread's collected total so far (the parts that add up), if collecting.
fn collected_total() -> Option<u64> {
    COLLECTOR.with(|c| c.borrow().as_ref().map(Counts::total))
}

/// Where an agent life's figures are while it runs: taken when it started.
#[derive(Debug)]
pub struct LifeClock {
    started: Instant,
    /// The collector's total when the life started.
    harness_before: u64,
}

/// Marks the start of an agent life on this thread (before its process
/// starts), when collecting.
pub fn life_started() -> Option<LifeClock> {
    collected_total().map(|harness_before| LifeClock {
        started: Instant::now(),
        harness_before,
    })
}

/// Adds an ended life's figures: what its agent recorded in `file`
/// (absent when it died before it shared it), and the rest of its wall
/// time, less what this thread recorded meanwhile (the observations of
/// its pauses), as [`Part::Agent`].
pub fn life_ended(clock: LifeClock, file: &Path) {
    let wall = clock.started.elapsed().as_micros() as u64;
    let agent = read_shared(file).unwrap_or_default();
    let harness = collected_total()
        .unwrap_or(clock.harness_before)
        .saturating_sub(clock.harness_before);
    let reported = agent.total() + harness;
    COLLECTOR.with(|c| {
        if let Some(c) = c.borrow_mut().as_mut() {
            c.merge(&agent);
            c.add(Part::Agent, 1, wall.saturating_sub(reported));
            c.add(Part::Excess, 0, reported.saturating_sub(wall));
        }
    });
}

/// The figures of an agent's shared file.
pub fn read_shared(path: &Path) -> std::io::Result<Counts> {
    let bytes = std::fs::read(path)?;
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
        .collect();
    Ok(Counts::from_words(&words))
}

/// The file an agent records into, mapped into its memory.
struct Shared {
    words: &'static [AtomicU64],
}

impl Shared {
    fn add(&self, part: Part, count: u64, micros: u64) {
        self.words[2 * part.slot()].fetch_add(count, Ordering::Relaxed);
        self.words[2 * part.slot() + 1].fetch_add(micros, Ordering::Relaxed);
    }
}

static SHARED: OnceLock<Shared> = OnceLock::new();

/// Why an agent cannot share its figures.
#[derive(Debug, thiserror::Error)]
#[error("--timings {}: {source}", path.display())]
pub struct ShareError {
    path: std::path::PathBuf,
    source: std::io::Error,
}

/// In an agent: records everything from now on into `path` (created),
/// mapped into memory, for the harness to read once the life has ended.
pub fn share_into(path: &Path) -> Result<(), ShareError> {
    let bad = |source: std::io::Error| ShareError {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(bad)?;
    let len = 2 * SLOTS * std::mem::size_of::<u64>();
    file.set_len(len as u64).map_err(bad)?;
    let words = map(&file, len).map_err(|e| bad(e.into()))?;
    let _ = SHARED.set(Shared { words });
    Ok(())
}

/// `file`'s first `len` bytes (zeros), mapped shared for the life of the process.
fn map(file: &std::fs::File, len: usize) -> nix::Result<&'static [AtomicU64]> {
    use nix::sys::mman::{mmap, MapFlags, ProtFlags};
    let size = std::num::NonZeroUsize::new(len).ok_or(nix::Error::EINVAL)?;
    // SAFETY: a fresh shared mapping of a file this process just sized to
    // `len` bytes; it is never unmapped (leaked for the process's life),
    // page-aligned (so aligned for u64), and only ever accessed through
    // atomics, here and (after this process ended) by the harness's read.
    #[allow(unsafe_code)]
    unsafe {
        let at = mmap(
            None,
            size,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
            file,
            0,
        )?;
        Ok(std::slice::from_raw_parts(
            at.as_ptr() as *const AtomicU64,
            len / std::mem::size_of::<u64>(),
        ))
    }
}

/// The CPU time the calling thread has used so far (the tracer's thread).
pub fn thread_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_THREAD) {
        Ok(u) => {
            let us = |t: nix::sys::time::TimeVal| {
                Duration::from_secs(t.tv_sec().max(0) as u64)
                    + Duration::from_micros(t.tv_usec().max(0) as u64)
            };
            us(u.user_time()) + us(u.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// Records a traced life's tracer CPU time and how many times it stopped the life.
pub fn record_ptrace(stops: u64, cpu: Duration) {
    record_n(Part::Ptrace, stops, cpu.as_micros() as u64);
}

/// One trial's figures: its wall time and its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrialTimings {
    pub wall_micros: u64,
    pub counts: Counts,
}

/// Parts of a trial that do not add up to its wall time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the parts of a trial's {wall_micros} µs add up to {sum_micros} µs ({excess_micros} µs reported by agents beyond their lives' wall time): more than 10 % (or 5 ms) off")]
pub struct TimingMismatch {
    pub wall_micros: u64,
    pub sum_micros: u64,
    pub excess_micros: u64,
}

impl TrialTimings {
    /// What is left of the wall time after the measured parts (the
    /// harness's own bookkeeping: directories, the world, the workspace
    /// snapshot); negative when the parts overlap.
    pub fn other_micros(&self) -> i64 {
        self.wall_micros as i64 - self.counts.total() as i64
    }

    /// The measured parts, [`TrialTimings::other_micros`] included, add up
    /// to the wall time within 10 %, or [`HANDOVER_SLACK_MICROS`] for a
    /// trial shorter than ten times that: no part counted twice, no agent
    /// reporting more than its life lasted.
    pub fn check(&self) -> Result<(), TimingMismatch> {
        let sum = self.counts.total();
        let excess = self.counts.get(Part::Excess).1;
        let off = sum.saturating_sub(self.wall_micros) + excess;
        if off > (self.wall_micros / 10).max(HANDOVER_SLACK_MICROS) {
            return Err(TimingMismatch {
                wall_micros: self.wall_micros,
                sum_micros: sum,
                excess_micros: excess,
            });
        }
        Ok(())
    }
}

/// What two processes' clock readings around one hand-over may overlap
/// (an agent writes its report and reads its clock after the harness, woken
/// by the report, read its own): a preempted agent makes it a few ms on a
/// loaded machine, which is more than a tenth of a short in-process trial.
pub const HANDOVER_SLACK_MICROS: u64 = 5_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_add_up_and_a_double_count_is_caught() {
        let mut counts = Counts::default();
        counts.add(Part::Hello(Role::Observer), 2, 400_000);
        counts.add(Part::RoundTrip, 10, 300_000);
        counts.add(Part::Ptrace, 50, 5_000_000);
        let t = TrialTimings {
            wall_micros: 1_000_000,
            counts,
        };
        assert_eq!(t.counts.total(), 700_000, "ptrace overlaps: not added");
        assert_eq!(t.other_micros(), 300_000);
        assert_eq!(t.check(), Ok(()));
        let mut twice = t;
        twice.counts.add(Part::RoundTrip, 10, 300_000);
        twice.counts.add(Part::Agent, 1, 200_000);
        let e = twice.check().unwrap_err();
        assert_eq!(e.sum_micros, 1_200_000);
        let mut beyond = t;
        beyond.counts.add(Part::Excess, 0, 150_000);
        assert!(beyond.check().is_err(), "an agent beyond its life");
        // A short trial may overlap by the hand-over slack, not more.
        let mut short = Counts::default();
        short.add(Part::Agent, 1, 10_000);
        short.add(Part::Excess, 0, HANDOVER_SLACK_MICROS);
        let short = TrialTimings {
            wall_micros: 10_000,
            counts: short,
        };
        assert_eq!(short.check(), Ok(()));
        let mut over = short;
        over.counts.add(Part::Excess, 0, 1);
        assert!(over.check().is_err(), "beyond the slack");
    }

    #[test]
    fn an_agent_shares_its_figures_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("life0.timings");
        // Written as a shared mapping does (native u64 pairs per slot).
        let mut words = vec![0u64; 2 * SLOTS];
        words[2 * Part::RoundTrip.slot()] = 3;
        words[2 * Part::RoundTrip.slot() + 1] = 42;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        std::fs::write(&path, bytes).unwrap();
        let c = read_shared(&path).unwrap();
        assert_eq!(c.get(Part::RoundTrip), (3, 42));
        assert_eq!(c.total(), 42);
        assert!(read_shared(&dir.path().join("none")).is_err());
    }

    #[test]
    fn a_collector_takes_what_its_thread_records_under_its_role() {
        // Outside a collector, nothing is kept.
        record(Part::Store, Duration::from_micros(5));
        let (_, got) = collect_always(|| {
            as_role(Role::Observer, || {
                record(Part::Start(role()), Duration::from_micros(7))
            });
            record(Part::Start(role()), Duration::from_micros(1));
        });
        assert_eq!(got.get(Part::Start(Role::Observer)), (1, 7));
        assert_eq!(got.get(Part::Start(Role::Life)), (1, 1));
    }
}
