//! One writer per session: an exclusive `flock` on `ROOT/sessions/<id>/lock`.
//!
//! The holder writes its pid into the lock file so a refused writer can say
//! who holds it. The lock dies with the process (including SIGKILL), so a
//! crashed writer never leaves a stale lock. Readers never take it.
//! Taking it first refuses a session directory that is or holds a symlink,
//! or whose store files are not regular files (see [`crate::fsutil`]), so
//! no writer starts in one.
//!
//! A leased session ([`crate::lease`]) holds the lock only while it writes:
//! it releases it between requests and waits for it before the next one,
//! so a paused lease holder never keeps another worker from taking over.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;

use crate::error::{Error, Result};
use crate::fsutil;
use crate::layout::SessionPaths;

/// Proof that this process is the session's only writer. Released on drop.
#[derive(Debug)]
pub struct WriterLock {
    file: File,
    path: std::path::PathBuf,
    /// False between [`WriterLock::release`] and [`WriterLock::retake`].
    held: std::sync::atomic::AtomicBool,
}

impl WriterLock {
    /// Takes the writer lock or fails with [`Error::SessionLocked`] at once.
    pub fn acquire(paths: &SessionPaths) -> Result<WriterLock> {
        fsutil::check_session_dir(paths.dir())?;
        let path = paths.lock();
        let file = fsutil::open_nofollow(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            &path,
            "open lock",
        )?;
        // Broken on purpose under the fault: the lock is never taken.
        let taken = if crate::fault::active(crate::fault::Fault::NoWriterLock) {
            Ok(())
        } else {
            file.try_lock()
        };
        match taken {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                // A writer writes a pid; read a bounded prefix of anything else.
                let mut holder = String::new();
                let _ = (&file).take(64 * 1024).read_to_string(&mut holder);
                let pid = holder.trim();
                return Err(Error::SessionLocked {
                    id: paths.id().to_string(),
                    pid: if pid.is_empty() {
                        "unknown".into()
                    } else {
                        pid.to_string()
                    },
                    lock: path,
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("flock", &path)(e)),
        }
        let pid = format!("{}\n", std::process::id());
        file.set_len(0).map_err(Error::io("truncate lock", &path))?;
        file.write_all_at(pid.as_bytes(), 0)
            .map_err(Error::io("write lock", &path))?;
        Ok(WriterLock {
            file,
            path,
            held: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// Lets other processes take the lock until [`WriterLock::retake`].
    pub(crate) fn release(&self) -> Result<()> {
        self.held.store(false, std::sync::atomic::Ordering::SeqCst);
        if crate::fault::active(crate::fault::Fault::NoWriterLock) {
            return Ok(());
        }
        self.file
            .unlock()
            .map_err(Error::io("unlock", self.path.clone()))
    }

    /// Whether this handle holds the lock now (not released for another
    /// writer's turn): only then is the file as this handle last saw it.
    pub(crate) fn is_held(&self) -> bool {
        self.held.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until this process holds the lock again (another writer holds
    /// it only for the length of one write).
    pub(crate) fn retake(&self) -> Result<()> {
        if crate::fault::active(crate::fault::Fault::NoWriterLock) {
            return Ok(());
        }
        self.file
            .lock()
            .map_err(Error::io("flock", self.path.clone()))?;
        self.held.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}
