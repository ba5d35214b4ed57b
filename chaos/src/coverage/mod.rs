//! Coverage of the reference store under a campaign (`agentchaos run
//! --coverage`, in-process agentstore, from the `agentchaos-coverage`
//! binary that `chaos/coverage/build` makes): per code region of
//! `store/src`, how many trials
//!
//! - (a) executed it at all, in any agent life of the trial;
//! - (b) executed it in the window of a fault: in the life the plan
//!   faulted (a kill, a tear or a power cut at a crash point, a timer
//!   kill, a syscall fault), between the agent's last report to the
//!   harness before the fault and the process's death, or, for an injected
//!   error the process survives (ENOSPC, EIO), up to its first report
//!   after the fault. A report is a line the agent writes before and after
//!   each append, so the window is the store call the fault landed in, or
//!   the code that handled its error;
//! - (c) did (b) and were then observed: the trial was carried out as
//!   planned, the harness observed the store after the faulted life (and
//!   at the end) and the checker compared what it served with the model.
//!   (c) says an observation that could tell the region's result apart
//!   followed, not that it did: how well the checks discriminate is the
//!   mutation score's measure.
//!
//! Regions, not branches: branch coverage needs an unstable rustc flag.
//! Every agent life runs with `LLVM_PROFILE_FILE` in continuous mode
//! (`%c`): the counters live in the mmapped file, so a SIGKILLed life
//! leaves them as they were at its death. A faulted life also copies its
//! profile after every report ([`after_report`]); the window is the
//! difference of two such states.
//!
//! Probes are counted beside trials ([`tally_probe`]): a probe child
//! writes a profile of its own (`LLVM_PROFILE_FILE` from [`probe_env`]).
//! Its regions count as (a) executed; for a probe that breaks bytes on
//! disk before its child starts (damage, fused, zeros, cut, tail), the
//! whole child is the fault's window: everything the store runs there
//! meets the broken copy, so its regions count as (b), and as (c) when
//! the probe's verdict was judged. The other probes (ledger, rules, lock,
//! limit) try a forbidden request on intact files: (a) only. Crash-free
//! trace runs and the power-loss nemesis are not counted (their processes
//! write no profile).
//!
//! This module owns the profiles and the figures; it must never decide
//! what a trial does.

mod faultcode;
mod mapping;
mod profraw;
pub mod summary;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use mapping::{Mapping, Tools};
use profraw::Layout;
pub use summary::Summary;

/// Whether this binary was built for coverage (`chaos/coverage/build`).
pub const BUILT: bool = cfg!(feature = "coverage");

/// Set by the harness for a faulted life: the profile to copy after each
/// report, as `PROFILE.BYTES` (the bytes reported so far).
pub const SNAPSHOTS_ENV: &str = "AGENTCHAOS_COVERAGE_SNAPSHOTS";

/// The profile of a process that is not an agent life of a trial: none.
const NO_PROFILE: &str = "/dev/null";

/// The harness has re-executed itself with [`NO_PROFILE`].
const HARNESS_ENV: &str = "AGENTCHAOS_COVERAGE_HARNESS";

/// Why coverage could not be measured: the harness's failure.
#[derive(Debug, thiserror::Error)]
pub enum CoverageError {
    #[error("--coverage needs agentchaos-coverage (agentstore instrumented): build it with chaos/coverage/build and run target/debug/agentchaos-coverage")]
    NotBuilt,
    #[error("--coverage measures the in-process agentstore, not a store behind --adapter")]
    Adapter,
    #[error("coverage: {0}")]
    Tools(String),
    #[error("coverage: the profile {}: {why}", path.display())]
    Profile { path: PathBuf, why: String },
    #[error("coverage: {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// How a faulted life's window ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The fault killed the process: from its last report to its death.
    UntilDeath,
    /// It survived an injected error after reporting this many bytes:
    /// from that report to its next one (or its end).
    Survived { reported: u64 },
}

/// A life of a trial that the plan faulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultedLife {
    pub index: u32,
    pub window: Window,
    /// The store was observed after it and the trial judged.
    pub observed: bool,
}

#[derive(Debug)]
struct Collector {
    binary: PathBuf,
    tools: Tools,
    layout: Layout,
    template: Vec<u8>,
    mapping: Arc<Mapping>,
    work: PathBuf,
    tally: Tally,
}

