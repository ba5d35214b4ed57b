//! A scripted file-operation program for agentchaos's own tests and benches.
//! An example, not a binary, so `cargo install --path chaos` leaves it out;
//! `cargo test` builds it, and the tests find it (and build it when run
//! alone) through `tests/support`.
//!
//! Every argument is one command, run in order from the current directory;
//! a failing command prints `err <command>: <error>` on stdout and the script
//! goes on, so a test can see what the program observed after an injected
//! fault. Nothing else is printed except `ack <text>` lines and a final `done`.
//!
//! Commands (`P` is a path; a text may contain spaces and `\n`):
//! `create P` (O_CREAT|O_TRUNC), `append P` (O_CREAT|O_APPEND), `open P`,
//! `dsync P` (O_CREAT|O_APPEND|O_DSYNC), `write P TEXT`, `pwrite P OFFSET TEXT`,
//! `writev P A|B|…`, `fill P N CHAR` (one write of N bytes),
//! `repeat N P TEXT` (N writes of TEXT plus a newline),
//! `repeat-sync N P TEXT` (the same, each followed by fdatasync),
//! `fsync P`, `fdatasync P`, `fsyncdir P`, `ftruncate P LEN`, `close P`,
//! `rename A B`, `unlink P`, `mkdir P`, `rmdir P`, `ack TEXT`, `sleep MS`,
//! `ropen P` (read-only), `read P N` (one read of up to N bytes),
//! `readv P A B` (one readv into buffers of A and B bytes),
//! `pread P OFFSET N` (one pread of up to N bytes), each printing
//! `read <count>: <bytes>` (a readv's buffers joined by `|`),
//! `wait-stdin` (read one line from stdin), `child` (run the remaining
//! commands in a child process and wait for it), `thread` (run the remaining
//! commands in a new thread and join it).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, IoSlice, IoSliceMut, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::process::{Command, ExitCode};

/// O_DSYNC on Linux (std does not export it).
const O_DSYNC: i32 = 0o10000;

