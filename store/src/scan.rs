//! Reading the log back, line by line, verifying each one.
//!
//! [`Scanner`] streams records from a byte position and never holds more
//! than one line. A bad line ends the stream: either as damage (an error
//! naming line and byte offset, never skipped) or as a torn tail, reported
//! through [`Scanner::torn`]; only the writer may cut a torn tail.
//!
//! Two depths, one scanner: [`Scanner::next_frame`] checks a line's frame
//! (checksum, seq, id, type) and the tail rules without building its event;
//! [`Scanner::next_record`] is the same frame with the event built, where a
//! line whose fields do not fit is damage. No second parser decides where a
//! log ends.
//!
//! The logical end. A writer pre-allocates space ahead of itself (see
//! `log`): the file may go on past the last line with zero bytes. A final
//! segment that is nothing but zero bytes to the end of the file, at most
//! [`ZERO_TAIL_MAX_BYTES`] of them, is that *pre-allocated region*: the log
//! ends where it starts, and it is neither torn nor damage (a lost write
//! into it reads as the same zeros and was never acknowledged). It must
//! start at or after the durable floor (below): zeros where a snapshot says
//! lines were are damage, and a writer never pre-allocates there. Longer
//! runs of zeros are damage. A torn tail may end in such zeros too: a piece without a newline
//! may run past [`MAX_LINE_BYTES`] only with zeros to the end of the file.
//!
//! The tail rules. The *final segment* is everything after the last
//! newline-terminated valid line, to the end of the file; it is split into
//! *pieces* (each up to and including a newline, the last one possibly
//! without). It is a torn tail only if all of these hold, else it is damage:
//! - it is no longer than one in-flight write: at most
//!   [`TORN_TAIL_MAX_LINES`] pieces (= [`MAX_GROUP_EVENTS`], one `Batch`
//!   group; the log does not record its last writer's durability mode, so
//!   this bound applies even where a `Sync` writer could only tear one line)
//!   and [`TORN_TAIL_MAX_BYTES`] bytes (that many lines of
//!   [`MAX_LINE_BYTES`]); a piece with no newline within [`MAX_LINE_BYTES`]
//!   that does not end the file is damage;
//! - every piece may be what a torn write leaves: it contains a zero byte,
//!   or lacks a newline (the last piece), or does not parse as a frame; and
//!   every run of zero bytes in it is what a lost sector reads as: it
//!   starts at the segment's start or at a [`SECTOR_BYTES`] boundary of the
//!   file, and ends at such a boundary; or it runs to the end of the file,
//!   from anywhere (the pre-allocated zeros a torn write did not reach). Zeros
//!   that start or stop inside a sector (say, whole lines zeroed with their
//!   newlines kept) were written there: damage. A
//!   complete, newline-terminated, well-formed frame whose checksum does not
//!   match is damage (a torn write leaves missing bytes, zeros or garbage,
//!   not a frame with a wrong CRC), and so is a piece with a valid line
//!   inside it (a lost newline fused committed lines);
//! - in a log with no valid line, it is one piece: the only write in
//!   flight there is the creation's `session_created` (so a file that
//!   holds nothing loadable is damage, never an interrupted creation);
//! - it starts at or after the [`Scanner::durable_floor`]: the byte offset
//!   that an intact `snapshot.json` covers. A bad byte before that offset is
//!   damage, whatever follows.
//!
//! The floor is also where the log may end at the earliest: a log whose
//! valid lines end before the floor's byte offset or seq (cut by hand: a
//! store that syncs the log before it writes a snapshot covering it is
//! never left so) is damage, "the log ends before what the snapshot
//! covers", so that no writer gives an acknowledged event's seq again.
//!
//! The writer copies a torn tail to a quarantine file before cutting it
//! (see `log`), so seqs of acknowledged events are never reused from a cut.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::durability::MAX_GROUP_EVENTS;
use crate::error::{Error, Result};
use crate::event::{Record, Seq};
use crate::framing::{self, Header, LineError, TypeName, MAX_LINE_BYTES};

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
    /// Where the cut bytes were copied before the cut (set by the writer
    /// that cut them; `None` while the tail is only found, not cut).
    pub quarantine: Option<PathBuf>,
}

impl std::fmt::Display for TornTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "torn tail: {} byte(s) at byte offset {} (line {}): {}",
            self.len, self.offset, self.line, self.reason
        )?;
        if let Some(q) = &self.quarantine {
            write!(f, "; the cut bytes were saved to {}", q.display())?;
        }
        Ok(())
    }
}

