//! The network-partition nemesis: the database in a network namespace of
//! its own (`ip netns`), each worker in another, every worker joined to
//! the database by a veth pair of its own, so one worker can be cut off
//! while the others keep their link. The database listens on
//! [`DATABASE_ADDR`], on its namespace's loopback; worker `i`'s pair is
//! `10.203.i.1/30` (database side) and `10.203.i.2/30` (worker side),
//! with a route to [`DATABASE_ADDR`] through it. Cutting a link sets
//! both of its ends down (every packet between the two is dropped,
//! connections stay open on both sides); healing sets them up again. Real
//! kernel networking, made by the caller itself; nothing of the machine's
//! own network is touched.
//!
//! This module owns the namespaces, the links and how a command is
//! started inside a namespace; it never decides whether a trial passed.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// The database's address: on its namespace's loopback, reached by every
/// worker through its own link.
pub const DATABASE_ADDR: Ipv4Addr = Ipv4Addr::new(10, 203, 255, 1);

/// Workers one network can hold (one /30 each under 10.203.0.0/16).
pub const MAX_WORKERS: usize = 250;

/// Why the namespaces or a link could not be made or changed.
#[derive(Debug, thiserror::Error)]
#[error("{command}: {output}")]
pub struct PartitionError {
    command: String,
    output: String,
}

/// The database's namespace and the workers' namespaces made so far, all
/// removed when dropped.
#[derive(Debug)]
pub struct Partition {
    tag: String,
    workers: BTreeSet<usize>,
}

fn ip(args: &[&str]) -> Result<(), PartitionError> {
    let command = format!("ip {}", args.join(" "));
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| PartitionError {
            command: command.clone(),
            output: e.to_string(),
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(PartitionError {
        command,
        output: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

impl Partition {
    /// Makes the database's namespace `<tag>-db` (tag: a few letters or
    /// digits, unique on the machine, such as the caller's pid) with
    /// [`DATABASE_ADDR`] on its loopback, up.
    pub fn create(tag: &str) -> Result<Partition, PartitionError> {
        let partition = Partition {
            tag: tag.to_string(),
            workers: BTreeSet::new(),
        };
        let db = partition.database_ns();
        ip(&["netns", "add", &db])?;
        ip(&["-n", &db, "link", "set", "lo", "up"])?;
        ip(&[
            "-n",
            &db,
            "addr",
            "add",
            &format!("{DATABASE_ADDR}/32"),
            "dev",
            "lo",
        ])?;
        Ok(partition)
    }

    /// The database's namespace.
    pub fn database_ns(&self) -> String {
        format!("{}-db", self.tag)
    }

    fn worker_ns(&self, worker: usize) -> String {
        format!("{}-w{worker}", self.tag)
    }

    /// Makes worker `worker`'s namespace and its link to the database's,
    /// up, unless made already.
    pub fn add_worker(&mut self, worker: usize) -> Result<(), PartitionError> {
        if self.workers.contains(&worker) {
            return Ok(());
        }
        if worker >= MAX_WORKERS {
            return Err(PartitionError {
                command: format!("worker {worker}'s namespace"),
                output: format!("at most {MAX_WORKERS} workers have a link of their own"),
            });
        }
        let (db, w) = (self.database_ns(), self.worker_ns(worker));
        ip(&["netns", "add", &w])?;
        self.workers.insert(worker);
        // Interface names are at most 15 bytes, and unique per namespace.
        let (db_if, w_if) = (format!("vd{worker}"), format!("vw{worker}"));
        ip(&[
            "link", "add", &db_if, "netns", &db, "type", "veth", "peer", "name", &w_if, "netns", &w,
        ])?;
        let db_side = format!("10.203.{worker}.1");
        ip(&[
            "-n",
            &db,
            "addr",
            "add",
            &format!("{db_side}/30"),
            "dev",
            &db_if,
        ])?;
        let w_side = format!("10.203.{worker}.2/30");
        ip(&["-n", &w, "addr", "add", &w_side, "dev", &w_if])?;
        for (ns, dev) in [(&w, "lo"), (&db, db_if.as_str()), (&w, w_if.as_str())] {
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        ip(&[
            "-n",
            &w,
            "route",
            "add",
            &format!("{DATABASE_ADDR}/32"),
            "via",
            &db_side,
        ])
    }

    /// `program args…` to be run in worker `worker`'s namespace (made
    /// with [`Partition::add_worker`]). `ip netns exec` execs the program
    /// in place: the child's pid is the program's.
    pub fn in_worker(&self, worker: usize, program: &str, args: &[String]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.worker_ns(worker), program])
            .args(args);
        cmd
    }

    /// Cuts worker `worker`'s link: both ends down.
    pub fn cut(&self, worker: usize) -> Result<(), PartitionError> {
        let w_if = format!("vw{worker}");
        ip(&["-n", &self.worker_ns(worker), "link", "set", &w_if, "down"])?;
        let db_if = format!("vd{worker}");
        ip(&["-n", &self.database_ns(), "link", "set", &db_if, "down"])
    }

    /// Heals worker `worker`'s link: both ends up again, and its route to
    /// the database back (a link set down loses its routes).
    pub fn heal(&self, worker: usize) -> Result<(), PartitionError> {
        let (db, w) = (self.database_ns(), self.worker_ns(worker));
        let db_if = format!("vd{worker}");
        ip(&["-n", &db, "link", "set", &db_if, "up"])?;
        let w_if = format!("vw{worker}");
        ip(&["-n", &w, "link", "set", &w_if, "up"])?;
        ip(&[
            "-n",
            &w,
            "route",
            "replace",
            &format!("{DATABASE_ADDR}/32"),
            "via",
            &format!("10.203.{worker}.1"),
        ])
    }

    /// Heals every worker's link (before a trial: an earlier one may have
    /// stopped with a link cut).
    pub fn heal_all(&self) -> Result<(), PartitionError> {
        self.workers.iter().try_for_each(|&w| self.heal(w))
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth ends in it, and so their peers.
        for &w in &self.workers {
            let _ = ip(&["netns", "delete", &self.worker_ns(w)]);
        }
        let _ = ip(&["netns", "delete", &self.database_ns()]);
    }
}

/// Whether this machine can make network namespaces (root and iproute2).
pub fn available() -> bool {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to this process's effective user.
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    root && Command::new("ip")
        .args(["netns", "list"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
