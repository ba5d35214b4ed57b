//! The shipped scenarios (`scenarios/*.json`), compiled into the binary so
//! that an installed `agentchaos` runs them from any directory.
//!
//! A built-in scenario is named by the path `builtin:NAME` wherever a
//! scenario file is (`--scenario builtin:approval-gated`, replay commands,
//! the agent's own `--scenario`); `builtin:` alone is all of them.
//! `agentchaos scenarios` lists them and `agentchaos scenarios export DIR`
//! writes them out as files.

/// How a path names the built-in scenarios.
pub const PREFIX: &str = "builtin:";

/// One shipped scenario: its name (the file's stem, equal to its `name`)
/// and its JSON text.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    pub name: &'static str,
    pub text: &'static str,
}

macro_rules! shipped {
    ($($name:literal),* $(,)?) => {
        &[$(Builtin {
            name: $name,
            text: include_str!(concat!("../../../scenarios/", $name, ".json")),
        }),*]
    };
}

/// Every file of `scenarios/`, sorted by name (a test checks the list is
/// complete).
pub const ALL: &[Builtin] = shipped![
    "approval-gated",
    "deploy-and-notify",
    "fix-the-failing-tests",
    "large-output-blob",
    "multi-run-compaction-branch",
    "parallel-tool-calls",
];

/// The built-in scenario `path` names: `Some(None)` for `builtin:` (all of
/// them), `Some(Some(name))` for `builtin:NAME`, `None` for a real path.
pub fn named(path: &std::path::Path) -> Option<Option<&str>> {
    let rest = path.to_str()?.strip_prefix(PREFIX)?;
    Some((!rest.is_empty()).then_some(rest))
}

/// The built-in scenario called `name`.
pub fn get(name: &str) -> Option<&'static Builtin> {
    ALL.iter().find(|b| b.name == name)
}

/// The names, for an error message.
pub fn names() -> String {
    ALL.iter().map(|b| b.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn every_shipped_file_is_built_in_under_its_own_name() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let built_in: Vec<&str> = ALL.iter().map(|b| b.name).collect();
        assert_eq!(files, built_in);
        for b in ALL {
            let s = crate::scenario::parse(b.text, b.name).unwrap();
            assert_eq!(s.name, b.name);
            assert!(!s.description.is_empty(), "{} has no description", b.name);
        }
    }

    #[test]
    fn paths_name_built_ins() {
        assert_eq!(named(Path::new("builtin:")), Some(None));
        assert_eq!(named(Path::new("builtin:a")), Some(Some("a")));
        assert_eq!(named(Path::new("scenarios/a.json")), None);
    }
}
