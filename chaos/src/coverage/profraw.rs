//! LLVM's raw profile (`.profraw`, version 10, the format of the rustc this
//! build uses): where a file's counters are, read and replaced. Only what
//! coverage needs: the header, the per-function data records (which
//! counters are whose) and the counter array; never the names or values.

use std::path::Path;

use super::CoverageError;

const MAGIC: u64 = 0xff6c_7072_6f66_7281;
const VERSION: u64 = 10;
const HEADER_BYTES: usize = 16 * 8;
/// A data record: NameRef, FuncHash, CounterPtr, BitmapPtr,
/// FunctionPointer, Values (8 bytes each), NumCounters (4),
/// NumValueSites (2 × 2), NumBitmapBytes (4), padded to 8.
const DATA_BYTES: usize = 64;

/// Where the counters of one build's profiles are: every process of the
/// same binary writes the same layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Byte offset of the counter array in the file.
    counters_at: usize,
    /// Counters in the array.
    pub counters: usize,
    /// Each data record's counters: (first index, how many), in data order.
    pub functions: Vec<(usize, usize)>,
    /// Each data record's function (NameRef, FuncHash): copies of one
    /// function (one per codegen unit that instantiated it) share it, and
    /// llvm-profdata adds their counters up.
    pub identities: Vec<(u64, u64)>,
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

impl Layout {
    /// The layout of a profile file's bytes, checked against the file's length.
    pub fn of(bytes: &[u8], path: &Path) -> Result<Layout, CoverageError> {
        let bad = |why: String| CoverageError::Profile {
            path: path.to_path_buf(),
            why,
        };
        if bytes.len() < HEADER_BYTES {
            return Err(bad(format!("{} bytes, shorter than a header", bytes.len())));
        }
        let header: Vec<u64> = (0..16).map(|i| u64_at(bytes, i * 8)).collect();
        if header[0] != MAGIC || header[1] != VERSION {
            return Err(bad(format!(
                "not a version {VERSION} raw profile (magic {:#x}, version {})",
                header[0], header[1]
            )));
        }
        let (binary_ids, data, pad_before, counters) = (
            header[2] as usize,
            header[3] as usize,
            header[4] as usize,
            header[5] as usize,
        );
        let counters_delta = header[10] as i64;
        let data_at = HEADER_BYTES + binary_ids;
        let counters_at = data_at + data * DATA_BYTES + pad_before;
        if bytes.len() < counters_at + counters * 8 {
            return Err(bad(format!(
                "{} bytes, too short for {data} functions and {counters} counters",
                bytes.len()
            )));
        }
        let mut functions = Vec::with_capacity(data);
        let mut identities = Vec::with_capacity(data);
        for i in 0..data {
            let record = data_at + i * DATA_BYTES;
            let counter_ptr = u64_at(bytes, record + 16) as i64;
            let n = u32::from_le_bytes(bytes[record + 48..record + 52].try_into().expect("4"));
            // CounterPtr is relative to the record; CountersDelta is the
            // counters' start relative to the first record.
            let first = counter_ptr + (i * DATA_BYTES) as i64 - counters_delta;
            if first < 0 || first % 8 != 0 || first as usize / 8 + n as usize > counters {
                return Err(bad(format!(
                    "function {i}'s counters ({n} at byte {first}) lie outside the counter array"
                )));
            }
            functions.push((first as usize / 8, n as usize));
            identities.push((u64_at(bytes, record), u64_at(bytes, record + 8)));
        }
        Ok(Layout {
            counters_at,
            counters,
            functions,
            identities,
        })
    }

    /// The counters of a process's profile in continuous mode, which may
    /// have been killed before its runtime had written the file out to its
    /// size: none (or all zeros, or fewer bytes than reach the counters'
    /// end) counts as nothing counted, since the runtime maps the counters
    /// into the file only once the file holds them.
    pub fn counted(&self, bytes: &[u8], path: &Path) -> Result<Vec<u64>, CoverageError> {
        if bytes.iter().all(|&b| b == 0) || bytes.len() < self.counters_at + self.counters * 8 {
            return Ok(vec![0; self.counters]);
        }
        self.counters(bytes, path)
    }