/// Per region, trials and probes that (a) executed it, (b) in a fault's
/// window, (c) and were observed; and every counted process's counters
/// summed.
#[derive(Debug, Default)]
struct Tally {
    trials: u64,
    probes: u64,
    executed: Vec<u64>,
    faulted: Vec<u64>,
    observed: Vec<u64>,
    sum: Vec<i64>,
}

static COLLECTOR: OnceLock<Mutex<Collector>> = OnceLock::new();

/// Whether this campaign measures coverage.
pub fn enabled() -> bool {
    COLLECTOR.get().is_some()
}

/// Makes every process this harness starts write no profile unless told
/// to: re-executes the harness with `LLVM_PROFILE_FILE=/dev/null` (the
/// profile runtime reads it once, at start). Returns only if that was
/// done already, or on error.
pub fn reexec_without_profile() -> Result<(), CoverageError> {
    use std::os::unix::process::CommandExt;
    if !BUILT {
        return Err(CoverageError::NotBuilt);
    }
    if std::env::var_os(HARNESS_ENV).is_some() {
        return Ok(());
    }
    let exe = std::env::current_exe().map_err(|e| CoverageError::Io {
        what: "cannot find",
        path: "my own binary".into(),
        source: e,
    })?;
    let e = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .env("LLVM_PROFILE_FILE", NO_PROFILE)
        .env(HARNESS_ENV, "1")
        .exec();
    Err(CoverageError::Io {
        what: "cannot re-execute",
        path: exe,
        source: e,
    })
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CoverageError {
    let path = path.to_path_buf();
    move |source| CoverageError::Io { what, path, source }
}

/// Starts measuring: finds the LLVM tools, has `binary` (this harness)
/// write a profile to learn its layout, and decodes which counters each
/// region of the store counts. `work` is a scratch directory of this run.
pub fn begin(binary: &Path, work: &Path) -> Result<(), CoverageError> {
    if !BUILT {
        return Err(CoverageError::NotBuilt);
    }
    let tools = Tools::find()?;
    std::fs::create_dir_all(work).map_err(io("cannot create", work))?;
    let template_path = work.join("template.profraw");
    let status = std::process::Command::new(binary)
        .arg("scenarios")
        .env("LLVM_PROFILE_FILE", work.join("template%c.profraw"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(io("cannot run", binary))?;
    let template = std::fs::read(&template_path).map_err(|e| CoverageError::Profile {
        path: template_path.clone(),
        why: format!(
            "`{} scenarios` ({status}) wrote none: {e}",
            binary.display()
        ),
    })?;
    let layout = Layout::of(&template, &template_path)?;
    let mapping = Mapping::probe(&tools, binary, &layout, &template, work)?;
    let regions = mapping.regions.len();
    let collector = Collector {
        binary: binary.to_path_buf(),
        tools,
        template,
        tally: Tally {
            executed: vec![0; regions],
            faulted: vec![0; regions],
            observed: vec![0; regions],
            sum: vec![0; layout.counters],
            trials: 0,
            probes: 0,
        },
        layout,
        mapping: Arc::new(mapping),
        work: work.to_path_buf(),
    };
    COLLECTOR
        .set(Mutex::new(collector))
        .map_err(|_| CoverageError::Tools("coverage was started twice".into()))
}

fn profile_of(trial_dir: &Path, life: u32) -> PathBuf {
    trial_dir.join(format!("cov-life{life}.profraw"))
}

/// The environment of agent life `index` of a trial in `trial_dir` (none
/// when coverage is off): its profile, and for a faulted life the copies
/// after each report.
pub fn life_env(trial_dir: &Path, index: u32, faulted: bool) -> Vec<(&'static str, String)> {
    if !enabled() {
        return Vec::new();
    }
    let profile = profile_of(trial_dir, index);
    let mut env = vec![(
        "LLVM_PROFILE_FILE",
        profile
            .display()
            .to_string()
            .replace(".profraw", "%c.profraw"),
    )];
    if faulted {
        env.push((SNAPSHOTS_ENV, profile.display().to_string()));
    }
    env
}

/// In a faulted agent life: copies its profile as it is now, after
/// `reported` bytes of reports, to `PROFILE.REPORTED` (through a rename:
/// a kill mid-copy leaves no partial copy).
pub fn after_report(reported: u64) {
    static PROFILE: OnceLock<Option<PathBuf>> = OnceLock::new();
    let Some(profile) = PROFILE.get_or_init(|| std::env::var_os(SNAPSHOTS_ENV).map(PathBuf::from))
    else {
        return;
    };
    let copy = PathBuf::from(format!("{}.{reported}", profile.display()));
    let partial = PathBuf::from(format!("{}.partial", profile.display()));
    // A missing copy only widens the window to an earlier report.
    if let Ok(bytes) = std::fs::read(profile) {
        if std::fs::write(&partial, bytes).is_ok() {
            let _ = std::fs::rename(&partial, &copy);
        }
    }
}

/// The copies of `profile` after each report, by bytes reported.
fn snapshots(profile: &Path) -> Vec<(u64, PathBuf)> {
    let (Some(dir), Some(name)) = (profile.parent(), profile.file_name()) else {
        return Vec::new();
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let reported = name.strip_prefix(&prefix)?.parse().ok()?;
            Some((reported, e.path()))
        })
        .collect();
    found.sort();
    found
}

impl Collector {
    fn counters(&self, path: &Path) -> Result<Vec<i64>, CoverageError> {
        let bytes = match std::fs::read(path) {
            // Killed (a timer) before the profile runtime had made its
            // file, or before it had sized it: no store code ran yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            read => read.map_err(io("cannot read", path))?,
        };
        Ok(self
            .layout
            .counted(&bytes, path)?
            .into_iter()
            .map(|c| c as i64)
            .collect())
    }

    /// The window of a faulted life: its counters at the window's end minus
    /// those at its start.
    fn window(&self, profile: &Path, last: &[i64], window: Window) -> Vec<i64> {
        let copies = snapshots(profile);
        let (start, end) = match window {
            Window::UntilDeath => (copies.last(), None),
            Window::Survived { reported } => (
                copies.iter().rev().find(|c| c.0 <= reported),
                copies.iter().find(|c| c.0 > reported),
            ),
        };
        let read = |c: Option<&(u64, PathBuf)>| c.and_then(|(_, p)| self.counters(p).ok());
        let start = read(start).unwrap_or_else(|| vec![0; last.len()]);
        let end = read(end).unwrap_or_else(|| last.to_vec());
        end.iter().zip(&start).map(|(e, s)| e - s).collect()
    }
}

/// Counts one trial in `trial_dir` that ran `lives` agent lives, of which
/// `faulted` were faulted. Its files are read before the directory goes.
pub fn tally(trial_dir: &Path, lives: u32, faulted: &[FaultedLife]) -> Result<(), CoverageError> {
    let Some(collector) = COLLECTOR.get() else {
        return Ok(());
    };
    // Read and evaluated outside the lock; added under it.
    let (mapping, layout_counters) = {
        let c = collector.lock().unwrap_or_else(|p| p.into_inner());
        (c.mapping.clone(), c.layout.counters)
    };
    let mut executed = vec![false; mapping.regions.len()];
    let mut in_window = vec![false; mapping.regions.len()];
    let mut observed = vec![false; mapping.regions.len()];
    let mut sum = vec![0i64; layout_counters];
    for index in 0..lives {
        let profile = profile_of(trial_dir, index);
        let c = collector.lock().unwrap_or_else(|p| p.into_inner());
        let counters = c.counters(&profile)?;
        let fault = faulted.iter().find(|f| f.index == index);
        let window = fault.map(|f| c.window(&profile, &counters, f.window));
        drop(c);
        for (s, v) in sum.iter_mut().zip(&counters) {
            *s += v;
        }
        for (r, region) in mapping.regions.iter().enumerate() {
            executed[r] |= region.count(&counters) > 0;
            if let (Some(w), Some(f)) = (&window, fault) {
                if region.count(w) > 0 {
                    in_window[r] = true;
                    observed[r] |= f.observed;
                }
            }
        }
    }
    let mut c = collector.lock().unwrap_or_else(|p| p.into_inner());
    c.tally.trials += 1;
    c.tally.add(&executed, &in_window, &observed, &sum);
    Ok(())
}

impl Tally {
    /// Adds one trial's or probe's regions (a), (b), (c) and counters.
    fn add(&mut self, executed: &[bool], in_window: &[bool], observed: &[bool], sum: &[i64]) {
        for (total, hit) in [
            (&mut self.executed, executed),
            (&mut self.faulted, in_window),
            (&mut self.observed, observed),
        ] {
            for (n, h) in total.iter_mut().zip(hit) {
                *n += u64::from(*h);
            }
        }
        for (s, v) in self.sum.iter_mut().zip(sum) {
            *s += v;
        }
    }
}

/// The profile name of a probe child (one per process: `%p`), in the
/// probe's scratch directory `dir`.
const PROBE_PROFILE_PREFIX: &str = "cov-probe-";

/// The environment of a probe child whose scratch directory is `dir`
/// (none when coverage is off): its own profile there.
pub fn probe_env(dir: &Path) -> Vec<(&'static str, String)> {
    if !enabled() {
        return Vec::new();
    }
    vec![(
        "LLVM_PROFILE_FILE",
        dir.join(format!("{PROBE_PROFILE_PREFIX}%p%c.profraw"))
            .display()
            .to_string(),
    )]
}

/// Counts one probe whose children wrote their profiles into `dir`: its
/// regions executed (a); when `breaks_bytes` (the probe altered the files
/// before its child opened them) also in a fault's window (b), and
/// observed (c) when its verdict was `judged`. Read before `dir` goes.
pub fn tally_probe(dir: &Path, breaks_bytes: bool, judged: bool) -> Result<(), CoverageError> {
    let Some(collector) = COLLECTOR.get() else {
        return Ok(());
    };
    let mut profiles: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io("cannot list", dir))?
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(PROBE_PROFILE_PREFIX)
        })
        .map(|e| e.path())
        .collect();
    profiles.sort();
    let (mapping, layout_counters) = {
        let c = collector.lock().unwrap_or_else(|p| p.into_inner());
        (c.mapping.clone(), c.layout.counters)
    };
    let mut sum = vec![0i64; layout_counters];
    for profile in &profiles {
        let counters = collector
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .counters(profile)?;
        for (s, v) in sum.iter_mut().zip(&counters) {
            *s += v;
        }
    }
    let executed: Vec<bool> = mapping.regions.iter().map(|r| r.count(&sum) > 0).collect();
    let in_window: Vec<bool> = executed.iter().map(|&e| e && breaks_bytes).collect();
    let observed: Vec<bool> = in_window.iter().map(|&w| w && judged).collect();
    let mut c = collector.lock().unwrap_or_else(|p| p.into_inner());
    c.tally.probes += 1;
    c.tally.add(&executed, &in_window, &observed, &sum);
    Ok(())
}