/// One verified line, as [`Scanner::next_frame`] returns it: checksum, seq,
/// id and type checked, the event not built yet.
#[derive(Debug)]
pub struct Frame<'a> {
    /// Byte offset of the line.
    pub offset: u64,
    pub seq: Seq,
    pub type_name: TypeName,
    line: &'a [u8],
    path: &'a Path,
}

impl Frame<'_> {
    /// The line's bytes, without its newline.
    pub fn line(&self) -> &[u8] {
        self.line
    }

    /// Writes the line as a JSON object without its checksum: `{` and
    /// everything after `"crc":"XXXXXXXX",`, fields in stored order (no
    /// newline).
    pub fn write_without_checksum(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        out.write_all(b"{")?;
        out.write_all(framing::after_checksum(self.line))
    }

    /// Builds the event and checks its fields: a line whose fields do not
    /// fit is damage, named by line and byte offset.
    pub fn record(&self) -> Result<Record> {
        framing::decode_verified(self.line).map_err(|e| Error::Damage {
            path: self.path.to_path_buf(),
            line: self.seq + 1,
            offset: self.offset,
            reason: e.to_string(),
        })
    }
}

/// The most lines one write can leave torn: a whole group commit (see
/// [`MAX_GROUP_EVENTS`]). A log does not record the durability mode of its
/// last writer, so the scanner allows this much even where a `Sync` writer
/// could only have torn one line.
pub const TORN_TAIL_MAX_LINES: u64 = MAX_GROUP_EVENTS as u64;
/// The unit a disk writes atomically: a write cut by a power loss keeps
/// whole sectors, and the lost ones of a grown file read as zeros.
pub const SECTOR_BYTES: u64 = 512;

/// The most bytes one write can leave torn: [`TORN_TAIL_MAX_LINES`] lines of
/// at most [`MAX_LINE_BYTES`] each.
pub const TORN_TAIL_MAX_BYTES: u64 = TORN_TAIL_MAX_LINES * MAX_LINE_BYTES as u64;

/// The most zero bytes a writer pre-allocates past the end of its last
/// line in one step (see `log`): the zero-filled region it leaves is below
/// this many bytes.
pub const PREALLOC_MAX_BYTES: u64 = 1 << 20;

/// The longest run of zero bytes that may end the file after the last
/// valid line: one lost line of [`MAX_LINE_BYTES`] (a `Sync` append that
/// overwrote pre-allocated zeros and never reached the disk) followed by
/// the pre-allocated rest. Longer is damage.
pub const ZERO_TAIL_MAX_BYTES: u64 = MAX_LINE_BYTES as u64 + PREALLOC_MAX_BYTES;

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
    /// What a snapshot covers: no torn tail may start before it, and the
    /// log may not end before it.
    floor: LogPosition,
    /// The zero bytes after the logical end, once the stream has ended.
    preallocated: u64,
    /// The byte offset up to which the reader's bytes were taken: where a
    /// failed read was reading.
    consumed: u64,
    done: bool,
}

/// The log file as [`Scanner::open`] reads it: the file itself. A failed
/// read is an error the scanner refuses with (naming the file and the byte
/// offset), an interrupted or short read is read on (`BufReader`), and
/// only a read of zero bytes is the end of the file. With the
/// `read-error-is-eof` fault (broken on purpose), a failed read other than
/// EINTR, or a short read, is taken for the end of the file.
#[derive(Debug)]
pub struct LogFile {
    file: File,
    /// The fault: the end was declared at a failed or short read.
    eof_on_error: bool,
    ended: bool,
}

impl Read for LogFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.eof_on_error {
            return self.file.read(buf);
        }
        if self.ended {
            return Ok(0);
        }
        match self.file.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Err(e),
            Err(_) => {
                self.ended = true;
                Ok(0)
            }
            Ok(n) if n < buf.len() => {
                self.ended = true;
                Ok(n)
            }
            other => other,
        }
    }
}

