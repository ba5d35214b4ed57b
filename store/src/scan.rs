//! Reading the log back, line by line, verifying each one.
//!
//! [`Scanner`] streams records from a byte position and never holds more
//! than one line. It tells a torn tail (the final segment: no newline, a bad
//! frame or checksum, zero bytes) from damage (any bad line before the
//! tail). Damage is an error naming line and offset; it is never skipped.
//! A torn tail ends the stream and is reported through [`Scanner::torn`];
//! only the writer may remove it.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::event::{seq_of_event_id, Record, Seq};
use crate::framing::{self, LineError, MAX_LINE_BYTES};

/// A place in the log where a line starts, and the seq of that line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct LogPosition {
    pub offset: u64,
    pub seq: Seq,
}

impl LogPosition {
    /// The start of the log.
    pub const START: LogPosition = LogPosition { offset: 0, seq: 0 };
    /// 1-based line number of the line at this position (one event per line).
    pub fn line(&self) -> u64 {
        self.seq + 1
    }
}

/// The bytes at the end of the log that do not form a complete, valid line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    pub offset: u64,
    pub len: u64,
    /// 1-based line number where the torn bytes start.
    pub line: u64,
    pub reason: String,
}

impl std::fmt::Display for TornTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "torn tail: {} byte(s) at byte offset {} (line {}): {}",
            self.len, self.offset, self.line, self.reason
        )
    }
}

/// Buffer size for sequential reads.
const READ_BUF: usize = 256 * 1024;

/// Streams verified records from a position in an event log.
#[derive(Debug)]
pub struct Scanner<R> {
    reader: R,
    path: PathBuf,
    pos: LogPosition,
    buf: Vec<u8>,
    torn: Option<TornTail>,
    done: bool,
}

impl Scanner<BufReader<File>> {
    /// Opens `path` for reading from `from` (a position previously returned
    /// by the store: the line there must carry `from.seq`).
    pub fn open(path: &Path, from: LogPosition) -> Result<Self> {
        let mut file = File::open(path).map_err(Error::io("open", path))?;
        if from.offset > 0 {
            file.seek(SeekFrom::Start(from.offset))
                .map_err(Error::io("seek", path))?;
        }
        Ok(Scanner::new(
            BufReader::with_capacity(READ_BUF, file),
            path,
            from,
        ))
    }
}

impl<R: BufRead> Scanner<R> {
    /// Scans `reader`, which is positioned at `from`.
    pub fn new(reader: R, path: &Path, from: LogPosition) -> Self {
        Scanner {
            reader,
            path: path.to_path_buf(),
            pos: from,
            buf: Vec::with_capacity(4096),
            torn: None,
            done: false,
        }
    }

    /// Where the next line would start (after the last record returned).
    pub fn position(&self) -> LogPosition {
        self.pos
    }

    /// The torn tail found at the end, once the stream has ended.
    pub fn torn(&self) -> Option<&TornTail> {
        self.torn.as_ref()
    }

    fn at_eof(&mut self) -> Result<bool> {
        let path = &self.path;
        Ok(self
            .reader
            .fill_buf()
            .map_err(Error::io("read", path))?
            .is_empty())
    }

    fn damage(&self, reason: String) -> Error {
        Error::Damage {
            path: self.path.clone(),
            line: self.pos.line(),
            offset: self.pos.offset,
            reason,
        }
    }

    fn end_torn(&mut self, len: u64, reason: String) {
        self.torn = Some(TornTail {
            offset: self.pos.offset,
            len,
            line: self.pos.line(),
            reason,
        });
        self.done = true;
    }

    /// The next verified record and the offset of its line.
    pub fn next_record(&mut self) -> Result<Option<(u64, Record)>> {
        if self.done {
            return Ok(None);
        }
        self.buf.clear();
        let n = (&mut self.reader)
            .take(MAX_LINE_BYTES as u64)
            .read_until(b'\n', &mut self.buf)
            .map_err(Error::io("read", &self.path))?;
        if n == 0 {
            self.done = true;
            return Ok(None);
        }
        if self.buf.last() != Some(&b'\n') {
            if n == MAX_LINE_BYTES && !self.at_eof()? {
                self.done = true;
                return Err(self.damage(format!(
                    "no newline within {MAX_LINE_BYTES} bytes (line longer than the limit)"
                )));
            }
            let reason = if self.buf.iter().all(|&b| b == 0) {
                format!("{n} zero byte(s) after the last complete line")
            } else {
                "final line has no trailing newline (interrupted write)".to_string()
            };
            self.end_torn(n as u64, reason);
            return Ok(None);
        }
        let line = &self.buf[..n - 1];
        match framing::decode(line) {
            Ok(rec) => {
                if rec.seq != self.pos.seq {
                    self.done = true;
                    return Err(self.damage(format!(
                        "expected seq {}, found seq {} (gap, duplicate or reordering)",
                        self.pos.seq, rec.seq
                    )));
                }
                // Ids are unique because each is derived from its seq.
                if seq_of_event_id(&rec.id) != Some(rec.seq) {
                    self.done = true;
                    return Err(self.damage(format!(
                        "id {:?} does not match seq {} (expected \"e{}\")",
                        rec.id, rec.seq, rec.seq
                    )));
                }
                let offset = self.pos.offset;
                self.pos = LogPosition {
                    offset: offset + n as u64,
                    seq: self.pos.seq + 1,
                };
                Ok(Some((offset, rec)))
            }
            Err(LineError::UnknownType(type_name)) => {
                self.done = true;
                Err(Error::UnknownEventType {
                    path: self.path.clone(),
                    line: self.pos.line(),
                    offset: self.pos.offset,
                    type_name,
                })
            }
            Err(e @ (LineError::Frame(_) | LineError::Checksum { .. })) => {
                if let Some(at) = embedded_valid_line(line) {
                    // A lost newline merged a committed line into this one:
                    // that is damage, and cutting it as a tail would lose data.
                    self.done = true;
                    Err(self.damage(format!(
                        "{e}; a valid line starts {at} bytes into it (a newline was damaged?)"
                    )))
                } else if self.at_eof()? {
                    self.end_torn(n as u64, format!("final line is unreadable: {e}"));
                    Ok(None)
                } else if crate::fault::active(crate::fault::Fault::SkipDamagedLines) {
                    // Broken on purpose: the damaged line is skipped as if
                    // it were a record, and the stream goes on.
                    self.pos = LogPosition {
                        offset: self.pos.offset + n as u64,
                        seq: self.pos.seq + 1,
                    };
                    self.next_record()
                } else {
                    self.done = true;
                    Err(self.damage(e.to_string()))
                }
            }
            Err(e @ LineError::Schema(_)) => {
                self.done = true;
                Err(self.damage(e.to_string()))
            }
        }
    }
}

