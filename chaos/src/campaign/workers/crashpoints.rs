//! Crash-point strikes of the many-workers campaign (`kill@K.P`, agentstore
//! in-process only): the first session's owner arms a kill at the P-th
//! crash point its store passes from the start of request K
//! ([`agentstore::crashpoint::kill_in`]) and dies there by its own SIGKILL,
//! inside one append, renewal or recovery; the next worker takes over every
//! session it owned once its lease expired; with `kill@take.Q` after it,
//! that worker dies at crash point Q of its takeover, and the one after
//! takes over from both. Every worker of such a trial
//! traces its crash points (`AGENTCHAOS_TRACE`): the trace names the point
//! hit, or counts the points of a request that ended before it.
//!
//! This module drives and records, like its parent; it must never judge.

use std::num::NonZeroU64;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::mpsc::RecvTimeoutError;

use nix::sys::signal::Signal;

use super::{
    Acquired, KillAt, Run, Served, State, StrikeRecord, TakeoverAt, Target, Worker, WorkersError,
    REPLY_TIMEOUT,
};
use crate::agent::worker::{WorkerCommand, WorkerReply};
use crate::history::WorkerEvent;
use crate::nemesis::pgproxy::{StatementAction, StatementStrike};
use crate::nemesis::workers::{LeaseFault, Strike, WorkerPlan};

/// The crash-point plans `agentchaos workers` runs by default for
/// agentstore in-process: inside the first write (`run_started`: its log
/// write after the pre-allocation, then its fdatasync, the line written
/// but not acknowledged), inside the renewal before the first effect (its
/// temp file not yet written, then before its rename, then before its
/// directory fsync: renewed on disk, never reported), inside an effect's
/// commit before its fdatasync, in the heir's own renewal before the
/// effect it runs again after taking over, and inside the heir's takeover
/// (its lease record half written; its first orphan's mark written, not
/// yet synced), so that a third worker takes over from both.
pub fn crash_point_plans() -> Vec<WorkerPlan> {
    [
        "kill@0.2",
        "kill@0.3",
        "kill@3.1",
        "kill@3.3",
        "kill@3.4",
        "kill@4.2",
        "kill@3.2+kill@3.1",
        "kill@3.1+kill@take.1",
        "kill@3.1+kill@take.12",
    ]
    .iter()
    .map(|p| {
        p.parse::<WorkerPlan>()
            .expect("a sampled plan parses")
            .at_crash_points()
    })
    .collect()
}

/// Every crash-point plan of `counts` (the crash points of each request
/// of a session's owner, from [`super::strike_point_counts`]): a kill at
/// each point of each request, `kill@K.P`.
pub fn crash_point_every_plans(counts: &[usize]) -> Vec<WorkerPlan> {
    counts
        .iter()
        .enumerate()
        .flat_map(|(k, &n)| (1..=n).map(move |p| WorkerPlan::one(Strike::CrashPoint(p), k)))
        .collect()
}

/// The owner's kill every takeover kill of `--every-point` and
/// `--every-statement` follows (`kill@3.1`, spelled as a statement kill:
/// [`WorkerPlan::at_crash_points`] makes it agentstore's): inside its
/// renewal before the first effect, so that the heir's takeover has an
/// interrupted run to close and a call to mark.
pub fn kill_before_takeover() -> WorkerPlan {
    WorkerPlan::one(
        Strike::Statement(StatementStrike {
            action: StatementAction::Kill,
            statement: 1,
            after_reply: false,
        }),
        3,
    )
}

/// Each of `faults` at each of the `points` strike points of the heir's
/// takeover after [`kill_before_takeover`] (from
/// [`super::takeover_point_count`]): `kill@3.1+kill@take.Q`, …, spelled
/// as statement strikes (for agentstore in-process, kills only, and
/// [`WorkerPlan::at_crash_points`] of each).
pub fn takeover_every_plans(points: usize, faults: &[LeaseFault]) -> Vec<WorkerPlan> {
    kill_before_takeover().then_each(Strike::TakeoverStatement, points, faults)
}

