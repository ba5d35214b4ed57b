//! The layout of a [`Timeline`] as inline SVG: one column (lane) per life,
//! time flowing down, so each restarted life starts below the crash of the
//! one before it; a last column for what the world applied during each
//! life. Every row is a box of wrapped text with a class the page's CSS
//! colours (`lost`, `repeated`, `crash`, `fault`, …); an acknowledged
//! event found missing is linked to the observation that missed it. Pure
//! geometry and markup: the words come from the model.

use std::fmt::Write;

use super::escape;
use crate::timeline::{Ack, Append, Applied, Observed, Row, Timeline};

/// A lane's width, the world column's, and the text's metrics (12 px
/// monospace: about 7.2 px a character).
const LANE_W: usize = 440;
const WORLD_W: usize = 380;
const PAD: usize = 8;
const LINE_H: usize = 15;
const ROW_GAP: usize = 4;
const HEADER: usize = 30;
const BAND_GAP: usize = 12;
const CHAR_W: f64 = 7.2;
/// Lines a row shows at most; the rest of its text is in its `<title>`.
const MAX_LINES: usize = 4;

/// A row placed: its box and its text.
struct Placed {
    x: usize,
    y: usize,
    w: usize,
    lines: Vec<String>,
    class: &'static str,
    title: String,
}

impl Placed {
    fn h(&self) -> usize {
        self.lines.len() * LINE_H + 6
    }
}

/// Wraps `text` at spaces into lines of at most `width` characters (a
/// longer word is cut), at most [`MAX_LINES`] of them (the last ending in
/// `…` when text was left out).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let used = line.chars().count();
            let sep = usize::from(used > 0);
            if used + sep + word.len() <= width {
                if sep == 1 {
                    line.push(' ');
                }
                line.extend(word.iter());
                break;
            }
            if used > 0 {
                lines.push(std::mem::take(&mut line));
                continue;
            }
            let rest = word.split_off(width);
            lines.push(word.iter().collect());
            word = rest;
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    if lines.len() > MAX_LINES {
        lines.truncate(MAX_LINES);
        let last = &mut lines[MAX_LINES - 1];
        let keep: String = last.chars().take(width.saturating_sub(1)).collect();
        *last = format!("{keep}…");
    }
    lines
}

fn chars_in(w: usize) -> usize {
    ((w - 2 * PAD) as f64 / CHAR_W).floor() as usize
}

fn append_text(a: &Append) -> (String, &'static str) {
    let (status, class) = match a.ack {
        Ack::Acked(_) => ("✓ acked", "append acked"),
        Ack::AckedAfterFault(_) => (
            "✓ acked after the injected error",
            "append acked across-fault",
        ),
        Ack::Refused => ("✗ refused (I/O error)", "append refused"),
        Ack::Never => ("✗ never acked", "append unacked"),
    };
    match &a.lost {
        Some(l) => (
            format!(
                "→ {} {status} · LOST: missing {}: {}",
                a.label, l.when, l.holds
            ),
            "append acked lost",
        ),
        None => (format!("→ {} {status}", a.label), class),
    }
}

fn observed_text(o: &Observed) -> (String, &'static str) {
    let mut s = format!("◆ disk observed {}: {} event(s)", o.when, o.events);
    if let Some(t) = &o.torn {
        let _ = write!(s, ", torn tail: {t}");
    }
    if let Some(d) = &o.damage {
        let _ = write!(s, ", damage: {d}");
    }
    if o.missing > 0 {
        let _ = write!(s, " · {} acknowledged event(s) missing", o.missing);
        (s, "observed missing")
    } else {
        (s, "observed")
    }
}

fn row_text(r: &Row) -> (String, &'static str) {
    match r {
        Row::Recovered {
            appended,
            interrupted,
        } => {
            let runs = if interrupted.is_empty() {
                "none".to_string()
            } else {
                interrupted.join(", ")
            };
            (
                format!(
                    "↻ restarted; recovery appended {appended} event(s); interrupted runs: {runs}"
                ),
                "recovery",
            )
        }
        Row::Uncertain { call, phase } => (
            format!("  uncertain call {call}: phase {phase}"),
            "recovery uncertain",
        ),
        Row::RecoveredAgain { appended } => (
            format!("↻ closed, reopened, recovered again: appended {appended} event(s)"),
            "recovery",
        ),
        Row::Append(a) => append_text(a),
        Row::Fault { text } => (format!("⚡ {text}"), "fault"),
        Row::Crash { text } => (format!("✕ {text}"), "crash"),
        Row::End { text, clean } => (
            format!("■ {text}"),
            if *clean { "end" } else { "end unclean" },
        ),
        Row::PowerCut { text } => (format!("✂ {text}"), "crash powercut"),
        Row::Observed(o) => observed_text(o),
    }
}

fn applied_text(a: &Applied) -> (String, &'static str) {
    let text = format!(
        "{} ({}: {}) · application {} of {}",
        a.operation, a.service, a.action, a.nth, a.of
    );
    if a.repeated() {
        (format!("‼ {text}"), "applied repeated")
    } else {
        (text, "applied")
    }
}

