//! The harness's schedule of a parallel group's waiters: one thread per
//! waiter, and only the thread the schedule names runs (FoundationDB's
//! simulation and AWS shuttle do the same for threads).
//!
//! The in-process reference store tells this module where its group commit
//! stands ([`agentstore::crashpoint::Note`]): a waiter about to fdatasync its
//! group (its leader) is held there, a waiter about to wait for another's
//! sync is blocked until that sync ends. The schedule acts only when no
//! waiter runs, and then picks, with its seeded generator, one of: let a
//! waiter that has not waited yet call `wait`, let a held leader sync, or
//! report a waiter's answer. So which waiters join which group, whether a
//! waiter calls `wait` while a leader's sync is in flight, and the order
//! the answers reach the harness are the seed's, never the OS's: the same
//! seed, the same lines on the pipe and the same crash-point hits.
//!
//! It also forwards every sync the store reports ([`take_syncs`]), which
//! the agent writes to the pipe before each answer, so that the checker
//! can see which ack came before the sync that covers it. That is the
//! store's own account of its syncs (as the power-loss nemesis's sync log
//! is), judged by the harness's rule.
//!
//! It must never call the store itself: its observer runs on the store's
//! threads, sometimes under the store's own lock.

use std::cell::Cell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use agentchaos_protocol::event::Seq;
use agentstore::crashpoint::Note;

use crate::scenario::rng::Rng;

/// A sync of the log the store reported: `Some(next_seq)` when it
/// succeeded (every event below `next_seq` durable), `None` when it failed.
pub type ReportedSync = Option<Seq>;

/// Where one waiter stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Its thread waits for the schedule's go to call `wait`.
    Ready,
    /// In the store, the schedule's to finish: nothing else is picked.
    Running,
    /// Leads its group and is held before its fdatasync.
    Held,
    /// Waits for another waiter's sync to end.
    Blocked,
    /// Its `wait` returned; the answer is not reported yet.
    Answered,
    Reported,
}

struct Shared {
    status: Mutex<Vec<Status>>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Vec<Status>> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait_while<'a>(
        &self,
        guard: MutexGuard<'a, Vec<Status>>,
        cond: impl FnMut(&mut Vec<Status>) -> bool,
    ) -> MutexGuard<'a, Vec<Status>> {
        self.changed
            .wait_while(guard, cond)
            .unwrap_or_else(|p| p.into_inner())
    }

    fn note(&self, note: Note, me: Option<usize>) {
        let mut st = self.lock();
        match (note, me) {
            (Note::GroupSync, Some(i)) => {
                st[i] = Status::Held;
                self.changed.notify_all();
                drop(self.wait_while(st, |s| s[i] == Status::Held));
            }
            (Note::GroupWait, Some(i)) => {
                st[i] = Status::Blocked;
                self.changed.notify_all();
            }
            // Not a waiter of this group: never hold it, and let the held
            // leaders sync so that it is not waiting for nobody.
            (Note::GroupSync | Note::GroupWait, None) => {
                for s in st.iter_mut().filter(|s| **s == Status::Held) {
                    *s = Status::Running;
                }
                self.changed.notify_all();
            }
            // A sync ended: whoever waited for it is woken by the store.
            (Note::Synced { .. } | Note::SyncFailed, _) => {
                for s in st.iter_mut().filter(|s| **s == Status::Blocked) {
                    *s = Status::Running;
                }
                self.changed.notify_all();
            }
        }
    }
}

/// The group being scheduled in this process, if any (one at a time: the
/// agent runs one parallel group at a time).
static ACTIVE: Mutex<Option<Arc<Shared>>> = Mutex::new(None);
/// The syncs reported since the agent last wrote them to the pipe.
static SYNCS: Mutex<Vec<ReportedSync>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's index in the scheduled group, if it is a waiter.
    static WAITER: Cell<Option<usize>> = const { Cell::new(None) };
}

