//! Child processes that must not outlive the harness, nor a trial, nor a
//! signal: a SIGKILL of the harness (a CI timeout, cargo-mutants' timeout
//! of a mutant whose store loops forever) must not leave its children
//! running ([`die_with_parent`], [`die_with_harness`]); SIGINT or SIGTERM
//! kills the whole tree at once ([`stop_on_signals`]); what a trial's
//! processes leave behind is killed at its end and reported ([`within`]).
//! This module owns starting the harness's children ([`spawn`]) and
//! reaping the orphans it adopts; it never signals a process outside the
//! harness's tree, and never reaps a child a thread of the harness waits
//! for. Linux only (`PR_SET_PDEATHSIG`, `PR_SET_CHILD_SUBREAPER`, /proc,
//! pidfds).

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

// The harness's process tree (Linux only: /proc, PR_SET_CHILD_SUBREAPER,
// pidfds). Every child the harness starts goes through [`spawn`], which
// refuses once SIGINT or SIGTERM arrived and records the child as the
// harness's own; [`stop_on_signals`] kills the whole tree when one
// arrives; [`within`] kills what a trial left running. Nothing here ever
// signals a process that is not a descendant of the harness, nor reaps a
// child that some thread of the harness spawned and will wait for.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The variable that marks every process of one trial (inherited by the
/// agent, its adapters and whatever they start), so that what outlives
/// the trial can be found.
pub const TRIAL_ENV: &str = "AGENTCHAOS_TRIAL";

/// What [`spawn`] and [`begin`] say once SIGINT or SIGTERM arrived.
pub const INTERRUPTED: &str = "not started: interrupted by a signal";

#[derive(Debug)]
struct Registry {
    /// Whether the command has started work (made a directory, started a
    /// child): before that, a signal ends the process at once.
    started: bool,
    /// (pid, start time) of every child [`spawn`] started: their owners
    /// reap them, never [`reap_orphans`].
    owned: BTreeSet<(i32, u64)>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    started: false,
    owned: BTreeSet::new(),
});

/// Whether the harness adopts its orphaned descendants ([`become_subreaper`]).
static SUBREAPER: AtomicBool = AtomicBool::new(false);

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts `cmd` as a child of the harness that its caller will wait for
/// (marked with the trial it belongs to, inside [`within`]). Refuses once
/// SIGINT or SIGTERM arrived: the signal's sweep then never misses a child
/// started behind its back.
pub fn spawn(cmd: &mut Command) -> std::io::Result<Child> {
    let mut registry = registry();
    if agentstore::interrupt::requested() {
        return Err(std::io::Error::other(INTERRUPTED));
    }
    registry.started = true;
    if let Some(tag) = TAG.with(|t| t.borrow().as_ref().map(|t| t.id.clone())) {
        cmd.env(TRIAL_ENV, tag);
    }
    let child = cmd.spawn()?;
    // Read while the child is unreaped (alive or a zombie): it exists.
    if let Some(s) = stat(child.id() as i32) {
        registry.owned.insert((s.pid, s.start));
    }
    Ok(child)
}

/// Marks the start of a command's work (before its first scratch
/// directory): a signal before this ends the process at once, since
/// there is nothing to clean up; after it, the work is stopped and
/// cleaned up. Err once SIGINT or SIGTERM arrived.
pub fn begin() -> Result<(), &'static str> {
    let mut registry = registry();
    if agentstore::interrupt::requested() {
        return Err(INTERRUPTED);
    }
    registry.started = true;
    Ok(())
}

/// Makes the harness the reaper of its orphaned descendants
/// (`PR_SET_CHILD_SUBREAPER`): a daemon an adapter leaves behind (double
/// fork, `setsid`) stays in the harness's tree, where [`within`] and the
/// signal's sweep find it.
pub fn become_subreaper() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)?;
    SUBREAPER.store(true, Ordering::SeqCst);
    Ok(())
}

