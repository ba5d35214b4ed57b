//! `agentstore bench`: run the latency suite and print, save and plot it.
//!
//! Exit codes: 0 after a complete run (whether or not the goals are met; the
//! verdicts are in the report), 2 for a bad `--dir`/output path or
//! `--seconds`, 1 when a measurement or writing the output fails.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agentstore::bench::{self, BenchError, Config, Progress};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory on the file system to measure (a scratch subdirectory is created and removed in it).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Seconds per measurement (about 25 measurements; fractions allowed).
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

pub fn run(args: Args) -> ExitCode {
    for out in [&args.json, &args.plot].into_iter().flatten() {
        if let Err(why) = check_output(out) {
            eprintln!("agentstore bench: {why}");
            return ExitCode::from(2);
        }
    }
    let config = Config::new(&args.dir, Duration::from_secs_f64(args.seconds));
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {wide_msg}")
            .expect("the template is valid"),
    );
    let result = bench::run(
        &config,
        &mut Bar {
            bar: bar.clone(),
            running: 0,
        },
    );
    bar.finish_and_clear();
    let run = match result {
        Ok(run) => run,
        Err(e) => {
            eprintln!("agentstore bench: {e}");
            return ExitCode::from(match e {
                BenchError::Dir { .. } => 2,
                _ => 1,
            });
        }
    };
    print!("{}", run.report.render_text());
    if let Some(path) = &args.json {
        let json =
            serde_json::to_string_pretty(&run.report).expect("a report always serializes to JSON");
        if let Err(e) = std::fs::write(path, json + "\n") {
            eprintln!("agentstore bench: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if let Some(path) = &args.plot {
        if let Err(e) = std::fs::write(path, run.svg()) {
            eprintln!("agentstore bench: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

/// Fails fast (before a run of several seconds) if an output file cannot be created.
fn check_output(path: &Path) -> Result<(), String> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(format!(
            "cannot write {}: {} is not a directory",
            path.display(),
            parent.display()
        ));
    }
    if path.is_dir() {
        return Err(format!(
            "cannot write {}: it is a directory",
            path.display()
        ));
    }
    Ok(())
}
