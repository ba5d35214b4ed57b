//! The docs cannot rot: every Markdown file of the workspace (outside
//! `target/`, `node_modules/` and hidden directories) is read, and
//!
//! - every relative link resolves to a file or directory, and every
//!   `#anchor` to a heading of its page by GitHub's rules;
//! - every flag shown after `agentchaos SUBCOMMAND` or `agentstore
//!   SUBCOMMAND` (in code blocks and code spans, including commands quoted
//!   inside `--adapter '…'`) is in that subcommand's `--help`, so a renamed
//!   flag or subcommand fails here;
//! - no page carries a date, an issue number, a load average or "before the
//!   fix": user docs say what is, history belongs in git;
//! - the README shows the two set-up commands, and the sample CI job file's
//!   commands name real flags, packages and paths.
//!
//! No campaign runs: the only processes are `--help` of each subcommand
//! shown. Each check is shown failing on a small broken page below.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use crate::support;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("chaos/ has a parent")
        .to_path_buf()
}

/// Every `*.md` under `root`, skipping build output, installed packages
/// and hidden directories (`.git`, `.venv`), sorted.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                let skipped = name.starts_with('.')
                    || matches!(name.as_str(), "target" | "node_modules" | "__pycache__");
                if !skipped {
                    stack.push(path);
                }
            } else if kind.is_file() && name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn read_pages(root: &Path) -> BTreeMap<PathBuf, String> {
    markdown_files(root)
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("{}: cannot read: {e}", p.display()));
            (p, text)
        })
        .collect()
}

fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A page split into what is code and what is prose.
#[derive(Debug, Default)]
struct Page {
    /// Prose lines (outside fences), with their 1-based line numbers.
    prose: Vec<(usize, String)>,
    /// Code: each fenced block's lines, and each code span, with the line
    /// it starts on. A fenced command continued with `\` is one entry.
    code: Vec<(usize, String)>,
}

fn split_page(text: &str) -> Page {
    let mut page = Page::default();
    let mut fence: Option<String> = None;
    let mut pending: Option<(usize, String)> = None;
    let mut paragraph: Vec<(usize, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if let Some(marker) = &fence {
            if trimmed.starts_with(marker.as_str()) && trimmed.trim_end() == marker.as_str() {
                fence = None;
                if let Some(p) = pending.take() {
                    page.code.push(p);
                }
                continue;
            }
            let (start, mut joined) = pending.take().unwrap_or((n, String::new()));
            joined.push_str(line.trim_end().trim_end_matches('\\'));
            joined.push(' ');
            if line.trim_end().ends_with('\\') {
                pending = Some((start, joined));
            } else {
                page.code.push((start, joined));
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let marker: String = trimmed
                .chars()
                .take_while(|c| *c == '`' || *c == '~')
                .collect();
            fence = Some(marker);
            spans_of(&paragraph, &mut page.code);
            paragraph.clear();
            continue;
        }
        page.prose.push((n, line.to_string()));
        if line.trim().is_empty() {
            spans_of(&paragraph, &mut page.code);
            paragraph.clear();
        } else {
            paragraph.push((n, line.to_string()));
        }
    }
    spans_of(&paragraph, &mut page.code);
    page
}

/// The code spans of one paragraph (a span may cross a line break).
fn spans_of(paragraph: &[(usize, String)], out: &mut Vec<(usize, String)>) {
    let mut text = String::new();
    let mut line_at: Vec<usize> = Vec::new();
    for (n, line) in paragraph {
        for _ in 0..=line.len() {
            line_at.push(*n);
        }
        text.push_str(line);
        text.push(' ');
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
        let delim = &text[i..i + run];
        let body_start = i + run;
        match find_closing(&text[body_start..], delim) {
            Some(len) => {
                out.push((line_at[i], text[body_start..body_start + len].to_string()));
                i = body_start + len + run;
            }
            None => i = body_start,
        }
    }
}

/// Where a run of exactly `delim` backticks starts in `rest`.
fn find_closing(rest: &str, delim: &str) -> Option<usize> {
    let bytes = rest.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
            if run == delim.len() {
                return Some(i);
            }
            i += run;
        } else {
            i += 1;
        }
    }
    None
}

