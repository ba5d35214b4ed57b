//! Statement strikes of the many-workers campaign (`pause@K.S`,
//! `kill@K.Sr`, `reset@K.S`, `drop@K.S`, `cut@K.S`, `--postgres` only):
//! each worker reaches the database through a proxy of its own
//! ([`crate::nemesis::pgproxy`]), which holds the statement the strike
//! names while the harness pauses, kills, resets, drops or loses its
//! reply there. Also
//! counts the statements of each request of a strike-free trial, from
//! which [`statement_plans`] enumerates every point.
//!
//! This module drives and records, like its parent; it must never judge.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::crashpoints::{AfterTakeover, TakeoverOutcome};
use super::{
    cluster_err, AcquireAnswer, Run, Served, State, StrikeRecord, TakeoverAt, Target, WorkersError,
    REPLY_TIMEOUT,
};
use crate::agent::worker::{WorkerCommand, WorkerReply};
use crate::history::WorkerEvent;
use crate::nemesis::pgproxy::{Held, Proxy, Release, StatementAction, StatementStrike};
use crate::nemesis::workers::{LeaseFault, Strike, WorkerPlan};
use agentstore_pg::cluster::{Cluster, LockWatch};

/// How often the harness looks whether the proxy holds the statement or
/// the request ended first (either is an observed state, never a timer).
const HOLD_POLL: Duration = Duration::from_millis(1);

/// Every worker's proxy to the cluster, started on a worker's first
/// connection (its DSN).
#[derive(Debug)]
pub(super) struct Proxies {
    dir: PathBuf,
    upstream: PathBuf,
    cluster_dsn: String,
    socket_dir: String,
    port: u16,
    by_worker: HashMap<usize, Proxy>,
}

impl Proxies {
    pub(super) fn new(cluster: &Cluster) -> Proxies {
        let port = cluster.port();
        Proxies {
            dir: cluster.socket_dir().join("proxy"),
            upstream: cluster.socket_dir().join(format!(".s.PGSQL.{port}")),
            cluster_dsn: cluster.dsn(),
            socket_dir: cluster.socket_dir().display().to_string(),
            port,
            by_worker: HashMap::new(),
        }
    }

    /// Worker `index`'s DSN: its own proxy's socket directory.
    pub(super) fn dsn(&mut self, index: usize) -> Result<String, WorkersError> {
        let dir = self.dir.join(format!("w{index}"));
        if !self.by_worker.contains_key(&index) {
            let proxy = Proxy::start(&dir, self.port, self.upstream.clone()).map_err(|e| {
                WorkersError::Harness(format!("cannot start w{index}'s database proxy: {e}"))
            })?;
            self.by_worker.insert(index, proxy);
        }
        Ok(self.cluster_dsn.replacen(
            &format!("host={}", self.socket_dir),
            &format!("host={}", dir.display()),
            1,
        ))
    }

    /// The statements every worker sent through its proxy, with the
    /// strikes that hit them (`struck`: each one's SQL text and whether it
    /// was after the reply).
    pub(super) fn coverage(&self, struck: &[(String, bool)]) -> StatementCoverage {
        let mut coverage = StatementCoverage::default();
        for proxy in self.by_worker.values() {
            for sql in proxy.statements() {
                coverage.by_sql.entry(sql).or_default().executed += 1;
            }
        }
        for (sql, after_reply) in struck {
            let u = coverage.by_sql.entry(sql.clone()).or_default();
            if *after_reply {
                u.struck_after += 1;
            } else {
                u.struck_before += 1;
            }
        }
        coverage
    }

    fn of(&self, index: usize) -> Result<&Proxy, WorkersError> {
        self.by_worker
            .get(&index)
            .ok_or_else(|| WorkersError::Harness(format!("w{index} has no database proxy")))
    }
}

/// Which of the store's statements a campaign ran, and which its strikes
/// hit: per SQL text (whitespace collapsed), through the proxies, so only
/// trials with a statement strike (or a count) add to it. Every trial
/// ends with the final logs' check, so a statement struck was observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatementCoverage {
    pub by_sql: BTreeMap<String, StatementUse>,
}

