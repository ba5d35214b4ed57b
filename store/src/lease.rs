//! Leases and fencing on one machine (`chaos/PROTOCOL.md`, section 9): a
//! session owned by one worker at a time, across processes.
//!
//! The lease is a durable record beside the log, `lease.json`
//! (`{worker_id, epoch, granted_at_ms, expires_at_ms}`), replaced
//! atomically (temp file, fsync, rename, directory fsync) under the
//! session's writer lock. A file of its own rather than an event in the
//! log: a heartbeat renews it every few hundred milliseconds, and the log
//! is the session's history, which the model reads and the fold replays.
//!
//! A leased [`Session`](crate::Session) holds the writer lock only while
//! it writes (`crate::lock`): each write waits for the lock, reads the
//! record and goes on only if the session is still at the handle's epoch,
//! so a taken-over owner is refused ([`Error::Fenced`]) with nothing
//! written, and the handle's cached end of the log is valid whenever the
//! check passes (no one else can have written at its epoch). A takeover
//! ([`Session::open_leased`](crate::Session::open_leased) after expiry)
//! makes the next epoch durable first, then runs recovery under it, before
//! it returns.
//!
//! This module holds the record and the decision of who gets it, below
//! the session; the fencing of each write is the session's, and what an
//! owner does with its session (take it over, renew, release) is
//! [`crate::owner`]'s.
//!
//! Expiry is judged by this machine's real-time clock only ([`now_ms`]):
//! every worker of an agentstore root runs on the machine that holds its
//! files. This module must never take a time from its caller.

use std::time::{SystemTime, UNIX_EPOCH};

use agentchaos_protocol::message::{LeaseGrant, LeaseRequest, RecoveryState};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fault::{self, Fault};
use crate::fsutil;
use crate::layout::SessionPaths;

/// The store's clock: milliseconds since the Unix epoch, by this machine.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The largest `lease.json` the store writes, and so reads: fixed fields
/// under 200 bytes and the worker id of a lease request, JSON-escaped; a
/// request whose worker id would make the record larger is refused.
pub const LEASE_MAX_BYTES: u64 = 64 << 10;

/// The session's lease as `lease.json` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Empty after a plain (unleased) open fenced the last owner.
    pub worker_id: String,
    pub epoch: u64,
    pub granted_at_ms: u64,
    pub expires_at_ms: u64,
}

impl LeaseRecord {
    /// The record, or None for a session that was never leased.
    pub fn read(paths: &SessionPaths) -> Result<Option<LeaseRecord>> {
        let path = paths.lease();
        let bytes = match fsutil::read_capped(&path, LEASE_MAX_BYTES, fsutil::Links::Refuse) {
            Ok(b) => b,
            Err(e) if fsutil::is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::Damage {
                path,
                line: 1,
                offset: 0,
                reason: format!("the lease record does not parse: {e}"),
            })
    }

    pub(crate) fn write(&self, paths: &SessionPaths) -> Result<()> {
        let bytes = serde_json::to_vec(self).expect("a lease record serializes");
        if bytes.len() as u64 > LEASE_MAX_BYTES {
            return Err(Error::Invalid(format!(
                "a lease record of {} bytes (worker id of {} bytes) is more than the {LEASE_MAX_BYTES} bytes of lease.json",
                bytes.len(),
                self.worker_id.len()
            )));
        }
        if fault::active(Fault::LeaseWrittenInPlace) {
            // Broken on purpose: a crash between the truncate and the write leaves it empty.
            return fsutil::overwrite_in_place(&paths.lease(), &bytes, "lease");
        }
        fsutil::replace_atomic(&paths.lease(), &bytes, "lease")
    }

    /// Live until `expires_at_ms`, by the store's clock.
    pub fn is_live(&self, now_ms: u64) -> bool {
        now_ms < self.expires_at_ms
    }

    pub(crate) fn grant(&self) -> LeaseGrant {
        LeaseGrant {
            worker_id: self.worker_id.clone(),
            epoch: self.epoch,
            granted_at_ms: self.granted_at_ms,
            expires_at_ms: self.expires_at_ms,
        }
    }
}

