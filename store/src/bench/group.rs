//! The group commit ceilings of this machine, measured raw (no store).
//!
//! What a Batch log with N appenders can reach is bounded twice: by the disk
//! (how much one `fdatasync` of N lines costs against one of a single line)
//! and by the scheduler (how fast N threads blocked on a sync are woken and
//! write again). Two raw writers measure each bound, on the same line bytes
//! written into a pre-zeroed file (what the store's pre-allocation gives its
//! appends):
//! - [`LinesPerSync`]: one thread writing N lines, then one `fdatasync`. No
//!   thread waits for another: the disk's ceiling for groups of N.
//! - [`RawGroupCommit`]: N threads in a closed loop, each writing a line and
//!   waiting for a sync that covers it; one of them leads each sync. Its
//!   leader knows N and waits for the whole group (up to [`GROUP_WAIT`], for
//!   the end of a measurement, when threads stop): every group is full, which
//!   no store can know in advance. The textbook leader/follower group commit
//!   with perfect group formation: the ceiling of any closed-loop group
//!   commit whose waiters block, on this machine.
//!
//! Both write with a [`RawWriter`] of the pre-zeroed workload that never
//! syncs on its own. Linux-first like the rest of the bench; they touch only
//! their own file.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::methods::{prewrite, OpenError, RawWriter, SyncMethod, Workload};

/// How long a raw group leader waits for the rest of its group before it
/// syncs what it has: only ever reached when threads stop at the end of a
/// measurement slice, or start late at its beginning.
pub const GROUP_WAIT: Duration = Duration::from_millis(1);

/// A writer of `line` back to back into a pre-zeroed file at `path` (which
/// must not exist), wrapping at its end, that never syncs on its own.
fn zeroed_writer(path: &Path, line: &[u8]) -> Result<RawWriter, OpenError> {
    prewrite(path).map_err(|e| OpenError::Io(path.to_path_buf(), "pre-write", e))?;
    RawWriter::create(
        path,
        SyncMethod::NoSync,
        Workload::PreZeroed { len: line.len() },
        line,
    )
}

/// One thread, `lines_per_sync` lines per `fdatasync`. Each [`op`] writes
/// one line; every `lines_per_sync`-th also syncs, so events/s over its ops
/// are events/s of groups of that size.
///
/// [`op`]: LinesPerSync::op
#[derive(Debug)]
pub struct LinesPerSync {
    writer: RawWriter,
    lines_per_sync: usize,
    unsynced: usize,
}

impl LinesPerSync {
    /// Pre-zeroes `path` (which must not exist).
    pub fn create(
        path: &Path,
        line: &[u8],
        lines_per_sync: usize,
    ) -> Result<LinesPerSync, OpenError> {
        Ok(LinesPerSync {
            writer: zeroed_writer(path, line)?,
            lines_per_sync: lines_per_sync.max(1),
            unsynced: 0,
        })
    }

    pub fn path(&self) -> &Path {
        self.writer.path()
    }

    /// One line written, and the group synced if this line completes it.
    pub fn op(&mut self) -> io::Result<()> {
        self.writer.op()?;
        self.unsynced += 1;
        if self.unsynced == self.lines_per_sync {
            self.writer.sync_data()?;
            self.unsynced = 0;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct GroupState {
    writer: RawWriter,
    /// Lines written since the file was created (wrapping does not reset it).
    written: u64,
    /// Lines a finished sync covered.
    durable: u64,
    /// Lines written since the running or last sync began.
    pending: usize,
    sync_running: bool,
    syncs: u64,
}

/// `appenders` threads sharing one pre-zeroed file, each [`append`] a line
/// written and waited for until a sync covers it (see the module doc).
///
/// [`append`]: RawGroupCommit::append
#[derive(Debug)]
pub struct RawGroupCommit {
    appenders: usize,
    /// The file opened again, for the leader's sync outside the state lock.
    file: File,
    state: Mutex<GroupState>,
    /// Woken when a sync finishes.
    synced: Condvar,
    /// Woken when the group is complete, for its leader.
    complete: Condvar,
}

impl RawGroupCommit {
    /// Pre-zeroes `path` (which must not exist) for `appenders` threads.
    pub fn create(path: &Path, line: &[u8], appenders: usize) -> Result<RawGroupCommit, OpenError> {
        let writer = zeroed_writer(path, line)?;
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| OpenError::Io(path.to_path_buf(), "open", e))?;
        Ok(RawGroupCommit {
            appenders: appenders.max(1),
            file,
            state: Mutex::new(GroupState {
                writer,
                written: 0,
                durable: 0,
                pending: 0,
                sync_running: false,
                syncs: 0,
            }),
            synced: Condvar::new(),
            complete: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The mean lines per sync so far.
    pub fn lines_per_sync(&self) -> f64 {
        let st = self.lock();
        st.written as f64 / st.syncs.max(1) as f64
    }

    /// Writes one line and returns once a sync covers it, leading that sync
    /// if none runs. Returns how many lines were written up to this one.
    pub fn append(&self) -> io::Result<u64> {
        let mut st = self.lock();
        st.writer.op()?;
        st.written += 1;
        st.pending += 1;
        let mine = st.written;
        if st.pending == self.appenders {
            self.complete.notify_one();
        }
        loop {
            if st.durable >= mine {
                return Ok(mine);
            }
            if st.sync_running {
                st = self.synced.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            st.sync_running = true;
            if st.pending < self.appenders {
                st = self
                    .complete
                    .wait_timeout_while(st, GROUP_WAIT, |st| st.pending < self.appenders)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            let target = st.written;
            st.pending = 0;
            drop(st);
            let result = self.file.sync_data();
            st = self.lock();
            st.sync_running = false;
            if result.is_ok() {
                st.durable = target;
                st.syncs += 1;
            }
            self.synced.notify_all();
            result?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::methods::OVERWRITE_SPAN;

    #[test]
    fn lines_per_sync_writes_back_to_back_and_wraps_inside_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let line = vec![b'x'; 1000];
        let mut w = LinesPerSync::create(&path, &line, 4).unwrap();
        let per_span = OVERWRITE_SPAN / 1000;
        for _ in 0..per_span + 2 {
            w.op().unwrap();
        }
        let bytes = std::fs::read(w.path()).unwrap();
        assert_eq!(bytes.len() as u64, OVERWRITE_SPAN);
        assert!(bytes[..per_span as usize * 1000].iter().all(|&b| b == b'x'));
        assert!(bytes[per_span as usize * 1000..].iter().all(|&b| b == 0));
    }

    #[test]
    fn every_raw_group_append_returns_covered_by_a_sync() {
        let dir = tempfile::tempdir().unwrap();
        let line = vec![b'y'; 200];
        let g = RawGroupCommit::create(&dir.path().join("f"), &line, 4).unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..25 {
                        let mine = g.append().unwrap();
                        assert!(g.lock().durable >= mine);
                    }
                });
            }
        });
        let st = g.lock();
        assert_eq!((st.written, st.durable), (100, 100));
        assert!(st.syncs <= 100);
        let bytes = std::fs::read(dir.path().join("f")).unwrap();
        assert!(bytes[..100 * 200].iter().all(|&b| b == b'y'));
    }

    #[test]
    fn a_line_longer_than_the_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let line = vec![b'z'; OVERWRITE_SPAN as usize + 1];
        let e = RawGroupCommit::create(&dir.path().join("f"), &line, 2).unwrap_err();
        assert!(matches!(e, OpenError::Unsupported(_)), "{e:?}");
    }
}
