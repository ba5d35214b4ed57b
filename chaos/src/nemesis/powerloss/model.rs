//! Persistence models: which un-synced items a crash may lose, tear or
//! garble, as choice points with alternatives; enumeration of every
//! combination under a cap, seeded sampling beyond it; and the plain-words
//! description of what each state loses.
//!
//! Alternative 0 of every choice point keeps what the process saw and
//! alternative 1 loses everything it covers, so the all-0 state is
//! "everything kept" and the all-1 state is the durable floor ("lose all
//! unsynced"): every model contains both.

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::sim::{Effect, Inode, MetaKind, MetaOp, Pending, PendingKind, Selection, Simulator};
use super::tree::Tree;
use super::Error;

/// A named persistence model. Each allows every state of the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    /// Everything kept, or everything not made durable lost.
    Strict,
    /// Plus: appends survive as a prefix cut at a 4096-byte boundary or
    /// between ops, overwrites are kept or dropped one by one, directory
    /// operations persist as a prefix in order (renames atomic).
    Ext4Ordered,
    /// Plus: every un-synced data op is kept, dropped, torn at a 512-byte
    /// boundary, or (when it grew the file) leaves zeros or garbage; every
    /// directory operation persists or not on its own, and a rename can
    /// be half done (both names, or neither).
    Weak,
}

impl Model {
    pub const ALL: [Model; 3] = [Model::Strict, Model::Ext4Ordered, Model::Weak];

    pub fn name(self) -> &'static str {
        match self {
            Model::Strict => "strict",
            Model::Ext4Ordered => "ext4-ordered",
            Model::Weak => "weak",
        }
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A persistence model's name that is not one: bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown persistence model {0:?} (strict, ext4-ordered, weak)")]
pub struct UnknownModel(String);

impl FromStr for Model {
    type Err = UnknownModel;
    fn from_str(s: &str) -> Result<Model, UnknownModel> {
        Model::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownModel(s.to_string()))
    }
}

/// How many states to build per crash point, and the seed for sampling
/// when there are more combinations than that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_states: usize,
    pub seed: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_states: 256,
            seed: 0,
        }
    }
}

/// One persistence assumption a crash state breaks: `{what} {how}: {why}`,
/// e.g. "the directory entry of s/events.jsonl (created by op #3) is lost:
/// directory s was not fsynced after it". A store that fails in this state
/// relied on `what` surviving.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loss {
    /// Indices of the ops involved.
    pub ops: Vec<usize>,
    pub what: String,
    pub how: String,
    pub why: String,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.what, self.how, self.why)
    }
}

/// What a crash state did with one choice point's un-synced items: the
/// items (what losing all of them would lose) and which alternative the
/// state took, for a report that shows every item, kept or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fate {
    /// The ops the choice point covers.
    pub ops: Vec<usize>,
    /// The items, in words ("write op #12 to s/events.jsonl (bytes 0..80)").
    pub what: String,
    pub kind: FateKind,
    /// What the state did with them, in words (empty when kept).
    pub how: String,
}

/// What a crash state did with a choice point's items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FateKind {
    /// Everything the process saw persisted.
    Kept,
    /// Lost (dropped writes, lost directory entries, half-done renames).
    Dropped,
    /// A write persisted only up to a boundary.
    Torn,
    /// A write that grew the file left zeros or garbage.
    Garbled,
}

impl FateKind {
    pub fn name(self) -> &'static str {
        match self {
            FateKind::Kept => "kept",
            FateKind::Dropped => "dropped",
            FateKind::Torn => "torn",
            FateKind::Garbled => "garbled",
        }
    }
}

/// One on-disk state a model allows after a crash.
#[derive(Debug, Clone)]
pub struct CrashState {
    pub model: Model,
    /// Ops applied before the crash.
    pub crash_after: usize,
    /// The alternative taken at each choice point: with the model and the
    /// crash point, rebuilds this state ([`Simulator::state`]).
    pub choice: Vec<u32>,
    /// What this state loses of what the process saw; empty: nothing.
    pub losses: Vec<Loss>,
    pub tree: Tree,
}

impl CrashState {
    /// All losses on one line each, or "keeps everything the process wrote".
    pub fn describe(&self) -> String {
        if self.losses.is_empty() {
            return "keeps everything the process wrote".into();
        }
        let lines: Vec<String> = self.losses.iter().map(Loss::to_string).collect();
        lines.join("\n")
    }

