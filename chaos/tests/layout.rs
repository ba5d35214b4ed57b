//! The crates' layouts stay a design: no module of `chaos/src` or of
//! `store/src` imports a module that imports it back, however indirectly.
//! An import circle is how "the runner needs the report needs the runner"
//! creeps back in; this test names the circle when it does.
//!
//! The same holds one level up in `chaos/src`, between the top-level
//! modules (the folders: scenario, agent, store, nemesis, history, model,
//! check, campaign, report), so the roles stay layered too.
//!
//! A module's imports are the `crate::a::b` paths in its code, resolved to
//! the longest module path that exists. Comment lines are skipped (a doc
//! link is not an import), and so are `#[cfg(test)]` modules: a unit test
//! may build its fixture through a higher layer (a session that writes
//! the log a lower module reads) without the code depending on it.
//!
//! No source file grows into a drawer: none in the workspace has more than
//! [`MAX_LINES`] lines (build output, generated code marked `@generated`
//! and tests' fixture data under a `fixtures/` folder aside).
//!
//! And the errors stay typed: no `Result<_, String>` in `chaos/src`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`campaign::runner`) → its source.
fn modules(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                // Binaries are not part of the library's module graph.
                if path.file_name().is_some_and(|n| n != "bin") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            if parts == ["lib"] || parts == ["main"] {
                continue;
            }
            out.insert(parts.join("::"), std::fs::read_to_string(&path).unwrap());
        }
    }
    out
}

/// `code` without its comment lines and its `#[cfg(test)]` modules (as
/// rustfmt lays them out: the attribute, `mod NAME {`, and a closing `}`
/// at the indentation of the `mod`).
fn code_only(code: &str) -> String {
    let mut out = Vec::new();
    let mut lines = code.lines().peekable();
    while let Some(line) = lines.next() {
        let test_mod = lines.peek().copied().filter(|next| {
            let item = next.trim_start();
            let item = ["pub ", "pub(crate) ", "pub(super) "]
                .iter()
                .find_map(|v| item.strip_prefix(v))
                .unwrap_or(item);
            line.trim() == "#[cfg(test)]" && item.starts_with("mod ") && item.ends_with('{')
        });
        if let Some(open) = test_mod {
            let close = format!("{}}}", &open[..open.len() - open.trim_start().len()]);
            for skipped in lines.by_ref() {
                if skipped == close {
                    break;
                }
            }
            continue;
        }
        if !line.trim_start().starts_with("//") {
            out.push(line);
        }
    }
    out.join("\n")
}

/// Every `crate::x::y…` path in `code`, as its segments.
fn crate_paths(code: &str) -> Vec<Vec<&str>> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if i > 0 && code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // `agentchaos_crate::`, not ours
        }
        let rest = &code[i + "crate::".len()..];
        let segments = rest
            .split("::")
            .map(|s| {
                let end = s
                    .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                    .unwrap_or(s.len());
                (&s[..end], end == s.len())
            })
            .scan(true, |go_on, (seg, whole)| {
                if !*go_on || seg.is_empty() {
                    return None;
                }
                *go_on = whole;
                Some(seg)
            })
            .collect();
        out.push(segments);
    }
    out
}

fn import_graph(mods: &BTreeMap<String, String>) -> BTreeMap<&str, BTreeSet<&str>> {
    let mut graph = BTreeMap::new();
    for (name, code) in mods {
        let mut deps = BTreeSet::new();
        let code = code_only(code);
        for path in crate_paths(&code) {
            let target = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find_map(|p| mods.get_key_value(&p).map(|(k, _)| k.as_str()));
            if let Some(t) = target.filter(|t| t != name) {
                deps.insert(t);
            }
        }
        graph.insert(name.as_str(), deps);
    }
    graph
}

/// A circle through the graph, if there is one (depth-first search).
fn find_circle<'a>(graph: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Option<Vec<&'a str>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit<'a>(
        node: &'a str,
        graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        marks: &mut BTreeMap<&'a str, Mark>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<&'a str>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|n| *n == node).unwrap();
                let mut circle = path[from..].to_vec();
                circle.push(node);
                return Some(circle);
            }
            None => {}
        }
        marks.insert(node, Mark::Open);
        path.push(node);
        for dep in &graph[node] {
            if let Some(c) = visit(dep, graph, marks, path) {
                return Some(c);
            }
        }
        path.pop();
        marks.insert(node, Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut marks, &mut Vec::new()))
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&root);
    assert!(mods.contains_key("campaign::runner"), "{:?}", mods.keys());
    let graph = import_graph(&mods);
    if let Some(circle) = find_circle(&graph) {
        panic!("import circle in chaos/src: {}", circle.join(" -> "));
    }
}

