//! The ways to make a write durable, measured raw (no store involved).
//!
//! Linux-only: the flags are Linux's `O_DSYNC`, `O_DIRECT` and
//! `pwritev2`'s `RWF_DSYNC`. A
//! [`RawWriter`] owns one scratch file and performs one operation per
//! [`RawWriter::op`] call: a write followed by whatever the method needs to
//! make it durable. Its fdatasync variant with appends is the floor the store
//! is compared against. It must only ever touch its own scratch file.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use serde::Serialize;

/// Alignment used for `O_DIRECT` buffers, offsets and lengths. 4 KiB covers
/// both 512 B and 4 KiB logical block sizes.
pub const DIRECT_ALIGN: usize = 4096;

/// Size of the pre-written file that fixed-size writes cycle through (small:
/// writing it costs the disk bandwidth that a rate-limited cloud volume then
/// lacks for the next measurement).
pub const OVERWRITE_SPAN: u64 = 4 * 1024 * 1024;

/// How a write is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncMethod {
    /// `pwrite` then `fdatasync` (what the store does).
    Fdatasync,
    /// `pwrite` then `fsync` (also flushes metadata such as mtime).
    Fsync,
    /// `pwrite` on a file opened with `O_DSYNC`.
    ODsync,
    /// `pwrite` of aligned blocks on a file opened with `O_DIRECT|O_DSYNC`.
    ODirectODsync,
    /// `pwritev2` with `RWF_DSYNC`: `O_DSYNC` for this one write.
    RwfDsync,
    /// `pwrite` only: the page cache, not the disk. A reference point, never durable.
    NoSync,
}

impl SyncMethod {
    /// Every method, in report order (no-sync last, so that its dirty pages
    /// are flushed before anything else is measured).
    pub const ALL: [SyncMethod; 6] = [
        SyncMethod::Fdatasync,
        SyncMethod::Fsync,
        SyncMethod::ODsync,
        SyncMethod::ODirectODsync,
        SyncMethod::RwfDsync,
        SyncMethod::NoSync,
    ];

    /// The name a report prints.
    pub fn label(self) -> &'static str {
        match self {
            SyncMethod::Fdatasync => "write+fdatasync",
            SyncMethod::Fsync => "write+fsync",
            SyncMethod::ODsync => "O_DSYNC write",
            SyncMethod::ODirectODsync => "O_DIRECT|O_DSYNC write",
            SyncMethod::RwfDsync => "pwritev2 RWF_DSYNC",
            SyncMethod::NoSync => "write, no sync",
        }
    }

    fn open_flags(self) -> i32 {
        match self {
            SyncMethod::ODsync => OFlag::O_DSYNC.bits(),
            SyncMethod::ODirectODsync => (OFlag::O_DIRECT | OFlag::O_DSYNC).bits(),
            _ => 0,
        }
    }
}

/// What is written per operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    /// `len` bytes appended at the end of a growing file, like a log. With
    /// `O_DIRECT` the aligned block(s) holding the new bytes are rewritten.
    Append { len: usize },
    /// `len` bytes (a multiple of 4 KiB) at aligned offsets cycling through a
    /// pre-written 4 MiB file, like pg_test_fsync's 8 KiB WAL writes.
    Overwrite { len: usize },
    /// `len` bytes written back to back, like appends, into a pre-zeroed
    /// 4 MiB file (made by [`prewrite`]; wrapping to its start when full):
    /// what appending into pre-allocated log space costs.
    PreZeroed { len: usize },
}

impl Workload {
    /// The name a report prints.
    pub fn label(self) -> String {
        match self {
            Workload::Append { len } => format!("{} appends (file grows)", human_bytes(len)),
            Workload::Overwrite { len } => {
                format!("{} writes (pre-written 4 MiB file)", human_bytes(len))
            }
            Workload::PreZeroed { len } => {
                format!("{} appends (pre-zeroed 4 MiB file)", human_bytes(len))
            }
        }
    }
}

