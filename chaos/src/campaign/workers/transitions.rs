//! The lease transitions of a live owner under strikes (`slow@K`,
//! `lapse@K`, `leave@K`): a slow owner whose lease lapses while it runs
//! and another worker takes over, a second process under the owner's
//! worker id taking the session back, a graceful release by an
//! acknowledged close, struck at one of its statements
//! (`leave@K+ACTION@close.S`, `--postgres`). This module carries them
//! out and records what the store replied; it must never judge (the
//! checker, [`crate::check::workers`], does).

use super::statements::Armed;
use super::{Run, Served, State, StrikeRecord, Target, Worker, WorkersError};
use crate::agent::worker::{WorkerCommand, WorkerReply};
use crate::history::WorkerEvent;
use crate::nemesis::pgproxy::{Release, StatementStrike};
use crate::nemesis::workers::{LeaseFault, Strike};

impl Run<'_> {
    /// `slow@K`: `victim`, the first session's owner (`at`: who and where,
    /// in words), is sent nothing while its lease lapses (the heir's open
    /// is refused until then by the store's clock); the heir takes the
    /// session over, and the slow owner's next write goes while the heir
    /// holds it: it must be fenced. Fenced, it closes the session and asks
    /// again at once (refused while the heir's lease lives).
    pub(super) fn slow(
        &mut self,
        victim: usize,
        at: &str,
        sessions: &mut [Served],
    ) -> Result<String, WorkersError> {
        let heir = self.heir(victim)?;
        self.take_over_from_live(heir, victim, sessions)?;
        self.close_if_fenced(victim, sessions)?;
        Ok(format!(
            "let the lease of {at} lapse while it ran; {} took it over, then the slow owner wrote",
            self.workers[heir].id
        ))
    }

    /// `lapse@K`: `victim`'s lease lapses while it runs on; a second
    /// process under its worker id (a supervisor that took the first for
    /// hung), recorded as `ID#2`, takes the session back; then the first
    /// one's next write goes: it must be fenced.
    pub(super) fn lapse(
        &mut self,
        victim: usize,
        at: &str,
        sessions: &mut [Served],
    ) -> Result<String, WorkersError> {
        let first = self.workers[victim].id.clone();
        let mut second = Worker::start(self.cfg, self.dirs, self.db.as_deref_mut(), victim)?;
        second.id = format!("{first}#2");
        let second_id = second.id.clone();
        self.workers.push(second);
        self.states.push(State::Running);
        let taker = self.workers.len() - 1;
        self.take_over_from_live(taker, victim, sessions)?;
        Ok(format!(
            "let the lease of {at} lapse while it ran; a second process under worker id {first} ({second_id}) took the session back, then the first one wrote"
        ))
    }

    /// `leave@K` (`label`): the first session's owner renews its lease,
    /// then closes the session (a graceful shutdown: an acknowledged close
    /// ends the lease) and the next worker asks for it once, without
    /// waiting; a refusal is recorded for the checker, and the heir then
    /// waits the lease out as after any expiry. With `close`
    /// (`ACTION@close.S` and its label), the owner's proxy is armed at
    /// statement S of the close: killed there, the owner's lease lapses
    /// and the heir takes over every session it owned; its connection
    /// reset or its answer lost, it lives on. What each hit.
    pub(super) fn leave(
        &mut self,
        label: String,
        close: Option<(LeaseFault, usize, String)>,
        sessions: &mut [Served],
    ) -> Result<Vec<StrikeRecord>, WorkersError> {
        let target = self.target(sessions);
        let at = target.between_requests();
        let Target {
            victim, name, id, ..
        } = target;
        // Renewed now, so the lease is surely live when the heir asks.
        self.renew(victim, &name)?;
        let command = WorkerCommand::Close {
            session: name.clone(),
        };
        let (reply, close_record) = match close {
            None => (Some(self.workers[victim].call(&command)?), None),
            Some((fault, q, close_label)) => {
                let (reply, fired, what) = self.close_struck(victim, fault, q, &command)?;
                let record = StrikeRecord {
                    strike: Strike::CloseStatement(fault, q),
                    label: close_label,
                    fired,
                    what,
                };
                (reply, Some(record))
            }
        };
        let closed = matches!(reply, Some(WorkerReply::Closed));
        let took = match reply {
            // Killed in its close: its lease lapses, as after any kill.
            None => self.take_over_after_kill(victim, None, sessions)?.1,
            Some(reply) => {
                self.history.push(WorkerEvent::Replied {
                    worker: id.clone(),
                    session: name.clone(),
                    reply,
                });
                let heir = self.heir(victim)?;
                let heir_id = self.workers[heir].id.clone();
                let ttl_ms = self.cfg.longest_ttl();
                if self
                    .acquire_or_refused(heir, &name, false, ttl_ms)?
                    .is_err()
                {
                    self.acquire(heir, &name, true, ttl_ms)?;
                }
                sessions[0].owner = heir;
                sessions[0].steps = 0;
                format!("{heir_id} asked for it at once and took it over")
            }
        };
        let how = if closed { "closed" } else { "tried to close" };
        let mut records = vec![StrikeRecord {
            strike: Strike::Leave,
            label,
            fired: true,
            what: format!("{how} the session at {at}; {took}"),
        }];
        records.extend(close_record);
        Ok(records)
    }

    /// `victim`'s close `command` with its proxy armed with `fault` at
    /// statement `q`: its reply (None: killed there, with its store
    /// process), whether the fault fired, and what it hit.
    fn close_struck(
        &mut self,
        victim: usize,
        fault: LeaseFault,
        q: usize,
        command: &WorkerCommand,
    ) -> Result<(Option<WorkerReply>, bool, String), WorkersError> {
        let id = self.workers[victim].id.clone();
        let strike = StatementStrike {
            action: fault.action(),
            statement: q,
            after_reply: false,
        };
        let held = match self.send_armed(victim, strike, command)? {
            Armed::Held(held) => held,
            Armed::Answered(line) => {
                let count = self.proxy(victim)?.count();
                if let Some(counts) = self.counts.as_mut() {
                    counts.close = Some(count);
                }
                let reply = serde_json::from_str(&line).map_err(|e| {
                    self.workers[victim].broken(format!("unreadable reply {line:?}: {e}"))
                })?;
                let what = format!("{id}'s close sent {count} statement(s), none the {q}-th");
                return Ok((Some(reply), false, what));
            }
        };
        if let Some(sql) = self.proxy(victim)?.struck_statement() {
            self.struck_statements.push((sql, false));
        }
        let point = format!("{id} before statement {q} of its close");
        match fault {
            LeaseFault::Kill => {
                self.kill_held_store(victim, held)?;
                self.kill_with_its_store(victim);
                Ok((None, true, format!("killed {point}, and its store process")))
            }
            LeaseFault::Pause => Err(WorkersError::Harness(format!(
                "pause@close.{q}: a pause in a close is not a strike the campaign makes"
            ))),
            LeaseFault::Reset | LeaseFault::Cut => {
                let (release, what) = match fault {
                    LeaseFault::Reset => (Release::Close, "reset the connection of"),
                    _ => (
                        Release::LoseReply,
                        "sent and lost the server's answer, then reset the connection, of",
                    ),
                };
                self.proxy(victim)?.release(release);
                let reply = self.workers[victim].receive(command)?;
                let answered = match &reply {
                    WorkerReply::Closed => "closed",
                    _ => "refused the close",
                };
                Ok((
                    Some(reply),
                    true,
                    format!("{what} {point}; the store {answered}"),
                ))
            }
        }
    }

    /// `taker` waits out the lease of `victim`, still running, and takes
    /// the first session over; then `victim`'s next write goes, recorded
    /// (a write the store accepted has it write on to the end).
    fn take_over_from_live(
        &mut self,
        taker: usize,
        victim: usize,
        sessions: &mut [Served],
    ) -> Result<(), WorkersError> {
        let name = sessions[0].name.clone();
        self.acquire(taker, &name, true, self.cfg.longest_ttl())?;
        sessions[0].owner = taker;
        sessions[0].steps = 0;
        if self.step(victim, &name)? {
            self.finish(victim, &name)?;
        }
        Ok(())
    }
}
