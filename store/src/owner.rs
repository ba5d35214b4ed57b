//! A session's lease owner (`chaos/PROTOCOL.md`, section 9): taking the
//! session over ([`Session::open_leased`], [`Session::acquire_lease`]: the
//! next epoch made durable, then recovery run under it, before the owner
//! acts), renewing and releasing the lease. The record and who gets it are
//! [`crate::lease`]'s, the fencing of each write the session's. It takes
//! no time from its caller: the clock is [`crate::lease::now_ms`].

use std::time::Duration;

use agentchaos_protocol::message::{LeaseGrant, LeaseRequest};

use crate::error::{Error, Result};
use crate::fault::{self, Fault};
use crate::layout::{SessionId, SessionPaths};
use crate::lease::{decide, now_ms, HeldLease, LeaseRecord, Takeover};
use crate::recovery::{RecoveryState, TornTailReport};
use crate::session::{ResumeReport, Session, SessionOptions};

/// How long a leased open waits for the writer lock that another worker
/// holds for the length of one write, in attempts of [`LOCK_POLL`].
const LOCK_ATTEMPTS: u32 = 5_000;
const LOCK_POLL: Duration = Duration::from_millis(2);

/// The `takeover-truncates-tail` fault's damage: the log cut at the start
/// of its last complete line (any pre-allocated zeros after it go too).
fn drop_last_line(events: &std::path::Path) -> Result<()> {
    let bytes = std::fs::read(events).map_err(Error::io("read the log", events))?;
    let end = bytes.iter().rposition(|&b| b == b'\n');
    let Some(end) = end else {
        return Ok(());
    };
    let start = bytes[..end]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    std::fs::OpenOptions::new()
        .write(true)
        .open(events)
        .and_then(|f| f.set_len(start as u64))
        .map_err(Error::io("truncate the log", events))
}

impl Session {
    /// Opens the session as its lease owner: refused with
    /// [`Error::LeaseHeld`] while another owner's lease is live; otherwise
    /// the next epoch is made durable, recovery runs under it (the
    /// previous owner's interrupted run closed, its orphans marked), and
    /// only then does this return. Waits (up to about 10 s) for the writer
    /// lock another worker holds for one write.
    pub fn open_leased(
        root: &std::path::Path,
        id: &SessionId,
        options: SessionOptions,
        request: &LeaseRequest,
    ) -> Result<(Session, ResumeReport, Takeover)> {
        if fault::active(Fault::TakeoverTruncatesTail) {
            // Broken on purpose: the previous owner's last acknowledged line
            // goes, once per epoch another worker held. Not judged by expiry:
            // that clock read would race the lease decision's own.
            let paths = SessionPaths::new(root, id);
            if let Some(c) = LeaseRecord::read(&paths)?.filter(|c| c.worker_id != request.worker_id)
            {
                let done = paths
                    .dir()
                    .join(format!("fault-takeover-truncated-{}", c.epoch));
                if !done.exists() {
                    drop_last_line(&paths.events())?;
                    std::fs::write(&done, b"").map_err(Error::io("write", &done))?;
                }
            }
        }
        let mut attempts = 0;
        let (mut session, report) = loop {
            let paths = SessionPaths::new(root, id);
            match Session::open_inner(paths, options.clone(), None, Some(request)) {
                Err(Error::SessionLocked { .. }) if attempts < LOCK_ATTEMPTS => {
                    attempts += 1;
                    std::thread::sleep(LOCK_POLL);
                }
                other => break other?,
            }
        };
        let takeover = session.recover_after_grant()?;
        Ok((session, report, takeover))
    }

    /// Takes the lease of a session this handle just created (it holds the
    /// writer lock): epoch 1, unless an earlier incarnation left a record.
    pub fn acquire_lease(&mut self, request: &LeaseRequest) -> Result<Takeover> {
        self.lease = decide(self.paths(), Some(request))?;
        self.recover_after_grant()
    }

    /// Recovery under the new epoch, durable before the owner acts; then
    /// the writer lock is released until the owner's next write.
    fn recover_after_grant(&mut self) -> Result<Takeover> {
        let grant = self.lease_grant().expect("a lease was just granted");
        let recovery = if fault::active(Fault::TakeoverWithoutRecovery) {
            // Broken on purpose: the new owner acts on unmarked orphans.
            RecoveryState {
                repaired: self.repaired_on_open().map(TornTailReport::from),
                interrupted_runs: self.projection().interrupted_runs().to_vec(),
                uncertain: Vec::new(),
                appended: 0,
            }
        } else {
            self.recover()?
        };
        self.lock_held = false;
        self.log().writer_lock().release()?;
        Ok(Takeover { grant, recovery })
    }

    /// The lease this handle holds, as last granted or renewed.
    pub fn lease_grant(&self) -> Option<LeaseGrant> {
        self.lease.as_ref().map(|h| h.record.grant())
    }

    /// Extends the lease by its ttl from now; [`Error::Fenced`] when
    /// another owner took the session over. A lease that lapsed but was not
    /// taken over is renewed: no one else can have written since.
    pub fn renew_lease(&mut self) -> Result<LeaseGrant> {
        let Some(held) = self.lease.clone() else {
            return Err(Error::Invalid(format!(
                "session {} was not opened with a lease: nothing to renew",
                self.paths().id()
            )));
        };
        let renew = move |s: &mut Session| {
            let now = now_ms();
            let record = LeaseRecord {
                granted_at_ms: now,
                expires_at_ms: now.saturating_add(held.ttl_ms),
                ..held.record.clone()
            };
            record.write(s.paths())?;
            let grant = record.grant();
            s.lease = Some(HeldLease {
                record,
                ttl_ms: held.ttl_ms,
            });
            Ok(grant)
        };
        if fault::active(Fault::RenewWithoutEpochCheck) {
            // Broken on purpose: the record is rewritten at this handle's epoch, unchecked.
            return renew(self);
        }
        self.fenced(renew)
    }

    /// Ends the lease now (expires it, epoch kept) so the next owner need
    /// not wait; a handle that was fenced has nothing to release. Like a
    /// lapsed lease, a released one still writes until someone takes over.
    pub fn release_lease(&mut self) -> Result<()> {
        let Some(held) = self.lease.clone() else {
            return Ok(());
        };
        if fault::active(Fault::ReleaseKeepsLease) {
            return Ok(()); // Broken on purpose: acknowledged, the lease left live.
        }
        let released = self.fenced(|s| {
            let now = now_ms();
            LeaseRecord {
                expires_at_ms: now,
                ..held.record.clone()
            }
            .write(s.paths())
        });
        // The handle keeps its epoch: it writes on only until a takeover.
        match released {
            Err(Error::Fenced { .. }) if fault::active(Fault::FencedCloseReleases) => {
                // Broken on purpose: the fenced handle ends its successor's lease.
                if let Some(current) = LeaseRecord::read(self.paths())? {
                    LeaseRecord {
                        expires_at_ms: now_ms(),
                        ..current
                    }
                    .write(self.paths())?;
                }
                Ok(())
            }
            Err(Error::Fenced { .. }) => Ok(()),
            other => other,
        }
    }
}
