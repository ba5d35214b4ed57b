//! The harness's store traits over the adapter protocol: `--adapter 'CMD ARGS…'`.
//!
//! [`AdapterBackend`] opens a session by starting the adapter as a child of
//! the calling process (the agent), and observes one with a *fresh*
//! adapter process in the harness: `open` without `create`, then `events` and
//! `projection`, then `close`. It owns how an opaque store is seen; it must
//! never judge what it sees (that is the checker's job), and it must never
//! let an adapter outlive the agent that started it: the adapter gets
//! `PR_SET_PDEATHSIG(SIGKILL)`, so a SIGKILL of the agent is a SIGKILL of the
//! store (an adapter left to read EOF and exit cleanly would not be a crash).
//!
//! In the harness ([`AdapterBackend::forking`]), a fresh adapter process is
//! forked, not started, when the adapter speaks protocol version 2 as a fork
//! server (`chaos/PROTOCOL.md`, section 8; negotiated once per backend, a
//! version 1 adapter is started as before): the harness keeps one fork
//! server per adapter command line for the whole process, shared by every
//! thread (`fork_servers`), which has done its imports and never opens a
//! session, and every observation, probe and power-loss recovery gets a
//! child forked from it. An observer is never reused: a
//! forked child's memory is the server's, untouched by any session, so
//! what it serves comes from the disk (a process that had read the session
//! before could serve a cached copy and hide lost events).
//!
//! An adapter that is not a fork server (Node cannot fork) gets *warm*
//! processes instead: while a life runs, the harness thread starts the
//! adapter processes of the trial's next observers and life ahead
//! ([`WarmProcess`], [`StoreBackend::warm_up`]), so they load their code
//! off the critical path; one has been sent nothing, so it has opened no
//! session and its taker is its first user, as with a forked child.
//!
//! A life the nemesis kills at one of the agent's crash points (or does not
//! kill) gets its store processes forked (or warm) too ([`StoreBackend::life_processes`]):
//! the harness forks one per `open` the life will make, hands the agent
//! their pipe ends (`agent --adapter-fds`, [`AdapterBackend::with_inherited`])
//! and keeps its own ends open, so a store child whose agent died neither
//! reads EOF nor writes into a closed pipe: it waits, idle, for the SIGKILL
//! the harness sends its process group as soon as the agent has ended
//! ([`LifeAdapters::kill_with`]). That is
//! the crash an exec'd adapter gets from `PR_SET_PDEATHSIG` when the kill
//! lands between requests, which is where every crash point is. Lives
//! under the syscall tracer (the tracer follows the agent's descendants
//! only), lives killed by a timer (the kill may land while the store
//! serves, and a forked child would finish the request) and the power-loss
//! recorder's run are started with `exec`, as in protocol version 1.
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

use std::cell::RefCell;
use std::os::unix::process::CommandExt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use agentchaos_protocol::event::{BlobRef, Event, Record, Seq};
use agentchaos_protocol::message::{LeaseGrant, LeaseRequest, OpenArgs};
use agentchaos_protocol::{Capability, ErrorKind, ProjectionView};
use agentstore::crashpoint;
use serde_json::Value;

use super::client::{
    AdapterCommand, BadAdapterCommand, Client, ClientError, ClientOptions, ForkedProcess,
    InheritedAdapter, WarmProcess,
};
use crate::nemesis::{ADAPTER_APPEND, ADAPTER_APPEND_REPLIED, ADAPTER_OPEN};
use crate::store::{
    Ack, GroupWaiter, LeasedOpen, NotApplicable, Observation, Pending, PipelinedGroup, Recovered,
    SessionSpec, SessionStore, StoreBackend, StoreError, StoreResult,
};