    /// Writes the state's tree into `dir` (created; must be empty).
    pub fn materialize(&self, dir: &Path) -> Result<(), Error> {
        self.tree.materialize(dir)
    }
}

/// The states a model allows at one crash point.
#[derive(Debug, Clone)]
pub struct CrashStates {
    pub model: Model,
    pub crash_after: usize,
    /// How many combinations of choices there are (saturating).
    pub combinations: u128,
    /// Every combination was built (otherwise `states` is a seeded sample
    /// that always includes the everything-kept and lose-all states).
    pub exhaustive: bool,
    /// Distinct trees only: combinations that leave the same bytes on disk
    /// appear once, with the description of the first.
    pub states: Vec<CrashState>,
}

/// A choice point: alternatives over a set of un-synced items.
#[derive(Debug)]
struct Point {
    alts: Vec<Alt>,
}

#[derive(Debug, Default, Clone)]
struct Alt {
    data: Vec<((usize, usize), Effect)>,
    lost_sides: Vec<(usize, usize)>,
    losses: Vec<Loss>,
}

impl Simulator<'_> {
    /// Every state `model` allows after the applied ops (see the module doc
    /// of [`crate::nemesis::powerloss`]), up to `limits.max_states`.
    pub fn crash_states(&self, model: Model, limits: &Limits) -> CrashStates {
        let points = self.points(model);
        let radix: Vec<u32> = points.iter().map(|p| p.alts.len() as u32).collect();
        let combinations = match model {
            Model::Strict => 1 + u128::from(!points.is_empty()),
            _ => radix
                .iter()
                .fold(1u128, |acc, &r| acc.saturating_mul(u128::from(r))),
        };
        let cap = limits.max_states.max(2);
        let exhaustive = combinations <= cap as u128;
        let zeros = vec![0u32; points.len()];
        let ones = vec![1u32; points.len()];
        let mut choices = vec![zeros.clone()];
        if !points.is_empty() {
            choices.push(ones.clone());
        }
        if model != Model::Strict && exhaustive {
            let mut c = zeros.clone();
            while increment(&mut c, &radix) {
                if c != ones {
                    choices.push(c.clone());
                }
            }
        } else if model != Model::Strict {
            let mut rng = SplitMix(
                limits.seed
                    ^ (self.applied() as u64).wrapping_mul(0xA24B_AED4_963E_E407)
                    ^ model as u64,
            );
            let mut seen: std::collections::HashSet<Vec<u32>> = choices.iter().cloned().collect();
            let mut attempts = 0;
            while choices.len() < cap && attempts < cap * 8 {
                attempts += 1;
                let c: Vec<u32> = radix
                    .iter()
                    .map(|&r| (rng.next() % u64::from(r)) as u32)
                    .collect();
                if seen.insert(c.clone()) {
                    choices.push(c);
                }
            }
        }
        let mut states: Vec<CrashState> = Vec::new();
        let mut by_hash: HashMap<u64, Vec<usize>> = HashMap::new();
        for choice in choices {
            let state = self.assemble(model, &points, choice);
            let mut h = std::collections::hash_map::DefaultHasher::new();
            state.tree.hash(&mut h);
            let same = by_hash.entry(h.finish()).or_default();
            if same.iter().all(|&i| states[i].tree != state.tree) {
                same.push(states.len());
                states.push(state);
            }
        }
        CrashStates {
            model,
            crash_after: self.applied(),
            combinations,
            exhaustive: model == Model::Strict || exhaustive,
            states,
        }
    }

    /// Rebuilds one state from its choice vector (for replaying a failure).
    pub fn state(&self, model: Model, choice: &[u32]) -> Result<CrashState, Error> {
        let points = self.points(model);
        let fits = choice.len() == points.len()
            && choice
                .iter()
                .zip(&points)
                .all(|(&c, p)| (c as usize) < p.alts.len())
            && (model != Model::Strict || choice.iter().all(|&c| c == choice[0]));
        if !fits {
            return Err(Error::BadChoice {
                model,
                crash_after: self.applied(),
                choice: choice.to_vec(),
            });
        }
        Ok(self.assemble(model, &points, choice.to_vec()))
    }

    /// What the state `choice` of `model` does with each choice point's
    /// items, in the order of the choice vector.
    pub fn fates(&self, model: Model, choice: &[u32]) -> Result<Vec<Fate>, Error> {
        // The same check as a rebuild: a choice that does not fit is refused.
        self.state(model, choice)?;
        let points = self.points(model);
        Ok(points
            .iter()
            .zip(choice)
            .map(|(p, &c)| {
                let all = &p.alts[1].losses;
                let alt = &p.alts[c as usize];
                let effects = || alt.data.iter().map(|(_, e)| e);
                let kind = if c == 0 {
                    FateKind::Kept
                } else if effects().any(|e| matches!(e, Effect::Prefix(_))) {
                    FateKind::Torn
                } else if effects().any(|e| matches!(e, Effect::Zeros | Effect::Garbage)) {
                    FateKind::Garbled
                } else {
                    FateKind::Dropped
                };
                Fate {
                    ops: all.iter().flat_map(|l| l.ops.iter().copied()).collect(),
                    what: all
                        .iter()
                        .map(|l| l.what.as_str())
                        .collect::<Vec<_>>()
                        .join("; "),
                    kind,
                    how: alt
                        .losses
                        .iter()
                        .map(Loss::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                }
            })
            .collect())
    }

    fn assemble(&self, model: Model, points: &[Point], choice: Vec<u32>) -> CrashState {
        let mut sel = Selection::default();
        let mut losses = Vec::new();
        for (p, &c) in points.iter().zip(&choice) {
            let alt = &p.alts[c as usize];
            sel.data.extend(alt.data.iter().copied());
            sel.lost_sides.extend(alt.lost_sides.iter().copied());
            losses.extend(alt.losses.iter().cloned());
        }
        losses.sort_by_key(|l| l.ops.first().copied());
        CrashState {
            model,
            crash_after: self.applied(),
            choice,
            losses,
            tree: self.build(&sel),
        }
    }

    fn points(&self, model: Model) -> Vec<Point> {
        let mut points = Vec::new();
        let named = self.maybe_named();
        for (ino, inode) in self.inodes.iter().enumerate() {
            let Inode::File(f) = inode else { continue };
            // A file no state can reach (unlinked, and the unlink durable)
            // would only multiply identical states.
            if !named.contains(&ino) {
                continue;
            }
            match model {
                Model::Strict | Model::Ext4Ordered => {
                    ordered_file_points(ino, &f.pending, &mut points)
                }
                Model::Weak => weak_file_points(ino, &f.pending, &mut points),
            }
        }
        if self.meta.is_empty() {
            return points;
        }
        match model {
            Model::Strict | Model::Ext4Ordered => {
                // Directory operations persist as a prefix, in order.
                let mut alts = vec![Alt::default(), self.meta_cut(0)];
                alts.extend((1..self.meta.len()).map(|c| self.meta_cut(c)));
                points.push(Point { alts });
            }
            Model::Weak => {
                for (m, meta) in self.meta.iter().enumerate() {
                    points.push(Point {
                        alts: weak_meta_alts(m, meta),
                    });
                }
            }
        }
        points
    }

    /// Loses every pending directory operation from the `c`-th on.
    fn meta_cut(&self, c: usize) -> Alt {
        let mut alt = Alt::default();
        for (m, meta) in self.meta.iter().enumerate().skip(c) {
            let pending: Vec<usize> = (0..meta.sides.len())
                .filter(|&s| !meta.sides[s].durable)
                .collect();
            alt.lost_sides.extend(pending.iter().map(|&s| (m, s)));
            alt.losses.push(meta_loss(meta, &pending));
        }
        alt
    }
}

