//! `agentstore-pg adapter [--dsn DSN] [--fault NAME]`: the PostgreSQL
//! session store behind the agentchaos adapter protocol, on stdin and
//! stdout. The DSN (libpq key/value or URL form) comes from `--dsn` or
//! `AGENTSTORE_PG_DSN`; `--fault` selects a deliberately broken variant.

use agentstore_pg::fault::{self, Fault};

const USAGE: &str = "usage: agentstore-pg adapter [--dsn DSN] [--fault NAME]";

fn usage_error(message: &str) -> ! {
    let names: Vec<&str> = Fault::ALL.iter().map(|(_, n, _)| *n).collect();
    eprintln!(
        "agentstore-pg: {message} ({USAGE}; faults: {})",
        names.join(", ")
    );
    std::process::exit(2);
}

fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("adapter") => {}
        Some(other) => usage_error(&format!("unknown command {other:?}")),
        None => usage_error("no command"),
    }
    let mut dsn = std::env::var("AGENTSTORE_PG_DSN").ok();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .unwrap_or_else(|| usage_error(&format!("{flag} needs a value")))
        };
        match arg.as_str() {
            "--dsn" => dsn = Some(value("--dsn")),
            "--fault" => {
                let name = value("--fault");
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