/// Environment variables of the harness's in-process nemesis: an adapter
/// never inherits them (agentstore's adapter would obey them on its own).
const NEMESIS_ENV: &[&str] = &[
    "AGENTCHAOS_TRACE",
    "AGENTCHAOS_KILL_AT",
    "AGENTCHAOS_TEAR",
    "AGENTCHAOS_SYNC_LOG",
    crate::scenario::interleaving::SCHEDULE_ENV,
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

/// The harness's fork servers, by adapter command line: one each for the
/// whole process, whichever thread forks. Every campaign phase runs on
/// threads of its own (the probes, the trials, power loss, shrinking), and
/// a server per thread started the adapter's interpreter and imports again
/// for each: six times per campaign on two jobs.
fn fork_servers() -> std::sync::MutexGuard<'static, Vec<(String, Arc<Mutex<Client>>)>> {
    static SERVERS: Mutex<Vec<(String, Arc<Mutex<Client>>)>> = Mutex::new(Vec::new());
    SERVERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts a fork server from the one thread that never exits, so that it
/// lives as long as the harness: it dies (`PR_SET_PDEATHSIG`) with the
/// thread that started it, and a campaign's threads end with its phases.
/// Started from no trial, it is marked as none's: a trial's end does not
/// take it for a leftover.
fn spawn_fork_server(
    cmd: std::process::Command,
    options: ClientOptions,
) -> Result<Client, ClientError> {
    type Start = (
        std::process::Command,
        ClientOptions,
        std::sync::mpsc::Sender<Result<Client, ClientError>>,
    );
    static KEEPER: OnceLock<std::sync::mpsc::Sender<Start>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Start>();
        std::thread::Builder::new()
            .name("agentchaos-fork-servers".into())
            .spawn(move || {
                for (cmd, options, reply) in rx {
                    let _ = reply.send(Client::spawn_fork_server(cmd, options));
                }
            })
            .expect("the fork servers' thread starts");
        tx
    });
    let (reply, answer) = std::sync::mpsc::channel();
    keeper
        .send((cmd, options, reply))
        .expect("the fork servers' thread never exits");
    answer
        .recv()
        .expect("the fork servers' thread answers every start")
}

thread_local! {
    /// This thread's warm processes of adapters that are not fork servers,
    /// by adapter command line: started ahead for the trial it runs
    /// ([`StoreBackend::warm_up`]), each waiting for its `hello`, killed at
    /// the trial's end if unused. Each dies with the thread that started it.
    static WARM: RefCell<Vec<(String, Vec<WarmProcess>)>> = const { RefCell::new(Vec::new()) };
}

/// A store behind an adapter program.
#[derive(Debug, Clone)]
pub struct AdapterBackend {
    command: AdapterCommand,
    /// The command line as given (for reports and the agent's arguments).
    line: String,
    options: ClientOptions,
    /// In the harness: whether the adapter is a fork server (protocol
    /// version 2), once asked. `None`: always start adapters with `exec`.
    forking: Option<Arc<OnceLock<bool>>>,
    /// In an agent: store processes the harness forked for this life, one
    /// per `open`, first first; an `open` past them starts its own.
    inherited: Arc<Mutex<Vec<InheritedAdapter>>>,
}

/// Store processes made ahead for one agent life or probe child: forked
/// by a fork server (protocol version 2), or, for a life of an adapter
/// that is none, started warm ([`WarmProcess`]). The child gets their
/// pipe ends ([`LifeAdapters::hand_down`]); this process keeps its own
/// ends open until the child has ended, and dropping it kills every
/// one's process group and reaps it, whether or not the child used it.
#[derive(Debug)]
pub struct LifeAdapters {
    processes: Vec<LifeProcess>,
}

/// One of [`LifeAdapters`].
#[derive(Debug)]
enum LifeProcess {
    Forked(ForkedProcess),
    Warm(WarmProcess),
}

impl LifeProcess {
    fn pid(&self) -> u32 {
        match self {
            LifeProcess::Forked(p) => p.pid(),
            LifeProcess::Warm(p) => p.pid(),
        }
    }

    fn raw_ends(&self) -> [std::os::fd::RawFd; 3] {
        match self {
            LifeProcess::Forked(p) => p.raw_ends(),
            LifeProcess::Warm(p) => p.raw_ends(),
        }
    }

