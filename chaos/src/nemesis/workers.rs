//! The many-workers nemeses (`agentchaos workers`): what happens to the
//! owner of the first session, and when. This module names and parses
//! plans; the campaign (`crate::campaign::workers`) carries them out with
//! real signals, and it must never judge what they did.
//!
//! A plan is a sequence of strikes, each at the session's owner of the
//! moment, after its K-th step since it was granted the session:
//! - `pause@K`: the harness has the owner renew its lease, SIGSTOPs it and
//!   lets another worker take the session over once the lease has expired
//!   by the store's clock (the other worker's `open` is refused with
//!   `lease_held` until then); once the session is finished, it SIGCONTs
//!   the paused owner: the zombie writer's next write must be fenced.
//! - `kill@K`: SIGKILL between two of its requests (in the middle of a
//!   tool call when K lands inside one); another worker (a fresh process
//!   when none is left) takes over every session it owned after expiry.
//!
//! - `db-crash:MODEL@K` (a store whose events live in a database server
//!   the harness started, `agentchaos workers --postgres`): the harness
//!   crashes the server with MODEL (a [`DatabaseCrash`]: `immediate`,
//!   `kill`, `kill-frozen`) and restarts it; every worker's connection is
//!   dead, so each session's owner sees its next write fail (`io`), asks
//!   for the session again and is granted it, by the database's clock,
//!   once its own lease has expired: a takeover, with its recovery.
//! - `partition@K` (the same, with network namespaces: root and
//!   iproute2): the harness has the owner renew its lease, cuts the
//!   owner's own link to the database (the other workers keep theirs) and
//!   sends the owner its next write (a renewal first when it is an
//!   effect), which stays in flight, every packet dropped; another worker
//!   takes the session over once the lease has expired by the database's
//!   clock; the harness heals the link, and the old connection delivers
//!   the write after the takeover: it must be fenced (a store that
//!   accepts it has the cut-off owner write on). A reply before the heal
//!   is a harness error: the cut did not act.
//!
//! - `pause@K~J`: a pause whose paused owner is woken once the owner of
//!   the moment (the heir) has taken J steps since its grant: the zombie
//!   writes while the heir is mid-session, not after it finished.
//! - `restart@K`: SIGKILL, then a new process under the same worker id,
//!   which asks for every session it owned again and waits out its
//!   predecessor's lease like any other worker.
//! - `slow@K`, `lapse@K`, `leave@K`: the lease transitions of a live
//!   owner (a slow owner taken over, a worker id taking its session back
//!   in a second process, a graceful release), carried out by
//!   `crate::campaign::workers::transitions`.
//!
//! - `kill@K.P` (agentstore in-process): SIGKILL at the P-th crash point
//!   (`agentstore::crashpoint`, from 1) the store passes inside request K
//!   (the one after step K), the worker dying by its own hand there, as in
//!   the single-agent campaign's crash points; another worker takes over
//!   every session it owned after expiry. It is spelled as the statement
//!   kill of `--postgres` ([`WorkerPlan::at_crash_points`]): a strike point
//!   inside a request is a statement there, a crash point here.
//!
//! - `kill@take.P` (right after a `kill@K.P`): the worker that takes the
//!   session over dies at the P-th crash point of its takeover request
//!   (agentstore in-process: the lease written, the recovery's marks
//!   appended, …) or, with `--postgres`, before its P-th statement; the
//!   next worker takes over from both once the leases they may have left
//!   expired.
//! - `reset@take.S`, `cut@take.S` (`--postgres`, right after a `kill@K.S`):
//!   the heir's connection is closed before the S-th statement of its
//!   takeover, or that statement is sent and its answer lost (a takeover
//!   whose `COMMIT` may or may not have run); the heir lives on, and when
//!   the store refuses it the takeover it asks for the session again.
//! - `pause@take.S` (`--postgres`, right after a `kill@K.S`): the heir's
//!   statement S is held while the next worker takes the session over
//!   (two takeovers at once), then let go: inside the takeover's
//!   transaction once the session's row is locked, the other takeover
//!   waits for it, so the heir is let go first and is granted, and its
//!   next write, after the other's grant, must be fenced.
//! - `kill@close.S`, `reset@close.S`, `cut@close.S` (`--postgres`, right
//!   after a `leave@K`): the same faults at the S-th statement of the
//!   owner's close (its lease's release): the owner killed there (its
//!   lease lapses; the next worker takes over once it expired), or its
//!   connection reset or its answer lost while it lives on.
//!
//! `kill@3+kill@2` kills the first owner, then the worker that took over,
//! in its own second life of the session. Strikes are ordered by observed
//! states (replies, grants), never by sleeps: a plan replays the same.