impl Scanner<BufReader<LogFile>> {
    /// Opens `path` for reading from `from` (a position previously returned
    /// by the store: the line there must carry `from.seq`).
    /// A symlink or anything but a regular file there is refused unopened
    /// ([`crate::fsutil::open_for_reading`]).
    pub fn open(path: &Path, from: LogPosition) -> Result<Self> {
        let mut file = crate::fsutil::open_for_reading(path, crate::fsutil::Links::Refuse)?;
        if from.offset > 0 {
            file.seek(SeekFrom::Start(from.offset))
                .map_err(Error::io("seek", path))?;
        }
        let file = LogFile {
            file,
            eof_on_error: crate::fault::active(crate::fault::Fault::ReadErrorIsEof),
            ended: false,
        };
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
            floor: LogPosition::START,
            preallocated: 0,
            consumed: from.offset,
            done: false,
        }
    }

    /// Declares the log up to `floor` covered by a durable snapshot: a bad
    /// line that starts before `floor.offset` is damage, never a torn tail,
    /// and so is a log whose valid lines end before `floor`.
    pub fn durable_floor(mut self, floor: LogPosition) -> Self {
        self.floor = floor;
        self
    }

    /// The damage of a log whose valid lines end here, before the floor.
    fn ends_before_floor(&self) -> Option<Error> {
        let (end, floor) = (self.pos, self.floor);
        (end.offset < floor.offset || end.seq < floor.seq).then(|| {
            self.damage(format!(
                "the log ends before what the snapshot covers: it ends at byte offset {} (seq {}), snapshot.json covers byte offset {}, seq {}",
                end.offset, end.seq, floor.offset, floor.seq
            ))
        })
    }

    /// Where the next line would start (after the last record returned).
    pub fn position(&self) -> LogPosition {
        self.pos
    }

    /// The torn tail found at the end, once the stream has ended.
    pub fn torn(&self) -> Option<&TornTail> {
        self.torn.as_ref()
    }

    /// How many zero bytes follow the logical end to the end of the file
    /// (the pre-allocated region), once the stream has ended without a
    /// torn tail.
    pub fn preallocated(&self) -> u64 {
        self.preallocated
    }

    fn at_eof(&mut self) -> Result<bool> {
        let (path, offset) = (&self.path, self.consumed);
        Ok(self
            .reader
            .fill_buf()
            .map_err(|source| read_failed(path, offset, source))?
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
            quarantine: None,
        });
        self.done = true;
    }

    /// The next verified record and the offset of its line: the frame
    /// checked as [`Scanner::next_frame`] does, then the event built from it.
    /// A line whose checksum holds but whose fields do not fit is damage.
    pub fn next_record(&mut self) -> Result<Option<(u64, Record)>> {
        let at = self.pos;
        let Some((offset, len, _)) = self.advance()? else {
            return Ok(None);
        };
        match framing::decode_verified(&self.buf[..len - 1]) {
            Ok(rec) => Ok(Some((offset, rec))),
            Err(e) => {
                self.done = true;
                self.pos = at;
                Err(self.damage(e.to_string()))
            }
        }
    }

    /// The next verified frame: the line's checksum, seq, id and type are
    /// checked (and the tail rules applied) exactly as for
    /// [`Scanner::next_record`], but the event is not built. Its fields are
    /// not checked: [`Frame::record`] builds and checks them.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>> {
        Ok(self
            .advance()?
            .map(|(offset, len, header)| self.frame(offset, len, header)))
    }

    /// The frame [`Scanner::advance`] just returned.
    pub(crate) fn frame(&self, offset: u64, len: usize, header: Header) -> Frame<'_> {
        Frame {
            offset,
            seq: header.seq,
            type_name: header.type_name,
            line: &self.buf[..len - 1],
            path: &self.path,
        }
    }

    /// Reads and checks the next frame; its line (with its newline) stays
    /// in `buf`. Returns its offset, its length and its header.
    pub(crate) fn advance(&mut self) -> Result<Option<(u64, usize, Header)>> {
        if self.done {
            return Ok(None);
        }
        let Some(n) = self.read_piece()? else {
            self.done = true;
            return match self.ends_before_floor() {
                Some(damage) => Err(damage),
                None => Ok(None),
            };
        };
        if self.buf.last() != Some(&b'\n') {
            if self.buf.iter().all(|&b| b == 0) {
                self.zero_region(n as u64)?;
                return Ok(None);
            }
            let reason = "final line has no trailing newline (interrupted write)".to_string();
            self.final_segment(n, reason)?;
            return Ok(None);
        }
        let line = &self.buf[..n - 1];
        match framing::decode_header(line) {
            Ok(header) => {
                if header.seq != self.pos.seq {
                    self.done = true;
                    return Err(self.damage(format!(
                        "expected seq {}, found seq {} (gap, duplicate or reordering)",
                        self.pos.seq, header.seq
                    )));
                }
                // Ids are unique because each is derived from its seq.
                if header.id_seq != Some(header.seq) {
                    self.done = true;
                    let id = framing::decode_verified(line)
                        .map(|rec| format!("{:?}", rec.id))
                        .unwrap_or_else(|_| "(unreadable)".into());
                    return Err(self.damage(format!(
                        "id {id} does not match seq {} (expected \"e{}\")",
                        header.seq, header.seq
                    )));
                }
                let offset = self.pos.offset;
                self.pos = LogPosition {
                    offset: offset + n as u64,
                    seq: self.pos.seq + 1,
                };
                Ok(Some((offset, n, header)))
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
                let skip = crate::fault::active(crate::fault::Fault::SkipDamagedLines)
                    && embedded_valid_line(line).is_none();
                if skip && !self.at_eof()? {
                    // Broken on purpose: the damaged line is skipped as if
                    // it were a record, and the stream goes on.
                    self.pos = LogPosition {
                        offset: self.pos.offset + n as u64,
                        seq: self.pos.seq + 1,
                    };
                    return self.advance();
                }
                self.final_segment(n, e.to_string())?;
                Ok(None)
            }
            Err(e @ LineError::Schema(_)) => {
                self.done = true;
                Err(self.damage(e.to_string()))
            }
        }
    }

    /// Reads the next piece (up to and including a newline, or to the end
    /// of the file) into `buf`: its length, or `None` at the end of the file.
    /// A piece with no newline within [`MAX_LINE_BYTES`] that does not end
    /// the file is damage.
    ///
    /// A piece that ends in zero bytes at the limit goes on while only zeros
    /// follow: if they reach the end of the file within
    /// [`ZERO_TAIL_MAX_BYTES`] of zeros, the piece is all of it (`buf` holds
    /// its first [`MAX_LINE_BYTES`]; the returned length counts the rest).
    fn read_piece(&mut self) -> Result<Option<usize>> {
        self.buf.clear();
        let limit = read_limit();
        let n = (&mut self.reader)
            .take(limit as u64)
            .read_until(b'\n', &mut self.buf)
            .map_err(|source| {
                read_failed(&self.path, self.consumed + self.buf.len() as u64, source)
            })?;
        self.consumed += n as u64;
        if n == 0 {
            return Ok(None);
        }
        if self.buf.last() != Some(&b'\n') && n == limit && !self.at_eof()? {
            if self.buf.last() == Some(&0) {
                let run = self.buf.iter().rev().take_while(|&&b| b == 0).count() as u64;
                if let Some(more) = self.zeros_to_eof(ZERO_TAIL_MAX_BYTES - run)? {
                    return Ok(Some(n + more as usize));
                }
            }
            self.done = true;
            return Err(self.damage(format!(
                "no newline within {MAX_LINE_BYTES} bytes (line longer than the limit, and not zeros to the end of the file within {ZERO_TAIL_MAX_BYTES} bytes)"
            )));
        }
        Ok(Some(n))
    }

    /// Consumes the zero bytes that follow: their count if only zeros, at
    /// most `most` of them, remain to the end of the file; `None` otherwise.
    fn zeros_to_eof(&mut self, most: u64) -> Result<Option<u64>> {
        let mut count = 0u64;
        loop {
            let chunk = self
                .reader
                .fill_buf()
                .map_err(|source| read_failed(&self.path, self.consumed, source))?;
            if chunk.is_empty() {
                return Ok(Some(count));
            }
            let zeros = chunk.iter().take_while(|&&b| b == 0).count();
            let all = zeros == chunk.len();
            self.reader.consume(zeros);
            self.consumed += zeros as u64;
            count += zeros as u64;
            if !all || count > most {
                return Ok(None);
            }
        }
    }

    /// The final segment is `len` zero bytes to the end of the file (at
    /// most [`ZERO_TAIL_MAX_BYTES`]: [`Scanner::read_piece`] bounds it): the
    /// region a writer pre-allocated, or the lost, unacknowledged writes
    /// into it, not a line. The log ends at its start, nothing torn, unless
    /// it starts under the durable floor, where lines were durable: damage
    /// (a writer never pre-allocates there). Ends the stream.
    fn zero_region(&mut self, len: u64) -> Result<()> {
        self.done = true;
        if self.pos.offset < self.floor.offset {
            return Err(self.damage(format!(
                "{len} zero byte(s) to the end of the file; snapshot.json covers the log up to byte offset {}, so this is damage, not pre-allocated space",
                self.floor.offset
            )));
        }
        if let Some(damage) = self.ends_before_floor() {
            return Err(damage);
        }
        self.preallocated = len;
        Ok(())
    }

    /// Decides whether the bad piece in `buf` (`len` bytes at `pos`, bad
    /// because of `reason`) starts a torn tail: the tail rules of the module
    /// doc, applied to it and to every piece after it up to the end of the
    /// file. Ends the stream either way.
    fn final_segment(&mut self, len: usize, reason: String) -> Result<()> {
        self.done = true;
        if self.pos.offset < self.floor.offset {
            return Err(self.damage(format!(
                "{reason}; snapshot.json covers the log up to byte offset {}, so this is damage, not a torn tail",
                self.floor.offset
            )));
        }
        if let Some(damage) = self.ends_before_floor() {
            return Err(damage);
        }
        let start = self.pos.offset;
        if let Err(why) = torn_piece(&self.buf, start, start) {
            return Err(self.damage(format!("{reason}; {why}")));
        }
        let (mut total, mut pieces) = (len as u64, 1u64);
        while let Some(n) = self.read_piece()? {
            let at = start + total;
            total += n as u64;
            pieces += 1;
            if self.pos.seq == 0 {
                // Before any valid line the only write in flight is the
                // creation's session_created: one line. A file with more
                // that nothing loads from is damage, never an interrupted
                // creation that `open` may answer not_found for.
                return Err(self.damage(format!(
                    "{reason}; then more unreadable bytes at byte offset {at}: a log with no valid line can be torn by one write only (its session_created)"
                )));
            }
            // Broken on purpose with the fault: one line fewer than a group.
            let most = TORN_TAIL_MAX_LINES
                - u64::from(crate::fault::active(
                    crate::fault::Fault::TailBoundExclusive,
                ));
            if pieces > most || total > TORN_TAIL_MAX_BYTES {
                return Err(self.damage(format!(
                    "{reason}; the bad bytes go on past byte offset {at}, more than one write could leave (at most {TORN_TAIL_MAX_LINES} lines, {TORN_TAIL_MAX_BYTES} bytes)"
                )));
            }
            if let Err(why) = torn_piece(&self.buf, at, start) {
                return Err(self.damage(format!("{reason}; then, at byte offset {at}: {why}")));
            }
        }
        let reason = if pieces > 1 {
            format!("{reason} (and {} more unreadable line(s))", pieces - 1)
        } else {
            reason
        };
        self.end_torn(total, reason);
        Ok(())
    }
}

