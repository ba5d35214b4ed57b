//! The lock probe (`lock`): a second open while a first holds the
//! session, on a copy of the crash-free run's store; its verdict
//! ([`judge_lock`], `second-writer-refused`) and the child's two opens.

use std::path::Path;

use crate::campaign::probe::child::{refused, ChildArgs, Target};
use crate::campaign::probe::spawn::child;
use crate::campaign::probe::{tell, ProbeError, ProbeReply, ProbeSetup};
use crate::check::{Invariant, Violation};
use crate::store::adapter::ErrorKind;

pub(super) fn lock(
    setup: &ProbeSetup<'_>,
    dir: &Path,
) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    let root = dir.join("root");
    crate::campaign::scratch::copy_dir(&setup.spec.root, &root)
        .map_err(|e| ProbeError::Harness(format!("cannot copy the store's root: {e}")))?;
    let reply = child(setup, "lock", &root, &setup.spec.session, None, &[])?;
    let told = format!(
        "the session opened, then opened again while the first held it: {}",
        tell(&reply)
    );
    Ok((told, judge_lock(&reply)?.into_iter().collect(), false))
}

/// The lock verdict.
pub fn judge_lock(reply: &ProbeReply) -> Result<Option<Violation>, ProbeError> {
    let violation = |found: String| Violation {
        invariant: Invariant::SecondWriterRefused,
        when: "after the crash-free run, on a copy of its store opened for writing".into(),
        expected: "a second open while the first holds the session refused with `locked`".into(),
        found,
        events: vec![],
    };
    Ok(match reply {
        ProbeReply::Refused { kind, .. } if kind == ErrorKind::Locked.name() => None,
        ProbeReply::Refused {
            at, kind, message, ..
        } => Some(violation(format!(
            "a `{kind}` refusal at {at}, not `locked`: {message}"
        ))),
        ProbeReply::SecondOpened => Some(violation(
            "the second open succeeded: two writers hold the session, and would append at the same seqs".into(),
        )),
        _ => return Err(ProbeError::Harness("the lock probe got another probe's reply".into())),
    })
}

pub(super) fn child_lock(args: &ChildArgs) -> Result<ProbeReply, ProbeError> {
    let open = || Target::open(args, None);
    let _first = open().map_err(|e| e.at("first open"))?;
    match open() {
        Ok(_second) => Ok(ProbeReply::SecondOpened),
        Err(e) => refused("second open", e, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_let_in_is_a_violation_and_locked_is_not() {
        let refused = |kind: &str| ProbeReply::Refused {
            at: "second open".into(),
            kind: kind.into(),
            message: "m".into(),
            events_before: None,
            events_after: None,
        };
        assert!(judge_lock(&refused("locked")).unwrap().is_none());
        let io = judge_lock(&refused("io")).unwrap().expect("not `locked`");
        assert_eq!(io.invariant, Invariant::SecondWriterRefused);
        assert!(io.found.contains("`io` refusal"), "{}", io.found);
        let let_in = judge_lock(&ProbeReply::SecondOpened).unwrap().unwrap();
        assert!(let_in.found.contains("two writers"), "{}", let_in.found);
        assert!(judge_lock(&ProbeReply::Accepted { seq: 1 }).is_err());
    }
}
