//! Checkpoints: the projection persisted as `snapshot.json`, with the seq
//! and byte offset it covers.
//!
//! The snapshot is one framed JSON object (CRC32C first, like a log line),
//! replaced atomically (temp, fsync, rename, fsync dir), so its seq and its
//! projection can never disagree on disk. Resuming trusts a snapshot only
//! after the log confirms it (see `session`); a damaged or stale snapshot is
//! never used, and the log stays the source of truth.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::event::Seq;
use crate::fault::{self, Fault};
use crate::framing;
use crate::fsutil;
use crate::index::SparseIndex;
use crate::layout::SessionPaths;
use crate::projection::Projection;
use crate::scan::LogPosition;

/// The largest `snapshot.json` the store writes (a checkpoint whose
/// projection would be larger is refused, and resuming replays the log
/// instead), and so the most it reads: a larger file is refused unread.
pub const SNAPSHOT_MAX_BYTES: u64 = 64 << 20;

/// The content of `snapshot.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Events `0..next_seq` are folded into `projection`.
    pub next_seq: Seq,
    /// Byte offset where the line of `next_seq` starts.
    pub offset: u64,
    pub projection: Projection,
    /// The sparse index of the covered prefix, so queries need not rebuild it.
    #[serde(default)]
    pub index: SparseIndex,
}

impl Snapshot {
    /// The log position right after what the snapshot covers.
    pub fn position(&self) -> LogPosition {
        LogPosition {
            offset: self.offset,
            seq: self.next_seq,
        }
    }
}

/// Where and what a checkpoint wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    pub next_seq: Seq,
    pub offset: u64,
    pub bytes: u64,
}

/// Writes a snapshot of `projection`, which must cover exactly the log up to `end`.
pub fn write_snapshot(
    paths: &SessionPaths,
    projection: &Projection,
    end: LogPosition,
    index: &SparseIndex,
) -> Result<Checkpoint> {
    assert_eq!(
        projection.next_seq(),
        end.seq,
        "a snapshot must cover exactly what its projection folded"
    );
    let mut snapshot = Snapshot {
        next_seq: end.seq,
        offset: end.offset,
        projection: projection.clone(),
        index: index.clone(),
    };
    if fault::active(Fault::CheckpointSeqAhead) {
        // Broken on purpose: claim one more event than the projection folded.
        snapshot.next_seq += 1;
    }
    let json = serde_json::to_vec(&snapshot).expect("a snapshot serializes");
    let mut bytes = framing::frame_object(&json);
    bytes.push(b'\n');
    if bytes.len() as u64 > SNAPSHOT_MAX_BYTES {
        return Err(Error::Invalid(format!(
            "a checkpoint of session {} would be {} bytes, more than the {SNAPSHOT_MAX_BYTES} bytes of a snapshot; none written (resuming replays the log)",
            paths.id(),
            bytes.len()
        )));
    }
    if fault::active(Fault::NonAtomicSnapshot) {
        fsutil::overwrite_in_place(&paths.snapshot(), &bytes, "snapshot")?;
    } else {
        fsutil::replace_atomic(&paths.snapshot(), &bytes, "snapshot")?;
    }
    Ok(Checkpoint {
        next_seq: end.seq,
        offset: end.offset,
        bytes: bytes.len() as u64,
    })
}

/// How much of the log an intact `snapshot.json` of this session covers:
/// the log was durable that far when it was written, so no torn tail may
/// start before it and the log may not end before it (see
/// [`crate::scan`]). `None` when there is no snapshot, or it is damaged or
/// names another session (it proves nothing about this log). Parses only
/// the position and the session, not the projection.
pub fn covered(paths: &SessionPaths) -> Result<Option<LogPosition>> {
    #[derive(Deserialize)]
    struct Covered {
        offset: u64,
        next_seq: Seq,
        projection: Owner,
    }
    #[derive(Deserialize)]
    struct Owner {
        session_id: Option<String>,
    }
    match read_framed(paths) {
        Ok(Some((_, body))) => Ok(serde_json::from_slice::<Covered>(&body)
            .ok()
            .filter(|c| names_this_session(paths, c.projection.session_id.as_deref()))
            .map(|c| LogPosition {
                offset: c.offset,
                seq: c.next_seq,
            })),
        Ok(None) | Err(Error::Damage { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a snapshot whose projection names `session_id` may be this
/// session's (one taken before `session_created` was folded names none).
fn names_this_session(paths: &SessionPaths, session_id: Option<&str>) -> bool {
    session_id.is_none_or(|id| id == paths.id().as_str())
}

/// Reads `snapshot.json`: `Ok(None)` when there is none, an error naming
/// the file when it is present but damaged or another session's.
pub fn read_snapshot(paths: &SessionPaths) -> Result<Option<Snapshot>> {
    let Some((path, body)) = read_framed(paths)? else {
        return Ok(None);
    };
    let damaged = |reason: String| Error::Damage {
        path: path.clone(),
        line: 1,
        offset: 0,
        reason,
    };
    let snapshot: Snapshot = serde_json::from_slice(&body)
        .map_err(|e| damaged(format!("snapshot does not fit the schema: {e}")))?;
    let owner = snapshot.projection.session_id();
    if !names_this_session(paths, owner) {
        return Err(damaged(format!(
            "the snapshot names session {:?}, not {:?}",
            owner.unwrap_or_default(),
            paths.id().as_str()
        )));
    }
    Ok(Some(snapshot))
}

/// The checksummed body of `snapshot.json`, without its newline.
fn read_framed(paths: &SessionPaths) -> Result<Option<(std::path::PathBuf, Vec<u8>)>> {
    let path = paths.snapshot();
    let bytes = match fsutil::read_capped(&path, SNAPSHOT_MAX_BYTES, fsutil::Links::Refuse) {
        Ok(b) => b,
        Err(e) if fsutil::is_not_found(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let damaged = |reason: String| Error::Damage {
        path: path.clone(),
        line: 1,
        offset: 0,
        reason,
    };
    let body = bytes
        .strip_suffix(b"\n")
        .ok_or_else(|| damaged("snapshot does not end with a newline (torn write)".into()))?;
    framing::verify_checksum(body).map_err(|e| damaged(e.to_string()))?;
    let body = body.to_vec();
    Ok(Some((path, body)))
}
