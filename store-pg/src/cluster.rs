//! A private PostgreSQL cluster for tests and the harness: `initdb` into a
//! scratch directory, a server listening only on a Unix socket in that
//! directory (or, when asked, a loopback port), started, crashed and
//! restarted on demand, killed when dropped.
//!
//! It owns its scratch directory and the server processes it started, and
//! nothing else: it never connects to, signals or reads any other server
//! (its DSN names its own socket directory, never a default). PostgreSQL
//! refuses to run as root, so as root the server runs as the `postgres`
//! user (or `nobody`), which owns the scratch directory.
//!
//! The binaries are found with `pg_config --bindir`, then in
//! `/usr/lib/postgresql/*/bin`, then on `PATH`.

use std::fs::File;
use std::os::unix::fs::chown;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::{Pid, User};

/// How long a starting server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a stopping server may take to exit.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(25);
/// The database superuser `initdb` makes; only this cluster has it.
pub const SUPERUSER: &str = "postgres";

/// Why a cluster could not be made, started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No PostgreSQL server binaries on this machine.
    #[error("PostgreSQL is not installed: no initdb and postgres found via `pg_config --bindir`, /usr/lib/postgresql/*/bin or PATH")]
    NotInstalled,
    /// Running as root, with neither a `postgres` nor a `nobody` user to run the server as.
    #[error("running as root and no unprivileged user (postgres, nobody) to run the PostgreSQL server as")]
    NoUnprivilegedUser,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A command (initdb, pg_ctl) failed; `output` is what it printed.
    #[error("{command} failed ({status}): {output}")]
    Command {
        command: String,
        status: String,
        output: String,
    },
    /// The server did not accept connections in time, or exited while starting.
    #[error("the PostgreSQL server in {data} {why}; its log ends:\n{log}")]
    Start {
        data: PathBuf,
        why: String,
        log: String,
    },
    /// The server did not exit in time after being told to.
    #[error("the PostgreSQL server (pid {pid}) did not exit within {secs}s of {how}")]
    Stop { pid: i32, how: String, secs: u64 },
    #[error("the cluster's server is not running")]
    NotRunning,
    /// A query of the harness's own (never the store's) failed.
    #[error("{what}: {why}")]
    Query { what: String, why: String },
}

/// The harness's own connection to the cluster, which asks the server
/// which client backends wait for a lock another transaction holds.
pub struct LockWatch(postgres::Client);

impl LockWatch {
    /// How many client backends wait for a lock now
    /// (`pg_stat_activity.wait_event_type = 'Lock'`).
    pub fn waiting(&mut self) -> Result<i64, ClusterError> {
        self.0
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                &[],
            )
            .map(|row| row.get(0))
            .map_err(|e| ClusterError::Query {
                what: "ask which backends wait for a lock".into(),
                why: e.to_string(),
            })
    }
}

impl std::fmt::Debug for LockWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LockWatch")
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClusterError {
    let what = what.into();
    move |source| ClusterError::Io { what, source }
}

/// Where the server listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    /// Only the Unix socket in the scratch directory (`listen_addresses=''`).
    UnixSocket,
    /// The Unix socket and `ADDR:PORT` (`127.0.0.1` for the loopback, or
    /// the address of a test's own network namespace), with password-less
    /// access from any address that reaches it.
    Tcp { addr: std::net::Ipv4Addr, port: u16 },
}

/// How a cluster is set up.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub listen: Listen,
    /// A network namespace (`ip netns`) the server runs in, for tests that
    /// partition it from its clients; its Unix socket stays reachable by
    /// path from every namespace.
    pub netns: Option<String>,
    /// Extra `postgresql.conf` settings, `(name, value)` with the value as
    /// PostgreSQL writes it (quoted where it is a string).
    pub settings: Vec<(String, String)>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            listen: Listen::UnixSocket,
            netns: None,
            settings: Vec::new(),
        }
    }
}

/// The user the server runs as: the caller, or an unprivileged one for root.
#[derive(Debug, Clone)]
struct RunAs {
    uid: u32,
    gid: u32,
}

