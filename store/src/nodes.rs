//! The history tree's nodes, and where a fold finds those outside the
//! projection's active window (a branch switch to an old entry, a parent
//! off the branch).
//!
//! A [`Node`] is what a fold needs of one message-like entry (its seq, its
//! parent and, for a compaction, its [`CompactionView`]); a [`NodeSource`]
//! looks one up by seq. The fold itself, and the session rules, are
//! [`crate::projection`]'s: this module must never apply an event, and
//! reads the log without changing it.
//!
//! [`LogNodes`] reads a node back from the log by seq, starting at the
//! nearest [`SparseIndex`] entry: what an open session uses, since the
//! log is the source of truth. [`RecentNodes`] is what a fold from disk
//! uses while it reads the log: it remembers the nodes of the last
//! [`RECENT_NODES`] message-like events it was shown and reads older ones
//! back from the part of the log already verified, so folding a log of any
//! length holds a bounded number of nodes (the in-memory [`SeenNodes`]
//! remembers every one).

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::event::{seq_of_event_id, Event, Record, Seq};
use crate::index::{SparseIndex, INDEX_STRIDE};
use crate::scan::Scanner;

/// What a [`NodeSource`] knows of one message-like entry of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub seq: Seq,
    pub parent: Option<Seq>,
    /// For a compaction entry: its state.
    pub compaction: Option<CompactionView>,
}

/// Looks up tree nodes that are not in the projection's active window.
pub trait NodeSource {
    /// The node at `seq`, or `None` if that event is not message-like.
    fn node(&mut self, seq: Seq) -> Result<Option<Node>>;
}

/// The node of a record, if it is message-like.
pub fn node_of(rec: &Record) -> Option<Node> {
    node_of_event(rec.seq, rec.event()?)
}

/// The node of `event` at `seq`, if it is message-like.
pub fn node_of_event(seq: Seq, event: &Event) -> Option<Node> {
    let parent = event.parent()?;
    Some(Node {
        seq,
        parent: parent.and_then(|p| seq_of_event_id(p)),
        compaction: match event {
            Event::Compaction {
                summary,
                first_kept_id,
                tokens_before,
                ..
            } => Some(CompactionView {
                seq,
                summary: summary.clone(),
                first_kept: seq_of_event_id(first_kept_id).unwrap_or(seq),
                tokens_before: *tokens_before,
            }),
            _ => None,
        },
    })
}

/// The latest compaction on the active branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionView {
    pub seq: Seq,
    pub summary: String,
    /// Seq of the first entry kept verbatim.
    pub first_kept: Seq,
    pub tokens_before: u64,
}

/// How many of the latest nodes a fold from disk keeps in memory (about
/// 100 bytes each, plus compaction summaries).
pub const RECENT_NODES: usize = 1 << 16;

/// Reads tree nodes from the log by seq, starting near it via the sparse index.
#[derive(Debug)]
pub struct LogNodes<'a> {
    pub path: &'a Path,
    pub index: &'a SparseIndex,
}

impl NodeSource for LogNodes<'_> {
    fn node(&mut self, seq: Seq) -> Result<Option<Node>> {
        let mut scanner = Scanner::open(self.path, self.index.seek(seq))?;
        while let Some((_, rec)) = scanner.next_record()? {
            if rec.seq == seq {
                return Ok(node_of(&rec));
            }
        }
        Ok(None)
    }
}

/// The nodes of the latest message-like events a fold from disk has seen,
/// and one index block of older ones read back from the log.
#[derive(Debug)]
pub struct RecentNodes {
    capacity: usize,
    nodes: HashMap<Seq, Node>,
    order: VecDeque<Seq>,
    /// Every node at or after this seq that was seen is in `nodes`.
    complete_from: Seq,
    /// The last block of older nodes read back: the seqs `start..end` it
    /// covers and their nodes.
    block: Option<(std::ops::Range<Seq>, HashMap<Seq, Node>)>,
}

impl Default for RecentNodes {
    fn default() -> Self {
        RecentNodes::keeping(RECENT_NODES)
    }
}

impl RecentNodes {
    /// Keeps the latest `capacity` nodes (at least one).
    fn keeping(capacity: usize) -> RecentNodes {
        RecentNodes {
            capacity: capacity.max(1),
            nodes: HashMap::new(),
            order: VecDeque::new(),
            complete_from: 0,
            block: None,
        }
    }

    /// Remembers the node of `rec` (the next record of the fold), if it has
    /// one, forgetting the oldest beyond [`RECENT_NODES`].
    pub fn observe(&mut self, rec: &Record) {
        let Some(node) = node_of(rec) else { return };
        if self.order.len() == self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.nodes.remove(&old);
                self.complete_from = old + 1;
            }
        }
        self.order.push_back(node.seq);
        self.nodes.insert(node.seq, node);
    }

    /// A node source over these nodes that reads forgotten ones back from
    /// the log at `path`, whose lines before the fold's position are
    /// verified and indexed in `index`.
    pub fn with_log<'a>(&'a mut self, path: &'a Path, index: &'a SparseIndex) -> ReplayNodes<'a> {
        ReplayNodes {
            recent: self,
            path,
            index,
        }
    }
}