/// Installs the SIGINT and SIGTERM handling of the long commands: the
/// flag of [`agentstore::interrupt`] that their loops poll, and a thread
/// that, when the first signal arrives, ends the process at once if no
/// work has [`begin`]un, else SIGKILLs every descendant of the harness
/// (again until none is left) and blocks [`spawn`], so that every wait
/// for a child returns and the work unwinds, removing its directories.
pub fn stop_on_signals() -> std::io::Result<()> {
    use std::io::Read as _;
    agentstore::interrupt::install()?;
    let (mut rx, tx) = std::os::unix::net::UnixStream::pair()?;
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // After the flag's handlers: the flag is set before this wakes.
        signal_hook::low_level::pipe::register(sig, tx.try_clone()?)?;
    }
    std::thread::Builder::new()
        .name("agentchaos-stop".to_string())
        .spawn(move || {
            let mut byte = [0u8; 1];
            loop {
                match rx.read(&mut byte) {
                    Ok(1) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    _ => return,
                }
            }
            let mut registry = registry();
            if !registry.started {
                eprintln!(
                    "agentchaos: interrupted by {} before any work started",
                    agentstore::interrupt::signal_name().unwrap_or("a signal")
                );
                std::process::exit(i32::from(agentstore::interrupt::exit_code().unwrap_or(130)));
            }
            kill_descendants(&mut registry);
        })?;
    Ok(())
}

/// SIGKILLs every descendant of the harness until none is left alive,
/// reaping the orphans among them.
fn kill_descendants(registry: &mut Registry) {
    let me = std::process::id() as i32;
    // Bounded: a process in uninterruptible sleep dies when it wakes.
    for _ in 0..10_000 {
        let live: Vec<Stat> = descendants(me).into_iter().filter(|p| !p.zombie).collect();
        if live.is_empty() {
            return;
        }
        for p in &live {
            sigkill(p);
        }
        std::thread::sleep(Duration::from_millis(2));
        reap_orphans(registry);
    }
}

/// SIGKILLs `pid` (a child of this process, not yet reaped) after every
/// one of its descendants, with `pid` stopped meanwhile: a crash of the
/// whole tree at once. Killed first, a parent would close its pipes
/// before the kernel sends its children their parent-death signal (the
/// files go first when a process exits), and a store process idle on its
/// stdin would read EOF and close its files cleanly, which is no crash
/// (agentstore's log then cuts its pre-allocated zeros, and the next
/// life makes other syscalls than the plan numbered). Stopped, `pid`
/// neither starts another child nor sees one die.
pub fn kill_tree(pid: u32) {
    let Some(root) = i32::try_from(pid).ok().and_then(stat) else {
        return;
    };
    send(&root, nix::libc::SIGSTOP);
    // Bounded: a process in uninterruptible sleep stops when it wakes.
    for _ in 0..1_000 {
        if stat(root.pid).is_none_or(|now| now.start != root.start || now.stopped || now.zombie) {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    for p in descendants(root.pid).iter().filter(|p| !p.zombie) {
        sigkill(p);
    }
    sigkill(&root);
}

/// One process, as `/proc/PID/stat` tells it.
#[derive(Debug, Clone)]
struct Stat {
    pid: i32,
    ppid: i32,
    session: i32,
    zombie: bool,
    /// Stopped by a signal (not by a tracer).
    stopped: bool,
    /// Start time in clock ticks since boot: with the pid, names one process.
    start: u64,
}

fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let fields: Vec<&str> = text
        .get(text.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    Some(Stat {
        pid,
        zombie: matches!(*fields.first()?, "Z" | "X"),
        stopped: *fields.first()? == "T",
        ppid: fields.get(1)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Every descendant of `root` (not `root` itself), found through each
/// thread's `children` list (only the harness's subtree is read), or, on a
/// kernel without those lists, through all of /proc.
fn descendants(root: i32) -> Vec<Stat> {
    let mut out = Vec::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        let Some(children) = children_of(parent) else {
            return descendants_by_scan(root);
        };
        for s in children.into_iter().filter_map(stat) {
            next.push(s.pid);
            out.push(s);
        }
    }
    out
}

/// The children of `pid` (`None`: the kernel keeps no such lists).
fn children_of(pid: i32) -> Option<Vec<i32>> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Some(Vec::new()); // gone meanwhile
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        match std::fs::read_to_string(task.path().join("children")) {
            Ok(list) => out.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && task.path().exists() => {
                return None
            }
            Err(_) => {} // the thread ended meanwhile
        }
    }
    Some(out)
}

fn descendants_by_scan(root: i32) -> Vec<Stat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: BTreeMap<i32, Vec<Stat>> = BTreeMap::new();
    for entry in dir.flatten() {
        if let Some(s) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse().ok())
            .and_then(stat)
        {
            children.entry(s.ppid).or_default().push(s);
        }
    }
    let mut out = Vec::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        for c in children.remove(&parent).unwrap_or_default() {
            next.push(c.pid);
            out.push(c);
        }
    }
    out
}

