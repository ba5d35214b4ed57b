//! `agentchaos-sqlite-adapter`: the SQLite session store behind the
//! agentchaos adapter protocol, on stdin and stdout. Takes no arguments.

fn main() {
    if let Some(arg) = std::env::args().nth(1) {
        eprintln!("agentchaos-sqlite-adapter: unexpected argument {arg:?} (the harness drives everything through the protocol on stdin)");
        std::process::exit(2);
    }
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    if let Err(e) = agentchaos_sqlite_store::serve::serve(stdin, stdout) {
        eprintln!("agentchaos-sqlite-adapter: {e}");
        std::process::exit(1);
    }
}
