//! The figures of a coverage run: per file of the store, the code regions
//! executed (a), executed in a fault's window (b) and then observed (c),
//! and every region not reached under a fault, with why: never executed,
//! or executed but never in a fault's window; then the regions reached
//! under a fault but never observed. Fault-profile code (see
//! `faultcode`) is counted apart, in none of these figures. Text for the
//! terminal, JSON for tools.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::mapping::Region;

/// Why a region has no trial under a fault (or none observed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Gap {
    /// No trial executed it.
    NeverExecuted,
    /// Trials executed it, none in a fault's window.
    NeverUnderFault,
    /// Trials executed it in a fault's window; none was observed after.
    NeverObserved,
}

impl Gap {
    fn says(self) -> &'static str {
        match self {
            Gap::NeverExecuted => "never executed",
            Gap::NeverUnderFault => "executed, never under a fault",
            Gap::NeverObserved => "under a fault, never observed",
        }
    }
}

/// Adjacent regions with the same gap: a span of lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Uncovered {
    pub first_line: u32,
    pub last_line: u32,
    pub regions: usize,
    pub gap: Gap,
    /// The most trials and probes that executed one of its regions (a).
    pub executed: u64,
    /// Its first source line, when the source is at hand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Regions of one file, and trials and probes per figure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileCoverage {
    pub file: String,
    /// Its regions but those of fault-profile code.
    pub regions: usize,
    /// Regions of fault-profile code, counted in no other figure.
    pub fault_profile: usize,
    /// Regions some trial executed (a).
    pub executed: usize,
    /// Regions some trial executed in a fault's window (b).
    pub under_fault: usize,
    /// Regions some trial executed in a fault's window and then observed (c).
    pub observed: usize,
    pub uncovered: Vec<Uncovered>,
}

/// The whole store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Regions, not branches: branch coverage needs an unstable rustc flag.
    pub unit: &'static str,
    pub trials: u64,
    /// Probes counted beside the trials (see `tally_probe`).
    pub probes: u64,
    pub regions: usize,
    pub fault_profile: usize,
    pub executed: usize,
    pub under_fault: usize,
    pub observed: usize,
    pub files: Vec<FileCoverage>,
}

fn percent(n: usize, of: usize) -> f64 {
    if of == 0 {
        100.0
    } else {
        100.0 * n as f64 / of as f64
    }
}

/// The first line of a region in the store's source, trimmed, when this
/// binary's workspace is still where it was built.
fn source_line(file: &str, line: u32) -> Option<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    let text = std::fs::read_to_string(root.join(file)).ok()?;
    let line = text.lines().nth(line.checked_sub(1)? as usize)?.trim();
    Some(line.chars().take(100).collect())
}

impl Summary {
    /// The figures of `regions` (`fault_code[i]`: the `i`-th is
    /// fault-profile code) from each one's count of trials and probes.
    pub fn of(
        regions: &[Region],
        fault_code: &[bool],
        trials: u64,
        probes: u64,
        executed: &[u64],
        faulted: &[u64],
        observed: &[u64],
    ) -> Summary {
        let mut files: BTreeMap<&str, FileCoverage> = BTreeMap::new();
        for (i, r) in regions.iter().enumerate() {
            let f = files.entry(&r.file).or_insert_with(|| FileCoverage {
                file: r.file.clone(),
                regions: 0,
                fault_profile: 0,
                executed: 0,
                under_fault: 0,
                observed: 0,
                uncovered: Vec::new(),
            });
            if fault_code[i] {
                f.fault_profile += 1;
                continue;
            }
            f.regions += 1;
            f.executed += usize::from(executed[i] > 0);
            f.under_fault += usize::from(faulted[i] > 0);
            f.observed += usize::from(observed[i] > 0);
            let gap = if executed[i] == 0 {
                Some(Gap::NeverExecuted)
            } else if faulted[i] == 0 {
                Some(Gap::NeverUnderFault)
            } else if observed[i] == 0 {
                Some(Gap::NeverObserved)
            } else {
                None
            };
            let Some(gap) = gap else { continue };
            // Regions come in source order: one that starts by the line
            // after the span's end, with the same gap, extends it.
            match f.uncovered.last_mut() {
                Some(u) if u.gap == gap && r.start.0 <= u.last_line + 1 => {
                    u.last_line = u.last_line.max(r.end.0);
                    u.regions += 1;
                    u.executed = u.executed.max(executed[i]);
                }
                _ => f.uncovered.push(Uncovered {
                    first_line: r.start.0,
                    last_line: r.end.0,
                    regions: 1,
                    gap,
                    executed: executed[i],
                    source: source_line(&r.file, r.start.0),
                }),
            }
        }
        let files: Vec<FileCoverage> = files.into_values().collect();
        let total = |f: fn(&FileCoverage) -> usize| files.iter().map(f).sum();
        Summary {
            unit: "region",
            trials,
            probes,
            regions: total(|f| f.regions),
            fault_profile: total(|f| f.fault_profile),
            executed: total(|f| f.executed),
            under_fault: total(|f| f.under_fault),
            observed: total(|f| f.observed),
            files,
        }
    }

