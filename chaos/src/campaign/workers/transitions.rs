//! The lease transitions of a live owner under strikes (`slow@K`,
//! `lapse@K`, `leave@K`): a slow owner whose lease lapses while it runs
//! and another worker takes over, a second process under the owner's
//! worker id taking the session back, a graceful release by an
//! acknowledged close. This module carries them out and records what the
//! store replied; it must never judge (the checker,
//! [`crate::check::workers`], does).

use super::{Run, Served, State, Worker, WorkersError};
use crate::agent::worker::{WorkerCommand, WorkerReply};
use crate::history::WorkerEvent;

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

    /// `leave@K`: `victim` renews its lease, then closes the session (a graceful shutdown: an
    /// acknowledged close ends the lease) and the next worker asks for it
    /// once, without waiting; a refusal is recorded for the checker, and
    /// the heir then waits the lease out as after any expiry.
    pub(super) fn leave(
        &mut self,
        victim: usize,
        at: &str,
        sessions: &mut [Served],
    ) -> Result<String, WorkersError> {
        let name = sessions[0].name.clone();
        // Renewed now, so the lease is surely live when the heir asks.
        self.renew(victim, &name)?;
        let reply = self.workers[victim].call(&WorkerCommand::Close {
            session: name.clone(),
        })?;
        let closed = matches!(reply, WorkerReply::Closed);
        self.history.push(WorkerEvent::Replied {
            worker: self.workers[victim].id.clone(),
            session: name.clone(),
            reply,
        });
        let heir = self.heir(victim)?;
        let ttl_ms = self.cfg.longest_ttl();
        if self
            .acquire_or_refused(heir, &name, false, ttl_ms)?
            .is_err()
        {
            self.acquire(heir, &name, true, ttl_ms)?;
        }
        sessions[0].owner = heir;
        sessions[0].steps = 0;
        let how = if closed { "closed" } else { "tried to close" };
        Ok(format!(
            "{how} the session at {at}; {} asked for it at once and took it over",
            self.workers[heir].id
        ))
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