    /// The protocol version its first request, `hello`, says.
    fn protocol(&self) -> u64 {
        match self {
            LifeProcess::Forked(_) => agentchaos_protocol::FORK_PROTOCOL_VERSION,
            LifeProcess::Warm(_) => agentchaos_protocol::PROTOCOL_VERSION,
        }
    }
}

impl LifeAdapters {
    /// The descriptors to hand down, three per process (stdin's write end,
    /// stdout's and stderr's read ends).
    fn fds(&self) -> Vec<std::os::fd::RawFd> {
        self.processes
            .iter()
            .flat_map(LifeProcess::raw_ends)
            .collect()
    }

    /// Hands the processes down to the child `cmd` starts (an agent, a
    /// probe): their pipe ends become its descriptors 3, 4, … and
    /// `--adapter-fds` names them ([`LifeAdapters::arg`]).
    pub fn hand_down(&self, cmd: &mut std::process::Command) -> Result<(), HandDownError> {
        let fds = self.fds();
        if fds.len() > MAX_HANDED_DOWN_FDS {
            return Err(HandDownError::TooMany(fds.len()));
        }
        cmd.arg("--adapter-fds").arg(self.arg(FIRST_HANDED_DOWN_FD));
        // SAFETY: between fork and exec this only calls async-signal-safe
        // functions (fcntl, dup2) and allocates nothing.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || hand_down(&fds));
        }
        Ok(())
    }

    /// Kills every process's group as soon as `agent` has ended, as
    /// `PR_SET_PDEATHSIG` would kill an adapter the agent had started (a
    /// session the dead agent left open must not stay locked): a thread
    /// polls the agent's pidfd. `agent` must be this process's child, not
    /// yet reaped; the thread ends when the agent does, and the processes
    /// are reaped only when this is dropped, so no pid it signals is reused.
    pub fn kill_with(&self, agent: u32) -> std::io::Result<std::thread::JoinHandle<()>> {
        use nix::libc;
        use std::os::fd::AsRawFd;
        let pid = i32::try_from(agent).map_err(std::io::Error::other)?;
        let pidfd = crate::child::pidfd_open(pid)?;
        let groups: Vec<u32> = self.processes.iter().map(LifeProcess::pid).collect();
        Ok(std::thread::spawn(move || {
            loop {
                let mut poll = libc::pollfd {
                    fd: pidfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, no timeout.
                #[allow(unsafe_code)]
                let ready = unsafe { libc::poll(&mut poll, 1, -1) };
                if ready > 0
                    || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
                {
                    break;
                }
            }
            for group in groups {
                use nix::sys::signal::{kill, killpg, Signal};
                let pid = nix::unistd::Pid::from_raw(group as i32);
                if killpg(pid, Signal::SIGKILL).is_err() {
                    let _ = kill(pid, Signal::SIGKILL);
                }
            }
        }))
    }

    /// Waits until the `i`-th process has ended (the agent kills each once
    /// it has closed its session; all of them die when the agent does),
    /// at most `bound`: so that an observation while the agent pauses
    /// starts only after the process that had the session is dead.
    pub fn wait_ended(&self, i: usize, bound: Duration) {
        let Some(pid) = self.processes.get(i).map(LifeProcess::pid) else {
            return;
        };
        super::client::await_end(pid, bound);
    }

    /// The child's `--adapter-fds` value once the pipe ends are its
    /// descriptors `first`, `first + 1`, …: `PID:IN,OUT,ERR:V` per process
    /// (V: the protocol version to greet it with), `;` between them.
    pub fn arg(&self, first: i32) -> String {
        let each = self.processes.iter().enumerate().map(|(i, p)| {
            let fd = first + 3 * i as i32;
            format!("{}:{},{},{}:{}", p.pid(), fd, fd + 1, fd + 2, p.protocol())
        });
        each.collect::<Vec<_>>().join(";")
    }
}

/// The first descriptor a child gets its forked store processes' pipes on.
const FIRST_HANDED_DOWN_FD: i32 = 3;
/// At most this many descriptors are handed down (three per process).
const MAX_HANDED_DOWN_FDS: usize = 16;