/// Ends the measurement: checks the decoded mapping against llvm-cov on
/// every counted process's counters summed, and returns the figures.
pub fn finish() -> Result<Summary, CoverageError> {
    let Some(collector) = COLLECTOR.get() else {
        return Err(CoverageError::Tools("coverage was not started".into()));
    };
    let c = collector.lock().unwrap_or_else(|p| p.into_inner());
    if c.tally.trials + c.tally.probes > 0 {
        let raw = c.work.join("all-lives.profraw");
        let sum: Vec<u64> = c.tally.sum.iter().map(|&v| v as u64).collect();
        std::fs::write(&raw, c.layout.with_counters(&c.template, &sum))
            .map_err(io("cannot write", &raw))?;
        c.mapping.verify(&c.tools, &c.binary, &raw, &c.tally.sum)?;
    }
    let fault_code = fault_profile_regions(&c.mapping.regions)?;
    Ok(Summary::of(
        &c.mapping.regions,
        &fault_code,
        c.tally.trials,
        c.tally.probes,
        &c.tally.executed,
        &c.tally.faulted,
        &c.tally.observed,
    ))
}

/// Which of `regions` are fault-profile code, from the store's source
/// where this binary was built (read once per file).
fn fault_profile_regions(regions: &[mapping::Region]) -> Result<Vec<bool>, CoverageError> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut blocks: std::collections::HashMap<&str, Vec<faultcode::Block>> = Default::default();
    let mut flags = Vec::with_capacity(regions.len());
    for r in regions {
        if !blocks.contains_key(r.file.as_str()) {
            let path = root.join(&r.file);
            let source = std::fs::read_to_string(&path).map_err(io("cannot read", &path))?;
            let found = faultcode::blocks(&source).map_err(|e| {
                let at = e.span().start();
                CoverageError::Tools(format!(
                    "cannot parse {} (line {}, column {}) to find its fault-profile code: {e}",
                    path.display(),
                    at.line,
                    at.column + 1
                ))
            })?;
            blocks.insert(&r.file, found);
        }
        let in_one = blocks[r.file.as_str()]
            .iter()
            .any(|b| b.holds(r.start, r.end));
        flags.push(in_one);
    }
    Ok(flags)
}
