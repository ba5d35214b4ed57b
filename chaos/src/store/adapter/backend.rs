//! The harness's store traits over the adapter protocol: `--adapter 'CMD ARGS…'`.
//!
//! [`AdapterBackend`] opens a session by starting the adapter as a child of
//! the calling process (the agent), and observes one by starting a *fresh*
//! adapter in the harness: `open` without `create`, then `events` and
//! `projection`, then `close`. It owns how an opaque store is seen; it must
//! never judge what it sees (that is the checker's job), and it must never
//! let an adapter outlive the agent that started it: the adapter gets
//! `PR_SET_PDEATHSIG(SIGKILL)`, so a SIGKILL of the agent is a SIGKILL of the
//! store (an adapter left to read EOF and exit cleanly would not be a crash).
//!
//! Whitebox crash points do not exist inside a foreign store. The agent's
//! side of every mutating request has two instead: `adapter.<op>` before the
//! request is sent (the adapter is idle) and `adapter.<op>.replied` once the
//! adapter has answered, before the agent reads the answer (the request was
//! served; its ack is never seen). Both are deterministic: a kill while the
//! adapter is still serving would race with it. Kills inside the serving,
//! at the adapter's own syscalls, are the ptrace nemesis ([`crate::nemesis::syscall`]).
//!
//! What cannot be seen through the protocol is reported as not applicable
//! ([`AdapterBackend::not_applicable`]), never as passed: the log's bytes
//! (torn-tail and byte-identity checks are judged on the events the adapter
//! returns) and the snapshot (only the projection the store serves is
//! compared with the harness's fold of its events).

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use agentchaos_protocol::event::{BlobRef, Event, Record, Seq};
use agentchaos_protocol::message::OpenArgs;
use agentchaos_protocol::{Capability, ErrorKind, ProjectionView};
use agentstore::crashpoint;
use serde_json::Value;

use super::client::{AdapterCommand, Client, ClientError, ClientOptions};
use crate::nemesis::{ADAPTER_APPEND, ADAPTER_APPEND_REPLIED, ADAPTER_OPEN};
use crate::store::{
    Ack, NotApplicable, Observation, Recovered, SessionSpec, SessionStore, StoreBackend,
    StoreError, StoreResult,
};

/// Environment variables of the harness's in-process nemesis: an adapter
/// never inherits them (agentstore's adapter would obey them on its own).
const NEMESIS_ENV: &[&str] = &[
    "AGENTCHAOS_TRACE",
    "AGENTCHAOS_KILL_AT",
    "AGENTCHAOS_TEAR",
    "AGENTCHAOS_SYNC_LOG",
    agentstore::fault::FAULT_ENV,
];

/// How long an observation waits for a killed adapter to let go of its session.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// The checks an opaque store leaves out, with why.
const NOT_APPLICABLE: &[NotApplicable] = &[
    NotApplicable {
        invariant: "log-prefix",
        check: "torn or damaged lines in the log's bytes: judged on the events the adapter returns and on open's damage refusal and torn-tail report",
    },
    NotApplicable {
        invariant: "recovery-idempotent",
        check: "the log's bytes unchanged by a second recovery: judged on the events (same records, nothing appended)",
    },
    NotApplicable {
        invariant: "quarantine-recorded",
        check: "every cut torn tail kept in a file of the session directory that a durable event names: the store's files are its own (the power-loss campaign reads them only for an adapter that says it is agentstore); its torn-tail report at open and the events it serves are judged instead (log-prefix)",
    },
    NotApplicable {
        invariant: "tail-rules",
        check: "the tail probes, bytes appended to agentstore's log at the bounds of its tail rules (64 torn lines, a 4 MiB line): another store's log format and its bounds are its own; its torn-tail repair is judged by the tears (log-prefix)",
    },
    NotApplicable {
        invariant: "checkpoint-projection",
        check: "the snapshot on disk (its offset, its projection, snapshot + tail): the store keeps it to itself; only the projection it serves (when it claims checkpoint_projection) is compared with the fold of its events",
    },
    NotApplicable {
        invariant: "(nemesis)",
        check: "kills at the store's own whitebox crash points and the crash-point power cut (a foreign store has none): crash-point plans kill at the agent's points (before each request and once the adapter has answered it) and at timers; kills, tears and errors at the store's own syscalls are the syscall nemesis, power cuts the power-loss nemesis (both in the default nemesis set on Linux x86_64)",
    },
];

