//! Which counters each code region of the store counts, read from the
//! binary through `llvm-cov export` (the coverage mapping's expressions are
//! sums and differences of counters; llvm-cov evaluates them, never shows
//! them).
//!
//! The expressions are found by probing: probe `j` is a profile in which
//! the `j`-th counter of every function holds that function's number + 1
//! and every other counter 0. A region then counts 0 (counter `j` is not in
//! its expression), the function's number + 1 (added), or llvm-cov's
//! saturated negative (subtracted). One probe per counter of the largest
//! function gives every region its terms and its function. The result is
//! checked against llvm-cov on a real profile ([`Mapping::verify`]): a
//! region whose decoded count differs fails the run, so a coefficient other
//! than ±1 cannot slip through.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::profraw::Layout;
use super::CoverageError;

/// What llvm-cov prints for a region whose count came out negative.
const SATURATED: u64 = i64::MAX as u64;

/// The LLVM tools that read the profiles.
#[derive(Debug, Clone)]
pub struct Tools {
    pub profdata: PathBuf,
    pub cov: PathBuf,
}

impl Tools {
    /// `LLVM_PROFDATA` and `LLVM_COV`, else the rustup component
    /// `llvm-tools` of the `rustc` on PATH (or `RUSTC`).
    pub fn find() -> Result<Tools, CoverageError> {
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let ask = |args: &[&str]| -> Option<String> {
            let out = Command::new(&rustc).args(args).output().ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        };
        let bin = (|| {
            let sysroot = ask(&["--print", "sysroot"])?;
            let host = ask(&["-vV"])?
                .lines()
                .find_map(|l| l.strip_prefix("host: ").map(str::to_string))?;
            Some(
                Path::new(sysroot.trim())
                    .join("lib/rustlib")
                    .join(host)
                    .join("bin"),
            )
        })();
        let tool = |var: &str, name: &str| -> Result<PathBuf, CoverageError> {
            if let Some(p) = std::env::var_os(var) {
                return Ok(PathBuf::from(p));
            }
            let path = bin.as_ref().map(|b| b.join(name));
            match path {
                Some(p) if p.is_file() => Ok(p),
                _ => Err(CoverageError::Tools(format!(
                    "{name} not found (in {}): `rustup component add llvm-tools`, or set {var}",
                    bin.as_ref()
                        .map_or("the rustc sysroot".into(), |b| b.display().to_string())
                ))),
            }
        };
        Ok(Tools {
            profdata: tool("LLVM_PROFDATA", "llvm-profdata")?,
            cov: tool("LLVM_COV", "llvm-cov")?,
        })
    }

    fn run(&self, program: &Path, args: &[&std::ffi::OsStr]) -> Result<Vec<u8>, CoverageError> {
        let out = Command::new(program)
            .args(args)
            .output()
            .map_err(|e| CoverageError::Tools(format!("cannot run {}: {e}", program.display())))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(CoverageError::Tools(format!(
                "{} failed ({}): {}",
                program.display(),
                out.status,
                err.lines().next().unwrap_or_default()
            )));
        }
        Ok(out.stdout)
    }

    /// llvm-cov's export (JSON) of `binary` under the raw profile `raw`.
    pub fn export(&self, binary: &Path, raw: &Path) -> Result<Value, CoverageError> {
        let indexed = raw.with_extension("profdata");
        self.run(
            &self.profdata,
            &[
                "merge".as_ref(),
                "-o".as_ref(),
                indexed.as_os_str(),
                raw.as_os_str(),
            ],
        )?;
        let json = self.run(
            &self.cov,
            &[
                "export".as_ref(),
                "-format=text".as_ref(),
                "--instr-profile".as_ref(),
                indexed.as_os_str(),
                binary.as_os_str(),
            ],
        )?;
        let _ = std::fs::remove_file(&indexed);
        serde_json::from_slice(&json)
            .map_err(|e| CoverageError::Tools(format!("llvm-cov export printed no JSON: {e}")))
    }
}

