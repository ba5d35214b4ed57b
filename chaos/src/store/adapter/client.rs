//! Talking to an adapter process: spawn it, send one request, read and
//! validate one reply (or, to an adapter that pipelines, a batch of
//! requests and their replies in any order: `client/pipeline.rs`), never hang and
//! never panic on what it sends.
//!
//! [`Client`] owns the child process, reads its stdout on the calling
//! thread (a reply wakes the caller directly), and keeps a reader thread
//! for stderr (a bounded tail kept for diagnostics). Every
//! reply is checked: it must be one JSON object on one line, carry the id
//! of the request just sent, hold exactly one of `ok` and `error`, and fit
//! the reply shape of its operation. Anything else, an EOF or a silence
//! longer than the timeout is a [`ProtocolError`] naming the offending line
//! and its number on the adapter's stdout. After a protocol error the client
//! is spent: the adapter is killed and every later call returns that error.
//!
//! The adapter leads its own process group, and every kill is a SIGKILL of
//! that whole group: a hung adapter's children (a shell script's `sleep`,
//! a store's helper processes) die with it instead of being orphaned.
//!
//! An adapter is either spawned ([`Client::spawn`], protocol version 1) or,
//! in protocol version 2, forked by a fork server ([`Client::spawn_fork_server`],
//! then [`Client::fork`]): the server's stdin is a Unix socket, and each
//! `fork` request carries the child's three pipe ends (`SCM_RIGHTS`). A
//! forked child leads its own process group too; the server keeps it as a
//! zombie until the client asks it to `reap`, so its pid cannot name
//! another process while the client may still signal it. The client never
//! lets a forked child outlive it: dropping it kills the child's group and
//! reaps it. [`process_counts`] says how many adapters this process
//! spawned and how many it had forked (so a test can see which path ran).

mod pipeline;
mod reply;

use reply::parse_reply;

use std::fmt;
use std::fs::File;
use std::io::{IoSlice, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentchaos_protocol::event::{event_id, BlobRef, Event, Record, Seq};
use agentchaos_protocol::message::{
    from_hex, to_hex, Ack, BlobBytes, CheckpointReply, Closed, ContextReply, EventsReply, Forked,
    Hello, IntentAck, LeaseGrant, OpenArgs, Opened, Reaped, RecoveryState, RequestLine,
};
use agentchaos_protocol::{
    Capability, ErrorKind, ProjectionView, Refusal, Request, FORK_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
};
use serde::de::DeserializeOwned;

/// Longest reply line accepted, newline included.
pub const MAX_REPLY_BYTES: usize = 64 * 1024 * 1024;
/// How much of the adapter's stderr is kept.
const STDERR_TAIL_BYTES: usize = 64 * 1024;
/// How much of an offending line an error shows.
const SHOWN_LINE_BYTES: usize = 300;
/// How long to wait for the adapter to exit (and its stderr to end) after its stdout closed.
const EXIT_GRACE: Duration = Duration::from_millis(1000);

/// Adapter processes this process spawned, and had forked by a fork server.
static SPAWNED: AtomicU64 = AtomicU64::new(0);
static FORKED: AtomicU64 = AtomicU64::new(0);

/// How many adapter processes this process has started so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessCounts {
    /// Started with `exec` (an interpreter start-up each, for a script).
    pub spawned: u64,
    /// Forked by a fork server (protocol version 2).
    pub forked: u64,
}

/// The adapter processes this process has started so far.
pub fn process_counts() -> ProcessCounts {
    ProcessCounts {
        spawned: SPAWNED.load(Ordering::Relaxed),
        forked: FORKED.load(Ordering::Relaxed),
    }
}

/// An adapter command line, split like a POSIX shell would split it but run
/// without a shell, so the process the harness kills is the adapter itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterCommand {
    pub program: String,
    pub args: Vec<String>,
}

/// Whether `program` names a file, directly (with a `/`) or on `PATH`, as
/// `Command` would find it: a missing adapter is bad input before any work.
fn program_exists(program: &str) -> bool {
    if program.contains('/') {
        return std::path::Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// An `--adapter` command line that names no program to run: bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadAdapterCommand {
    #[error("cannot split adapter command {0:?}: unbalanced quotes or a trailing backslash")]
    Unsplittable(String),
    #[error("adapter command {0:?} is empty")]
    Empty(String),
    #[error("adapter program {0:?} not found (no such file, and not on PATH)")]
    NotFound(String),
}

impl AdapterCommand {
    /// Splits `line` (`--adapter 'CMD ARGS…'`): words, single and double quotes, backslashes.
    pub fn parse(line: &str) -> Result<AdapterCommand, BadAdapterCommand> {
        let words =
            shlex::split(line).ok_or_else(|| BadAdapterCommand::Unsplittable(line.to_string()))?;
        let mut words = words.into_iter();
        let program = words
            .next()
            .ok_or_else(|| BadAdapterCommand::Empty(line.to_string()))?;
        if !program_exists(&program) {
            return Err(BadAdapterCommand::NotFound(program));
        }
        Ok(AdapterCommand {
            program,
            args: words.collect(),
        })
    }

    /// A [`Command`] for it, to which the caller may add environment variables.
    pub fn to_command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        cmd
    }
}

impl fmt::Display for AdapterCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words = std::iter::once(&self.program).chain(&self.args);
        let quoted: Vec<String> = words.map(|w| crate::shell::word(w)).collect();
        f.write_str(&quoted.join(" "))
    }
}

/// How to talk to the adapter.
#[derive(Debug, Clone, Copy)]
pub struct ClientOptions {
    /// How long one request may wait for its reply.
    pub timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: Duration::from_secs(30),
        }
    }
}

/// The request a protocol error happened on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRef {
    pub id: u64,
    pub op: &'static str,
}

/// A line the adapter wrote to stdout, with its 1-based number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdoutLine {
    pub number: u64,
    pub text: String,
}