use std::fmt;
use std::str::FromStr;

use crate::nemesis::database::DatabaseCrash;
use crate::nemesis::pgproxy::{StatementAction, StatementStrike};

/// What one strike does to the session's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strike {
    Pause,
    /// A pause whose zombie wakes after the heir's J-th step, mid-session.
    PauseUntil(usize),
    Kill,
    /// A kill, then a new process under the same worker id.
    Restart,
    DbCrash(DatabaseCrash),
    Partition,
    /// The owner runs on but is sent nothing until its lease lapsed and
    /// another worker took the session over; then its next write goes.
    Slow,
    /// The owner's lease lapses while it runs on; a second process under
    /// its worker id takes the session back; then the first one's next
    /// write goes.
    Lapse,
    /// The owner releases its lease with an acknowledged close; another
    /// worker asks for the session at once.
    Leave,
    /// Inside the request after step K, at one of its statements
    /// (`pause@K.S`, `kill@K.Sr`: [`crate::nemesis::pgproxy`]).
    Statement(StatementStrike),
    /// Inside the request after step K, a kill at its P-th crash point of
    /// agentstore in-process (`kill@K.P`), from 1.
    CrashPoint(usize),
    /// The heir of the `kill@K.P` before it killed at the P-th crash point
    /// of its takeover request (`kill@take.P`, agentstore in-process), from 1.
    TakeoverCrashPoint(usize),
    /// The heir of the statement kill `kill@K.S` before it struck at the
    /// S-th statement of its takeover request (`kill@take.S`,
    /// `reset@take.S`, `cut@take.S`, `--postgres`), from 1.
    TakeoverStatement(LeaseFault, usize),
    /// The owner of the `leave@K` before it struck at the S-th statement
    /// of its close (`kill@close.S`, `reset@close.S`, `cut@close.S`,
    /// `--postgres`), from 1.
    CloseStatement(LeaseFault, usize),
}

/// What a strike at a statement of a lease request (the heir's takeover,
/// the owner's close) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseFault {
    /// SIGKILL the worker and its store process before the statement.
    Kill,
    /// Close both sides of the worker's connection before the statement.
    Reset,
    /// Send the statement, lose the server's answer, close the connection.
    Cut,
    /// Hold the statement while the next worker takes the session over,
    /// then let it go (in the heir's takeover only: `pause@take.S`).
    Pause,
}

impl LeaseFault {
    /// The proxy's action for it.
    pub fn action(self) -> StatementAction {
        match self {
            LeaseFault::Kill => StatementAction::Kill,
            LeaseFault::Reset => StatementAction::Reset,
            LeaseFault::Cut => StatementAction::Cut,
            LeaseFault::Pause => StatementAction::Pause,
        }
    }

    /// Every fault, as a plan spells it.
    pub const ALL: [LeaseFault; 4] = [
        LeaseFault::Kill,
        LeaseFault::Reset,
        LeaseFault::Cut,
        LeaseFault::Pause,
    ];

    fn parse(name: &str) -> Option<LeaseFault> {
        LeaseFault::ALL
            .into_iter()
            .find(|f| f.action().name() == name)
    }
}