/// Prose with its code spans blanked, so a link inside a span is no link.
fn without_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_span = false;
    for c in line.chars() {
        if c == '`' {
            in_span = !in_span;
            out.push(' ');
        } else if in_span {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

// ---------------------------------------------------------------- anchors

/// GitHub's anchor of a heading: lower case; every character that is not a
/// letter, a digit, a space, `-` or `_` dropped; spaces become `-`.
fn slug(heading: &str) -> String {
    let text = link_texts(heading);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// `[text](target)` → `text`.
fn link_texts(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](") {
            Some(close) if !after[..close].contains('[') => {
                let text = &after[..close];
                let tail = &after[close + 2..];
                match tail.find(')') {
                    Some(end) => {
                        out.push_str(text);
                        rest = &tail[end + 1..];
                    }
                    None => {
                        out.push('[');
                        rest = after;
                    }
                }
            }
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The anchors a page defines: its headings' slugs (a repeated slug gets
/// `-1`, `-2`, … as on GitHub) and explicit `<a id=…>`/`name=` anchors.
fn anchors(page: &Page) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in &page.prose {
        let t = line.trim_start();
        let hashes = t.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && t[hashes..].starts_with(' ') {
            let base = slug(t[hashes..].trim().trim_end_matches('#'));
            let count = seen.entry(base.clone()).or_insert(0);
            let anchor = if *count == 0 {
                base.clone()
            } else {
                format!("{base}-{count}")
            };
            *count += 1;
            out.insert(anchor);
        }
        for key in ["id=\"", "name=\""] {
            let mut rest = line.as_str();
            while let Some(at) = rest.find(key) {
                let value = &rest[at + key.len()..];
                if let Some(end) = value.find('"') {
                    out.insert(value[..end].to_string());
                }
                rest = &rest[at + key.len()..];
            }
        }
    }
    out
}

// ---------------------------------------------------------------- links

/// The targets of the inline links and images of a prose line.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_spans(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let tail = &rest[at + 2..];
        let end = tail.find(')').unwrap_or(tail.len());
        let target = tail[..end].split_whitespace().next().unwrap_or("");
        let target = target.trim_start_matches('<').trim_end_matches('>');
        if !target.is_empty() {
            out.push(target.to_string());
        }
        rest = &tail[end.min(tail.len())..];
    }
    // Reference definitions: `[name]: target`.
    let t = line.trim_start();
    if t.starts_with('[') {
        if let Some(at) = t.find("]: ") {
            if let Some(target) = t[at + 3..].split_whitespace().next() {
                out.push(target.to_string());
            }
        }
    }
    out
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// `a/./b/../c` → `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// One line per relative link or anchor that does not resolve.
fn link_problems(root: &Path, pages: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let split: BTreeMap<&PathBuf, Page> = pages.iter().map(|(p, t)| (p, split_page(t))).collect();
    let anchors_of: BTreeMap<PathBuf, BTreeSet<String>> = split
        .iter()
        .map(|(p, page)| (normalize(p), anchors(page)))
        .collect();
    let mut problems = Vec::new();
    for (path, page) in &split {
        let dir = path.parent().unwrap_or(root);
        for (n, line) in &page.prose {
            for target in link_targets(line) {
                if is_external(&target) {
                    continue;
                }
                let (file, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target.as_str(), None),
                };
                let resolved = if file.is_empty() {
                    normalize(path)
                } else {
                    normalize(&dir.join(file))
                };
                let at = format!("{}:{n}", shown(root, path));
                if !file.is_empty() && !resolved.exists() {
                    problems.push(format!(
                        "{at}: link `{target}`: no file or directory {}",
                        shown(root, &resolved)
                    ));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if let Some(defined) = anchors_of.get(&resolved) {
                    if !defined.contains(anchor) {
                        problems.push(format!(
                            "{at}: link `{target}`: {} has no heading with anchor #{anchor}",
                            shown(root, &resolved)
                        ));
                    }
                }
            }
        }
    }
    problems
}

// ---------------------------------------------------------------- flags

/// Words of a shell command line: quotes kept together (and marked), a
/// `#` comment, `|`, `;`, `&&`, `||`, `>` and `<` end the command.
#[derive(Debug, PartialEq)]
struct Word {
    text: String,
    quoted: bool,
}

fn shell_words(line: &str) -> Vec<Vec<Word>> {
    let mut commands = vec![Vec::new()];
    let mut word = String::new();
    let mut quoted = false;
    let mut has_word = false;
    let mut chars = line.chars();
    let flush =
        |commands: &mut Vec<Vec<Word>>, word: &mut String, quoted: &mut bool, has: &mut bool| {
            if *has {
                commands
                    .last_mut()
                    .expect("one command at least")
                    .push(Word {
                        text: std::mem::take(word),
                        quoted: *quoted,
                    });
            }
            *quoted = false;
            *has = false;
        };
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                has_word = true;
                quoted = true;
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    word.push(q);
                }
            }
            '\\' => {
                if let Some(next) = chars.next() {
                    word.push(next);
                    has_word = true;
                }
            }
            c if c.is_whitespace() => flush(&mut commands, &mut word, &mut quoted, &mut has_word),
            '#' if !has_word => break,
            '|' | ';' | '&' | '>' | '<' => {
                flush(&mut commands, &mut word, &mut quoted, &mut has_word);
                if !commands.last().is_some_and(Vec::is_empty) {
                    commands.push(Vec::new());
                }
            }
            c => {
                word.push(c);
                has_word = true;
            }
        }
    }
    flush(&mut commands, &mut word, &mut quoted, &mut has_word);
    commands
}

