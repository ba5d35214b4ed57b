//! Child processes that must not outlive the harness: a SIGKILL of the
//! harness (a CI timeout, cargo-mutants' timeout of a mutant whose store
//! loops forever) must not leave its children running. Linux only
//! (`PR_SET_PDEATHSIG`).

use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Makes `cmd`'s process die (SIGKILL) when the thread that starts it
/// exits: start it from a thread that outlives it (the one that waits for
/// it). Fails the spawn if the parent is already gone.
pub fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id() as i32;
    // SAFETY: between fork and exec this only calls async-signal-safe
    // functions (prctl, getppid) and allocates nothing unless it fails.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || match tie_to(parent) {
            Ok(true) => Ok(()),
            Ok(false) => Err(std::io::Error::other(
                "the parent died before the child started",
            )),
            Err(e) => Err(e.into()),
        });
    }
}

/// SIGKILL this process when the thread that started it exits; whether
/// `parent` is still its parent once that is set (it may have died
/// before the prctl took effect).
fn tie_to(parent: i32) -> nix::Result<bool> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
    Ok(nix::unistd::getppid().as_raw() == parent)
}

/// The variable through which the harness gives its own subcommands
/// (`agentchaos agent`, `agentchaos probe`) its pid, for [`die_with_harness`].
pub const HARNESS_PID_ENV: &str = "AGENTCHAOS_HARNESS_PID";

/// [`die_with_parent`] for the harness's own subcommands, which call
/// [`die_with_harness`] first thing: the same death, set up by the child
/// itself. A `pre_exec` hook makes the standard library fork the whole
/// harness for each child instead of `posix_spawn`ing it, and thousands
/// of agent lives a campaign pay for that copy.
pub fn tell_to_die_with_harness(cmd: &mut Command) {
    cmd.env(HARNESS_PID_ENV, std::process::id().to_string());
}

/// Why a child cannot tie its life to the harness's.
#[derive(Debug, thiserror::Error)]
pub enum DieWithHarnessError {
    #[error("{HARNESS_PID_ENV}={0:?} is not a pid")]
    NotAPid(String),
    #[error("cannot set the parent-death signal: {0}")]
    Prctl(nix::Error),
    #[error("the harness died before this process started")]
    Orphaned,
}

/// In a child started with [`tell_to_die_with_harness`]: SIGKILL this
/// process when the harness thread that started it exits. That thread
/// must wait for the child (as every spawner here does): unlike a
/// `pre_exec` hook, this runs after `exec`, when the spawner may already
/// have gone on. Fails if the harness is already gone (the child is an
/// orphan), or the variable is not a pid; does nothing when it is unset
/// (run by hand).
pub fn die_with_harness() -> Result<(), DieWithHarnessError> {
    let Ok(raw) = std::env::var(HARNESS_PID_ENV) else {
        return Ok(());
    };
    let harness: i32 = raw.parse().map_err(|_| DieWithHarnessError::NotAPid(raw))?;
    match tie_to(harness).map_err(DieWithHarnessError::Prctl)? {
        true => Ok(()),
        false => Err(DieWithHarnessError::Orphaned),
    }
}

/// A kill that runs on its own thread unless stood down in time: the
/// harness's one watchdog for a child that may hang (an agent life, a
/// probe, a power-loss recording). Reap the child only after
/// [`Watchdog::disarm`], so the kill never reaches a recycled pid.
#[derive(Debug)]
pub struct Watchdog {
    stand_down: mpsc::Sender<()>,
    thread: JoinHandle<bool>,
}

impl Watchdog {
    /// Runs `kill` after `after` unless disarmed before.
    pub fn arm(after: Duration, kill: impl FnOnce() + Send + 'static) -> Watchdog {
        let (stand_down, told) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || match told.recv_timeout(after) {
            Err(mpsc::RecvTimeoutError::Timeout) => {
                kill();
                true
            }
            _ => false,
        });
        Watchdog { stand_down, thread }
    }

    /// Stands it down; whether it had fired (the child was killed as hung).
    pub fn disarm(self) -> bool {
        drop(self.stand_down);
        self.thread.join().unwrap_or(false)
    }
}
