//! Which crash points the power-loss campaign judges: the durability sites
//! of a recording and a crash-point sample that gives each one a state.
//!
//! A durability site is a (syscall kind, file role) pair the recording
//! reached: `fdatasync log`, `rename checkpoint`, `fsync directory`,
//! `rename blob`, … ([`sites`]). Within `--powerloss-points`, [`plan`]
//! first takes, for every site, the crash point right after one of its ops
//! (drawn from the seed), in at most half of the budget, then spends the
//! rest on a seeded sample of every other point, always with the first and
//! the last.
//!
//! Owns: classifying an op into a site and choosing crash points. Never:
//! builds or judges a state, or reads the store's files (it sees only the
//! op log, so any store's recording has sites).

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Component, Path};

use crate::nemesis::powerloss::{Op, OpLog};
use crate::scenario::rng::Rng;

/// One (syscall kind, file role) pair of a recording.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Site {
    /// `fsync`, `fdatasync`, `sync`, `rename`, `unlink`, `rmdir`, `truncate`.
    pub kind: &'static str,
    /// `log`, `checkpoint`, `session-meta`, `lease`, `blob`, `quarantine`,
    /// `lock`, `directory`, `root` (for `sync`), or, for a file agentstore
    /// does not make, its name with every run of digits written `N`.
    pub role: String,
}

impl fmt::Display for Site {
    /// `fdatasync log`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.role)
    }
}

/// A site and the indices of the ops (0-based) that reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteOps {
    pub site: Site,
    pub ops: Vec<usize>,
}

/// A site and whether a chosen crash point is right after one of its ops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteCover {
    pub site: Site,
    /// Ops of the recording that reach it.
    pub ops: usize,
    /// The first chosen crash point right after one of its ops (the power
    /// lost once that op completed), if any.
    pub crash_after: Option<usize>,
}

/// The crash points of one recording and what they reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Ops applied at each crash point, ascending.
    pub points: Vec<usize>,
    /// Every site of the recording, in the order of its first op.
    pub sites: Vec<SiteCover>,
}

/// The durability sites `log` reaches, in the order of their first op.
pub fn sites(log: &OpLog) -> Vec<SiteOps> {
    let dirs = directories(log);
    let mut out: Vec<SiteOps> = Vec::new();
    for (i, logged) in log.ops.iter().enumerate() {
        let (kind, path) = match &logged.op {
            Op::Fsync { path } => ("fsync", Some(path)),
            Op::Fdatasync { path } => ("fdatasync", Some(path)),
            Op::SyncAll => ("sync", None),
            Op::Rename { to, .. } => ("rename", Some(to)),
            Op::Unlink { path } => ("unlink", Some(path)),
            Op::Rmdir { path } => ("rmdir", Some(path)),
            Op::Truncate { path, .. } => ("truncate", Some(path)),
            Op::Create { .. } | Op::Mkdir { .. } | Op::Write { .. } => continue,
        };
        let role = match path {
            None => "root".to_string(),
            Some(p) if dirs.contains(p.as_path()) => "directory".to_string(),
            Some(p) => role(p),
        };
        let site = Site { kind, role };
        match out.iter_mut().find(|s| s.site == site) {
            Some(s) => s.ops.push(i),
            None => out.push(SiteOps { site, ops: vec![i] }),
        }
    }
    out
}

/// The paths of `log` that are directories: the root, every mkdir, every
/// ancestor of a path an op names.
fn directories(log: &OpLog) -> BTreeSet<&Path> {
    let mut dirs: BTreeSet<&Path> = BTreeSet::new();
    dirs.insert(Path::new("."));
    for logged in &log.ops {
        let paths: Vec<&Path> = match &logged.op {
            Op::Mkdir { path } => {
                dirs.insert(path.as_path());
                vec![path.as_path()]
            }
            Op::Create { path }
            | Op::Write { path, .. }
            | Op::Truncate { path, .. }
            | Op::Fsync { path }
            | Op::Fdatasync { path }
            | Op::Unlink { path }
            | Op::Rmdir { path } => vec![path.as_path()],
            Op::Rename { from, to } => vec![from.as_path(), to.as_path()],
            Op::SyncAll => Vec::new(),
        };
        for p in paths {
            dirs.extend(p.ancestors().skip(1).filter(|a| !a.as_os_str().is_empty()));
        }
    }
    dirs
}

