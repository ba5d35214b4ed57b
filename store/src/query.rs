//! Streamed queries over one session's log: by seq, by range, by type, last match.
//!
//! Every query runs on a [`Scanner`], so it holds one line at a time and
//! verifies the frame of each line it passes (checksum, seq, id, type); it
//! builds (and so checks the fields of) only the events it returns. Readers take no lock:
//! a final line still being written (no newline yet) is not yet visible and
//! ends the stream like a torn tail; damage is an error, never skipped.
//! A [`SparseIndex`] lets a query start near its first seq instead of at
//! byte 0; the index only ever points at or before the wanted seq, and the
//! scanner checks the seq found there. A line that looks damaged is read
//! once more before it is reported (see [`Events`]). This module never writes.

use std::io::BufReader;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::event::{Record, Seq};
use crate::framing::Header;
use crate::index::SparseIndex;
use crate::layout::SessionPaths;
use crate::log::EventLog;
use crate::scan::{Frame, LogFile, LogPosition, Scanner, TornTail};

/// What to read: a seq range and, optionally, a set of event types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// First seq wanted (inclusive).
    pub from: Seq,
    /// Last seq wanted (inclusive); `None` reads to the end.
    pub to: Option<Seq>,
    /// Only these `type` tags; `None` means every type.
    pub types: Option<Vec<String>>,
}

impl Query {
    /// Every event.
    pub fn all() -> Query {
        Query {
            from: 0,
            to: None,
            types: None,
        }
    }

    /// Events with a seq strictly greater than `seq`.
    pub fn after(seq: Seq) -> Query {
        Query {
            from: seq.saturating_add(1),
            ..Query::all()
        }
    }

    /// Events whose seq lies in `range`.
    pub fn range(range: impl RangeBounds<Seq>) -> Query {
        let from = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let to = match range.end_bound() {
            Bound::Included(&s) => Some(s),
            // `..0` is empty: it wants nothing, which `from > to` expresses.
            Bound::Excluded(&0) => return Query::empty(),
            Bound::Excluded(&s) => Some(s - 1),
            Bound::Unbounded => None,
        };
        Query {
            from,
            to,
            types: None,
        }
    }

    fn empty() -> Query {
        Query {
            from: 1,
            to: Some(0),
            types: None,
        }
    }

    /// Keeps only events whose type is one of `types`.
    pub fn types<S: Into<String>>(mut self, types: impl IntoIterator<Item = S>) -> Query {
        self.types = Some(types.into_iter().map(Into::into).collect());
        self
    }

    fn wants_type(&self, type_name: &str) -> bool {
        self.types
            .as_ref()
            .is_none_or(|ts| ts.iter().any(|t| t == type_name))
    }

    fn is_empty(&self) -> bool {
        self.to.is_some_and(|to| to < self.from)
    }
}

/// Read access to one session's log, with a sparse index to start near a seq.
#[derive(Debug, Clone)]
pub struct LogReader {
    path: PathBuf,
    index: SparseIndex,
}

impl LogReader {
    /// A reader with no index: queries scan from byte 0.
    pub fn open(paths: &SessionPaths) -> Result<LogReader> {
        crate::fsutil::refuse_symlink(paths.dir())?;
        let path = paths.events();
        if !path.exists() {
            return Err(Error::NoSuchSession {
                id: paths.id().to_string(),
                root: paths.root().to_path_buf(),
            });
        }
        Ok(LogReader {
            path,
            index: SparseIndex::default(),
        })
    }

    /// A reader whose index is built by one streaming pass over the log
    /// (which also verifies every line: damage fails here).
    pub fn indexed(paths: &SessionPaths) -> Result<LogReader> {
        let mut reader = LogReader::open(paths)?;
        let mut events = reader.events(&Query::all())?;
        loop {
            // With no filter, each record starts where the previous one ended.
            let offset = events.position().offset;
            match events.next().transpose()? {
                Some(rec) => reader.index.note(LogPosition {
                    offset,
                    seq: rec.seq,
                }),
                None => return Ok(reader),
            }
        }
    }

    /// A reader of the log file at `path`, with no index.
    pub fn from_file(path: &Path) -> LogReader {
        LogReader {
            path: path.to_path_buf(),
            index: SparseIndex::default(),
        }
    }

    /// A reader sharing the index the writer has built as it went.
    pub fn for_log(log: &EventLog) -> LogReader {
        LogReader {
            path: log.path().to_path_buf(),
            index: log.index(),
        }
    }