/// A read of the log that failed at byte `offset`: refused, never taken for
/// the end of the log.
fn read_failed(path: &Path, offset: u64, source: std::io::Error) -> Error {
    Error::Read {
        path: path.to_path_buf(),
        offset,
        source,
    }
}

/// Whether one piece of a final segment (a line with its newline, or the
/// bytes after the last newline), at byte offset `at` of a segment that
/// starts at `segment`, may be what a torn write left: `Err` says why it is
/// damage instead.
fn torn_piece(piece: &[u8], at: u64, segment: u64) -> std::result::Result<(), String> {
    let (body, complete) = match piece.strip_suffix(b"\n") {
        Some(body) => (body, true),
        None => (piece, false),
    };
    // Broken on purpose with the fault: the lost newline goes unseen.
    let fused = if crate::fault::active(crate::fault::Fault::FusedLinesTorn) {
        None
    } else {
        embedded_valid_line(body)
    };
    if let Some(at) = fused {
        // A lost newline merged a committed line into this one: cutting it
        // as a tail would lose data.
        return Err(format!(
            "a valid line starts {at} bytes into it (a newline was damaged?)"
        ));
    }
    if let Some((from, to)) = misplaced_zeros(body, at, segment, !complete) {
        return Err(format!(
            "zero bytes at byte offsets {from}..{to} start or stop inside a {SECTOR_BYTES}-byte sector: a lost write reads as whole sectors of zeros, so these were written (damage)"
        ));
    }
    // Broken on purpose with the fault: a torn line's header is taken at its word.
    let torn = !complete && !crate::fault::active(crate::fault::Fault::UnterminatedChecksumDamage);
    if torn || body.contains(&0) {
        // Missing bytes or zeros: what an interrupted write leaves.
        return Ok(());
    }
    match framing::verify_checksum(body) {
        Ok(()) => Err("a complete line with a valid checksum: committed data, not a torn write".into()),
        Err(LineError::Checksum { .. }) => Err(
            "a complete, well-formed line whose checksum does not match is damage (a torn write leaves missing bytes, zeros or garbage, not a frame with a wrong checksum)"
                .into(),
        ),
        Err(_) => Ok(()),
    }
}