/// A flag as written (`[--dir`, `--json=FILE`, `--seed`,): its name, or
/// None for anything that is not a long flag.
fn flag_name(word: &str) -> Option<String> {
    let w = word.trim_start_matches(['[', '(', '`']);
    let w = w.split('=').next().unwrap_or(w);
    let w = w.trim_end_matches([']', ')', ',', '.', ';', ':', '`', '…']);
    let name = w.strip_prefix("--")?;
    let ok = !name.is_empty()
        && name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    ok.then(|| w.to_string())
}

/// The binary a word runs, if it is `agentchaos` or `agentstore` (any
/// directory before it, punctuation of prose around it stripped).
fn binary_of(word: &str) -> Option<&'static str> {
    let w = word.trim_matches(['`', '(', ')', '"', '\'', ',']);
    match w.rsplit('/').next() {
        Some("agentchaos") => Some("agentchaos"),
        Some("agentstore") => Some("agentstore"),
        _ => None,
    }
}

/// A command shown in the docs: `BINARY SUBCOMMAND --flag …`.
#[derive(Debug, PartialEq)]
struct Shown {
    binary: &'static str,
    subcommand: String,
    flags: Vec<String>,
}

/// Every `agentchaos`/`agentstore` command in one piece of code, including
/// those inside a quoted word (`--adapter 'agentstore adapter --no-fork'`).
fn commands_in(code: &str) -> Vec<Shown> {
    let mut out = Vec::new();
    for words in shell_words(code) {
        let mut i = 0;
        while i < words.len() {
            let w = &words[i];
            if w.quoted && w.text.contains(' ') {
                out.extend(commands_in(&w.text));
            }
            let Some(binary) = binary_of(&w.text) else {
                i += 1;
                continue;
            };
            // `BINARY ` closing a code span in a report's prose ends it.
            if w.text.ends_with('`') {
                i += 1;
                continue;
            }
            let Some(sub) = words.get(i + 1) else { break };
            let subcommand = sub.text.trim_end_matches('`').to_string();
            let is_word = !subcommand.is_empty()
                && subcommand
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-')
                && !subcommand.starts_with('-');
            if !is_word {
                i += 1;
                continue;
            }
            let mut flags = Vec::new();
            let mut j = i + 2;
            let mut ended = sub.text.ends_with('`');
            while !ended && j < words.len() {
                let word = &words[j];
                if word.quoted && word.text.contains(' ') {
                    out.extend(commands_in(&word.text));
                } else if let Some(flag) = flag_name(&word.text) {
                    flags.push(flag);
                }
                ended = word.text.ends_with('`');
                j += 1;
            }
            out.push(Shown {
                binary,
                subcommand,
                flags,
            });
            i = j;
        }
    }
    out
}

