//! How the harness runs a probe child (`agentchaos probe`, hidden): the
//! events it replays written where it reads them, the store's flags and
//! processes handed down, a child that hangs killed after
//! `--hang-timeout`, its one-line reply parsed. It blames the store only
//! for what the store did (a hang, an exit with 1); every other failure is
//! the harness's.

use std::path::Path;
use std::process::Command;

use agentchaos_protocol::event::{Event, Record};

use crate::campaign::probe::{ProbeError, ProbeReply, ProbeSetup};
use crate::model::describe_record;

/// The crash-free run's events 1..`end` (event 0 is the store's own), as a
/// probe replays them into a fresh session.
pub(super) fn replay_events(reference: &[Record], end: usize) -> Result<Vec<Event>, ProbeError> {
    reference[1..end]
        .iter()
        .map(|r| {
            r.event().cloned().ok_or_else(|| {
                ProbeError::Harness(format!(
                    "{} is not an event the agent writes",
                    describe_record(r)
                ))
            })
        })
        .collect()
}

/// Writes `events` where the probe child reads them (`--events FILE`) and
/// runs probe `kind` on a fresh session `session` under `dir`, with a
/// workspace.
pub(super) fn child_with_events(
    setup: &ProbeSetup<'_>,
    dir: &Path,
    kind: &str,
    session: &str,
    events: &impl serde::Serialize,
) -> Result<ProbeReply, ProbeError> {
    let file = dir.join("events.json");
    std::fs::write(&file, serde_json::to_vec(events).expect("events serialize"))
        .map_err(|e| ProbeError::Harness(format!("{}: {e}", file.display())))?;
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws)
        .map_err(|e| ProbeError::Harness(format!("{}: {e}", ws.display())))?;
    child(
        setup,
        kind,
        &dir.join("root"),
        session,
        Some(&ws),
        &[std::ffi::OsStr::new("--events"), file.as_os_str()],
    )
}

/// The most times a probe child opens the session (the rule probe: to
/// replay and append, then again to read the log back).
const PROBE_OPENS: usize = 2;

/// Runs `cmd` to its end, its output captured; `None` when it ran for
/// `hang_timeout` and was killed (SIGKILL). The child is reaped only after
/// the watchdog stood down or fired, so the kill never reaches a recycled pid.
fn output_unless_hung(
    mut cmd: Command,
    hang_timeout: std::time::Duration,
) -> std::io::Result<Option<std::process::Output>> {
    use std::process::Stdio;
    let mut running = crate::child::spawn(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )?;
    let pid = nix::unistd::Pid::from_raw(running.id() as i32);
    let watchdog = crate::child::Watchdog::arm(hang_timeout, move || {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    });
    // Both pipes drained on their own threads: a chatty child never blocks.
    let stderr = running.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = std::io::Read::read_to_end(&mut e, &mut bytes);
            bytes
        })
    });
    let mut stdout = Vec::new();
    if let Some(mut out) = running.stdout.take() {
        let _ = std::io::Read::read_to_end(&mut out, &mut stdout);
    }
    let stderr = stderr.map_or_else(Vec::new, |t| t.join().unwrap_or_default());
    let hung = watchdog.disarm();
    let status = running.wait()?;
    Ok((!hung).then_some(std::process::Output {
        status,
        stdout,
        stderr,
    }))
}

/// Runs `agentchaos probe` with the store's flags and parses its reply.
pub(super) fn child(
    setup: &ProbeSetup<'_>,
    what: &str,
    root: &Path,
    session: &str,
    workspace: Option<&Path>,
    extra: &[&std::ffi::OsStr],
) -> Result<ProbeReply, ProbeError> {
    let mut cmd = Command::new(setup.agent_exe);
    // Waited for on this thread: a harness killed mid-probe takes it along.
    crate::child::tell_to_die_with_harness(&mut cmd);
    cmd.args(["probe", "--what", what, "--session", session, "--root"])
        .arg(root)
        .args(extra)
        .args(setup.backend.agent_args());
    // A probe opens the session at most twice, never crashes, never is traced.
    let adapters = setup.backend.fork_life(PROBE_OPENS).map_err(|e| {
        ProbeError::Harness(format!(
            "cannot fork the store processes of the {what} probe: {e}"
        ))
    })?;
    if let Some(adapters) = &adapters {
        adapters
            .hand_down(&mut cmd)
            .map_err(|e| ProbeError::Harness(format!("the {what} probe: {e}")))?;
    }
    if let Some(ws) = workspace {
        cmd.arg("--workspace").arg(ws);
    }
    cmd.env_remove(agentstore::fault::FAULT_ENV);
    for var in [
        "AGENTCHAOS_TRACE",
        "AGENTCHAOS_KILL_AT",
        "AGENTCHAOS_TEAR",
        "AGENTCHAOS_SYNC_LOG",
        crate::scenario::interleaving::SCHEDULE_ENV,
    ] {
        cmd.env_remove(var);
    }
    if let Some(f) = setup.store_fault {
        cmd.env(agentstore::fault::FAULT_ENV, f);
    }
    // Every probe's root lies in its scratch directory, where its profile goes too.
    if let Some(scratch) = root.parent() {
        cmd.envs(crate::coverage::probe_env(scratch));
    }
    let out = output_unless_hung(cmd, setup.hang_timeout).map_err(|e| {
        ProbeError::Harness(format!(
            "cannot start the probe {}: {e}",
            setup.agent_exe.display()
        ))
    });
    // The probe is gone: kill and reap its store processes.
    drop(adapters);
    let Some(out) = out? else {
        return Err(ProbeError::Store(format!(
            "the {what} probe hung: no reply from the store in {} s (--hang-timeout); killed",
            setup.hang_timeout.as_secs()
        )));
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let message = format!(
            "the {what} probe failed ({}): {}",
            out.status,
            stderr.lines().last().unwrap_or("(no message)")
        );
        // The child exits 1 when the store failed it, as the agent does
        // (`agentchaos probe`); any other failure is the harness's.
        return Err(if out.status.code() == Some(1) {
            ProbeError::Store(message)
        } else {
            ProbeError::Harness(message)
        });
    }
    serde_json::from_str(stdout.trim()).map_err(|e| {
        ProbeError::Harness(format!("the {what} probe replied {:?}: {e}", stdout.trim()))
    })
}
