//! checkpoint-projection at every observation: `snapshot.json` is whole,
//! its offset and projection match the log up to it, and snapshot + tail
//! equals the harness's projection of the whole log (the oracle's, never
//! the store's own fold).

use crate::check::{events, first_diff, tail, v, Invariant, Moment, Violation};
use crate::store::CheckpointView;

/// checkpoint-projection, at every moment (reported once per trial).
pub(super) fn checkpoint(moments: &[Moment<'_>], out: &mut Vec<Violation>) {
    for m in moments {
        let problem = match &m.obs.checkpoint {
            CheckpointView::Absent | CheckpointView::Opaque => None,
            CheckpointView::Unreadable(why) => Some((
                "snapshot.json holds the old or the new snapshot, whole (it is replaced atomically)".to_string(),
                format!("it is unreadable: {why}"),
            )),
            CheckpointView::Present(f) => {
                let k = f.next_seq;
                if f.log_offset_of_next != Some(f.offset) {
                    Some((
                        format!("the snapshot's events 0..{k} to end at byte {} of the log, where event {k} starts", f.offset),
                        match f.log_offset_of_next {
                            Some(o) => format!("event {k} starts at byte {o}"),
                            None => format!("the log has only {}", events(m.obs.records.len())),
                        },
                    ))
                } else if f.fold_at.as_ref() != Some(&f.snapshot) {
                    Some((
                        format!("the snapshot's projection to equal the harness's projection of events 0..{k}"),
                        match &f.fold_at {
                            Some(fold) => format!(
                                "they differ at {} (the snapshot's vs the harness's)",
                                first_diff(&f.snapshot, fold, "projection").unwrap_or_default()
                            ),
                            None => format!("the log has only {}", events(m.obs.records.len())),
                        },
                    ))
                } else if f.resumed.is_none() || f.resumed != m.obs.fold {
                    Some((
                        "snapshot + the log's tail to equal the harness's projection of the whole log".to_string(),
                        match (&f.resumed, &m.obs.fold) {
                            (Some(r), Some(full)) => format!(
                                "they differ at {} (the resumed snapshot's vs the harness's)",
                                first_diff(r, full, "projection").unwrap_or_default()
                            ),
                            (None, _) => "the tail cannot be folded onto the snapshot".to_string(),
                            (Some(_), None) => "the store serves no projection to compare it with".to_string(),
                        },
                    ))
                } else {
                    None
                }
            }
        };
        if let Some((expected, found)) = problem {
            out.push(v(
                Invariant::CheckpointProjection,
                &m.when,
                expected,
                found,
                tail(&m.obs.records, 2),
            ));
            return;
        }
    }
}
