//! `agentstore-pg adapter [--dsn DSN] [--fault NAME]`: the PostgreSQL
//! session store behind the agentchaos adapter protocol, on stdin and
//! stdout. The DSN (libpq key/value or URL form) comes from `--dsn` or
//! `AGENTSTORE_PG_DSN`; `--fault` selects a deliberately broken variant.
//!
//! `agentstore-pg bench [--dsn DSN] [--dir DIR] [--seconds S] [--json FILE]
//! [--lengths N,N,...] [--ttl-ms MS]` (feature `bench`, on by default): the
//! PostgreSQL store against agentstore, see [`agentstore_pg::bench`]. Without
//! `--dsn` it starts a private cluster of its own. Its takeover section
//! runs `agentstore-pg bench-holder STORE DSN ROOT SESSION TTL_MS` as the
//! worker it kills: it takes the lease, appends, prints `held EXPIRES
//! EVENTS` and blocks on stdin until killed.

use agentstore_pg::fault::{self, Fault};

const USAGE: &str = "usage: agentstore-pg adapter [--dsn DSN] [--fault NAME] | agentstore-pg bench [--dsn DSN] [--dir DIR] [--seconds S] [--json FILE] [--lengths N,N,...] [--ttl-ms MS]";

fn usage_error(message: &str) -> ! {
    let names: Vec<&str> = Fault::ALL.iter().map(|(_, n, _)| *n).collect();
    eprintln!(
        "agentstore-pg: {message} ({USAGE}; faults: {})",
        names.join(", ")
    );
    std::process::exit(2);
}

/// The value after `flag`, or a usage error.
fn value(args: &mut impl Iterator<Item = String>, flag: &str) -> String {
    args.next()
        .unwrap_or_else(|| usage_error(&format!("{flag} needs a value")))
}

fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("adapter") => adapter(args),
        #[cfg(feature = "bench")]
        Some("bench") => bench(args),
        #[cfg(feature = "bench")]
        Some("bench-holder") => bench_holder(args),
        Some(other) => usage_error(&format!("unknown command {other:?}")),
        None => usage_error("no command"),
    }
}

fn adapter(mut args: impl Iterator<Item = String>) {
    let mut dsn = std::env::var("AGENTSTORE_PG_DSN").ok();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dsn" => dsn = Some(value(&mut args, "--dsn")),
            "--fault" => {
                let name = value(&mut args, "--fault");
                match Fault::from_name(&name) {
                    Some(f) => fault::activate(f),
                    None => usage_error(&format!("unknown fault {name:?}")),
                }
            }
            other => usage_error(&format!("unexpected argument {other:?}")),
        }
    }
    let Some(dsn) = dsn else {
        usage_error("no database: give --dsn or set AGENTSTORE_PG_DSN")
    };
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    if let Err(e) = agentstore_pg::serve::serve(&dsn, stdin, stdout) {
        eprintln!("agentstore-pg: {e}");
        std::process::exit(1);
    }
}

#[cfg(feature = "bench")]
fn bench(mut args: impl Iterator<Item = String>) {
    use agentstore_pg::bench::{self, Config, Server};
    use std::path::PathBuf;
    use std::time::Duration;

    let mut config = Config {
        server: Server::Private,
        dir: None,
        per_configuration: Duration::from_secs(2),
        lengths: bench::DEFAULT_LENGTHS.to_vec(),
        ttl: Duration::from_millis(500),
        holder: std::env::current_exe().unwrap_or_else(|e| {
            eprintln!("agentstore-pg: bench: cannot find this program's path: {e}");
            std::process::exit(3)
        }),
    };
    let mut json: Option<PathBuf> = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dsn" => config.server = Server::Dsn(value(&mut args, "--dsn")),
            "--dir" => {
                let dir = PathBuf::from(value(&mut args, "--dir"));
                if !dir.is_dir() {
                    usage_error(&format!("--dir {}: not a directory", dir.display()));
                }
                config.dir = Some(dir);
            }
            "--seconds" => {
                let text = value(&mut args, "--seconds");
                match text.parse::<f64>() {
                    Ok(s) if s > 0.0 && s.is_finite() && s <= 3600.0 => {
                        config.per_configuration = Duration::from_secs_f64(s)
                    }
                    _ => usage_error(&format!(
                        "--seconds {text:?}: not a number of seconds in (0, 3600]"
                    )),
                }
            }
            "--json" => {
                let path = PathBuf::from(value(&mut args, "--json"));
                if !bench::json_target_ok(&path) {
                    usage_error(&format!(
                        "--json {}: its directory does not exist",
                        path.display()
                    ));
                }
                json = Some(path);
            }
            "--lengths" => {
                let text = value(&mut args, "--lengths");
                let lengths: Result<Vec<u64>, _> =
                    text.split(',').map(|n| n.trim().parse::<u64>()).collect();
                match lengths {
                    Ok(l) if !l.is_empty() && l.iter().all(|&n| n <= 1_000_000) => {
                        config.lengths = l
                    }
                    _ => usage_error(&format!(
                        "--lengths {text:?}: not a comma-separated list of event counts up to 1000000"
                    )),
                }
            }
            "--ttl-ms" => {
                let text = value(&mut args, "--ttl-ms");
                match text.parse::<u64>() {
                    Ok(ms) if (1..=600_000).contains(&ms) => config.ttl = Duration::from_millis(ms),
                    _ => usage_error(&format!(
                        "--ttl-ms {text:?}: not a number of milliseconds in 1..=600000"
                    )),
                }
            }
            other => usage_error(&format!("unexpected argument {other:?}")),
        }
    }
    let report = match bench::run(&config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agentstore-pg: bench: {e}");
            std::process::exit(3);
        }
    };
    print!("{}", report.text());
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&report).expect("a report serializes");
        if let Err(e) = std::fs::write(&path, text + "\n") {
            eprintln!("agentstore-pg: bench: write {}: {e}", path.display());
            std::process::exit(3);
        }
    }
}

/// The dying worker of `bench`'s takeover section: holds the lease until
/// it is killed (or its stdin closes).
#[cfg(feature = "bench")]
fn bench_holder(args: impl Iterator<Item = String>) {
    use agentstore_pg::bench::{self, TakeoverStore};
    use std::io::{Read, Write};
    use std::time::Duration;

    let args: Vec<String> = args.collect();
    let [store, dsn, root, session, ttl_ms] = args.as_slice() else {
        usage_error("bench-holder takes STORE DSN ROOT SESSION TTL_MS")
    };
    let Some(store) = TakeoverStore::from_name(store) else {
        usage_error(&format!("bench-holder: unknown store {store:?}"))
    };
    let Ok(ttl_ms) = ttl_ms.parse::<u64>() else {
        usage_error(&format!("bench-holder: TTL_MS {ttl_ms:?} is not a number"))
    };
    let root = std::path::Path::new(root);
    let held = match bench::hold(store, dsn, root, session, Duration::from_millis(ttl_ms)) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("agentstore-pg: bench-holder: {e}");
            std::process::exit(3);
        }
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", held.line());
    let _ = stdout.flush();
    // Holds everything until SIGKILL (or until the bench goes away).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(held);
}