/// `200 B`, `8 KiB`, `64 KiB`.
pub fn human_bytes(n: usize) -> String {
    if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} B")
    }
}

/// Why a method cannot be measured here.
#[derive(Debug)]
pub enum OpenError {
    /// The file system refuses the method (e.g. `O_DIRECT` on tmpfs).
    Unsupported(String),
    /// Anything else: a real failure.
    Io(PathBuf, &'static str, io::Error),
}

/// A heap buffer whose usable part starts at an aligned address (no unsafe:
/// the alignment is found inside an over-allocated `Vec`).
#[derive(Debug)]
struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn zeroed(len: usize) -> AlignedBuf {
        let raw = vec![0u8; len + DIRECT_ALIGN];
        let addr = raw.as_ptr() as usize;
        let start = (DIRECT_ALIGN - addr % DIRECT_ALIGN) % DIRECT_ALIGN;
        AlignedBuf { raw, start, len }
    }
    fn as_slice(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

/// One scratch file written with one method and one workload.
#[derive(Debug)]
pub struct RawWriter {
    path: PathBuf,
    file: File,
    method: SyncMethod,
    workload: Workload,
    /// Append: the logical end of the data. Overwrite: the next offset.
    pos: u64,
    /// Append without O_DIRECT: the bytes to append.
    data: Vec<u8>,
    /// O_DIRECT append: the tail block(s) as they are on disk, plus the new bytes.
    /// Overwrite: the block written each time.
    block: AlignedBuf,
}

impl RawWriter {
    /// Opens a scratch file for `method` and `workload`. Appends create
    /// `path` (which must not exist) and write `data` each time; overwrites
    /// need `path` made by [`prewrite`] and write a fixed pattern.
    pub fn create(
        path: &Path,
        method: SyncMethod,
        workload: Workload,
        data: &[u8],
    ) -> Result<RawWriter, OpenError> {
        let io_err = |op| move |e| OpenError::Io(path.to_path_buf(), op, e);
        if let Workload::Overwrite { len } = workload {
            if len == 0 || len % DIRECT_ALIGN != 0 || len as u64 > OVERWRITE_SPAN {
                return Err(OpenError::Io(
                    path.to_path_buf(),
                    "overwrite length",
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "must be a positive multiple of {DIRECT_ALIGN} up to {OVERWRITE_SPAN}"
                        ),
                    ),
                ));
            }
        }
        if let Workload::PreZeroed { len } = workload {
            if method == SyncMethod::ODirectODsync || len == 0 || len as u64 > OVERWRITE_SPAN {
                return Err(OpenError::Unsupported(format!(
                    "{} of {len} B into a pre-zeroed file is not measured",
                    method.label()
                )));
            }
        }
        let file = match OpenOptions::new()
            .write(true)
            .create_new(matches!(workload, Workload::Append { .. }))
            .custom_flags(method.open_flags())
            .open(path)
        {
            Ok(f) => f,
            Err(e) if method == SyncMethod::ODirectODsync && is_refusal(&e) => {
                return Err(OpenError::Unsupported(format!(
                    "the file system refuses O_DIRECT ({e})"
                )));
            }
            Err(e) => return Err(io_err("open")(e)),
        };
        let block_len = match workload {
            Workload::Append { len } => {
                // New bytes may straddle a block boundary: room for two blocks.
                len.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN + DIRECT_ALIGN
            }
            Workload::Overwrite { len } => len,
            Workload::PreZeroed { .. } => 0,
        };
        let mut block = AlignedBuf::zeroed(block_len);
        if let Workload::Overwrite { .. } = workload {
            for (i, b) in block.as_mut_slice().iter_mut().enumerate() {
                *b = b'a' + (i % 26) as u8;
            }
        }
        Ok(RawWriter {
            path: path.to_path_buf(),
            file,
            method,
            workload,
            pos: 0,
            data: data.to_vec(),
            block,
        })
    }