/// What was wrong with the adapter's side of the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The line is not JSON.
    NotJson { line: StdoutLine, reason: String },
    /// The reply has no `id`.
    MissingId { line: StdoutLine },
    /// The reply's id is not the one just sent, nor an earlier one.
    WrongId { line: StdoutLine, found: String },
    /// The reply's id is that of an earlier request.
    OutOfOrder { line: StdoutLine, found: u64 },
    /// JSON with the right id, but not the reply this operation expects.
    Shape { line: StdoutLine, reason: String },
    /// The last line ended at EOF without a newline.
    Incomplete { line: StdoutLine },
    /// A line longer than [`MAX_REPLY_BYTES`].
    TooLong { number: u64 },
    /// Stdout closed before the reply; how the adapter ended.
    Eof { lines: u64, exit: String },
    /// No reply within the timeout (the adapter was killed).
    Timeout { after: Duration, lines: u64 },
    /// The request could not be written to the adapter's stdin.
    Send { reason: String },
}

/// A broken conversation: one line naming the adapter, the request, the
/// offending stdout line and its number, and the end of the adapter's stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError {
    pub adapter: String,
    pub request: RequestRef,
    pub problem: Problem,
    /// The last non-empty line of the adapter's stderr, if any.
    pub stderr: Option<String>,
}

impl std::error::Error for ProtocolError {}

/// A line as shown in an error: control characters escaped, cut at a bound.
fn shown(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if out.len() >= SHOWN_LINE_BYTES {
            out.push_str(&format!("… ({} bytes)", text.len()));
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let RequestRef { id, op } = &self.request;
        write!(f, "adapter protocol error ({}): ", self.adapter)?;
        let at = |l: &StdoutLine| format!("stdout line {} (reply to {op}, request {id})", l.number);
        match &self.problem {
            Problem::NotJson { line, reason } => write!(
                f,
                "{} is not JSON ({reason}): {}",
                at(line),
                shown(&line.text)
            ),
            Problem::MissingId { line } => {
                write!(f, "{} has no \"id\": {}", at(line), shown(&line.text))
            }
            Problem::WrongId { line, found } => write!(
                f,
                "{} has id {found}, expected {id}: {}",
                at(line),
                shown(&line.text)
            ),
            Problem::OutOfOrder { line, found } => write!(
                f,
                "{} has id {found}, the id of an earlier request (out of order): {}",
                at(line),
                shown(&line.text)
            ),
            Problem::Shape { line, reason } => write!(
                f,
                "{} does not fit the {op} reply ({reason}): {}",
                at(line),
                shown(&line.text)
            ),
            Problem::Incomplete { line } => write!(
                f,
                "{} ends at EOF without a newline: {}",
                at(line),
                shown(&line.text)
            ),
            Problem::TooLong { number } => write!(
                f,
                "stdout line {number} (reply to {op}, request {id}) is longer than {MAX_REPLY_BYTES} bytes"
            ),
            Problem::Eof { lines, exit } => write!(
                f,
                "stdout closed after {lines} line(s) without a reply to {op} (request {id}); {exit}"
            ),
            Problem::Timeout { after, lines } => write!(
                f,
                "no reply to {op} (request {id}) within {} (stdout has {lines} line(s)); the adapter was killed",
                humantime::format_duration(*after)
            ),
            Problem::Send { reason } => write!(
                f,
                "cannot send {op} (request {id}) to the adapter's stdin: {reason}"
            ),
        }?;
        if let Some(last) = &self.stderr {
            write!(f, "; adapter stderr ends: {}", shown(last))?;
        }
        Ok(())
    }
}

/// Everything a request can end in besides its reply.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The adapter could not be started.
    #[error("cannot start adapter {command}: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The adapter broke the protocol; the client is spent.
    #[error(transparent)]
    Protocol(Box<ProtocolError>),
    /// The adapter refused the request with a well-formed error reply.
    #[error("adapter refused {op} ({kind}): {message}")]
    Refused {
        op: &'static str,
        kind: ErrorKind,
        message: String,
    },
    /// The request cannot be encoded (a path that is not UTF-8).
    #[error("cannot encode {op} request: {reason}")]
    Encode { op: &'static str, reason: String },
}

impl From<ProtocolError> for ClientError {
    fn from(e: ProtocolError) -> Self {
        ClientError::Protocol(Box::new(e))
    }
}

impl ClientError {
    /// The protocol error, if this is one.
    pub fn protocol(&self) -> Option<&ProtocolError> {
        match self {
            ClientError::Protocol(e) => Some(e),
            _ => None,
        }
    }

