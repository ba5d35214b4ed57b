//! Linux x86_64: the ptrace loop. Spawns the command with PTRACE_TRACEME,
//! follows its forks, vforks, clones and execs, stops at the calls the
//! decoder handles (seccomp stops, see `filter.rs`; or, without the
//! filter, at every syscall enter and exit), and hands the recognised ones
//! to the decoder, the fault plan and the recorder.
//!
//! Under the filter a call the tracer needs the result of (every counted
//! call, and the stdout writes it records) is resumed from its seccomp
//! stop with PTRACE_SYSCALL, which stops it once more at its exit; every
//! other resume is PTRACE_CONT, which runs on to the next seccomp stop.
//!
//! Owns every resume and every signal sent to a tracee; never leaves one
//! stopped (on error it kills them all and reaps them).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::marker::PhantomData;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use nix::errno::Errno as NixErrno;
use nix::libc;
use nix::sys::ptrace::{self, Options};
use nix::sys::signal::{self, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{access, AccessFlags, Pid};

use super::decode::{self, Decoded, Root};
use super::event::{Call, SyscallEvent};
use super::fault::{Errno, FaultOutcome, FaultPlan, FaultReport, SyscallFault};
use super::filter;
use super::record::Recorder;
use super::{Error, Exit, Outcome, TraceConfig};

/// A command running under the tracer, stopped until [`Traced::run`].
///
/// Not `Send`: ptrace requests are only accepted from the thread that
/// spawned the tracee. Take the pipes out and move them instead. The loop
/// waits for any child of its thread (`waitpid(-1, __WALL|__WNOTHREAD)`),
/// so run it on a thread that starts no other child processes. Dropped
/// without `run`, it kills the process.
#[derive(Debug)]
pub struct Traced {
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
    engine: Engine,
    _not_send: PhantomData<*const ()>,
}

/// A handle to a running trace, usable from any thread.
#[derive(Debug, Clone)]
pub struct Monitor {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// The spawned process while it is not yet reaped (so a kill can never
    /// hit a recycled pid).
    main: Mutex<Option<Pid>>,
    counted: AtomicU64,
    ops: AtomicUsize,
    kill: AtomicBool,
}

impl Monitor {
    /// Counted syscalls so far (their enter stops).
    pub fn counted_syscalls(&self) -> u64 {
        self.shared.counted.load(Ordering::SeqCst)
    }

    /// Ops recorded so far (record mode). Every op of a call that returned
    /// before the traced process wrote something is already counted when
    /// that write can be read from its stdout.
    pub fn recorded_ops(&self) -> usize {
        self.shared.ops.load(Ordering::SeqCst)
    }

    /// Kills every traced process (for a timeout); `run` then returns.
    pub fn kill(&self) {
        self.shared.kill.store(true, Ordering::SeqCst);
        let main = self.shared.main.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pid) = *main {
            // Wakes the tracer loop, which then kills the other tracees.
            let _ = signal::kill(pid, Signal::SIGKILL);
        }
    }
}