/// The lease a session handle holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldLease {
    pub(crate) record: LeaseRecord,
    pub(crate) ttl_ms: u64,
}

/// What a leased open got: the grant and the recovery it ran under it.
#[derive(Debug, Clone, PartialEq)]
pub struct Takeover {
    pub grant: LeaseGrant,
    pub recovery: RecoveryState,
}

/// Decides the lease while the opener holds the writer lock, before it
/// writes anything. A live lease refuses everyone. Otherwise a leased open
/// gets the next epoch, durable before anything else is written; a plain
/// open of a session that was leased fences the last owner (the epoch goes
/// up, held by no one) and holds no lease itself.
pub(crate) fn decide(
    paths: &SessionPaths,
    request: Option<&LeaseRequest>,
) -> Result<Option<HeldLease>> {
    let now = now_ms();
    let current = LeaseRecord::read(paths)?;
    if let Some(c) = &current {
        // lease-ignores-expiry: broken on purpose, a leased open takes over a live lease.
        let ignore = request.is_some()
            && (fault::active(Fault::LeaseIgnoresExpiry) || fault::active(Fault::LeaseSameEpoch));
        if c.is_live(now) && !ignore {
            return Err(Error::LeaseHeld {
                id: paths.id().to_string(),
                worker_id: c.worker_id.clone(),
                epoch: c.epoch,
                expires_at_ms: c.expires_at_ms,
                now_ms: now,
            });
        }
    }
    let epoch = match &current {
        // lease-same-epoch: broken on purpose, a live lease is shared at its epoch.
        Some(c) if c.is_live(now) && request.is_some() && fault::active(Fault::LeaseSameEpoch) => {
            c.epoch
        }
        // reclaim-same-epoch: broken on purpose, a lapsed lease goes back to its worker id at its epoch.
        Some(c)
            if request.is_some_and(|r| r.worker_id == c.worker_id)
                && fault::active(Fault::ReclaimSameEpoch) =>
        {
            c.epoch
        }
        Some(c) => c.epoch + 1,
        None => 1,
    };
    match request {
        Some(r) => {
            let record = LeaseRecord {
                worker_id: r.worker_id.clone(),
                epoch,
                granted_at_ms: now,
                expires_at_ms: now.saturating_add(r.ttl_ms),
            };
            record.write(paths)?;
            Ok(Some(HeldLease {
                record,
                ttl_ms: r.ttl_ms,
            }))
        }
        None => {
            if current.is_some() {
                LeaseRecord {
                    worker_id: String::new(),
                    epoch,
                    granted_at_ms: now,
                    expires_at_ms: now,
                }
                .write(paths)?;
            }
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use crate::layout::SessionId;
    use crate::session::{Session, SessionOptions};

    fn request(worker: &str, ttl_ms: u64) -> LeaseRequest {
        LeaseRequest {
            worker_id: worker.into(),
            ttl_ms,
        }
    }

    fn created(root: &std::path::Path, ws: &std::path::Path) -> SessionId {
        let id = SessionId::new("s").unwrap();
        let mut s = Session::create(root, &id, ws, SessionOptions::default()).unwrap();
        s.append(Event::RunStarted {
            run_id: "r1".into(),
        })
        .unwrap();
        drop(s);
        id
    }

    #[test]
    fn a_live_lease_is_refused_and_an_expired_one_taken_over_with_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let id = created(dir.path(), dir.path());
        let (mut first, _, t1) = Session::open_leased(
            dir.path(),
            &id,
            SessionOptions::default(),
            &request("a", 60_000),
        )
        .unwrap();
        assert_eq!(t1.grant.epoch, 1);
        // The first owner's recovery closed the run the creator left open.
        assert_eq!(t1.recovery.appended, 1);
        let held = Session::open_leased(
            dir.path(),
            &id,
            SessionOptions::default(),
            &request("b", 10),
        )
        .unwrap_err();
        assert!(matches!(held, Error::LeaseHeld { epoch: 1, .. }), "{held}");
        // A plain open is refused while the lease is live, too.
        assert!(matches!(
            Session::open(dir.path(), &id, SessionOptions::default()).unwrap_err(),
            Error::LeaseHeld { .. }
        ));
        first
            .append(Event::RunStarted {
                run_id: "r2".into(),
            })
            .unwrap();
        first.release_lease().unwrap();
        let (mut second, _, t2) = Session::open_leased(
            dir.path(),
            &id,
            SessionOptions::default(),
            &request("b", 60_000),
        )
        .unwrap();
        assert_eq!(t2.grant.epoch, 2);
        assert_eq!(t2.recovery.interrupted_runs, vec!["r2".to_string()]);
        // The first handle is fenced: nothing it sends is written.
        let before = second.projection().next_seq();
        let fenced = first
            .append(Event::RunStarted {
                run_id: "r3".into(),
            })
            .unwrap_err();
        assert!(
            matches!(
                fenced,
                Error::Fenced {
                    held: 1,
                    current: 2,
                    ..
                }
            ),
            "{fenced}"
        );
        assert!(matches!(first.renew_lease(), Err(Error::Fenced { .. })));
        // The new owner writes on where it left off, and renews.
        second
            .append(Event::RunStarted {
                run_id: "r3".into(),
            })
            .unwrap();
        assert_eq!(second.projection().next_seq(), before + 1);
        let renewed = second.renew_lease().unwrap();
        assert_eq!(renewed.epoch, 2);
        assert!(renewed.expires_at_ms >= t2.grant.expires_at_ms);
    }

    #[test]
    fn a_plain_open_after_the_lease_ended_fences_its_last_owner() {
        let dir = tempfile::tempdir().unwrap();
        let id = created(dir.path(), dir.path());
        let (mut owner, _, _) =
            Session::open_leased(dir.path(), &id, SessionOptions::default(), &request("a", 0))
                .unwrap();
        // ttl 0: expired at once, never taken over, so still writing.
        owner.renew_lease().unwrap();
        let (plain, _) = Session::open(dir.path(), &id, SessionOptions::default()).unwrap();
        drop(plain);
        assert!(matches!(
            owner.append(Event::RunStarted { run_id: "x".into() }),
            Err(Error::Fenced {
                held: 1,
                current: 2,
                ..
            })
        ));
    }

    #[test]
    fn a_taken_over_handle_dropped_leaves_the_next_owners_events() {
        // Found by `agentchaos workers` (acked-survive-takeover) once its
        // workers shut down instead of being killed: the zombie's log cut
        // its pre-allocated zeros at its own, stale, end on drop.
        let dir = tempfile::tempdir().unwrap();
        let id = created(dir.path(), dir.path());
        let open = |worker| {
            Session::open_leased(
                dir.path(),
                &id,
                SessionOptions::default(),
                &request(worker, 0),
            )
            .unwrap()
            .0
        };
        let zombie = open("a");
        let mut heir = open("b");
        heir.append(Event::RunStarted { run_id: "h".into() })
            .unwrap();
        heir.append(Event::UserMessage {
            parent: None,
            text: "the heir's".into(),
        })
        .unwrap();
        let served = heir.projection().next_seq();
        drop(heir);
        drop(zombie);
        let (after, _) = Session::open(dir.path(), &id, SessionOptions::default()).unwrap();
        assert!(
            after.projection().next_seq() >= served,
            "the heir's events were cut: {} < {served}",
            after.projection().next_seq()
        );
    }

    #[test]
    fn a_damaged_lease_record_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let id = created(dir.path(), dir.path());
        let paths = SessionPaths::new(dir.path(), &id);
        std::fs::write(paths.lease(), b"{\"epoch\":").unwrap();
        let e = Session::open_leased(
            dir.path(),
            &id,
            SessionOptions::default(),
            &request("a", 10),
        )
        .unwrap_err();
        assert!(e.is_damage(), "{e}");
        assert!(e.to_string().contains("lease.json"), "{e}");
    }
}
