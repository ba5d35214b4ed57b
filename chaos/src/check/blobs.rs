//! blob-readable: every blob a record of the log references reads back
//! with its size and digest, as the harness read it at each observation
//! (its own SHA-256, never the store's word).

use crate::check::{v, Invariant, Moment, Violation};
use crate::model::describe_record;

/// blob-readable: every blob a record in the log references reads back
/// with its size and digest. One violation per moment, with the count.
pub(super) fn blobs_readable(m: &Moment<'_>, out: &mut Vec<Violation>) {
    let bad: Vec<_> = m.obs.blobs.iter().filter(|b| b.problem.is_some()).collect();
    let Some(first) = bad.first() else { return };
    let record = m
        .obs
        .records
        .get(first.seq as usize)
        .map(describe_record)
        .unwrap_or_else(|| format!("seq {}", first.seq));
    out.push(v(
        Invariant::BlobReadable,
        &m.when,
        format!(
            "blob {} ({} bytes), referenced by {record}, to read back with its digest",
            first.reference.digest, first.reference.size
        ),
        format!(
            "{}{}",
            first.problem.as_deref().unwrap_or_default(),
            if bad.len() > 1 {
                format!(
                    " (and {} more of {} referenced blobs)",
                    bad.len() - 1,
                    m.obs.blobs.len()
                )
            } else {
                String::new()
            }
        ),
        vec![record],
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check;
    use crate::check::fixture::history;

    #[test]
    fn blob_readable_names_the_first_unreadable_blob_and_counts_the_rest() {
        let mut h = history(true);
        let blob = |digest: &str, problem: Option<&str>| crate::store::BlobRead {
            seq: 1,
            reference: agentchaos_protocol::event::BlobRef {
                digest: digest.into(),
                size: 20_000,
            },
            problem: problem.map(str::to_string),
        };
        h.final_obs.blobs = vec![
            blob("aa", None),
            blob("bb", Some("cannot read it: gone")),
            blob("cc", Some("x")),
        ];
        let found: Vec<Violation> = check(&h, None)
            .into_iter()
            .filter(|v| v.invariant == Invariant::BlobReadable)
            .collect();
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].expected.starts_with("blob bb (20000 bytes)"),
            "{}",
            found[0].expected
        );
        assert_eq!(
            found[0].found,
            "cannot read it: gone (and 1 more of 3 referenced blobs)"
        );
        h.final_obs.blobs = vec![blob("aa", None)];
        assert!(check(&h, None)
            .iter()
            .all(|v| v.invariant != Invariant::BlobReadable));
    }
}