impl Traced {
    /// Spawns `cmd` under ptrace, stopped right after its exec. Configure
    /// its stdio before; the pipes are in the public fields.
    pub fn spawn(mut cmd: Command, config: TraceConfig) -> Result<Traced, Error> {
        let root_err = |source| Error::Root {
            path: config.root.clone(),
            source,
        };
        let root = fs::canonicalize(&config.root).map_err(root_err)?;
        let dev = fs::metadata(&root).map_err(root_err)?.dev();
        let program = cmd.get_program().to_string_lossy().into_owned();
        let spawn_err = |source| Error::Spawn {
            program: program.clone(),
            source,
        };
        let reads = config.reads || config.fault.is_some_and(|p| p.fault.is_read());
        let bpf = match config.seccomp.then(|| filter::program(reads)) {
            Some(Ok(bpf)) => {
                // Under the filter the child cannot report a failed exec
                // (its write to the standard library's error pipe would
                // stop at a seccomp stop no tracer is set up for yet, and
                // fail): find the program the way exec will, first.
                executable(&cmd).map_err(spawn_err)?;
                Some(bpf)
            }
            Some(Err(e)) => {
                not_filtered(&format!("it could not be compiled: {e}"));
                None
            }
            None => None,
        };
        // SAFETY: the closure runs in the forked child before exec and only
        // makes system calls: ptrace(PTRACE_TRACEME), then prctl and
        // seccomp to install the already compiled filter. Async-signal-safe,
        // no allocation, no lock.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || {
                ptrace::traceme().map_err(io::Error::from)?;
                if let Some(bpf) = &bpf {
                    filter::install(bpf);
                }
                Ok(())
            });
        }
        let mut child = crate::child::spawn(&mut cmd).map_err(spawn_err)?;
        let pid = Pid::from_raw(child.id() as i32);
        let kill_child = |e: Error| {
            let _ = signal::kill(pid, Signal::SIGKILL);
            let _ = waitpid(pid, Some(WaitPidFlag::__WALL));
            e
        };
        match waitpid(pid, Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {}
            other => {
                return Err(kill_child(Error::Tracee {
                    op: "first stop after exec",
                    pid: pid.as_raw(),
                    what: format!("expected a SIGTRAP stop, got {other:?}"),
                }))
            }
        }
        let filtered = config.seccomp && filter::in_effect(pid);
        if config.seccomp && !filtered {
            not_filtered("the kernel or a filter around this process refused it");
        }
        let mut options = Options::PTRACE_O_TRACESYSGOOD
            | Options::PTRACE_O_TRACEFORK
            | Options::PTRACE_O_TRACEVFORK
            | Options::PTRACE_O_TRACECLONE
            | Options::PTRACE_O_TRACEEXEC
            | Options::PTRACE_O_EXITKILL;
        if filtered {
            options |= Options::PTRACE_O_TRACESECCOMP;
        }
        ptrace::setoptions(pid, options)
            .map_err(|e| kill_child(ptrace_err("setoptions", pid, e)))?;
        let recorder = config
            .record
            .then(|| Recorder::new(root.clone(), decode::fd_path(pid, 1)));
        let shared = Arc::new(Shared {
            main: Mutex::new(Some(pid)),
            counted: AtomicU64::new(0),
            ops: AtomicUsize::new(0),
            kill: AtomicBool::new(false),
        });
        let mut tracees = HashMap::new();
        tracees.insert(pid, Tracee::default());
        Ok(Traced {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            engine: Engine {
                root: Root { path: root, dev },
                main: pid,
                filtered,
                reads,
                stops: 0,
                plan: config.fault,
                hit: None,
                stdout_before: None,
                recorder,
                events: Vec::new(),
                read_events: Vec::new(),
                tracees,
                exit: None,
                killing: false,
                shared,
            },
            _not_send: PhantomData,
        })
    }

    /// The spawned process's pid.
    pub fn pid(&self) -> u32 {
        self.engine.main.as_raw() as u32
    }

    pub fn monitor(&self) -> Monitor {
        Monitor {
            shared: self.engine.shared.clone(),
        }
    }

    /// Runs the process (and every process and thread it starts) to the
    /// end, or to the planned kill.
    pub fn run(mut self) -> Result<Outcome, Error> {
        match self.engine.run() {
            Ok(()) => self.engine.outcome(),
            Err(e) => {
                self.engine.kill_all();
                self.engine.reap_all();
                Err(e)
            }
        }
    }
}

#[derive(Debug, Default)]
struct Tracee {
    /// Between a call's enter and exit stops (under the filter: resumed
    /// from its seccomp stop to stop again at its exit).
    in_syscall: bool,
    /// A new tracee whose attach SIGSTOP is still to come.
    fresh: bool,
    inflight: Option<Box<InFlight>>,
}

/// A recognised call between its enter and exit stops.
#[derive(Debug)]
struct InFlight {
    decoded: Decoded,
    /// Its event; `None` for a stdout write.
    event: Option<Counted>,
    on_exit: OnExit,
}

