//! `agentchaos-sqlite-adapter [--mutant NAME]`: the SQLite session store
//! behind the agentchaos adapter protocol, on stdin and stdout. `--mutant`
//! selects a deliberately broken variant (see `chaos/mutants/README.md`).

use agentchaos_sqlite_store::mutant::{self, Mutant};

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
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    if let Err(e) = agentchaos_sqlite_store::serve::serve(stdin, stdout) {
        eprintln!("agentchaos-sqlite-adapter: {e}");
        std::process::exit(1);
    }
}