/// strict / ext4-ordered: growth ops (appends, truncates) persist as a
/// prefix, the last one possibly cut at a 4096-byte boundary; overwrites
/// are kept or dropped one by one.
fn ordered_file_points(ino: usize, pending: &[Pending], points: &mut Vec<Point>) {
    let growth: Vec<usize> = (0..pending.len())
        .filter(|&i| pending[i].is_growth())
        .collect();
    if !growth.is_empty() {
        let mut alts = vec![Alt::default(), drop_from(ino, pending, &growth, 0, None)];
        for g in 0..growth.len() {
            if g > 0 {
                alts.push(drop_from(ino, pending, &growth, g, None));
            }
            let p = &pending[growth[g]];
            if let PendingKind::Write { offset, len, .. } = p.kind {
                let first = (p.size_before.max(offset) / 4096 + 1) * 4096;
                for b in (first..offset + len).step_by(4096) {
                    alts.push(drop_from(ino, pending, &growth, g, Some(b)));
                }
            }
        }
        points.push(Point { alts });
    }
    for (i, p) in pending.iter().enumerate().filter(|(_, p)| !p.is_growth()) {
        points.push(Point {
            alts: vec![Alt::default(), data_alt(ino, i, p, Effect::Drop)],
        });
    }
}

/// Drops growth ops `growth[g..]`, or with `cut_at`, keeps `growth[g]` up
/// to that file offset and drops the rest.
fn drop_from(
    ino: usize,
    pending: &[Pending],
    growth: &[usize],
    g: usize,
    cut_at: Option<u64>,
) -> Alt {
    let mut alt = Alt::default();
    let dropped = &growth[g + usize::from(cut_at.is_some())..];
    alt.data
        .extend(dropped.iter().map(|&i| ((ino, i), Effect::Drop)));
    let path = pending[growth[g]].path.display();
    if let Some(b) = cut_at {
        let p = &pending[growth[g]];
        let PendingKind::Write { offset, .. } = p.kind else {
            unreachable!("cuts are only made inside writes")
        };
        alt.data
            .push(((ino, growth[g]), Effect::Prefix(b - offset)));
        let later = if dropped.is_empty() {
            String::new()
        } else {
            format!(" and {} lost", ops_phrase(pending, dropped))
        };
        alt.losses.push(Loss {
            ops: std::iter::once(p.op)
                .chain(dropped.iter().map(|&i| pending[i].op))
                .collect(),
            what: op_phrase(p),
            how: format!("is cut at byte {b} (a 4096-byte boundary){later}"),
            why: format!("{path} was not fsynced after it"),
        });
    } else {
        let (what, verb) = match dropped {
            [one] => (op_phrase(&pending[*one]), "is"),
            _ => (ops_phrase(pending, dropped), "are"),
        };
        alt.losses.push(Loss {
            ops: dropped.iter().map(|&i| pending[i].op).collect(),
            what,
            how: format!("{verb} lost"),
            why: format!(
                "{path} was not fsynced after {}",
                if dropped.len() == 1 { "it" } else { "them" }
            ),
        });
    }
    alt
}

