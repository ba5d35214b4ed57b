//! `agentchaos workers`, the many-workers campaign (lease holders paused,
//! killed, partitioned from their database and taken over), and the hidden
//! `agentchaos worker` it starts. This file parses the flags, starts the
//! database when asked, and prints the trials; the campaign itself is
//! `agentchaos::campaign::workers`, which it must never duplicate.

use std::path::PathBuf;
use std::process::ExitCode;

use agentstore::Durability;
use clap::Args;

use super::super::{
    backend, bad_input, check_fault, failed, Failure, EXECUTION, EXIT_STORE, STORE, WHAT,
};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  agentchaos workers
      two workers share agentstore's sessions; every pause and kill plan
  agentchaos workers --plan kill@2+pause@1 --workers 3
      one plan: kill the owner after its second write, then pause the heir after its first
  agentchaos workers --plan pause@3~2 --ttl-ms 300,5000
      pause w0 after its third write; it wakes after the heir's second, while the heir
      (w1, a lease of 5 s) is mid-session
  agentchaos workers --postgres --store-fault no-epoch-check
      the PostgreSQL store without fencing, on a private cluster: the takeovers catch it")]
pub(crate) struct WorkersCli {
    /// One plan: `none`, or strikes joined by `+`, each at the first session's owner of the
    /// moment, after its K-th write since its grant: `pause@K` (woken once the session is
    /// finished), `pause@K~J` (woken after the heir's J-th write), `kill@K`, `restart@K` (killed
    /// and started again under the same worker id), `slow@K` (sent nothing until another
    /// worker took the session over, then its next write), `lapse@K` (its lease lapses and a
    /// second process under its worker id takes the session back), `leave@K` (an acknowledged
    /// close, then the next worker asks at once); with --postgres also
    /// `db-crash:MODEL@K` (crash the database server, MODEL immediate, kill or kill-frozen, and
    /// restart it) and `partition@K` (cut the owner's own link to the database until another
    /// worker took over; needs root and iproute2). Without it: a pause and a kill after every
    /// write, two kills of an heir in its second life, and with --postgres a sample of database
    /// crashes and partitions. With --postgres, `ACTION@K.S` strikes inside request K (the one
    /// after the K-th write) before its S-th statement (from 1), `ACTION@K.Sr` after that
    /// statement's reply: ACTION pause (held while another worker takes over, then let go),
    /// kill, reset (both sides of the connection closed), drop (never forwarded) or cut (sent,
    /// the server's answer lost, the connection closed);
    /// `kill@take.S` right after a `kill@K.S` kills the heir before the S-th statement of its
    /// takeover, `reset@take.S` resets its connection there, `cut@take.S` loses statement S's
    /// answer (the heir lives on) and `pause@take.S` holds it while another worker takes the
    /// session over; `kill@close.S`, `reset@close.S` and `cut@close.S` right
    /// after a `leave@K` do the same at the S-th statement of the owner's close. For agentstore in-process, `kill@K.P` kills the owner at the P-th crash
    /// point (from 1) its store passes inside request K, and `kill@take.Q` right after it the
    /// heir at the Q-th crash point of its takeover; without --plan a sample of them runs.
    #[arg(long, value_name = "PLAN", help_heading = WHAT)]
    plan: Option<String>,
    /// Run each plan N times (a replay that fails N of N runs is deterministic); with N > 1
    /// the summary says how many runs of each plan failed.
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = WHAT)]
    repeat: usize,
    /// With --postgres: every statement strike (each action before each statement of each
    /// request of the first session's owner, and after each reply but a request's last),
    /// counted in a strike-free trial, a kill, a reset, a lost answer and a pause at every
    /// statement of the heir's takeover after `kill@3.1` (`kill@3.1+kill@take.S`, …), and a
    /// kill, a reset and a lost answer at every statement of the owner's close after `leave@3`
    /// (`leave@3+kill@close.S`, …), instead of a sample of them.
    #[arg(long, conflicts_with = "plan", help_heading = WHAT)]
    every_statement: bool,
    /// For agentstore in-process: a kill at every crash point (`kill@K.P`) of every request
    /// of the first session's owner, counted in a strike-free trial, and at every crash point
    /// of the heir's takeover after `kill@3.1` (`kill@3.1+kill@take.Q`), instead of the
    /// default plans.
    #[arg(long, conflicts_with_all = ["plan", "postgres", "adapter"], help_heading = WHAT)]
    every_point: bool,
    /// Worker processes (at least 2: one to lose a session, one to take it over).
    #[arg(long, default_value_t = 2, help_heading = WHAT)]
    workers: usize,
    /// Sessions they serve, spread round-robin over the workers.
    #[arg(long, default_value_t = 2, help_heading = WHAT)]
    sessions: usize,
    /// The lease's ttl, in milliseconds of the store's clock; a list (`300,5000`) gives
    /// worker i the i-th, the last one to the rest.
    #[arg(long, value_name = "MS[,MS…]", default_value = "300", help_heading = WHAT)]
    ttl_ms: String,
    /// Run the store with this fault: agentstore's (see `agentchaos faults`), or with
    /// --postgres the PostgreSQL store's (`agentstore-pg adapter --fault NAME`).
    #[arg(long, value_name = "NAME", conflicts_with = "adapter", help_heading = STORE)]
    store_fault: Option<String>,
    /// The store behind this adapter program (it must claim `lease`) instead of agentstore in-process.
    #[arg(long, value_name = "'CMD ARGS…'", help_heading = STORE)]
    adapter: Option<String>,
    /// The PostgreSQL store (`agentstore-pg`, next to this binary or on PATH) on a private
    /// cluster this campaign starts (initdb into a scratch directory, never another server),
    /// with network namespaces for the partitions when run as root with iproute2.
    #[arg(long, conflicts_with = "adapter", help_heading = STORE)]
    postgres: bool,
    /// Where the trials' scratch directories go (default: the system's temporary
    /// directory). Also --scratch.
    #[arg(long = "dir", alias = "scratch", value_name = "DIR", help_heading = EXECUTION)]
    scratch: Option<PathBuf>,
    /// Write the campaign's report as JSON to FILE: each trial's verdict (pass, fail or
    /// not exercised), its strikes (fired or not, what they hit) and violations, and
    /// fired/planned per strike kind.
    #[arg(long, value_name = "FILE", help_heading = EXECUTION)]
    json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(crate) struct WorkerCli {
    #[arg(long)]
    root: PathBuf,
    #[arg(long)]
    workspace: PathBuf,
    #[arg(long)]
    world: PathBuf,
    #[arg(long)]
    worker_id: String,
    #[arg(long)]
    ttl_ms: u64,
    #[arg(long)]
    adapter: Option<String>,
}