/// The long flags a `--help` text names.
fn flags_in_help(help: &str) -> BTreeSet<String> {
    help.split(|c: char| c.is_whitespace() || matches!(c, ',' | '[' | ']' | '(' | ')' | '<' | '='))
        .filter_map(flag_name)
        .collect()
}

/// `BINARY SUBCOMMAND --help`'s flags, or None when there is no such
/// subcommand. Cached: each subcommand's help runs once.
struct Helps {
    binaries: BTreeMap<&'static str, PathBuf>,
    cache: BTreeMap<(&'static str, String), Option<BTreeSet<String>>>,
}

impl Helps {
    fn new() -> Helps {
        let mut binaries = BTreeMap::new();
        binaries.insert(
            "agentchaos",
            PathBuf::from(env!("CARGO_BIN_EXE_agentchaos")),
        );
        binaries.insert("agentstore", support::workspace_bin("agentstore"));
        Helps {
            binaries,
            cache: BTreeMap::new(),
        }
    }

    fn flags(&mut self, binary: &'static str, subcommand: &str) -> Option<&BTreeSet<String>> {
        let key = (binary, subcommand.to_string());
        if !self.cache.contains_key(&key) {
            let out = Command::new(&self.binaries[binary])
                .args([subcommand, "--help"])
                .output()
                .unwrap_or_else(|e| panic!("{binary} {subcommand} --help: {e}"));
            let flags = out.status.success().then(|| {
                let mut f = flags_in_help(&String::from_utf8_lossy(&out.stdout));
                f.insert("--help".into());
                f
            });
            self.cache.insert(key.clone(), flags);
        }
        self.cache[&key].as_ref()
    }
}

/// `--help`'s flags of `BINARY SUBCOMMAND`, None without such a subcommand.
type HelpFn<'a> = dyn FnMut(&'static str, &str) -> Option<BTreeSet<String>> + 'a;

/// One line per command shown with a subcommand or flag its binary lacks.
fn flag_problems(place: &str, code: &str, help: &mut HelpFn) -> Vec<String> {
    let mut problems = Vec::new();
    for shown in commands_in(code) {
        match help(shown.binary, &shown.subcommand) {
            None => problems.push(format!(
                "{place}: `{} {}`: no such subcommand (`{0} {1} --help` fails)",
                shown.binary, shown.subcommand
            )),
            Some(known) => {
                for flag in &shown.flags {
                    if !known.contains(flag) {
                        problems.push(format!(
                            "{place}: `{} {} {flag}`: `{0} {1} --help` has no {flag}",
                            shown.binary, shown.subcommand
                        ));
                    }
                }
            }
        }
    }
    problems
}

// ---------------------------------------------------------------- history

/// One line per date, issue number, load average or "before the fix".
fn history_problems(place: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = format!("{place}:{}", i + 1);
        let lower = line.to_lowercase();
        for phrase in ["load average", "before the fix"] {
            if lower.contains(phrase) {
                problems.push(format!(
                    "{at}: \"{phrase}\": docs say what is, not how it was measured or what changed"
                ));
            }
        }
        if let Some(n) = issue_number(&lower) {
            problems.push(format!(
                "{at}: an issue number ({n}): the tracker is not the docs"
            ));
        }
        if let Some(d) = date(line) {
            problems.push(format!("{at}: a date ({d}): history belongs in git"));
        }
    }
    problems
}

/// `issue 12`, `issues 7 and 11`, `issue #3` in a lower-cased line.
fn issue_number(lower: &str) -> Option<String> {
    lower.match_indices("issue").find_map(|(at, _)| {
        let word_start = !lower[..at]
            .chars()
            .last()
            .is_some_and(char::is_alphanumeric);
        let after = &lower[at + "issue".len()..];
        let after = after.strip_prefix('s').unwrap_or(after);
        let spaced = after.trim_start();
        let digits: String = spaced
            .strip_prefix('#')
            .unwrap_or(spaced)
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        (word_start && spaced.len() < after.len() && !digits.is_empty())
            .then(|| format!("issue {digits}"))
    })
}

