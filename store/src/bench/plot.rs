//! `--plot`: latency CDFs as a hand-written SVG.
//!
//! One panel per workload, side by side, one polyline per method, a shared
//! log-scaled latency axis (so panels compare at a glance) and a legend under
//! each panel. Pure string building: no file I/O, no plotting crate.

use std::fmt::Write as _;

/// One curve: points of (latency in µs, fraction of operations at or below).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// One chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    pub series: Vec<Series>,
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
];

const PANEL_W: f64 = 480.0;
const PLOT_X: f64 = 60.0;
const PLOT_W: f64 = 390.0;
const PLOT_Y: f64 = 70.0;
const PLOT_H: f64 = 260.0;
const LEGEND_Y: f64 = PLOT_Y + PLOT_H + 50.0;
const LEGEND_ROW: f64 = 18.0;

/// The whole figure.
pub fn render_svg(title: &str, subtitle: &str, panels: &[Panel]) -> String {
    let rows = panels.iter().map(|p| p.series.len()).max().unwrap_or(0) as f64;
    let width = PANEL_W * panels.len().max(1) as f64;
    let height = LEGEND_Y + rows * LEGEND_ROW + 20.0;
    let (lo, hi) = x_range(panels);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="16" font-weight="bold">{}</text>"#,
        width / 2.0,
        escape(title)
    );
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"40\" text-anchor=\"middle\" fill=\"#555\">{}</text>",
        width / 2.0,
        escape(subtitle)
    );
    for (i, panel) in panels.iter().enumerate() {
        let _ = writeln!(s, r#"<g transform="translate({},0)">"#, i as f64 * PANEL_W);
        panel_svg(&mut s, panel, lo, hi);
        let _ = writeln!(s, "</g>");
    }
    s.push_str("</svg>\n");
    s
}

/// Decade bounds (as powers of ten, in µs) covering every positive point.
fn x_range(panels: &[Panel]) -> (i32, i32) {
    let xs = panels
        .iter()
        .flat_map(|p| &p.series)
        .flat_map(|s| &s.points)
        .map(|&(x, _)| x)
        .filter(|&x| x > 0.0 && x.is_finite());
    let (min, max) = xs.fold((f64::INFINITY, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
    if !min.is_finite() {
        return (0, 3);
    }
    let lo = min.log10().floor() as i32;
    let hi = (max.log10().ceil() as i32).max(lo + 1);
    (lo, hi)
}

fn panel_svg(s: &mut String, panel: &Panel, lo: i32, hi: i32) {
    let x_of = |us: f64| {
        let v = us.max(10f64.powi(lo)).log10();
        PLOT_X + (v - f64::from(lo)) / f64::from(hi - lo) * PLOT_W
    };
    let y_of = |q: f64| PLOT_Y + (1.0 - q.clamp(0.0, 1.0)) * PLOT_H;
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle" font-weight="bold">{}</text>"#,
        PLOT_X + PLOT_W / 2.0,
        PLOT_Y - 12.0,
        escape(&panel.title)
    );
    // Grid: a line per decade, fainter ones at 2..9 times it.
    for d in lo..=hi {
        let x = x_of(10f64.powi(d));
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{PLOT_Y}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#ccc\"/>",
            PLOT_Y + PLOT_H
        );
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
            PLOT_Y + PLOT_H + 16.0,
            decade_label(d)
        );
        if d < hi {
            for m in 2..10 {
                let x = x_of(f64::from(m) * 10f64.powi(d));
                let _ = writeln!(
                    s,
                    "<line x1=\"{x:.1}\" y1=\"{PLOT_Y}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#eee\"/>",
                    PLOT_Y + PLOT_H
                );
            }
        }
    }
    for (q, label) in [
        (0.0, "0"),
        (0.25, "0.25"),
        (0.5, "0.5"),
        (0.75, "0.75"),
        (1.0, "1"),
    ] {
        let y = y_of(q);
        let _ = writeln!(
            s,
            "<line x1=\"{PLOT_X}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#ccc\"/>",
            PLOT_X + PLOT_W
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{label}</text>"#,
            PLOT_X - 6.0,
            y + 4.0
        );
    }
    let y99 = y_of(0.99);
    let _ = writeln!(
        s,
        "<line x1=\"{PLOT_X}\" y1=\"{y99:.1}\" x2=\"{}\" y2=\"{y99:.1}\" stroke=\"#999\" stroke-dasharray=\"4 3\"/>",
        PLOT_X + PLOT_W
    );
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{:.1}\" fill=\"#777\" font-size=\"10\">p99</text>",
        PLOT_X + PLOT_W + 3.0,
        y99 + 3.0
    );
    let _ = writeln!(
        s,
        r#"<rect x="{PLOT_X}" y="{PLOT_Y}" width="{PLOT_W}" height="{PLOT_H}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">latency per operation (log scale)</text>"#,
        PLOT_X + PLOT_W / 2.0,
        PLOT_Y + PLOT_H + 34.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">fraction of operations</text>"#,
        PLOT_Y + PLOT_H / 2.0
    );
    for (k, series) in panel.series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        if !series.points.is_empty() {
            let pts: Vec<String> = series
                .points
                .iter()
                .map(|&(x, q)| format!("{:.1},{:.1}", x_of(x), y_of(q)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                pts.join(" ")
            );
        }
        let y = LEGEND_Y + k as f64 * LEGEND_ROW;
        let _ = writeln!(
            s,
            r#"<line x1="{PLOT_X}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="3"/>"#,
            PLOT_X + 24.0
        );
        let label = if series.points.is_empty() {
            format!("{} (n/a)", series.label)
        } else {
            series.label.clone()
        };
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}</text>"#,
            PLOT_X + 32.0,
            y + 4.0,
            escape(&label)
        );
    }
}