    /// The scratch file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `fdatasync` of the scratch file: what a [`SyncMethod::NoSync`] writer
    /// syncs when its caller decides (the group commit ceilings).
    pub fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// One write, made durable as the method says.
    pub fn op(&mut self) -> io::Result<()> {
        match self.workload {
            Workload::Append { .. } if self.method == SyncMethod::ODirectODsync => {
                self.direct_append()?
            }
            Workload::Append { .. } => {
                write_at(&self.file, self.method, &self.data, self.pos)?;
                self.pos += self.data.len() as u64;
            }
            Workload::Overwrite { len } => {
                write_at(&self.file, self.method, self.block.as_slice(), self.pos)?;
                self.pos = (self.pos + len as u64) % OVERWRITE_SPAN;
            }
            Workload::PreZeroed { len } => {
                if self.pos + len as u64 > OVERWRITE_SPAN {
                    self.pos = 0;
                }
                write_at(&self.file, self.method, &self.data, self.pos)?;
                self.pos += len as u64;
            }
        }
        match self.method {
            SyncMethod::Fdatasync => self.file.sync_data(),
            SyncMethod::Fsync => self.file.sync_all(),
            SyncMethod::ODsync
            | SyncMethod::ODirectODsync
            | SyncMethod::RwfDsync
            | SyncMethod::NoSync => Ok(()),
        }
    }

    /// Appends `data` with O_DIRECT: rewrite the aligned block(s) that hold
    /// the new bytes (the file grows by whole blocks, zero-padded).
    fn direct_append(&mut self) -> io::Result<()> {
        let block_start = self.pos - self.pos % DIRECT_ALIGN as u64;
        let in_block = (self.pos - block_start) as usize;
        let end = in_block + self.data.len();
        let buf = self.block.as_mut_slice();
        buf[in_block..end].copy_from_slice(&self.data);
        let write_len = end.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        self.file
            .write_all_at(&self.block.as_slice()[..write_len], block_start)?;
        self.pos += self.data.len() as u64;
        // Keep the partially filled last block at the front for the next append.
        let full_blocks = end / DIRECT_ALIGN;
        if full_blocks > 0 {
            let buf = self.block.as_mut_slice();
            buf.copy_within(full_blocks * DIRECT_ALIGN..write_len, 0);
            buf[write_len - full_blocks * DIRECT_ALIGN..].fill(0);
        }
        Ok(())
    }
}

/// Writes all of `buf` at `offset`: with `pwritev2(RWF_DSYNC)` for that
/// method (each call durable on return), else with `pwrite`.
fn write_at(file: &File, method: SyncMethod, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    if method != SyncMethod::RwfDsync {
        return file.write_all_at(buf, offset);
    }
    while !buf.is_empty() {
        let n = rustix::io::pwritev2(
            file,
            &[io::IoSlice::new(buf)],
            offset,
            rustix::io::ReadWriteFlags::DSYNC,
        )?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
        offset += n as u64;
    }
    Ok(())
}

/// Creates `path` with [`OVERWRITE_SPAN`] bytes written and made durable,
/// for overwrite workloads. Written, not fallocated: unwritten extents would
/// turn every first write into a metadata update.
pub fn prewrite(path: &Path) -> io::Result<()> {
    let f = OpenOptions::new().write(true).create_new(true).open(path)?;
    let chunk = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < OVERWRITE_SPAN {
        f.write_all_at(&chunk, off)?;
        off += chunk.len() as u64;
    }
    f.sync_all()
}