fn observer(note: Note) {
    match note {
        Note::Synced { next_seq } => lock(&SYNCS).push(Some(next_seq)),
        Note::SyncFailed => lock(&SYNCS).push(None),
        Note::GroupSync | Note::GroupWait => {}
    }
    let active = lock(&ACTIVE).clone();
    if let Some(shared) = active {
        shared.note(note, WAITER.with(Cell::get));
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes this process's in-process store report to the schedule: call it
/// once, before the store is opened. Without it the waiters still run one
/// at a time in the schedule's order, but a `Batch` store's leader is not
/// held and no sync is reported.
pub fn observe_store() {
    agentstore::crashpoint::observe(observer);
}

/// The syncs the store reported since the last call, in order.
pub fn take_syncs() -> Vec<ReportedSync> {
    std::mem::take(&mut *lock(&SYNCS))
}

/// The schedule found every unanswered waiter blocked with no sync to wake
/// it: the store's group commit lost a waiter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{blocked} waiter(s) of a group commit are blocked with no sync running to wake them")]
pub struct Stuck {
    pub blocked: usize,
}

/// Runs `jobs` (each a waiter's call to the store) one thread each, under
/// the schedule `rng` draws, and hands each answer to `report` (with the
/// job's index) when the schedule says. A store that leaves waiters blocked
/// with nobody to wake them ends the process with [`Stuck`] on stderr and
/// exit code 1 (the store's failure): their threads cannot be joined.
pub fn run<T, E>(
    mut rng: Rng,
    jobs: Vec<impl FnOnce() -> T + Send>,
    mut report: impl FnMut(usize, T) -> Result<(), E>,
) -> Result<(), E>
where
    T: Send,
{
    let n = jobs.len();
    let shared = Arc::new(Shared {
        status: Mutex::new(vec![Status::Ready; n]),
        changed: Condvar::new(),
    });
    let answers: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
    *lock(&ACTIVE) = Some(shared.clone());
    let mut outcome = Ok(());
    std::thread::scope(|s| {
        for (i, job) in jobs.into_iter().enumerate() {
            let (shared, answer) = (&shared, &answers[i]);
            s.spawn(move || {
                WAITER.with(|w| w.set(Some(i)));
                drop(shared.wait_while(shared.lock(), |st| st[i] == Status::Ready));
                let got = job();
                *lock(answer) = Some(got);
                let mut st = shared.lock();
                st[i] = Status::Answered;
                shared.changed.notify_all();
            });
        }
        loop {
            let mut st = shared.wait_while(shared.lock(), |st| st.contains(&Status::Running));
            let choices: Vec<usize> = (0..n)
                .filter(|&i| matches!(st[i], Status::Ready | Status::Held | Status::Answered))
                .collect();
            if choices.is_empty() {
                let blocked = st.iter().filter(|s| **s == Status::Blocked).count();
                if blocked == 0 {
                    break;
                }
                eprintln!("agentchaos: agent: {}", Stuck { blocked });
                std::process::exit(1);
            }
            let i = choices[rng.below(choices.len() as u64) as usize];
            if st[i] == Status::Answered {
                st[i] = Status::Reported;
                drop(st);
                let got = lock(&answers[i])
                    .take()
                    .expect("an answered waiter left its answer");
                if outcome.is_ok() {
                    outcome = report(i, got);
                }
            } else {
                st[i] = Status::Running;
                shared.changed.notify_all();
            }
        }
    });
    *lock(&ACTIVE) = None;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(seed: u64) -> Vec<usize> {
        let mut out = Vec::new();
        let jobs: Vec<_> = (0..5).map(|i| move || i * 10).collect();
        run::<usize, ()>(Rng::new(seed), jobs, |i, got| {
            assert_eq!(got, i * 10);
            out.push(i);
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn the_seed_alone_decides_the_order_of_the_answers() {
        let first = order(7);
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, [0, 1, 2, 3, 4], "every answer reported once");
        for _ in 0..10 {
            assert_eq!(order(7), first);
        }
        assert!(
            (0..20).any(|seed| order(seed) != first),
            "another seed, another interleaving"
        );
    }
}