/// How often one statement ran, and was struck before it was sent or
/// after its reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatementUse {
    pub executed: usize,
    pub struck_before: usize,
    pub struck_after: usize,
}

impl StatementCoverage {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &StatementCoverage) {
        for (sql, u) in &other.by_sql {
            let mine = self.by_sql.entry(sql.clone()).or_default();
            mine.executed += u.executed;
            mine.struck_before += u.struck_before;
            mine.struck_after += u.struck_after;
        }
    }

    /// The statements struck before or after, of those that ran.
    pub fn struck(&self) -> usize {
        self.by_sql
            .values()
            .filter(|u| u.struck_before + u.struck_after > 0)
            .count()
    }
}

/// A worker whose statement is held by a pause or a drop, to be let go
/// (or, for a drop, its connection closed) once the session is finished.
pub(super) struct HeldStatement {
    worker: usize,
    action: StatementAction,
    command: WorkerCommand,
}

/// What became of a request sent with its proxy armed ([`Run::send_armed`]).
pub(super) enum Armed {
    /// The proxy holds the statement the strike names.
    Held(Held),
    /// The request ended first: its reply's line.
    Answered(String),
}

/// Every statement plan of `counts` (the statements of each request of a
/// session's owner, from [`super::strike_point_counts`]): each action before
/// each statement and after each reply but the request's last.
pub fn statement_plans(counts: &[usize]) -> Vec<WorkerPlan> {
    let mut plans = Vec::new();
    for (k, &n) in counts.iter().enumerate() {
        for s in 1..=n {
            for after_reply in [false, true].into_iter().filter(|&a| !a || s < n) {
                for action in StatementAction::ALL {
                    let strike = StatementStrike {
                        action,
                        statement: s,
                        after_reply,
                    };
                    plans.push(WorkerPlan::one(Strike::Statement(strike), k));
                }
            }
        }
    }
    plans
}

/// The statement plans `agentchaos workers --postgres` runs by default:
/// each action at least once, in the renewal before an effect (request 3:
/// before its first statement, and after its `BEGIN`'s reply) and in the
/// effect's commit (request 4, inside its transaction for the kill, the
/// reset and a pause once the session's row is locked, and at its
/// `COMMIT`, statement 7, for the reset and the lost reply); a drop
/// before the renewal, whose connection closes after another worker took
/// over, so the store reconnects as a fenced owner; and the heir of a kill
/// killed in its takeover, before its `COMMIT` (statement 10) and right
/// after it (11), its connection reset before that `COMMIT`, and the
/// `COMMIT`'s answer lost, and held inside its transaction (before its
/// log read, statement 6) while another worker takes the session over;
/// and the same two faults at the `COMMIT` of an owner's close
/// (statement 5).
pub fn sampled_statement_plans() -> Vec<WorkerPlan> {
    [
        "pause@3.1",
        "pause@3.1r",
        "pause@4.3",
        "kill@4.2",
        "reset@4.3",
        "reset@4.7",
        "cut@4.7",
        "drop@3.1",
        "drop@4.1",
        "kill@3.1+kill@take.10",
        "kill@3.1+kill@take.11",
        "kill@3.1+reset@take.10",
        "kill@3.1+cut@take.10",
        "kill@3.1+pause@take.6",
        "leave@3+reset@close.5",
        "leave@3+cut@close.5",
    ]
    .iter()
    .map(|p| p.parse().expect("a sampled plan parses"))
    .collect()
}

/// The `leave@K` whose close the close strikes hit: after the owner's
/// third step, mid-session.
pub fn leave_before_close() -> WorkerPlan {
    WorkerPlan::one(Strike::Leave, 3)
}

/// Each of `faults` at each of the `points` statements of the owner's
/// close in [`leave_before_close`] (from [`super::close_point_count`]):
/// `leave@3+kill@close.S`, ….
pub fn close_every_plans(points: usize, faults: &[LeaseFault]) -> Vec<WorkerPlan> {
    leave_before_close().then_each(Strike::CloseStatement, points, faults)
}

