//! The `agentchaos` command line: a thin layer over the library.
//!
//! Exit codes ([`Failure`], [`verdict`]): 0 clean; 1 the store under test
//! failed (violations, or it broke the adapter protocol or refused the
//! harness's observation); 2 bad usage or input (one line naming the file
//! and line); 3 the harness itself failed (a trial it could not carry out,
//! a report it could not write); 128 + the signal after SIGINT or SIGTERM.
//! Linux only.

mod cli;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agentchaos::agent::{self, AgentArgs, AgentError};
use agentchaos::campaign::config::{Config, Mode, PowerLossLimits, ScenarioSource};
use agentchaos::campaign::powercampaign::{self, StateId, Verdict};
use agentchaos::campaign::probe::ProbeError;
use agentchaos::campaign::runner;
use agentchaos::campaign::shrink;
use agentchaos::campaign::trial::TrialError;
use agentchaos::check::Invariant;
use agentchaos::nemesis::powerloss::Model;
use agentchaos::nemesis::{Nemeses, Plan, Restarts};
use agentchaos::report::{self, Context};
use agentchaos::scenario::{self, InputError};
use agentchaos::store::adapter::backend::inherited_adapters;
use agentchaos::store::adapter::AdapterBackend;
use agentchaos::store::{ReferenceBackend, SessionSpec, StoreBackend};
use agentstore::fault::Fault;
use agentstore::Durability;
use clap::{Args, Parser, Subcommand};

use cli::workers::{run_worker, run_workers, WorkerCli, WorkersCli};

#[derive(Parser, Debug)]
#[command(
    name = "agentchaos",
    version,
    about = "Kill real child agents at every crash point of a session store and check the recovery invariants"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a campaign (no flags: every scenario in scenarios/, exhaustively, against agentstore).
    Run(RunArgs),
    /// Reproduce one trial deterministically and tell what happened.
    Replay(ReplayArgs),
    /// List the store fault profiles (--store-fault NAME), the nemesis that reveals each and the promise it breaks.
    Faults,
    /// List the invariants and their promises.
    Invariants,
    /// Crash a private PostgreSQL cluster under a database-backed store right after each
    /// acknowledged append of a short session, restart it, and check every acknowledged event
    /// survived (the adapter gets the cluster's DSN in AGENTSTORE_PG_DSN).
    DbCrash(DbCrashArgs),
    /// List the built-in scenarios (the shipped scenarios/, compiled in), or export them.
    Scenarios(ScenariosCli),
    /// Many workers, one store: pause, kill and (with --postgres) partition lease holders,
    /// crash the database under them, take their sessions over, and check the fencing and
    /// what survives (a store that claims `lease`; chaos/PROTOCOL.md section 9).
    Workers(WorkersCli),
    /// The child agent (started by the harness).
    #[command(hide = true)]
    Agent(AgentCli),
    /// A worker of the many-workers campaign (started by the harness).
    #[command(hide = true)]
    Worker(WorkerCli),
    /// A probe's child (started by the harness): drives the store, prints one JSON line.
    #[command(hide = true)]
    Probe(ProbeCli),
    /// agentstore behind the adapter protocol on stdin/stdout (`agentstore adapter`, built
    /// in), so the power-loss nemesis recovers the reference store without a second binary.
    #[command(hide = true)]
    ReferenceAdapter(ReferenceAdapterCli),
}

#[derive(Args, Debug)]
struct ScenariosCli {
    #[command(subcommand)]
    action: Option<ScenariosAction>,
}

#[derive(Subcommand, Debug)]
enum ScenariosAction {
    /// Write every built-in scenario into DIR as NAME.json (created if missing;
    /// an existing file with other contents is refused).
    Export {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Args, Debug)]
struct ReferenceAdapterCli {
    #[arg(long, default_value = "sync")]
    durability: Durability,
}

/// `agentchaos reference-adapter`: agentstore on stdin and stdout, as
/// `agentstore adapter` serves it; when stdin is a Unix socket, as version
/// 2's fork server (chaos/PROTOCOL.md, section 8), each forked child
/// serving as a plain process does, so the harness forks its observers,
/// lives and power-loss recoveries instead of starting them.
fn reference_adapter(a: &ReferenceAdapterCli) -> Result<ExitCode, Failure> {
    use agentchaos_protocol::{fork_server, FORK_PROTOCOL_VERSION};
    let options = agentstore::adapter::ServeOptions {
        durability: a.durability,
        ..Default::default()
    };
    let serve = || {
        agentstore::adapter::serve_with(std::io::stdin().lock(), std::io::stdout().lock(), &options)
    };
    if !fork_server::stdin_is_socket() {
        return serve()
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| Failure::Store(format!("reference-adapter: {e}")));
    }
    let hello = || agentstore::adapter::hello(&options.claims, FORK_PROTOCOL_VERSION, false);
    // A child's exit code, as a plain process's: only I/O on its streams fails.
    let child = || match serve() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "agentchaos: reference-adapter: {}",
                agentstore::error::one_line(&e.to_string())
            );
            1
        }
    };
    fork_server::serve(&hello, &child)
        .map(|()| ExitCode::SUCCESS)
        .map_err(|e| Failure::Store(format!("reference-adapter: fork server on stdin: {e}")))
}

#[derive(Args, Debug, Clone)]
struct Common {
    /// Run the reference store with this fault profile (see `agentchaos faults`).
    #[arg(long, value_name = "NAME", conflicts_with = "adapter", help_heading = STORE)]
    store_fault: Option<String>,
    /// Test the store behind this adapter program (chaos/PROTOCOL.md) instead of agentstore in-process.
    #[arg(long, value_name = "'CMD ARGS…'", help_heading = STORE)]
    adapter: Option<String>,
    /// The reference store's durability: `sync` (one fdatasync per append) or `batch`
    /// (group commit; every nemesis, power loss included, runs against it).
    #[arg(
        long,
        value_name = "sync|batch",
        default_value = "sync",
        conflicts_with = "adapter",
        help_heading = STORE
    )]
    durability: Durability,
    /// Where trial directories go (default: /dev/shm when present, else the temp dir).
    #[arg(long, value_name = "DIR", help_heading = EXECUTION)]
    dir: Option<PathBuf>,
    /// Parallel trials (default: the number of CPUs).
    #[arg(long, short, value_name = "J", help_heading = EXECUTION)]
    jobs: Option<usize>,
    /// Seconds an agent life or a probe may run before it is taken for hung
    /// (a store that never answers), killed and reported as the store's failure.
    #[arg(long, value_name = "SECS", default_value_t = agentchaos::campaign::trial::HANG_TIMEOUT.as_secs(), help_heading = EXECUTION)]
    hang_timeout: u64,
    /// The largest scenario file read, in bytes; a larger one is refused (exit 2).
    #[arg(long, value_name = "BYTES", default_value_t = scenario::DEFAULT_MAX_INPUT_BYTES)]
    max_input_bytes: u64,
}