/// One code region of the store: where it is and how to count it.
#[derive(Debug, Clone)]
pub struct Region {
    /// Relative to the workspace (`store/src/log.rs`).
    pub file: String,
    pub start: (u32, u32),
    pub end: (u32, u32),
    /// Its count: the sum of coefficient × counter, over every
    /// instantiation of its function.
    terms: Vec<(usize, i64)>,
}

impl Region {
    /// A region no counter counts (tests build summaries from these).
    #[cfg(test)]
    pub fn at(file: &str, start: (u32, u32), end: (u32, u32)) -> Region {
        Region {
            file: file.to_string(),
            start,
            end,
            terms: Vec::new(),
        }
    }

    /// Its count in a profile's counters (or their difference).
    pub fn count(&self, counters: &[i64]) -> i64 {
        self.terms.iter().map(|&(i, c)| c * counters[i]).sum()
    }
}

/// Every code region of the store's files in one binary.
#[derive(Debug, Clone)]
pub struct Mapping {
    pub regions: Vec<Region>,
}

/// Where a region is: its file, first and last (line, column).
type Place<F> = (F, (u32, u32), (u32, u32));

/// The store's code regions of an export: per function (in export order),
/// each region's file, position and count.
type Exported = Vec<Vec<(String, (u32, u32), (u32, u32), u64)>>;

fn store_file(name: &str) -> Option<String> {
    name.rfind("store/src/").map(|at| name[at..].to_string())
}