/// SIGKILL to `p`, through a pidfd checked to still name it: never to a
/// recycled pid.
fn sigkill(p: &Stat) {
    send(p, nix::libc::SIGKILL);
}

/// A pidfd for process `pid` (Linux 5.3 and later): a descriptor that
/// names that process and no other, readable once it has exited.
pub(crate) fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    #[allow(unsafe_code)]
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just returned to this process and is owned here only.
    #[allow(unsafe_code)]
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Signal `sig` to `p`, through a pidfd checked to still name it.
fn send(p: &Stat, sig: i32) {
    use nix::libc;
    let Ok(fd) = pidfd_open(p.pid) else {
        return;
    };
    if stat(p.pid).is_some_and(|now| now.start == p.start) {
        // SAFETY: as above; a null siginfo is allowed.
        #[allow(unsafe_code)]
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
    }
}

/// Reaps the harness's zombie children that no thread will wait for:
/// orphans it adopted as the subreaper. Forgets owned children that are
/// gone (reaped by their owners). Not a subreaper, the harness has no
/// orphans, and a child some library started without [`spawn`] (the
/// PostgreSQL cluster's) must be left to its owner.
fn reap_orphans(registry: &mut Registry) {
    if !SUBREAPER.load(Ordering::SeqCst) {
        return;
    }
    let me = std::process::id() as i32;
    let mine: Vec<Stat> = match children_of(me) {
        Some(children) => children.into_iter().filter_map(stat).collect(),
        None => descendants_by_scan(me)
            .into_iter()
            .filter(|p| p.ppid == me)
            .collect(),
    };
    registry
        .owned
        .retain(|&(pid, start)| mine.iter().any(|p| p.pid == pid && p.start == start));
    for p in mine {
        if p.zombie && !registry.owned.contains(&(p.pid, p.start)) {
            let _ = nix::sys::wait::waitpid(
                nix::unistd::Pid::from_raw(p.pid),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            );
        }
    }
}

/// A process that outlived the trial that started it and had left the
/// session of the harness (`setsid`): a daemon the store's adapter left
/// behind, killed at the trial's end.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Leak {
    pub pid: i32,
    /// Its command line.
    pub command: String,
    /// The trial it outlived.
    pub during: String,
}

#[derive(Debug)]
struct Tag {
    id: String,
}

thread_local! {
    static TAG: RefCell<Option<Tag>> = const { RefCell::new(None) };
}

static NEXT_TAG: AtomicU64 = AtomicU64::new(0);
static LEAKS: Mutex<Vec<Leak>> = Mutex::new(Vec::new());

/// Runs `f` (one trial, probe or recording, `during` naming it) with every
/// process it starts marked ([`TRIAL_ENV`]); then SIGKILLs and reaps
/// whatever of them is still running, and records as a [`Leak`] each one
/// that had left the harness's session. Only after [`become_subreaper`]
/// (before it, `f` runs alone); nested calls belong to the outer one.
pub fn within<T>(during: impl FnOnce() -> String, f: impl FnOnce() -> T) -> T {
    if !SUBREAPER.load(Ordering::SeqCst) || TAG.with(|t| t.borrow().is_some()) {
        return f();
    }
    let id = format!(
        "{}-{}",
        std::process::id(),
        NEXT_TAG.fetch_add(1, Ordering::SeqCst)
    );
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            TAG.with(|t| *t.borrow_mut() = None);
        }
    }
    TAG.with(|t| *t.borrow_mut() = Some(Tag { id: id.clone() }));
    let reset = Reset;
    let out = f();
    drop(reset);
    let leaks = end_of(&id, &during());
    if !leaks.is_empty() {
        LEAKS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(leaks);
    }
    out
}