/// Option groups of `--help`.
const WHAT: &str = "What to run";
const POWER_LOSS: &str = "Power loss";
const STORE: &str = "Store under test";
const EXECUTION: &str = "Execution";
const OUTPUT: &str = "Output";

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  agentchaos run
      every scenario in scenarios/, every nemesis, exhaustively, against agentstore
  agentchaos run --adapter 'python3 my_adapter.py' --trials 40 --json report.json
      a sample of 40 plans per scenario and nemesis against your store, with a JSON report
  agentchaos run --store-fault fsync-retry --nemesis syscall --keep kept/
      a known-bad store: the syscall nemesis catches it; failing trials kept in kept/")]
struct RunArgs {
    /// A scenario file or a directory of them (repeatable; default: scenarios/).
    #[arg(long, value_name = "FILE|DIR", help_heading = WHAT)]
    scenario: Vec<PathBuf>,
    /// Sample N trials per scenario from the seed instead of the exhaustive plan.
    #[arg(long, value_name = "N", conflicts_with = "exhaustive", help_heading = WHAT)]
    trials: Option<usize>,
    /// Every plan of each nemesis (the default): for `points`, a kill at every crash-point hit,
    /// torn writes, power cuts, double crashes and timers; for `syscall`, every applicable
    /// fault at every store syscall of the first process.
    #[arg(long, help_heading = WHAT)]
    exhaustive: bool,
    /// Which nemeses run, comma-separated: `points` (crash points in the store and the agent:
    /// kill, tear, powercut, timer, double crash), `syscall` (ptrace, no instrumentation:
    /// sys-kill-before, sys-kill-after, sys-tear, sys-enospc, sys-eio at each file-mutating
    /// syscall the first agent process tree makes under the store root, sys-full (the disk
    /// full from a call on), and sys-eio-read,
    /// sys-eintr-read, sys-short-read at each read of the store's files), `powerloss` (every
    /// on-disk state a power cut may leave under three persistence models, recovered by the
    /// store; chaos/POWERLOSS.md), or `all`. syscall and powerloss need Linux x86_64. Default:
    /// all that this platform can run (said on the report's first line when that is not all).
    /// With --trials N: N plans per nemesis, and N crash points per scenario for powerloss.
    #[arg(long, value_name = "points,syscall,powerloss|all", help_heading = WHAT)]
    nemesis: Option<Nemeses>,
    /// The power-loss nemesis's persistence models: strict, ext4-ordered, weak, or all
    /// (comma-separated).
    #[arg(long, value_name = "MODEL,…|all", default_value = "all", value_parser = parse_models, help_heading = POWER_LOSS)]
    powerloss_model: Models,
    /// The power-loss nemesis's on-disk states per crash point and model: all
    /// combinations up to N, a seeded sample of N beyond.
    #[arg(long, value_name = "N", default_value_t = PowerLossLimits::DEFAULT_STATES, help_heading = POWER_LOSS)]
    powerloss_states: usize,
    /// The power-loss nemesis's crash points per scenario: every op up to N, a seeded
    /// sample of N beyond (always the first and the last); default 48, or N with --trials N.
    #[arg(long, value_name = "N", help_heading = POWER_LOSS)]
    powerloss_points: Option<usize>,
    /// Which restarted lives are traced and crashed at their own points and syscalls: `all`
    /// (after every first kill that leaves recovery work: life 1 through its recovery and the
    /// 16 hits after it; the deepest restart's life 1 and a life 2 after it to their end),
    /// `deepest` (only those two), or `none` (first-life faults only).
    #[arg(long, value_name = "all|deepest|none", default_value_t = Restarts::All, help_heading = WHAT)]
    restarts: Restarts,
    /// Run each scenario with a parallel step under N interleavings of its parallel appenders:
    /// the default schedule (row NAME) and N-1 drawn from the seed (rows NAME.sched-S, whose
    /// replay plans end in `,sched:S`). They matter most where the store groups syncs (group
    /// commit): `--durability batch --schedules 4`.
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = WHAT)]
    schedules: usize,
    /// Add N random scenarios generated from the seed (failing ones are shrunk).
    #[arg(long, value_name = "N", default_value_t = 0, help_heading = WHAT)]
    random: usize,
    /// The seed of everything drawn at random: the sampled plans (--trials), the
    /// random scenarios (--random), the probes' and the power-loss states' choices.
    /// The same seed and flags run the same campaign.
    #[arg(long, value_name = "S", default_value_t = 1, help_heading = WHAT)]
    seed: u64,
    /// Run only the K-th of N equal shares of the trials (1-based).
    #[arg(long, value_name = "K/N", value_parser = parse_shard, help_heading = WHAT)]
    shard: Option<(usize, usize)>,
    /// Write the full report as JSON.
    #[arg(long, value_name = "FILE", help_heading = OUTPUT)]
    json: Option<PathBuf>,
    /// Write a JUnit XML report.
    #[arg(long, value_name = "FILE", help_heading = OUTPUT)]
    junit: Option<PathBuf>,
    /// Write a self-contained HTML report to DIR/index.html (DIR created if missing): the
    /// scorecard, and each violation with a timeline of the trial's lives and its replay command.
    #[arg(long, value_name = "DIR", help_heading = OUTPUT)]
    html: Option<PathBuf>,
    /// Keep the trial directory of every failing trial here (DIR/SCENARIO/PLAN, with
    /// VIOLATIONS.txt), and the random scenarios (DIR/random). Also --keep-failures.
    #[arg(long = "keep", alias = "keep-failures", value_name = "DIR", help_heading = OUTPUT)]
    keep_failures: Option<PathBuf>,
    /// Time budget for shrinking each failing random scenario, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60, help_heading = EXECUTION)]
    shrink_budget: u64,
    /// No progress: neither the bar on a terminal nor the line every 10 s elsewhere.
    #[arg(long, help_heading = OUTPUT)]
    quiet: bool,
    /// Print where the trials' time went (process starts by kind, the adapters' hello,
    /// round trips, the store's own work, ptrace, the checker, the agents) with the top
    /// three costs; the JSON report's `timings` has each trial's.
    #[arg(long, help_heading = OUTPUT)]
    timings: bool,
    /// Measure what the campaign reaches of agentstore: per file, the code regions trials
    /// executed, executed in a fault's window, and then observed, and each region with a gap.
    /// Needs agentchaos-coverage (built by chaos/coverage/build) and the llvm-tools component.
    #[arg(long, help_heading = OUTPUT)]
    coverage: bool,
    /// Write the --coverage figures as JSON.
    #[arg(long, value_name = "FILE", requires = "coverage", help_heading = OUTPUT)]
    coverage_json: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct DbCrashArgs {
    /// The store's adapter command (e.g. 'agentstore-pg adapter'), split like a shell would.
    #[arg(long, value_name = "CMD")]
    adapter: String,
    /// Crash models, comma-separated: immediate (pg_ctl stop -m immediate), kill (SIGKILL of
    /// every server process), kill-frozen (the same, the background writers stopped since
    /// before the first append). Default: all three.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    crash: Vec<String>,
    /// Crash right after the K-th acknowledged append only (1 to 8). Default: after each.
    #[arg(long, value_name = "K")]
    after: Option<usize>,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples (a failing run prints each violation's replay command):
  agentchaos replay --scenario scenarios/approval-gated.json --plan kill@9
      kill the agent at crash point 9, restart it, and tell what recovery did
  agentchaos replay --scenario scenarios/approval-gated.json --plan kill@9+kill@5 --keep trial/
      two crashes, the second in the restarted life; the trial directory kept in trial/
  agentchaos replay --scenario s.json --plan probe:damage@events.jsonl:120 --adapter 'python3 a.py'
      one probe of the store behind an adapter"
)]
struct ReplayArgs {
    /// The scenario file.
    #[arg(long, value_name = "FILE", help_heading = WHAT)]
    scenario: PathBuf,
    /// The plan: none, kill@N, tear@N:BYTES, powercut@N, timer@Dus (crash points), or
    /// sys-kill-before@N, sys-kill-after@N, sys-tear@N:BYTES, sys-enospc@N, sys-eio@N,
    /// sys-full@N (the
    /// syscall nemesis: N counts the store syscalls of the first agent process tree, as
    /// `agentchaos run --nemesis syscall` enumerated them; Linux x86_64 only), or
    /// sys-eio-read@N, sys-eintr-read@N, sys-short-read@N:BYTES (N counts its reads of the
    /// store's files); then up to
    /// two crashes of the restarted lives, each +kill@M, +tear@M:BYTES or +sys-…@M counted
    /// in that life (kill@9+kill@40+sys-eio@3); or a probe: probe:damage@FILE:OFFSET,
    /// probe:ledger@OPERATION; or one power-loss state: powerloss:MODEL:K:CHOICE (as a
    /// power-loss violation prints it; Linux x86_64 only).
    #[arg(long, value_name = "PLAN", help_heading = WHAT)]
    plan: String,
    /// Keep the trial directory here.
    #[arg(long, value_name = "DIR", help_heading = OUTPUT)]
    keep: Option<PathBuf>,
    /// Write a self-contained HTML page of the replay to DIR/index.html (DIR created if
    /// missing): each violation with a timeline of the trial's lives.
    #[arg(long, value_name = "DIR", help_heading = OUTPUT)]
    html: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct AgentCli {
    #[arg(long)]
    scenario: PathBuf,
    #[arg(long)]
    root: PathBuf,
    #[arg(long)]
    session: String,
    #[arg(long)]
    workspace: PathBuf,
    #[arg(long)]
    world: PathBuf,
    #[arg(long)]
    life: u32,
    #[arg(long)]
    adapter: Option<String>,
    /// Store processes the harness forked or started for this life
    /// (`PID:IN,OUT,ERR:VERSION;…`, descriptors open in this process, the
    /// protocol version to greet each with), used by the `open`s in order.
    #[arg(long, requires = "adapter")]
    adapter_fds: Option<String>,
    #[arg(long, default_value = "sync")]
    durability: Durability,
    #[arg(long, default_value_t = scenario::DEFAULT_MAX_INPUT_BYTES)]
    max_input_bytes: u64,
    /// Record where this life's time goes into this file (the harness's `--timings`).
    #[arg(long)]
    timings: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct ProbeCli {
    #[arg(long)]
    what: String,
    #[arg(long)]
    root: PathBuf,
    #[arg(long)]
    session: String,
    #[arg(long)]
    workspace: Option<PathBuf>,
    #[arg(long)]
    events: Option<PathBuf>,
    #[arg(long)]
    adapter: Option<String>,
    /// Store processes the harness forked for this probe (as `agent --adapter-fds`).
    #[arg(long, requires = "adapter")]
    adapter_fds: Option<String>,
    #[arg(long, default_value = "sync")]
    durability: Durability,
}

/// `--powerloss-model`'s list (one clap value, so clap keeps it whole).
#[derive(Debug, Clone)]
struct Models(Vec<Model>);

/// A flag's value clap's parsers refuse: bad usage (exit 2).
#[derive(Debug, thiserror::Error)]
enum BadFlag {
    #[error("{0} or all")]
    Model(agentchaos::nemesis::powerloss::UnknownModel),
    #[error("{0:?} is not K/N with 1 <= K <= N")]
    Shard(String),
}

fn parse_models(s: &str) -> Result<Models, BadFlag> {
    if s == "all" {
        return Ok(Models(Model::ALL.to_vec()));
    }
    s.split(',')
        .map(|m| m.trim().parse::<Model>().map_err(BadFlag::Model))
        .collect::<Result<_, _>>()
        .map(Models)
}

fn parse_shard(s: &str) -> Result<(usize, usize), BadFlag> {
    let bad = || BadFlag::Shard(s.to_string());
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let (k, n): (usize, usize) = (k.parse().map_err(|_| bad())?, n.parse().map_err(|_| bad())?);
    if k == 0 || n == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

/// Exit code: the store under test failed (violations, or a store fault).
const EXIT_STORE: u8 = 1;
/// Exit code: bad usage or input.
const EXIT_USAGE: u8 = 2;
/// Exit code: the harness itself failed.
const EXIT_HARNESS: u8 = agent::EXIT_HARNESS_FAILED;

/// Why a command stopped before its verdict, whose fault that is, and so
/// its exit code; printed as one line.
#[derive(Debug, thiserror::Error)]
enum Failure {
    /// Bad usage or input: arguments, scenario files, plans (exit 2).
    #[error("{0}")]
    BadInput(String),
    /// The store under test failed the harness outside any check: it broke
    /// the adapter protocol, or refused what the harness asked of it (exit 1).
    #[error("{0}")]
    Store(String),
    /// The harness itself failed: it could not set up, run, trace or
    /// observe a trial, or write its report (exit 3).
    #[error("{0}")]
    Harness(String),
}

impl Failure {
    fn code(&self) -> u8 {
        match self {
            Failure::Store(_) => EXIT_STORE,
            Failure::BadInput(_) => EXIT_USAGE,
            Failure::Harness(_) => EXIT_HARNESS,
        }
    }
}

fn bad_input(message: impl std::fmt::Display) -> Failure {
    Failure::BadInput(message.to_string())
}

fn failed(message: impl std::fmt::Display) -> Failure {
    Failure::Harness(message.to_string())
}

impl From<InputError> for Failure {
    fn from(e: InputError) -> Self {
        bad_input(e.to_string())
    }
}

/// A trial or campaign that could not be carried out, blamed on the store
/// or on the harness.
impl From<TrialError> for Failure {
    fn from(e: TrialError) -> Self {
        if e.store_fault {
            Failure::Store(e.message)
        } else {
            Failure::Harness(e.message)
        }
    }
}

/// The exit code of a finished campaign or replay: 1 when the store broke a
/// promise (`violations`) or failed the harness (`store_errors` of the
/// `errors`), else 3 when some trial could not be carried out, else 0.
fn verdict(violations: usize, store_errors: usize, errors: usize) -> ExitCode {
    if violations + store_errors > 0 {
        ExitCode::from(EXIT_STORE)
    } else if errors > 0 {
        ExitCode::from(EXIT_HARNESS)
    } else {
        ExitCode::SUCCESS
    }
}

fn db_crash(args: DbCrashArgs) -> Result<ExitCode, Failure> {
    use agentchaos::campaign::dbcrash::{self, Trial};
    use agentchaos::nemesis::database::DatabaseCrash;
    let adapter =
        agentchaos::store::adapter::AdapterCommand::parse(&args.adapter).map_err(bad_input)?;
    let crashes: Vec<DatabaseCrash> = if args.crash.is_empty() {
        DatabaseCrash::ALL.to_vec()
    } else {
        args.crash
            .iter()
            .map(|c| {
                c.parse::<DatabaseCrash>()
                    .map_err(|e| bad_input(format!("--crash: {e}")))
            })
            .collect::<Result<_, _>>()?
    };
    let appends = dbcrash::session_events().len();
    let afters: Vec<usize> = match args.after {
        Some(k) if (1..=appends).contains(&k) => vec![k],
        Some(k) => return Err(bad_input(format!("--after {k}: must be 1 to {appends}"))),
        None => (1..=appends).collect(),
    };
    let trials: Vec<Trial> = crashes
        .iter()
        .flat_map(|&crash| afters.iter().map(move |&after| Trial { crash, after }))
        .collect();
    agentchaos::child::begin().map_err(failed)?;
    let outcomes = dbcrash::run(&adapter, &trials).map_err(|e| Failure::Harness(e.to_string()))?;
    let mut violations = 0;
    for o in &outcomes {
        for v in &o.violations {
            violations += 1;
            let point = format!("{}@{}", o.trial.crash, o.trial.after);
            print!(
                "{}",
                agentchaos::check::explain(v, "db-crash", &point, &o.trial.replay(&adapter))
            );
        }
    }
    println!(
        "db-crash: {} trial(s), {} acknowledged append(s) before the crashes, {violations} violation(s)",
        outcomes.len(),
        outcomes.iter().map(|o| o.acked).sum::<usize>()
    );
    Ok(if violations > 0 {
        ExitCode::from(EXIT_STORE)
    } else {
        ExitCode::SUCCESS
    })
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // One line, as for every other bad input.
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or_default();
            eprintln!("agentchaos: {}", first.trim_start_matches("error: "));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // A panic is a harness bug: the runner reports it as a trial error in
    // one line, so the default hook's message and backtrace stay quiet.
    if !matches!(cli.command, Command::Agent(_)) {
        std::panic::set_hook(Box::new(|_| {}));
    }
    // Ctrl-C and SIGTERM stop the long commands cleanly and at once: every
    // child of the harness is killed, no new one starts, every scratch
    // directory is removed, exit 128 + the signal. The agents and probes
    // they start keep the default handlers (a terminal's Ctrl-C reaches
    // them too and ends them). The trial-running commands also adopt what
    // their adapters leave behind, to find and kill it (Linux only).
    let trials = matches!(cli.command, Command::Run(_) | Command::Replay(_));
    let long = trials || matches!(cli.command, Command::Workers(_) | Command::DbCrash(_));
    // The syscall tracer's switch, read by every traced life: a bad value
    // stops the command before its first trial.
    if trials || matches!(cli.command, Command::Worker(_)) {
        if let Err(e) = agentchaos::nemesis::syscall::seccomp_from_env() {
            eprintln!("agentchaos: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    if long {
        let installed = agentchaos::child::stop_on_signals().and_then(|()| {
            if trials {
                agentchaos::child::become_subreaper().map_err(std::io::Error::from)?;
            }
            Ok(())
        });
        if let Err(e) = installed {
            eprintln!("agentchaos: cannot install the signal handlers: {e}");
            return ExitCode::from(EXIT_HARNESS);
        }
    }
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Replay(args) => replay(args),
        Command::Faults => {
            for (fault, name, promise) in Fault::ALL {
                let by = if Fault::LEASE.contains(fault) {
                    "workers".to_string()
                } else {
                    agentchaos::nemesis::revealing(*fault).to_string()
                };
                println!("{name:<30} revealed by: {by:<9}  breaks: {promise}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Invariants => {
            for i in Invariant::ALL {
                println!("{:<29} {}", i.name(), i.promise());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Scenarios(s) => scenarios(s),
        Command::DbCrash(args) => db_crash(args),
        Command::Agent(a) => run_agent(a),
        Command::Worker(w) => run_worker(w),
        Command::Workers(w) => run_workers(w),
        Command::Probe(p) => run_probe(p),
        Command::ReferenceAdapter(a) => reference_adapter(&a),
    };
    if let Some(code) = agentstore::interrupt::exit_code() {
        eprintln!(
            "agentchaos: interrupted by {}; scratch directories removed",
            agentstore::interrupt::signal_name().unwrap_or("a signal")
        );
        return ExitCode::from(code);
    }
    match result {
        Ok(code) => code,
        Err(f) => {
            eprintln!("agentchaos: {f}");
            ExitCode::from(f.code())
        }
    }
}

fn run_agent(a: AgentCli) -> Result<ExitCode, Failure> {
    agentchaos::child::die_with_harness().map_err(|e| failed(format!("agent: {e}")))?;
    if let Some(path) = &a.timings {
        agentchaos::timing::share_into(path).map_err(|e| failed(format!("agent: {e}")))?;
    }
    let args = AgentArgs {
        scenario: a.scenario,
        spec: SessionSpec {
            root: a.root,
            session: a.session,
            workspace: a.workspace,
        },
        world: a.world,
        life: a.life,
        max_input_bytes: a.max_input_bytes,
    };
    // The agent's adapters are its lives: started by itself, or forked for
    // it by the harness and handed down.
    let backend: Box<dyn StoreBackend> = match (&a.adapter, &a.adapter_fds) {
        (Some(line), Some(fds)) => {
            let adapters = inherited_adapters(fds).map_err(|e| failed(format!("agent: {e}")))?;
            let backend =
                AdapterBackend::new(line).map_err(|e| failed(format!("agent: --adapter: {e}")))?;
            Box::new(backend.with_inherited(adapters))
        }
        _ => backend(&a.adapter, a.durability, false).map_err(|e| failed(format!("agent: {e}")))?,
    };
    // The in-process Batch store's group commit is the schedule's to interleave.
    if a.adapter.is_none() && matches!(a.durability, Durability::Batch { .. }) {
        agentchaos::agent::schedule::observe_store();
    }
    // A store's failure (a refused or broken request) ends the life for the
    // checker to judge; a failure on the harness's side ends it with the
    // harness's exit code, which makes the trial an error, never a finding.
    agent::run(&args, backend.as_ref()).map_err(|e| match e {
        AgentError::Store(m) => Failure::Store(format!("agent: {m}")),
        AgentError::Harness(m) => Failure::Harness(format!("agent: {m}")),
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `agentchaos probe`: one probe of the store, driven by this process.
fn run_probe(p: ProbeCli) -> Result<ExitCode, Failure> {
    agentchaos::child::die_with_harness().map_err(|e| failed(format!("probe: {e}")))?;
    let adapter = match (&p.adapter, &p.adapter_fds) {
        (None, _) => None,
        (Some(line), fds) => {
            // The harness wrote both for this child: a failure is its own.
            let backend =
                AdapterBackend::new(line).map_err(|e| failed(format!("probe: --adapter: {e}")))?;
            let inherited = match fds {
                Some(fds) => inherited_adapters(fds).map_err(|e| failed(format!("probe: {e}")))?,
                None => Vec::new(),
            };
            Some(backend.with_inherited(inherited))
        }
    };
    agentchaos::campaign::probe::run_child(&agentchaos::campaign::probe::ChildArgs {
        what: p.what,
        root: p.root,
        session: p.session,
        workspace: p.workspace,
        events: p.events,
        adapter,
        durability: p.durability,
    })
    .map(|()| ExitCode::SUCCESS)
    .map_err(|e| match e {
        ProbeError::Store(m) => Failure::Store(format!("probe: {m}")),
        ProbeError::Harness(m) => Failure::Harness(format!("probe: {m}")),
    })
}

/// The store under test: agentstore in-process, or the one behind
/// `--adapter` (in the harness, `forking`: its observations are forked
/// from a fork server when the adapter is one).
fn backend(
    adapter: &Option<String>,
    durability: Durability,
    forking: bool,
) -> Result<Box<dyn StoreBackend>, Failure> {
    let Some(line) = adapter else {
        return Ok(Box::new(ReferenceBackend { durability }));
    };
    let backend = if forking {
        AdapterBackend::forking(line)
    } else {
        AdapterBackend::new(line)
    };
    Ok(Box::new(
        backend.map_err(|e| bad_input(format!("--adapter: {e}")))?,
    ))
}

fn check_fault(name: &Option<String>) -> Result<(), Failure> {
    match name {
        Some(n) if Fault::from_name(n).is_none() => {
            let names: Vec<&str> = Fault::ALL.iter().map(|(_, n, _)| *n).collect();
            Err(bad_input(format!(
                "--store-fault {n:?} names no fault; known: {}",
                names.join(", ")
            )))
        }
        _ => Ok(()),
    }
}

fn config<'a>(
    common: &Common,
    backend: &'a dyn StoreBackend,
    mode: Mode,
    seed: u64,
) -> Result<Config<'a>, Failure> {
    check_fault(&common.store_fault)?;
    let agent_exe =
        std::env::current_exe().map_err(|e| failed(format!("cannot find my own binary: {e}")))?;
    let dir = common
        .dir
        .clone()
        .unwrap_or_else(agentchaos::campaign::scratch::default_dir);
    // A trial's w.sock, and a power-loss recording's, must fit a Unix
    // socket path (every trial directory's name is as long as these).
    let campaign = dir.join("agentchaos-4294967295-ffffffff");
    let longest = [
        agentchaos::campaign::scratch::trial_dir(&campaign, 0, 0).join("w.sock"),
        agentchaos::campaign::scratch::trace_dir(&campaign, 0).join("rec/w.sock"),
    ]
    .iter()
    .map(|p| p.as_os_str().len())
    .max()
    .expect("two paths");
    if longest > agentchaos::agent::world::MAX_SOCKET_PATH {
        return Err(bad_input(format!(
            "--dir {} is too long: trial sockets need paths of at most {} bytes",
            dir.display(),
            agentchaos::agent::world::MAX_SOCKET_PATH
        )));
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| bad_input(format!("--dir {}: {e}", dir.display())))?;
    let jobs = common
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    if jobs == 0 {
        return Err(bad_input("--jobs must be at least 1"));
    }
    if common.hang_timeout == 0 {
        return Err(bad_input("--hang-timeout must be at least 1 second"));
    }
    if common.max_input_bytes == 0 {
        return Err(bad_input("--max-input-bytes must be at least 1"));
    }
    Ok(Config {
        backend,
        agent_exe,
        store_fault: common.store_fault.clone(),
        mode,
        nemesis: Nemeses::POINTS,
        // A replay traces the restarts its plan crashes, and no others.
        restarts: Restarts::None,
        seed,
        jobs,
        shard: None,
        dir,
        keep_failures: None,
        progress: false,
        power_loss: PowerLossLimits::default(),
        hang_timeout: std::time::Duration::from_secs(common.hang_timeout),
        max_input_bytes: common.max_input_bytes,
        schedules: 1,
    })
}

/// `scenarios/` when the working directory has one (a checkout: replay
/// commands then name its files), else the built-in copies of the shipped
/// scenarios (an installed binary, run from anywhere).
fn default_scenarios() -> PathBuf {
    let here = PathBuf::from("scenarios");
    if here.is_dir() {
        return here;
    }
    PathBuf::from(scenario::builtin::PREFIX)
}

/// `agentchaos scenarios [export DIR]`.
fn scenarios(args: ScenariosCli) -> Result<ExitCode, Failure> {
    use agentchaos::scenario::builtin;
    let Some(ScenariosAction::Export { dir }) = args.action else {
        for b in builtin::ALL {
            let s = scenario::parse(b.text, b.name)?;
            println!("{:<29} {}", s.name, s.description);
        }
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(&dir).map_err(|e| bad_input(format!("{}: {e}", dir.display())))?;
    for b in builtin::ALL {
        let path = dir.join(format!("{}.json", b.name));
        // No more than the built-in's length is read: a longer file differs.
        match agentchaos::bounded::read(&path, b.text.len() as u64) {
            Ok(old) if old == b.text.as_bytes() => continue,
            Ok(_) | Err(agentchaos::bounded::ReadError::TooLarge { .. }) => {
                return Err(bad_input(format!(
                    "{}: exists with other contents; not overwritten",
                    path.display()
                )))
            }
            Err(e) if e.not_found() => {}
            Err(e) => return Err(bad_input(format!("{}: {e}", path.display()))),
        }
        std::fs::write(&path, b.text)
            .map_err(|e| failed(format!("cannot write {}: {e}", path.display())))?;
        println!("{}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `run --keep DIR` and `replay --keep DIR` fill a directory that is new or
/// empty, so everything in it is this run's and nothing already there is
/// ever removed or overwritten.
fn new_or_empty_dir(flag: &str, dir: &Path) -> Result<(), Failure> {
    let bad = |why: String| bad_input(format!("{flag} {}: {why}", dir.display()));
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(bad(e.to_string())),
        Ok(m) if !m.is_dir() => Err(bad("exists and is not a directory".into())),
        Ok(_) => match std::fs::read_dir(dir).map(|mut d| d.next()) {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err(bad(
                "exists and is not empty; name a new or empty directory (nothing in it is removed or overwritten)".into(),
            )),
            Err(e) => Err(bad(e.to_string())),
        },
    }
}

/// A report file (`--json`, `--junit`), opened for writing before the
/// campaign runs: one that cannot be written (a directory, a device, a
/// read-only place) is bad input up front, not a failure after the
/// campaign. Written at the end; a file it created and never wrote is
/// removed.
struct ReportFile {
    path: PathBuf,
    file: std::fs::File,
    created: bool,
    written: bool,
    /// The directory `--html` created for it, removed with it when empty.
    created_dir: Option<PathBuf>,
}

impl ReportFile {
    /// `--html DIR`: `DIR/index.html`, DIR created when missing; refused up
    /// front, as `--json`'s file is, when it cannot be written.
    fn open_html(dir: &Option<PathBuf>) -> Result<Option<ReportFile>, Failure> {
        let Some(dir) = dir else { return Ok(None) };
        let bad = |why: String| bad_input(format!("--html {}: {why}", dir.display()));
        let created_dir = match std::fs::metadata(dir) {
            Ok(m) if !m.is_dir() => return Err(bad("exists and is not a directory".into())),
            Ok(_) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir).map_err(|e| bad(format!("cannot create: {e}")))?;
                Some(dir.clone())
            }
            Err(e) => return Err(bad(e.to_string())),
        };
        let file = ReportFile::open("--html", &Some(dir.join("index.html")));
        if file.is_err() {
            if let Some(d) = &created_dir {
                let _ = std::fs::remove_dir(d);
            }
        }
        Ok(file?.map(|mut f| {
            f.created_dir = created_dir;
            f
        }))
    }

    fn open(flag: &str, path: &Option<PathBuf>) -> Result<Option<ReportFile>, Failure> {
        let Some(path) = path else { return Ok(None) };
        let bad = |why: String| bad_input(format!("{flag} {}: {why}", path.display()));
        // Checked before opening: a FIFO's open would block.
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => return Err(bad("exists and is not a regular file".into())),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(bad(e.to_string())),
        }
        let mut options = std::fs::OpenOptions::new();
        options.write(true);
        let (file, created) = match options.clone().create_new(true).open(path) {
            Ok(f) => (f, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => (
                options
                    .open(path)
                    .map_err(|e| bad(format!("cannot open for writing: {e}")))?,
                false,
            ),
            Err(e) => return Err(bad(format!("cannot create: {e}"))),
        };
        Ok(Some(ReportFile {
            path: path.clone(),
            file,
            created,
            written: false,
            created_dir: None,
        }))
    }

    /// Replaces the file's contents with `text`.
    fn write(mut self, text: &str) -> Result<(), Failure> {
        use std::io::Write;
        self.written = true;
        self.file
            .set_len(0)
            .and_then(|()| self.file.write_all(text.as_bytes()))
            .map_err(|e| failed(format!("cannot write {}: {e}", self.path.display())))
    }
}

impl Drop for ReportFile {
    fn drop(&mut self) {
        if self.created && !self.written {
            let _ = std::fs::remove_file(&self.path);
            if let Some(d) = &self.created_dir {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
}

fn run(args: RunArgs) -> Result<ExitCode, Failure> {
    if args.coverage {
        if args.common.adapter.is_some() {
            return Err(bad_input(agentchaos::coverage::CoverageError::Adapter));
        }
        agentchaos::coverage::reexec_without_profile().map_err(failed)?;
    }
    let coverage_report = ReportFile::open("--coverage-json", &args.coverage_json)?;
    let json_report = ReportFile::open("--json", &args.json)?;
    let junit_report = ReportFile::open("--junit", &args.junit)?;
    let html_report = ReportFile::open_html(&args.html)?;
    let backend = backend(&args.common.adapter, args.common.durability, true)?;
    let mode = match args.trials {
        Some(0) => return Err(bad_input("--trials must be at least 1")),
        Some(n) => Mode::Sampled(n),
        None => Mode::Exhaustive,
    };
    // What the default leaves out on this platform, for the report's first line.
    let mut not_run = None;
    let nemesis = match args.nemesis {
        Some(n) => {
            if n.syscall || n.powerloss {
                syscall_supported()?;
            }
            n
        }
        None => {
            if !agentchaos::nemesis::syscall::SUPPORTED {
                not_run = Some(format!(
                    "syscall and power-loss nemeses not run: they need Linux on x86_64 (ptrace), this build targets {}/{}; durable_append is earned only by kills inside the store's writes, and its power-loss row is not exercised",
                    std::env::consts::OS,
                    std::env::consts::ARCH
                ));
            }
            Nemeses::every_supported()
        }
    };
    let mut cfg = config(&args.common, backend.as_ref(), mode, args.seed)?;
    cfg.nemesis = nemesis;
    // A fault this nemesis set cannot reveal would pass unseen: say so first.
    let unseen_fault = cfg.store_fault.as_deref().and_then(|name| {
        let fault = Fault::from_name(name)?;
        if Fault::LEASE.contains(&fault) {
            return Some(format!(
                "--store-fault {name}: only many workers reveal this fault (agentchaos workers --store-fault {name}); a pass of `run` says nothing about it"
            ));
        }
        let by = agentchaos::nemesis::revealing(fault);
        (!nemesis.overlaps(by)).then(|| {
            format!(
                "--store-fault {name}: only the {by} nemesis reveals this fault and this campaign runs {nemesis}: a pass says nothing about it (add --nemesis {by})"
            )
        })
    });
    if let Some(line) = &unseen_fault {
        eprintln!("agentchaos: {line}");
    }
    cfg.restarts = args.restarts;
    cfg.shard = args.shard;
    if args.schedules == 0 {
        return Err(bad_input("--schedules must be at least 1"));
    }
    cfg.schedules = args.schedules;
    if args.powerloss_states == 0 || args.powerloss_points == Some(0) {
        return Err(bad_input(
            "--powerloss-states and --powerloss-points must be at least 1",
        ));
    }
    cfg.power_loss = PowerLossLimits {
        models: args.powerloss_model.0.clone(),
        max_states: args.powerloss_states,
        max_points: args.powerloss_points,
    };
    cfg.progress = !args.quiet;
    if let Some(k) = &args.keep_failures {
        new_or_empty_dir("--keep", k)?;
    }
    let paths = if args.scenario.is_empty() {
        vec![default_scenarios()]
    } else {
        args.scenario.clone()
    };
    let mut sources = load_sources(&paths, cfg.max_input_bytes)?;
    if let Some(k) = &args.keep_failures {
        std::fs::create_dir_all(k)
            .map_err(|e| bad_input(format!("--keep {}: {e}", k.display())))?;
        cfg.keep_failures = Some(k.clone());
    }
    agentchaos::child::begin().map_err(failed)?;
    if args.timings {
        agentchaos::timing::enable();
    }
    let coverage_dir = if args.coverage {
        let dir = tempfile::Builder::new()
            .prefix("agentchaos-coverage-")
            .tempdir_in(&cfg.dir)
            .map_err(|e| {
                failed(format!(
                    "cannot create a directory in {}: {e}",
                    cfg.dir.display()
                ))
            })?;
        agentchaos::coverage::begin(&cfg.agent_exe, dir.path()).map_err(failed)?;
        Some(dir)
    } else {
        None
    };
    let random_dir = match (&cfg.keep_failures, args.random) {
        (_, 0) => None,
        (Some(k), _) => Some(k.join("random")),
        // A directory of this run's own: it is removed after a clean run.
        (None, _) => Some(
            tempfile::Builder::new()
                .prefix(&format!("agentchaos-random-{}-", args.seed))
                .tempdir()
                .map_err(|e| {
                    failed(format!(
                        "cannot create a directory for the random scenarios in {}: {e}",
                        std::env::temp_dir().display()
                    ))
                })?
                .keep(),
        ),
    };
    if let Some(rd) = &random_dir {
        sources.extend(
            agentchaos::campaign::config::random_sources(rd, args.seed, args.random)
                .map_err(failed)?,
        );
    }
    let ctx = Context {
        store: cfg.backend.describe(),
        store_args: cfg.backend.agent_args(),
        not_applicable: cfg.backend.not_applicable(),
        store_fault: cfg.store_fault.as_deref(),
        seed: args.seed,
        mode: match mode {
            Mode::Exhaustive => {
                format!("exhaustive, nemesis {nemesis}, restarts {}", args.restarts)
            }
            Mode::Sampled(n) => format!(
                "{n} sampled trials per scenario, nemesis {nemesis}, restarts {}",
                args.restarts
            ),
        },
        jobs: cfg.jobs,
        shard: cfg.shard,
    };
    let result = runner::run(&cfg, sources);
    if let (Some(rd), None, true) = (
        &random_dir,
        &cfg.keep_failures,
        agentstore::interrupt::requested(),
    ) {
        let _ = std::fs::remove_dir_all(rd);
    }
    let result = result?;
    for line in not_run.iter().chain(&unseen_fault) {
        println!("{line}");
    }
    print!("{}", report::violations_text(&result, &ctx));
    print!("{}", report::table(&result, &ctx));
    if args.timings {
        print!("{}", report::timings::text(&result));
    }
    if coverage_dir.is_some() {
        let summary = agentchaos::coverage::finish().map_err(failed)?;
        print!("{}", summary.text());
        if let Some(f) = coverage_report {
            f.write(&(serde_json::to_string_pretty(&summary).expect("figures serialize") + "\n"))?;
        }
    }
    if let (Some(k), true) = (
        &cfg.keep_failures,
        result.violation_count() + result.error_count() > 0,
    ) {
        println!("failing trials kept in {}", k.display());
    }
    shrink_random(
        &cfg,
        &result,
        &random_dir,
        Duration::from_secs(args.shrink_budget),
    );
    // Interrupted while shrinking: the random scenarios go with the rest.
    if let (Some(rd), None, true) = (
        &random_dir,
        &cfg.keep_failures,
        agentstore::interrupt::requested(),
    ) {
        let _ = std::fs::remove_dir_all(rd);
    }
    if let Some(f) = json_report {
        let text = serde_json::to_string_pretty(&report::json(&result, &ctx))
            .expect("a report serializes");
        f.write(&(text + "\n"))?;
    }
    if let Some(f) = junit_report {
        f.write(&report::junit(&result, &ctx))?;
    }
    if let Some(f) = html_report {
        let path = f.path.clone();
        f.write(&report::html::campaign(&result, &ctx))?;
        println!("HTML report: {}", path.display());
    }
    if let (Some(rd), 0) = (&random_dir, result.violation_count()) {
        if cfg.keep_failures.is_none() {
            let _ = std::fs::remove_dir_all(rd);
        }
    }
    Ok(verdict(
        result.violation_count(),
        result.store_error_count(),
        result.error_count(),
    ))
}

/// Shrinks each failing random scenario and prints how to replay the result.
fn shrink_random(
    cfg: &Config<'_>,
    result: &runner::CampaignResult,
    random_dir: &Option<PathBuf>,
    budget: Duration,
) {
    let Some(rd) = random_dir else { return };
    // From the simplest plan of the first cause a deterministic trial reached.
    let start = |s: &runner::ScenarioResult| report::causes::of_scenario(s).to_shrink();
    for (name, outcome) in shrink::shrink_failing_random(cfg, result, rd, budget, start) {
        match outcome {
            Ok(sh) => println!(
                "shrunk {name} from {} to {} step(s){}; plan {}\n  replay: {}",
                sh.steps_before,
                sh.scenario.step_count(),
                if sh.budget_exhausted {
                    " (budget spent: maybe not minimal)"
                } else {
                    ""
                },
                sh.plan,
                agentchaos::campaign::config::replay_command(
                    &sh.path,
                    &sh.plan,
                    cfg.store_fault.as_deref(),
                    &cfg.backend.agent_args()
                )
            ),
            // The signal's line says it all.
            Err(_) if agentstore::interrupt::requested() => {}
            Err(e) => println!("shrinking {name} failed: {e}"),
        }
    }
}

/// The syscall nemesis needs ptrace on Linux x86_64: elsewhere, bad input.
fn syscall_supported() -> Result<(), Failure> {
    if agentchaos::nemesis::syscall::SUPPORTED {
        Ok(())
    } else {
        Err(bad_input(format!(
            "the syscall and power-loss nemeses need Linux on x86_64 (ptrace); this build targets {}/{}",
            std::env::consts::OS,
            std::env::consts::ARCH
        )))
    }
}

fn replay(args: ReplayArgs) -> Result<ExitCode, Failure> {
    let html_report = ReportFile::open_html(&args.html)?;
    let backend = backend(&args.common.adapter, args.common.durability, true)?;
    let mut cfg = config(&args.common, backend.as_ref(), Mode::Exhaustive, 0)?;
    if let Some(k) = &args.keep {
        new_or_empty_dir("--keep", k)?;
    }
    // A trial's plan, or a probe's (`probe:…`).
    enum What {
        Trial(Plan),
        Probe(agentchaos::campaign::probe::Probe),
    }
    if let Some(id) = args.plan.strip_prefix(powercampaign::PLAN_PREFIX) {
        let id: StateId = id.parse().map_err(|e| bad_input(format!("--plan: {e}")))?;
        syscall_supported()?;
        return replay_power_loss(&cfg, &args, &id, html_report);
    }
    let what = match args
        .plan
        .strip_prefix(agentchaos::campaign::probe::PLAN_PREFIX)
    {
        Some(p) => What::Probe(p.parse().map_err(bad_input)?),
        None => What::Trial(args.plan.parse().map_err(bad_input)?),
    };
    if matches!(&what, What::Trial(plan) if plan.syscall_fault().is_some()) {
        syscall_supported()?;
        cfg.nemesis.syscall = true;
    }
    let scenario = scenario::load(&args.scenario, cfg.max_input_bytes)?;
    let scenario_name = scenario.name.to_string();
    let source = ScenarioSource {
        path: args.scenario.clone(),
        scenario,
        random_seed: None,
        schedule: match &what {
            What::Trial(plan) => plan.sched,
            What::Probe(_) => 0,
        },
    };
    agentchaos::child::begin().map_err(failed)?;
    let r = match what {
        What::Trial(plan) => {
            agentchaos::campaign::replay::replay(&cfg, source, plan, args.keep.as_deref())
        }
        What::Probe(probe) => {
            agentchaos::campaign::probe::replay(&cfg, source, &probe, args.keep.as_deref())
        }
    }?;
    print!("{}", r.narrative);
    agentchaos::child::sweep_orphans("the replay (outside its trial)");
    print!("{}", report::leaks_text(&agentchaos::child::take_leaks()));
    if let Some(e) = &r.error {
        println!("ERROR: {e}");
    }
    let n = r.violations.len();
    let store_error = r.error.as_ref().is_some_and(|e| e.store_fault);
    let result = match (n, &r.error) {
        // Not carried out: no verdict either way, whatever was seen.
        (0, Some(_)) if store_error => {
            "result: not carried out, the store's fault (above)".to_string()
        }
        (0, Some(_)) => "result: not carried out, a harness error (above)".to_string(),
        (0, None) => "result: no violations".to_string(),
        (n, _) => format!("result: {n} violation(s)"),
    };
    println!("{result}");
    if let Some(f) = html_report {
        let replay = agentchaos::campaign::config::replay_command(
            &args.scenario,
            &args.plan,
            cfg.store_fault.as_deref(),
            &cfg.backend.agent_args(),
        );
        let mut narrative = r.narrative.clone();
        if let Some(e) = &r.error {
            narrative.push_str(&format!("ERROR: {e}\n"));
        }
        let path = f.path.clone();
        f.write(&report::html::replay(&report::html::ReplayPage {
            scenario: &scenario_name,
            plan: &args.plan,
            narrative: &narrative,
            crash: r.crash.as_deref().unwrap_or_default(),
            violations: &r.violations,
            timeline: r.timeline.as_deref(),
            replay: &replay,
            result: &result,
            passed: n == 0 && r.error.is_none(),
        }))?;
        println!("HTML report: {}", path.display());
    }
    Ok(verdict(
        n,
        usize::from(store_error),
        usize::from(r.error.is_some()),
    ))
}

/// Rebuilds one power-loss state of the scenario, recovers it and judges it.
fn replay_power_loss(
    cfg: &Config<'_>,
    args: &ReplayArgs,
    id: &StateId,
    html_report: Option<ReportFile>,
) -> Result<ExitCode, Failure> {
    let scenario = scenario::load(&args.scenario, cfg.max_input_bytes)?;
    let source = ScenarioSource {
        path: args.scenario.clone(),
        scenario,
        random_seed: None,
        schedule: 0,
    };
    agentchaos::child::begin().map_err(failed)?;
    let pcfg = powercampaign::Config::of_campaign(cfg);
    let out = powercampaign::replay(&pcfg, &source, id, args.keep.as_deref())
        .map_err(TrialError::from)?;
    println!(
        "state {id} of {}: power lost {}",
        source.scenario.name,
        out.op
            .as_ref()
            .map_or("before the first op".to_string(), |op| format!(
                "after {op}"
            ))
    );
    print!(
        "{}",
        agentchaos::report::powerloss::assumptions(&out.state.losses)
    );
    if let Some(k) = &args.keep {
        println!("state (before recovery) kept in {}", k.display());
    }
    if let Some(f) = html_report {
        let flags = agentchaos::campaign::config::store_flags(
            cfg.store_fault.as_deref(),
            &cfg.backend.agent_args(),
        );
        let replay = powercampaign::replay_command(&args.scenario, &flags, id);
        let path = f.path.clone();
        f.write(&report::html::power_loss_replay(
            &source.scenario.name,
            id,
            &out,
            &replay,
        ))?;
        println!("HTML report: {}", path.display());
    }
    Ok(match out.verdict {
        Verdict::Pass => {
            println!("result: no violations");
            ExitCode::SUCCESS
        }
        Verdict::Refused(why) => {
            println!("result: refused with damage, no acknowledged event lost: {why}");
            ExitCode::SUCCESS
        }
        Verdict::Fail(findings) => {
            for f in &findings {
                println!(
                    "VIOLATION {} ({})\n  expected: {}\n  found: {}\n  events: {}",
                    f.check,
                    f.when,
                    f.expected,
                    f.found,
                    f.events.join(", ")
                );
            }
            println!("result: {} violation(s)", findings.len());
            ExitCode::from(EXIT_STORE)
        }
    })
}

/// Scenario files under `paths`, each name loaded once.
fn load_sources(paths: &[PathBuf], max_bytes: u64) -> Result<Vec<ScenarioSource>, Failure> {
    let mut sources: Vec<ScenarioSource> = Vec::new();
    for p in paths {
        for f in scenario::load_all(p, max_bytes)? {
            if sources.iter().any(|s| s.scenario.name == f.scenario.name) {
                return Err(bad_input(format!(
                    "{}: scenario name {:?} is loaded twice",
                    f.path.display(),
                    f.scenario.name.as_str()
                )));
            }
            sources.push(ScenarioSource {
                path: f.path,
                scenario: f.scenario,
                random_seed: None,
                schedule: 0,
            });
        }
    }
    Ok(sources)
}