/// weak: each data op on its own: kept, dropped, torn at a 512-byte
/// boundary, or (when it grew the file) zeros or garbage in the grown range.
fn weak_file_points(ino: usize, pending: &[Pending], points: &mut Vec<Point>) {
    for (i, p) in pending.iter().enumerate() {
        let mut alts = vec![Alt::default(), data_alt(ino, i, p, Effect::Drop)];
        if let PendingKind::Write { offset, len, .. } = p.kind {
            let first = (offset / 512 + 1) * 512;
            for b in (first..offset + len).step_by(512) {
                alts.push(data_alt(ino, i, p, Effect::Prefix(b - offset)));
            }
            if p.is_growth() {
                alts.push(data_alt(ino, i, p, Effect::Zeros));
                alts.push(data_alt(ino, i, p, Effect::Garbage));
            }
        }
        points.push(Point { alts });
    }
}

fn data_alt(ino: usize, i: usize, p: &Pending, effect: Effect) -> Alt {
    let grown = match p.kind {
        PendingKind::Write { offset, len, .. } => {
            format!("{}..{}", p.size_before.max(offset), offset + len)
        }
        PendingKind::Truncate { .. } => String::new(),
    };
    let how = match effect {
        Effect::Drop => "is lost".to_string(),
        Effect::Prefix(n) => {
            let PendingKind::Write { offset, .. } = p.kind else {
                unreachable!("only writes are torn")
            };
            format!(
                "is torn: only bytes {offset}..{} reached the disk (a 512-byte boundary)",
                offset + n
            )
        }
        Effect::Zeros => format!("grew the file but bytes {grown} read as zeros"),
        Effect::Garbage => format!("grew the file but bytes {grown} read as garbage"),
    };
    Alt {
        data: vec![((ino, i), effect)],
        lost_sides: Vec::new(),
        losses: vec![Loss {
            ops: vec![p.op],
            what: op_phrase(p),
            how,
            why: format!("{} was not fsynced after it", p.path.display()),
        }],
    }
}

