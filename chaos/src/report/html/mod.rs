//! The HTML report (`--html DIR` writes `DIR/index.html`): one
//! self-contained page, with inline CSS and inline SVG, no script, no
//! external fonts or links, readable offline and without JavaScript.
//!
//! - [`svg`]: the layout of a failing trial's [`crate::timeline::Timeline`],
//!   one lane per life;
//! - [`page`]: the pages of `run` (the scorecard, each violation with its
//!   timeline and replay command, the power-loss states) and `replay`.
//!
//! Every text that reaches the page goes through [`escape`]: event text
//! comes from the store under test, and a store may write anything. This
//! module formats; it must never run or judge anything.

pub mod page;
pub mod svg;

pub use page::{campaign, power_loss_replay, replay, ReplayPage};

/// `text` for an HTML or SVG text node or a double- or single-quoted
/// attribute value: `&`, `<`, `>`, `"` and `'` as character references,
/// and the control characters HTML does not allow (all of C0 but tab,
/// newline and carriage return; DEL and C1) as U+FFFD.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_markup_quotes_and_controls() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y' ]]> é ✓"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39; ]]&gt; é ✓"
        );
        assert_eq!(
            escape("a\u{0}b\u{7f}c\u{85}d\te\nf"),
            "a\u{FFFD}b\u{FFFD}c\u{FFFD}d\te\nf"
        );
    }

    /// An attribute value, quoted either way, reads back as the text.
    #[test]
    fn an_escaped_attribute_reads_back_whole() {
        let hostile = r#"x" onload="alert(1)' & <b> ]]> é"#;
        let html = format!(
            "<p title=\"{}\" data-x='{}'>t</p>",
            escape(hostile),
            escape(hostile)
        );
        let doc = scraper::Html::parse_fragment(&html);
        let p = doc
            .select(&scraper::Selector::parse("p").unwrap())
            .next()
            .unwrap();
        assert_eq!(p.value().attr("title"), Some(hostile));
        assert_eq!(p.value().attr("data-x"), Some(hostile));
        assert_eq!(p.value().attrs().count(), 2);
    }
}
