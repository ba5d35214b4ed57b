//! Shell words for the commands a report prints (replay commands, adapter
//! lines), quoted by the shlex crate: the library that splits `--adapter`
//! quotes what the harness prints, so the two always agree.

/// `s` as one POSIX shell word: unchanged when it needs no quoting, else
/// quoted by [`shlex::try_quote`]. A NUL byte, which no argument or path
/// can hold, cannot be quoted: such a string is shown Rust-escaped, as
/// text for a person.
pub fn word(s: &str) -> String {
    shlex::try_quote(s).map_or_else(|_| format!("{s:?}"), |q| q.into_owned())
}

#[cfg(test)]
mod tests {
    use super::word;

    #[test]
    fn words_round_trip_through_the_splitter() {
        for s in [
            "plain/path-1.json",
            "my dir/a.json",
            "it's",
            "",
            "a\"b$c",
            "é ü",
        ] {
            let quoted = word(s);
            assert_eq!(shlex::split(&quoted), Some(vec![s.to_string()]), "{quoted}");
        }
        assert_eq!(word("kill@3"), "kill@3");
        assert_eq!(word("a\0b"), "\"a\\0b\"");
    }
}