#[test]
fn no_module_of_the_store_imports_a_module_that_imports_it_back() {
    let root = workspace().join("store/src");
    let mods = modules(&root);
    assert!(
        mods.contains_key("session") && mods.contains_key("lease"),
        "{:?}",
        mods.keys()
    );
    let graph = import_graph(&mods);
    if let Some(circle) = find_circle(&graph) {
        panic!("import circle in store/src: {}", circle.join(" -> "));
    }
}

/// The graph between top-level modules: `campaign::runner -> check` is
/// `campaign -> check`; imports inside one folder are not edges.
fn folder_graph<'a>(
    graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
) -> BTreeMap<&'a str, BTreeSet<&'a str>> {
    let top = |m: &'a str| m.split("::").next().unwrap();
    let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, deps) in graph {
        let entry = out.entry(top(from)).or_default();
        entry.extend(deps.iter().map(|d| top(d)).filter(|d| *d != top(from)));
    }
    out
}

#[test]
fn no_folder_imports_a_folder_that_imports_it_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&root);
    let graph = import_graph(&mods);
    let folders = folder_graph(&graph);
    assert!(folders.contains_key("campaign") && folders.contains_key("model"));
    if let Some(circle) = find_circle(&folders) {
        panic!(
            "import circle between chaos/src's folders: {}",
            circle.join(" -> ")
        );
    }
}

#[test]
fn the_circle_finder_finds_a_planted_circle() {
    let mods: BTreeMap<String, String> = [
        ("report", "use crate::campaign::runner::CampaignResult;"),
        ("campaign::runner", "fn f() { crate::check::explain(); }"),
        (
            "check",
            "// a doc link to crate::report is not an import\nuse crate::report::scorecard;",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let graph = import_graph(&mods);
    assert_eq!(
        find_circle(&graph),
        Some(vec![
            "campaign::runner",
            "check",
            "report",
            "campaign::runner"
        ])
    );
    // One level up: check -> report -> campaign -> check.
    assert_eq!(
        find_circle(&folder_graph(&graph)),
        Some(vec!["campaign", "check", "report", "campaign"])
    );
    let mut acyclic = mods.clone();
    acyclic.insert("check".into(), "// crate::report::scorecard".into());
    assert_eq!(find_circle(&import_graph(&acyclic)), None);
    // A test module's imports are not the module's; the code after it is.
    let tested = "#[cfg(test)]\nmod tests {\n    use crate::report::scorecard;\n\n    fn f() {\n        crate::report::x();\n    }\n}\n";
    acyclic.insert("check".into(), tested.into());
    assert_eq!(find_circle(&import_graph(&acyclic)), None);
    acyclic.insert(
        "check".into(),
        format!("{tested}fn g() {{ crate::report::x(); }}"),
    );
    assert!(find_circle(&import_graph(&acyclic)).is_some());
}

/// The most lines a source file of the workspace may have.
const MAX_LINES: usize = 1500;

/// The workspace's root (chaos's parent).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `root` (relative to it, `/`-separated) with its
/// line count: build output (`target/`), hidden folders, installed
/// packages (`node_modules/`), tests' fixture data (`fixtures/`) and
/// generated code (marked `@generated` in its first lines) aside.
fn sources(root: &Path) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                let skipped = ["target", "node_modules", "fixtures"].contains(&name.as_str())
                    || name.starts_with('.');
                if !skipped {
                    stack.push(path);
                }
                continue;
            }
            if !name.ends_with(".rs") {
                continue;
            }
            let code = std::fs::read_to_string(&path).unwrap();
            if code.lines().take(5).any(|l| l.contains("@generated")) {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap();
            let rel: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push((rel.join("/"), code.lines().count()));
        }
    }
    out.sort();
    out
}

