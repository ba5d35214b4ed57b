//! `agentchaos-sqlite-adapter [--mutant NAME]`: the SQLite session store
//! behind the agentchaos adapter protocol, on stdin and stdout. `--mutant`
//! selects a deliberately broken variant (see `chaos/mutants/README.md`).

use std::io::Write;

use agentchaos_protocol::fork_server;
use agentchaos_protocol::FORK_PROTOCOL_VERSION;
use agentchaos_sqlite_store::mutant::{self, Mutant};
use agentchaos_sqlite_store::serve;

fn usage_error(message: &str) -> ! {
    let names: Vec<&str> = Mutant::ALL.iter().map(|(_, n, _)| *n).collect();
    eprintln!(
        "agentchaos-sqlite-adapter: {message} (usage: agentchaos-sqlite-adapter [--mutant {}])",
        names.join("|")
    );
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {}
        [flag, name] if flag == "--mutant" => match Mutant::from_name(name) {
            Some(m) => mutant::activate(m),
            None => usage_error(&format!("unknown mutant {name:?}")),
        },
        [arg, ..] => usage_error(&format!("unexpected argument {arg:?}")),
    }
    // A Unix socket on stdin: the harness asks for a fork server
    // (protocol version 2), whose children each serve as below.
    if fork_server::stdin_is_socket() {
        let hello = || serve::hello(FORK_PROTOCOL_VERSION);
        if let Err(e) = fork_server::serve(&hello, &serve_stdio) {
            eprintln!("agentchaos-sqlite-adapter: fork server: {e}");
            std::process::exit(1);
        }
        return;
    }
    std::process::exit(serve_stdio());
}

/// Serves the protocol on stdin and stdout: the exit code.
fn serve_stdio() -> i32 {
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let served = serve::serve(stdin, &mut stdout).and_then(|()| stdout.flush());
    match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("agentchaos-sqlite-adapter: {e}");
            1
        }
    }
}
