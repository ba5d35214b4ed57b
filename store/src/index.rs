//! A sparse offset index: every [`INDEX_STRIDE`]-th seq and where its line starts.
//!
//! It only speeds up finding a seq; the log stays the single source of
//! truth, and the index is rebuilt from the log whenever it is missing.
//! Lookups return a position at or before the wanted seq, never after it.

use crate::event::Seq;
use crate::scan::LogPosition;

/// One index entry per this many events.
pub const INDEX_STRIDE: u64 = 1024;

/// Positions of every `INDEX_STRIDE`-th line.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SparseIndex {
    entries: Vec<LogPosition>,
}

impl SparseIndex {
    /// Notes that the line of `pos.seq` starts at `pos.offset` (ignored unless on the stride).
    pub fn note(&mut self, pos: LogPosition) {
        if pos.seq.is_multiple_of(INDEX_STRIDE) {
            match self.entries.last() {
                Some(last) if last.seq >= pos.seq => {}
                _ => self.entries.push(pos),
            }
        }
    }

    /// The closest known position at or before `seq`.
    pub fn seek(&self, seq: Seq) -> LogPosition {
        let i = self.entries.partition_point(|p| p.seq <= seq);
        if i == 0 {
            LogPosition::START
        } else {
            self.entries[i - 1]
        }
    }

    /// Drops entries at or after `seq` (after a rollback).
    pub fn truncate_from(&mut self, seq: Seq) {
        let i = self.entries.partition_point(|p| p.seq < seq);
        self.entries.truncate(i);
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the index has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeks_to_the_nearest_entry_at_or_before() {
        let mut idx = SparseIndex::default();
        for seq in 0..5000u64 {
            idx.note(LogPosition {
                seq,
                offset: seq * 10,
            });
        }
        assert_eq!(idx.len(), 5);
        assert_eq!(idx.seek(0), LogPosition::START);
        assert_eq!(idx.seek(1023).seq, 0);
        assert_eq!(idx.seek(1024).seq, 1024);
        assert_eq!(idx.seek(4999).offset, 40960);
        idx.truncate_from(2048);
        assert_eq!(idx.seek(4999).seq, 1024);
    }
}