/// Where a counted call's event is.
#[derive(Debug, Clone, Copy)]
enum Counted {
    /// `Engine::events[i]`.
    Call(usize),
    /// `Engine::read_events[i]`.
    Read(usize),
}

#[derive(Debug, Clone, Copy)]
enum OnExit {
    Nothing,
    Kill,
    Fail(Errno),
    /// A short read: put back the count register (and the iovec length)
    /// the tracer cut, so the process sees only a short result.
    Restore {
        rdx: u64,
        iovec: Option<decode::RewrittenIovec>,
    },
}

/// What the planned call did with its fault.
#[derive(Debug)]
enum Hit {
    Taken,
    /// A full disk failed its first call, `Engine::events[first]`.
    Filled {
        first: usize,
    },
    /// It could not take the fault, and why.
    NotApplicable(String),
}

#[derive(Debug)]
struct Engine {
    root: Root,
    main: Pid,
    /// The seccomp filter is in effect: seccomp stops, PTRACE_CONT.
    filtered: bool,
    /// Reads of files under the root are counted (`read_events`).
    reads: bool,
    /// ptrace stops so far.
    stops: u64,
    plan: Option<FaultPlan>,
    /// Set when the planned call was reached (a full disk: when it failed
    /// its first call).
    hit: Option<Hit>,
    /// Record mode: bytes the process had written to its stdout when the
    /// planned call entered.
    stdout_before: Option<u64>,
    recorder: Option<Recorder>,
    events: Vec<SyscallEvent>,
    read_events: Vec<SyscallEvent>,
    tracees: HashMap<Pid, Tracee>,
    exit: Option<Exit>,
    killing: bool,
    shared: Arc<Shared>,
}