/// In the child between fork and exec: `fds` become its descriptors 3, 4,
/// … (without close-on-exec), by way of copies above them so that no
/// target overwrites a source not yet copied.
fn hand_down(fds: &[i32]) -> std::io::Result<()> {
    use nix::libc;
    const SCRATCH: i32 = 64;
    let mut scratch = [0i32; MAX_HANDED_DOWN_FDS];
    for (i, &fd) in fds.iter().enumerate() {
        // SAFETY: plain descriptor calls on descriptors this process holds.
        #[allow(unsafe_code)]
        let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, SCRATCH) };
        if copy < 0 {
            return Err(std::io::Error::last_os_error());
        }
        scratch[i] = copy;
    }
    for (i, &copy) in scratch[..fds.len()].iter().enumerate() {
        // SAFETY: as above; the target is below SCRATCH, never a copy.
        #[allow(unsafe_code)]
        let done = unsafe { libc::dup2(copy, FIRST_HANDED_DOWN_FD + i as i32) };
        if done < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Store processes the harness could not hand down to a child, or a child
/// could not take over: the harness's failure (it wrote both ends).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandDownError {
    #[error("cannot hand down {0} descriptors")]
    TooMany(usize),
    /// An `--adapter-fds` value that does not name open descriptors.
    #[error("--adapter-fds {spec:?}: {part:?} {why} (PID:IN,OUT,ERR)")]
    BadFds {
        spec: String,
        part: String,
        why: String,
    },
}

/// Takes ownership of the descriptors an `--adapter-fds` value names
/// ([`LifeAdapters::arg`]), each open in this process, and marks them
/// close-on-exec.
pub fn inherited_adapters(spec: &str) -> Result<Vec<InheritedAdapter>, HandDownError> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for part in spec.split(';') {
        let bad = |why: &str| HandDownError::BadFds {
            spec: spec.to_string(),
            part: part.to_string(),
            why: why.to_string(),
        };
        let mut fields = part.split(':');
        let (Some(pid), Some(fds), Some(protocol), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(bad("is not PID:IN,OUT,ERR:VERSION"));
        };
        let pid: u32 = pid.parse().map_err(|_| bad("has no pid"))?;
        let protocol = match protocol.parse::<u64>() {
            Ok(
                v @ (agentchaos_protocol::PROTOCOL_VERSION
                | agentchaos_protocol::FORK_PROTOCOL_VERSION),
            ) => v,
            _ => return Err(bad("has a protocol version that is not 1 or 2")),
        };
        let fds: Vec<i32> = fds
            .split(',')
            .map(|f| f.parse::<i32>().ok().filter(|&f| f > 2))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("has a descriptor that is not a number above 2"))?;
        let [i, o, e] = fds[..] else {
            return Err(bad("does not name three descriptors"));
        };
        for fd in [i, o, e] {
            // SAFETY: F_SETFD on a descriptor number: it fails (-1) when
            // none is open. Close-on-exec: an adapter this process starts
            // later must not inherit the others' pipes.
            #[allow(unsafe_code)]
            let open =
                unsafe { nix::libc::fcntl(fd, nix::libc::F_SETFD, nix::libc::FD_CLOEXEC) } != -1;
            if !open || !seen.insert(fd) {
                return Err(bad(&format!(
                    "names descriptor {fd}, which is not open or named twice"
                )));
            }
        }
        // SAFETY: each descriptor is open and named once, and nothing else
        // in this process owns it (the harness handed it down for this).
        #[allow(unsafe_code)]
        let owned = |fd| unsafe { OwnedFd::from_raw_fd(fd) };
        out.push(InheritedAdapter {
            pid,
            stdin: owned(i),
            stdout: owned(o),
            stderr: owned(e),
            protocol,
        });
    }
    Ok(out)
}