/// Where a complete, checksummed line starts inside the bad segment `line`,
/// if one does. A single torn write holds at most the prefix of one line, so
/// a whole valid line after the start of a bad one means the bytes between
/// were committed lines, not an interrupted append.
fn embedded_valid_line(line: &[u8]) -> Option<usize> {
    let start = framing::LINE_START;
    (1..line.len().saturating_sub(start.len()))
        .filter(|&i| line[i..].starts_with(start))
        .find(|&i| framing::verify_checksum(&line[i..]).is_ok())
}

impl<R: BufRead> Iterator for Scanner<R> {
    type Item = Result<(u64, Record)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// What a full verification of a log found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The position just after the last valid line.
    pub end: LogPosition,
    pub torn: Option<TornTail>,
}

/// Reads every line from `from` to the end, verifying each; calls `visit` on
/// each record. Damage is an error; a torn tail is returned, not repaired.
pub fn verify(
    path: &Path,
    from: LogPosition,
    mut visit: impl FnMut(u64, &Record) -> Result<()>,
) -> Result<Verified> {
    let mut scanner = Scanner::open(path, from)?;
    while let Some((offset, rec)) = scanner.next_record()? {
        visit(offset, &rec)?;
    }
    Ok(Verified {
        end: scanner.position(),
        torn: scanner.torn().cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{event_id, Event, Redaction};

    fn log_bytes(n: u64) -> (Vec<u8>, Vec<u64>) {
        let (mut bytes, mut starts, mut line) = (Vec::new(), Vec::new(), Vec::new());
        for seq in 0..n {
            let ev = Event::RunStarted {
                run_id: format!("r{seq}"),
            };
            framing::encode_into(&mut line, seq, &event_id(seq), "t", Redaction::Public, &ev);
            starts.push(bytes.len() as u64);
            bytes.extend_from_slice(&line);
        }
        (bytes, starts)
    }

    fn scan(bytes: &[u8]) -> (Vec<Seq>, Result<Option<TornTail>>) {
        let mut s = Scanner::new(bytes, Path::new("events.jsonl"), LogPosition::START);
        let mut seqs = Vec::new();
        loop {
            match s.next_record() {
                Ok(Some((_, rec))) => seqs.push(rec.seq),
                Ok(None) => return (seqs, Ok(s.torn().cloned())),
                Err(e) => return (seqs, Err(e)),
            }
        }
    }

    #[test]
    fn a_lost_newline_before_the_last_line_is_damage_not_a_torn_tail() {
        let (mut bytes, starts) = log_bytes(3);
        let newline = starts[2] as usize - 1;
        bytes[newline] = b' ';
        let (seqs, outcome) = scan(&bytes);
        assert_eq!(seqs, vec![0]);
        match outcome {
            Err(Error::Damage { line, offset, .. }) => {
                assert_eq!((line, offset), (2, starts[1]));
            }
            other => panic!("expected damage at line 2, got {other:?}"),
        }
    }

    #[test]
    fn a_bad_final_line_alone_is_a_torn_tail() {
        let (mut bytes, starts) = log_bytes(3);
        let mid = starts[2] as usize + 12;
        bytes[mid] ^= 1;
        let (seqs, outcome) = scan(&bytes);
        assert_eq!(seqs, vec![0, 1]);
        let torn = outcome.unwrap().expect("torn tail");
        assert_eq!(torn.offset, starts[2]);
        assert_eq!(torn.len, bytes.len() as u64 - starts[2]);
    }

    #[test]
    fn an_id_that_does_not_match_its_seq_is_damage() {
        let mut line = Vec::new();
        let ev = Event::RunStarted { run_id: "r".into() };
        framing::encode_into(&mut line, 0, "e7", "t", Redaction::Public, &ev);
        let (seqs, outcome) = scan(&line);
        assert!(seqs.is_empty());
        assert!(
            matches!(outcome, Err(Error::Damage { line: 1, offset: 0, ref reason, .. }) if reason.contains("\"e7\"")),
            "{outcome:?}"
        );
    }
}