impl Engine {
    fn run(&mut self) -> Result<(), Error> {
        self.resume(self.main, None)?;
        while !self.tracees.is_empty() {
            if self.shared.kill.load(Ordering::SeqCst) && !self.killing {
                self.kill_all();
            }
            let status = match waitpid(None, Some(WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD)) {
                Ok(s) => s,
                Err(NixErrno::EINTR) => continue,
                Err(NixErrno::ECHILD) => {
                    // Nothing left to wait for: any tid still listed
                    // vanished unseen (a thread replaced by another's exec).
                    self.tracees.clear();
                    break;
                }
                Err(e) => return Err(ptrace_err("waitpid", Pid::from_raw(-1), e)),
            };
            if matches!(
                status,
                WaitStatus::Stopped(..)
                    | WaitStatus::PtraceEvent(..)
                    | WaitStatus::PtraceSyscall(_)
            ) {
                self.stops += 1;
            }
            match status {
                WaitStatus::Exited(pid, code) => self.gone(pid, Exit::Code { code }),
                WaitStatus::Signaled(pid, sig, _) => self.gone(
                    pid,
                    Exit::Signal {
                        signal: sig.as_str().to_string(),
                    },
                ),
                WaitStatus::PtraceSyscall(pid) => {
                    self.syscall_stop(pid)?;
                    self.resume(pid, None)?;
                }
                WaitStatus::PtraceEvent(pid, _, libc::PTRACE_EVENT_SECCOMP) => {
                    self.seccomp_stop(pid)?;
                    self.resume(pid, None)?;
                }
                WaitStatus::PtraceEvent(pid, _, event) => {
                    if matches!(
                        event,
                        libc::PTRACE_EVENT_FORK
                            | libc::PTRACE_EVENT_VFORK
                            | libc::PTRACE_EVENT_CLONE
                    ) {
                        if let Ok(child) = ptrace::getevent(pid) {
                            self.tracees
                                .entry(Pid::from_raw(child as i32))
                                .or_insert_with(|| Tracee {
                                    fresh: true,
                                    ..Tracee::default()
                                });
                        }
                    } else if event == libc::PTRACE_EVENT_EXEC {
                        // If another thread exec'd, it took over this pid
                        // and its own tid is gone; either way the process
                        // is inside execve, whose exit stop comes next.
                        if let Ok(former) = ptrace::getevent(pid) {
                            let former = Pid::from_raw(former as i32);
                            if former != pid {
                                self.tracees.remove(&former);
                            }
                        }
                        let t = self.tracees.entry(pid).or_default();
                        // Unfiltered, execve's exit stop comes next.
                        t.in_syscall = !self.filtered;
                        t.inflight = None;
                    }
                    self.resume(pid, None)?;
                }
                WaitStatus::Stopped(pid, sig) => self.signal_stop(pid, sig)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn gone(&mut self, pid: Pid, exit: Exit) {
        self.tracees.remove(&pid);
        if pid == self.main {
            // Reaped: from here on its pid may be reused, so forget it
            // before anything can kill it.
            *self.shared.main.lock().unwrap_or_else(|e| e.into_inner()) = None;
            self.exit = Some(exit);
        }
    }

    fn signal_stop(&mut self, pid: Pid, sig: Signal) -> Result<(), Error> {
        // A new tracee's stop may arrive before its parent's fork event.
        let t = self.tracees.entry(pid).or_insert_with(|| Tracee {
            fresh: true,
            ..Tracee::default()
        });
        if sig == Signal::SIGSTOP && t.fresh {
            t.fresh = false;
            return self.resume(pid, None);
        }
        match ptrace::getsiginfo(pid) {
            // A group-stop, not a signal to deliver.
            Err(NixErrno::EINVAL) => self.resume(pid, None),
            Err(NixErrno::ESRCH) => Ok(()),
            _ => self.resume(pid, Some(sig)),
        }
    }

    fn syscall_stop(&mut self, pid: Pid) -> Result<(), Error> {
        let t = self.tracees.entry(pid).or_default();
        t.in_syscall = !t.in_syscall;
        if t.in_syscall {
            self.enter(pid)
        } else {
            self.exit(pid)
        }
    }

    /// A call the filter stops at: its enter. It stays in the call (to stop
    /// at its exit) only if the tracer needs its result.
    fn seccomp_stop(&mut self, pid: Pid) -> Result<(), Error> {
        self.tracees.entry(pid).or_default();
        self.enter(pid)?;
        if let Some(t) = self.tracees.get_mut(&pid) {
            t.in_syscall = t.inflight.is_some();
        }
        Ok(())
    }

    fn enter(&mut self, pid: Pid) -> Result<(), Error> {
        if self.killing {
            return Ok(());
        }
        let Some(mut regs) = getregs(pid)? else {
            return Ok(());
        };
        let Some(sysno) = decode::sysno(regs.orig_rax) else {
            return Ok(());
        };
        if sysno.is_read() && !self.reads {
            return Ok(());
        }
        let Some(decoded) = decode::decode(pid, sysno, decode::args(&regs), &self.root) else {
            return Ok(());
        };
        if sysno.is_read() {
            if decoded.in_root {
                self.enter_read(pid, regs, sysno, decoded)?;
            }
            return Ok(());
        }
        if !decoded.in_root {
            if self
                .recorder
                .as_ref()
                .is_some_and(|r| r.is_output(&decoded))
            {
                self.set_inflight(pid, decoded, None, OnExit::Nothing);
            }
            return Ok(());
        }
        let index = self.events.len();
        self.events.push(SyscallEvent {
            index: index as u64,
            pid: pid.as_raw(),
            sysno,
            call: decoded.call.clone(),
            result: None,
        });
        self.shared
            .counted
            .store(index as u64 + 1, Ordering::SeqCst);
        let mut on_exit = OnExit::Nothing;
        let full = self
            .plan
            .is_some_and(|p| p.fault == SyscallFault::DiskFull && p.at <= index as u64);
        if full && decoded.call.needs_space() {
            if self.hit.is_none() {
                self.hit = Some(Hit::Filled { first: index });
                self.stdout_before = self.recorder.as_ref().map(Recorder::stream);
            }
            regs.orig_rax = u64::MAX;
            setregs(pid, regs)?;
            on_exit = OnExit::Fail(Errno::ENOSPC);
        } else if let Some(plan) = self
            .plan
            .filter(|p| p.at == index as u64 && !p.fault.is_read() && !full)
        {
            self.hit = Some(Hit::Taken);
            self.stdout_before = self.recorder.as_ref().map(Recorder::stream);
            match plan.fault {
                SyscallFault::KillBefore => {
                    // Skip the call as well, in case the kill were late.
                    regs.orig_rax = u64::MAX;
                    setregs(pid, regs)?;
                    self.kill_all();
                    return Ok(());
                }
                SyscallFault::KillAfter => on_exit = OnExit::Kill,
                SyscallFault::TearWrite { keep } => match decoded.call {
                    Call::Write { len, .. } if keep < len => {
                        regs.rdx = decode::cut(pid, &decoded, keep)
                            .map_err(|e| Error::Tracee {
                                op: "tear write",
                                pid: pid.as_raw(),
                                what: e.to_string(),
                            })?
                            .0;
                        setregs(pid, regs)?;
                        on_exit = OnExit::Kill;
                    }
                    Call::Write { len, .. } => {
                        self.hit = Some(Hit::NotApplicable(format!(
                            "the write has {len} bytes, not more than {keep}"
                        )))
                    }
                    _ => self.hit = Some(Hit::NotApplicable("only writes can be torn".into())),
                },
                SyscallFault::Fail { errno } => {
                    regs.orig_rax = u64::MAX;
                    setregs(pid, regs)?;
                    on_exit = OnExit::Fail(errno);
                }
                SyscallFault::FailRead { .. } | SyscallFault::ShortRead { .. } => {
                    unreachable!("a read fault is planned among the reads")
                }
                SyscallFault::DiskFull => unreachable!("a full disk is handled above"),
            }
        }
        self.set_inflight(pid, decoded, Some(Counted::Call(index)), on_exit);
        Ok(())
    }

    /// A read of a file under the root, at its enter: counted among the
    /// reads, and faulted if the plan says so.
    fn enter_read(
        &mut self,
        pid: Pid,
        mut regs: libc::user_regs_struct,
        sysno: super::event::Sysno,
        decoded: Decoded,
    ) -> Result<(), Error> {
        let index = self.read_events.len();
        self.read_events.push(SyscallEvent {
            index: index as u64,
            pid: pid.as_raw(),
            sysno,
            call: decoded.call.clone(),
            result: None,
        });
        let mut on_exit = OnExit::Nothing;
        if let Some(plan) = self
            .plan
            .filter(|p| p.at == index as u64 && p.fault.is_read())
        {
            self.hit = Some(Hit::Taken);
            self.stdout_before = self.recorder.as_ref().map(Recorder::stream);
            match (plan.fault, &decoded.call) {
                (SyscallFault::FailRead { errno }, _) => {
                    regs.orig_rax = u64::MAX;
                    setregs(pid, regs)?;
                    on_exit = OnExit::Fail(errno);
                }
                (SyscallFault::ShortRead { keep }, Call::Read { len, .. })
                    if keep >= 1 && keep < *len =>
                {
                    let rdx = regs.rdx;
                    let (count, iovec) =
                        decode::cut(pid, &decoded, keep).map_err(|e| Error::Tracee {
                            op: "short read",
                            pid: pid.as_raw(),
                            what: e.to_string(),
                        })?;
                    regs.rdx = count;
                    setregs(pid, regs)?;
                    on_exit = OnExit::Restore { rdx, iovec };
                }
                (SyscallFault::ShortRead { keep }, Call::Read { len, .. }) => {
                    self.hit = Some(Hit::NotApplicable(format!(
                        "the read asks for {len} bytes: a short read of {keep} must keep 1 to {} of them",
                        len.saturating_sub(1)
                    )))
                }
                _ => unreachable!("only read faults are planned among the reads"),
            }
        }
        self.set_inflight(pid, decoded, Some(Counted::Read(index)), on_exit);
        Ok(())
    }

    fn set_inflight(
        &mut self,
        pid: Pid,
        decoded: Decoded,
        event: Option<Counted>,
        on_exit: OnExit,
    ) {
        if let Some(t) = self.tracees.get_mut(&pid) {
            t.inflight = Some(Box::new(InFlight {
                decoded,
                event,
                on_exit,
            }));
        }
    }

    fn exit(&mut self, pid: Pid) -> Result<(), Error> {
        let Some(f) = self.tracees.get_mut(&pid).and_then(|t| t.inflight.take()) else {
            return Ok(());
        };
        let Some(mut regs) = getregs(pid)? else {
            return Ok(());
        };
        let result = match f.on_exit {
            OnExit::Fail(errno) => {
                regs.rax = (-i64::from(errno.get())) as u64;
                setregs(pid, regs)?;
                regs.rax as i64
            }
            OnExit::Restore { rdx, iovec } => {
                regs.rdx = rdx;
                setregs(pid, regs)?;
                if let Some(iovec) = iovec {
                    decode::restore_iovec(pid, iovec).map_err(|e| Error::Tracee {
                        op: "short read",
                        pid: pid.as_raw(),
                        what: e.to_string(),
                    })?;
                }
                regs.rax as i64
            }
            OnExit::Nothing | OnExit::Kill => regs.rax as i64,
        };
        match f.event {
            Some(Counted::Call(i)) => self.events[i].result = Some(result),
            Some(Counted::Read(i)) => self.read_events[i].result = Some(result),
            None => {}
        }
        if let Some(rec) = &mut self.recorder {
            match f.event {
                Some(Counted::Call(i)) if result >= 0 => {
                    rec.completed(pid, i as u64, &f.decoded, result);
                    self.shared.ops.store(rec.ops(), Ordering::SeqCst);
                }
                None if result > 0 => rec.output(pid, result as u64),
                Some(Counted::Read(_)) => {}
                _ => {}
            }
        }
        if let OnExit::Kill = f.on_exit {
            self.kill_all();
        }
        Ok(())
    }

    /// SIGKILL to every tracee (a kill of one thread kills its process).
    fn kill_all(&mut self) {
        self.killing = true;
        for &pid in self.tracees.keys() {
            let _ = signal::kill(pid, Signal::SIGKILL);
        }
    }

    /// After `kill_all` on an error path: waits the tracees out.
    fn reap_all(&mut self) {
        while !self.tracees.is_empty() {
            match waitpid(None, Some(WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD)) {
                Ok(WaitStatus::Exited(pid, code)) => self.gone(pid, Exit::Code { code }),
                Ok(WaitStatus::Signaled(pid, sig, _)) => self.gone(
                    pid,
                    Exit::Signal {
                        signal: sig.as_str().to_string(),
                    },
                ),
                Ok(
                    WaitStatus::Stopped(pid, _)
                    | WaitStatus::PtraceEvent(pid, _, _)
                    | WaitStatus::PtraceSyscall(pid),
                ) => {
                    let _ = ptrace::syscall(pid, None);
                }
                Ok(_) | Err(NixErrno::EINTR) => {}
                Err(_) => {
                    self.tracees.clear();
                    break;
                }
            }
        }
    }

    /// Resumes a stopped tracee: to its next syscall stop, or under the
    /// filter to its next seccomp stop (unless it is to stop at the exit of
    /// the call it is in).
    fn resume(&self, pid: Pid, sig: Option<Signal>) -> Result<(), Error> {
        let exit_stop = self.tracees.get(&pid).is_some_and(|t| t.in_syscall);
        let (op, resumed) = if self.filtered && !exit_stop {
            ("PTRACE_CONT", ptrace::cont(pid, sig))
        } else {
            ("PTRACE_SYSCALL", ptrace::syscall(pid, sig))
        };
        match resumed {
            Ok(()) | Err(NixErrno::ESRCH) => Ok(()),
            Err(e) => Err(ptrace_err(op, pid, e)),
        }
    }

    fn outcome(&mut self) -> Result<Outcome, Error> {
        let exit = self.exit.take().ok_or_else(|| Error::Tracee {
            op: "wait",
            pid: self.main.as_raw(),
            what: "the spawned process vanished without an exit status".into(),
        })?;
        let events = std::mem::take(&mut self.events);
        let reads = std::mem::take(&mut self.read_events);
        let fault = self.plan.map(|plan| {
            let counted = if plan.fault.is_read() {
                &reads
            } else {
                &events
            };
            let hit = self.hit.take();
            let at = match hit {
                Some(Hit::Filled { first }) => first,
                _ => plan.at as usize,
            };
            let outcome = match (hit, counted.get(at).cloned()) {
                (Some(Hit::Taken | Hit::Filled { .. }), Some(event)) => {
                    FaultOutcome::Injected { event }
                }
                (Some(Hit::NotApplicable(reason)), Some(event)) => {
                    FaultOutcome::NotApplicable { event, reason }
                }
                (None, Some(_)) if plan.fault == SyscallFault::DiskFull => {
                    FaultOutcome::NoSpaceNeeded {
                        counted: counted.len() as u64,
                    }
                }
                _ => FaultOutcome::NotReached {
                    counted: counted.len() as u64,
                },
            };
            FaultReport {
                plan,
                outcome,
                stdout_before: self.stdout_before,
            }
        });
        Ok(Outcome {
            events,
            reads,
            fault,
            oplog: self.recorder.take().map(Recorder::finish),
            exit,
            seccomp: self.filtered,
            stops: self.stops,
        })
    }
}

impl Drop for Engine {
    /// A `Traced` dropped without `run` (or a run cut short) must not leave
    /// a process stopped under ptrace.
    fn drop(&mut self) {
        if !self.tracees.is_empty() {
            self.kill_all();
            self.reap_all();
        }
    }
}

/// Says once per process that the filter is not in effect, and why.
fn not_filtered(why: &str) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        eprintln!(
            "agentchaos: no seccomp filter for the syscall tracer ({why}): it stops at every system call, with the same results, more slowly"
        )
    });
}

