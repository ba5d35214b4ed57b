//! The tail probes (`tail@LOG:…`): the [`Tail`]s appended after the last
//! line of agentstore's log, at and just past the bounds of its tail rules
//! as the harness states them, and their verdict ([`judge_tail`],
//! `tail-rules`). The bounds are the harness's own statement; its tests
//! check they agree with agentstore's. Appends to a copy only.

use std::fmt;
use std::path::Path;

use agentchaos_protocol::event::Record;

use crate::campaign::probe::fault::{judge_fault, open_altered, rewrite, served_problem};
use crate::campaign::probe::{
    complete_lines, tell, ProbeError, ProbeReply, ProbeSetup, SECTOR_BYTES,
};
use crate::check::{Invariant, Violation};
use crate::store::adapter::{Capability, ErrorKind};

/// What a tail probe appends to agentstore's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// This many newline-terminated pieces of the log's last line, each a
    /// prefix of it of 1 to [`TAIL_PIECE_MAX_BYTES`] bytes, the lengths
    /// taken in turn: lines cut short inside their checksum header, what a
    /// weak disk may leave of a group write.
    Lines(u64),
    /// This many zero bytes and no newline: a write lost after it grew the
    /// file.
    Zeros(u64),
    /// Two newline-terminated pieces of a group write that lost sectors:
    /// one whose bytes up to the next [`SECTOR_BYTES`] boundary of the file
    /// are zeros (the end of a lost sector, from the segment's start), then
    /// one holding one whole sector of zeros. Within the rules only if the
    /// store judges the zeros at their own offsets in the file.
    LostSector,
    /// One torn line that lost its first sector (zeros from the segment's
    /// start to the next [`SECTOR_BYTES`] boundary, as in [`Tail::LostSector`]),
    /// with a second, short run of zeros later in it that starts and stops
    /// inside a sector: written zeros, which no lost write leaves. Damage.
    MisplacedZeros,
    /// This many bytes of a line's start (its header, then `x`s) and no
    /// newline, to the end of the file: a torn write of a line as long as
    /// the limit ([`TAIL_MAX_LINE_BYTES`]), or one byte longer, which no
    /// write leaves.
    Unterminated(u64),
}

/// agentstore's tail rules (`store/src/scan.rs`, its module doc), as the
/// harness states them for its tail probes: one write leaves at most this
/// many torn lines (one `Batch` group)…
pub const TAIL_MAX_LINES: u64 = 64;
/// …and a piece with no newline this long that does not end the file is
/// damage (one line's limit, 4 MiB).
pub const TAIL_MAX_LINE_BYTES: u64 = 4 * 1024 * 1024;
/// …and zeros to the end of the file longer than this are damage (log
/// format 2: one lost line of 4 MiB, then a pre-allocated step of 1 MiB).
pub const TAIL_MAX_ZERO_BYTES: u64 = TAIL_MAX_LINE_BYTES + 1024 * 1024;
/// The longest prefix of the log's last line a [`Tail::Lines`] piece
/// keeps: a line's whole `{"crc":"XXXXXXXX",` header and nothing of its
/// body, so no piece is a well-formed line with a wrong checksum (which
/// the rules call damage). Every length from one byte up is tried, each
/// cut inside the header at another place.
pub const TAIL_PIECE_MAX_BYTES: usize = 18;

impl Tail {
    /// Whether the rules say one write could leave it: a torn tail the
    /// store cuts, not damage it refuses.
    pub fn within_rules(self) -> bool {
        match self {
            Tail::Lines(n) => n <= TAIL_MAX_LINES,
            Tail::Zeros(n) => n <= TAIL_MAX_ZERO_BYTES,
            Tail::LostSector => true,
            Tail::MisplacedZeros => false,
            Tail::Unterminated(n) => n <= TAIL_MAX_LINE_BYTES,
        }
    }