fn place(x: usize, y: usize, w: usize, (text, class): (String, &'static str)) -> Placed {
    Placed {
        x,
        y,
        w,
        lines: wrap(&text, chars_in(w)),
        class,
        title: text,
    }
}

/// The timeline as one `<svg>` element.
pub fn svg(t: &Timeline) -> String {
    let lanes = t.lives.len().max(1);
    let width = lanes * LANE_W + WORLD_W;
    let mut boxes: Vec<Placed> = Vec::new();
    // (lane, first y, last y) of each life's band.
    let mut bands: Vec<(usize, usize, usize)> = Vec::new();
    // Where each row of each lane was placed: index into `boxes`.
    let mut at: Vec<Vec<usize>> = Vec::new();
    let mut y = HEADER;
    let mut end_box = None;
    for (i, lane) in t.lives.iter().enumerate() {
        let top = y;
        let x = i * LANE_W + PAD;
        let mut ly = top + ROW_GAP;
        let mut rows = Vec::new();
        for r in &lane.rows {
            let b = place(x, ly, LANE_W - 2 * PAD, row_text(r));
            ly += b.h() + ROW_GAP;
            rows.push(boxes.len());
            boxes.push(b);
        }
        if i + 1 == t.lives.len() {
            let b = place(x, ly, LANE_W - 2 * PAD, observed_text(&t.end));
            ly += b.h() + ROW_GAP;
            end_box = Some(boxes.len());
            boxes.push(b);
            for w in &t.workspace {
                let text = format!(
                    "‼ workspace: {} lines of {} tagged {}",
                    w.lines, w.file, w.operation
                );
                let b = place(x, ly, LANE_W - 2 * PAD, (text, "workspace repeated"));
                ly += b.h() + ROW_GAP;
                boxes.push(b);
            }
        }
        let wx = lanes * LANE_W + PAD;
        let mut wy = top + ROW_GAP;
        for a in &lane.world {
            let b = place(wx, wy, WORLD_W - 2 * PAD, applied_text(a));
            wy += b.h() + ROW_GAP;
            boxes.push(b);
        }
        y = ly.max(wy);
        bands.push((i, top, y));
        at.push(rows);
        y += BAND_GAP;
    }
    let height = y + PAD;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="timeline" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" font-family="monospace" font-size="12">"#
    );
    s.push_str("<title>timeline: one lane per life, time flows down</title>");
    for (i, lane) in t.lives.iter().enumerate() {
        let what = if i == 0 { "first process" } else { "restarted" };
        let _ = write!(
            s,
            r#"<text class="lane-head" x="{}" y="18">life {} ({what})</text>"#,
            i * LANE_W + PAD,
            lane.life
        );
        let _ = write!(
            s,
            r#"<line class="lane-rule" x1="{x}" y1="{HEADER}" x2="{x}" y2="{height}"/>"#,
            x = (i + 1) * LANE_W
        );
    }
    let _ = write!(
        s,
        r#"<text class="lane-head" x="{}" y="18">world: applications during each life</text>"#,
        lanes * LANE_W + PAD
    );
    for &(lane, top, bottom) in &bands {
        let _ = write!(
            s,
            r#"<rect class="band" x="{}" y="{top}" width="{}" height="{}"/>"#,
            lane * LANE_W + 2,
            LANE_W - 4,
            bottom - top
        );
    }
    for b in &boxes {
        let _ = write!(
            s,
            r#"<g class="row {}"><title>{}</title><rect x="{}" y="{}" width="{}" height="{}" rx="3"/>"#,
            b.class,
            escape(&b.title),
            b.x,
            b.y,
            b.w,
            b.h()
        );
        for (n, line) in b.lines.iter().enumerate() {
            let _ = write!(
                s,
                r#"<text x="{}" y="{}">{}</text>"#,
                b.x + PAD,
                b.y + LINE_H * (n + 1) - 2,
                escape(line)
            );
        }
        s.push_str("</g>");
    }
    // A lost event, linked to the observation that first missed it.
    for (i, lane) in t.lives.iter().enumerate() {
        for (r, row) in lane.rows.iter().enumerate() {
            let Row::Append(Append { lost: Some(l), .. }) = row else {
                continue;
            };
            let to = match l.at {
                Some((lane, row)) => at.get(lane).and_then(|rows| rows.get(row)).copied(),
                None => end_box,
            };
            let (Some(from), Some(to)) = (at[i].get(r).map(|&b| &boxes[b]), to.map(|b| &boxes[b]))
            else {
                continue;
            };
            let (x1, y1) = (from.x + from.w, from.y + from.h() / 2);
            let (x2, y2) = (to.x + to.w, to.y + to.h() / 2);
            let bend = x1.max(x2) + 6;
            let _ = write!(
                s,
                r#"<path class="lost-link" d="M{x1} {y1} C{bend} {y1} {bend} {y2} {x2} {y2}"/>"#
            );
        }
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_keeps_words_and_cuts_long_ones() {
        assert_eq!(wrap("a bb ccc", 4), vec!["a bb", "ccc"]);
        assert_eq!(wrap("abcdefghij", 4), vec!["abcd", "efgh", "ij"]);
        assert_eq!(wrap("", 4), vec![""]);
        let long = wrap(&"word ".repeat(40), 10);
        assert_eq!(long.len(), MAX_LINES);
        assert!(long[MAX_LINES - 1].ends_with('…'));
    }
}