impl AdapterBackend {
    /// `line` is the `--adapter` value, split like a shell would split it.
    /// Every adapter process is started with `exec` (protocol version 1):
    /// the agent's backend, whose adapters are its lives.
    pub fn new(line: &str) -> Result<AdapterBackend, BadAdapterCommand> {
        Ok(AdapterBackend {
            command: AdapterCommand::parse(line)?,
            line: line.to_string(),
            options: ClientOptions::default(),
            forking: None,
            inherited: Arc::default(),
        })
    }

    /// An agent's backend whose `open`s talk to `adapters` (forked by the
    /// harness for this life), in order, before starting any of its own.
    pub fn with_inherited(self, mut adapters: Vec<InheritedAdapter>) -> AdapterBackend {
        adapters.reverse();
        *self.inherited.lock().unwrap_or_else(|p| p.into_inner()) = adapters;
        self
    }

    /// The harness's backend: like [`AdapterBackend::new`], but an adapter
    /// that is a fork server (protocol version 2) has its processes forked
    /// from a per-thread server instead of started.
    pub fn forking(line: &str) -> Result<AdapterBackend, BadAdapterCommand> {
        let mut backend = AdapterBackend::new(line)?;
        backend.forking = Some(Arc::new(OnceLock::new()));
        Ok(backend)
    }

    /// Starts the adapter (it has answered `hello`); it dies with the
    /// thread that started it (or the next of the store processes handed
    /// down to this process). For probes that need the adapter's own
    /// refusal kinds (`crate::campaign::probe`).
    pub fn client(&self) -> StoreResult<Client> {
        match self
            .inherited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
        {
            Some(adapter) => Client::inherited(&self.line, adapter, self.options).map_err(err),
            None => self.spawn(),
        }
    }

    /// A fresh adapter process: forked when the adapter is a fork server
    /// and this is the harness's backend, else started (in the harness, a
    /// warm one, and another started to take its place); either way it
    /// dies with the thread that asked for it.
    fn spawn(&self) -> StoreResult<Client> {
        if let Some(client) = self.fork()? {
            return Ok(client);
        }
        if self.forking.is_none() {
            return Client::spawn(self.command(), self.options).map_err(err);
        }
        let [warm] = <[WarmProcess; 1]>::try_from(self.take_warm(1)?)
            .expect("take_warm(1) gives one process");
        warm.greet(self.options).map_err(err)
    }

    /// Kills and reaps this thread's warm processes of this adapter.
    fn drain_warm(&self) {
        let ready = WARM.with(|warm| {
            let mut warm = warm.borrow_mut();
            match warm.iter_mut().find(|(line, _)| *line == self.line) {
                Some((_, ready)) => std::mem::take(ready),
                None => Vec::new(),
            }
        });
        drop(ready);
    }

    /// `n` processes of this adapter, which is not a fork server: the
    /// thread's warm ones first ([`StoreBackend::warm_up`]), then started
    /// now. A warm process has loaded its code but opened no session, so
    /// whoever takes it is its first user.
    fn take_warm(&self, n: usize) -> StoreResult<Vec<WarmProcess>> {
        let mut taken = WARM.with(|warm| {
            let mut warm = warm.borrow_mut();
            match warm.iter_mut().find(|(line, _)| *line == self.line) {
                Some((_, ready)) => ready.drain(..n.min(ready.len())).collect(),
                None => Vec::new(),
            }
        });
        while taken.len() < n {
            taken.push(WarmProcess::start(self.command()).map_err(err)?);
        }
        Ok(taken)
    }

    /// Whether this is the harness's backend of an adapter that is not a
    /// fork server (asked once): the one that keeps warm processes.
    fn warms(&self) -> bool {
        match &self.forking {
            None => false,
            Some(_) => matches!(self.fork_server(), Ok(None)),
        }
    }

    /// A process forked by the harness's fork server, or `None` when the
    /// adapter is none (it speaks only protocol version 1, or cannot fork).
    fn fork(&self) -> StoreResult<Option<Client>> {
        let Some(server) = self.fork_server()? else {
            return Ok(None);
        };
        Client::fork(&server)
            .map(Some)
            .map_err(|e| self.broken(&server, e))
    }