impl Strike {
    /// What the store under test must have for this strike: a database
    /// server the harness started, and for a partition network namespaces.
    pub fn needs(self) -> Needs {
        match self {
            Strike::Pause
            | Strike::PauseUntil(_)
            | Strike::Kill
            | Strike::Restart
            | Strike::Slow
            | Strike::Lapse
            | Strike::Leave
            | Strike::CrashPoint(_)
            | Strike::TakeoverCrashPoint(_) => Needs::Processes,
            Strike::DbCrash(_)
            | Strike::Statement(_)
            | Strike::TakeoverStatement(..)
            | Strike::CloseStatement(..) => Needs::Database,
            Strike::Partition => Needs::Network,
        }
    }
}

impl Strike {
    /// Its kind, as a plan spells it (`pause`, `kill`, `db-crash`,
    /// `partition`), or a statement strike's (`statement-pause`, …).
    pub fn kind(self) -> &'static str {
        match self {
            Strike::Pause | Strike::PauseUntil(_) => "pause",
            Strike::Kill => "kill",
            Strike::Restart => "restart",
            Strike::DbCrash(_) => "db-crash",
            Strike::Partition => "partition",
            Strike::Slow => "slow",
            Strike::Lapse => "lapse",
            Strike::Leave => "leave",
            Strike::Statement(s) => s.action.kind(),
            Strike::CrashPoint(_) => "crash-point-kill",
            Strike::TakeoverCrashPoint(_) => "takeover-crash-point-kill",
            Strike::TakeoverStatement(LeaseFault::Kill, _) => "takeover-statement-kill",
            Strike::TakeoverStatement(LeaseFault::Reset, _) => "takeover-connection-reset",
            Strike::TakeoverStatement(LeaseFault::Cut, _) => "takeover-lost-reply",
            Strike::TakeoverStatement(LeaseFault::Pause, _) => "takeover-statement-pause",
            Strike::CloseStatement(LeaseFault::Kill, _) => "close-statement-kill",
            Strike::CloseStatement(LeaseFault::Reset, _) => "close-connection-reset",
            Strike::CloseStatement(LeaseFault::Cut, _) => "close-lost-reply",
            Strike::CloseStatement(LeaseFault::Pause, _) => "close-statement-pause",
        }
    }
}

/// What a strike needs of the store under test, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Needs {
    /// Worker processes only: every store.
    Processes,
    /// A database server the harness started and may crash.
    Database,
    /// The database and the workers in network namespaces.
    Network,
}

/// The strikes, in order; none: every worker serves its sessions to the end.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkerPlan {
    strikes: Vec<(Strike, usize)>,
}

impl WorkerPlan {
    /// One strike after the owner's `after_step`-th step.
    pub fn one(strike: Strike, after_step: usize) -> WorkerPlan {
        WorkerPlan {
            strikes: vec![(strike, after_step)],
        }
    }

    /// This plan, then `strike` at the next owner after its `after_step`-th step.
    pub fn then(mut self, strike: Strike, after_step: usize) -> WorkerPlan {
        self.strikes.push((strike, after_step));
        self
    }

    /// This plan, then each of `faults` at each statement 1..=`points` of
    /// the request `at` strikes (`Strike::TakeoverStatement`,
    /// `Strike::CloseStatement`): one plan each, by statement.
    pub fn then_each(
        &self,
        at: fn(LeaseFault, usize) -> Strike,
        points: usize,
        faults: &[LeaseFault],
    ) -> Vec<WorkerPlan> {
        (1..=points)
            .flat_map(|q| faults.iter().map(move |&f| self.clone().then(at(f, q), 0)))
            .collect()
    }

    /// Each strike with the step of the owner of the moment it follows.
    pub fn strikes(&self) -> &[(Strike, usize)] {
        &self.strikes
    }

