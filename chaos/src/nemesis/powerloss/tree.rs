//! An in-memory directory tree: the snapshot of a root before a run, and
//! each crash state. Regular files and directories only; permissions,
//! timestamps and hard links are not kept.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Error;

/// One entry of a [`Tree`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Node {
    Dir,
    /// Contents are shared between trees that did not change the file.
    File(Arc<Vec<u8>>),
}

/// Paths relative to the tree's root, parents before children.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Tree {
    nodes: BTreeMap<PathBuf, Node>,
}

impl Tree {
    /// Reads `dir` recursively. A symlink, socket or device under it is an
    /// error naming it: the model would not know what survives of it.
    pub fn capture(dir: &Path) -> Result<Tree, Error> {
        let mut tree = Tree::default();
        capture_into(dir, Path::new(""), &mut tree)?;
        Ok(tree)
    }

    /// Writes the tree under `dir`, creating `dir` if needed; `dir` must not
    /// already hold any of the tree's paths.
    pub fn materialize(&self, dir: &Path) -> Result<(), Error> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        fs::create_dir_all(dir).map_err(io(dir))?;
        for (rel, node) in &self.nodes {
            let path = dir.join(rel);
            match node {
                Node::Dir => fs::create_dir(&path).map_err(io(&path))?,
                Node::File(data) => fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .and_then(|mut f| std::io::Write::write_all(&mut f, data))
                    .map_err(io(&path))?,
            }
        }
        Ok(())
    }

    /// Every entry, parents first.
    pub fn nodes(&self) -> &BTreeMap<PathBuf, Node> {
        &self.nodes
    }

    /// The contents of a regular file.
    pub fn file(&self, path: impl AsRef<Path>) -> Option<&[u8]> {
        match self.nodes.get(path.as_ref())? {
            Node::File(data) => Some(data),
            Node::Dir => None,
        }
    }

    pub(super) fn insert(&mut self, path: PathBuf, node: Node) {
        self.nodes.insert(path, node);
    }
}

fn capture_into(base: &Path, rel: &Path, tree: &mut Tree) -> Result<(), Error> {
    let dir = base.join(rel);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    for entry in fs::read_dir(&dir).map_err(io(&dir))? {
        let entry = entry.map_err(io(&dir))?;
        let path = entry.path();
        let rel = rel.join(entry.file_name());
        let kind = entry.file_type().map_err(io(&path))?;
        if kind.is_dir() {
            tree.insert(rel.clone(), Node::Dir);
            capture_into(base, &rel, tree)?;
        } else if kind.is_file() {
            let data = fs::read(&path).map_err(io(&path))?;
            tree.insert(rel, Node::File(Arc::new(data)));
        } else {
            let kind = if kind.is_symlink() {
                "a symlink"
            } else {
                "a special file"
            };
            return Err(Error::Unsupported { path, kind });
        }
    }
    Ok(())
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Dir => f.write_str("Dir"),
            Node::File(data) => write!(f, "File({} bytes)", data.len()),
        }
    }
}

impl fmt::Debug for Tree {
    /// One line per entry: `a/b.txt: 12 bytes "hello…"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Tree {{")?;
        for (path, node) in &self.nodes {
            match node {
                Node::Dir => writeln!(f, "  {}/", path.display())?,
                Node::File(data) => writeln!(
                    f,
                    "  {}: {} bytes {:?}",
                    path.display(),
                    data.len(),
                    String::from_utf8_lossy(&data[..data.len().min(120)])
                )?,
            }
        }
        write!(f, "}}")
    }
}