    /// The kind of a refusal, if this is one.
    pub fn refusal_kind(&self) -> Option<ErrorKind> {
        match self {
            ClientError::Refused { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// What reading the adapter's stdout gave.
enum Incoming {
    Line(StdoutLine),
    Incomplete(StdoutLine),
    TooLong(u64),
    Eof(u64),
    ReadError(String),
}

/// The end of the adapter's stderr, shared with its reader thread.
#[derive(Debug, Default)]
struct StderrTail {
    bytes: Vec<u8>,
    closed: bool,
}

/// The adapter's stdout, read on the calling thread, line by line: a reply
/// costs the caller one wake-up (the pipe's), not a hand-over from a
/// reader thread as well. After an EOF, a line too long or a read error,
/// every later read is an EOF.
#[derive(Debug)]
struct Replies {
    stdout: File,
    buf: Vec<u8>,
    /// What one read fills, then copied to `buf` (no zero-fill of a
    /// chunk per read).
    chunk: Box<[u8]>,
    /// Where the unread bytes of `buf` start.
    at: usize,
    /// Lines read so far.
    number: u64,
    ended: bool,
}

/// Bytes asked for per read of the adapter's stdout.
const READ_CHUNK: usize = 64 * 1024;

impl Replies {
    fn new(stdout: File) -> Replies {
        Replies {
            stdout,
            buf: Vec::new(),
            chunk: vec![0; READ_CHUNK].into_boxed_slice(),
            at: 0,
            number: 0,
            ended: false,
        }
    }

    /// The next line, or what stopped it; `None` when nothing came within `timeout`.
    fn next(&mut self, timeout: Duration) -> Option<Incoming> {
        let deadline = Instant::now() + timeout;
        let mut searched = self.at;
        loop {
            if self.ended {
                return Some(Incoming::Eof(self.number));
            }
            if let Some(nl) = self.buf[searched..].iter().position(|&b| b == b'\n') {
                let end = searched + nl;
                self.number += 1;
                let text = String::from_utf8_lossy(&self.buf[self.at..end]).into_owned();
                self.at = end + 1;
                if self.at == self.buf.len() {
                    self.buf.clear();
                    self.at = 0;
                }
                return Some(Incoming::Line(StdoutLine {
                    number: self.number,
                    text,
                }));
            }
            searched = self.buf.len();
            if self.buf.len() - self.at >= MAX_REPLY_BYTES {
                self.ended = true;
                return Some(Incoming::TooLong(self.number + 1));
            }
            match wait_readable(
                &self.stdout,
                deadline.saturating_duration_since(Instant::now()),
            ) {
                Ok(false) => return None,
                Ok(true) => {}
                Err(e) => {
                    self.ended = true;
                    return Some(Incoming::ReadError(e.to_string()));
                }
            }
            if self.at > 0 {
                self.buf.drain(..self.at);
                searched -= self.at;
                self.at = 0;
            }
            let len = self.buf.len();
            let room = READ_CHUNK.min(MAX_REPLY_BYTES - len);
            let read = loop {
                match (&self.stdout).read(&mut self.chunk[..room]) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    r => break r,
                }
            };
            match read {
                Ok(0) => {
                    self.ended = true;
                    if len == 0 {
                        return Some(Incoming::Eof(self.number));
                    }
                    self.number += 1;
                    let text = String::from_utf8_lossy(&self.buf).into_owned();
                    return Some(Incoming::Incomplete(StdoutLine {
                        number: self.number,
                        text,
                    }));
                }
                Ok(n) => self.buf.extend_from_slice(&self.chunk[..n]),
                Err(e) => {
                    self.ended = true;
                    return Some(Incoming::ReadError(e.to_string()));
                }
            }
        }
    }
}

/// Whether `file` has something to read (data or its end) within `timeout`.
fn wait_readable(file: &File, timeout: Duration) -> std::io::Result<bool> {
    use nix::libc;
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // Whole milliseconds, rounded up: never 0 before the deadline.
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        let mut fd = libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for a descriptor `file` holds open.
        #[allow(unsafe_code)]
        let ready = unsafe { libc::poll(&mut fd, 1, ms) };
        match ready {
            0 if Instant::now() >= deadline => return Ok(false),
            0 => continue,
            n if n > 0 => return Ok(true),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

fn read_stderr(mut stderr: impl Read, tail: Arc<Mutex<StderrTail>>) {
    let mut chunk = [0u8; 8192];
    loop {
        let n = stderr.read(&mut chunk).unwrap_or(0);
        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
        if n == 0 {
            t.closed = true;
            return;
        }
        t.bytes.extend_from_slice(&chunk[..n]);
        let excess = t.bytes.len().saturating_sub(STDERR_TAIL_BYTES);
        t.bytes.drain(..excess);
    }
}

/// The adapter process a client talks to.
#[derive(Debug)]
enum Proc {
    /// Started by this process.
    Spawned(Child),
    /// Forked by `server`, which keeps it as a zombie until it is reaped.
    Forked {
        pid: u32,
        server: Arc<Mutex<Client>>,
        status: Option<ExitStatus>,
    },
    /// Forked for another process (the harness), which reaps it after this
    /// one has ended: its pid is safe to signal, its status not ours to
    /// know (one that ended reads as exit status 0).
    Inherited { pid: u32 },
}

impl Proc {
    fn id(&self) -> u32 {
        match self {
            Proc::Spawned(child) => child.id(),
            Proc::Forked { pid, .. } | Proc::Inherited { pid } => *pid,
        }
    }

    /// How it ended, if it has (a forked child: once it is a zombie, reaped now).
    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        match self {
            Proc::Spawned(child) => child.try_wait(),
            Proc::Forked {
                status: Some(s), ..
            } => Ok(Some(*s)),
            Proc::Forked { pid, .. } => {
                if ended(*pid) {
                    self.wait().map(Some)
                } else {
                    Ok(None)
                }
            }
            Proc::Inherited { pid } => Ok(ended(*pid).then(|| ExitStatus::from_raw(0))),
        }
    }

    /// Waits for it to end (a forked child: the server reaps it).
    fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            Proc::Spawned(child) => child.wait(),
            Proc::Inherited { pid } => {
                await_end(*pid, EXIT_GRACE);
                Ok(ExitStatus::from_raw(0))
            }
            Proc::Forked {
                status: Some(s), ..
            } => Ok(*s),
            Proc::Forked {
                pid,
                server,
                status,
            } => {
                let mut server = server.lock().unwrap_or_else(|p| p.into_inner());
                let reaped: Reaped = server
                    .call(Request::Reap { pid: *pid })
                    .map_err(std::io::Error::other)?;
                let s = ExitStatus::from_raw(reaped.status);
                *status = Some(s);
                Ok(s)
            }
        }
    }
}

/// A fork server's label and timeout, for the processes it forks.
fn server_label(server: &Arc<Mutex<Client>>) -> (String, ClientOptions) {
    let s = server.lock().unwrap_or_else(|p| p.into_inner());
    let options = ClientOptions { timeout: s.timeout };
    (format!("{} (forked)", s.label), options)
}

/// An adapter process a fork server forked, with this process's ends of
/// its stdin, stdout and stderr pipes. Until it is dropped, this process
/// holds the pipes open (so the child never reads EOF nor writes into a
/// closed pipe, whoever else talks to it), and dropping it kills the
/// child's process group and has the server reap it.
#[derive(Debug)]
pub struct ForkedProcess {
    pid: u32,
    server: Arc<Mutex<Client>>,
    /// stdin's write end, stdout's and stderr's read ends.
    ends: Option<(OwnedFd, OwnedFd, OwnedFd)>,
}

impl ForkedProcess {
    /// Has `server` fork a child on three new pipes.
    pub fn fork(server: &Arc<Mutex<Client>>) -> Result<ForkedProcess, ClientError> {
        let pipes = || -> std::io::Result<[(OwnedFd, OwnedFd); 3]> {
            let flags = nix::fcntl::OFlag::O_CLOEXEC;
            Ok([
                nix::unistd::pipe2(flags)?,
                nix::unistd::pipe2(flags)?,
                nix::unistd::pipe2(flags)?,
            ])
        };
        let [(in_r, in_w), (out_r, out_w), (err_r, err_w)] =
            pipes().map_err(|source| ClientError::Spawn {
                command: server_label(server).0,
                source,
            })?;
        let forked: Forked = {
            let mut s = server.lock().unwrap_or_else(|p| p.into_inner());
            let fds = [in_r.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
            s.call_with(Request::Fork, &fds)?
        };
        // The child has its own copies of these now.
        drop((in_r, out_w, err_w));
        FORKED.fetch_add(1, Ordering::Relaxed);
        Ok(ForkedProcess {
            pid: forked.pid,
            server: Arc::clone(server),
            ends: Some((in_w, out_r, err_r)),
        })
    }

    /// Its pid (its process group's id too).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Raw descriptors of this process's ends: stdin's write end, stdout's
    /// and stderr's read ends (to hand down to another process).
    pub fn raw_ends(&self) -> [RawFd; 3] {
        match &self.ends {
            Some((i, o, e)) => [i.as_raw_fd(), o.as_raw_fd(), e.as_raw_fd()],
            None => [-1; 3],
        }
    }
}

impl Drop for ForkedProcess {
    fn drop(&mut self) {
        if self.pid == 0 {
            return;
        }
        let mut child = Proc::Forked {
            pid: self.pid,
            server: Arc::clone(&self.server),
            status: None,
        };
        let _ = kill_group(&mut child);
        let _ = child.wait();
    }
}

/// An adapter process handed down to this one: its pid, this process's
/// ends of its pipes, and the protocol version to greet it with
/// (`Client::inherited`): 2 for a forked child, 1 for a warm process.
#[derive(Debug)]
pub struct InheritedAdapter {
    pub pid: u32,
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub protocol: u64,
}

/// An adapter process started ahead of its use, for an adapter that is
/// not a fork server (protocol version 1): it loads its code while the
/// harness does other work, and nothing has been sent to it yet, so it
/// has opened no session. Its first request is `hello`, from whoever
/// takes it ([`WarmProcess::greet`], or a life it is handed down to).
/// Dropping it kills its process group and reaps it.
#[derive(Debug)]
pub struct WarmProcess {
    label: String,
    child: Option<Child>,
    /// stdin's write end, stdout's and stderr's read ends.
    ends: Option<(OwnedFd, OwnedFd, OwnedFd)>,
}

impl WarmProcess {
    /// Starts `cmd` in its own process group, its stdin, stdout and stderr piped.
    pub fn start(cmd: Command) -> Result<WarmProcess, ClientError> {
        let label = label_of(&cmd);
        let mut child = start_process(cmd, &label, Stdio::piped())?;
        let stdin = OwnedFd::from(child.stdin.take().expect("stdin is piped"));
        let stdout = OwnedFd::from(child.stdout.take().expect("stdout is piped"));
        let stderr = OwnedFd::from(child.stderr.take().expect("stderr is piped"));
        Ok(WarmProcess {
            label,
            child: Some(child),
            ends: Some((stdin, stdout, stderr)),
        })
    }

    /// Its pid (its process group's id too).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Raw descriptors of this process's ends: stdin's write end, stdout's
    /// and stderr's read ends (to hand down to another process).
    pub fn raw_ends(&self) -> [RawFd; 3] {
        match &self.ends {
            Some((i, o, e)) => [i.as_raw_fd(), o.as_raw_fd(), e.as_raw_fd()],
            None => [-1; 3],
        }
    }

    /// A client of it, greeted with protocol version 1; the client kills
    /// and reaps it from now on.
    pub fn greet(mut self, options: ClientOptions) -> Result<Client, ClientError> {
        let child = self.child.take().expect("a warm process has its child");
        let (stdin, stdout, stderr) = self.ends.take().expect("a warm process has its ends");
        let label = std::mem::take(&mut self.label);
        let child = Proc::Spawned(child);
        let mut client = Client::over(label, child, File::from(stdin), stdout, stderr, options);
        client.greet(PROTOCOL_VERSION)?;
        Ok(client)
    }
}

impl Drop for WarmProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            let mut child = Proc::Spawned(child);
            let _ = kill_group(&mut child);
            let _ = child.wait();
        }
    }
}

