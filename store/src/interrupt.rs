//! Clean exits on Ctrl-C and SIGTERM for the long commands (`agentstore
//! bench`, `agentchaos run`).
//!
//! [`install`] registers handlers, through `signal-hook`, that only set
//! atomics (all a signal handler may safely do): the first SIGINT or
//! SIGTERM is recorded, a second one ends the process at once (exit 1).
//! Nothing is removed from a handler, since workers and their children
//! would recreate what it removed: long loops poll [`requested`], stop
//! taking work and wait for the children they started, and return
//! normally, so each scratch directory is removed by the code that made
//! it once nothing can write there; the command then exits with
//! [`exit_code`] (128 + the signal: 130 for SIGINT, 143 for SIGTERM).
//! Without [`install`], [`requested`] is always false.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGINT, SIGTERM};

#[derive(Debug)]
struct Received {
    any: Arc<AtomicBool>,
    signal: Arc<AtomicUsize>,
}

static RECEIVED: OnceLock<Received> = OnceLock::new();

/// Records SIGINT and SIGTERM from now on instead of dying of them.
pub fn install() -> std::io::Result<()> {
    let received = RECEIVED.get_or_init(|| Received {
        any: Arc::new(AtomicBool::new(false)),
        signal: Arc::new(AtomicUsize::new(0)),
    });
    for sig in [SIGINT, SIGTERM] {
        // In this order: the shutdown sees the flag as an earlier signal
        // left it, and the signal's number is stored before the flag.
        signal_hook::flag::register_conditional_shutdown(sig, 1, received.any.clone())?;
        signal_hook::flag::register_usize(sig, received.signal.clone(), sig as usize)?;
        signal_hook::flag::register(sig, received.any.clone())?;
    }
    Ok(())
}

/// Whether a SIGINT or SIGTERM arrived since [`install`]: stop taking work.
pub fn requested() -> bool {
    RECEIVED.get().is_some_and(|r| r.any.load(Ordering::SeqCst))
}

/// The exit code for the signal that arrived (128 + its number), if one did.
pub fn exit_code() -> Option<u8> {
    if !requested() {
        return None;
    }
    let sig = RECEIVED.get()?.signal.load(Ordering::SeqCst);
    u8::try_from(128 + sig).ok()
}

/// The name of the signal that arrived, for the one-line message.
pub fn signal_name() -> Option<&'static str> {
    match RECEIVED.get()?.signal.load(Ordering::SeqCst) {
        s if s == SIGINT as usize => Some("SIGINT"),
        s if s == SIGTERM as usize => Some("SIGTERM"),
        _ => None,
    }
}
