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
    let parent = std::process::id();
    // SAFETY: between fork and exec this only calls async-signal-safe
    // functions (prctl, getppid) and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
            // The parent may have died before the prctl took effect.
            if nix::unistd::getppid().as_raw() as u32 != parent {
                return Err(std::io::Error::other(
                    "the parent died before the child started",
                ));
            }
            Ok(())
        });
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