/// The role of a regular file, from agentstore's layout
/// (`agentstore::layout`); any other file by its name, digits as `N`.
fn role(path: &Path) -> String {
    let in_blobs = path
        .components()
        .any(|c| c == Component::Normal(agentstore::layout::BLOBS_DIR.as_ref()));
    if in_blobs {
        return "blob".into();
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.starts_with(agentstore::layout::QUARANTINE_PREFIX) {
        return "quarantine".into();
    }
    let known = [
        (agentstore::layout::EVENTS_FILE, "log"),
        (agentstore::layout::SNAPSHOT_FILE, "checkpoint"),
        ("snapshot.tmp", "checkpoint"),
        (agentstore::layout::META_FILE, "session-meta"),
        ("session.tmp", "session-meta"),
        (agentstore::layout::LEASE_FILE, "lease"),
        ("lease.tmp", "lease"),
        (agentstore::layout::LOCK_FILE, "lock"),
    ];
    if let Some((_, role)) = known.iter().find(|(file, _)| *file == name) {
        return (*role).into();
    }
    let mut out = String::new();
    let mut in_digits = false;
    for c in name.chars() {
        if !c.is_ascii_digit() {
            out.push(c);
        } else if !in_digits {
            out.push('N');
        }
        in_digits = c.is_ascii_digit();
    }
    out
}

/// The crash points to judge in `log` (ops applied), at most `max` of them
/// (all when `None` or when there are fewer): the first and the last, one
/// point right after an op of every site while half of the rest of the
/// budget lasts, then a seeded sample of the rest. The same seed and name
/// give the same plan.
pub fn plan(log: &OpLog, max: Option<usize>, seed: u64, name: &str) -> Plan {
    let ops = log.ops.len();
    let found = sites(log);
    let points = match max.filter(|&m| m < ops + 1) {
        None => (0..=ops).collect(),
        Some(max) => sample(ops, &found, max, seed, name),
    };
    let sites = found
        .into_iter()
        .map(|s| SiteCover {
            crash_after: s
                .ops
                .iter()
                .map(|i| i + 1)
                .find(|k| points.binary_search(k).is_ok()),
            ops: s.ops.len(),
            site: s.site,
        })
        .collect();
    Plan { points, sites }
}

fn sample(ops: usize, found: &[SiteOps], max: usize, seed: u64, name: &str) -> Vec<usize> {
    let mut chosen: BTreeSet<usize> = [0, ops].into();
    let budget = max.max(2);
    // Sites get at most half of the points between both ends. Right after a
    // site's sync nothing unsynced is left to lose; a store that acknowledges
    // before it syncs loses what it acknowledged between two sites, where
    // only the seeded sample lands.
    let for_sites = 2 + (budget - 2) / 2;
    let mut pick = Rng::derive(seed, name, 0x5349_5445);
    for s in found {
        if chosen.len() >= for_sites {
            break;
        }
        if !s.ops.iter().any(|i| chosen.contains(&(i + 1))) {
            chosen.insert(pick.pick(&s.ops) + 1);
        }
    }
    // The rest as a seeded shuffle of the inner points (Fisher-Yates).
    let mut rng = Rng::derive(seed, name, 0x504f_5745);
    let mut rest: Vec<usize> = (1..ops).collect();
    for i in (1..rest.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        rest.swap(i, j);
    }
    for k in rest {
        if chosen.len() >= budget {
            break;
        }
        chosen.insert(k);
    }
    chosen.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    /// 40 writes and fdatasyncs of the log, then one checkpoint replaced
    /// atomically: its sites are 3 ops among 85.
    fn log_with_one_checkpoint() -> OpLog {
        let log = p("sessions/s/events.jsonl");
        let mut ops = vec![
            Op::Mkdir {
                path: p("sessions"),
            },
            Op::Mkdir {
                path: p("sessions/s"),
            },
            Op::Create { path: log.clone() },
            Op::Fsync {
                path: p("sessions/s"),
            },
        ];
        for n in 0..40u64 {
            ops.push(Op::Write {
                path: log.clone(),
                offset: n,
                data: crate::nemesis::powerloss::Bytes(vec![b'x']),
            });
            ops.push(Op::Fdatasync { path: log.clone() });
        }
        ops.extend([
            Op::Create {
                path: p("sessions/s/snapshot.tmp"),
            },
            Op::Fsync {
                path: p("sessions/s/snapshot.tmp"),
            },
            Op::Rename {
                from: p("sessions/s/snapshot.tmp"),
                to: p("sessions/s/snapshot.json"),
            },
        ]);
        OpLog::from_ops(ops)
    }

    /// `n` writes of one file: no durability site.
    fn writes(n: u64) -> OpLog {
        OpLog::from_ops((0..n).map(|offset| Op::Write {
            path: p("f"),
            offset,
            data: crate::nemesis::powerloss::Bytes(vec![b'x']),
        }))
    }

    #[test]
    fn crash_points_are_all_or_a_seeded_sample_with_both_ends() {
        let points = |n, max, seed| plan(&writes(n), max, seed, "s").points;
        assert_eq!(points(3, None, 1), [0, 1, 2, 3]);
        assert_eq!(points(3, Some(10), 1), [0, 1, 2, 3]);
        let a = points(100, Some(10), 1);
        assert_eq!(a.len(), 10);
        assert_eq!((a[0], a[9]), (0, 100));
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(a, points(100, Some(10), 1), "same seed, same points");
        assert_ne!(a, points(100, Some(10), 2));
    }

    #[test]
    fn sites_are_kind_and_role_in_order_of_first_op() {
        let found = sites(&log_with_one_checkpoint());
        let names: Vec<String> = found.iter().map(|s| s.site.to_string()).collect();
        assert_eq!(
            names,
            [
                "fsync directory",
                "fdatasync log",
                "fsync checkpoint",
                "rename checkpoint"
            ]
        );
        assert_eq!(found[1].ops.len(), 40);
        assert_eq!(found[3].ops, [86]);
    }

    #[test]
    fn other_files_are_named_with_digits_folded() {
        assert_eq!(role(Path::new("db/wal-000123.log")), "wal-N.log");
        assert_eq!(role(Path::new("sessions/s/blobs/ab12.tmp")), "blob");
        assert_eq!(
            role(Path::new("sessions/s/events.jsonl.torn-812")),
            "quarantine"
        );
    }

    #[test]
    fn every_site_gets_a_point_within_half_the_budget() {
        let log = log_with_one_checkpoint();
        for seed in 0..50 {
            let plan = plan(&log, Some(10), seed, "s");
            assert_eq!(plan.points.len(), 10, "seed {seed}: {plan:?}");
            assert!(
                plan.sites.iter().all(|s| s.crash_after.is_some()),
                "seed {seed}: {plan:?}"
            );
            assert_eq!(plan, super::plan(&log, Some(10), seed, "s"), "same seed");
        }
        let full = plan(&log, None, 1, "s");
        assert_eq!(full.points.len(), 88);
        assert!(full.sites.iter().all(|s| s.crash_after.is_some()));
    }

    /// Ten sites, each one fsync of its own file, then 100 writes of a log
    /// that is never synced: what a store acknowledging before it syncs
    /// leaves. With 8 points, the sites could take every point between
    /// both ends; half of them must land among the writes all the same.
    #[test]
    fn half_the_budget_is_sampled_between_the_sites() {
        let mut ops: Vec<Op> = (0..10)
            .map(|n| Op::Fsync {
                path: p(&format!("db-{}", "abcdefghij".as_bytes()[n] as char)),
            })
            .collect();
        ops.extend((0..100).map(|offset| Op::Write {
            path: p("log"),
            offset,
            data: crate::nemesis::powerloss::Bytes(vec![b'x']),
        }));
        let log = OpLog::from_ops(ops);
        assert_eq!(sites(&log).len(), 10);
        for seed in 0..50 {
            let plan = plan(&log, Some(8), seed, "s");
            assert_eq!(plan.points.len(), 8, "seed {seed}: {plan:?}");
            let among_writes = plan.points.iter().filter(|&&k| k > 10 && k < 110).count();
            assert!(among_writes >= 1, "seed {seed}: {plan:?}");
            let reached = plan
                .sites
                .iter()
                .filter(|s| s.crash_after.is_some())
                .count();
            assert!(reached >= 3, "seed {seed}: {plan:?}");
        }
    }

    #[test]
    fn a_budget_below_the_site_count_reports_the_sites_left_out() {
        let log = log_with_one_checkpoint();
        let plan = plan(&log, Some(3), 7, "s");
        assert_eq!(plan.points.len(), 3);
        let reached = plan
            .sites
            .iter()
            .filter(|s| s.crash_after.is_some())
            .count();
        assert!(reached < plan.sites.len(), "{plan:?}");
    }
}