    /// Its `i`-th strike as a plan spells it (`db-crash:kill@4`).
    pub fn label(&self, i: usize) -> String {
        WorkerPlan::one(self.strikes[i].0, self.strikes[i].1).to_string()
    }

    /// This plan for agentstore in-process, whose strike points inside a
    /// request are its crash points: each `kill@K.P` a kill at crash point
    /// P, each `kill@take.P` one in the heir's takeover; the other
    /// statement strikes stay (they need `--postgres`).
    pub fn at_crash_points(self) -> WorkerPlan {
        let strikes = self
            .strikes
            .into_iter()
            .map(|(strike, k)| match strike {
                Strike::Statement(StatementStrike {
                    action: StatementAction::Kill,
                    statement,
                    after_reply: false,
                }) => (Strike::CrashPoint(statement), k),
                Strike::TakeoverStatement(LeaseFault::Kill, p) => {
                    (Strike::TakeoverCrashPoint(p), k)
                }
                other => (other, k),
            })
            .collect();
        WorkerPlan { strikes }
    }

    /// Whether it strikes at agentstore's crash points.
    pub fn strikes_crash_points(&self) -> bool {
        self.strikes
            .iter()
            .any(|(s, _)| matches!(s, Strike::CrashPoint(_) | Strike::TakeoverCrashPoint(_)))
    }

    /// What its strikes need, at most.
    pub fn needs(&self) -> Needs {
        self.strikes
            .iter()
            .map(|(s, _)| s.needs())
            .max()
            .unwrap_or(Needs::Processes)
    }
}

impl fmt::Display for WorkerPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.strikes.is_empty() {
            return f.write_str("none");
        }
        for (i, (strike, k)) in self.strikes.iter().enumerate() {
            let sep = if i == 0 { "" } else { "+" };
            match strike {
                Strike::Pause => write!(f, "{sep}pause@{k}")?,
                Strike::PauseUntil(j) => write!(f, "{sep}pause@{k}~{j}")?,
                Strike::Kill => write!(f, "{sep}kill@{k}")?,
                Strike::Restart => write!(f, "{sep}restart@{k}")?,
                Strike::DbCrash(model) => write!(f, "{sep}db-crash:{model}@{k}")?,
                Strike::Partition => write!(f, "{sep}partition@{k}")?,
                Strike::Slow => write!(f, "{sep}slow@{k}")?,
                Strike::Lapse => write!(f, "{sep}lapse@{k}")?,
                Strike::Leave => write!(f, "{sep}leave@{k}")?,
                Strike::Statement(s) => write!(f, "{sep}{}@{k}{s}", s.action.name())?,
                Strike::CrashPoint(p) => write!(f, "{sep}kill@{k}.{p}")?,
                Strike::TakeoverCrashPoint(p) => write!(f, "{sep}kill@take.{p}")?,
                Strike::TakeoverStatement(fault, p) => {
                    write!(f, "{sep}{}@take.{p}", fault.action().name())?
                }
                Strike::CloseStatement(fault, p) => {
                    write!(f, "{sep}{}@close.{p}", fault.action().name())?
                }
            }
        }
        Ok(())
    }
}

/// A plan that does not parse, said in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("worker plan {0:?} is not none or strikes pause@K, pause@K~J, kill@K, restart@K, slow@K, lapse@K, leave@K, db-crash:MODEL@K (MODEL: immediate, kill or kill-frozen), partition@K, ACTION@K.S or ACTION@K.Sr (ACTION: pause, kill, reset, drop or cut; S: a statement of request K, from 1, or for agentstore in-process kill@K.P, P a crash point of request K; r: after its reply), kill@take.S, reset@take.S, cut@take.S or pause@take.S right after a kill@K.S (S: a statement of the heir's takeover, or for agentstore in-process kill@take.P, P a crash point), kill@close.S, reset@close.S or cut@close.S right after a leave@K (S: a statement of the owner's close) joined by + (K: a step of the session's owner since its grant, 0 = right after it; J: the heir's step at which the paused owner wakes)")]
pub struct BadWorkerPlan(String);