/// A `YYYY-MM-DD` date not followed by `T` (a timestamp inside an example
/// record is data, not a diary).
fn date(line: &str) -> Option<String> {
    let b = line.as_bytes();
    (0..b.len().saturating_sub(9)).find_map(|i| {
        let s = &b[i..i + 10];
        let shape = s.iter().enumerate().all(|(k, c)| match k {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        });
        let bounded = (i == 0 || !b[i - 1].is_ascii_alphanumeric())
            && b.get(i + 10).is_none_or(|c| !c.is_ascii_alphanumeric());
        (shape && bounded).then(|| line[i..i + 10].to_string())
    })
}

// ---------------------------------------------------------------- the CI job

/// The `run:` commands of a GitHub Actions job file (`>-` and `|` blocks
/// folded into one line), each with `${{ matrix.NAME }}` replaced by every
/// value its matrix lists.
fn job_commands(yaml: &str) -> Vec<String> {
    let mut matrix: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut runs: Vec<String> = Vec::new();
    let lines: Vec<&str> = yaml.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim_start().trim_start_matches("- ");
        if let Some((key, value)) = t.split_once(": [") {
            let values = value.trim_end_matches(']').split(',');
            let values = values.map(|v| v.trim().trim_matches('"').to_string());
            matrix.insert(key.trim().to_string(), values.collect());
        }
        if let Some(value) = t.strip_prefix("run:") {
            let value = value.trim();
            if value.starts_with('>') || value.starts_with('|') {
                let indent = line.len() - line.trim_start().len();
                let mut folded = String::new();
                i += 1;
                while i < lines.len()
                    && (lines[i].trim().is_empty()
                        || lines[i].len() - lines[i].trim_start().len() > indent)
                {
                    folded.push_str(lines[i].trim());
                    folded.push(' ');
                    i += 1;
                }
                runs.push(folded);
                continue;
            }
            runs.push(value.to_string());
        }
        i += 1;
    }
    let mut out = Vec::new();
    for run in runs {
        let mut expanded = vec![run.clone()];
        for (key, values) in &matrix {
            let placeholder = format!("${{{{ matrix.{key} }}}}");
            if run.contains(&placeholder) {
                let placeholder = placeholder.as_str();
                expanded = expanded
                    .iter()
                    .flat_map(|r| values.iter().map(move |v| r.replace(placeholder, v)))
                    .collect();
            }
        }
        out.extend(expanded);
    }
    out
}

/// The workspace's package names (`-p NAME` must name one).
fn packages(root: &Path) -> BTreeSet<String> {
    let manifest =
        std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace manifest");
    let members = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("a members list");
    members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .filter_map(|m| std::fs::read_to_string(root.join(m).join("Cargo.toml")).ok())
        .filter_map(|toml| {
            toml.lines().find_map(|l| {
                l.strip_prefix("name = ")
                    .map(|n| n.trim_matches('"').to_string())
            })
        })
        .collect()
}

/// One line per package, path, subcommand or flag of a job's commands
/// that does not exist.
fn job_problems(root: &Path, place: &str, commands: &[String], help: &mut HelpFn) -> Vec<String> {
    let packages = packages(root);
    let mut problems = Vec::new();
    for command in commands {
        let at = format!("{place}: `{command}`");
        if command.contains("${{") {
            problems.push(format!("{at}: an expression no matrix value replaces"));
        }
        for words in shell_words(command) {
            let words: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
            for pair in words.windows(2) {
                if pair[0] == "-p" && !packages.contains(pair[1]) {
                    problems.push(format!("{at}: no workspace package {}", pair[1]));
                }
            }
        }
        let mut paths = Vec::new();
        collect_paths(command, &mut paths);
        for path in paths {
            if !root.join(&path).exists() {
                problems.push(format!("{at}: no file {path} in the repository"));
            }
        }
        problems.extend(flag_problems(&at, command, help));
    }
    problems
}