/// EINVAL (and EOPNOTSUPP) is how Linux file systems refuse O_DIRECT at open.
fn is_refusal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == nix::libc::EINVAL || code == nix::libc::EOPNOTSUPP
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        // On the real disk: tmpfs refuses O_DIRECT.
        tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap()
    }

    #[test]
    fn appends_land_back_to_back_for_every_method() {
        let d = dir();
        for (i, method) in SyncMethod::ALL.into_iter().enumerate() {
            let path = d.path().join(format!("m{i}"));
            let data: Vec<u8> = (0..200u32).map(|i| b'A' + (i % 26) as u8).collect();
            let mut w =
                match RawWriter::create(&path, method, Workload::Append { len: data.len() }, &data)
                {
                    Ok(w) => w,
                    Err(OpenError::Unsupported(_)) => continue,
                    Err(OpenError::Io(p, op, e)) => panic!("{op} {}: {e}", p.display()),
                };
            // 25 appends of 200 B cross a 4 KiB boundary (at 4096 and 8192... bytes).
            for _ in 0..25 {
                w.op().unwrap();
            }
            let got = std::fs::read(&path).unwrap();
            let expect = data.repeat(25);
            assert_eq!(&got[..expect.len()], &expect[..], "{method:?}");
            // O_DIRECT pads the last block with zeros; nothing else may follow.
            // (RWF_DSYNC writes the same bytes as a pwrite.)
            assert!(got[expect.len()..].iter().all(|&b| b == 0), "{method:?}");
            if method != SyncMethod::ODirectODsync {
                assert_eq!(got.len(), expect.len(), "{method:?}");
            }
        }
    }

    #[test]
    fn overwrites_cycle_inside_the_pre_written_file() {
        let d = dir();
        let path = d.path().join("ow");
        prewrite(&path).unwrap();
        let mut w = RawWriter::create(
            &path,
            SyncMethod::NoSync,
            Workload::Overwrite { len: 8192 },
            &[],
        )
        .unwrap();
        for _ in 0..(OVERWRITE_SPAN / 8192 + 3) {
            w.op().unwrap();
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), OVERWRITE_SPAN);
        let got = std::fs::read(&path).unwrap();
        assert_eq!(&got[..3], b"abc");
    }

    #[test]
    fn pre_zeroed_appends_land_back_to_back_and_wrap_inside_the_file() {
        let d = dir();
        for method in [
            SyncMethod::Fdatasync,
            SyncMethod::ODsync,
            SyncMethod::RwfDsync,
        ] {
            let path = d.path().join(format!("{method:?}"));
            prewrite(&path).unwrap();
            let data = vec![b'x'; 1000];
            let mut w =
                RawWriter::create(&path, method, Workload::PreZeroed { len: 1000 }, &data).unwrap();
            let fit = OVERWRITE_SPAN / 1000;
            for _ in 0..fit + 2 {
                w.op().unwrap();
            }
            let got = std::fs::read(&path).unwrap();
            assert_eq!(got.len() as u64, OVERWRITE_SPAN, "{method:?}");
            let written = (fit * 1000) as usize;
            assert!(got[..written].iter().all(|&b| b == b'x'), "{method:?}");
            assert!(got[written..].iter().all(|&b| b == 0), "{method:?}");
        }
    }

    #[test]
    fn unaligned_overwrite_length_is_refused() {
        let d = dir();
        let err = RawWriter::create(
            &d.path().join("x"),
            SyncMethod::Fdatasync,
            Workload::Overwrite { len: 1000 },
            &[],
        );
        assert!(matches!(err, Err(OpenError::Io(_, "overwrite length", _))));
    }

    #[test]
    fn tmpfs_refusal_of_o_direct_is_unsupported_not_an_error() {
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            return;
        }
        let d = tempfile::tempdir_in(shm).unwrap();
        prewrite(&d.path().join("x")).unwrap();
        let r = RawWriter::create(
            &d.path().join("x"),
            SyncMethod::ODirectODsync,
            Workload::Overwrite { len: 8192 },
            &[],
        );
        match r {
            Err(OpenError::Unsupported(why)) => assert!(why.contains("O_DIRECT"), "{why}"),
            // Newer kernels let tmpfs accept O_DIRECT; then it must simply work.
            Ok(mut w) => w.op().unwrap(),
            Err(OpenError::Io(p, op, e)) => panic!("{op} {}: {e}", p.display()),
        }
    }

    #[test]
    fn labels_name_sizes_humanly() {
        assert_eq!(human_bytes(200), "200 B");
        assert_eq!(human_bytes(8192), "8 KiB");
        assert_eq!(
            Workload::Append { len: 200 }.label(),
            "200 B appends (file grows)"
        );
    }
}