/// What an `ACTION@take.Q` came to.
pub(super) struct TakeoverOutcome {
    pub(super) record: StrikeRecord,
    pub(super) then: AfterTakeover,
}

/// Where a takeover with a strike armed in it left the session.
pub(super) enum AfterTakeover {
    /// The heir died inside it; `next` takes over from both.
    Killed { next: usize },
    /// It ended before the point, having `passed` crash points: the heir
    /// holds the session.
    TookOver { passed: usize },
    /// The store refused it (the session is finished; why, in words).
    Refused(String),
    /// The heir was paused inside it and `next` took the session over.
    Paused { next: usize },
}

/// The crash point a trace file names last: where its worker died.
fn last_point(path: &Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.lines().last().map(str::to_string))
        .unwrap_or_default()
}

/// The lines of a trace file (0 when there is none yet).
fn trace_lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

impl Worker {
    /// The reply to `command`, sent before, or None when the worker died
    /// of SIGKILL (its own, at an armed crash point) before replying.
    pub(super) fn reply_or_killed(
        &mut self,
        command: &WorkerCommand,
    ) -> Result<Option<WorkerReply>, WorkersError> {
        match self.lines.recv_timeout(REPLY_TIMEOUT) {
            Err(RecvTimeoutError::Disconnected) => {
                let status = self
                    .child
                    .wait()
                    .map_err(|e| self.broken(format!("cannot reap it: {e}")))?;
                if status.signal() == Some(Signal::SIGKILL as i32) {
                    Ok(None)
                } else {
                    Err(self.broken(format!(
                        "it exited ({status}) before replying to {command:?}"
                    )))
                }
            }
            Ok(Ok(line)) => serde_json::from_str(&line)
                .map(Some)
                .map_err(|e| self.broken(format!("unreadable reply {line:?}: {e}"))),
            Ok(Err(e)) => Err(self.broken(format!("cannot read its reply: {e}"))),
            Err(RecvTimeoutError::Timeout) => Err(self.broken(format!(
                "no reply to {command:?} within {}s",
                REPLY_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Arms (or with None disarms) its kill at a crash point.
    pub(super) fn kill_at(&mut self, point: Option<NonZeroU64>) -> Result<(), WorkersError> {
        let command = WorkerCommand::KillAt { point };
        match self.call(&command)? {
            WorkerReply::Armed => Ok(()),
            other => Err(self.broken(format!("{command:?} answered {other:?}"))),
        }
    }
}

impl Run<'_> {
    /// The crash points `worker` has passed so far (its trace's lines).
    pub(super) fn crash_points_passed(&self, worker: usize) -> Result<usize, WorkersError> {
        let w = &self.workers[worker];
        let trace = w
            .trace
            .as_ref()
            .ok_or_else(|| WorkersError::Harness(format!("{} traces no crash points", w.id)))?;
        Ok(trace_lines(trace))
    }

    /// Carries out `kill@K.P` (`label`) at crash point `point` of the first
    /// session's owner's next request, and with `takeover` (`kill@take.Q`
    /// and its label) a kill at crash point Q of the heir's takeover: what
    /// each hit, or why it did not fire.
    pub(super) fn crash_point_strike(
        &mut self,
        point: usize,
        label: String,
        takeover: Option<(usize, String)>,
        sessions: &mut [Served],
    ) -> Result<Vec<StrikeRecord>, WorkersError> {
        let Target {
            victim,
            name,
            id,
            steps,
        } = self.target(sessions);
        let at = format!("{id} at crash point {point} of its request {steps} of {name}");
        let trace = self.workers[victim]
            .trace
            .clone()
            .ok_or_else(|| WorkersError::Harness(format!("{id} traces no crash points")))?;
        let before = trace_lines(&trace);
        let nth = NonZeroU64::new(point as u64)
            .ok_or_else(|| WorkersError::Harness(format!("{label}: crash points count from 1")))?;
        self.workers[victim].kill_at(Some(nth))?;
        let command = WorkerCommand::Step {
            session: name.clone(),
        };
        self.workers[victim].send(&command)?;
        if let Some(reply) = self.workers[victim].reply_or_killed(&command)? {
            // The request ended before the point.
            let passed = trace_lines(&trace) - before;
            self.workers[victim].kill_at(None)?;
            self.record(victim, &name, reply, sessions);
            let mut records = vec![StrikeRecord {
                strike: Strike::CrashPoint(point),
                label,
                fired: false,
                what: format!("{at}: the request passed {passed} crash point(s)"),
            }];
            records.extend(takeover.map(|(q, label)| StrikeRecord {
                strike: Strike::TakeoverCrashPoint(q),
                label,
                fired: false,
                what: "the kill before it never fired: no takeover".to_string(),
            }));
            return Ok(records);
        }
        let hit = last_point(&trace);
        self.states[victim] = State::Killed;
        self.history
            .push(WorkerEvent::Killed { worker: id.clone() });
        let takeover = match takeover {
            Some((q, label)) => {
                let nth = NonZeroU64::new(q as u64).ok_or_else(|| {
                    WorkersError::Harness(format!("{label}: crash points count from 1"))
                })?;
                Some((TakeoverAt::CrashPoint(nth), label))
            }
            None => None,
        };
        let (mut records, took) = self.take_over_after_kill(victim, takeover, sessions)?;
        records.insert(
            0,
            StrikeRecord {
                strike: Strike::CrashPoint(point),
                label,
                fired: true,
                what: format!("killed {at} ({hit}); {took}"),
            },
        );
        Ok(records)
    }

    /// After `victim`'s kill, its heir takes over every session it owned
    /// once its lease expired; with `takeover` (where, and the
    /// `ACTION@take.Q` label) the heir is struck at that point of its first
    /// takeover (killed: the next worker takes over from both). The
    /// takeover strike's record, if any, and what became of the sessions,
    /// in words.
    pub(super) fn take_over_after_kill(
        &mut self,
        victim: usize,
        takeover: Option<(TakeoverAt, String)>,
        sessions: &mut [Served],
    ) -> Result<(Vec<StrikeRecord>, String), WorkersError> {
        let mut records = Vec::new();
        let mut heir = self.heir(victim)?;
        // The workers whose sessions the heir takes over: the victim, and
        // an heir killed inside its takeover.
        let mut dead = vec![victim];
        let (mut taken, mut refused) = (0, Vec::new());
        if let Some((at, takeover_label)) = takeover {
            let outcome = self.takeover_strike(victim, heir, at, takeover_label, sessions)?;
            records.push(outcome.record);
            match outcome.then {
                AfterTakeover::Killed { next } => {
                    dead.push(heir);
                    heir = next;
                }
                AfterTakeover::TookOver { passed } => {
                    taken += 1;
                    if let Some(counts) = self.counts.as_mut() {
                        counts.takeover = Some(passed);
                    }
                }
                AfterTakeover::Refused(why) => refused.push(why),
                AfterTakeover::Paused { next } => {
                    taken += 1;
                    heir = next;
                }
            }
        }
        let heir_id = self.workers[heir].id.clone();
        let ttl_ms = self.cfg.longest_ttl();
        for s in sessions
            .iter_mut()
            .filter(|s| dead.contains(&s.owner) && !s.finished)
        {
            match self.acquire_or_refused(heir, &s.name, true, ttl_ms)? {
                Ok(()) => {
                    s.owner = heir;
                    s.steps = 0;
                    taken += 1;
                }
                // A crash must not cost the session: the refusal is
                // recorded, and the checker judges what it left.
                Err(reply) => {
                    s.finished = true;
                    refused.push(format!("{}: {reply:?}", s.name));
                }
            }
        }
        let mut took = format!("{heir_id} took its {taken} session(s) over");
        if !refused.is_empty() {
            took.push_str(&format!(
                "; the store refused {heir_id} {}",
                refused.join(", ")
            ));
        }
        Ok((records, took))
    }

    /// Carries out `ACTION@take.Q` (`label`): `heir` takes over the first
    /// of `victim`'s unfinished sessions with the strike armed `at` its
    /// point (a kill: of each try, `try_acquire`): what it hit, and where
    /// it left the session.
    fn takeover_strike(
        &mut self,
        victim: usize,
        heir: usize,
        at: TakeoverAt,
        label: String,
        sessions: &mut [Served],
    ) -> Result<TakeoverOutcome, WorkersError> {
        let heir_id = self.workers[heir].id.clone();
        let (strike, unit, q, at) = match at {
            TakeoverAt::CrashPoint(p) => {
                let q = p.get() as usize;
                (
                    Strike::TakeoverCrashPoint(q),
                    "crash point",
                    q,
                    KillAt::CrashPoint(p),
                )
            }
            TakeoverAt::Statement(LeaseFault::Kill, q) => (
                Strike::TakeoverStatement(LeaseFault::Kill, q),
                "statement",
                q,
                KillAt::Statement(q),
            ),
            TakeoverAt::Statement(LeaseFault::Pause, q) => {
                return self.takeover_pause(victim, heir, q, label, sessions)
            }
            TakeoverAt::Statement(fault, q) => {
                return self.takeover_connection_fault(victim, heir, fault, q, label, sessions)
            }
        };
        let record = |fired, what| StrikeRecord {
            strike,
            label: label.clone(),
            fired,
            what,
        };
        let Some(s) = sessions
            .iter_mut()
            .find(|s| s.owner == victim && !s.finished)
        else {
            return Err(WorkersError::Harness(format!(
                "{label}: the killed owner has no session left to take over"
            )));
        };
        let name = s.name.clone();
        // Agentstore's crash points are in the worker's trace; statements
        // are counted by its proxy, from its last try's arming.
        let trace = match at {
            KillAt::CrashPoint(_) => Some(self.workers[heir].trace.clone().ok_or_else(|| {
                WorkersError::Harness(format!("{heir_id} traces no crash points"))
            })?),
            KillAt::Statement(_) => None,
        };
        let before = trace.as_deref().map_or(0, trace_lines);
        let ttl_ms = self.cfg.longest_ttl();
        if matches!(at, KillAt::Statement(_)) {
            // A refused try sends statements too (the lookup, the lock, its
            // ROLLBACK): the victim's lease, last renewed before its kill,
            // is waited out first, so that the try the kill lands in is the
            // granted one, and statement Q the same one in every run.
            std::thread::sleep(std::time::Duration::from_millis(ttl_ms));
        }
        let (record, then) = match self.try_acquire(heir, &name, true, ttl_ms, Some(at))? {
            Acquired::Killed => {
                let hit = match &trace {
                    Some(trace) => last_point(trace),
                    None => {
                        let sql = self.proxy(heir)?.struck_statement().unwrap_or_default();
                        self.struck_statements.push((sql.clone(), false));
                        sql
                    }
                };
                self.states[heir] = State::Killed;
                self.history.push(WorkerEvent::Killed {
                    worker: heir_id.clone(),
                });
                let next = self.heir(heir)?;
                let what = format!(
                    "killed {heir_id} at {unit} {q} of its takeover of {name} ({hit}); {} takes over",
                    self.workers[next].id
                );
                (record(true, what), AfterTakeover::Killed { next })
            }
            Acquired::Granted => {
                let passed = match &trace {
                    Some(trace) => trace_lines(trace) - before,
                    None => self.proxy(heir)?.count(),
                };
                s.owner = heir;
                s.steps = 0;
                let what = format!(
                    "{heir_id}'s takeover of {name} passed {passed} {unit}(s), none the {q}-th: it took the session over"
                );
                (record(false, what), AfterTakeover::TookOver { passed })
            }
            // A crash must not cost the session: the refusal is recorded,
            // and the checker judges what it left.
            Acquired::Refused(other) => {
                s.finished = true;
                let what = format!("the store refused {heir_id}'s takeover of {name}");
                let why = format!("{name}: {other:?}");
                (record(false, what), AfterTakeover::Refused(why))
            }
        };
        Ok(TakeoverOutcome { record, then })
    }
}