impl RunAs {
    fn pick() -> Result<Option<RunAs>, ClusterError> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(None);
        }
        for name in ["postgres", "nobody"] {
            if let Ok(Some(u)) = User::from_name(name) {
                return Ok(Some(RunAs {
                    uid: u.uid.as_raw(),
                    gid: u.gid.as_raw(),
                }));
            }
        }
        Err(ClusterError::NoUnprivilegedUser)
    }
}

/// The directory holding `initdb`, `postgres` and `pg_ctl`.
pub fn find_bindir() -> Option<PathBuf> {
    let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_server(&dir) {
            return Some(dir);
        }
    }
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|d| has_server(d))
            .collect();
        // The newest major version first.
        dirs.sort_by_key(|d| {
            std::cmp::Reverse(
                d.parent()
                    .and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())
                    .unwrap_or(0),
            )
        });
        if let Some(d) = dirs.into_iter().next() {
            return Some(d);
        }
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .find(|d| has_server(d))
}

/// A private PostgreSQL cluster in a scratch directory.
#[derive(Debug)]
pub struct Cluster {
    scratch: tempfile::TempDir,
    bindir: PathBuf,
    run_as: Option<RunAs>,
    listen: Listen,
    netns: Option<String>,
    server: Option<Child>,
}

impl Cluster {
    /// `initdb` into a new scratch directory and start the server.
    pub fn start(options: ClusterOptions) -> Result<Cluster, ClusterError> {
        let bindir = find_bindir().ok_or(ClusterError::NotInstalled)?;
        let run_as = RunAs::pick()?;
        let scratch = tempfile::Builder::new()
            .prefix("agentstore-pg-")
            .tempdir()
            .map_err(io("create the cluster's scratch directory"))?;
        if let Some(u) = &run_as {
            chown(scratch.path(), Some(u.uid), Some(u.gid))
                .map_err(io("chown the cluster's scratch directory"))?;
        }
        let mut cluster = Cluster {
            scratch,
            bindir,
            run_as,
            listen: options.listen,
            netns: options.netns.clone(),
            server: None,
        };
        cluster.initdb(&options)?;
        cluster.restart()?;
        Ok(cluster)
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.scratch.path().join("data")
    }