    /// The per-file table, then each file's regions with a gap.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "coverage of agentstore (code regions of store/src) over {} trial(s) and {} probe(s): (a) executed, (b) executed in a fault's window, (c) then observed",
            self.trials, self.probes
        );
        let row = |out: &mut String, name: &str, n: usize, [a, b, c]: [usize; 3], apart: usize| {
            let _ = writeln!(
                out,
                "  {name:<28} {n:>7} {a:>7} {:>6.1}% {b:>7} {:>6.1}% {c:>7} {:>6.1}% {apart:>13}",
                percent(a, n),
                percent(b, n),
                percent(c, n)
            );
        };
        let _ = writeln!(
            out,
            "  {:<28} {:>7} {:>15} {:>15} {:>15} {:>13}",
            "file", "regions", "(a) executed", "(b) under fault", "(c) observed", "fault profile"
        );
        for f in &self.files {
            let figures = [f.executed, f.under_fault, f.observed];
            row(&mut out, &f.file, f.regions, figures, f.fault_profile);
        }
        let figures = [self.executed, self.under_fault, self.observed];
        row(&mut out, "total", self.regions, figures, self.fault_profile);
        let _ = writeln!(
            out,
            "fault profile: regions that run only while a fault profile (--store-fault) is on, in no other column"
        );
        let _ = writeln!(
            out,
            "regions with a gap, by file (lines, regions, why; in parentheses the most trials and probes that executed one):"
        );
        for f in self.files.iter().filter(|f| !f.uncovered.is_empty()) {
            let regions: usize = f.uncovered.iter().map(|u| u.regions).sum();
            let _ = writeln!(out, "{}: {regions} region(s)", f.file);
            for u in &f.uncovered {
                let _ = writeln!(
                    out,
                    "  {:<11} {:>3}  {:<36} {}",
                    format!("{}-{}", u.first_line, u.last_line),
                    u.regions,
                    format!("{} ({})", u.gap.says(), u.executed),
                    u.source.as_deref().unwrap_or("")
                );
            }
        }
        out
    }

    /// The figure the floor holds: percent of regions under a fault (b).
    pub fn under_fault_percent(&self) -> f64 {
        percent(self.under_fault, self.regions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::mapping::Region;

    #[test]
    fn gaps_are_classed_and_adjacent_regions_with_one_gap_are_one_span() {
        let regions: Vec<Region> = [(1, 1), (2, 2), (3, 3), (9, 9), (10, 10)]
            .iter()
            .map(|&(a, b)| Region::at("store/src/x.rs", (a, 1), (b, 5)))
            .collect();
        let s = Summary::of(
            &regions,
            &[false; 5],
            3,
            1,
            &[0, 0, 3, 2, 2],
            &[0, 0, 0, 1, 1],
            &[0, 0, 0, 0, 1],
        );
        let f = &s.files[0];
        assert_eq!(
            (f.regions, f.executed, f.under_fault, f.observed),
            (5, 3, 2, 1)
        );
        let spans: Vec<_> = f
            .uncovered
            .iter()
            .map(|u| (u.first_line, u.last_line, u.regions, u.gap))
            .collect();
        assert_eq!(
            spans,
            [
                (1, 2, 2, Gap::NeverExecuted),
                (3, 3, 1, Gap::NeverUnderFault),
                (9, 9, 1, Gap::NeverObserved)
            ]
        );
        assert!(
            s.text()
                .contains("3-3           1  executed, never under a fault (3)"),
            "{}",
            s.text()
        );
    }

    #[test]
    fn fault_profile_code_is_counted_apart_and_is_no_gap() {
        let regions: Vec<Region> = [(1, 1), (2, 2), (3, 3)]
            .iter()
            .map(|&(a, b)| Region::at("store/src/x.rs", (a, 1), (b, 5)))
            .collect();
        let s = Summary::of(
            &regions,
            &[false, true, false],
            1,
            0,
            &[1, 0, 0],
            &[1, 0, 0],
            &[1, 0, 0],
        );
        let f = &s.files[0];
        assert_eq!((f.regions, f.fault_profile, f.executed), (2, 1, 1));
        assert_eq!((s.regions, s.fault_profile), (2, 1));
        let gaps: Vec<_> = f
            .uncovered
            .iter()
            .map(|u| (u.first_line, u.last_line))
            .collect();
        assert_eq!(gaps, [(3, 3)], "line 2 is fault-profile code, no gap");
        assert!(s.text().contains("fault profile"), "{}", s.text());
    }
}