/// Every [`Leak`] recorded since the last call.
pub fn take_leaks() -> Vec<Leak> {
    std::mem::take(&mut *LEAKS.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Kills and reaps what the harness adopted outside [`within`] (a daemon
/// started by an adapter the harness itself asked something): the live
/// children no thread of the harness spawned, with their descendants;
/// those out of the harness's session are recorded as leaks `during`.
pub fn sweep_orphans(during: &str) {
    if !SUBREAPER.load(Ordering::SeqCst) {
        return;
    }
    let me = std::process::id() as i32;
    let Some(session) = stat(me).map(|s| s.session) else {
        return;
    };
    let mut registry = registry();
    let all = descendants(me);
    let orphans: Vec<&Stat> = all
        .iter()
        .filter(|p| p.ppid == me && !p.zombie && !registry.owned.contains(&(p.pid, p.start)))
        .collect();
    let mut leaks = Vec::new();
    for p in &orphans {
        if p.session != session {
            leaks.push(Leak {
                pid: p.pid,
                command: command_line(p.pid),
                during: during.to_string(),
            });
        }
        for d in descendants(p.pid) {
            sigkill(&d);
        }
        sigkill(p);
    }
    wait_gone(&mut registry, orphans.into_iter().cloned().collect());
    LEAKS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(leaks);
}

/// Reaps `killed` as each dies (bounded: an uninterruptible sleep ends).
fn wait_gone(registry: &mut Registry, killed: Vec<Stat>) {
    let me = std::process::id() as i32;
    for _ in 0..5_000 {
        reap_orphans(registry);
        let gone = killed.iter().all(|p| {
            stat(p.pid).is_none_or(|now| now.start != p.start || (now.zombie && now.ppid != me))
        });
        if gone {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Kills and reaps the live processes marked `id`; those out of the
/// harness's session are the leaks.
fn end_of(id: &str, during: &str) -> Vec<Leak> {
    let me = std::process::id() as i32;
    let Some(session) = stat(me).map(|s| s.session) else {
        return Vec::new();
    };
    let marker = format!("{TRIAL_ENV}={id}");
    let marked: Vec<Stat> = descendants(me)
        .into_iter()
        .filter(|p| !p.zombie && environ_has(p.pid, &marker))
        .collect();
    let mut registry = registry();
    if marked.is_empty() {
        reap_orphans(&mut registry);
        return Vec::new();
    }
    let leaks = marked
        .iter()
        .filter(|p| p.session != session)
        .map(|p| Leak {
            pid: p.pid,
            command: command_line(p.pid),
            during: during.to_string(),
        })
        .collect();
    for p in &marked {
        sigkill(p);
    }
    // Each dies, is reparented to the harness if its parent died too,
    // and is reaped here.
    wait_gone(&mut registry, marked);
    leaks
}

fn environ_has(pid: i32, marker: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|bytes| bytes.split(|&b| b == 0).any(|var| var == marker.as_bytes()))
}

fn command_line(pid: i32) -> String {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<String> = bytes
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    let line = words.join(" ");
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead as _;
    use std::process::Stdio;
    use std::time::Instant;

    /// A process the killed one started, reading a pipe that only the
    /// killed one writes (as a store process reads its agent's requests):
    /// killed with the tree, it never reads the pipe's end. A SIGKILL of
    /// the parent alone lets it read EOF and write its mark.
    #[test]
    fn a_killed_tree_dies_before_any_of_it_reads_its_parents_pipe_end() {
        let dir = tempfile::tempdir().unwrap();
        let mark = dir.path().join("eof");
        let mut parent = Command::new("bash")
            .arg("-c")
            .arg(r#"exec 5> >(read -r _; echo eof > "$1"); echo $!; exec sleep 600"#)
            .arg("bash")
            .arg(&mark)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(parent.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let reader: i32 = line.trim().parse().unwrap();
        kill_tree(parent.id());
        let status = parent.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        // Gone (or a zombie its new parent has not reaped yet): it either
        // died of its SIGKILL or read EOF and wrote its mark first.
        let deadline = Instant::now() + Duration::from_secs(30);
        while stat(reader).is_some_and(|s| !s.zombie) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            stat(reader).is_none_or(|s| s.zombie),
            "the reader still runs"
        );
        assert!(
            !mark.exists(),
            "the reader read EOF: it outlived its parent"
        );
    }
}
