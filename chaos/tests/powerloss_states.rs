//! Crash states on hand-made op logs: what each model allows, described.

use std::fmt::Write as _;
use std::path::PathBuf;

use agentchaos::nemesis::powerloss::{
    Bytes, CrashStates, Limits, Model, Node, Op, OpLog, Simulator, Tree,
};

fn write(path: &str, offset: u64, data: &[u8]) -> Op {
    Op::Write {
        path: path.into(),
        offset,
        data: Bytes(data.to_vec()),
    }
}

fn p(s: &str) -> PathBuf {
    s.into()
}

/// A tree made by materialising nodes into a temp dir and capturing it.
fn tree(files: &[(&str, &str)], dirs: &[&str]) -> Tree {
    let d = tempfile::tempdir().unwrap();
    for dir in dirs {
        std::fs::create_dir_all(d.path().join(dir)).unwrap();
    }
    for (f, data) in files {
        std::fs::write(d.path().join(f), data).unwrap();
    }
    Tree::capture(d.path()).unwrap()
}

/// Bytes escaped, runs of 8 or more shown as `[x×N]`, cut after 80 pieces.
fn show(data: &[u8]) -> String {
    let mut pieces = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let run = data[i..].iter().take_while(|&&b| b == data[i]).count();
        let n = if run >= 8 { run } else { 1 };
        pieces.push(match n {
            1 => [data[i]].escape_ascii().to_string(),
            _ => format!("[{}×{run}]", [data[i]].escape_ascii()),
        });
        i += n;
    }
    if pieces.len() > 80 {
        let shown: String = pieces[..16].concat();
        return format!("{shown}… ({} bytes)", data.len());
    }
    pieces.concat()
}

fn render(states: &CrashStates) -> String {
    let mut s = format!(
        "{} after {} ops: {} distinct states of {} combinations ({})\n",
        states.model,
        states.crash_after,
        states.states.len(),
        states.combinations,
        if states.exhaustive {
            "exhaustive"
        } else {
            "sampled"
        }
    );
    for (i, st) in states.states.iter().enumerate() {
        writeln!(s, "[{i}] choice {:?}", st.choice).unwrap();
        for line in st.describe().lines() {
            writeln!(s, "    - {line}").unwrap();
        }
        for (path, node) in st.tree.nodes() {
            match node {
                Node::Dir => writeln!(s, "    {}/", path.display()).unwrap(),
                Node::File(d) => writeln!(s, "    {}: \"{}\"", path.display(), show(d)).unwrap(),
            }
        }
    }
    s
}

fn states_at(initial: &Tree, log: &OpLog, k: usize, model: Model) -> CrashStates {
    let mut sim = Simulator::new(initial, log);
    sim.advance_to(k).unwrap();
    sim.crash_states(model, &Limits::default())
}

/// The session log: create, append, fdatasync, fsync of the directory,
/// then a second synced append and a third un-synced one.
fn session_log() -> (Tree, OpLog) {
    let log = OpLog::from_ops([
        Op::Create {
            path: p("s/events.jsonl"),
        },
        write("s/events.jsonl", 0, b"line1\n"),
        Op::Fdatasync {
            path: p("s/events.jsonl"),
        },
        Op::Fsync { path: p("s") },
        write("s/events.jsonl", 6, b"line2\n"),
        Op::Fdatasync {
            path: p("s/events.jsonl"),
        },
        write("s/events.jsonl", 12, b"line3\n"),
    ]);
    (tree(&[], &["s"]), log)
}