    /// Path of the log read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The index queries seek with.
    pub fn index(&self) -> &SparseIndex {
        &self.index
    }

    /// Streams the events `query` selects, starting near `query.from`.
    pub fn events(&self, query: &Query) -> Result<Events> {
        self.events_from(self.index.seek(query.from), query)
    }

    /// Streams the events `query` selects, scanning from `pos`, which must be
    /// a line start the store reported (e.g. [`Events::position`] of an
    /// earlier stream, to pick up lines appended since).
    pub fn events_from(&self, pos: LogPosition, query: &Query) -> Result<Events> {
        Ok(Events {
            scanner: Scanner::open(&self.path, pos)?,
            path: self.path.clone(),
            query: query.clone(),
            finished: query.is_empty(),
            rechecked: false,
        })
    }

    /// Events with a seq strictly greater than `seq`.
    pub fn after(&self, seq: Seq) -> Result<Events> {
        self.events(&Query::after(seq))
    }

    /// Events whose seq lies in `range`.
    pub fn range(&self, range: impl RangeBounds<Seq>) -> Result<Events> {
        self.events(&Query::range(range))
    }

    /// Events of the given types, in log order.
    pub fn of_types<S: Into<String>>(&self, types: impl IntoIterator<Item = S>) -> Result<Events> {
        self.events(&Query::all().types(types))
    }

    /// The last event of type `type_name` for which `pred` holds. Reads the
    /// whole log (verifying every frame), holding only the best match so far.
    pub fn last_of_type(
        &self,
        type_name: &str,
        mut pred: impl FnMut(&Record) -> bool,
    ) -> Result<Option<Record>> {
        let mut last = None;
        for rec in self.of_types([type_name])? {
            let rec = rec?;
            if pred(&rec) {
                last = Some(rec);
            }
        }
        Ok(last)
    }
}

/// A stream of verified records selected by a [`Query`].
#[derive(Debug)]
pub struct Events {
    scanner: Scanner<BufReader<LogFile>>,
    path: PathBuf,
    query: Query,
    finished: bool,
    /// Whether the line at the current position was re-read after looking damaged.
    rechecked: bool,
}

impl Events {
    /// Where the next line starts: resume here with [`LogReader::events_from`].
    pub fn position(&self) -> LogPosition {
        self.scanner.position()
    }

    /// The torn (or not yet complete) bytes that ended the stream, if any.
    pub fn torn(&self) -> Option<&TornTail> {
        self.scanner.torn()
    }

    /// The next frame the query selects, checked as
    /// [`Scanner::next_frame`] checks it (the event not built): for callers
    /// that need only the verified line, its seq or its type.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>> {
        let found = self.next_selected();
        if found.is_err() {
            self.finished = true;
        }
        Ok(found?.map(|(offset, len, header)| self.scanner.frame(offset, len, header)))
    }

    fn next_record(&mut self) -> Result<Option<Record>> {
        match self.next_frame()? {
            Some(frame) => frame.record().map(Some),
            None => Ok(None),
        }
    }

    /// Advances to the next line the query selects.
    fn next_selected(&mut self) -> Result<Option<(u64, usize, Header)>> {
        while !self.finished {
            let next = match self.scanner.advance() {
                Err(e) if e.is_damage() && !self.rechecked => {
                    // Without the lock, we may have buffered a torn tail that a
                    // writer has since cut and appended after: what follows it
                    // in our buffer is then the middle of a new line. Damage
                    // does not move, so read the line again before reporting it.
                    self.rechecked = true;
                    self.scanner = Scanner::open(&self.path, self.scanner.position())?;
                    continue;
                }
                next => next?,
            };
            let Some((offset, len, header)) = next else {
                self.finished = true;
                break;
            };
            self.rechecked = false;
            if header.seq < self.query.from {
                continue;
            }
            if let Some(to) = self.query.to {
                // Nothing after the range is read.
                if header.seq > to {
                    self.finished = true;
                    break;
                }
                self.finished = header.seq == to;
            }
            if self.query.wants_type(header.type_name.as_str()) {
                return Ok(Some((offset, len, header)));
            }
        }
        Ok(None)
    }
}

impl Iterator for Events {
    type Item = Result<Record>;
    fn next(&mut self) -> Option<Self::Item> {
        let item = self.next_record();
        if item.is_err() {
            self.finished = true;
        }
        item.transpose()
    }
}