impl FromStr for WorkerPlan {
    type Err = BadWorkerPlan;

    fn from_str(s: &str) -> Result<WorkerPlan, BadWorkerPlan> {
        let bad = || BadWorkerPlan(s.to_string());
        if s == "none" {
            return Ok(WorkerPlan::default());
        }
        let strikes = s
            .split('+')
            .map(|one| {
                let (kind, step) = one.split_once('@').ok_or_else(bad)?;
                type LeaseStrike = fn(LeaseFault, usize) -> Strike;
                let requests: [(&str, LeaseStrike); 2] = [
                    ("take.", Strike::TakeoverStatement),
                    ("close.", Strike::CloseStatement),
                ];
                let lease_request = requests
                    .into_iter()
                    .find_map(|(prefix, strike)| Some((step.strip_prefix(prefix)?, strike)));
                if let Some((p, strike)) = lease_request {
                    let digits = !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
                    let p = p.parse::<usize>().ok().filter(|&p| digits && p >= 1);
                    let fault = LeaseFault::parse(kind);
                    return Ok((strike(fault.ok_or_else(bad)?, p.ok_or_else(bad)?), 0));
                }
                if step.contains('.') {
                    let (strike, k) = StatementStrike::parse(kind, step).ok_or_else(bad)?;
                    return Ok((Strike::Statement(strike), k));
                }
                let (step, wake) = match step.split_once('~') {
                    Some((k, j)) if kind == "pause" => (k, Some(j.parse().map_err(|_| bad())?)),
                    Some(_) => return Err(bad()),
                    None => (step, None),
                };
                let after_step = step.parse().map_err(|_| bad())?;
                let strike = match kind.split_once(':') {
                    None if kind == "pause" => wake.map_or(Strike::Pause, Strike::PauseUntil),
                    None if kind == "kill" => Strike::Kill,
                    None if kind == "restart" => Strike::Restart,
                    None if kind == "partition" => Strike::Partition,
                    None if kind == "slow" => Strike::Slow,
                    None if kind == "lapse" => Strike::Lapse,
                    None if kind == "leave" => Strike::Leave,
                    Some(("db-crash", model)) => Strike::DbCrash(model.parse().map_err(|_| bad())?),
                    _ => return Err(bad()),
                };
                Ok((strike, after_step))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // A takeover kill names the heir of the kill at a point before it.
        let after_a_crash_point_kill = |i: usize| {
            i > 0
                && matches!(
                    strikes[i - 1].0,
                    Strike::CrashPoint(_)
                        | Strike::Statement(StatementStrike {
                            action: StatementAction::Kill,
                            after_reply: false,
                            ..
                        })
                )
        };
        // A close strike names the owner of the leave before it.
        let after_a_leave = |i: usize| i > 0 && strikes[i - 1].0 == Strike::Leave;
        if (0..strikes.len()).any(|i| match strikes[i].0 {
            Strike::TakeoverStatement(..) => !after_a_crash_point_kill(i),
            // A paused close would hold the session's row lock while the
            // next worker asks for it: not a strike the campaign makes.
            Strike::CloseStatement(LeaseFault::Pause, _) => true,
            Strike::CloseStatement(..) => !after_a_leave(i),
            _ => false,
        }) {
            return Err(bad());
        }
        Ok(WorkerPlan { strikes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_round_trip_and_bad_ones_are_named() {
        for p in [
            "none",
            "pause@0",
            "pause@7",
            "kill@12",
            "kill@3+kill@2",
            "pause@3+kill@0",
            "db-crash:immediate@4",
            "db-crash:kill-frozen@0+partition@3",
            "partition@2",
            "pause@3~1",
            "restart@4",
            "restart@2+pause@0~5",
            "slow@3",
            "lapse@0+leave@2",
            "leave@5",
            "pause@3.1",
            "kill@0.2r+drop@4.12",
            "reset@1.1r",
            "kill@3.2+kill@take.1",
            "kill@0.1+kill@take.12+kill@2",
            "kill@3.1+reset@take.10",
            "kill@3.1+cut@take.11+kill@1",
            "leave@3+cut@close.5",
            "leave@0+kill@close.1+pause@2",
            "kill@3.1+pause@take.6",
        ] {
            assert_eq!(p.parse::<WorkerPlan>().unwrap().to_string(), p);
        }
        for bad in [
            "",
            "pause",
            "pause@",
            "kill@x",
            "stop@1",
            "pause@-1",
            "kill@1+",
            "none+kill@1",
            "db-crash@3",
            "db-crash:stop@3",
            "partition:kill@1",
            "kill@3~1",
            "pause@3~",
            "pause@~1",
            "restart:x@1",
            "slow@3~1",
            "leave:x@1",
            "lapse@",
            "pause@3.0",
            "restart@3.1",
            "kill@3.1~2",
            "kill@take.1",
            "kill@3+kill@take.1",
            "kill@3.1r+kill@take.1",
            "pause@3.1+kill@take.1",
            "kill@3.1+kill@take.0",
            "kill@3.1+kill@take.",
            "kill@3.1+drop@take.1",
            "kill@3.1+cut@take.0",
            "reset@3.1+reset@take.1",
            "leave@3+pause@close.1",
            "pause@3.1+pause@take.1",
            "leave@3+reset@take.1",
            "kill@3.1+reset@close.1",
            "reset@close.1",
            "leave@3+cut@close.0",
            "kill@3.1+kill@take.+1",
        ] {
            let e = bad.parse::<WorkerPlan>().unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
        let needs = |p: &str| p.parse::<WorkerPlan>().unwrap().needs();
        assert_eq!(needs("none"), Needs::Processes);
        assert_eq!(needs("kill@1+db-crash:kill@2"), Needs::Database);
        assert_eq!(needs("partition@1+pause@0"), Needs::Network);
        assert_eq!(needs("pause@3.1"), Needs::Database);
    }

    #[test]
    fn each_fault_at_each_statement_follows_the_plan_by_statement() {
        let leave: WorkerPlan = "leave@3".parse().unwrap();
        let plans: Vec<String> = leave
            .then_each(
                Strike::CloseStatement,
                2,
                &[LeaseFault::Kill, LeaseFault::Cut],
            )
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(
            plans,
            [
                "leave@3+kill@close.1",
                "leave@3+cut@close.1",
                "leave@3+kill@close.2",
                "leave@3+cut@close.2"
            ]
        );
    }

    #[test]
    fn a_kill_at_a_point_is_a_crash_point_for_agentstore_and_prints_the_same() {
        let plan: WorkerPlan = "kill@3.1+pause@0.2+kill@2.4r+kill@0.3+kill@take.2"
            .parse()
            .unwrap();
        let points = plan.clone().at_crash_points();
        assert_eq!(points.to_string(), plan.to_string());
        let kinds: Vec<&str> = points.strikes().iter().map(|(s, _)| s.kind()).collect();
        assert_eq!(
            kinds,
            [
                "crash-point-kill",
                "statement-pause",
                "statement-kill",
                "crash-point-kill",
                "takeover-crash-point-kill"
            ]
        );
        assert!(points.strikes_crash_points());
        assert_eq!(points.needs(), Needs::Database);
        assert!(!plan.strikes_crash_points());
        let only: WorkerPlan = "kill@3.1".parse().unwrap();
        assert_eq!(only.at_crash_points().needs(), Needs::Processes);
        // A connection fault in the takeover has no crash point to be.
        let cut: WorkerPlan = "kill@3.1+cut@take.10".parse().unwrap();
        let cut = cut.at_crash_points();
        assert_eq!(cut.strikes()[1].0.kind(), "takeover-lost-reply");
        assert_eq!(cut.needs(), Needs::Database);
    }
}