/// Finds `cmd`'s program as exec will (a name without a slash on the
/// PATH it will run with): the error exec would give if it cannot.
fn executable(cmd: &Command) -> io::Result<()> {
    let program = Path::new(cmd.get_program());
    let runnable = |p: &Path| match access(p, AccessFlags::X_OK) {
        Ok(()) if p.is_dir() => Err(io::Error::from_raw_os_error(libc::EACCES)),
        Ok(()) => Ok(()),
        Err(e) => Err(io::Error::from(e)),
    };
    if program.as_os_str().as_bytes().contains(&b'/') {
        return match cmd.get_current_dir() {
            Some(dir) if program.is_relative() => runnable(&dir.join(program)),
            _ => runnable(program),
        };
    }
    let path = cmd
        .get_envs()
        .find(|(k, _)| *k == "PATH")
        .map(|(_, v)| v.map(|v| v.to_os_string()))
        .unwrap_or_else(|| std::env::var_os("PATH"))
        .unwrap_or_else(|| "/bin:/usr/bin".into());
    let mut first_err = None;
    for dir in std::env::split_paths(&path) {
        match runnable(&dir.join(program)) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                first_err.get_or_insert(e);
            }
            Err(_) => {}
        }
    }
    Err(first_err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::ENOENT)))
}

/// Registers of a stopped tracee; `None` if it died meanwhile.
fn getregs(pid: Pid) -> Result<Option<libc::user_regs_struct>, Error> {
    match ptrace::getregs(pid) {
        Ok(r) => Ok(Some(r)),
        Err(NixErrno::ESRCH) => Ok(None),
        Err(e) => Err(ptrace_err("PTRACE_GETREGS", pid, e)),
    }
}

fn setregs(pid: Pid, regs: libc::user_regs_struct) -> Result<(), Error> {
    match ptrace::setregs(pid, regs) {
        Ok(()) | Err(NixErrno::ESRCH) => Ok(()),
        Err(e) => Err(ptrace_err("PTRACE_SETREGS", pid, e)),
    }
}

fn ptrace_err(op: &'static str, pid: Pid, e: NixErrno) -> Error {
    Error::Ptrace {
        op,
        pid: pid.as_raw(),
        errno: e.desc().to_string(),
    }
}