/// [`RecentNodes`] backed by the already-verified part of the log.
#[derive(Debug)]
pub struct ReplayNodes<'a> {
    recent: &'a mut RecentNodes,
    path: &'a Path,
    index: &'a SparseIndex,
}

impl NodeSource for ReplayNodes<'_> {
    fn node(&mut self, seq: Seq) -> Result<Option<Node>> {
        let recent = &mut *self.recent;
        if seq >= recent.complete_from {
            return Ok(recent.nodes.get(&seq).cloned());
        }
        if let Some((covered, nodes)) = &recent.block {
            if covered.contains(&seq) {
                return Ok(nodes.get(&seq).cloned());
            }
        }
        let start = self.index.seek(seq);
        // Read the whole index block holding `seq` (a walk up an old branch
        // asks for many seqs of one block in turn), but nothing at or after
        // `complete_from`: that part may not be verified yet.
        let end = (start.seq + INDEX_STRIDE).min(recent.complete_from);
        let mut nodes = HashMap::new();
        let mut scanner = Scanner::open(self.path, start)?;
        while let Some((_, rec)) = scanner.next_record()? {
            if rec.seq >= end {
                break;
            }
            if let Some(n) = node_of(&rec) {
                nodes.insert(n.seq, n);
            }
        }
        let found = nodes.get(&seq).cloned();
        recent.block = Some((start.seq..end, nodes));
        Ok(found)
    }
}

/// A [`NodeSource`] that remembers every node it is shown, for folding
/// records held in memory ([`crate::projection::fold`]); a fold from disk
/// uses the bounded [`crate::nodes::RecentNodes`] instead.
#[derive(Debug, Default)]
pub struct SeenNodes {
    nodes: std::collections::HashMap<Seq, Node>,
}

impl SeenNodes {
    /// Remembers the node of `rec`, if it has one.
    pub fn observe(&mut self, rec: &Record) {
        if let Some(n) = node_of(rec) {
            self.nodes.insert(n.seq, n);
        }
    }
}

impl NodeSource for SeenNodes {
    fn node(&mut self, seq: Seq) -> Result<Option<Node>> {
        Ok(self.nodes.get(&seq).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use crate::projection::{fold, Projection};
    use crate::scan::{self, LogPosition};
    use crate::session::{Session, SessionOptions};
    use crate::SessionId;

    fn user(s: &mut Session, parent: Option<String>, text: &str) -> String {
        let event = Event::UserMessage {
            parent,
            text: text.into(),
        };
        s.append(event).unwrap().id().clone()
    }

    /// Folding from disk while keeping only 3 nodes gives the projection
    /// that keeping every node gives, across branch switches to entries
    /// long forgotten (read back from the log, several in one index block).
    #[test]
    fn a_bounded_fold_from_disk_equals_the_full_fold() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let id = SessionId::new("n").unwrap();
        let mut s =
            Session::create(dir.path(), &id, dir.path(), SessionOptions::default()).unwrap();
        let mut ids = Vec::new();
        let mut leaf = None;
        for i in 0..(INDEX_STRIDE as usize + 40) {
            let e = user(&mut s, leaf.clone(), &format!("m{i}"));
            ids.push(e.clone());
            leaf = Some(e);
        }
        // Branch off an entry in the first index block, then one in the second.
        let b = user(&mut s, Some(ids[5].clone()), "back to 5");
        user(&mut s, Some(b), "on the old branch");
        user(
            &mut s,
            Some(ids[INDEX_STRIDE as usize + 2].clone()),
            "back again",
        );
        let events = s.paths().events();
        drop(s);

        let mut records = Vec::new();
        scan::verify(&events, LogPosition::START, |_, rec| {
            records.push(rec.clone());
            Ok(())
        })
        .unwrap();
        let full = fold(&records).unwrap();

        let mut bounded = Projection::default();
        let mut index = SparseIndex::default();
        let mut seen = RecentNodes::keeping(3);
        scan::verify(&events, LogPosition::START, |offset, rec| {
            index.note(LogPosition {
                offset,
                seq: rec.seq,
            });
            seen.observe(rec);
            bounded.apply(rec, &mut seen.with_log(&events, &index))
        })
        .unwrap();
        assert_eq!(seen.nodes.len(), 3);
        assert_eq!(bounded, full);
        assert_eq!(bounded.branch().len(), INDEX_STRIDE as usize + 4);
    }
}