impl Run<'_> {
    pub(super) fn proxy(&self, worker: usize) -> Result<&Proxy, WorkersError> {
        self.db
            .as_deref()
            .and_then(|d| d.proxies.as_ref())
            .ok_or_else(|| WorkersError::Harness("a statement strike needs the proxies".into()))?
            .of(worker)
    }

    /// The harness's own connection to the cluster, to see a backend wait
    /// for a lock.
    fn lock_watch(&self) -> Result<LockWatch, WorkersError> {
        let db = self
            .db
            .as_deref()
            .ok_or_else(|| WorkersError::Harness("a statement strike needs the database".into()))?;
        db.cluster.lock_watch().map_err(cluster_err)
    }

    /// Starts a count of the strike points of the first session's owner's
    /// next request (a strike-free trial's count): arms its proxy for the
    /// statements; without a database, its crash points so far (the
    /// baseline [`Run::counted`] takes).
    pub(super) fn count_next(&mut self, worker: usize) -> Result<usize, WorkersError> {
        if self.db.is_none() {
            return self.crash_points_passed(worker);
        }
        self.proxy(worker)?.arm(None);
        Ok(0)
    }

    /// Sends `command` to `worker` with its proxy armed with `strike`, and
    /// waits until the proxy holds the statement it names or the request
    /// ended first (its reply's line; the proxy's count kept, disarmed).
    pub(super) fn send_armed(
        &mut self,
        worker: usize,
        strike: StatementStrike,
        command: &WorkerCommand,
    ) -> Result<Armed, WorkersError> {
        self.proxy(worker)?.arm(Some(strike));
        self.workers[worker].send(command)?;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            if let Some(held) = self.proxy(worker)?.held() {
                return Ok(Armed::Held(held));
            }
            if let Some(line) = self.workers[worker].answered() {
                self.proxy(worker)?.release(Release::Forward);
                return Ok(Armed::Answered(line));
            }
            if Instant::now() > deadline {
                return Err(self.workers[worker].broken(format!(
                    "neither a reply to {command:?} nor its statement {} within {}s",
                    strike.statement,
                    REPLY_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(HOLD_POLL);
        }
    }

    /// Kills the store process `held` before a statement (the connection's
    /// peer), so that the statement is never sent, and closes the held
    /// connection; the worker's own process is the caller's to kill.
    pub(super) fn kill_held_store(
        &mut self,
        worker: usize,
        held: Held,
    ) -> Result<(), WorkersError> {
        if let Some(peer) = held.peer {
            let _ = kill(Pid::from_raw(peer), Signal::SIGKILL);
        }
        self.proxy(worker)?.release(Release::Close);
        Ok(())
    }

    /// Sends `command` to `worker` with its proxy armed to hold the
    /// `statement`-th statement: the reply when the request ended first,
    /// or None when it got there and the harness killed the worker and
    /// its store process (a takeover's `kill@take.S`).
    pub(super) fn killed_before_statement(
        &mut self,
        worker: usize,
        statement: usize,
        command: &WorkerCommand,
    ) -> Result<Option<WorkerReply>, WorkersError> {
        let strike = StatementStrike {
            action: StatementAction::Kill,
            statement,
            after_reply: false,
        };
        match self.send_armed(worker, strike, command)? {
            Armed::Held(held) => {
                self.kill_held_store(worker, held)?;
                let w = &mut self.workers[worker];
                crate::child::kill_tree(w.child.id());
                let _ = w.child.wait();
                Ok(None)
            }
            Armed::Answered(line) => serde_json::from_str(&line).map(Some).map_err(|e| {
                self.workers[worker].broken(format!("unreadable reply {line:?}: {e}"))
            }),
        }
    }

    /// The statements `worker` sent, or the crash points it passed, since
    /// [`Run::count_next`] (which gave `baseline`).
    pub(super) fn counted(&self, worker: usize, baseline: usize) -> Result<usize, WorkersError> {
        if self.db.is_none() {
            return Ok(self.crash_points_passed(worker)? - baseline);
        }
        Ok(self.proxy(worker)?.count())
    }

    /// Carries out `strike` (`label`, as the plan spells it) in the
    /// first session's owner's next request, and with `takeover`
    /// (`ACTION@take.S` after a statement kill, and its label) that fault
    /// at statement S of the heir's takeover: what each hit, or why it did
    /// not fire.
    pub(super) fn statement_strike(
        &mut self,
        strike: StatementStrike,
        label: String,
        takeover: Option<(LeaseFault, usize, String)>,
        sessions: &mut [Served],
    ) -> Result<Vec<StrikeRecord>, WorkersError> {
        let not_reached = |takeover: Option<(LeaseFault, usize, String)>| {
            takeover.map(|(fault, q, label)| StrikeRecord {
                strike: Strike::TakeoverStatement(fault, q),
                label,
                fired: false,
                what: "the kill before it never fired: no takeover".to_string(),
            })
        };
        let Target {
            victim,
            name,
            id,
            steps,
        } = self.target(sessions);
        let point = format!(
            "{id} {} statement {} of its request {steps} of {name}",
            if strike.after_reply {
                "after the reply of"
            } else {
                "before"
            },
            strike.statement,
        );
        let command = WorkerCommand::Step {
            session: name.clone(),
        };
        let held = match self.send_armed(victim, strike, &command)? {
            Armed::Held(held) => held,
            Armed::Answered(line) => {
                // The request ended before the point.
                let count = self.proxy(victim)?.count();
                self.record_reply(victim, &name, &line, sessions)?;
                let mut records = vec![StrikeRecord {
                    strike: Strike::Statement(strike),
                    label,
                    fired: false,
                    what: format!("{point}: the request sent {count} statement(s)"),
                }];
                records.extend(not_reached(takeover));
                return Ok(records);
            }
        };
        let sql = self.proxy(victim)?.struck_statement();
        if held.locked && strike.action == StatementAction::Pause {
            let hit = self.pause_in_transaction(victim, &name, &point, command, sessions)?;
            if let Some(sql) = sql {
                self.struck_statements.push((sql, strike.after_reply));
            }
            return Ok(vec![StrikeRecord {
                strike: Strike::Statement(strike),
                label,
                fired: true,
                what: hit,
            }]);
        }
        if held.locked && strike.action == StatementAction::Drop {
            // A takeover would wait on the held transaction's row lock.
            self.proxy(victim)?.release(Release::Forward);
            let reply = self.workers[victim].receive(&command)?;
            self.record(victim, &name, reply, sessions);
            return Ok(vec![StrikeRecord {
                strike: Strike::Statement(strike),
                label,
                fired: false,
                what: format!(
                    "{point}: its transaction holds locks (it sent a statement since BEGIN: at least a share lock on each table it named, the session's row once locked) and a dropped round trip is let go only once the session is finished, which a takeover waiting for those locks never lets happen"
                ),
            }]);
        }
        let ttl_ms = self.cfg.longest_ttl();
        let mut takeover_records = Vec::new();
        let hit = match strike.action {
            StatementAction::Pause | StatementAction::Drop => {
                self.states[victim] = State::Paused;
                self.history
                    .push(WorkerEvent::Paused { worker: id.clone() });
                let heir = self.heir(victim)?;
                self.acquire(heir, &name, true, ttl_ms)?;
                sessions[0].owner = heir;
                sessions[0].steps = 0;
                self.held.push(HeldStatement {
                    worker: victim,
                    action: strike.action,
                    command,
                });
                let what = match strike.action {
                    StatementAction::Pause => "held",
                    _ => "dropped (connection left open)",
                };
                format!("{what} {point}; {} took it over", self.workers[heir].id)
            }
            StatementAction::Kill => {
                self.kill_held_store(victim, held)?;
                match takeover {
                    None => {
                        let (_, hit) = self.strike(Strike::Kill, &label, None, sessions)?;
                        format!("held {point}, then {hit} (and its store process)")
                    }
                    Some((fault, q, takeover_label)) => {
                        self.kill_with_its_store(victim);
                        let (records, took) = self.take_over_after_kill(
                            victim,
                            Some((TakeoverAt::Statement(fault, q), takeover_label)),
                            sessions,
                        )?;
                        takeover_records = records;
                        format!("held {point}, then killed {id} and its store process; {took}")
                    }
                }
            }
            StatementAction::Reset | StatementAction::Cut => {
                let (release, what) = match strike.action {
                    StatementAction::Reset => (Release::Close, "reset the connection of"),
                    _ => (
                        Release::LoseReply,
                        "sent and lost the server's answer, then reset the connection, of",
                    ),
                };
                self.proxy(victim)?.release(release);
                let reply = self.workers[victim].receive(&command)?;
                let refused = matches!(reply, WorkerReply::Failed { .. });
                let more = self.record(victim, &name, reply, sessions);
                // A store that reconnects answers the request itself; one
                // that does not refuses it, and the worker asks again: a
                // new grant at a new epoch.
                if refused {
                    if let Err(reply) = self.acquire_or_refused(victim, &name, true, ttl_ms)? {
                        return Err(WorkersError::Store(format!(
                            "{id}: after the reset the store did not grant {name} again: {reply:?}"
                        )));
                    }
                    sessions[0].steps = 0;
                    sessions[0].finished = false;
                    format!("{what} {point}; the store refused the request and {id} asked for {name} again")
                } else if more {
                    format!("{what} {point}; the store reconnected and answered the request")
                } else {
                    format!("{what} {point}; the store reconnected and answered that the worker has nothing more to do for {name}")
                }
            }
        };
        if let Some(sql) = sql {
            self.struck_statements.push((sql, strike.after_reply));
        }
        let mut records = vec![StrikeRecord {
            strike: Strike::Statement(strike),
            label,
            fired: true,
            what: hit,
        }];
        records.extend(takeover_records);
        Ok(records)
    }

    /// Arms `heir`'s proxy with `fault` at statement `q` and sends its
    /// takeover of the first session, `victim`'s, once the victim's lease
    /// has surely expired (as for a kill in the takeover, so that the try
    /// the strike lands in is the granted one): the held statement, or
    /// the reply when the takeover ended first.
    fn armed_takeover(
        &mut self,
        victim: usize,
        heir: usize,
        fault: LeaseFault,
        q: usize,
        label: &str,
        sessions: &[Served],
    ) -> Result<(WorkerCommand, Result<Held, WorkerReply>), WorkersError> {
        if sessions[0].owner != victim || sessions[0].finished {
            return Err(WorkersError::Harness(format!(
                "{label}: the first session is not the killed owner's to take over"
            )));
        }
        std::thread::sleep(Duration::from_millis(self.cfg.longest_ttl()));
        let strike = StatementStrike {
            action: fault.action(),
            statement: q,
            after_reply: false,
        };
        let acquire = WorkerCommand::Acquire {
            session: sessions[0].name.clone(),
        };
        let armed = match self.send_armed(heir, strike, &acquire)? {
            Armed::Held(held) => {
                if let Some(sql) = self.proxy(heir)?.struck_statement() {
                    self.struck_statements.push((sql, false));
                }
                Ok(held)
            }
            Armed::Answered(line) => Err(serde_json::from_str(&line).map_err(|e| {
                self.workers[heir].broken(format!("unreadable reply {line:?}: {e}"))
            })?),
        };
        Ok((acquire, armed))
    }

    /// `reply`, `heir`'s answer to its takeover of the first session:
    /// granted, it owns the session; refused, it asks again, as a real
    /// worker would, and a second refusal is recorded for the checker (a
    /// crash must not cost the session: it is finished, and the checker
    /// judges what it left). Where that left the session, and whether the
    /// heir had to ask again.
    fn granted_or_asked_again(
        &mut self,
        heir: usize,
        reply: WorkerReply,
        sessions: &mut [Served],
    ) -> Result<(AfterTakeover, bool), WorkersError> {
        let name = sessions[0].name.clone();
        let passed = self.proxy(heir)?.count();
        let (granted, again) = match self.answer_to_acquire(heir, &name, reply, true)? {
            AcquireAnswer::Granted => (Ok(()), false),
            AcquireAnswer::Held(_) | AcquireAnswer::Refused(_) => {
                let ttl_ms = self.cfg.longest_ttl();
                (self.acquire_or_refused(heir, &name, true, ttl_ms)?, true)
            }
        };
        let then = match granted {
            Ok(()) => {
                sessions[0].owner = heir;
                sessions[0].steps = 0;
                AfterTakeover::TookOver { passed }
            }
            Err(reply) => {
                sessions[0].finished = true;
                AfterTakeover::Refused(format!("{name}: {reply:?}"))
            }
        };
        Ok((then, again))
    }

    /// Carries out `reset@take.Q` or `cut@take.Q` (`label`): the heir's
    /// takeover of the first session with its proxy armed at statement
    /// `q` ([`Run::armed_takeover`]), the heir alive: a store that
    /// reconnects answers the request itself; one that refuses it is
    /// asked again ([`Run::granted_or_asked_again`]). What it hit, and
    /// where it left the session.
    pub(super) fn takeover_connection_fault(
        &mut self,
        victim: usize,
        heir: usize,
        fault: LeaseFault,
        q: usize,
        label: String,
        sessions: &mut [Served],
    ) -> Result<TakeoverOutcome, WorkersError> {
        let heir_id = self.workers[heir].id.clone();
        let name = sessions[0].name.clone();
        let (acquire, armed) = self.armed_takeover(victim, heir, fault, q, &label, sessions)?;
        let (release, what) = match fault {
            LeaseFault::Reset => (Release::Close, "reset the connection of"),
            _ => (
                Release::LoseReply,
                "sent and lost the server's answer, then reset the connection, of",
            ),
        };
        let (fired, reply) = match armed {
            Err(reply) => (false, reply),
            Ok(_) => {
                self.proxy(heir)?.release(release);
                (true, self.workers[heir].receive(&acquire)?)
            }
        };
        let (then, again) = self.granted_or_asked_again(heir, reply, sessions)?;
        let how = match (&then, again) {
            (AfterTakeover::TookOver { .. }, false) if fired => {
                "the store reconnected and granted it".to_string()
            }
            (AfterTakeover::TookOver { .. }, false) => "it took the session over".to_string(),
            (AfterTakeover::TookOver { .. }, true) => {
                format!("the store refused the request, {heir_id} asked again and the store granted it")
            }
            _ => format!("the store refused the request, {heir_id} asked again and the store refused it again"),
        };
        let what = if fired {
            format!("{what} {heir_id} before statement {q} of its takeover of {name}; {how}")
        } else {
            let passed = self.proxy(heir)?.count();
            format!(
                "{heir_id}'s takeover of {name} sent {passed} statement(s), none the {q}-th; {how}"
            )
        };
        Ok(TakeoverOutcome {
            record: StrikeRecord {
                strike: Strike::TakeoverStatement(fault, q),
                label,
                fired,
                what,
            },
            then,
        })
    }

    /// Carries out `pause@take.Q` (`label`): the heir's takeover of the
    /// first session with its proxy holding statement `q`
    /// ([`Run::armed_takeover`]), while the next worker takes the session
    /// over: two takeovers at once. Held inside the takeover's
    /// transaction once it holds locks, as a write would be
    /// ([`Run::pause_in_transaction`]); held before, the heir's statement
    /// is let go once the session is finished. What it hit, and where it
    /// left the session.
    pub(super) fn takeover_pause(
        &mut self,
        victim: usize,
        heir: usize,
        q: usize,
        label: String,
        sessions: &mut [Served],
    ) -> Result<TakeoverOutcome, WorkersError> {
        let heir_id = self.workers[heir].id.clone();
        let name = sessions[0].name.clone();
        let (acquire, armed) =
            self.armed_takeover(victim, heir, LeaseFault::Pause, q, &label, sessions)?;
        let record = |fired, what| StrikeRecord {
            strike: Strike::TakeoverStatement(LeaseFault::Pause, q),
            label: label.clone(),
            fired,
            what,
        };
        let held = match armed {
            Ok(held) => held,
            Err(reply) => {
                let passed = self.proxy(heir)?.count();
                let (then, _) = self.granted_or_asked_again(heir, reply, sessions)?;
                let what = format!(
                    "{heir_id}'s takeover of {name} sent {passed} statement(s), none the {q}-th"
                );
                return Ok(TakeoverOutcome {
                    record: record(false, what),
                    then,
                });
            }
        };
        let point = format!("{heir_id} before statement {q} of its takeover of {name}");
        let what = if held.locked {
            self.pause_in_transaction(heir, &name, &point, acquire, sessions)?
        } else {
            self.states[heir] = State::Paused;
            self.history.push(WorkerEvent::Paused {
                worker: heir_id.clone(),
            });
            let next = self.heir(heir)?;
            self.acquire(next, &name, true, self.cfg.longest_ttl())?;
            sessions[0].owner = next;
            sessions[0].steps = 0;
            self.held.push(HeldStatement {
                worker: heir,
                action: StatementAction::Pause,
                command: acquire,
            });
            format!("held {point}; {} took it over", self.workers[next].id)
        };
        Ok(TakeoverOutcome {
            record: record(true, what),
            then: AfterTakeover::Paused {
                next: sessions[0].owner,
            },
        })
    }

    /// A pause inside a transaction that holds locks (`pause@K.S` after
    /// its `BEGIN` and a statement): the heir asks for the session while
    /// the owner's transaction is open. A takeover that locks what the
    /// held transaction locked (the session's row) waits for it, which the
    /// server shows (the heir's backend waits for a lock): the owner is let
    /// go first, its write ends before the takeover, and its next write
    /// is the zombie's. A takeover that does not wait is granted while the
    /// owner's transaction is open; the owner is let go after, and its
    /// write ends after the newer grant. Either order is what the store
    /// did, and the history records it as such.
    fn pause_in_transaction(
        &mut self,
        victim: usize,
        name: &str,
        point: &str,
        command: WorkerCommand,
        sessions: &mut [Served],
    ) -> Result<String, WorkersError> {
        let id = self.workers[victim].id.clone();
        self.states[victim] = State::Paused;
        self.history
            .push(WorkerEvent::Paused { worker: id.clone() });
        let heir = self.heir(victim)?;
        let heir_id = self.workers[heir].id.clone();
        let ttl_ms = self.cfg.longest_ttl();
        let mut watch = self.lock_watch()?;
        let acquire = WorkerCommand::Acquire {
            session: name.to_string(),
        };
        let deadline = Instant::now() + Duration::from_millis(ttl_ms) + REPLY_TIMEOUT;
        let waited = loop {
            self.workers[heir].send(&acquire)?;
            let reply = loop {
                if let Some(line) = self.workers[heir].answered() {
                    break Some(line);
                }
                if watch.waiting().map_err(cluster_err)? > 0 {
                    break None;
                }
                if Instant::now() > deadline {
                    return Err(self.workers[heir].broken(format!(
                        "neither a reply to {acquire:?} nor a wait for the held transaction's locks within {}s",
                        REPLY_TIMEOUT.as_secs()
                    )));
                }
                std::thread::sleep(HOLD_POLL);
            };
            let Some(line) = reply else { break true };
            let reply: WorkerReply = serde_json::from_str(&line).map_err(|e| {
                self.workers[heir].broken(format!("unreadable reply {line:?}: {e}"))
            })?;
            match self.answer_to_acquire(heir, name, reply, true)? {
                AcquireAnswer::Held(_) => std::thread::sleep(super::ACQUIRE_POLL),
                AcquireAnswer::Granted => break false,
                AcquireAnswer::Refused(other) => return Err(self.not_granted(heir, name, &other)),
            }
        };
        self.proxy(victim)?.release(Release::Forward);
        let reply = self.workers[victim].receive(&command)?;
        self.states[victim] = State::Running;
        self.history
            .push(WorkerEvent::Resumed { worker: id.clone() });
        let more = self.record_held_reply(victim, name, &command, reply)?;
        if waited {
            // The takeover went on once the owner's transaction ended.
            let reply = self.workers[heir].receive(&acquire)?;
            match self.answer_to_acquire(heir, name, reply, true)? {
                AcquireAnswer::Granted => {}
                AcquireAnswer::Held(_) => self.acquire(heir, name, true, ttl_ms)?,
                AcquireAnswer::Refused(other) => return Err(self.not_granted(heir, name, &other)),
            }
        }
        sessions[0].owner = heir;
        sessions[0].steps = 0;
        sessions[0].finished = false;
        // The zombie writes on, as a real one would, until it is refused.
        if more {
            self.finish(victim, name)?;
        }
        Ok(if waited {
            format!("held {point}, inside its transaction; {heir_id}'s takeover waited for its locks, so it was let go first, then {heir_id} took the session over")
        } else {
            format!("held {point}, inside its transaction; {heir_id} took the session over meanwhile, then it was let go")
        })
    }

    /// Lets every held statement go (a drop: closes its connection)
    /// once the first session is finished; each worker records its reply.
    pub(super) fn let_go(&mut self) -> Result<(), WorkersError> {
        for held in std::mem::take(&mut self.held) {
            let release = match held.action {
                StatementAction::Drop => Release::Close,
                _ => Release::Forward,
            };
            self.proxy(held.worker)?.release(release);
            let reply = self.workers[held.worker].receive(&held.command)?;
            self.states[held.worker] = State::Running;
            self.history.push(WorkerEvent::Resumed {
                worker: self.workers[held.worker].id.clone(),
            });
            let (WorkerCommand::Step { session } | WorkerCommand::Acquire { session }) =
                &held.command
            else {
                continue;
            };
            let session = session.clone();
            let more = self.record_held_reply(held.worker, &session, &held.command, reply)?;
            // A statement the store accepted: the zombie writes on.
            if more {
                self.finish(held.worker, &session)?;
            }
        }
        Ok(())
    }

    /// Records `worker`'s reply to `command`, held and let go: a
    /// takeover's as [`Run::answer_to_acquire`] does (a grant with what it
    /// served), a step's as it came. True when the worker has more to
    /// write: a step accepted, a takeover granted.
    fn record_held_reply(
        &mut self,
        worker: usize,
        session: &str,
        command: &WorkerCommand,
        reply: WorkerReply,
    ) -> Result<bool, WorkersError> {
        if let WorkerCommand::Acquire { .. } = command {
            let answer = self.answer_to_acquire(worker, session, reply, false)?;
            return Ok(matches!(answer, AcquireAnswer::Granted));
        }
        let more = reply.accepted();
        self.history.push(WorkerEvent::Replied {
            worker: self.workers[worker].id.clone(),
            session: session.to_string(),
            reply,
        });
        Ok(more)
    }

    fn record_reply(
        &mut self,
        worker: usize,
        session: &str,
        line: &str,
        sessions: &mut [Served],
    ) -> Result<(), WorkersError> {
        let reply: WorkerReply = serde_json::from_str(line)
            .map_err(|e| self.workers[worker].broken(format!("unreadable reply {line:?}: {e}")))?;
        self.record(worker, session, reply, sessions);
        Ok(())
    }

    /// Records `worker`'s reply to a step of the first session: true while
    /// it has more to do.
    pub(super) fn record(
        &mut self,
        worker: usize,
        session: &str,
        reply: WorkerReply,
        sessions: &mut [Served],
    ) -> bool {
        let more = reply.accepted();
        self.history.push(WorkerEvent::Replied {
            worker: self.workers[worker].id.clone(),
            session: session.to_string(),
            reply,
        });
        sessions[0].steps += 1;
        sessions[0].finished = !more;
        more
    }
}