/// A file over [`MAX_LINES`] is a drawer: split it by role, as
/// `chaos/src/campaign/probe/` and `chaos/src/check/` are.
#[test]
fn no_source_file_in_the_workspace_is_over_the_line_limit() {
    let all = sources(&workspace());
    for known in [
        "chaos/tests/layout.rs",
        "store/src/session.rs",
        "protocol/src/lib.rs",
    ] {
        assert!(all.iter().any(|(f, _)| f == known), "{known} not found");
    }
    let over: Vec<String> = all
        .iter()
        .filter(|(_, n)| *n > MAX_LINES)
        .map(|(f, n)| format!("{f} ({n} lines)"))
        .collect();
    assert!(
        over.is_empty(),
        "source files over {MAX_LINES} lines (split them by role): {}",
        over.join(", ")
    );
}

#[test]
fn the_line_count_finds_a_long_file_and_skips_output_fixtures_and_generated_code() {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, head: &str, lines: usize| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{head}{}", "x\n".repeat(lines))).unwrap();
    };
    write("src/long.rs", "", MAX_LINES + 1);
    write("src/short.rs", "", MAX_LINES);
    write("src/notes.txt", "", MAX_LINES + 1);
    write("target/debug/build.rs", "", MAX_LINES + 1);
    write(".git/hook.rs", "", MAX_LINES + 1);
    write("tests/fixtures/data.rs", "", MAX_LINES + 1);
    write(
        "src/generated.rs",
        "// @generated by a tool\n",
        MAX_LINES + 1,
    );
    assert_eq!(
        sources(dir.path()),
        vec![
            ("src/long.rs".to_string(), MAX_LINES + 1),
            ("src/short.rs".to_string(), MAX_LINES)
        ]
    );
}

/// The line (1-based) of every `Result<T, String>` type in `code`:
/// comment lines are skipped, and a `Result` with one parameter
/// (`io::Result<String>`) is not one.
fn string_errors(code: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, line) in code.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        // A type may run over several lines: read on from each `Result<`.
        let rest: String = code.lines().skip(i).take(8).collect::<Vec<_>>().join(" ");
        let mut from = 0;
        while let Some(at) = line[from..].find("Result<") {
            let start = from + at;
            from = start + "Result<".len();
            let word_start = line[..start]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
            if word_start {
                continue;
            }
            // The top-level parameters, up to the matching `>`.
            let mut depth = 0;
            let mut params = vec![String::new()];
            for c in rest[start + "Result<".len()..].chars() {
                match c {
                    '<' | '(' | '[' => depth += 1,
                    '>' | ')' | ']' if depth == 0 => break,
                    '>' | ')' | ']' => depth -= 1,
                    ',' if depth == 0 => {
                        params.push(String::new());
                        continue;
                    }
                    _ => {}
                }
                params.last_mut().unwrap().push(c);
            }
            let params: Vec<&str> = params
                .iter()
                .map(|p| p.trim())
                .filter(|p| !p.is_empty())
                .collect();
            if params.len() == 2 && params[1] == "String" {
                out.push(i + 1);
            }
        }
    }
    out
}

/// Chaos's errors are typed (issue 13): a caller decides whose fault an
/// error is (the store's, exit 1, or the harness's, exit 3) and how to
/// report it from its type, never from a message, so no `Result<_, String>`
/// comes back into `chaos/src`. A `String` inside a typed variant is fine.
#[test]
fn no_result_in_chaos_src_has_a_string_error() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&root).unwrap().display().to_string();
            let code = std::fs::read_to_string(&path).unwrap();
            for line in string_errors(&code) {
                found.push((rel.clone(), line));
            }
        }
    }
    found.sort();
    let found: Vec<String> = found
        .iter()
        .map(|(file, line)| format!("chaos/src/{file}:{line}"))
        .collect();
    assert!(
        found.is_empty(),
        "Result<_, String> is back (give it a typed error, thiserror): {}",
        found.join(", ")
    );
}

#[test]
fn the_string_error_scan_finds_one_over_lines_and_skips_one_parameter_results() {
    let code = "fn a() -> Result<(), String> {}\n\
                // fn b() -> Result<(), String>\n\
                fn c() -> std::io::Result<String> {}\n\
                fn d() -> Result<\n    (u8, Vec<String>),\n    String,\n> {}\n\
                fn e() -> Result<String, Error> {}\n\
                fn f() -> StoreResult<String> {}\n\
                fn g() -> Vec<Option<Result<Vec<u8>, String>>> {}\n";
    assert_eq!(string_errors(code), vec![1, 4, 10]);
}
