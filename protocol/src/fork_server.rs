//! Version 2's fork server for an adapter written in Rust
//! (`chaos/PROTOCOL.md`, section 8), behind the `fork-server` feature.
//!
//! Owns the server's side of the transport: lines and their `SCM_RIGHTS`
//! descriptors read from stdin (a Unix stream socket), `hello`, `fork` and
//! `reap`, and every child not reaped when stdin ends. A child is an
//! ordinary adapter process: it runs the adapter's own serve loop on the
//! three descriptors it was sent and exits with its code. Never opens a
//! session and never runs the adapter's loop itself, so a child's memory
//! is the server's before any session existed. Linux only (`SCM_RIGHTS`,
//! `PR_SET_PDEATHSIG`); the server must be single-threaded when it forks,
//! as an adapter's `main` is.

use std::collections::BTreeSet;
use std::io::{self, IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
use nix::sys::stat::{fstat, SFlag};
use nix::unistd::{fork, getpid, getppid, setpgid, ForkResult, Pid};

use crate::message::{Forked, Hello, Reaped, ReplyLine, RequestLine};
use crate::{ErrorKind, Refusal, Request, FORK_PROTOCOL_VERSION};

/// The most descriptors one line may carry (a `fork` carries three).
const MAX_FDS_PER_LINE: usize = 8;

/// Whether stdin is a Unix socket: the harness then expects a fork server.
pub fn stdin_is_socket() -> bool {
    fstat(io::stdin())
        .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFSOCK)
}

/// Serves `hello`, `fork` and `reap` on stdin (a Unix socket) and replies
/// on stdout until stdin ends, then SIGKILLs and reaps every child not
/// reaped. `hello` is the adapter's reply to `hello` at protocol 2 (the
/// server sets `fork`); `child` runs in each forked child once the three
/// descriptors sent with `fork` are its stdin, stdout and stderr, and
/// returns the child's exit code.
pub fn serve(hello: &dyn Fn() -> Hello, child: &dyn Fn() -> i32) -> io::Result<()> {
    let server = getpid();
    let mut lines = SocketLines::default();
    let mut children: BTreeSet<Pid> = BTreeSet::new();
    let mut out = io::stdout().lock();
    let result = loop {
        let (line, fds) = match lines.next_line() {
            Ok(Some(next)) => next,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        let reply = match serde_json::from_str::<RequestLine>(&line) {
            Err(e) => ReplyLine::refused(
                serde_json::from_str::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|v| v.get("id").and_then(serde_json::Value::as_u64)),
                Refusal::new(ErrorKind::BadRequest, format!("request does not fit: {e}")),
            ),
            Ok(RequestLine { id, request, .. }) => {
                let outcome = match request {
                    Request::Hello { protocol } if protocol == FORK_PROTOCOL_VERSION => {
                        Ok(serde_json::to_value(Hello {
                            protocol,
                            fork: true,
                            // The server serves fork and reap, one at a time.
                            pipeline: false,
                            ..hello()
                        })
                        .expect("a hello serializes"))
                    }
                    Request::Hello { protocol } => Err(Refusal::new(
                        ErrorKind::Unsupported,
                        format!("protocol {protocol} on a socket: this fork server speaks protocol {FORK_PROTOCOL_VERSION}"),
                    )),
                    Request::Fork => fork_child(server, fds, child, &mut children),
                    Request::Reap { pid } => reap(pid, &mut children),
                    other => Err(Refusal::new(
                        ErrorKind::Unsupported,
                        format!(
                            "{}: a fork server serves only hello, fork and reap",
                            other.op()
                        ),
                    )),
                };
                match outcome {
                    Ok(body) => ReplyLine::ok(Some(id), &body),
                    Err(refusal) => ReplyLine::refused(Some(id), refusal),
                }
            }
        };
        if let Err(e) = out
            .write_all(reply.to_line().as_bytes())
            .and_then(|()| out.flush())
        {
            break Err(e);
        }
    };
    for pid in children {
        let _ = kill(pid, Signal::SIGKILL);
        let _ = wait_status(pid);
    }
    result
}