    /// The directory of the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        self.scratch.path()
    }

    /// The server's log (its stderr, appended across restarts).
    pub fn log_path(&self) -> PathBuf {
        self.scratch.path().join("server.log")
    }

    /// A libpq key/value DSN for this cluster's `postgres` database, over
    /// its Unix socket.
    pub fn dsn(&self) -> String {
        format!(
            "host={} port={} user={SUPERUSER} dbname=postgres",
            self.socket_dir().display(),
            self.port()
        )
    }

    /// A DSN over TCP, for a cluster listening on an address.
    pub fn tcp_dsn(&self) -> Option<String> {
        match self.listen {
            Listen::UnixSocket => None,
            Listen::Tcp { addr, port } => Some(format!(
                "host={addr} port={port} user={SUPERUSER} dbname=postgres connect_timeout=10"
            )),
        }
    }

    /// The port (the Unix socket's name carries it too).
    pub fn port(&self) -> u16 {
        match self.listen {
            Listen::UnixSocket => 5432,
            Listen::Tcp { port, .. } => port,
        }
    }

    /// The postmaster's pid while the server runs.
    pub fn pid(&self) -> Option<i32> {
        self.server.as_ref().map(|c| c.id() as i32)
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bindir.join(program);
        let mut cmd = match &self.run_as {
            // setpriv execs the program in place (same pid), with the
            // supplementary groups cleared, which std cannot do yet.
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={}", u.uid))
                    .arg(format!("--regid={}", u.gid))
                    .arg("--clear-groups")
                    .arg("--")
                    .arg(path);
                c
            }
            None => Command::new(path),
        };
        // Never inherit a connection or data directory of another server.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("PG") {
                cmd.env_remove(key);
            }
        }
        cmd.env("LC_ALL", "C");
        cmd
    }

    fn initdb(&self, options: &ClusterOptions) -> Result<(), ClusterError> {
        let mut cmd = self.command("initdb");
        // --no-sync: the template files need not survive a power cut; the
        // server writes and fsyncs everything this cluster is tested on.
        cmd.arg("-D").arg(self.data_dir()).args([
            "-U",
            SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]);
        run(cmd, "initdb")?;
        let listen_addresses = match self.listen {
            Listen::UnixSocket => "''".to_string(),
            Listen::Tcp { addr, .. } => format!("'{addr}'"),
        };
        let mut conf = format!(
            "\n# agentstore-pg private cluster\nlisten_addresses = {listen_addresses}\nport = {}\nunix_socket_directories = '{}'\nfsync = on\nsynchronous_commit = on\nfull_page_writes = on\nlogging_collector = off\n",
            self.port(),
            self.socket_dir().display()
        );
        for (name, value) in &options.settings {
            conf.push_str(&format!("{name} = {value}\n"));
        }
        let path = self.data_dir().join("postgresql.conf");
        let mut text = std::fs::read_to_string(&path).map_err(io("read postgresql.conf"))?;
        text.push_str(&conf);
        std::fs::write(&path, text).map_err(io("write postgresql.conf"))?;
        if let Listen::Tcp { .. } = self.listen {
            // Only the test's own address reaches it; the cluster is scratch.
            let hba = self.data_dir().join("pg_hba.conf");
            let mut text = std::fs::read_to_string(&hba).map_err(io("read pg_hba.conf"))?;
            text.push_str("host all all 0.0.0.0/0 trust\n");
            std::fs::write(&hba, text).map_err(io("write pg_hba.conf"))?;
        }
        Ok(())
    }

    /// Starts the server (after a stop or a crash it runs crash recovery)
    /// and waits until it accepts a connection.
    pub fn restart(&mut self) -> Result<(), ClusterError> {
        if self.server.is_some() {
            return Ok(());
        }
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(io("open the server log"))?;
        let log_err = log.try_clone().map_err(io("open the server log"))?;
        let mut cmd = match &self.netns {
            // `ip netns exec` enters the namespace and execs in place (same pid).
            Some(ns) => {
                let inner = self.command("postgres");
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(inner.get_program());
                c.args(inner.get_args());
                for (k, v) in inner.get_envs() {
                    match v {
                        Some(v) => c.env(k, v),
                        None => c.env_remove(k),
                    };
                }
                c
            }
            None => self.command("postgres"),
        };
        cmd.arg("-D")
            .arg(self.data_dir())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Its own process group, apart from the harness's terminal.
            .process_group(0);
        let child = cmd.spawn().map_err(io(format!(
            "start {}",
            self.bindir.join("postgres").display()
        )))?;
        self.server = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), ClusterError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let child = self.server.as_mut().ok_or(ClusterError::NotRunning)?;
            if let Ok(Some(status)) = child.try_wait() {
                self.server = None;
                return Err(self.start_error(format!("exited while starting ({status})")));
            }
            match postgres::Client::connect(&self.dsn(), postgres::NoTls) {
                Ok(mut c) => {
                    if c.simple_query("SELECT 1").is_ok() {
                        return Ok(());
                    }
                }
                Err(_) if Instant::now() >= deadline => {
                    return Err(self.start_error(format!(
                        "did not accept connections within {}s",
                        START_TIMEOUT.as_secs()
                    )))
                }
                Err(_) => {}
            }
            std::thread::sleep(POLL);
        }
    }

    fn start_error(&self, why: String) -> ClusterError {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        ClusterError::Start {
            data: self.data_dir(),
            why,
            log: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        }
    }

    /// `pg_ctl stop -m immediate`: the server quits without a checkpoint
    /// and runs crash recovery from its WAL at the next start.
    pub fn stop_immediate(&mut self) -> Result<(), ClusterError> {
        if self.server.is_none() {
            return Err(ClusterError::NotRunning);
        }
        let mut cmd = self.command("pg_ctl");
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["stop", "-m", "immediate", "-w"]);
        let children = self.children()?;
        run(cmd, "pg_ctl stop -m immediate")?;
        self.reap(&children, "pg_ctl stop -m immediate")
    }

    /// SIGKILL of every process of the server (postmaster and backends),
    /// as an OOM kill or a crash of the server's host would: no process of
    /// it writes anything after the signal. The postmaster is stopped
    /// first, so it cannot fork a child the kill would miss (each child
    /// is the leader of its own session: a group kill does not reach it).
    pub fn kill(&mut self) -> Result<(), ClusterError> {
        let pid = Pid::from_raw(self.pid().ok_or(ClusterError::NotRunning)?);
        let _ = kill(pid, Signal::SIGSTOP);
        let children = self.children()?;
        for &(child, _) in &children {
            let _ = kill(Pid::from_raw(child), Signal::SIGKILL);
        }
        let _ = kill(pid, Signal::SIGKILL);
        self.reap(&children, "SIGKILL")
    }

    /// Waits for the postmaster to exit and for each of `children` to be
    /// gone (a backend outliving it would keep the shared memory and
    /// refuse the next start). A zombie is gone: it holds no memory.
    fn reap(&mut self, children: &[(i32, String)], how: &str) -> Result<(), ClusterError> {
        let mut child = self.server.take().ok_or(ClusterError::NotRunning)?;
        let pid = child.id() as i32;
        child.wait().map_err(io("wait for the postmaster"))?;
        let deadline = Instant::now() + STOP_TIMEOUT;
        for &(c, _) in children {
            while alive(c) {
                if Instant::now() >= deadline {
                    return Err(ClusterError::Stop {
                        pid,
                        how: format!("{how} (server process {c} still runs)"),
                        secs: STOP_TIMEOUT.as_secs(),
                    });
                }
                std::thread::sleep(POLL);
            }
        }
        Ok(())
    }

    /// The postmaster's children, with their process titles
    /// (`postgres: walwriter`, `postgres: postgres postgres [local] idle`).
    pub fn children(&self) -> Result<Vec<(i32, String)>, ClusterError> {
        let postmaster = self.pid().ok_or(ClusterError::NotRunning)?;
        let mut out = Vec::new();
        for entry in std::fs::read_dir("/proc").map_err(io("read /proc"))? {
            let Ok(entry) = entry else { continue };
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if stat_field(pid, 1).and_then(|p| p.parse::<i32>().ok()) != Some(postmaster) {
                continue;
            }
            let title = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let title = String::from_utf8_lossy(&title)
                .trim_end_matches('\0')
                .to_string();
            out.push((pid, title));
        }
        Ok(out)
    }

    /// A connection that watches which backends wait for a lock.
    pub fn lock_watch(&self) -> Result<LockWatch, ClusterError> {
        postgres::Client::connect(&self.dsn(), postgres::NoTls)
            .map(LockWatch)
            .map_err(|e| ClusterError::Query {
                what: "connect to watch the locks".into(),
                why: e.to_string(),
            })
    }

    /// Pids of the server's background processes (WAL writer, background
    /// writer, checkpointer, autovacuum launcher, ...): every child of the
    /// postmaster but the client backends.
    pub fn background_pids(&self) -> Result<Vec<i32>, ClusterError> {
        // A client backend's title names its client: `[local]` on the
        // Unix socket, an address on a port.
        Ok(self
            .children()?
            .into_iter()
            .filter(|(_, title)| !title.contains("[local]") && !title.contains("127.0.0.1"))
            .map(|(pid, _)| pid)
            .collect())
    }

    /// Stops the server's background processes with SIGSTOP, so that
    /// nothing but a client backend can write WAL until the server is
    /// killed ([`Cluster::kill`]; SIGKILL ends stopped processes too):
    /// what an asynchronous commit left in the WAL buffers stays unwritten.
    pub fn freeze_background(&self) -> Result<Vec<i32>, ClusterError> {
        let pids = self.background_pids()?;
        for &p in &pids {
            let _ = kill(Pid::from_raw(p), Signal::SIGSTOP);
        }
        Ok(pids)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.server.is_some() {
            let _ = self.kill();
        }
    }
}

/// Field `index` (0: state, 1: ppid, 2: pgrp, ...) after the command of
/// `/proc/PID/stat`.
fn stat_field(pid: i32, index: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(index).map(str::to_string)
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: i32) -> bool {
    stat_field(pid, 0).is_some_and(|state| state != "Z")
}

fn run(mut cmd: Command, name: &str) -> Result<(), ClusterError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io(format!("run {name}")))?;
    if out.status.success() {
        return Ok(());
    }
    let mut output = String::from_utf8_lossy(&out.stderr).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stdout));
    Err(ClusterError::Command {
        command: name.to_string(),
        status: out.status.to_string(),
        output: output.trim().replace('\n', " | "),
    })
}

/// Whether a missing PostgreSQL fails (under `CI=true`) or skips a test.
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}
