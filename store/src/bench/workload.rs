//! Events of a chosen size, and the exact line bytes the store writes for them.
//!
//! Benchmarks compare the store with baselines writing "the same bytes":
//! this module makes an event whose framed line has a target length and
//! hands out that line, so the baselines never have to guess.

use crate::event::{event_id, Event, Redaction, Seq};
use crate::framing;

/// A timestamp of the width the store writes (RFC 3339 with milliseconds).
const SAMPLE_TS: &str = "2026-01-01T00:00:00.000Z";

/// A user message whose framed line at `seq` is exactly `line_len` bytes
/// (newline included), or the smallest possible message if `line_len` is
/// below that. Lines at other seqs differ by the width of the seq digits.
pub fn event_of_line_size(line_len: usize, seq: Seq) -> Event {
    let with_text = |text: String| Event::UserMessage { parent: None, text };
    let overhead = line_for(&with_text(String::new()), seq).len();
    let pad = line_len.saturating_sub(overhead);
    // Plain ASCII prose: nothing for JSON to escape, so one char is one byte.
    const WORDS: &str = "the agent reads the failing test and edits the parser ";
    let text: String = WORDS.chars().cycle().take(pad).collect();
    with_text(text)
}

/// The line the store would write for `event` at `seq` (with a fixed-width
/// timestamp, newline included).
pub fn line_for(event: &Event, seq: Seq) -> Vec<u8> {
    let mut out = Vec::new();
    framing::encode_into(
        &mut out,
        seq,
        &event_id(seq),
        SAMPLE_TS,
        Redaction::Public,
        event,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_the_requested_length() {
        for len in [200, 4096, 65536] {
            for seq in [0, 7, 123_456] {
                let ev = event_of_line_size(len, seq);
                assert_eq!(line_for(&ev, seq).len(), len, "len {len} seq {seq}");
            }
        }
    }

    #[test]
    fn tiny_targets_give_the_smallest_message() {
        let ev = event_of_line_size(1, 0);
        assert_eq!(
            ev,
            Event::UserMessage {
                parent: None,
                text: String::new()
            }
        );
    }

    #[test]
    fn the_store_writes_the_same_length() {
        // The real timestamp has the same width as the sample one.
        assert_eq!(crate::event::now_ts().len(), SAMPLE_TS.len());
    }
}
