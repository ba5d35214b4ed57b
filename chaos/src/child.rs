//! Child processes that must not outlive the harness: a SIGKILL of the
//! harness (a CI timeout, cargo-mutants' timeout of a mutant whose store
//! loops forever) must not leave its children running. Linux only
//! (`PR_SET_PDEATHSIG`).

use std::os::unix::process::CommandExt as _;
use std::process::Command;

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