#[test]
fn a_new_file_needs_its_directory_fsynced() {
    let (initial, log) = session_log();
    // After create, write, fdatasync: no fsync of s yet.
    insta::assert_snapshot!(render(&states_at(&initial, &log, 3, Model::Strict)), @r#"
    strict after 3 ops: 2 distinct states of 2 combinations (exhaustive)
    [0] choice [0]
        - keeps everything the process wrote
        s/
        s/events.jsonl: "line1\n"
    [1] choice [1]
        - the directory entry of s/events.jsonl (created by op #0) is lost: directory s was not fsynced after it
        s/
    "#);
}

#[test]
fn each_model_on_an_unsynced_append() {
    let (initial, log) = session_log();
    let all = log.ops.len();
    let out: String = Model::ALL
        .into_iter()
        .map(|m| render(&states_at(&initial, &log, all, m)))
        .collect();
    insta::assert_snapshot!(out, @r#"
    strict after 7 ops: 2 distinct states of 2 combinations (exhaustive)
    [0] choice [0]
        - keeps everything the process wrote
        s/
        s/events.jsonl: "line1\nline2\nline3\n"
    [1] choice [1]
        - write op #6 to s/events.jsonl (bytes 12..18) is lost: s/events.jsonl was not fsynced after it
        s/
        s/events.jsonl: "line1\nline2\n"
    ext4-ordered after 7 ops: 2 distinct states of 2 combinations (exhaustive)
    [0] choice [0]
        - keeps everything the process wrote
        s/
        s/events.jsonl: "line1\nline2\nline3\n"
    [1] choice [1]
        - write op #6 to s/events.jsonl (bytes 12..18) is lost: s/events.jsonl was not fsynced after it
        s/
        s/events.jsonl: "line1\nline2\n"
    weak after 7 ops: 4 distinct states of 4 combinations (exhaustive)
    [0] choice [0]
        - keeps everything the process wrote
        s/
        s/events.jsonl: "line1\nline2\nline3\n"
    [1] choice [1]
        - write op #6 to s/events.jsonl (bytes 12..18) is lost: s/events.jsonl was not fsynced after it
        s/
        s/events.jsonl: "line1\nline2\n"
    [2] choice [2]
        - write op #6 to s/events.jsonl (bytes 12..18) grew the file but bytes 12..18 read as zeros: s/events.jsonl was not fsynced after it
        s/
        s/events.jsonl: "line1\nline2\n\x00\x00\x00\x00\x00\x00"
    [3] choice [3]
        - write op #6 to s/events.jsonl (bytes 12..18) grew the file but bytes 12..18 read as garbage: s/events.jsonl was not fsynced after it
        s/
        s/events.jsonl: "line1\nline2\n\xef\xfb\x91\xeb\x96\xc3"
    "#);
}

/// Atomic replace of snapshot.json whose temp file is never fsynced.
fn replace_log() -> (Tree, OpLog) {
    let log = OpLog::from_ops([
        Op::Create {
            path: p("snapshot.json.tmp"),
        },
        write("snapshot.json.tmp", 0, b"new"),
        Op::Rename {
            from: p("snapshot.json.tmp"),
            to: p("snapshot.json"),
        },
        Op::Fsync { path: p(".") },
    ]);
    (tree(&[("snapshot.json", "old")], &[]), log)
}

/// Rename between directories with only the target's fsynced, then a
/// mkdir and an unlink, never synced.
fn cross_dir_log() -> (Tree, OpLog) {
    let log = OpLog::from_ops([
        Op::Rename {
            from: p("a/f"),
            to: p("b/f"),
        },
        Op::Fsync { path: p("b") },
        Op::Mkdir { path: p("c") },
        Op::Unlink { path: p("b/f") },
    ]);
    (tree(&[("a/f", "data")], &["a", "b"]), log)
}

fn every_model(initial: &Tree, log: &OpLog, points: &[usize]) -> String {
    let mut out = String::new();
    for &k in points {
        for m in Model::ALL {
            out += &render(&states_at(initial, log, k, m));
        }
    }
    out
}

#[test]
fn atomic_replace_without_fsync_of_the_temp_file() {
    let (initial, log) = replace_log();
    // Before and after the fsync of the root directory.
    insta::assert_snapshot!(every_model(&initial, &log, &[3, 4]));
}

#[test]
fn a_large_append_tears_at_4096_or_512_bytes() {
    let log = OpLog::from_ops([write("log", 0, &[b'x'; 10000])]);
    insta::assert_snapshot!(every_model(&tree(&[("log", "")], &[]), &log, &[1]));
}

#[test]
fn overwrites_and_appends_are_lost_independently() {
    let log = OpLog::from_ops([write("db", 0, b"BB"), write("db", 8, b"CC")]);
    insta::assert_snapshot!(every_model(&tree(&[("db", "AAAAAAAA")], &[]), &log, &[2]));
}

/// agentstore's log format 2: a zero fill grows the file (a size change
/// and the zeros: one growth write), then lines overwrite the zeros, each
/// its own op; only an fdatasync makes them durable. States after the zero
/// fill, after the first overwrite, and after its fdatasync and a second,
/// un-synced overwrite.
#[test]
fn a_pre_allocated_zero_fill_and_the_overwrites_into_it() {
    let log = OpLog::from_ops([
        write("log", 6, &[0; 1018]),
        write("log", 6, b"line2\n"),
        Op::Fdatasync { path: p("log") },
        write("log", 12, b"line3\n"),
    ]);
    insta::assert_snapshot!(every_model(
        &tree(&[("log", "line1\n")], &[]),
        &log,
        &[1, 2, 4]
    ));
}

#[test]
fn directory_operations_and_half_done_renames() {
    let (initial, log) = cross_dir_log();
    insta::assert_snapshot!(every_model(&initial, &log, &[1, 2, 4]));
}

#[test]
fn each_model_allows_every_state_of_the_one_before() {
    let mut checked = 0;
    for (initial, log) in [session_log(), replace_log(), cross_dir_log()] {
        for k in 0..=log.ops.len() {
            let trees = |m| -> Vec<Tree> {
                let states = states_at(&initial, &log, k, m);
                assert!(states.exhaustive);
                states.states.into_iter().map(|s| s.tree).collect()
            };
            let (strict, ext4, weak) = (
                trees(Model::Strict),
                trees(Model::Ext4Ordered),
                trees(Model::Weak),
            );
            assert!(
                strict.iter().all(|t| ext4.contains(t)),
                "strict ⊆ ext4-ordered at {k}"
            );
            assert!(
                ext4.iter().all(|t| weak.contains(t)),
                "ext4-ordered ⊆ weak at {k}"
            );
            // The first state is what the process saw.
            let mut sim = Simulator::new(&initial, &log);
            sim.advance_to(k).unwrap();
            assert_eq!(strict[0], sim.volatile_tree());
            checked += 1;
        }
    }
    assert_eq!(checked, 8 + 5 + 5);
}

#[test]
fn what_was_fsynced_with_its_directory_survives_in_every_state() {
    let (initial, log) = session_log();
    for k in 0..=log.ops.len() {
        // Durable prefix: line1 from op 4 on (data at 2, entry at 3), line2 from op 6.
        let durable: &[u8] = match k {
            0..=3 => b"",
            4 | 5 => b"line1\n",
            _ => b"line1\nline2\n",
        };
        for m in Model::ALL {
            for state in states_at(&initial, &log, k, m).states {
                let file = state.tree.file("s/events.jsonl");
                if !durable.is_empty() {
                    let file = file.unwrap_or_else(|| panic!("{m} after {k}: events.jsonl lost"));
                    assert!(
                        file.starts_with(durable),
                        "{m} after {k}: {}",
                        state.describe()
                    );
                }
            }
        }
    }
}

#[test]
fn beyond_the_cap_states_are_a_seeded_sample_that_replays() {
    let initial = tree(&[("log", "")], &[]);
    let log = OpLog::from_ops((0..12).map(|i| write("log", i * 1000, &[b'a' + i as u8; 1000])));
    let mut sim = Simulator::new(&initial, &log);
    sim.advance_to(12).unwrap();
    let limits = Limits {
        max_states: 20,
        seed: 7,
    };
    let a = sim.crash_states(Model::Weak, &limits);
    assert!(!a.exhaustive && a.combinations > 1_000_000_000);
    assert!(a.states.len() <= 20 && a.states.len() > 2);
    assert!(a.states[0].losses.is_empty());
    assert_eq!(a.states[1].choice, vec![1; 12], "lose-all is always there");
    assert_eq!(a.states[1].tree.file("log"), Some(&b""[..]));
    let choices = |s: &CrashStates| {
        s.states
            .iter()
            .map(|s| s.choice.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        choices(&sim.crash_states(Model::Weak, &limits)),
        choices(&a)
    );
    let other = sim.crash_states(
        Model::Weak,
        &Limits {
            max_states: 20,
            seed: 8,
        },
    );
    assert_ne!(choices(&other), choices(&a));
    for state in &a.states {
        let again = sim.state(Model::Weak, &state.choice).unwrap();
        assert_eq!(
            (again.tree, again.losses),
            (state.tree.clone(), state.losses.clone())
        );
    }
    let err = sim.state(Model::Strict, &[0, 1]).unwrap_err().to_string();
    assert_eq!(
        err,
        "choice [0, 1] does not fit model strict at crash point 12"
    );
}

#[test]
fn a_log_that_does_not_fit_the_snapshot_is_refused_naming_the_op() {
    let log = OpLog::from_ops([Op::Create { path: p("a") }, write("b", 0, b"x")]);
    let initial = Tree::default();
    let mut sim = Simulator::new(&initial, &log);
    let err = sim.advance_to(2).unwrap_err().to_string();
    assert_eq!(
        err,
        "op log does not fit the snapshot: op #1 (write b bytes 0..1): b does not exist"
    );
    let err = Simulator::new(&initial, &log)
        .advance_to(3)
        .unwrap_err()
        .to_string();
    assert_eq!(err, "crash point 3 is beyond the log's 2 ops");
}

#[test]
fn trees_round_trip_through_a_directory_and_refuse_symlinks() {
    let t = tree(&[("d/f", "x"), ("g", "")], &["d", "e"]);
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("copy");
    t.materialize(&target).unwrap();
    assert_eq!(Tree::capture(&target).unwrap(), t);
    std::os::unix::fs::symlink("g", target.join("link")).unwrap();
    let err = Tree::capture(&target).unwrap_err().to_string();
    assert!(
        err.ends_with(
            "/copy/link: a symlink cannot be snapshotted (regular files and directories only)"
        ),
        "{err}"
    );
}

#[test]
fn op_logs_serialise_text_as_text_and_other_bytes_as_hex() {
    let log = OpLog::from_ops([write("a", 0, b"hi\n"), write("a", 3, &[0xff, 0x00])]);
    let json = serde_json::to_string(&log).unwrap();
    assert_eq!(
        json,
        r#"{"ops":[{"op":"write","path":"a","offset":0,"data":{"text":"hi\n"}},{"op":"write","path":"a","offset":3,"data":{"hex":"ff00"}}],"outputs":[],"gaps":[]}"#
    );
    assert_eq!(serde_json::from_str::<OpLog>(&json).unwrap(), log);
    let bad = json.replace("ff00", "ff0");
    assert!(serde_json::from_str::<OpLog>(&bad).is_err());
}

#[test]
fn a_file_whose_removal_is_durable_adds_no_choices() {
    let log = OpLog::from_ops([
        Op::Create { path: p("tmp") },
        Op::Fsync { path: p(".") },
        write("tmp", 0, b"scratch"),
        Op::Unlink { path: p("tmp") },
        Op::Fsync { path: p(".") },
    ]);
    let initial = Tree::default();
    let at = |k| states_at(&initial, &log, k, Model::Weak);
    // Before the unlink is durable, the write still matters.
    assert_eq!(at(4).combinations, 4 * 2);
    let done = at(5);
    assert_eq!((done.combinations, done.states.len()), (1, 1));
    assert!(done.states[0].tree.nodes().is_empty());
}

/// A state's fate of every un-synced item, as the HTML report tables it:
/// every choice point, kept or what the state did with it.
#[test]
fn fates_name_every_unsynced_item_kept_or_not() {
    let log = OpLog::from_ops([
        Op::Create {
            path: p("s/events.jsonl"),
        },
        write("s/events.jsonl", 0, &[b'a'; 1000]),
        write("s/events.jsonl", 1000, b"line2\n"),
    ]);
    let mut sim = Simulator::new(&tree(&[], &["s"]), &log);
    sim.advance_to(3).unwrap();
    let fates = |model: Model, choice: &[u32]| -> Vec<String> {
        sim.fates(model, choice)
            .unwrap()
            .iter()
            .map(|f| format!("{:?} {}: {} | {}", f.ops, f.what, f.kind.name(), f.how))
            .collect()
    };
    // weak: each write on its own (kept, lost, torn at 512, zeros,
    // garbage), then the directory entry.
    insta::assert_snapshot!(fates(Model::Weak, &[2, 0, 0]).join("\n"), @"
    [1] write op #1 to s/events.jsonl (bytes 0..1000): torn | write op #1 to s/events.jsonl (bytes 0..1000) is torn: only bytes 0..512 reached the disk (a 512-byte boundary): s/events.jsonl was not fsynced after it
    [2] write op #2 to s/events.jsonl (bytes 1000..1006): kept | 
    [0] the directory entry of s/events.jsonl (created by op #0): kept | 
    ");
    insta::assert_snapshot!(fates(Model::Weak, &[0, 3, 1]).join("\n"), @"
    [1] write op #1 to s/events.jsonl (bytes 0..1000): kept | 
    [2] write op #2 to s/events.jsonl (bytes 1000..1006): garbled | write op #2 to s/events.jsonl (bytes 1000..1006) grew the file but bytes 1000..1006 read as garbage: s/events.jsonl was not fsynced after it
    [0] the directory entry of s/events.jsonl (created by op #0): dropped | the directory entry of s/events.jsonl (created by op #0) is lost: directory s was not fsynced after it
    ");
    // strict: everything un-synced, all at once.
    insta::assert_snapshot!(fates(Model::Strict, &[1, 1]).join("\n"), @"
    [1, 2] ops #1, #2 on s/events.jsonl: dropped | ops #1, #2 on s/events.jsonl are lost: s/events.jsonl was not fsynced after them
    [0] the directory entry of s/events.jsonl (created by op #0): dropped | the directory entry of s/events.jsonl (created by op #0) is lost: directory s was not fsynced after it
    ");
    assert!(sim.fates(Model::Weak, &[9, 0, 0]).is_err());
}