/// A store behind an adapter program.
#[derive(Debug, Clone)]
pub struct AdapterBackend {
    command: AdapterCommand,
    /// The command line as given (for reports and the agent's arguments).
    line: String,
    options: ClientOptions,
}

impl AdapterBackend {
    /// `line` is the `--adapter` value, split like a shell would split it.
    pub fn new(line: &str) -> Result<AdapterBackend, String> {
        Ok(AdapterBackend {
            command: AdapterCommand::parse(line)?,
            line: line.to_string(),
            options: ClientOptions::default(),
        })
    }

    /// Starts the adapter (it has answered `hello`); it dies with the
    /// thread that started it. For probes that need the adapter's own
    /// refusal kinds (`crate::campaign::probe`).
    pub fn client(&self) -> StoreResult<Client> {
        self.spawn()
    }

    /// Starts the adapter; it dies with the thread that started it.
    fn spawn(&self) -> StoreResult<Client> {
        let mut cmd = self.command.to_command();
        for var in NEMESIS_ENV {
            cmd.env_remove(var);
        }
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
                        "the parent died before the adapter started",
                    ));
                }
                Ok(())
            });
        }
        Client::spawn(cmd, self.options).map_err(err)
    }
}

fn err(e: ClientError) -> StoreError {
    StoreError {
        io: e.refusal_kind() == Some(ErrorKind::Io),
        harness: matches!(e, ClientError::Spawn { .. } | ClientError::Encode { .. }),
        message: e.to_string(),
    }
}

/// The crash point of a request the adapter has served and answered, before
/// the agent reads the answer.
fn replied(op: &'static str) {
    let point = match op {
        "open" => "adapter.open.replied",
        "append" | "start_tool" => ADAPTER_APPEND_REPLIED,
        "recover" => "adapter.recover.replied",
        "checkpoint" => "adapter.checkpoint.replied",
        "put_blob" => "adapter.put_blob.replied",
        "close" => "adapter.close.replied",
        _ => return,
    };
    crashpoint::hit(point);
}

/// The projection view as the checker compares it.
fn view_value(view: &ProjectionView) -> Value {
    serde_json::to_value(view).expect("a projection view serializes")
}

impl StoreBackend for AdapterBackend {
    fn describe(&self) -> String {
        format!("adapter `{}`", self.line)
    }

    fn agent_args(&self) -> Vec<String> {
        vec!["--adapter".to_string(), self.line.clone()]
    }

    fn adapter_line(&self) -> Option<&str> {
        Some(&self.line)
    }

