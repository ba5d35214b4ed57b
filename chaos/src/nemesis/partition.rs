//! The network-partition nemesis: the database and the workers in two
//! network namespaces of their own (`ip netns`), joined by one veth pair
//! that the nemesis cuts (both ends down: every packet between them is
//! dropped, connections stay open on both sides) and heals (both ends up
//! again). Real kernel networking, made by the caller itself; nothing of
//! the machine's own network is touched.
//!
//! This module owns the namespaces, the link and how a command is started
//! inside a namespace; it never decides whether a trial passed.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// The database side's address on the veth pair.
pub const DATABASE_ADDR: Ipv4Addr = Ipv4Addr::new(10, 203, 0, 1);
/// The workers' side.
pub const WORKERS_ADDR: Ipv4Addr = Ipv4Addr::new(10, 203, 0, 2);

/// Why the namespaces or the link could not be made or changed.
#[derive(Debug, thiserror::Error)]
#[error("{command}: {output}")]
pub struct PartitionError {
    command: String,
    output: String,
}

/// Two namespaces and the veth pair between them, removed when dropped.
#[derive(Debug)]
pub struct Partition {
    database_ns: String,
    workers_ns: String,
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
    /// Makes `<tag>-db` and `<tag>-w` (tag: a few letters or digits,
    /// unique on the machine, such as the test's pid), the veth pair
    /// between them with [`DATABASE_ADDR`] and [`WORKERS_ADDR`], and brings
    /// every link up, loopbacks included.
    pub fn create(tag: &str) -> Result<Partition, PartitionError> {
        let partition = Partition {
            database_ns: format!("{tag}-db"),
            workers_ns: format!("{tag}-w"),
        };
        let (db, w) = (&partition.database_ns, &partition.workers_ns);
        ip(&["netns", "add", db])?;
        ip(&["netns", "add", w])?;
        // Interface names are at most 15 bytes.
        let (db_if, w_if) = ("vdb0", "vw0");
        ip(&[
            "link", "add", db_if, "netns", db, "type", "veth", "peer", "name", w_if, "netns", w,
        ])?;
        let db_addr = format!("{DATABASE_ADDR}/30");
        let w_addr = format!("{WORKERS_ADDR}/30");
        ip(&["-n", db, "addr", "add", &db_addr, "dev", db_if])?;
        ip(&["-n", w, "addr", "add", &w_addr, "dev", w_if])?;
        for (ns, dev) in [(db, "lo"), (w, "lo"), (db, db_if), (w, w_if)] {
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(partition)
    }

    /// The database's namespace.
    pub fn database_ns(&self) -> &str {
        &self.database_ns
    }

    /// `program args…` to be run in the workers' namespace.
    pub fn in_workers(&self, program: &str, args: &[String]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.workers_ns, program])
            .args(args);
        cmd
    }

    /// Cuts the link: both ends down.
    pub fn cut(&self) -> Result<(), PartitionError> {
        ip(&["-n", &self.workers_ns, "link", "set", "vw0", "down"])?;
        ip(&["-n", &self.database_ns, "link", "set", "vdb0", "down"])
    }

    /// Heals the link: both ends up again.
    pub fn heal(&self) -> Result<(), PartitionError> {
        ip(&["-n", &self.database_ns, "link", "set", "vdb0", "up"])?;
        ip(&["-n", &self.workers_ns, "link", "set", "vw0", "up"])
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end in it, and so its peer.
        let _ = ip(&["netns", "delete", &self.workers_ns]);
        let _ = ip(&["netns", "delete", &self.database_ns]);
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