    /// Forgets `server` after `e`: the next fork starts a new one.
    fn broken(&self, server: &Arc<Mutex<Client>>, e: ClientError) -> StoreError {
        fork_servers().retain(|(_, s)| !Arc::ptr_eq(s, server));
        err(e)
    }

    /// The harness's fork server for the adapter (started now if there is
    /// none), or `None` when the adapter is none or this backend never forks.
    fn fork_server(&self) -> StoreResult<Option<Arc<Mutex<Client>>>> {
        let Some(forking) = &self.forking else {
            return Ok(None);
        };
        if forking.get() == Some(&false) {
            return Ok(None);
        }
        // Held while a server starts: a second thread waits for it
        // instead of starting another.
        let mut servers = fork_servers();
        let found = servers.iter().find(|(line, _)| *line == self.line);
        let server = match found {
            Some((_, server)) => Arc::clone(server),
            None => match spawn_fork_server(self.command(), self.options) {
                Ok(server) if server.hello().fork => {
                    let _ = forking.set(true);
                    let server = Arc::new(Mutex::new(server));
                    servers.push((self.line.clone(), Arc::clone(&server)));
                    server
                }
                Ok(server) => {
                    let _ = forking.set(false);
                    let _ = server.shutdown();
                    return Ok(None);
                }
                // Not negotiated as a fork server (by this thread or
                // another one): any answer but a fork server's to
                // `hello` 2 (`unsupported`, as the protocol asks, or a
                // version 1 adapter that ignores the version and breaks the
                // conversation) means version 1, which then reports any
                // real problem of the adapter itself.
                Err(_) if forking.get() != Some(&true) => {
                    let _ = forking.set(false);
                    return Ok(None);
                }
                Err(e) => return Err(err(e)),
            },
        };
        Ok(Some(server))
    }

    /// The adapter's command, without the nemesis's variables, dying with
    /// the thread that starts it.
    fn command(&self) -> std::process::Command {
        let mut cmd = self.command.to_command();
        for var in NEMESIS_ENV {
            cmd.env_remove(var);
        }
        crate::child::die_with_parent(&mut cmd);
        cmd
    }
}

/// A client's failure as the store's: blamed on the harness when the
/// adapter could not be started or a request not encoded.
impl From<ClientError> for StoreError {
    fn from(e: ClientError) -> StoreError {
        err(e)
    }
}

