//! Named crash points: where the harness (agentchaos) may kill this process.
//!
//! Every write, sync, rename and tool-protocol step in the store passes
//! through [`hit`] or [`write_at`]. With no `AGENTCHAOS_*` variable set they
//! cost one relaxed atomic load. The harness drives them through the
//! environment of the child process:
//!
//! - `AGENTCHAOS_TRACE=FILE`: append the name of every hit to FILE, one per line
//!   (a trace run: which points does this scenario reach, in which order).
//! - `AGENTCHAOS_KILL_AT=N`: at the N-th hit (0-based, counted over all points
//!   in this process) send SIGKILL to ourselves: no destructors, no flushes.
//!   A harness running the store inside its own long-lived process (agentchaos's
//!   worker) arms such a kill itself, relative to now, with [`kill_in`].
//! - `AGENTCHAOS_TEAR=BYTES`: if hit N is a write, first let only BYTES bytes
//!   of it reach the file (a torn write), then die.
//! - `AGENTCHAOS_SYNC_LOG=FILE`: append `LEN PATH` after every successful
//!   data sync of the event log, so a power-cut trial can drop what was never
//!   synced (see agentchaos' nemesis module for the exact model).
//!
//! Besides the crash points, a harness running the store in its own process
//! may [`observe`] the group commit ([`Note`]): agentchaos's scheduler holds
//! each appender thread where the notes say it leads, joins or leaves a
//! group, so that the interleaving is the harness's, never the OS's.
//!
//! This module must never change what the store writes when no variable is set
//! and no observer is installed.

use std::fs::File;
use std::io::Write;
use std::num::NonZeroU64;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

#[derive(Debug)]
struct Control {
    trace: Option<Mutex<File>>,
    /// The hit to kill at; [`NEVER`] for none.
    kill_at: AtomicU64,
    tear: Option<usize>,
    sync_log: Option<Mutex<File>>,
}

static CONTROL: OnceLock<Option<Control>> = OnceLock::new();
/// `kill_at` when no kill is armed.
const NEVER: u64 = u64::MAX;
static HITS: AtomicU64 = AtomicU64::new(0);

fn open_append(var: &str) -> Option<Mutex<File>> {
    let path = std::env::var_os(var)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| {
            eprintln!(
                "agentstore: cannot open {var}={}: {e}",
                Path::new(&path).display()
            );
            std::process::exit(2)
        });
    Some(Mutex::new(file))
}

fn parse_var<T: std::str::FromStr>(var: &str) -> Option<T> {
    let raw = std::env::var(var).ok()?;
    match raw.parse() {
        Ok(v) => Some(v),
        Err(_) => {
            eprintln!("agentstore: {var}={raw:?} is not a number");
            std::process::exit(2)
        }
    }
}

fn control() -> Option<&'static Control> {
    CONTROL
        .get_or_init(|| {
            let kill_at: Option<u64> = parse_var("AGENTCHAOS_KILL_AT");
            let c = Control {
                trace: open_append("AGENTCHAOS_TRACE"),
                kill_at: AtomicU64::new(kill_at.unwrap_or(NEVER)),
                tear: parse_var("AGENTCHAOS_TEAR"),
                sync_log: open_append("AGENTCHAOS_SYNC_LOG"),
            };
            let active = c.trace.is_some() || kill_at.is_some() || c.sync_log.is_some();
            active.then_some(c)
        })
        .as_ref()
}

/// Dies now, the way a crash does: SIGKILL to ourselves.
pub fn die() -> ! {
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    // SIGKILL cannot be caught; this is only reached if raise itself failed.
    std::process::abort()
}

/// Counts a hit of `point`; returns true if this hit is the one to kill at.
fn count(c: &Control, point: &'static str) -> bool {
    let n = HITS.fetch_add(1, Ordering::SeqCst);
    if let Some(trace) = &c.trace {
        let mut f = trace.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(f, "{point}");
    }
    c.kill_at.load(Ordering::SeqCst) == n
}

/// Arms a kill at the `nth` crash point this process hits from now on (1:
/// the next one), in place of any kill armed before; `None` disarms. False
/// when crash points are off in this process (no `AGENTCHAOS_*` variable
/// set): nothing is armed then.
pub fn kill_in(nth: Option<NonZeroU64>) -> bool {
    let Some(c) = control() else {
        return false;
    };
    let at = nth.map_or(NEVER, |n| {
        HITS.load(Ordering::SeqCst).saturating_add(n.get() - 1)
    });
    c.kill_at.store(at, Ordering::SeqCst);
    true
}

/// A crash point that is not a write: kill here if told to.
pub fn hit(point: &'static str) {
    if let Some(c) = control() {
        if count(c, point) {
            die();
        }
    }
}

/// A write through a crash point: `pwrite` all of `buf` at `offset`, unless
/// this is the hit to kill at, in which case only the torn prefix (if any)
/// is written before dying.
pub fn write_at(point: &'static str, file: &File, buf: &[u8], offset: u64) -> std::io::Result<()> {
    if let Some(c) = control() {
        if count(c, point) {
            if let Some(keep) = c.tear {
                let keep = keep.min(buf.len().saturating_sub(1));
                let _ = file.write_all_at(&buf[..keep], offset);
            }
            die();
        }
    }
    file.write_all_at(buf, offset)
}

/// Records that `path` is durable up to `len` bytes (only when a power-cut
/// trial asked for it).
pub fn synced(path: &Path, len: u64) {
    if let Some(Control {
        sync_log: Some(log),
        ..
    }) = control()
    {
        let mut f = log.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(f, "{len} {}", path.display());
    }
}

/// What the event log tells an in-process observer about its group commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    /// This thread leads a group and is about to fdatasync it (no lock held).
    GroupSync,
    /// This thread is about to wait for a sync another thread runs.
    GroupWait,
    /// A sync of the log succeeded: every event below `next_seq` is durable.
    /// Every thread waiting for it is about to be woken.
    Synced { next_seq: u64 },
    /// A sync of the log failed. Every thread waiting for it is about to be woken.
    SyncFailed,
}

static OBSERVER: OnceLock<fn(Note)> = OnceLock::new();

/// Installs the process's observer of [`Note`]s; false if one already was.
/// It is called on the thread the note is about, sometimes with the log's
/// state lock held: it must not call the store.
pub fn observe(observer: fn(Note)) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// Tells the observer, if any.
pub(crate) fn note(note: Note) {
    if let Some(observer) = OBSERVER.get() {
        observer(note)
    }
}