/// The words of a command (and of the commands quoted in it) that name a
/// file of the repository: relative paths with a `/`, outside `target/`.
fn collect_paths(command: &str, out: &mut Vec<String>) {
    for words in shell_words(command) {
        for w in words {
            if w.quoted && w.text.contains(' ') {
                collect_paths(&w.text, out);
                continue;
            }
            let t = w.text.trim_start_matches("./");
            let relative = t.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
            if relative && t.contains('/') && !t.starts_with("target/") && !t.contains("://") {
                out.push(t.trim_end_matches('/').to_string());
            }
        }
    }
}

// ---------------------------------------------------------------- the tests

fn fail_on(problems: Vec<String>, what: &str) {
    assert!(
        problems.is_empty(),
        "{what}: {} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let root = workspace();
    let pages = read_pages(&root);
    assert!(
        pages.len() >= 20,
        "found only {} Markdown files under {}",
        pages.len(),
        root.display()
    );
    fail_on(link_problems(&root, &pages), "links");
}

#[test]
fn every_flag_shown_exists_in_its_subcommands_help() {
    let root = workspace();
    let mut helps = Helps::new();
    let mut help = |b: &'static str, s: &str| helps.flags(b, s).cloned();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (path, text) in read_pages(&root) {
        for (n, code) in split_page(&text).code {
            checked += commands_in(&code).len();
            let place = format!("{}:{n}", shown(&root, &path));
            problems.extend(flag_problems(&place, &code, &mut help));
        }
    }
    assert!(checked >= 100, "only {checked} commands found in the docs");
    fail_on(problems, "commands shown in the docs");
}

#[test]
fn no_page_carries_dates_issue_numbers_or_load_averages() {
    let root = workspace();
    let mut problems = Vec::new();
    for (path, text) in read_pages(&root) {
        problems.extend(history_problems(&shown(&root, &path), &text));
    }
    fail_on(problems, "history in the docs");
}

#[test]
fn the_readme_shows_the_two_set_up_commands() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    for command in [
        "cargo run --release -p agentchaos -- run",
        "cargo test --workspace",
    ] {
        assert!(
            readme.contains(command),
            "README.md: the set-up command `{command}` is missing"
        );
    }
    let lines = readme.lines().count();
    assert!(
        lines <= 220,
        "README.md has {lines} lines: the front door is at most 220"
    );
}

#[test]
fn the_sample_ci_job_runs_real_commands() {
    let root = workspace();
    let file = root.join("docs/ci/github-actions.yml");
    let yaml = std::fs::read_to_string(&file).unwrap();
    let commands = job_commands(&yaml);
    assert!(
        commands.iter().any(|c| c.contains("agentchaos run")),
        "{}: no `agentchaos run` step among {commands:?}",
        file.display()
    );
    let mut helps = Helps::new();
    let mut help = |b: &'static str, s: &str| helps.flags(b, s).cloned();
    fail_on(
        job_problems(&root, "docs/ci/github-actions.yml", &commands, &mut help),
        "the sample CI job",
    );
}

// Each check seen failing on a small broken page.

/// A fake `--help`: `agentchaos run` knows `--trials` and `--seed`.
fn fake_help(binary: &'static str, subcommand: &str) -> Option<BTreeSet<String>> {
    (binary == "agentchaos" && subcommand == "run")
        .then(|| ["--trials", "--seed", "--adapter"].map(String::from).into())
}

