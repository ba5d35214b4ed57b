//! Replays an op log on an inode-level model of the file system that keeps,
//! besides what the process saw, what an fsync made durable: per file the
//! data ops since its last fsync/fdatasync (with undo bytes, so the durable
//! contents are recomputed instead of copied at every sync), per directory
//! the entries at its last fsync, and the directory operations not yet made
//! durable on every directory they touch.
//!
//! Never decides which losses a model allows (that is `model.rs`); it only
//! builds a tree from a given [`Selection`] of losses.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::oplog::{Op, OpLog};
use super::tree::{Node, Tree};
use super::Error;

pub(super) type Ino = usize;
const ROOT: Ino = 0;

#[derive(Debug, Clone)]
pub(super) enum Inode {
    File(FileNode),
    Dir(DirNode),
}

#[derive(Debug, Clone)]
pub(super) struct FileNode {
    /// What the process sees.
    data: Arc<Vec<u8>>,
    /// Data ops since the last fsync/fdatasync of this file, in order.
    pub pending: Vec<Pending>,
}

/// An un-synced data op on a file.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    /// Index of the op in the log.
    pub op: usize,
    /// The path the op used.
    pub path: PathBuf,
    /// The file's size just before the op.
    pub size_before: u64,
    pub kind: PendingKind,
}

#[derive(Debug, Clone)]
pub(super) enum PendingKind {
    /// `undo`: the bytes the write replaced (within `size_before`).
    Write {
        offset: u64,
        len: u64,
        undo: Vec<u8>,
    },
    /// `undo`: the bytes a shrinking truncate cut off.
    Truncate { len: u64, undo: Vec<u8> },
}

