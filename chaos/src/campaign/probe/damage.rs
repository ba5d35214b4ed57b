//! The damage probes (`damage`, `fused`, `zeros`, `cut`,
//! `cut-unreadable-snapshot`): how each changes its copy of the store
//! ([`Change`], a cut of agentstore's log) and their verdict
//! ([`judge_damage`], `damage-refused`). It changes bytes of a copy only.

use std::path::Path;

use agentchaos_protocol::event::Record;
use agentstore::{SessionId, SessionPaths};

use crate::campaign::probe::fault::{judge_fault, open_altered, rewrite, served_problem};
use crate::campaign::probe::{tell, ProbeError, ProbeReply, ProbeSetup};
use crate::check::{Invariant, Violation};
use crate::store::adapter::{Capability, ErrorKind};

/// How a damage probe changes its file.
pub(super) enum Change {
    /// Flip the low bit of the byte at this offset.
    Flip(u64),
    /// Zero LEN bytes from OFFSET, keeping newlines.
    Zeros(u64, u64),
    /// Flip the low bit of the newline at this offset and drop the last
    /// byte, a newline too.
    Fuse(u64),
}

impl Change {
    /// Applies the change to `bytes` of `file`; says what it did.
    pub(super) fn apply(&self, file: &Path, bytes: &mut Vec<u8>) -> Result<String, ProbeError> {
        let short = |end: u64| {
            ProbeError::Harness(format!(
                "{} has {} bytes: no byte offset {}",
                file.display(),
                bytes.len(),
                end
            ))
        };
        match *self {
            Change::Flip(offset) => {
                let missing = short(offset);
                let byte = bytes.get_mut(offset as usize).ok_or(missing)?;
                let was = *byte;
                *byte ^= 1;
                Ok(format!(
                    "{}, byte offset {offset}: {was:#04x} flipped to {:#04x}",
                    file.display(),
                    *byte
                ))
            }
            Change::Fuse(newline) => {
                let is_newline = |at: usize| bytes.get(at) == Some(&b'\n');
                let last = bytes.len().checked_sub(1).filter(|&l| is_newline(l));
                let last = last.filter(|&l| (newline as usize) < l && is_newline(newline as usize));
                let Some(last) = last else {
                    return Err(ProbeError::Harness(format!(
                        "{}: byte offset {newline} and the last byte are not two newlines",
                        file.display()
                    )));
                };
                bytes[newline as usize] ^= 1;
                bytes.truncate(last);
                Ok(format!(
                    "{}, byte offset {newline}: the newline before the last line flipped to {:#04x}, and the last line's newline at byte offset {last} dropped (two complete lines fused, ending the file unterminated)",
                    file.display(),
                    bytes[newline as usize]
                ))
            }
            Change::Zeros(offset, len) => {
                let end = offset.checked_add(len).filter(|e| *e <= bytes.len() as u64);
                let end = end.ok_or_else(|| short(offset.saturating_add(len)))?;
                let range = &mut bytes[offset as usize..end as usize];
                let lines = range.iter().filter(|b| **b == b'\n').count();
                range
                    .iter_mut()
                    .filter(|b| **b != b'\n')
                    .for_each(|b| *b = 0);
                Ok(format!(
                    "{}, byte offsets {offset}..{end}: {len} bytes over {lines} complete line(s) zeroed, newlines kept",
                    file.display()
                ))
            }
        }
    }
}

pub(super) fn damage(
    setup: &ProbeSetup<'_>,
    file: &Path,
    change: &Change,
    dir: &Path,
) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    let (what, reply) = open_altered(setup, dir, |root| {
        rewrite(root, file, |bytes| change.apply(file, bytes))
    })?;
    let told = format!("{what}; {}", tell(&reply));
    let verdict = judge_fault(setup, Capability::DamageRefusal, &what, &reply, || {
        judge_damage(&what, setup.reference, &reply)
    })?;
    Ok((told, verdict.into_iter().collect(), false))
}

pub(super) fn cut(
    setup: &ProbeSetup<'_>,
    file: &Path,
    len: u64,
    unreadable_snapshot: bool,
    dir: &Path,
) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    let (what, reply) = open_altered(setup, dir, |root| {
        let path = root.join(file);
        let was = std::fs::metadata(&path)
            .map_err(|e| ProbeError::Harness(format!("{}: {e}", path.display())))?
            .len();
        if len >= was {
            return Err(ProbeError::Harness(format!(
                "{} has {was} bytes: no cut to {len}",
                file.display()
            )));
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(len))
            .map_err(|e| ProbeError::Harness(format!("{}: {e}", path.display())))?;
        let mut what = format!(
            "{} cut from {was} to {len} bytes, inside the last line snapshot.json covers",
            file.display()
        );
        if unreadable_snapshot {
            let id = SessionId::new(&setup.spec.session)
                .map_err(|e| ProbeError::Harness(e.to_string()))?;
            let snapshot = SessionPaths::new(root, &id).snapshot();
            std::fs::remove_file(&snapshot)
                .and_then(|()| std::fs::create_dir(&snapshot))
                .map_err(|e| ProbeError::Harness(format!("{}: {e}", snapshot.display())))?;
            what.push_str(
                ", and snapshot.json replaced by a directory (reading it fails, so an `io` refusal passes too)",
            );
        }
        Ok(what)
    })?;
    let told = format!("{what}; {}", tell(&reply));
    // A store that cannot read its own snapshot may say so (`io`).
    let io = matches!(&reply, ProbeReply::Refused { kind, .. } if kind == ErrorKind::Io.name());
    let verdict = if unreadable_snapshot && io {
        None
    } else {
        judge_fault(setup, Capability::DamageRefusal, &what, &reply, || {
            judge_damage(&what, setup.reference, &reply)
        })?
    };
    Ok((told, verdict.into_iter().collect(), false))
}