#[test]
fn a_broken_link_and_a_missing_anchor_are_named() {
    let dir = std::env::temp_dir().join(format!("agentchaos-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut pages = BTreeMap::new();
    pages.insert(
        dir.join("a.md"),
        "# Page A\n\n## The `durable_append` row: 8. Sections\n\nSee [b](b.md#right) and [c](c.md), \
         [here](#the-durable_append-row-8-sections), [gone](#nowhere), `[not a link](x.md)`.\n"
            .to_string(),
    );
    pages.insert(
        dir.join("b.md"),
        "# Right\n\n```sh\n# Not a heading\n```\n".to_string(),
    );
    for (p, t) in &pages {
        std::fs::write(p, t).unwrap();
    }
    let problems = link_problems(&dir, &pages);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems[0].contains("a.md:5: link `c.md`: no file or directory c.md"),
        "{problems:#?}"
    );
    assert!(
        problems[1].contains("a.md:5: link `#nowhere`: a.md has no heading with anchor #nowhere"),
        "{problems:#?}"
    );
    let page = split_page(&pages[&dir.join("b.md")]);
    assert!(!anchors(&page).contains("not-a-heading"));
}

#[test]
fn a_renamed_flag_or_subcommand_is_named() {
    let mut help = fake_help;
    let code = "target/release/agentchaos run --trials 4 --seeds 2 \
                --adapter 'env X=1 agentchaos run --trial 3' | tee out # --json";
    let problems = flag_problems("p.md:3", code, &mut help);
    assert_eq!(
        problems,
        [
            "p.md:3: `agentchaos run --trial`: `agentchaos run --help` has no --trial",
            "p.md:3: `agentchaos run --seeds`: `agentchaos run --help` has no --seeds",
        ],
    );
    let problems = flag_problems("p.md:4", "agentchaos powerloss --replay x", &mut help);
    assert_eq!(
        problems,
        ["p.md:4: `agentchaos powerloss`: no such subcommand (`agentchaos powerloss --help` fails)"]
    );
    // Not commands: a package name, a library, a closing code span, prose.
    for code in [
        "cargo test -p agentchaos --test integration docs::",
        "agentstore = { path = \"…/store\", default-features = false }",
        "lease not exercised: `agentchaos run` pauses (`--postgres` also)",
        "cargo run --release -p agentchaos -- run",
    ] {
        assert_eq!(
            flag_problems("p.md", code, &mut help),
            Vec::<String>::new(),
            "{code}"
        );
    }
}

#[test]
fn dates_issue_numbers_and_load_averages_are_named() {
    let text = "Measured 2026-12-01 at load average 3.\nThe goal of issue 15, and Issues #7.\n\
                Before the fix it was slow.\n{\"ts\":\"2026-11-29T08:00:00.000Z\"} tissue 4 is fine.\n";
    let problems = history_problems("h.md", text);
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(
        problems[0].starts_with("h.md:1: \"load average\""),
        "{problems:#?}"
    );
    assert!(
        problems[1].starts_with("h.md:1: a date (2026-12-01)"),
        "{problems:#?}"
    );
    assert!(
        problems[2].starts_with("h.md:2: an issue number (issue 15)"),
        "{problems:#?}"
    );
    assert!(
        problems[3].starts_with("h.md:3: \"before the fix\""),
        "{problems:#?}"
    );
    assert!(issue_number("see issues #7.").is_some());
    assert!(issue_number("a tissue 4, an issue tracker").is_none());
}

#[test]
fn a_job_with_a_missing_path_package_or_flag_is_named() {
    let root = workspace();
    let yaml = "jobs:\n  j:\n    strategy:\n      matrix:\n        shard: [\"1/2\", \"2/2\"]\n    steps:\n\
                \x20     - run: cargo build -p agentchaoss\n\
                \x20     - run: >-\n          target/release/agentchaos run --shard ${{ matrix.shard }}\n\
                \x20         --adapter 'python3 chaos/adapters/python/examples/no_such_store.py' --trails 4\n";
    let commands = job_commands(yaml);
    assert_eq!(commands.len(), 3, "{commands:#?}");
    assert!(commands[1].contains("--shard 1/2") && commands[2].contains("--shard 2/2"));
    let mut help = fake_help;
    let problems = job_problems(&root, "job.yml", &commands, &mut help);
    let text = problems.join("\n");
    assert!(text.contains("no workspace package agentchaoss"), "{text}");
    assert!(
        text.contains("no file chaos/adapters/python/examples/no_such_store.py"),
        "{text}"
    );
    assert!(text.contains("has no --trails"), "{text}");
    assert!(text.contains("has no --shard"), "{text}");
}