fn exported(export: &Value) -> Result<Exported, CoverageError> {
    let functions = export["data"][0]["functions"]
        .as_array()
        .ok_or_else(|| CoverageError::Tools("llvm-cov export has no functions".into()))?;
    let num = |v: &Value| v.as_u64().unwrap_or(0);
    Ok(functions
        .iter()
        .map(|f| {
            let files: Vec<&str> = f["filenames"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            f["regions"]
                .as_array()
                .map(|rs| rs.as_slice())
                .unwrap_or_default()
                .iter()
                .filter_map(|r| {
                    let r = r.as_array()?;
                    // [line, col, end line, end col, count, file, expanded file, kind]; kind 0: code.
                    if r.len() < 8 || num(&r[7]) != 0 {
                        return None;
                    }
                    let file = store_file(files.get(num(&r[5]) as usize)?)?;
                    Some((
                        file,
                        (num(&r[0]) as u32, num(&r[1]) as u32),
                        (num(&r[2]) as u32, num(&r[3]) as u32),
                        num(&r[4]),
                    ))
                })
                .collect()
        })
        .collect())
}

impl Mapping {
    /// Probes `binary` (whose profiles look like `template`) in `work`.
    pub fn probe(
        tools: &Tools,
        binary: &Path,
        layout: &Layout,
        template: &[u8],
        work: &Path,
    ) -> Result<Mapping, CoverageError> {
        let widest = layout.functions.iter().map(|f| f.1).max().unwrap_or(0);
        // The data records of each function, numbered in order of appearance.
        let mut groups: Vec<Vec<(usize, usize)>> = Vec::new();
        let mut numbers: BTreeMap<(u64, u64), usize> = BTreeMap::new();
        for (identity, &record) in layout.identities.iter().zip(&layout.functions) {
            let number = *numbers.entry(*identity).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[number].push(record);
        }
        let probe = |j: usize| -> Result<Exported, CoverageError> {
            let mut counters = vec![0u64; layout.counters];
            for (number, records) in groups.iter().enumerate() {
                let (first, n) = records[0];
                if j < n {
                    counters[first + j] = number as u64 + 1;
                }
            }
            let raw = work.join(format!("probe-{j}.profraw"));
            std::fs::write(&raw, layout.with_counters(template, &counters)).map_err(|e| {
                CoverageError::Tools(format!("cannot write {}: {e}", raw.display()))
            })?;
            let export = tools.export(binary, &raw);
            let _ = std::fs::remove_file(&raw);
            exported(&export?)
        };
        // Two at a time: each probe is one llvm-profdata and one llvm-cov.
        let mut probes: Vec<Option<Result<Exported, CoverageError>>> =
            (0..widest).map(|_| None).collect();
        for pair in (0..widest).collect::<Vec<_>>().chunks(2) {
            std::thread::scope(|s| {
                let handles: Vec<_> = pair
                    .iter()
                    .map(|&j| (j, s.spawn(move || probe(j))))
                    .collect();
                for (j, h) in handles {
                    probes[j] = Some(h.join().unwrap_or_else(|_| {
                        Err(CoverageError::Tools(format!("probe {j} panicked")))
                    }));
                }
            });
        }
        let probes: Vec<Exported> = probes
            .into_iter()
            .map(|p| p.expect("every probe ran"))
            .collect::<Result<_, _>>()?;
        let Some(first) = probes.first() else {
            return Err(CoverageError::Tools(
                "the binary has no instrumented function".into(),
            ));
        };
        let mut by_place: BTreeMap<Place<String>, Vec<(usize, i64)>> = BTreeMap::new();
        for (f, regions) in first.iter().enumerate() {
            // Which data record this export entry is: any probe's positive count.
            let mut number: Option<u64> = None;
            let mut coefficients = vec![Vec::new(); regions.len()];
            for (j, probe) in probes.iter().enumerate() {
                let same = probe.get(f).filter(|p| p.len() == regions.len());
                let Some(counts) = same else {
                    return Err(CoverageError::Tools(format!(
                        "llvm-cov listed the functions differently in probe {j}"
                    )));
                };
                for (r, region) in counts.iter().enumerate() {
                    let coefficient = match region.3 {
                        0 => continue,
                        SATURATED => -1,
                        n => {
                            if number.is_some_and(|m| m != n) {
                                return Err(CoverageError::Tools(format!(
                                    "a region of {}:{} counts function {} and {}: not a sum of counters",
                                    region.0, region.1 .0, n - 1, number.unwrap_or(0) - 1
                                )));
                            }
                            number = Some(n);
                            1
                        }
                    };
                    coefficients[r].push((j, coefficient));
                }
            }
            for (r, region) in regions.iter().enumerate() {
                let terms = by_place
                    .entry((region.0.clone(), region.1, region.2))
                    .or_default();
                if coefficients[r].is_empty() {
                    continue;
                }
                let Some(records) = number.and_then(|n| groups.get(n as usize - 1)) else {
                    return Err(CoverageError::Tools(format!(
                        "the region at {}:{} counts function {number:?} of {}",
                        region.0,
                        region.1 .0,
                        groups.len()
                    )));
                };
                for &(first, _) in records {
                    terms.extend(coefficients[r].iter().map(|&(j, c)| (first + j, c)));
                }
            }
        }
        Ok(Mapping {
            regions: by_place
                .into_iter()
                .map(|((file, start, end), terms)| Region {
                    file,
                    start,
                    end,
                    terms,
                })
                .collect(),
        })
    }

    /// Checks the decoded regions against llvm-cov's own counts for the
    /// profile `raw` (whose counters are `counters`).
    pub fn verify(
        &self,
        tools: &Tools,
        binary: &Path,
        raw: &Path,
        counters: &[i64],
    ) -> Result<(), CoverageError> {
        let mut expected: BTreeMap<Place<&str>, u64> = BTreeMap::new();
        let export = exported(&tools.export(binary, raw)?)?;
        for (file, start, end, count) in export.iter().flatten() {
            *expected.entry((file.as_str(), *start, *end)).or_default() += count;
        }
        let wrong: Vec<String> = self
            .regions
            .iter()
            .filter_map(|r| {
                let want = expected.get(&(r.file.as_str(), r.start, r.end)).copied();
                let got = r.count(counters);
                (want != Some(got as u64)).then(|| {
                    format!(
                        "{}:{}:{} counts {got}, llvm-cov {want:?}",
                        r.file, r.start.0, r.start.1
                    )
                })
            })
            .collect();
        if let Some(first) = wrong.first() {
            return Err(CoverageError::Tools(format!(
                "the decoded coverage mapping disagrees with llvm-cov at {} region(s), e.g. {first}",
                wrong.len()
            )));
        }
        Ok(())
    }
}