    /// The counters of a profile with this layout.
    pub fn counters(&self, bytes: &[u8], path: &Path) -> Result<Vec<u64>, CoverageError> {
        let layout = Layout::of(bytes, path)?;
        if layout != *self {
            return Err(CoverageError::Profile {
                path: path.to_path_buf(),
                why: "written by another binary (its counters are laid out differently)".into(),
            });
        }
        Ok((0..self.counters)
            .map(|i| u64_at(bytes, self.counters_at + i * 8))
            .collect())
    }

    /// `template` (a profile with this layout) with its counters replaced.
    pub fn with_counters(&self, template: &[u8], counters: &[u64]) -> Vec<u8> {
        assert_eq!(counters.len(), self.counters, "one value per counter");
        let mut bytes = template.to_vec();
        for (i, c) in counters.iter().enumerate() {
            let at = self.counters_at + i * 8;
            bytes[at..at + 8].copy_from_slice(&c.to_le_bytes());
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile with two functions (3 and 2 counters) and no binary ids.
    fn profile(counters: &[u64; 5]) -> Vec<u8> {
        let mut header = [0u64; 16];
        header[0] = MAGIC;
        header[1] = VERSION;
        header[3] = 2; // data records
        header[5] = 5; // counters
        header[10] = (2 * DATA_BYTES) as u64; // counters start after the records
        let mut bytes: Vec<u8> = header.iter().flat_map(|h| h.to_le_bytes()).collect();
        for (i, (first, n)) in [(0u64, 3u32), (3, 2)].into_iter().enumerate() {
            let mut record = vec![0u8; DATA_BYTES];
            record[..8].copy_from_slice(&(100 + i as u64).to_le_bytes());
            let ptr = (2 * DATA_BYTES) as i64 + first as i64 * 8 - (i * DATA_BYTES) as i64;
            record[16..24].copy_from_slice(&ptr.to_le_bytes());
            record[48..52].copy_from_slice(&n.to_le_bytes());
            bytes.extend(record);
        }
        bytes.extend(counters.iter().flat_map(|c| c.to_le_bytes()));
        bytes
    }

    #[test]
    fn counters_are_found_read_and_replaced_per_function() {
        let bytes = profile(&[1, 2, 3, 4, 5]);
        let layout = Layout::of(&bytes, Path::new("p")).unwrap();
        assert_eq!(layout.functions, vec![(0, 3), (3, 2)]);
        assert_eq!(layout.identities[1].0, 101);
        assert_eq!(
            layout.counters(&bytes, Path::new("p")).unwrap(),
            [1, 2, 3, 4, 5]
        );
        let replaced = layout.with_counters(&bytes, &[9, 8, 7, 6, 5]);
        assert_eq!(
            layout.counters(&replaced, Path::new("p")).unwrap(),
            [9, 8, 7, 6, 5]
        );
    }

    #[test]
    fn a_file_that_is_not_a_version_10_profile_is_refused_by_name() {
        let mut bytes = profile(&[0; 5]);
        bytes[8] = 9;
        let e = Layout::of(&bytes, Path::new("x.profraw")).unwrap_err();
        assert!(
            e.to_string().contains("x.profraw") && e.to_string().contains("version 9"),
            "{e}"
        );
        let e = Layout::of(&profile(&[0; 5])[..200], Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("too short"), "{e}");
    }

    #[test]
    fn a_profile_cut_before_its_counters_end_counted_nothing_and_another_binarys_is_refused() {
        let full = profile(&[1, 2, 3, 4, 5]);
        let layout = Layout::of(&full, Path::new("p")).unwrap();
        let p = Path::new("p");
        assert_eq!(layout.counted(&full, p).unwrap(), [1, 2, 3, 4, 5]);
        for cut in [0, 100, full.len() - 1] {
            assert_eq!(layout.counted(&full[..cut], p).unwrap(), [0; 5], "{cut}");
        }
        assert_eq!(layout.counted(&vec![0; full.len()], p).unwrap(), [0; 5]);
        let mut other = full.clone();
        other[16 * 8 + 48] = 4; // the first function counts 4 counters, not 3
        assert!(layout.counted(&other, p).is_err());
    }
}