/// The damage verdict: `what` says which byte was flipped.
pub fn judge_damage(
    what: &str,
    reference: &[Record],
    reply: &ProbeReply,
) -> Result<Option<Violation>, ProbeError> {
    let violation = |found: String, events: Vec<String>| {
        Violation {
        invariant: Invariant::DamageRefused,
        when: "after the crash-free run, on a damaged copy of its store".into(),
        expected: format!(
            "{what}: opening or reading refuses with `damage`, or the store serves the {} undamaged events unchanged",
            reference.len()
        ),
        found,
        events,
    }
    };
    match reply {
        ProbeReply::Refused { kind, .. } if kind == ErrorKind::Damage.name() => Ok(None),
        ProbeReply::Refused {
            at, kind, message, ..
        } => Ok(Some(violation(
            format!("a `{kind}` refusal at {at}, not `damage`: {message}"),
            vec![],
        ))),
        ProbeReply::Crashed { at, message } => Ok(Some(violation(
            format!("the store died at {at} instead of refusing: {message}"),
            vec![],
        ))),
        ProbeReply::Served {
            records,
            wrong_blobs,
            ..
        } => Ok(served_problem(reference, records)
            .or_else(|| {
                (!wrong_blobs.is_empty()).then(|| {
                    (
                        format!(
                            "it served a damaged blob without refusing: {}",
                            wrong_blobs.join("; ")
                        ),
                        vec![],
                    )
                })
            })
            .map(|(found, events)| violation(found, events))),
        ProbeReply::Accepted { .. }
        | ProbeReply::NotReplayed { .. }
        | ProbeReply::SessionLost { .. }
        | ProbeReply::NotMarked { .. }
        | ProbeReply::SecondOpened
        | ProbeReply::Limit { .. } => Err(ProbeError::Harness(
            "the damage probe got another probe's reply".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::probe::fixture::log;
    use crate::campaign::probe::record_key;

    #[test]
    fn a_fuse_flips_the_newline_and_drops_the_last_one() {
        let file = Path::new("log");
        let mut bytes = b"a\nbb\ncc\n".to_vec();
        let told = Change::Fuse(4).apply(file, &mut bytes).unwrap();
        assert_eq!(bytes, b"a\nbb\x0bcc".to_vec(), "{told}");
        // Not two newlines: a harness error, the file left as it was.
        for (newline, text) in [(1u64, &b"a\nb"[..]), (0, b"a\nb\n"), (3, b"a\nb\n")] {
            let mut bytes = text.to_vec();
            assert!(Change::Fuse(newline).apply(file, &mut bytes).is_err());
            assert_eq!(bytes, text);
        }
    }

    #[test]
    fn a_silent_skip_is_a_violation_and_a_damage_refusal_or_redundancy_is_not() {
        let reference = log();
        let all: Vec<String> = reference.iter().map(record_key).collect();
        let served = |n: usize| ProbeReply::Served {
            records: all[..n].to_vec(),
            types: vec![],
            wrong_blobs: vec![],
        };
        assert!(judge_damage("f", &reference, &served(3)).unwrap().is_none());
        let refused = |kind: &str| ProbeReply::Refused {
            at: "open".into(),
            kind: kind.into(),
            message: "m".into(),
            events_before: None,
            events_after: None,
        };
        assert!(judge_damage("f", &reference, &refused("damage"))
            .unwrap()
            .is_none());
        // The broken store: it skips the damaged line and serves the rest.
        let skipped = judge_damage("f, byte offset 9", &reference, &served(2))
            .unwrap()
            .expect("a silent skip is caught");
        assert_eq!(skipped.invariant, Invariant::DamageRefused);
        assert!(skipped.found.contains("silent skip"), "{}", skipped.found);
        assert!(skipped.expected.contains("byte offset 9"));
        let wrong = judge_damage("f", &reference, &refused("io"))
            .unwrap()
            .unwrap();
        assert!(wrong.found.contains("`io` refusal"), "{}", wrong.found);
        let died = ProbeReply::Crashed {
            at: "open".into(),
            message: "panicked: boom".into(),
        };
        let died = judge_damage("f", &reference, &died).unwrap().unwrap();
        assert!(died.found.contains("died at open"), "{}", died.found);
        // The broken store: every event served, a damaged blob too.
        let changed_blob = ProbeReply::Served {
            records: all.clone(),
            types: vec![],
            wrong_blobs: vec!["the blob of event 2 (ab12): it served 3 bytes".into()],
        };
        let blob = judge_damage("f", &reference, &changed_blob)
            .unwrap()
            .expect("a damaged blob served is caught");
        assert_eq!(blob.invariant, Invariant::DamageRefused);
        assert!(blob.found.contains("damaged blob"), "{}", blob.found);
        assert!(blob.found.contains("event 2"), "{}", blob.found);
    }
}