    /// Appends it to `bytes`, a log ending with a complete line; says what it appended.
    fn append(self, file: &Path, bytes: &mut Vec<u8>) -> Result<String, ProbeError> {
        let at = bytes.len();
        match self {
            Tail::Lines(n) => {
                let last = complete_lines(bytes).pop().ok_or_else(|| {
                    ProbeError::Harness(format!(
                        "{} does not end with a complete line",
                        file.display()
                    ))
                })?;
                let line = bytes[last.start as usize..last.end as usize - 1].to_vec();
                let longest = line.len().min(TAIL_PIECE_MAX_BYTES);
                for k in 0..n as usize {
                    bytes.extend_from_slice(&line[..1 + k % longest]);
                    bytes.push(b'\n');
                }
                Ok(format!(
                    "{}, from byte offset {at}: {n} line(s) appended, the first 1, 2, … {longest} byte(s) of its last line in turn",
                    file.display(),
                ))
            }
            Tail::Zeros(n) => {
                bytes.resize(at + n as usize, 0);
                Ok(format!(
                    "{}, from byte offset {at}: {n} zero bytes appended, no newline",
                    file.display()
                ))
            }
            Tail::Unterminated(n) => {
                // A well-formed header, as a torn write's own: the piece is
                // torn because it has no newline, whatever its checksum says.
                let header = b"{\"crc\":\"00000000\",";
                bytes.extend_from_slice(&header[..header.len().min(n as usize)]);
                bytes.resize(at + n as usize, b'x');
                Ok(format!(
                    "{}, from byte offset {at}: {n} bytes of a line's start, no newline, to the end of the file",
                    file.display()
                ))
            }
            Tail::MisplacedZeros => {
                // A lost first sector (zeros to the boundary, within the
                // rules), then the line goes on with three zeros inside a
                // sector: the second run is what makes it damage.
                let boundary = (at as u64 + 1).next_multiple_of(SECTOR_BYTES);
                bytes.resize(boundary as usize, 0);
                bytes.extend_from_slice(b"\"seq\":0,\"t\":\"");
                let from = bytes.len();
                bytes.extend_from_slice(&[0, 0, 0]);
                bytes.extend_from_slice(b"x\"}\n");
                Ok(format!(
                    "{}, from byte offset {at}: a torn line whose bytes {at}..{boundary} are zeros (a lost sector), then at byte offsets {from}..{} three zeros inside a sector (written, not lost)",
                    file.display(),
                    from + 3
                ))
            }
            Tail::LostSector => {
                // The first piece: its first sector lost, so zeros from the
                // segment's start (the pre-allocated zeros that sector held)
                // to the next boundary, then the bytes of the next sector.
                let first_boundary = (at as u64 + 1).next_multiple_of(SECTOR_BYTES);
                bytes.resize(first_boundary as usize, 0);
                bytes.extend_from_slice(b"\"seq\":0\n");
                let second = bytes.len();
                // Its own start, then any bytes up to the next sector
                // boundary but one (the start alone is not a sector's).
                bytes.extend_from_slice(b"{\"crc\":\"");
                let boundary = (bytes.len() as u64 + 1).next_multiple_of(SECTOR_BYTES);
                bytes.resize(boundary as usize, b'x');
                bytes.resize((boundary + SECTOR_BYTES) as usize, 0);
                bytes.push(b'\n');
                Ok(format!(
                    "{}, from byte offset {at}: a torn line whose bytes {at}..{first_boundary} are zeros (the rest of a lost sector), then at byte offset {second} one whose bytes {boundary}..{} are zeros (one whole sector lost)",
                    file.display(),
                    boundary + SECTOR_BYTES
                ))
            }
        }
    }
}

impl fmt::Display for Tail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tail::Lines(n) => write!(f, "lines-{n}"),
            Tail::Zeros(n) => write!(f, "zeros-{n}"),
            Tail::LostSector => f.write_str("lost-sector"),
            Tail::MisplacedZeros => f.write_str("misplaced-zeros"),
            Tail::Unterminated(n) => write!(f, "unterminated-{n}"),
        }
    }
}

pub(super) fn torn_tail(
    setup: &ProbeSetup<'_>,
    file: &Path,
    tail: Tail,
    dir: &Path,
) -> Result<(String, Vec<Violation>, bool), ProbeError> {
    let (what, reply) = open_altered(setup, dir, |root| {
        rewrite(root, file, |bytes| tail.append(file, bytes))
    })?;
    let told = format!("{what}; {}", tell(&reply));
    let verdict = judge_fault(setup, Capability::TornTailRepair, &what, &reply, || {
        judge_tail(&what, tail, setup.reference, &reply)
    })?;
    Ok((told, verdict.into_iter().collect(), false))
}

