//! Content-addressed blobs for large tool outputs.
//!
//! A blob is `blobs/<sha256 hex>`, written atomically and durable (file and
//! directory fsynced) before [`put`] returns, so an event that references it
//! can never dangle after a crash. Blobs are immutable; writing the same
//! content twice is a no-op.

use std::path::PathBuf;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::event::BlobRef;
use crate::fault::{self, Fault};
use crate::fsutil;
use crate::layout::SessionPaths;

/// Hex SHA-256 of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn blob_path(paths: &SessionPaths, digest: &str) -> PathBuf {
    paths.blobs().join(digest)
}

/// Stores `bytes` durably and returns its reference.
pub fn put(paths: &SessionPaths, bytes: &[u8]) -> Result<BlobRef> {
    let reference = BlobRef {
        digest: digest(bytes),
        size: bytes.len() as u64,
    };
    let path = blob_path(paths, &reference.digest);
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
    let path = blob_path(paths, &reference.digest);
    let bytes = std::fs::read(&path).map_err(Error::io("read blob", &path))?;
    // Broken on purpose under the fault: serve whatever the file holds.
    let checked = !fault::active(Fault::BlobUncheckedRead);
    if checked && (bytes.len() as u64 != reference.size || digest(&bytes) != reference.digest) {
        return Err(Error::Damage {
            path,
            line: 1,
            offset: 0,
            reason: "blob content does not match its digest".into(),
        });
    }
    Ok(bytes)
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
    }
}