    fn not_applicable(&self) -> &'static [NotApplicable] {
        NOT_APPLICABLE
    }

    fn capabilities(&self) -> StoreResult<Vec<Capability>> {
        let client = self.spawn()?;
        let claimed = client.hello().capabilities.clone();
        client.shutdown().map_err(err)?;
        Ok(claimed)
    }

    fn open(&self, spec: &SessionSpec) -> StoreResult<Box<dyn SessionStore>> {
        crashpoint::hit(ADAPTER_OPEN);
        let mut client = self.spawn()?;
        client.on_reply(replied);
        let mut args = OpenArgs {
            root: spec.root.clone(),
            session: spec.session.clone(),
            workspace: Some(spec.workspace.clone()),
            create: false,
        };
        match client.open(&args) {
            Ok(_) => {}
            Err(e) if e.refusal_kind() == Some(ErrorKind::NotFound) => {
                args.create = true;
                client.open(&args).map_err(err)?;
            }
            Err(e) => return Err(err(e)),
        }
        Ok(Box::new(AdapterStore { client }))
    }

    fn observe(&self, spec: &SessionSpec) -> StoreResult<Observation> {
        let args = OpenArgs {
            root: spec.root.clone(),
            session: spec.session.clone(),
            workspace: None,
            create: false,
        };
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            let mut client = self.spawn()?;
            let opened = match client.open(&args) {
                Ok(o) => o,
                // The killed agent's adapter is dying (SIGKILL from its
                // parent's death is asynchronous): wait for it to let go.
                Err(e) if e.refusal_kind() == Some(ErrorKind::Locked) => {
                    let _ = client.kill();
                    if Instant::now() >= deadline {
                        return Err(StoreError::other(format!(
                            "the session is still locked after {}s: {}",
                            LOCK_WAIT.as_secs(),
                            err(e)
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(e) if e.refusal_kind() == Some(ErrorKind::NotFound) => {
                    let fold = client
                        .claims(Capability::CheckpointProjection)
                        .then(|| crate::model::oracle::projection_value(&[]));
                    let _ = client.shutdown();
                    return Ok(Observation::opaque(Vec::new(), None, None, fold));
                }
                Err(e) if e.refusal_kind() == Some(ErrorKind::Damage) => {
                    let _ = client.shutdown();
                    return Ok(Observation::opaque(
                        Vec::new(),
                        None,
                        Some(err(e).message),
                        None,
                    ));
                }
                Err(e) => return Err(err(e)),
            };
            let torn = opened.repaired.map(|t| {
                format!(
                    "the adapter's open cut a torn tail of {} bytes at byte {} (line {}): {}",
                    t.len, t.offset, t.line, t.reason
                )
            });
            let records = match client.events(None) {
                Ok(r) => r,
                // Damage found past what open verified (a fused line).
                Err(e) if e.refusal_kind() == Some(ErrorKind::Damage) => {
                    let _ = client.close();
                    let _ = client.shutdown();
                    return Ok(Observation::opaque(
                        Vec::new(),
                        torn,
                        Some(err(e).message),
                        None,
                    ));
                }
                Err(e) => return Err(err(e)),
            };
            // A store that serves no projection has nothing to compare the oracle's with.
            let fold = client
                .claims(Capability::CheckpointProjection)
                .then(|| crate::model::oracle::projection_value(&records));
            let mut blobs = Vec::new();
            for (seq, reference) in crate::store::referenced_blobs(&records) {
                let problem = match client.get_blob(reference) {
                    Ok(bytes) => crate::store::blob_problem(reference, &bytes),
                    Err(e) if e.refusal_kind().is_some() => Some(format!("get_blob refused: {e}")),
                    Err(e) => return Err(err(e)),
                };
                blobs.push(crate::store::BlobRead {
                    seq,
                    reference: reference.clone(),
                    problem,
                });
            }
            client.close().map_err(err)?;
            client.shutdown().map_err(err)?;
            let mut obs = Observation::opaque(records, torn, None, fold);
            obs.blobs = blobs;
            return Ok(obs);
        }
    }
}

/// An open session in an adapter process.
#[derive(Debug)]
pub struct AdapterStore {
    client: Client,
}

impl SessionStore for AdapterStore {
    fn append(&mut self, event: &Event) -> StoreResult<Ack> {
        crashpoint::hit(ADAPTER_APPEND);
        let seq = match event {
            Event::ToolStarted { call_id } => self.client.start_tool(call_id).map_err(err)?.seq,
            other => self.client.append(other).map_err(err)?.seq,
        };
        Ok(Ack { seq })
    }

    fn recover(&mut self) -> StoreResult<Recovered> {
        crashpoint::hit("adapter.recover");
        Ok(self.client.recover().map_err(err)?.into())
    }

    fn events(&mut self, after: Option<Seq>) -> StoreResult<Vec<Record>> {
        self.client.events(after).map_err(err)
    }

    fn context(&mut self, budget_tokens: Option<u64>) -> StoreResult<String> {
        self.client.context(budget_tokens).map_err(err)
    }

    fn checkpoint(&mut self) -> StoreResult<()> {
        if !self.client.claims(Capability::CheckpointProjection) {
            return Ok(());
        }
        crashpoint::hit("adapter.checkpoint");
        self.client.checkpoint().map_err(err)?;
        Ok(())
    }

    fn projection(&mut self) -> StoreResult<Value> {
        if !self.client.claims(Capability::CheckpointProjection) {
            return Ok(Value::Null);
        }
        Ok(view_value(&self.client.projection().map_err(err)?))
    }

    fn put_blob(&mut self, bytes: &[u8]) -> StoreResult<BlobRef> {
        crashpoint::hit("adapter.put_blob");
        self.client.put_blob(bytes).map_err(err)
    }

    fn close(mut self: Box<Self>) -> StoreResult<()> {
        crashpoint::hit("adapter.close");
        self.client.close().map_err(err)?;
        self.client.shutdown().map_err(err)?;
        Ok(())
    }
}