/// The tail verdict: `what` says what was appended. Within the rules the
/// store must open and serve every acknowledged event (the tail cut);
/// past them it must refuse with `damage`. Losing or changing an
/// acknowledged event fails either way.
pub fn judge_tail(
    what: &str,
    tail: Tail,
    reference: &[Record],
    reply: &ProbeReply,
) -> Result<Option<Violation>, ProbeError> {
    let rule = match tail {
        Tail::Lines(_) => format!("at most {TAIL_MAX_LINES} torn lines"),
        Tail::LostSector | Tail::MisplacedZeros => format!(
            "zeros in a torn line are whole {SECTOR_BYTES}-byte sectors of the file"
        ),
        Tail::Unterminated(_) => format!(
            "a final piece with no newline is at most one line, {TAIL_MAX_LINE_BYTES} bytes"
        ),
        Tail::Zeros(_) => format!(
            "zeros to the end of the file are at most {TAIL_MAX_ZERO_BYTES} bytes (a lost line and a pre-allocated step)"
        ),
    };
    let within = tail.within_rules();
    let violation = |found: String, events: Vec<String>| Violation {
        invariant: Invariant::TailRules,
        when: "after the crash-free run, on a copy of its store with bytes appended to the log"
            .into(),
        expected: if within {
            format!(
                "{what}: one write could leave that ({rule}), so open cuts it as a torn tail and the store serves the {} acknowledged events unchanged",
                reference.len()
            )
        } else {
            format!(
                "{what}: more than one write can leave ({rule}), so opening refuses with `damage`"
            )
        },
        found,
        events,
    };
    match reply {
        ProbeReply::Refused { kind, .. } if !within && kind == ErrorKind::Damage.name() => Ok(None),
        ProbeReply::Refused {
            at, kind, message, ..
        } => Ok(Some(violation(
            format!("a `{kind}` refusal at {at}: {message}"),
            vec![],
        ))),
        ProbeReply::Crashed { at, message } => Ok(Some(violation(
            format!("the store died at {at}: {message}"),
            vec![],
        ))),
        ProbeReply::Served { records, types, .. } => {
            // The store's own record of its cut may follow the events.
            let n = reference.len();
            let recorded = records.len() > n
                && types.len() == records.len()
                && types[n..].iter().all(|t| t == "tail_quarantined");
            let records = if recorded {
                &records[..n]
            } else {
                &records[..]
            };
            match served_problem(reference, records) {
                Some((found, events)) => Ok(Some(violation(found, events))),
                None if within => Ok(None),
                None => Ok(Some(violation(
                    "it cut the appended bytes as a torn tail and served every event".into(),
                    vec![],
                ))),
            }
        }
        ProbeReply::Accepted { .. }
        | ProbeReply::NotReplayed { .. }
        | ProbeReply::SessionLost { .. }
        | ProbeReply::NotMarked { .. }
        | ProbeReply::SecondOpened
        | ProbeReply::Limit { .. } => Err(ProbeError::Harness(
            "the tail probe got another probe's reply".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::probe::fixture::log;
    use crate::campaign::probe::record_key;

    #[test]
    fn a_tail_within_the_rules_must_be_cut_and_one_past_them_refused() {
        let reference = log();
        let all: Vec<String> = reference.iter().map(record_key).collect();
        let served = |n: usize| ProbeReply::Served {
            records: all[..n].to_vec(),
            types: vec![],
            wrong_blobs: vec![],
        };
        let damage = ProbeReply::Refused {
            at: "open".into(),
            kind: "damage".into(),
            message: "m".into(),
            events_before: None,
            events_after: None,
        };
        let group = Tail::Lines(TAIL_MAX_LINES);
        let past = Tail::Zeros(TAIL_MAX_ZERO_BYTES + 1);
        assert!(group.within_rules() && !past.within_rules());
        assert!(judge_tail("t", group, &reference, &served(3))
            .unwrap()
            .is_none());
        // The store's record of its cut after the events is its own.
        let mut types: Vec<String> = reference
            .iter()
            .map(|r| r.body.type_name().to_string())
            .collect();
        types.push("tail_quarantined".into());
        let mut records = all.clone();
        records.push("3 e3 quarantined".into());
        let recorded = ProbeReply::Served {
            records,
            types,
            wrong_blobs: vec![],
        };
        assert!(judge_tail("t", group, &reference, &recorded)
            .unwrap()
            .is_none());
        assert!(judge_tail("t", past, &reference, &damage)
            .unwrap()
            .is_none());
        // A store whose bound is one line short refuses the whole group.
        let strict = judge_tail("t, 64 line(s)", group, &reference, &damage)
            .unwrap()
            .expect("a refused torn tail is caught");
        assert_eq!(strict.invariant, Invariant::TailRules);
        assert!(
            strict.found.contains("`damage` refusal"),
            "{}",
            strict.found
        );
        assert!(strict.expected.contains("cuts it as a torn tail"));
        // One past the rules, cut without a word.
        let cut = judge_tail("t", past, &reference, &served(3))
            .unwrap()
            .unwrap();
        assert!(
            cut.found.contains("cut the appended bytes"),
            "{}",
            cut.found
        );
        assert!(cut.expected.contains("refuses with `damage`"));
        // Losing an acknowledged event fails either way.
        for tail in [group, past] {
            let lost = judge_tail("t", tail, &reference, &served(2))
                .unwrap()
                .unwrap();
            assert!(lost.found.contains("is gone"), "{}", lost.found);
        }
    }

    #[test]
    fn a_tail_is_appended_after_the_last_line() {
        let text = b"{\"crc\":\"0123abcd\",\"seq\":0}\n".to_vec();
        let mut bytes = text.clone();
        let what = Tail::Lines(20)
            .append(Path::new("log"), &mut bytes)
            .unwrap();
        let pieces: Vec<&[u8]> = bytes[text.len()..].split(|&b| b == b'\n').collect();
        assert_eq!(pieces.len(), 21, "20 newline-terminated pieces");
        assert_eq!(pieces[0], b"{");
        assert_eq!(pieces[17], b"{\"crc\":\"0123abcd\",");
        assert_eq!(pieces[18], b"{", "the lengths start again");
        assert!(what.contains("20 line(s)"), "{what}");
        let mut bytes = text.clone();
        Tail::Zeros(5).append(Path::new("log"), &mut bytes).unwrap();
        assert_eq!(&bytes[text.len()..], &[0; 5]);
        let mut bytes = text.clone();
        Tail::LostSector
            .append(Path::new("log"), &mut bytes)
            .unwrap();
        let pieces: Vec<&[u8]> = bytes[text.len()..].split(|&b| b == b'\n').collect();
        assert_eq!(pieces.len(), 3, "two newline-terminated pieces");
        let first_zeros = pieces[0].iter().take_while(|&&b| b == 0).count();
        assert_eq!(
            (text.len() + first_zeros) as u64 % SECTOR_BYTES,
            0,
            "the first piece's zeros run from its start to a sector boundary"
        );
        let second = bytes.len() - pieces[1].len() - 1;
        let zeros = second + pieces[1].iter().position(|&b| b == 0).unwrap();
        assert_eq!(
            zeros as u64 % SECTOR_BYTES,
            0,
            "the zeros start at a sector boundary"
        );
        assert_eq!(
            bytes.len(),
            zeros + SECTOR_BYTES as usize + 1,
            "one sector, then the newline"
        );
        assert!(
            pieces[1].starts_with(b"{\"crc\":\""),
            "{:?}",
            &pieces[1][..9]
        );
        assert!(Tail::Lines(1)
            .append(Path::new("log"), &mut b"no newline".to_vec())
            .is_err());
        // The harness's statement of agentstore's rules is agentstore's.
        assert_eq!(TAIL_MAX_LINES, agentstore::scan::TORN_TAIL_MAX_LINES);
        assert_eq!(
            TAIL_MAX_LINE_BYTES,
            agentstore::framing::MAX_LINE_BYTES as u64
        );
        assert_eq!(SECTOR_BYTES, agentstore::scan::SECTOR_BYTES);
        assert_eq!(TAIL_MAX_ZERO_BYTES, agentstore::scan::ZERO_TAIL_MAX_BYTES);
    }
}