fn decade_label(d: i32) -> String {
    match d {
        i32::MIN..=-4 => format!("1e{d} µs"),
        -3 => "1 ns".into(),
        -2 => "10 ns".into(),
        -1 => "100 ns".into(),
        0 => "1 µs".into(),
        1 => "10 µs".into(),
        2 => "100 µs".into(),
        3 => "1 ms".into(),
        4 => "10 ms".into(),
        5 => "100 ms".into(),
        6 => "1 s".into(),
        _ => format!("{} s", 10u64.pow((d - 6) as u32)),
    }
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal XML well-formedness check, enough for what this module
    /// writes (elements, attributes, text; no comments or CDATA): every tag
    /// closes in order, attribute values are quoted, text has no bare `<`/`&`.
    fn assert_well_formed(xml: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = xml;
        while let Some(start) = rest.find('<') {
            check_text(&rest[..start]);
            let end = rest[start..].find('>').expect("unclosed tag") + start;
            let tag = &rest[start + 1..end];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
            } else {
                let self_closing = tag.ends_with('/');
                let body = tag.trim_end_matches('/');
                let name = body.split_whitespace().next().expect("empty tag");
                check_attributes(&body[name.len()..]);
                if !self_closing {
                    stack.push(name.to_string());
                }
            }
            rest = &rest[end + 1..];
        }
        check_text(rest);
        assert!(stack.is_empty(), "unclosed elements {stack:?}");
    }

    fn check_text(text: &str) {
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..text[i..].find(';').map_or(text.len(), |j| i + j + 1)];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].contains(&entity),
                "bare & in {text:?}"
            );
        }
    }

    fn check_attributes(mut attrs: &str) {
        loop {
            attrs = attrs.trim_start();
            if attrs.is_empty() {
                return;
            }
            let eq = attrs.find('=').expect("attribute without value");
            assert!(!attrs[..eq].contains(char::is_whitespace), "{attrs}");
            let after = &attrs[eq + 1..];
            assert!(after.starts_with('"'), "unquoted attribute in {attrs}");
            let close = after[1..].find('"').expect("unterminated attribute") + 1;
            check_text(&after[1..close]);
            attrs = &after[close + 1..];
        }
    }

    fn panel(title: &str, labels: &[&str]) -> Panel {
        Panel {
            title: title.into(),
            series: labels
                .iter()
                .enumerate()
                .map(|(i, l)| Series {
                    label: l.to_string(),
                    points: if l.contains("n/a") {
                        Vec::new()
                    } else {
                        (0..=10)
                            .map(|k| {
                                (
                                    3.0 * 10f64.powi(i as i32) * (1.0 + k as f64),
                                    k as f64 / 10.0,
                                )
                            })
                            .collect()
                    },
                })
                .collect(),
        }
    }

    #[test]
    fn svg_is_well_formed_with_one_polyline_per_measured_series() {
        let svg = render_svg(
            "fsync <latency> & \"friends\"",
            "host 'x'",
            &[
                panel(
                    "200 B appends",
                    &["write+fdatasync", "O_DIRECT n/a", "no sync"],
                ),
                panel("8 KiB writes", &["write+fdatasync", "O_DSYNC"]),
            ],
        );
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert!(svg.contains("fsync &lt;latency&gt; &amp; &quot;friends&quot;"));
        assert!(svg.contains("O_DIRECT n/a (n/a)"));
        assert!(svg.contains(r#"width="960""#), "two panels side by side");
    }

    #[test]
    fn the_log_axis_covers_every_point_by_whole_decades() {
        let p = panel("t", &["a", "b", "c"]);
        // Points span 3 µs .. 3300 µs: decades 1 µs .. 10 ms.
        assert_eq!(x_range(std::slice::from_ref(&p)), (0, 4));
        let svg = render_svg("t", "", &[p]);
        for label in ["1 µs", "10 µs", "100 µs", "1 ms", "10 ms"] {
            assert!(svg.contains(&format!(">{label}<")), "{label}");
        }
        for coords in svg
            .split("points=\"")
            .skip(1)
            .map(|s| &s[..s.find('"').unwrap()])
        {
            for xy in coords.split(' ') {
                let (x, y) = xy.split_once(',').unwrap();
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                assert!((PLOT_X..=PLOT_X + PLOT_W).contains(&x), "x {x}");
                assert!((PLOT_Y..=PLOT_Y + PLOT_H).contains(&y), "y {y}");
            }
        }
    }

    #[test]
    fn decades_are_labelled_in_natural_units() {
        let labels: Vec<String> = (-2..=7).map(decade_label).collect();
        assert_eq!(
            labels,
            [
                "10 ns", "100 ns", "1 µs", "10 µs", "100 µs", "1 ms", "10 ms", "100 ms", "1 s",
                "10 s"
            ]
        );
    }

    #[test]
    fn no_data_still_renders_a_valid_figure() {
        let svg = render_svg("empty", "", &[]);
        assert_well_formed(&svg);
        assert_eq!(x_range(&[]), (0, 3));
    }
}