/// Starts `cmd` as an adapter: its own process group, dying with the
/// calling thread as `cmd` says, stdout and stderr piped; counted and timed.
fn start_process(mut cmd: Command, label: &str, stdin: Stdio) -> Result<Child, ClientError> {
    let started = Instant::now();
    let spawned = crate::child::spawn(
        cmd.process_group(0)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    crate::timing::record(
        crate::timing::Part::Start(crate::timing::role()),
        started.elapsed(),
    );
    let child = spawned.map_err(|source| ClientError::Spawn {
        command: label.to_string(),
        source,
    })?;
    SPAWNED.fetch_add(1, Ordering::Relaxed);
    Ok(child)
}

/// Whether process `pid` has ended (a zombie, or gone).
pub(crate) fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => true,
    }
}

/// Waits at most `bound` for process `pid` to end (see [`ended`]); says
/// whether it has. `pid` must not be reaped meanwhile (the caller's child
/// or, for an inherited process, the harness's, reaped after the life), so
/// it names the same process throughout. Woken by the process's pidfd the
/// moment it exits, not by polling; where pidfds are missing (Linux < 5.3),
/// polls `/proc` every millisecond.
pub(crate) fn await_end(pid: u32, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    let Ok(raw) = i32::try_from(pid) else {
        return ended(pid);
    };
    let Ok(fd) = crate::child::pidfd_open(raw) else {
        while !ended(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        return ended(pid);
    };
    let pidfd = File::from(fd);
    // A pidfd reads as readable once its process has exited.
    wait_readable(&pidfd, bound).unwrap_or(false) || ended(pid)
}

/// A running adapter and the conversation with it.
#[derive(Debug)]
pub struct Client {
    label: String,
    child: Proc,
    stdin: Option<File>,
    replies: Replies,
    stderr: Arc<Mutex<StderrTail>>,
    timeout: Duration,
    next_id: u64,
    /// Stdout lines read so far.
    lines: u64,
    /// The last reply line, kept for errors found after it parsed, and
    /// the id of its request.
    last_line: Option<StdoutLine>,
    last_id: u64,
    failed: Option<ProtocolError>,
    hello: Hello,
    /// Called with the operation's name once a request is on the adapter's stdin.
    on_reply: Option<fn(&'static str)>,
    /// The requests of the pipelined batches sent and not taken yet, by
    /// id: their operation and, once it came, their reply line.
    pipelined: std::collections::BTreeMap<u64, (&'static str, Option<StdoutLine>)>,
    /// The seqs acknowledged to pipelined requests since the last lone
    /// request, by request id: each new one must keep request order.
    pipelined_seqs: Vec<(u64, Seq)>,
}

fn label_of(cmd: &Command) -> String {
    let words = AdapterCommand {
        program: cmd.get_program().to_string_lossy().into_owned(),
        args: cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
    };
    shown(&words.to_string())
}

impl Client {
    /// Starts the adapter with piped stdin, stdout and stderr, and sends
    /// `hello`. The adapter must speak [`PROTOCOL_VERSION`].
    pub fn spawn(cmd: Command, options: ClientOptions) -> Result<Client, ClientError> {
        let mut client = Client::start(cmd, options, None)?;
        client.greet(PROTOCOL_VERSION)?;
        Ok(client)
    }

    /// Starts the adapter as a fork server: its stdin is a Unix socket, and
    /// it is greeted with protocol version 2. An adapter that speaks only
    /// version 1 refuses the `hello` (`unsupported`: [`ClientError::refusal_kind`]);
    /// one that speaks version 2 but cannot fork says `fork: false` in its
    /// [`Client::hello`].
    pub fn spawn_fork_server(cmd: Command, options: ClientOptions) -> Result<Client, ClientError> {
        let label = label_of(&cmd);
        let (ours, theirs) = UnixStream::pair().map_err(|source| ClientError::Spawn {
            command: label,
            source,
        })?;
        let mut client = Client::start(cmd, options, Some((ours, theirs)))?;
        client.greet(FORK_PROTOCOL_VERSION)?;
        Ok(client)
    }

    /// Has the fork server `server` fork a fresh adapter process and greets
    /// it (protocol version 2). The child starts with the server's memory
    /// as it was before any session was opened, without an interpreter
    /// start-up; it is killed and reaped when the returned client ends.
    pub fn fork(server: &Arc<Mutex<Client>>) -> Result<Client, ClientError> {
        let mut forked = ForkedProcess::fork(server)?;
        let (label, options) = server_label(&forked.server);
        let child = Proc::Forked {
            pid: forked.pid,
            server: Arc::clone(&forked.server),
            status: None,
        };
        // The client kills and reaps it from now on.
        forked.pid = 0;
        let (stdin, stdout, stderr) = forked.ends.take().expect("a fresh fork has its ends");
        let mut client = Client::over(label, child, File::from(stdin), stdout, stderr, options);
        client.greet(FORK_PROTOCOL_VERSION)?;
        Ok(client)
    }

    /// A client of an adapter process this process did not start: one
    /// the harness had forked (or started warm) for this agent's life, on
    /// the descriptors it passed down. Its group is this client's to kill, never to reap (the
    /// harness reaps it once the life has ended, so the pid stays its until then).
    pub fn inherited(
        label: &str,
        adapter: InheritedAdapter,
        options: ClientOptions,
    ) -> Result<Client, ClientError> {
        let how = match adapter.protocol {
            FORK_PROTOCOL_VERSION => "forked",
            _ => "started",
        };
        let label = format!("{label} ({how} for this life)");
        let child = Proc::Inherited { pid: adapter.pid };
        let stdin = File::from(adapter.stdin);
        let mut client = Client::over(label, child, stdin, adapter.stdout, adapter.stderr, options);
        client.greet(adapter.protocol)?;
        Ok(client)
    }

    /// Spawns `cmd` in its own process group with piped stdout and stderr,
    /// and stdin piped or, with `socket`, the second of a socket pair.
    fn start(
        cmd: Command,
        options: ClientOptions,
        socket: Option<(UnixStream, UnixStream)>,
    ) -> Result<Client, ClientError> {
        let label = label_of(&cmd);
        let stdin = match &socket {
            Some((_, theirs)) => {
                let fd = theirs.try_clone().map_err(|source| ClientError::Spawn {
                    command: label.clone(),
                    source,
                })?;
                Stdio::from(OwnedFd::from(fd))
            }
            None => Stdio::piped(),
        };
        let mut child = start_process(cmd, &label, stdin)?;
        let stdin = match socket {
            Some((ours, _theirs)) => File::from(OwnedFd::from(ours)),
            None => File::from(OwnedFd::from(child.stdin.take().expect("stdin is piped"))),
        };
        let stdout = OwnedFd::from(child.stdout.take().expect("stdout is piped"));
        let stderr = OwnedFd::from(child.stderr.take().expect("stderr is piped"));
        Ok(Client::over(
            label,
            Proc::Spawned(child),
            stdin,
            stdout,
            stderr,
            options,
        ))
    }

    /// A client over a started process's stdin, stdout and stderr (reader
    /// threads for the last two); not greeted yet.
    fn over(
        label: String,
        child: Proc,
        stdin: File,
        stdout: OwnedFd,
        stderr: OwnedFd,
        options: ClientOptions,
    ) -> Client {
        let replies = Replies::new(File::from(stdout));
        let tail = Arc::new(Mutex::new(StderrTail::default()));
        let child_stderr = File::from(stderr);
        let theirs = Arc::clone(&tail);
        std::thread::spawn(move || read_stderr(child_stderr, theirs));
        Client {
            label,
            stdin: Some(stdin),
            child,
            replies,
            stderr: tail,
            timeout: options.timeout,
            next_id: 1,
            lines: 0,
            last_line: None,
            last_id: 0,
            failed: None,
            hello: Hello {
                name: String::new(),
                version: None,
                protocol: 0,
                capabilities: Vec::new(),
                fork: false,
                pipeline: false,
            },
            on_reply: None,
            pipelined: std::collections::BTreeMap::new(),
            pipelined_seqs: Vec::new(),
        }
    }

    /// Sends `hello` with `protocol`; the adapter must answer with the same version.
    fn greet(&mut self, protocol: u64) -> Result<(), ClientError> {
        let hello: Hello = self.call(Request::Hello { protocol })?;
        if hello.protocol != protocol {
            let reason = format!(
                "the adapter speaks protocol {}, this harness speaks {protocol}",
                hello.protocol
            );
            return Err(self.shape_after_the_fact("hello", reason).into());
        }
        self.hello = hello;
        Ok(())
    }

    /// What the adapter said in `hello`.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// Calls `hook(op)` when a reply line has arrived, before it is read:
    /// where a nemesis in the caller's process can crash the caller after
    /// the adapter served the request but before the caller learned of it.
    /// (Killing the caller while the adapter is still serving would race
    /// with the adapter; the syscall nemesis covers that deterministically.)
    pub fn on_reply(&mut self, hook: fn(&'static str)) {
        self.on_reply = Some(hook);
    }

    /// Whether the adapter claims `capability`.
    pub fn claims(&self, capability: Capability) -> bool {
        self.hello.capabilities.contains(&capability)
    }

    /// The adapter's process id (for a nemesis).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The end of what the adapter wrote to stderr so far (at most 64 KiB).
    pub fn stderr(&self) -> String {
        let t = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&t.bytes).into_owned()
    }

    /// Whether the adapter is still running (a forked one that ended is reaped now).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Opens (or creates) a session.
    pub fn open(&mut self, args: &OpenArgs) -> Result<Opened, ClientError> {
        self.call(Request::Open(args.clone()))
    }

    /// Appends one event; returns once the adapter acknowledged it as durable.
    pub fn append(&mut self, event: &Event) -> Result<Ack, ClientError> {
        let request = Request::Append {
            event: event.clone(),
        };
        let ack: Ack = self.call(request)?;
        self.check_id("append", ack.seq, &ack.id)?;
        Ok(ack)
    }

    /// Makes the intent of `call_id` durable; the tool may run once this returns.
    pub fn start_tool(&mut self, call_id: &str) -> Result<IntentAck, ClientError> {
        let request = Request::StartTool {
            call_id: call_id.to_string(),
        };
        let ack: IntentAck = self.call(request)?;
        self.check_id("start_tool", ack.seq, &ack.id)?;
        Ok(ack)
    }

    /// Runs the store's own recovery.
    pub fn recover(&mut self) -> Result<RecoveryState, ClientError> {
        self.call(Request::Recover)
    }

    /// Every record with a seq greater than `after` (all when `None`).
    pub fn events(&mut self, after: Option<Seq>) -> Result<Vec<Record>, ClientError> {
        self.events_page(after, None)
    }

    /// At most `limit` records with a seq greater than `after`.
    pub fn events_page(
        &mut self,
        after: Option<Seq>,
        limit: Option<u64>,
    ) -> Result<Vec<Record>, ClientError> {
        let reply: EventsReply = self.call(Request::Events { after, limit })?;
        let mut out = Vec::with_capacity(reply.records.len());
        for w in reply.records {
            self.check_id("events", w.seq, &w.id)?;
            let rec = w
                .into_record()
                .map_err(|reason| self.shape_after_the_fact("events", reason))?;
            out.push(rec);
        }
        Ok(out)
    }

    /// The model's view of the active branch.
    pub fn context(&mut self, budget_tokens: Option<u64>) -> Result<String, ClientError> {
        let reply: ContextReply = self.call(Request::Context {
            budget: budget_tokens,
        })?;
        Ok(reply.text)
    }

    /// Writes a checkpoint; returns the seq it covers up to (exclusive).
    pub fn checkpoint(&mut self) -> Result<Seq, ClientError> {
        let reply: CheckpointReply = self.call(Request::Checkpoint)?;
        Ok(reply.next_seq)
    }

    /// The store's projection.
    pub fn projection(&mut self) -> Result<ProjectionView, ClientError> {
        self.call(Request::Projection)
    }

    /// Stores a large payload; returns once it is durable.
    pub fn put_blob(&mut self, bytes: &[u8]) -> Result<BlobRef, ClientError> {
        self.call(Request::PutBlob { hex: to_hex(bytes) })
    }

    /// Reads a payload back by its reference.
    pub fn get_blob(&mut self, reference: &BlobRef) -> Result<Vec<u8>, ClientError> {
        let reply: BlobBytes = self.call(Request::GetBlob(reference.clone()))?;
        from_hex(&reply.hex).ok_or_else(|| {
            let reason = "hex is not pairs of hex digits".to_string();
            self.shape_after_the_fact("get_blob", reason).into()
        })
    }

    /// Extends the lease of a session opened with one.
    pub fn renew_lease(&mut self) -> Result<LeaseGrant, ClientError> {
        self.call(Request::RenewLease)
    }

    /// Closes the session (the adapter keeps running).
    pub fn close(&mut self) -> Result<(), ClientError> {
        let _: Closed = self.call(Request::Close)?;
        Ok(())
    }

    /// Crashes the adapter: SIGKILL to its process group, then reaps it.
    pub fn kill(mut self) -> std::io::Result<ExitStatus> {
        kill_group(&mut self.child)?;
        self.child.wait()
    }

    /// Ends the conversation cleanly: closes stdin and waits for the adapter
    /// to exit (killing it if it is still running after the timeout). A
    /// forked adapter is killed once it has closed its stdout: it has no
    /// session open (or it would still be serving), so nothing is lost.
    pub fn shutdown(mut self) -> Result<ExitStatus, ClientError> {
        drop(self.stdin.take());
        if matches!(self.child, Proc::Inherited { .. }) {
            // Its stdin stays open in the harness, which reaps it when the
            // life ends: killed now (it has no session open, or it would
            // still be serving), so that it is dead before the life's next
            // store process receives the session.
            let _ = kill_group(&mut self.child);
            // Waiting for an inherited process never fails: it polls /proc.
            return Ok(self.child.wait().unwrap_or(ExitStatus::from_raw(0)));
        }
        if matches!(self.child, Proc::Forked { .. }) {
            let eof = loop {
                match self.replies.next(self.timeout) {
                    Some(Incoming::Line(_)) => continue,
                    Some(_) => break true,
                    None => break false,
                }
            };
            let _ = kill_group(&mut self.child);
            let status = self.child.wait();
            if eof {
                return status.map_err(|e| {
                    let request = RequestRef {
                        id: self.next_id,
                        op: "reap",
                    };
                    let exit = format!("reaping it failed: {e}");
                    let lines = self.lines;
                    self.fail(request, Problem::Eof { lines, exit }).into()
                });
            }
            let request = RequestRef {
                id: self.next_id,
                op: "shutdown",
            };
            let problem = Problem::Timeout {
                after: self.timeout,
                lines: self.lines,
            };
            return Err(self.fail(request, problem).into());
        }
        let deadline = Instant::now() + self.timeout;
        // An adapter usually exits within a millisecond of its EOF: poll
        // fast first, then back off to 5 ms.
        let mut pause = Duration::from_micros(100);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                let _ = kill_group(&mut self.child);
                let _ = self.child.wait();
                let request = RequestRef {
                    id: self.next_id,
                    op: "shutdown",
                };
                let problem = Problem::Timeout {
                    after: self.timeout,
                    lines: self.lines,
                };
                return Err(self.fail(request, problem).into());
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    fn last_stderr_line(&self) -> Option<String> {
        let t = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&t.bytes)
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(str::to_string)
    }

    /// Records a protocol error, kills the adapter and returns the error.
    fn fail(&mut self, request: RequestRef, problem: Problem) -> ProtocolError {
        if !matches!(problem, Problem::Eof { .. }) {
            let _ = kill_group(&mut self.child);
            let _ = self.child.wait();
        }
        let err = ProtocolError {
            adapter: self.label.clone(),
            request,
            problem,
            stderr: self.last_stderr_line(),
        };
        self.failed = Some(err.clone());
        err
    }

    /// After stdout closed: how the adapter ended, once its stderr is read too.
    fn exit_description(&mut self) -> String {
        let deadline = Instant::now() + EXIT_GRACE;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                _ => break None,
            }
        };
        while Instant::now() < deadline {
            if self.stderr.lock().map(|t| t.closed).unwrap_or(true) {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        match status {
            Some(_) if matches!(self.child, Proc::Inherited { .. }) => {
                "the adapter ended (its status is the harness's, which forked it)".to_string()
            }
            Some(s) => format!("the adapter exited ({s})"),
            None => {
                let _ = kill_group(&mut self.child);
                let _ = self.child.wait();
                "the adapter was still running and was killed".to_string()
            }
        }
    }

    fn check_id(&mut self, op: &'static str, seq: Seq, id: &str) -> Result<(), ClientError> {
        if id == event_id(seq) {
            return Ok(());
        }
        Err(ClientError::from(self.shape_after_the_fact(
            op,
            format!(
                "event id {id:?} for seq {seq}, protocol 1 ids are \"e<seq>\" (\"{}\")",
                event_id(seq)
            ),
        )))
    }

    /// A shape problem found after the reply parsed (the line is the last one read).
    fn shape_after_the_fact(&mut self, op: &'static str, reason: String) -> ProtocolError {
        let line = self.last_line.take().unwrap_or(StdoutLine {
            number: self.lines,
            text: String::new(),
        });
        let request = RequestRef {
            id: self.last_id,
            op,
        };
        self.fail(request, Problem::Shape { line, reason })
    }

    /// Sends `request` and reads its reply body.
    fn call<T: DeserializeOwned>(&mut self, request: Request) -> Result<T, ClientError> {
        self.call_with(request, &[])
    }

    /// Sends `request` with the descriptors `fds` attached (`SCM_RIGHTS`;
    /// stdin must be a socket) and reads its reply body.
    fn call_with<T: DeserializeOwned>(
        &mut self,
        request: Request,
        fds: &[RawFd],
    ) -> Result<T, ClientError> {
        use crate::timing::{self, Part};
        let part = match request.op() {
            "hello" => Part::Hello(timing::role()),
            "fork" => Part::Start(timing::role()),
            _ => Part::RoundTrip,
        };
        timing::timed(part, || self.exchange(request, fds))
    }

    /// [`Client::call_with`], untimed.
    fn exchange<T: DeserializeOwned>(
        &mut self,
        request: Request,
        fds: &[RawFd],
    ) -> Result<T, ClientError> {
        if let Some(e) = &self.failed {
            return Err(e.clone().into());
        }
        assert!(
            self.pipelined.is_empty(),
            "a request sent while a pipelined batch is unanswered"
        );
        self.pipelined_seqs.clear();
        let op = request.op();
        let id = self.next_id;
        self.next_id += 1;
        let req = RequestRef { id, op };
        let bytes = self.encode(id, false, request)?;
        self.send(req.clone(), &bytes, fds)?;
        let line = self.next_line(req.clone())?;
        self.reply_body(req, line)
    }

    /// The body of `line`, the reply to `req`: its `ok`, its refusal, or
    /// the protocol error it is.
    fn reply_body<T: DeserializeOwned>(
        &mut self,
        req: RequestRef,
        line: StdoutLine,
    ) -> Result<T, ClientError> {
        match parse_reply::<T>(&line, req.id) {
            Ok(Ok(body)) => {
                self.last_line = Some(line);
                self.last_id = req.id;
                Ok(body)
            }
            Ok(Err(Refusal { kind, message })) => Err(ClientError::Refused {
                op: req.op,
                kind,
                message,
            }),
            Err(problem) => Err(self.fail(req, problem(line)).into()),
        }
    }

    /// Request `id` as its line, newline included.
    fn encode(&self, id: u64, more: bool, request: Request) -> Result<Vec<u8>, ClientError> {
        let op = request.op();
        let mut bytes = serde_json::to_vec(&RequestLine { id, more, request }).map_err(|e| {
            ClientError::Encode {
                op,
                reason: e.to_string(),
            }
        })?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// Writes `bytes` (the lines of `req` and, pipelined, of the requests
    /// before it) to the adapter's stdin, `fds` attached.
    fn send(&mut self, req: RequestRef, bytes: &[u8], fds: &[RawFd]) -> Result<(), ClientError> {
        let sent = match self.stdin.as_mut() {
            Some(stdin) if fds.is_empty() => stdin.write_all(bytes).and_then(|()| stdin.flush()),
            Some(stdin) => send_with_fds(stdin, bytes, fds),
            None => Err(std::io::Error::other("stdin is closed")),
        };
        let Err(e) = sent else {
            return Ok(());
        };
        // A closed pipe usually means the adapter is gone: say how it ended.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            if let Some(Incoming::Eof(lines)) = self.replies.next(EXIT_GRACE) {
                let exit = self.exit_description();
                return Err(self.fail(req, Problem::Eof { lines, exit }).into());
            }
        }
        let problem = Problem::Send {
            reason: e.to_string(),
        };
        Err(self.fail(req, problem).into())
    }

    /// The next line on the adapter's stdout, the reply to `req` (or,
    /// pipelined, to a request of its batch).
    fn next_line(&mut self, req: RequestRef) -> Result<StdoutLine, ClientError> {
        let line = match self.replies.next(self.timeout) {
            Some(Incoming::Line(line)) => {
                if let Some(hook) = self.on_reply {
                    hook(req.op);
                }
                line
            }
            Some(Incoming::Incomplete(line)) => {
                self.lines = line.number;
                return Err(self.fail(req, Problem::Incomplete { line }).into());
            }
            Some(Incoming::TooLong(number)) => {
                return Err(self.fail(req, Problem::TooLong { number }).into())
            }
            Some(Incoming::Eof(lines)) => {
                let exit = self.exit_description();
                return Err(self.fail(req, Problem::Eof { lines, exit }).into());
            }
            Some(Incoming::ReadError(reason)) => {
                let exit = self.exit_description();
                let exit = format!("reading stdout failed ({reason}); {exit}");
                let lines = self.lines;
                return Err(self.fail(req, Problem::Eof { lines, exit }).into());
            }
            None => {
                let problem = Problem::Timeout {
                    after: self.timeout,
                    lines: self.lines,
                };
                return Err(self.fail(req, problem).into());
            }
        };
        self.lines = line.number;
        Ok(line)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = kill_group(&mut self.child);
            let _ = self.child.wait();
        }
    }
}

/// SIGKILL to the process group `child` leads (see [`Client::spawn`]): the
/// adapter and every process it started that did not leave the group.
/// Only while the adapter is not reaped (a zombie still holds its group's
/// id; once reaped, the id may name someone else's group).
fn kill_group(child: &mut Proc) -> std::io::Result<()> {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::Pid;
    if child.try_wait()?.is_some() {
        return Ok(());
    }
    let group = i32::try_from(child.id()).map_err(std::io::Error::other)?;
    match killpg(Pid::from_raw(group), Signal::SIGKILL) {
        Ok(()) => Ok(()),
        Err(_) => match child {
            Proc::Spawned(c) => c.kill(),
            Proc::Forked { .. } | Proc::Inherited { .. } => {
                kill(Pid::from_raw(group), Signal::SIGKILL).map_err(std::io::Error::from)
            }
        },
    }
}

/// Writes `bytes` to the socket `stdin` with `fds` attached to the first byte.
fn send_with_fds(stdin: &mut File, bytes: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let cmsg = [ControlMessage::ScmRights(fds)];
    let sent = sendmsg::<()>(
        stdin.as_raw_fd(),
        &[IoSlice::new(bytes)],
        &cmsg,
        MsgFlags::empty(),
        None,
    )?;
    stdin.write_all(&bytes[sent..])?;
    stdin.flush()
}