fn main() -> ExitCode {
    let script: Vec<String> = std::env::args().skip(1).collect();
    match run(&script) {
        Ok(()) => {
            println!("done");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("agentchaos-fsprobe: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs the script; only a malformed command is an `Err`.
fn run(script: &[String]) -> Result<(), String> {
    let mut files: HashMap<String, File> = HashMap::new();
    for (i, cmd) in script.iter().enumerate() {
        let words: Vec<&str> = cmd.split(' ').collect();
        let rest = &script[i + 1..];
        match words[0] {
            "child" => {
                let status = Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
                    .args(rest)
                    .status()
                    .map_err(|e| format!("child: {e}"))?;
                println!("child exited {}", status.code().unwrap_or(-1));
                return Ok(());
            }
            "thread" => {
                let rest = rest.to_vec();
                return std::thread::spawn(move || run(&rest))
                    .join()
                    .map_err(|_| "thread panicked".to_string())?;
            }
            _ => {}
        }
        if let Err(e) = step(&words, &mut files)? {
            println!("err {cmd}: {e}");
        }
        io::stdout().flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// One command: the outer `Err` is a usage error, the inner one an I/O error
/// the script reports and survives.
fn step(w: &[&str], files: &mut HashMap<String, File>) -> Result<io::Result<()>, String> {
    let arg = |i: usize| -> Result<&str, String> {
        w.get(i)
            .copied()
            .ok_or_else(|| format!("{}: missing argument {i}", w[0]))
    };
    let text =
        |from: usize| -> String { w.get(from..).unwrap_or(&[]).join(" ").replace("\\n", "\n") };
    let num = |i: usize| -> Result<u64, String> {
        arg(i)?
            .parse::<u64>()
            .map_err(|e| format!("{}: argument {i}: {e}", w[0]))
    };
    let mut open = |path: &str, opts: &mut OpenOptions| -> io::Result<()> {
        files.insert(path.to_string(), opts.open(path)?);
        Ok(())
    };
    Ok(match w[0] {
        "create" => open(
            arg(1)?,
            OpenOptions::new().write(true).create(true).truncate(true),
        ),
        "append" => open(arg(1)?, OpenOptions::new().append(true).create(true)),
        "open" => open(arg(1)?, OpenOptions::new().write(true)),
        "ropen" => open(arg(1)?, OpenOptions::new().read(true)),
        "read" => {
            let mut buf = vec![0u8; num(2)? as usize];
            with(files, arg(1)?, |f| {
                let n = f.read(&mut buf)?;
                println!("read {n}: {}", String::from_utf8_lossy(&buf[..n]));
                Ok(())
            })
        }
        "readv" => {
            let (mut a, mut b) = (vec![0u8; num(2)? as usize], vec![0u8; num(3)? as usize]);
            with(files, arg(1)?, |f| {
                let n = f.read_vectored(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)])?;
                let (in_a, in_b) = (n.min(a.len()), n.saturating_sub(a.len()));
                println!(
                    "read {n}: {}|{}",
                    String::from_utf8_lossy(&a[..in_a]),
                    String::from_utf8_lossy(&b[..in_b])
                );
                Ok(())
            })
        }
        "pread" => {
            let (off, mut buf) = (num(2)?, vec![0u8; num(3)? as usize]);
            with(files, arg(1)?, |f| {
                let n = f.read_at(&mut buf, off)?;
                println!("read {n}: {}", String::from_utf8_lossy(&buf[..n]));
                Ok(())
            })
        }
        "dsync" => open(
            arg(1)?,
            OpenOptions::new()
                .append(true)
                .create(true)
                .custom_flags(O_DSYNC),
        ),
        "close" => {
            files.remove(arg(1)?);
            Ok(())
        }
        "write" => with(files, arg(1)?, |f| f.write(text(2).as_bytes()).map(drop)),
        "pwrite" => {
            let off = num(2)?;
            with(files, arg(1)?, |f| {
                f.write_at(text(3).as_bytes(), off).map(drop)
            })
        }
        "writev" => {
            let parts: Vec<String> = text(2).split('|').map(str::to_string).collect();
            let slices: Vec<IoSlice> = parts.iter().map(|p| IoSlice::new(p.as_bytes())).collect();
            with(files, arg(1)?, |f| f.write_vectored(&slices).map(drop))
        }
        "fill" => {
            let buf = vec![arg(3)?.as_bytes()[0]; num(2)? as usize];
            with(files, arg(1)?, |f| f.write(&buf).map(drop))
        }
        "repeat" | "repeat-sync" => {
            let n = num(1)?;
            let line = format!("{}\n", text(3));
            let sync = w[0] == "repeat-sync";
            with(files, arg(2)?, |f| {
                for _ in 0..n {
                    f.write_all(line.as_bytes())?;
                    if sync {
                        f.sync_data()?;
                    }
                }
                Ok(())
            })
        }
        "fsync" => with(files, arg(1)?, |f| f.sync_all()),
        "fdatasync" => with(files, arg(1)?, |f| f.sync_data()),
        "ftruncate" => {
            let len = num(2)?;
            with(files, arg(1)?, |f| f.set_len(len))
        }
        "fsyncdir" => File::open(arg(1)?).and_then(|d| d.sync_all()),
        "rename" => fs::rename(arg(1)?, arg(2)?),
        "unlink" => fs::remove_file(arg(1)?),
        "mkdir" => fs::create_dir(arg(1)?),
        "rmdir" => fs::remove_dir(arg(1)?),
        "ack" => {
            println!("ack {}", text(1));
            Ok(())
        }
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_millis(num(1)?));
            Ok(())
        }
        "wait-stdin" => io::stdin().lock().read_line(&mut String::new()).map(drop),
        other => return Err(format!("unknown command {other:?}")),
    })
}

fn with(
    files: &mut HashMap<String, File>,
    path: &str,
    f: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    match files.get_mut(path) {
        Some(file) => f(file),
        None => Err(io::Error::other(format!("{path} is not open"))),
    }
}