/// The first run of zero bytes in `body` (at byte offset `at`, in a final
/// segment starting at `segment`; `at_end`: `body` ends the file) that a
/// lost sector cannot explain, as absolute offsets `from..to`.
fn misplaced_zeros(body: &[u8], at: u64, segment: u64, at_end: bool) -> Option<(u64, u64)> {
    let mut i = 0;
    while i < body.len() {
        if body[i] != 0 {
            i += 1;
            continue;
        }
        let run = body[i..].iter().take_while(|&&b| b == 0).count();
        let (from, to) = (at + i as u64, at + (i + run) as u64);
        let ends_body = i + run == body.len();
        if ends_body && at_end {
            // Zeros to the end of the file after a torn write: the
            // pre-allocated region it did not reach, or lost sectors.
            break;
        }
        let starts_ok = from == segment || from.is_multiple_of(SECTOR_BYTES);
        // Broken on purpose with the fault: a run that stops at a newline
        // (a whole line zeroed, its newline kept) passes for a lost write.
        let ends_ok = (ends_body && crate::fault::active(crate::fault::Fault::ZerosToNewlineTorn))
            || to.is_multiple_of(SECTOR_BYTES);
        // Broken on purpose with the fault: whole lost sectors are damage too.
        let lost_sector =
            starts_ok && ends_ok && !crate::fault::active(crate::fault::Fault::LostSectorRefused);
        if !lost_sector {
            return Some((from, to));
        }
        if crate::fault::active(crate::fault::Fault::ZerosFirstRunOnly) {
            break; // Broken on purpose: the runs after the first go unjudged.
        }
        i += run;
    }
    None
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

/// The longest piece a read takes: [`MAX_LINE_BYTES`], the writer's
/// limit too (read-limit-below-write-limit: broken on purpose, one byte
/// short, so the largest line the writer takes reads as damage).
fn read_limit() -> usize {
    if crate::fault::active(crate::fault::Fault::ReadLimitBelowWriteLimit) {
        MAX_LINE_BYTES - 1
    } else {
        MAX_LINE_BYTES
    }
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

    /// Scans `bytes` to its end: the seqs read, the logical end, the
    /// pre-allocated zeros after it, or the error.
    fn scan_end(bytes: &[u8], floor: LogPosition) -> Result<(Vec<Seq>, u64, u64)> {
        let mut s =
            Scanner::new(bytes, Path::new("events.jsonl"), LogPosition::START).durable_floor(floor);
        let mut seqs = Vec::new();
        while let Some((_, rec)) = s.next_record()? {
            seqs.push(rec.seq);
        }
        assert!(s.torn().is_none(), "{:?}", s.torn());
        Ok((seqs, s.position().offset, s.preallocated()))
    }

    #[test]
    fn a_final_line_whose_write_was_lost_reads_as_the_end_of_the_log() {
        // The file grew (or the line overwrote pre-allocated zeros), the
        // data never reached the disk: zeros from the line's start to the
        // end of the file. Nothing was acknowledged there: the log ends at
        // the line's start, and nothing is torn.
        let (mut bytes, starts) = log_bytes(3);
        bytes[starts[2] as usize..].fill(0);
        let (seqs, end, zeros) = scan_end(&bytes, LogPosition::START).unwrap();
        assert_eq!(seqs, vec![0, 1]);
        assert_eq!((end, zeros), (starts[2], bytes.len() as u64 - starts[2]));
    }

    #[test]
    fn the_pre_allocated_zeros_are_the_end_of_the_log_not_a_torn_tail() {
        let (mut bytes, _) = log_bytes(3);
        let end = bytes.len() as u64;
        bytes.resize(bytes.len() + PREALLOC_MAX_BYTES as usize, 0);
        assert_eq!(
            scan_end(
                &bytes,
                LogPosition {
                    offset: end,
                    seq: 3
                }
            )
            .unwrap(),
            (vec![0, 1, 2], end, PREALLOC_MAX_BYTES)
        );
        // A log with no line yet: the creation's first append never reached
        // the pre-allocated region.
        let zeros = vec![0u8; 4096];
        assert_eq!(
            scan_end(&zeros, LogPosition::START).unwrap(),
            (vec![], 0, 4096)
        );
    }

    #[test]
    fn zeros_past_the_pre_allocation_bound_or_under_the_floor_are_damage() {
        let (mut bytes, starts) = log_bytes(3);
        let end = bytes.len();
        bytes.resize(end + ZERO_TAIL_MAX_BYTES as usize, 0);
        assert_eq!(scan_end(&bytes, LogPosition::START).unwrap().1, end as u64);
        bytes.push(0);
        match scan_end(&bytes, LogPosition::START) {
            Err(Error::Damage { line, offset, .. }) => assert_eq!((line, offset), (4, end as u64)),
            other => panic!("expected damage at line 4, got {other:?}"),
        }
        // Zeros where snapshot.json says lines were are damage.
        let (mut bytes, _) = log_bytes(3);
        bytes[starts[2] as usize..].fill(0);
        let floor = LogPosition {
            offset: starts[2] + 1,
            seq: 3,
        };
        match scan_end(&bytes, floor) {
            Err(Error::Damage { line, offset, .. }) => assert_eq!((line, offset), (3, starts[2])),
            other => panic!("expected damage at line 3, got {other:?}"),
        }
    }

    proptest::proptest! {
        /// Whatever a writer leaves in format 2 (whole lines, the last one
        /// cut after any byte, then any zeros within the bound) ends the
        /// log exactly after the last whole line: a cut line is a torn
        /// tail there, zeros alone are not.
        #[test]
        fn the_logical_end_is_exact_before_any_zeros(
            n in 1u64..6,
            keep_frac in 0.0f64..1.0,
            zeros in 0usize..70_000,
        ) {
            let (full, starts) = log_bytes(n);
            let last = *starts.last().unwrap() as usize;
            let mut whole = full.clone();
            whole.resize(full.len() + zeros, 0);
            let (seqs, end, free) = scan_end(&whole, LogPosition::START).unwrap();
            proptest::prop_assert_eq!(seqs.len() as u64, n);
            proptest::prop_assert_eq!((end, free), (full.len() as u64, zeros as u64));
            let keep = ((full.len() - last) as f64 * keep_frac) as usize;
            let mut cut = full[..last + keep].to_vec();
            cut.resize(last + keep + zeros, 0);
            let (seqs, outcome) = scan(&cut);
            proptest::prop_assert_eq!(seqs.len() as u64, n - 1);
            let torn = outcome.unwrap();
            if keep == 0 {
                proptest::prop_assert!(torn.is_none(), "{:?}", torn);
            } else {
                let torn = torn.expect("a cut line is torn");
                proptest::prop_assert_eq!((torn.offset, torn.len), (last as u64, (keep + zeros) as u64));
            }
        }
    }

    #[test]
    fn a_torn_line_before_the_pre_allocated_zeros_is_a_torn_tail() {
        let (mut bytes, starts) = log_bytes(3);
        let last = starts[2] as usize;
        // The overwrite of the last line reached the disk only up to a
        // sector boundary; the rest still reads as pre-allocated zeros,
        // longer together than one line may be.
        let sector = (last as u64 / SECTOR_BYTES + 1) * SECTOR_BYTES;
        bytes.resize(last + MAX_LINE_BYTES + 4096, 0);
        let mut line = Vec::new();
        let big = Event::RunStarted {
            run_id: "x".repeat(MAX_LINE_BYTES / 2),
        };
        framing::encode_into(&mut line, 2, &event_id(2), "t", Redaction::Public, &big);
        let keep = (sector as usize - last).max(1);
        bytes[last..last + keep].copy_from_slice(&line[..keep]);
        let (seqs, outcome) = scan(&bytes);
        assert_eq!(seqs, vec![0, 1]);
        let torn = outcome.unwrap().expect("torn tail");
        assert_eq!(
            (torn.offset, torn.len),
            (starts[2], (bytes.len() - last) as u64)
        );
        // A write killed after any byte count leaves its prefix, then the
        // pre-allocated zeros from wherever it stopped.
        let (mut killed, _) = log_bytes(3);
        killed.truncate(last + 13);
        killed.resize(last + 4096, 0);
        let torn = scan(&killed).1.unwrap().expect("torn tail");
        assert_eq!((torn.offset, torn.len), (starts[2], 4096));
        // Garbage (not zeros) past the limit is damage as before.
        let n = bytes.len();
        bytes[n - 1] = b'x';
        assert!(matches!(scan(&bytes).1, Err(Error::Damage { line: 3, .. })));
    }

    #[test]
    fn a_log_with_no_valid_line_is_torn_by_one_line_at_most() {
        let (_, one) = scan(b"{\"crc\":\"12");
        assert_eq!(one.unwrap().expect("an interrupted creation").offset, 0);
        let (seqs, two) = scan(b"#garbage\n#more\n");
        assert!(seqs.is_empty());
        let e = two.expect_err("nothing loadable is damage");
        assert!(e.to_string().contains("torn by one write only"), "{e}");
    }

    #[test]
    fn zeros_inside_a_sector_are_damage_not_a_torn_tail() {
        let (mut bytes, starts) = log_bytes(3);
        // Eight bytes zeroed in the middle of the last line.
        let mid = starts[2] as usize + 20;
        bytes[mid..mid + 8].fill(0);
        let (_, outcome) = scan(&bytes);
        let e = outcome.expect_err("zeros that stop mid-sector were written");
        assert!(e.to_string().contains("inside a 512-byte sector"), "{e}");
        // Whole lines zeroed with their newlines kept.
        let (mut bytes, starts) = log_bytes(3);
        bytes[starts[1] as usize..]
            .iter_mut()
            .filter(|b| **b != b'\n')
            .for_each(|b| *b = 0);
        assert!(scan(&bytes).1.is_err());
    }

    #[test]
    fn a_complete_final_line_with_a_wrong_checksum_is_damage() {
        let (mut bytes, starts) = log_bytes(3);
        let mid = (starts[2] as usize + bytes.len()) / 2;
        bytes[mid] ^= 1;
        let (seqs, outcome) = scan(&bytes);
        assert_eq!(seqs, vec![0, 1]);
        match outcome {
            Err(Error::Damage { line, offset, .. }) => assert_eq!((line, offset), (3, starts[2])),
            other => panic!("expected damage at line 3, got {other:?}"),
        }
    }

    #[test]
    fn a_torn_tail_never_starts_under_the_durable_floor() {
        let (bytes, starts) = log_bytes(3);
        let cut = &bytes[..starts[2] as usize + 10];
        let mut s = Scanner::new(cut, Path::new("events.jsonl"), LogPosition::START).durable_floor(
            LogPosition {
                offset: starts[2] + 1,
                seq: 3,
            },
        );
        assert!(matches!(s.next_record(), Ok(Some(_))));
        assert!(matches!(s.next_record(), Ok(Some(_))));
        match s.next_record() {
            Err(Error::Damage { line, offset, .. }) => assert_eq!((line, offset), (3, starts[2])),
            other => panic!("expected damage at line 3, got {other:?}"),
        }
    }

    #[test]
    fn more_bad_lines_than_one_group_is_damage() {
        let (mut bytes, _) = log_bytes(1);
        // Garbage lines: what a weak disk may leave of a lost group write.
        for _ in 0..TORN_TAIL_MAX_LINES {
            bytes.extend_from_slice(b"#?\n");
        }
        let (seqs, outcome) = scan(&bytes);
        assert_eq!(seqs, vec![0]);
        assert_eq!(outcome.unwrap().unwrap().len, 3 * TORN_TAIL_MAX_LINES);
        bytes.extend_from_slice(b"#?\n");
        let (_, outcome) = scan(&bytes);
        assert!(
            matches!(outcome, Err(Error::Damage { line: 2, .. })),
            "{outcome:?}"
        );
    }

    #[test]
    fn frames_and_records_stop_at_the_same_place() {
        let (mut bytes, starts) = log_bytes(3);
        let at = bytes.len() as u64;
        // A line whose checksum holds but whose fields do not fit.
        let bad = framing::frame_object(br#"{"seq":3,"id":"e3","ts":"t","type":"run_started"}"#);
        bytes.extend_from_slice(&bad);
        bytes.push(b'\n');
        bytes.extend_from_slice(b"{\"crc\":\"1");
        let (seqs, outcome) = scan(&bytes);
        assert_eq!(seqs, vec![0, 1, 2]);
        let e = outcome.expect_err("fields that do not fit are damage");
        assert!(
            matches!(e, Error::Damage { line: 4, offset, .. } if offset == at),
            "{e}"
        );
        // The frame scan passes the line and finds the torn tail after it;
        // the frame builds the record that fails.
        let mut s = Scanner::new(&bytes[..], Path::new("events.jsonl"), LogPosition::START);
        let mut offsets = Vec::new();
        while let Some(frame) = s.next_frame().unwrap() {
            offsets.push(frame.offset);
            if frame.seq == 3 {
                assert!(matches!(frame.record(), Err(Error::Damage { line: 4, .. })));
            } else {
                assert_eq!(frame.record().unwrap().seq, frame.seq);
            }
        }
        assert_eq!(offsets[..3], starts[..]);
        assert_eq!(s.torn().unwrap().len, 9);
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
