//! Content-addressed blobs for large tool outputs.
//!
//! A blob is `blobs/<sha256 hex>`, written atomically and durable (file and
//! directory fsynced) before [`put`] returns, so an event that references it
//! can never dangle after a crash. Blobs are immutable; writing the same
//! content twice is a no-op. A blob is at most [`MAX_BLOB_BYTES`]. Reading
//! one ([`get`], [`check`]) takes its path only from a well-formed digest,
//! refuses a symlink (the blob's, `blobs/`'s or the session directory's) or
//! anything but a regular file unopened, and reads only a file of the
//! reference's size, so a reference in a log never reads outside the
//! session nor more than a blob can hold.

use std::path::PathBuf;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::event::BlobRef;
use crate::fault::{self, Fault};
use crate::fsutil::{self, Links};
use crate::layout::SessionPaths;

/// The largest blob the store writes ([`put`] refuses more), and so reads.
pub const MAX_BLOB_BYTES: u64 = 64 << 20;

/// Hex SHA-256 of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `digest` is what [`digest`] gives: 64 lowercase hex digits.
pub fn is_digest(digest: &str) -> bool {
    digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `blobs/<digest>`, for a well-formed digest only: anything else (a `/`,
/// `..`) could name a file outside the session.
fn blob_path(paths: &SessionPaths, digest: &str) -> Result<PathBuf> {
    if !is_digest(digest) {
        return Err(Error::Invalid(format!(
            "blob digest {} is not 64 lowercase hex digits",
            crate::error::quote(digest)
        )));
    }
    Ok(paths.blobs().join(digest))
}

/// Stores `bytes` durably and returns its reference.
pub fn put(paths: &SessionPaths, bytes: &[u8]) -> Result<BlobRef> {
    if bytes.len() as u64 > MAX_BLOB_BYTES {
        return Err(Error::Invalid(format!(
            "a blob of {} bytes is more than the {MAX_BLOB_BYTES} bytes a blob may hold",
            bytes.len()
        )));
    }
    let reference = BlobRef {
        digest: digest(bytes),
        size: bytes.len() as u64,
    };
    let path = blob_path(paths, &reference.digest)?;
    if path.exists() && get(paths, &reference).is_ok() {
        return Ok(reference);
    }
    let dir = paths.blobs();
    if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(fsutil::symlink_refused(&dir));
    }
    fsutil::create_dir_durable(&dir)?;
    fsutil::replace_atomic(&path, bytes, "blob")?;
    Ok(reference)
}

/// Reads a blob back, checking its size and digest.
pub fn get(paths: &SessionPaths, reference: &BlobRef) -> Result<Vec<u8>> {
    let path = blob_path(paths, &reference.digest)?;
    fsutil::refuse_symlink(paths.dir())?;
    fsutil::refuse_symlink(&paths.blobs())?;
    let damaged = |reason: String| Error::Damage {
        path: path.clone(),
        line: 1,
        offset: 0,
        reason,
    };
    // Broken on purpose under the fault: serve whatever the file holds.
    let checked = !fault::active(Fault::BlobUncheckedRead);
    let len = fsutil::check_regular(&path, Links::Refuse)?.len();
    if checked && len != reference.size {
        return Err(damaged(format!(
            "the blob is {len} bytes, its reference says {}",
            reference.size
        )));
    }
    let bytes = fsutil::read_capped(&path, MAX_BLOB_BYTES, Links::Refuse)?;
    if checked && (bytes.len() as u64 != reference.size || digest(&bytes) != reference.digest) {
        return Err(damaged("blob content does not match its digest".into()));
    }
    Ok(bytes)
}

/// What is wrong with the blob `reference` names, in a few words: missing,
/// not a regular file, a symlink, another size, content that does not
/// match its digest; `None` when it reads back as [`get`] reads it. Other
/// I/O failures are errors.
pub fn check(paths: &SessionPaths, reference: &BlobRef) -> Result<Option<String>> {
    match get(paths, reference) {
        Ok(_) => Ok(None),
        Err(e) if fsutil::is_not_found(&e) => Ok(Some("missing".into())),
        Err(Error::Damage { reason, .. }) => Ok(Some(reason)),
        Err(e @ Error::Foreign { .. }) => Ok(Some(e.to_string())),
        // A digest that is not one: never a path opened.
        Err(Error::Invalid(why)) => Ok(Some(why)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn digest_is_the_hex_sha256() {
        // FIPS 180-2's test vector: catches a digest crate change of output.
        assert_eq!(
            super::digest(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(super::is_digest(&super::digest(b"abc")));
    }
}
