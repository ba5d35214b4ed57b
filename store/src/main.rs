//! The `agentstore` command line: a thin layer over the library.
fn main() {
    eprintln!("agentstore: command line not built yet");
    std::process::exit(2);
}