/// Forks a child that serves on `fds` (stdin, stdout, stderr).
fn fork_child(
    server: Pid,
    fds: Vec<OwnedFd>,
    child: &dyn Fn() -> i32,
    children: &mut BTreeSet<Pid>,
) -> Result<serde_json::Value, Refusal> {
    if fds.len() != 3 {
        return Err(Refusal::new(
            ErrorKind::BadRequest,
            format!(
                "fork needs 3 descriptors sent with it (stdin, stdout, stderr), got {}",
                fds.len()
            ),
        ));
    }
    // SAFETY: the adapter's main thread is its only thread (module doc);
    // the child only calls async-signal-safe functions before it becomes
    // an ordinary single-threaded process again.
    #[allow(unsafe_code)]
    let forked = unsafe { fork() };
    match forked {
        Err(e) => Err(Refusal::new(ErrorKind::Io, format!("fork: {e}"))),
        Ok(ForkResult::Child) => {
            let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
            if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() || getppid() != server {
                std::process::exit(1);
            }
            for (target, fd) in fds.iter().enumerate() {
                // SAFETY: both descriptors are open; dup2 replaces `target`
                // (closing the server's socket on 0).
                #[allow(unsafe_code)]
                let duplicated = unsafe { nix::libc::dup2(fd.as_raw_fd(), target as RawFd) };
                if duplicated < 0 {
                    std::process::exit(1);
                }
            }
            drop(fds);
            std::process::exit(child())
        }
        Ok(ForkResult::Parent { child }) => {
            let _ = setpgid(child, child);
            children.insert(child);
            let pid = u32::try_from(child.as_raw()).expect("a pid is positive");
            Ok(serde_json::to_value(Forked { pid }).expect("a reply serializes"))
        }
    }
}

/// Waits for a child the server forked and releases its pid.
fn reap(pid: u32, children: &mut BTreeSet<Pid>) -> Result<serde_json::Value, Refusal> {
    let child = i32::try_from(pid).ok().map(Pid::from_raw);
    match child.filter(|c| children.remove(c)) {
        None => Err(Refusal::new(
            ErrorKind::BadRequest,
            format!("reap: pid {pid} is not a process this server forked and has not reaped"),
        )),
        Some(child) => match wait_status(child) {
            Ok(status) => Ok(serde_json::to_value(Reaped { status }).expect("a reply serializes")),
            Err(e) => Err(Refusal::new(ErrorKind::Io, format!("waitpid({pid}): {e}"))),
        },
    }
}

/// `waitpid` with the raw wait status, as `reap` replies it.
fn wait_status(pid: Pid) -> io::Result<i32> {
    let mut status = 0;
    loop {
        // SAFETY: a plain waitpid on a child of this process.
        #[allow(unsafe_code)]
        let r = unsafe { nix::libc::waitpid(pid.as_raw(), &mut status, 0) };
        if r >= 0 {
            return Ok(status);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Lines read from stdin, a Unix stream socket, each with the descriptors
/// that arrived since the line before it.
#[derive(Default)]
struct SocketLines {
    buffer: Vec<u8>,
    fds: Vec<OwnedFd>,
}

impl SocketLines {
    /// The next line without its newline, and its descriptors; `None` at
    /// the end of the stream.
    fn next_line(&mut self) -> io::Result<Option<(String, Vec<OwnedFd>)>> {
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                let text = String::from_utf8_lossy(&line[..end]).into_owned();
                return Ok(Some((text, std::mem::take(&mut self.fds))));
            }
            let mut chunk = [0u8; 1 << 16];
            let mut space = nix::cmsg_space!([RawFd; MAX_FDS_PER_LINE]);
            let received = {
                let mut iov = [IoSliceMut::new(&mut chunk)];
                let msg =
                    recvmsg::<UnixAddr>(0, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
                        .map_err(io::Error::from)?;
                for cmsg in msg.cmsgs().map_err(io::Error::from)? {
                    if let ControlMessageOwned::ScmRights(fds) = cmsg {
                        // SAFETY: the kernel just installed these descriptors
                        // in this process; nothing else owns them.
                        #[allow(unsafe_code)]
                        self.fds.extend(
                            fds.into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
                msg.bytes
            };
            if received == 0 {
                return Ok(None);
            }
            self.buffer.extend_from_slice(&chunk[..received]);
        }
    }
}