fn err(e: ClientError) -> StoreError {
    StoreError {
        kind: e.refusal_kind(),
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
        // Asked once, before any trial (on a thread that may run none):
        // no warm processes are started for it.
        let client = match self.fork()? {
            Some(client) => client,
            None => Client::spawn(self.command(), self.options).map_err(err)?,
        };
        let claimed = client.hello().capabilities.clone();
        client.shutdown().map_err(err)?;
        Ok(claimed)
    }

    fn fork_life(&self, opens: usize) -> StoreResult<Option<LifeAdapters>> {
        let Some(server) = self.fork_server()? else {
            return Ok(None);
        };
        let mut processes = Vec::with_capacity(opens);
        for _ in 0..opens {
            let forked = ForkedProcess::fork(&server).map_err(|e| self.broken(&server, e))?;
            processes.push(LifeProcess::Forked(forked));
        }
        Ok(Some(LifeAdapters { processes }))
    }

    fn life_processes(&self, opens: usize) -> StoreResult<Option<LifeAdapters>> {
        if let Some(forked) = self.fork_life(opens)? {
            return Ok(Some(forked));
        }
        if self.forking.is_none() {
            return Ok(None);
        }
        let processes = self.take_warm(opens)?;
        Ok(Some(LifeAdapters {
            processes: processes.into_iter().map(LifeProcess::Warm).collect(),
        }))
    }

    fn warm_up(&self, n: usize) {
        if n == 0 || !self.warms() {
            return;
        }
        let mut started = Vec::with_capacity(n);
        for _ in 0..n {
            // A process that cannot start now is started (and its failure
            // reported) when it is needed.
            match WarmProcess::start(self.command()) {
                Ok(p) => started.push(p),
                Err(_) => break,
            }
        }
        WARM.with(|warm| {
            let mut warm = warm.borrow_mut();
            match warm.iter_mut().find(|(line, _)| *line == self.line) {
                Some((_, ready)) => ready.extend(started),
                None => warm.push((self.line.clone(), started)),
            }
        });
    }

    fn cool_down(&self) {
        self.drain_warm();
    }

    fn open(&self, spec: &SessionSpec) -> StoreResult<Box<dyn SessionStore>> {
        crashpoint::hit(ADAPTER_OPEN);
        let inherited = self
            .inherited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        let mut client = match inherited {
            Some(adapter) => Client::inherited(&self.line, adapter, self.options).map_err(err)?,
            None => self.spawn()?,
        };
        client.on_reply(replied);
        let mut args = OpenArgs {
            root: spec.root.clone(),
            session: spec.session.clone(),
            workspace: Some(spec.workspace.clone()),
            create: false,
            lease: None,
        };
        let opened = match client.open(&args) {
            Ok(opened) => opened,
            Err(e) if e.refusal_kind() == Some(ErrorKind::NotFound) => {
                args.create = true;
                client.open(&args).map_err(err)?
            }
            Err(e) => return Err(err(e)),
        };
        Ok(Box::new(AdapterStore::new(client, opened.next_seq)))
    }

    fn open_leased(&self, spec: &SessionSpec, lease: &LeaseRequest) -> StoreResult<LeasedOpen> {
        let mut client = self.spawn()?;
        if !client.claims(Capability::Lease) {
            let _ = client.shutdown();
            return Err(StoreError::other(format!(
                "{} does not claim `lease`: it cannot serve many workers",
                self.line
            )));
        }
        let opened = client
            .open(&OpenArgs {
                root: spec.root.clone(),
                session: spec.session.clone(),
                workspace: None,
                create: false,
                lease: Some(lease.clone()),
            })
            .map_err(err)?;
        let (Some(grant), Some(recovery)) = (opened.lease, opened.recovery) else {
            let _ = client.kill();
            return Err(StoreError::other(format!(
                "{}: open with a lease replied without its grant and recovery (chaos/PROTOCOL.md, section 9)",
                self.line
            )));
        };
        Ok(LeasedOpen {
            store: Box::new(AdapterStore::new(client, opened.next_seq)),
            grant,
            recovery,
        })
    }

    fn observe(&self, spec: &SessionSpec) -> StoreResult<Observation> {
        crate::timing::as_role(crate::timing::Role::Observer, || self.observe_fresh(spec))
    }
}