pub(crate) fn run_worker(w: WorkerCli) -> Result<ExitCode, Failure> {
    let args = agentchaos::agent::worker::WorkerArgs {
        root: w.root,
        workspace: w.workspace,
        world: w.world,
        worker_id: w.worker_id,
        ttl_ms: w.ttl_ms,
    };
    let backend =
        backend(&w.adapter, Durability::Sync, false).map_err(|e| failed(format!("worker: {e}")))?;
    agentchaos::agent::worker::Worker::new(&args, backend.as_ref())
        .serve(std::io::stdin().lock(), std::io::stdout().lock())
        .map_err(|e| {
            failed(format!(
                "worker {}: the harness's pipe failed: {e}",
                args.worker_id
            ))
        })?;
    Ok(ExitCode::SUCCESS)
}

/// The `agentstore-pg` binary: beside this one (cargo builds both into
/// one target directory), else on PATH.
fn agentstore_pg_bin() -> Result<PathBuf, Failure> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("agentstore-pg")));
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("agentstore-pg"));
    beside
        .into_iter()
        .chain(on_path)
        .find(|p| p.is_file())
        .ok_or_else(|| {
            failed("--postgres: no agentstore-pg beside agentchaos or on PATH (cargo build -p agentstore-pg)")
        })
}

pub(crate) fn run_workers(w: WorkersCli) -> Result<ExitCode, Failure> {
    use agentchaos::agent::worker::WorkerReply;
    use agentchaos::campaign::workers::{self, Database, SharedStore, WorkersConfig};
    use agentchaos::history::WorkerEvent;
    use agentchaos::nemesis::workers::{LeaseFault, Needs, WorkerPlan};
    let json_report = super::super::ReportFile::open("--json", &w.json)?;
    if w.postgres {
        if let Some(n) = &w.store_fault {
            if agentstore_pg::fault::Fault::from_name(n).is_none() {
                let names: Vec<&str> = agentstore_pg::fault::Fault::ALL
                    .iter()
                    .map(|(_, n, _)| *n)
                    .collect();
                return Err(bad_input(format!(
                    "--store-fault {n:?} names no fault of the PostgreSQL store; known: {}",
                    names.join(", ")
                )));
            }
        }
    } else {
        check_fault(&w.store_fault)?;
    }
    let ttl_ms = w
        .ttl_ms
        .split(',')
        .map(|t| t.trim().parse::<u64>())
        .collect::<Result<Vec<u64>, _>>()
        .map_err(|_| {
            bad_input(format!(
                "--ttl-ms {:?}: not milliseconds, or a list of them joined by commas (300,5000)",
                w.ttl_ms
            ))
        })?;
    if w.repeat < 1 {
        return Err(bad_input("--repeat must be at least 1"));
    }
    if w.every_statement && !w.postgres {
        return Err(bad_input(
            "--every-statement: statement strikes need a database server the harness started (--postgres)",
        ));
    }
    if w.workers < 2 || w.sessions < 1 {
        return Err(bad_input(
            "--workers must be at least 2 and --sessions at least 1",
        ));
    }
    let explicit = match &w.plan {
        Some(p) => {
            let plan = p
                .parse::<WorkerPlan>()
                .map_err(|e| bad_input(format!("--plan: {e}")))?;
            // agentstore's strike points inside a request are its crash points.
            Some(if w.postgres {
                plan
            } else {
                plan.at_crash_points()
            })
        }
        None => None,
    };
    if let Some(plan) = &explicit {
        if plan.needs() > Needs::Processes && !w.postgres {
            return Err(bad_input(format!(
                "--plan {plan}: database crashes, partitions and statement strikes need a database server the harness started (--postgres); inside a request of agentstore in-process only kill@K.P strikes (at its crash points)"
            )));
        }
        if plan.strikes_crash_points() && w.adapter.is_some() {
            return Err(bad_input(format!(
                "--plan {plan}: kill@K.P strikes at agentstore's own crash points, so only in-process (not through --adapter)"
            )));
        }
    }
    agentchaos::child::begin().map_err(failed)?;
    let netns = agentchaos::nemesis::partition::available();
    let mut database = if w.postgres {
        let wants_network = match &explicit {
            Some(plan) if plan.needs() == Needs::Network && !netns => {
                return Err(failed(format!(
                    "--plan {plan}: a partition needs network namespaces: run as root, with iproute2"
                )))
            }
            Some(plan) => plan.needs() == Needs::Network,
            None if !netns && agentstore_pg::cluster::required() => {
                return Err(failed(
                    "workers --postgres: no network namespaces here (root and iproute2), so no partitions (CI=true)",
                ))
            }
            None => netns,
        };
        let bin = agentstore_pg_bin()?;
        let db = Database::start(&bin, w.store_fault.as_deref(), wants_network)
            .map_err(|e| failed(format!("workers --postgres: {e}")))?;
        Some((db, bin))
    } else {
        None
    };
    let plans = match explicit {
        Some(p) => vec![p],
        None => {
            let mut plans = workers::every_plan();
            match &database {
                Some((db, _)) => {
                    plans.extend(workers::database_plans(db.has_network()));
                    if !w.every_statement {
                        plans.extend(workers::sampled_statement_plans());
                    }
                    if !db.has_network() {
                        println!("partition strikes left out: no network namespaces here (they need root and iproute2)");
                    }
                }
                None => {
                    if w.adapter.is_none() {
                        plans.extend(workers::crash_point_plans());
                    }
                    println!(
                        "database crashes and partitions left out: this store has no database server the harness started (--postgres has)"
                    )
                }
            }
            plans
        }
    };
    let (adapter, store) = match (&database, &w.adapter) {
        (Some((db, bin)), _) => (
            Some(db.adapter()),
            SharedStore::Postgres {
                bin: bin.clone(),
                fault: w.store_fault.clone(),
            },
        ),
        (None, Some(a)) => (Some(a.clone()), SharedStore::Adapter(a.clone())),
        (None, None) => (
            None,
            SharedStore::InProcess {
                fault: w.store_fault.clone(),
            },
        ),
    };
    let backend = backend(&adapter, Durability::Sync, false)?;
    let claims = backend
        .capabilities()
        .map_err(|e| Failure::Store(format!("workers: {e}")))?;
    if !claims.contains(&agentchaos_protocol::Capability::Lease) {
        return Err(bad_input(format!(
            "{} does not claim `lease`: many workers cannot share it (chaos/PROTOCOL.md, section 9)",
            backend.describe()
        )));
    }
    let cfg = WorkersConfig {
        exe: std::env::current_exe()
            .map_err(|e| failed(format!("cannot find my own binary: {e}")))?,
        workers: w.workers,
        sessions: w.sessions,
        ttl_ms,
        store,
    };
    let scratch = w.scratch.unwrap_or_else(std::env::temp_dir);
    let mut plans = plans;
    if w.every_point {
        let counts = workers::strike_point_counts(&cfg, backend.as_ref(), &scratch, None)
            .map_err(workers_failure("--every-point"))?;
        plans = workers::crash_point_every_plans(&counts);
        say_points("crash", "crash point", &counts, plans.len());
        let points = workers::takeover_point_count(&cfg, backend.as_ref(), &scratch, None)
            .map_err(workers_failure("--every-point"))?;
        let takeovers = workers::takeover_every_plans(points, &[LeaseFault::Kill]);
        say_takeover_points("crash point", points, takeovers.len());
        plans.extend(takeovers.into_iter().map(WorkerPlan::at_crash_points));
    }
    if let (true, Some((db, _))) = (w.every_statement, database.as_mut()) {
        let counts = workers::strike_point_counts(&cfg, backend.as_ref(), &scratch, Some(&mut *db))
            .map_err(workers_failure("--every-statement"))?;
        let every = workers::statement_plans(&counts);
        say_points("statement", "statement", &counts, every.len());
        plans.extend(every);
        let points = workers::takeover_point_count(&cfg, backend.as_ref(), &scratch, Some(db))
            .map_err(workers_failure("--every-statement"))?;
        let takeovers = workers::takeover_every_plans(points, &LeaseFault::ALL);
        say_takeover_points("statement", points, takeovers.len());
        plans.extend(takeovers);
        let points = workers::close_point_count(&cfg, backend.as_ref(), &scratch, db)
            .map_err(workers_failure("--every-statement"))?;
        let closes = workers::close_every_plans(
            points,
            &[LeaseFault::Kill, LeaseFault::Reset, LeaseFault::Cut],
        );
        println!(
            "close statements: {points} in the owner's close after {}, {} strike plan(s)",
            workers::leave_before_close(),
            closes.len()
        );
        plans.extend(closes);
    }
    let describe = if w.postgres {
        "PostgreSQL (agentstore-pg) on a private cluster".to_string()
    } else {
        backend.describe()
    };
    println!(
        "store: {}{}{} · {} workers, {} sessions, lease ttl {} ms · {} plan(s)",
        describe,
        w.store_fault
            .as_deref()
            .map(|f| format!(" (fault {f})"))
            .unwrap_or_default(),
        match &database {
            Some((db, _)) if db.has_network() => ", every worker in a network namespace of its own",
            _ => "",
        },
        cfg.workers,
        cfg.sessions,
        cfg.ttls(),
        plans.len()
    );
    let started = std::time::Instant::now();
    let mut violations = 0;
    let mut not_exercised = 0;
    let mut by_invariant = std::collections::BTreeMap::new();
    // Per strike kind: (planned, fired).
    let mut by_kind: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    let mut trials_json = Vec::new();
    let mut statements = workers::StatementCoverage::default();
    // Per plan, with --repeat: (runs, runs with a violation).
    let mut runs: Vec<(String, usize, usize)> = Vec::new();
    let trials: Vec<&WorkerPlan> = plans
        .iter()
        .flat_map(|p| std::iter::repeat_n(p, w.repeat))
        .collect();
    for &plan in &trials {
        let trial = workers::trial(
            &cfg,
            backend.as_ref(),
            plan.clone(),
            &scratch,
            database.as_mut().map(|(db, _)| db),
        )
        .map_err(workers_failure(plan))?;
        statements.add(&trial.statements);
        let takeovers = trial
            .history
            .iter()
            .filter(|e| matches!(e, WorkerEvent::Granted { grant, .. } if grant.epoch > 1))
            .count();
        let fenced = trial
            .history
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    WorkerEvent::Replied {
                        reply: WorkerReply::Fenced { .. },
                        ..
                    }
                )
            })
            .count();
        let fired = trial.strikes.iter().filter(|s| s.fired).count();
        for s in &trial.strikes {
            let k = by_kind.entry(s.strike.kind()).or_default();
            k.0 += 1;
            k.1 += usize::from(s.fired);
        }
        // A trial with an unfired strike proves nothing of it, pass or fail.
        not_exercised += usize::from(!trial.exercised());
        let verdict = if !trial.violations.is_empty() {
            "fail"
        } else if !trial.exercised() {
            "not exercised"
        } else {
            "pass"
        };
        println!(
            "{plan:<10} {takeovers} takeover(s), {fenced} write(s) fenced, {} effect(s) applied, {} violation(s), strikes fired {fired}/{}",
            trial.effects.len(),
            trial.violations.len(),
            trial.strikes.len()
        );
        for s in trial.strikes.iter().filter(|s| !s.fired) {
            println!("NOT EXERCISED {plan}: {} never fired: {}", s.label, s.what);
        }
        let gave_up: Vec<(&String, &String, &String)> = trial
            .history
            .iter()
            .filter_map(|e| match e {
                WorkerEvent::GaveUp {
                    session,
                    strike,
                    why,
                } => Some((session, strike, why)),
                _ => None,
            })
            .collect();
        for (session, strike, why) in &gave_up {
            println!("  session {session} not completed, prevented by {strike}: {why}");
        }
        match runs.last_mut() {
            Some((p, n, failed)) if *p == plan.to_string() => {
                *n += 1;
                *failed += usize::from(!trial.violations.is_empty());
            }
            _ => runs.push((
                plan.to_string(),
                1,
                usize::from(!trial.violations.is_empty()),
            )),
        }
        let mut violations_json = Vec::new();
        for v in &trial.violations {
            *by_invariant.entry(v.invariant.name()).or_insert(0) += 1;
            violations += 1;
            println!("VIOLATION {} · session {}", v.invariant.name(), v.session);
            println!("  plan:     {plan}");
            println!("  expected: {}", v.expected);
            println!("  found:    {}", v.found);
            for e in &v.events {
                println!("  event:    {e}");
            }
            println!("  replay:   {}", cfg.replay(plan));
            violations_json.push(serde_json::json!({
                "invariant": v.invariant.name(),
                "session": v.session,
                "expected": v.expected,
                "found": v.found,
                "events": v.events,
                "replay": cfg.replay(plan),
            }));
        }
        trials_json.push(serde_json::json!({
            "plan": plan.to_string(),
            "verdict": verdict,
            "strikes": trial.strikes.iter().map(|s| serde_json::json!({
                "strike": s.label,
                "kind": s.strike.kind(),
                "fired": s.fired,
                "what": s.what,
            })).collect::<Vec<_>>(),
            "takeovers": takeovers,
            "fenced": fenced,
            "effects": trial.effects.len(),
            "not_completed": gave_up.iter().map(|(session, strike, why)| serde_json::json!({
                "session": session, "prevented_by": strike, "why": why,
            })).collect::<Vec<_>>(),
            "violations": violations_json,
        }));
    }
    let counts: Vec<String> = agentchaos::check::workers::WorkerInvariant::ALL
        .iter()
        .map(|i| format!("{} {}", i.name(), by_invariant.get(i.name()).unwrap_or(&0)))
        .collect();
    let kinds: Vec<String> = by_kind
        .iter()
        .map(|(kind, (planned, fired))| format!("{kind} {fired}/{planned}"))
        .collect();
    if w.repeat > 1 {
        for (plan, n, failed) in &runs {
            println!("{plan}: failed {failed} of {n} runs");
        }
    }
    if !kinds.is_empty() {
        println!("strikes fired/planned: {}", kinds.join(" · "));
    }
    say_statement_coverage(&statements);
    println!(
        "total: {} trial(s), {violations} violation(s), {not_exercised} not exercised, {:.1}s · by invariant: {}",
        trials.len(),
        started.elapsed().as_secs_f64(),
        counts.join(" · ")
    );
    if let Some(f) = json_report {
        let report = serde_json::json!({
            "store": describe,
            "workers": cfg.workers,
            "sessions": cfg.sessions,
            "trials": trials_json,
            "strikes": by_kind.iter().map(|(kind, (planned, fired))| {
                (kind.to_string(), serde_json::json!({"planned": planned, "fired": fired}))
            }).collect::<serde_json::Map<_, _>>(),
            "violations": violations,
            "not_exercised": not_exercised,
            "statements": statements.by_sql.iter().map(|(sql, u)| serde_json::json!({
                "sql": sql,
                "executed": u.executed,
                "struck_before": u.struck_before,
                "struck_after": u.struck_after,
            })).collect::<Vec<_>>(),
            "by_invariant": agentchaos::check::workers::WorkerInvariant::ALL
                .iter()
                .map(|i| (i.name().to_string(), serde_json::json!(by_invariant.get(i.name()).unwrap_or(&0))))
                .collect::<serde_json::Map<_, _>>(),
        });
        let text = serde_json::to_string_pretty(&report).expect("a report serializes");
        f.write(&(text + "\n"))?;
    }
    if violations == 0 && not_exercised == trials.len() {
        return Err(bad_input(format!(
            "workers: no plan was exercised: every one of the {} trial(s) has a strike that never fired (see NOT EXERCISED above)",
            trials.len()
        )));
    }
    Ok(if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_STORE)
    })
}

