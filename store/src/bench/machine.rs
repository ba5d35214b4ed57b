//! What the numbers were measured on: host, CPU, kernel, file system.
//!
//! Linux-only (uname, statfs, /proc). Every probe degrades to "unknown"
//! rather than failing the benchmark: a missing CPU model is no reason to
//! throw away a run.

use std::path::Path;

use serde::Serialize;

/// The machine and file system a report was measured on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Machine {
    pub hostname: String,
    pub cpu_model: String,
    /// Logical CPUs available to this process.
    pub cores: usize,
    /// `uname -s -r -m`.
    pub kernel: String,
    /// File system of the benchmark directory (e.g. `ext4`, `tmpfs`).
    pub fs_type: String,
    /// Its statfs magic number, in hex.
    pub fs_magic: String,
    /// When the run started, RFC 3339 UTC.
    pub date: String,
    /// 1, 5 and 15 minute load averages when the run started: a busy
    /// machine explains a noisy run.
    pub load_average: String,
}

impl Machine {
    /// Probes the running machine and the file system holding `dir`.
    pub fn probe(dir: &Path) -> Machine {
        let (hostname, kernel) = match nix::sys::utsname::uname() {
            Ok(u) => (
                u.nodename().to_string_lossy().into_owned(),
                format!(
                    "{} {} {}",
                    u.sysname().to_string_lossy(),
                    u.release().to_string_lossy(),
                    u.machine().to_string_lossy()
                ),
            ),
            Err(_) => ("unknown".into(), "unknown".into()),
        };
        let magic = nix::sys::statfs::statfs(dir)
            .ok()
            .map(|s| s.filesystem_type().0 as u64);
        let fs_type = mount_fs_type(dir)
            .or_else(|| magic.and_then(fs_name_of_magic).map(str::to_string))
            .unwrap_or_else(|| "unknown".into());
        Machine {
            hostname,
            cpu_model: cpu_model().unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel,
            fs_type,
            fs_magic: magic.map_or_else(|| "unknown".into(), |m| format!("{m:#x}")),
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            load_average: load_average().unwrap_or_else(|| "unknown".into()),
        }
    }

    /// Whether the directory's file system makes fsync meaningless (RAM-backed).
    pub fn fs_is_volatile(&self) -> bool {
        matches!(self.fs_type.as_str(), "tmpfs" | "ramfs")
    }
}

fn load_average() -> Option<String> {
    let raw = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(raw.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// The type of the mount holding `dir`, from /proc/self/mounts (longest
/// mount point that is a prefix of the canonical path). statfs alone cannot
/// tell ext2, ext3 and ext4 apart.
fn mount_fs_type(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mount_fs_type_in(&mounts, &dir)
}

fn mount_fs_type_in(mounts: &str, dir: &Path) -> Option<String> {
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let (_dev, point, fstype) = (f.next()?, f.next()?, f.next()?);
            // /proc/self/mounts escapes spaces and friends as octal.
            let point = point.replace("\\040", " ").replace("\\011", "\t");
            dir.starts_with(&point).then_some((point.len(), fstype))
        })
        // Later mounts shadow earlier ones at the same point.
        .max_by_key(|&(len, _)| len)
        .map(|(_, t)| t.to_string())
}

fn fs_name_of_magic(magic: u64) -> Option<&'static str> {
    Some(match magic {
        0xEF53 => "ext2/3/4",
        0x0102_1994 => "tmpfs",
        0x8584_58F6 => "ramfs",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0xF2F5_2010 => "f2fs",
        0x794C_7630 => "overlay",
        0x2FC1_2FC1 => "zfs",
        0x6969 => "nfs",
        0xCA45_1A4E => "bcachefs",
        0x6573_5546 => "fuse",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_matching_mount_point_wins() {
        let mounts = "/dev/vda / ext4 rw 0 0\n\
                      tmpfs /dev/shm tmpfs rw 0 0\n\
                      /dev/vdb /data\\040disk xfs rw 0 0\n";
        let t = |p: &str| mount_fs_type_in(mounts, Path::new(p));
        assert_eq!(t("/dev/shm/x").as_deref(), Some("tmpfs"));
        assert_eq!(t("/work").as_deref(), Some("ext4"));
        assert_eq!(t("/data disk/a").as_deref(), Some("xfs"));
        // A path component prefix is not a mount prefix.
        assert_eq!(t("/dev/shmem").as_deref(), Some("ext4"));
    }

    #[test]
    fn magic_numbers_name_common_file_systems() {
        assert_eq!(fs_name_of_magic(0xEF53), Some("ext2/3/4"));
        assert_eq!(fs_name_of_magic(0x0102_1994), Some("tmpfs"));
        assert_eq!(fs_name_of_magic(1), None);
    }

    #[test]
    fn probing_shm_says_volatile() {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            assert!(Machine::probe(shm).fs_is_volatile());
        }
        let m = Machine::probe(Path::new(env!("CARGO_MANIFEST_DIR")));
        assert!(m.cores >= 1);
        assert_eq!(m.load_average.split(' ').count(), 3, "{}", m.load_average);
    }
}