/// weak: each directory operation persists or not on its own; a rename
/// pending on two directories can also persist on just one of them.
fn weak_meta_alts(m: usize, meta: &MetaOp) -> Vec<Alt> {
    let pending: Vec<usize> = (0..meta.sides.len())
        .filter(|&s| !meta.sides[s].durable)
        .collect();
    let lose = |sides: &[usize]| Alt {
        data: Vec::new(),
        lost_sides: sides.iter().map(|&s| (m, s)).collect(),
        losses: vec![meta_loss(meta, sides)],
    };
    let mut alts = vec![Alt::default(), lose(&pending)];
    if pending.len() == 2 {
        alts.extend(pending.iter().map(|&s| lose(&[s])));
    }
    alts
}

/// Describes losing the given pending sides of a directory operation.
fn meta_loss(meta: &MetaOp, lost: &[usize]) -> Loss {
    let dirs: Vec<String> = {
        let mut d: Vec<String> = lost
            .iter()
            .map(|&s| dir_name(&meta.sides[s].dir_path))
            .collect();
        d.dedup();
        d
    };
    let why = format!(
        "{} not fsynced after it",
        match dirs.as_slice() {
            [one] => format!("{one} was"),
            _ => format!("{} were", dirs.join(" and ")),
        }
    );
    let op = meta.op;
    let (what, how) = match &meta.kind {
        MetaKind::Create { path } => (
            format!(
                "the directory entry of {} (created by op #{op})",
                path.display()
            ),
            "is lost".to_string(),
        ),
        MetaKind::Mkdir { path } => (
            format!("directory {} (made by op #{op})", path.display()),
            "is lost".to_string(),
        ),
        MetaKind::Unlink { path } | MetaKind::Rmdir { path } => (
            format!("the removal of {} by op #{op}", path.display()),
            format!("is lost ({} is still there)", path.display()),
        ),
        MetaKind::Rename { from, to, replaced } => {
            let what = format!("rename op #{op} of {} to {}", from.display(), to.display());
            // Side 0 links the new name, side 1 removes the old one.
            let link_lost = lost.contains(&0);
            let unlink_lost = lost.contains(&1);
            let how = match (link_lost, unlink_lost) {
                (true, true) => "is lost".to_string(),
                (false, true) => format!(
                    "is half done: both {} and {} name the file",
                    from.display(),
                    to.display()
                ),
                (true, false) if *replaced => format!(
                    "is half done: {} is gone and {} still holds the file it replaced",
                    from.display(),
                    to.display()
                ),
                (true, false) => format!(
                    "is half done: neither {} nor {} exists",
                    from.display(),
                    to.display()
                ),
                (false, false) => unreachable!("a loss loses at least one side"),
            };
            (what, how)
        }
    };
    Loss {
        ops: vec![op],
        what,
        how,
        why,
    }
}

fn dir_name(p: &Path) -> String {
    if p.as_os_str().is_empty() || p == Path::new(".") {
        "the root directory".into()
    } else {
        format!("directory {}", p.display())
    }
}

/// `write op #4 to s/events.jsonl (bytes 120..270)`
fn op_phrase(p: &Pending) -> String {
    match p.kind {
        PendingKind::Write { offset, len, .. } => format!(
            "write op #{} to {} (bytes {offset}..{})",
            p.op,
            p.path.display(),
            offset + len
        ),
        PendingKind::Truncate { len, .. } => {
            format!(
                "truncate op #{} of {} to {len} bytes",
                p.op,
                p.path.display()
            )
        }
    }
}

/// `ops #4, #6 on s/events.jsonl`
fn ops_phrase(pending: &[Pending], which: &[usize]) -> String {
    let ops: Vec<String> = which
        .iter()
        .map(|&i| format!("#{}", pending[i].op))
        .collect();
    format!(
        "ops {} on {}",
        ops.join(", "),
        pending[which[0]].path.display()
    )
}

/// Mixed-radix counter; false once it wraps around.
fn increment(c: &mut [u32], radix: &[u32]) -> bool {
    for (d, &r) in c.iter_mut().zip(radix) {
        *d += 1;
        if *d < r {
            return true;
        }
        *d = 0;
    }
    false
}

/// splitmix64: a small seeded generator, so a seed replays a sample.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