/// What a failed part of the campaign (`what`: a plan, a flag) is: the
/// harness's failure or the store's, named in one line.
fn workers_failure(
    what: impl std::fmt::Display,
) -> impl FnOnce(agentchaos::campaign::workers::WorkersError) -> Failure {
    use agentchaos::campaign::workers::WorkersError;
    move |e| match e {
        WorkersError::Harness(m) => failed(format!("workers {what}: {m}")),
        WorkersError::Store(m) => Failure::Store(format!("workers {what}: {m}")),
    }
}

/// The line that says what a strike-free count found: `kind points: N
/// units in M request(s) …`, and how many plans they make.
/// The store's statements the trials with statement strikes ran, and how
/// often a strike landed before each or after its reply (nothing without
/// such trials).
fn say_statement_coverage(coverage: &agentchaos::campaign::workers::StatementCoverage) {
    if coverage.by_sql.is_empty() {
        return;
    }
    println!(
        "statement coverage: {} of the {} distinct statements the store sent were struck (the trials with statement strikes; each one's final logs checked after)",
        coverage.struck(),
        coverage.by_sql.len()
    );
    println!("  before  after  executed  statement");
    for (sql, u) in &coverage.by_sql {
        let shown: String = if sql.chars().count() > 100 {
            sql.chars().take(99).chain(['…']).collect()
        } else {
            sql.clone()
        };
        println!(
            "  {:>6}  {:>5}  {:>8}  {shown}",
            u.struck_before, u.struck_after, u.executed
        );
    }
}

fn say_points(kind: &str, unit: &str, counts: &[usize], plans: usize) {
    println!(
        "{kind} points: {} {unit}(s) in {} request(s) of a session's owner, {plans} strike plan(s)",
        counts.iter().sum::<usize>(),
        counts.len(),
    );
}

fn say_takeover_points(unit: &str, points: usize, plans: usize) {
    println!(
        "takeover {unit}s: {points} in the heir's takeover after {}, {plans} strike plan(s)",
        agentchaos::campaign::workers::kill_before_takeover(),
    );
}