impl AdapterBackend {
    /// [`StoreBackend::observe`]: through a fresh adapter process.
    fn observe_fresh(&self, spec: &SessionSpec) -> StoreResult<Observation> {
        let args = OpenArgs {
            root: spec.root.clone(),
            session: spec.session.clone(),
            workspace: None,
            create: false,
            lease: None,
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
            // Killed, not closed: an observation must change nothing on
            // disk, and closing can write (SQLite checkpoints its WAL when
            // its last connection closes). A reader's crash harms no
            // correct store.
            client.kill().map_err(|e| {
                StoreError::other(format!("killing the observing adapter failed: {e}"))
            })?;
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
    /// The seq the adapter's next event gets, by its own replies (`open`'s
    /// `next_seq`, every ack, `recover`'s count). `None` after a refusal,
    /// which may have left its event in the log: the next group is then
    /// appended one event at a time, until an ack says it again.
    next_seq: Option<Seq>,
    /// The parallel group written and not all answered yet, pipelined.
    group: Vec<GroupRequest>,
}

/// A request of the pipelined group, and where it stands.
#[derive(Debug)]
enum GroupRequest {
    Unsent(agentchaos_protocol::Request),
    Sent(u64),
    Answered(StoreResult<Seq>),
}

impl AdapterStore {
    fn new(client: Client, next_seq: Seq) -> AdapterStore {
        AdapterStore {
            client,
            next_seq: Some(next_seq),
            group: Vec::new(),
        }
    }

    /// Notes the adapter's answer to an append: an ack gives the next seq.
    fn answered(&mut self, result: Result<Seq, ClientError>) -> StoreResult<Ack> {
        match result {
            Ok(seq) => {
                self.next_seq = Some(seq + 1);
                Ok(Ack { seq })
            }
            Err(e) => {
                self.next_seq = None;
                Err(err(e))
            }
        }
    }
}

impl PipelinedGroup for AdapterStore {
    /// Sends the group's unsent requests up to the `k`-th as one batch
    /// (so the schedule's order of waiters decides the batches), then reads
    /// replies until the `k`-th came. Once the whole group is answered, the
    /// next seq is past it, or unknown if any request was refused.
    fn reply(&mut self, k: usize) -> StoreResult<Ack> {
        if let GroupRequest::Unsent(_) = self.group[k] {
            let first = self
                .group
                .iter()
                .position(|r| matches!(r, GroupRequest::Unsent(_)))
                .expect("the k-th is unsent");
            let requests = self.group[first..=k]
                .iter_mut()
                .map(|r| match std::mem::replace(r, GroupRequest::Sent(0)) {
                    GroupRequest::Unsent(request) => request,
                    _ => unreachable!("requests are sent in order"),
                })
                .collect();
            let ids = self.client.send_batch(requests).map_err(err)?;
            for (r, id) in self.group[first..=k].iter_mut().zip(ids) {
                *r = GroupRequest::Sent(id);
            }
        }
        let GroupRequest::Sent(id) = self.group[k] else {
            panic!("the reply to the {k}-th request of the group was taken twice");
        };
        let result = self.client.take_seq(id).map_err(err);
        self.group[k] = GroupRequest::Answered(result.clone());
        let answered = |r: &GroupRequest| matches!(r, GroupRequest::Answered(_));
        if self.group.iter().all(answered) {
            let mut next = self.next_seq;
            for r in std::mem::take(&mut self.group) {
                next = match (next, r) {
                    (Some(n), GroupRequest::Answered(Ok(seq))) => Some(n.max(seq + 1)),
                    _ => None,
                };
            }
            self.next_seq = next;
        }
        result.map(|seq| Ack { seq })
    }
}

impl SessionStore for AdapterStore {
    fn append(&mut self, event: &Event) -> StoreResult<Ack> {
        crashpoint::hit(ADAPTER_APPEND);
        let seq = match event {
            Event::ToolStarted { call_id } => self.client.start_tool(call_id).map(|a| a.seq),
            other => self.client.append(other).map(|a| a.seq),
        };
        self.answered(seq)
    }

    /// Pipelined when the adapter takes batches and the next seq is known:
    /// the request waits, unsent, for the group's waiters.
    fn write(&mut self, event: &Event) -> StoreResult<Pending> {
        let Some(next_seq) = self.next_seq.filter(|_| self.client.pipelines()) else {
            let ack = self.append(event)?;
            return Ok(Pending::acknowledged_at(ack.seq));
        };
        crashpoint::hit(ADAPTER_APPEND);
        let request = match event {
            Event::ToolStarted { call_id } => agentchaos_protocol::Request::StartTool {
                call_id: call_id.clone(),
            },
            other => agentchaos_protocol::Request::Append {
                event: other.clone(),
            },
        };
        let k = self.group.len();
        self.group.push(GroupRequest::Unsent(request));
        Ok(Pending::pipelined(next_seq + k as Seq, k))
    }

    fn group_waiter(&mut self) -> Option<GroupWaiter<'_>> {
        Some(GroupWaiter::pipelined(self))
    }

    fn recover(&mut self) -> StoreResult<Recovered> {
        crashpoint::hit("adapter.recover");
        let recovered: Recovered = self.client.recover().map_err(err)?.into();
        self.next_seq = self.next_seq.map(|n| n + recovered.appended);
        Ok(recovered)
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

    fn renew_lease(&mut self) -> StoreResult<LeaseGrant> {
        self.client.renew_lease().map_err(err)
    }
}
