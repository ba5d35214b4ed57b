//! `agentstore bench`: run the latency suite and print, save and plot it.
//!
//! Exit codes: 0 after a complete run (the report holds figures and ratios,
//! no verdicts), 2 for a missing or unwritable `--dir`, a bad
//! output path or `--seconds`, 1 when a measurement or writing the output
//! fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentstore::bench::{self, BenchError, Config, Progress};
use indicatif::{ProgressBar, ProgressStyle};

use super::{stdout_error, Failure, Outcome};

/// Measure this disk's sync latency and the store's cost on top of it (pg_test_fsync style).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory on the file system to measure (a scratch subdirectory is created and removed in it).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Seconds per measurement (the run takes about 21 of them; fractions allowed).
    #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
    seconds: f64,
    /// Also write the report as JSON (for CI trend tracking).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also write a latency CDF of every method as an SVG figure.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_finite() && v > 0.0 && v <= 3600.0 {
        Ok(v)
    } else {
        Err(format!("{s} is out of range (0 < seconds <= 3600)"))
    }
}

/// A progress bar on stderr (indicatif hides it when stderr is not a terminal).
struct Bar {
    bar: ProgressBar,
    /// Units of the step in progress, counted when it ends.
    running: u64,
}

impl Progress for Bar {
    fn begin(&mut self, total: u64) {
        self.bar.set_length(total);
    }
    fn step(&mut self, what: &str, units: u64) {
        self.bar.inc(self.running);
        self.running = units;
        self.bar.set_message(what.to_string());
    }
    fn finish(&mut self) {
        self.bar.finish_and_clear();
    }
}

pub fn run(args: Args) -> Outcome {
    for out in [&args.json, &args.plot].into_iter().flatten() {
        check_output(out)?;
    }
    let config = Config::new(&args.dir, Duration::from_secs_f64(args.seconds));
    // Ctrl-C and SIGTERM stop the run between ops; the scratch directory's
    // Drop removes it on the way out (exit 130 or 143).
    agentstore::interrupt::install()
        .map_err(|e| Failure::Problem(format!("cannot install the signal handlers: {e}")))?;
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {wide_msg}")
            .expect("the template is valid"),
    );
    let mut progress = Bar {
        bar: bar.clone(),
        running: 0,
    };
    let result = bench::run(&config, &mut progress);
    bar.finish_and_clear();
    let run = result.map_err(|e| match e {
        BenchError::Dir { .. } => Failure::Usage(e.to_string()),
        BenchError::Interrupted => Failure::Interrupted,
        _ => Failure::Problem(format!("bench: {e}")),
    })?;
    std::io::stdout()
        .lock()
        .write_all(run.report.render_text().as_bytes())
        .map_err(stdout_error)?;
    if let Some(path) = &args.json {
        let json =
            serde_json::to_string_pretty(&run.report).expect("a report always serializes to JSON");
        write_output(path, json + "\n")?;
    }
    if let Some(path) = &args.plot {
        write_output(path, run.svg())?;
    }
    Ok(())
}

fn write_output(path: &Path, text: String) -> Outcome {
    std::fs::write(path, text)
        .map_err(|e| Failure::Problem(format!("cannot write {}: {e}", path.display())))
}

/// Fails fast (before a run of several seconds) if an output file cannot be created.
fn check_output(path: &Path) -> Outcome {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(Failure::Usage(format!(
            "cannot write {}: {} is not a directory",
            path.display(),
            parent.display()
        )));
    }
    if path.is_dir() {
        return Err(Failure::Usage(format!(
            "cannot write {}: it is a directory",
            path.display()
        )));
    }
    Ok(())
}