impl Pending {
    /// The op makes the file longer or changes its size.
    pub fn is_growth(&self) -> bool {
        match self.kind {
            PendingKind::Write { offset, len, .. } => offset + len > self.size_before,
            PendingKind::Truncate { .. } => true,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct DirNode {
    entries: BTreeMap<OsString, Ino>,
    /// The entries as of the last fsync of this directory.
    floor: BTreeMap<OsString, Ino>,
}

/// A directory operation not yet durable on every directory it touches.
#[derive(Debug, Clone)]
pub(super) struct MetaOp {
    pub op: usize,
    pub kind: MetaKind,
    /// One side per directory entry changed; a rename has two (link first).
    pub sides: Vec<Side>,
}

#[derive(Debug, Clone)]
pub(super) enum MetaKind {
    Create {
        path: PathBuf,
    },
    Mkdir {
        path: PathBuf,
    },
    Unlink {
        path: PathBuf,
    },
    Rmdir {
        path: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
        replaced: bool,
    },
}

#[derive(Debug, Clone)]
pub(super) struct Side {
    dir: Ino,
    /// The directory's path when the op ran (for descriptions).
    pub dir_path: PathBuf,
    name: OsString,
    change: Change,
    pub durable: bool,
}

#[derive(Debug, Clone, Copy)]
enum Change {
    Link(Ino),
    Unlink,
}

/// What one crash state does to each un-synced item; anything not listed
/// is kept as the process saw it.
#[derive(Debug, Clone, Default)]
pub(super) struct Selection {
    /// (file inode, index in its pending list) -> effect.
    pub data: HashMap<(Ino, usize), Effect>,
    /// (index in the pending meta list, side index) that did not persist.
    pub lost_sides: HashSet<(usize, usize)>,
}

/// What became of an un-synced data op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Effect {
    Drop,
    /// Only the first n bytes of the write persisted.
    Prefix(u64),
    /// The range the write added to the file reads as zeros.
    Zeros,
    /// The range the write added to the file reads as garbage.
    Garbage,
}

/// Why an op does not fit the simulated tree (a write to a missing file,
/// a rename over a non-empty directory): [`Error::Inconsistent`]'s problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct Misfit(String);

/// The file system after the first [`Simulator::applied`] ops of a log.
#[derive(Debug)]
pub struct Simulator<'a> {
    pub(super) log: &'a OpLog,
    applied: usize,
    pub(super) inodes: Vec<Inode>,
    pub(super) meta: Vec<MetaOp>,
}

impl<'a> Simulator<'a> {
    /// Starts from the snapshot of the root taken before the run; everything
    /// in it counts as durable.
    pub fn new(initial: &Tree, log: &'a OpLog) -> Simulator<'a> {
        let mut sim = Simulator {
            log,
            applied: 0,
            inodes: vec![Inode::Dir(DirNode::default())],
            meta: Vec::new(),
        };
        // Parents come before children in a tree, so lookups succeed.
        for (path, node) in initial.nodes() {
            let (dir, name) = sim
                .parent_and_name(path)
                .expect("a captured tree lists parents first");
            let inode = match node {
                Node::Dir => Inode::Dir(DirNode::default()),
                Node::File(data) => Inode::File(FileNode {
                    data: data.clone(),
                    pending: Vec::new(),
                }),
            };
            let ino = sim.inodes.len();
            sim.inodes.push(inode);
            let d = sim.dir_mut(dir);
            d.entries.insert(name.clone(), ino);
            d.floor.insert(name, ino);
        }
        sim
    }

    /// How many ops have been applied: the crash point.
    pub fn applied(&self) -> usize {
        self.applied
    }

    /// Applies ops until `applied() == k`. An op that does not fit the state
    /// (a write to a missing file, …) is an error naming it.
    pub fn advance_to(&mut self, k: usize) -> Result<(), Error> {
        if k > self.log.ops.len() {
            return Err(Error::CrashPoint {
                k,
                ops: self.log.ops.len(),
            });
        }
        if k < self.applied {
            return Err(Error::Backwards {
                k,
                applied: self.applied,
            });
        }
        while self.applied < k {
            let i = self.applied;
            let op = &self.log.ops[i].op;
            self.apply(i, op).map_err(|problem| Error::Inconsistent {
                op: i,
                text: op.to_string(),
                problem: problem.to_string(),
            })?;
            self.applied += 1;
        }
        Ok(())
    }

    /// Inodes some crash state may give a name: those in a directory's
    /// durable entries or linked by a pending directory operation.
    pub(super) fn maybe_named(&self) -> HashSet<Ino> {
        let mut named: HashSet<Ino> = self
            .inodes
            .iter()
            .filter_map(|i| match i {
                Inode::Dir(d) => Some(d.floor.values().copied()),
                Inode::File(_) => None,
            })
            .flatten()
            .collect();
        for side in self.meta.iter().flat_map(|m| &m.sides) {
            if let (Change::Link(ino), false) = (side.change, side.durable) {
                named.insert(ino);
            }
        }
        named
    }

    /// What the process saw after the applied ops (every write kept).
    pub fn volatile_tree(&self) -> Tree {
        self.build(&Selection::default())
    }

    fn apply(&mut self, i: usize, op: &Op) -> Result<(), Misfit> {
        match op {
            Op::Create { path } | Op::Mkdir { path } => {
                let (dir, name) = self.parent_and_name(path)?;
                if self.dir(dir).entries.contains_key(&name) {
                    return Err(Misfit(format!("{} already exists", path.display())));
                }
                let (inode, kind) = match op {
                    Op::Create { .. } => (
                        Inode::File(FileNode {
                            data: Arc::default(),
                            pending: Vec::new(),
                        }),
                        MetaKind::Create { path: path.clone() },
                    ),
                    _ => (
                        Inode::Dir(DirNode::default()),
                        MetaKind::Mkdir { path: path.clone() },
                    ),
                };
                let ino = self.inodes.len();
                self.inodes.push(inode);
                self.dir_mut(dir).entries.insert(name.clone(), ino);
                let side = self.side(dir, path, name, Change::Link(ino));
                self.meta.push(MetaOp {
                    op: i,
                    kind,
                    sides: vec![side],
                });
            }
            Op::Write { path, offset, data } => {
                let file = self.file_mut(path)?;
                let size_before = file.data.len() as u64;
                let end = offset + data.0.len() as u64;
                let undo = slice(&file.data, *offset, end).to_vec();
                write_at(Arc::make_mut(&mut file.data), *offset, &data.0);
                file.pending.push(Pending {
                    op: i,
                    path: path.clone(),
                    size_before,
                    kind: PendingKind::Write {
                        offset: *offset,
                        len: data.0.len() as u64,
                        undo,
                    },
                });
            }
            Op::Truncate { path, len } => {
                let file = self.file_mut(path)?;
                let size_before = file.data.len() as u64;
                let undo = slice(&file.data, *len, size_before).to_vec();
                Arc::make_mut(&mut file.data).resize(*len as usize, 0);
                file.pending.push(Pending {
                    op: i,
                    path: path.clone(),
                    size_before,
                    kind: PendingKind::Truncate { len: *len, undo },
                });
            }
            Op::Fsync { path } | Op::Fdatasync { path } => {
                let ino = self
                    .lookup(path)?
                    .ok_or_else(|| Misfit(format!("{} does not exist", path.display())))?;
                match &mut self.inodes[ino] {
                    Inode::File(f) => f.pending.clear(),
                    Inode::Dir(d) => {
                        d.floor = d.entries.clone();
                        for m in &mut self.meta {
                            for s in m.sides.iter_mut().filter(|s| s.dir == ino) {
                                s.durable = true;
                            }
                        }
                        self.meta.retain(|m| m.sides.iter().any(|s| !s.durable));
                    }
                }
            }
            Op::SyncAll => {
                for inode in &mut self.inodes {
                    match inode {
                        Inode::File(f) => f.pending.clear(),
                        Inode::Dir(d) => d.floor = d.entries.clone(),
                    }
                }
                self.meta.clear();
            }
            Op::Rename { from, to } => {
                let (fdir, fname) = self.parent_and_name(from)?;
                let ino = *self
                    .dir(fdir)
                    .entries
                    .get(&fname)
                    .ok_or_else(|| Misfit(format!("{} does not exist", from.display())))?;
                let (tdir, tname) = self.parent_and_name(to)?;
                let replaced = self.dir(tdir).entries.get(&tname).copied();
                if replaced == Some(ino) {
                    return Ok(()); // same file: rename(2) does nothing
                }
                self.dir_mut(fdir).entries.remove(&fname);
                self.dir_mut(tdir).entries.insert(tname.clone(), ino);
                let sides = vec![
                    self.side(tdir, to, tname, Change::Link(ino)),
                    self.side(fdir, from, fname, Change::Unlink),
                ];
                self.meta.push(MetaOp {
                    op: i,
                    kind: MetaKind::Rename {
                        from: from.clone(),
                        to: to.clone(),
                        replaced: replaced.is_some(),
                    },
                    sides,
                });
            }
            Op::Unlink { path } | Op::Rmdir { path } => {
                let (dir, name) = self.parent_and_name(path)?;
                let ino = *self
                    .dir(dir)
                    .entries
                    .get(&name)
                    .ok_or_else(|| Misfit(format!("{} does not exist", path.display())))?;
                let kind = match (op, &self.inodes[ino]) {
                    (Op::Unlink { .. }, Inode::File(_)) => MetaKind::Unlink { path: path.clone() },
                    (Op::Rmdir { .. }, Inode::Dir(d)) if d.entries.is_empty() => {
                        MetaKind::Rmdir { path: path.clone() }
                    }
                    (Op::Rmdir { .. }, Inode::Dir(_)) => {
                        return Err(Misfit(format!("directory {} is not empty", path.display())))
                    }
                    _ => {
                        return Err(Misfit(format!(
                            "{} has the wrong file type",
                            path.display()
                        )))
                    }
                };
                self.dir_mut(dir).entries.remove(&name);
                let side = self.side(dir, path, name, Change::Unlink);
                self.meta.push(MetaOp {
                    op: i,
                    kind,
                    sides: vec![side],
                });
            }
        }
        Ok(())
    }

    fn side(&self, dir: Ino, path: &Path, name: OsString, change: Change) -> Side {
        Side {
            dir,
            dir_path: path.parent().unwrap_or(Path::new("")).to_path_buf(),
            name,
            change,
            durable: false,
        }
    }

    /// The tree a crash state leaves: durable floor plus the un-synced
    /// items the selection keeps.
    pub(super) fn build(&self, sel: &Selection) -> Tree {
        let mut dirs: HashMap<Ino, BTreeMap<OsString, Ino>> = HashMap::new();
        for (m, meta) in self.meta.iter().enumerate() {
            for (s, side) in meta.sides.iter().enumerate() {
                if side.durable || sel.lost_sides.contains(&(m, s)) {
                    continue;
                }
                let entries = dirs
                    .entry(side.dir)
                    .or_insert_with(|| self.dir(side.dir).floor.clone());
                match side.change {
                    Change::Link(ino) => {
                        entries.insert(side.name.clone(), ino);
                    }
                    Change::Unlink => {
                        entries.remove(&side.name);
                    }
                }
            }
        }
        let mut tree = Tree::default();
        let mut stack = vec![ROOT];
        self.walk(ROOT, Path::new(""), &dirs, sel, &mut stack, &mut tree);
        tree
    }

    fn walk(
        &self,
        dir: Ino,
        path: &Path,
        dirs: &HashMap<Ino, BTreeMap<OsString, Ino>>,
        sel: &Selection,
        stack: &mut Vec<Ino>,
        tree: &mut Tree,
    ) {
        let entries = dirs.get(&dir).unwrap_or(&self.dir(dir).floor);
        for (name, &ino) in entries {
            let p = path.join(name);
            match &self.inodes[ino] {
                Inode::File(f) => tree.insert(p, Node::File(self.contents(ino, f, sel))),
                // A directory that would contain itself (possible only by
                // mixing directory fsyncs of different moments) is cut.
                Inode::Dir(_) if stack.contains(&ino) => {}
                Inode::Dir(_) => {
                    tree.insert(p.clone(), Node::Dir);
                    stack.push(ino);
                    self.walk(ino, &p, dirs, sel, stack, tree);
                    stack.pop();
                }
            }
        }
    }

    /// A file's contents in a crash state: its durable contents, then its
    /// pending ops with their selected effects.
    fn contents(&self, ino: Ino, f: &FileNode, sel: &Selection) -> Arc<Vec<u8>> {
        let effects: Vec<Option<Effect>> = (0..f.pending.len())
            .map(|i| sel.data.get(&(ino, i)).copied())
            .collect();
        if effects.iter().all(Option::is_none) {
            return f.data.clone();
        }
        let mut d = (*f.data).clone();
        for p in f.pending.iter().rev() {
            match &p.kind {
                PendingKind::Write { offset, undo, .. } => {
                    write_at(&mut d, *offset, undo);
                    d.truncate(p.size_before as usize);
                }
                PendingKind::Truncate { undo, .. } => {
                    d.resize(p.size_before as usize - undo.len(), 0);
                    d.extend_from_slice(undo);
                }
            }
        }
        for (p, effect) in f.pending.iter().zip(effects) {
            match (&p.kind, effect) {
                (_, Some(Effect::Drop)) => {}
                (PendingKind::Truncate { len, .. }, _) => d.resize(*len as usize, 0),
                (PendingKind::Write { offset, .. }, None) => {
                    write_at(&mut d, *offset, self.written(p.op))
                }
                (PendingKind::Write { offset, .. }, Some(Effect::Prefix(n))) => {
                    write_at(&mut d, *offset, &self.written(p.op)[..n as usize])
                }
                (PendingKind::Write { offset, len, .. }, Some(fill)) => {
                    let data = self.written(p.op);
                    let grown = p.size_before.max(*offset);
                    write_at(&mut d, *offset, &data[..(grown - offset) as usize]);
                    let n = (offset + len - grown) as usize;
                    let filler = match fill {
                        Effect::Garbage => garbage(p.op, n),
                        _ => vec![0; n],
                    };
                    write_at(&mut d, grown, &filler);
                }
            }
        }
        Arc::new(d)
    }

    fn written(&self, op: usize) -> &[u8] {
        match &self.log.ops[op].op {
            Op::Write { data, .. } => &data.0,
            _ => unreachable!("pending writes index write ops"),
        }
    }

    fn dir(&self, ino: Ino) -> &DirNode {
        match &self.inodes[ino] {
            Inode::Dir(d) => d,
            Inode::File(_) => unreachable!("directory inodes are only ever directories"),
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> &mut DirNode {
        match &mut self.inodes[ino] {
            Inode::Dir(d) => d,
            Inode::File(_) => unreachable!("directory inodes are only ever directories"),
        }
    }

    fn file_mut(&mut self, path: &Path) -> Result<&mut FileNode, Misfit> {
        let ino = self
            .lookup(path)?
            .ok_or_else(|| Misfit(format!("{} does not exist", path.display())))?;
        match &mut self.inodes[ino] {
            Inode::File(f) => Ok(f),
            Inode::Dir(_) => Err(Misfit(format!("{} is a directory", path.display()))),
        }
    }

    /// The inode at a relative path, as the process sees it.
    fn lookup(&self, path: &Path) -> Result<Option<Ino>, Misfit> {
        let mut ino = ROOT;
        for name in components(path)? {
            let Inode::Dir(d) = &self.inodes[ino] else {
                return Ok(None);
            };
            match d.entries.get(name) {
                Some(&next) => ino = next,
                None => return Ok(None),
            }
        }
        Ok(Some(ino))
    }

    /// The existing parent directory of a path and the path's last name.
    fn parent_and_name(&self, path: &Path) -> Result<(Ino, OsString), Misfit> {
        let names = components(path)?;
        let Some((name, parents)) = names.split_last() else {
            return Err(Misfit(
                "the root itself cannot be created, renamed or removed".into(),
            ));
        };
        let parent: PathBuf = parents.iter().collect();
        match self.lookup(&parent)? {
            Some(ino) if matches!(self.inodes[ino], Inode::Dir(_)) => {
                Ok((ino, name.to_os_string()))
            }
            _ => Err(Misfit(format!(
                "the parent directory of {} does not exist",
                path.display()
            ))),
        }
    }
}

/// The names of a relative path; `.` and empty mean the root.
fn components(path: &Path) -> Result<Vec<&std::ffi::OsStr>, Misfit> {
    path.components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(Misfit(format!(
                "{} is not a plain path relative to the root",
                path.display()
            ))),
        })
        .collect()
}

/// The bytes of `data` in `[from, to)`, clipped to its length.
fn slice(data: &[u8], from: u64, to: u64) -> &[u8] {
    let len = data.len() as u64;
    &data[from.min(len) as usize..to.min(len) as usize]
}

/// pwrite semantics: a write past the end fills the gap with zeros.
fn write_at(d: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let (offset, end) = (offset as usize, offset as usize + bytes.len());
    if d.len() < end {
        d.resize(end, 0);
    }
    d[offset..end].copy_from_slice(bytes);
}

/// Deterministic non-zero filler for the garbage variants.
fn garbage(op: usize, n: usize) -> Vec<u8> {
    let mut x = (op as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as u8) | 0x80
        })
        .collect()
}
