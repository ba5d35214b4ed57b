//! Export: a shareable JSONL copy of a session, optionally redacted.
//!
//! Each output line is the event as plain JSON (`seq`, `id`, `ts`, `type`,
//! fields; no checksum: an export is a copy for people, not a log to
//! append to). The session itself is only read, without the writer lock.
//!
//! Redaction policy (`--redact`). Four rules mask values, applied to every
//! event, marked or not: (1) the payload fields ([`PAYLOAD_FIELDS`]) of an
//! event marked `sensitive` are replaced by [`MASK`]; (2) so are those of
//! every later event about a tool call marked `sensitive` (its result and
//! the blob it references, its commit, its reconciliation); (3) the value of
//! any object key, at any depth, whose name says it holds a secret
//! (`password`, `api_key`, `Authorization`, `accessToken`, `client-secret`,
//! `cookie`…: see [`is_secret_key`]) is replaced by [`MASK`]; (4) every
//! well-known credential found inside any string, keys included (API keys of
//! OpenAI, Anthropic, GitHub, AWS, Slack, Google and Stripe, JWTs, PEM
//! private keys, `Bearer` tokens, passwords in URLs, `NAME=value` and
//! `--name value` with a secret name), is replaced by [`MASK`] and the rest
//! of the string is kept. Ids (`seq`, `id`, `type`, `call_id`,
//! `operation_id`, `run_id`, `parent`) are never masked unless a credential
//! hides in them, so a redacted export is still a session one can follow.
//! The [`ExportReport`] names every masked value by seq and JSON path and
//! says which rule masked it, never the secret.

use std::collections::HashSet;
use std::fmt;
use std::io::Write;
use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{quote, Error, Result};
use crate::event::{Body, Redaction, Seq};
use crate::layout::SessionPaths;
use crate::scan::{LogPosition, Scanner};

/// Fields that carry payload (what a user typed, what a tool saw or did).
pub const PAYLOAD_FIELDS: &[&str] = &[
    "text",
    "args",
    "output",
    "blob",
    "summary",
    "evidence",
    "target",
    "goal",
    "steps",
    "workspace",
    "from",
    "to",
    "external_ref",
];

/// The mask written in place of a redacted value.
pub const MASK: &str = "[redacted]";

/// Why a value was masked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "rule", content = "kinds")]
pub enum Reason {
    /// A payload field of an event marked sensitive.
    Sensitive,
    /// A payload field of an event about a tool call marked sensitive.
    SensitiveCall,
    /// The value of a key whose name says it holds a secret.
    SecretKey,
    /// Credentials of these kinds inside a string (only they were masked).
    Credentials(Vec<&'static str>),
}

/// One masked value: which event, where in it, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Masked {
    pub seq: Seq,
    /// The JSON path inside the exported object: `args.headers[0].value`.
    pub path: String,
    pub reason: Reason,
}

/// `seq 12 args.password`, `seq 14 text [openai key]`.
impl fmt::Display for Masked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seq {} {}", self.seq, self.path)?;
        match &self.reason {
            Reason::Sensitive => f.write_str(" [sensitive event]"),
            Reason::SensitiveCall => f.write_str(" [sensitive call]"),
            Reason::SecretKey => Ok(()),
            Reason::Credentials(kinds) => write!(f, " [{}]", kinds.join(", ")),
        }
    }
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExportReport {
    pub events: u64,
    pub masked: Vec<Masked>,
}

impl ExportReport {
    /// How many distinct events had something masked.
    pub fn masked_events(&self) -> usize {
        let mut seqs: Vec<Seq> = self.masked.iter().map(|m| m.seq).collect();
        seqs.dedup();
        seqs.len()
    }
}

/// Writes the session's events to `out` as JSONL, redacted if `redact`
/// (see the module doc for the policy).
pub fn export(paths: &SessionPaths, redact: bool, out: &mut dyn Write) -> Result<ExportReport> {
    let mut report = ExportReport::default();
    let mut sensitive_calls = HashSet::new();
    crate::fsutil::refuse_symlink(paths.dir())?;
    let mut scanner = Scanner::open(&paths.events(), LogPosition::START)?;
    while let Some((_, rec)) = scanner.next_record()? {
        let mut obj = Map::new();
        obj.insert("seq".into(), rec.seq.into());
        obj.insert("id".into(), rec.id.clone().into());
        obj.insert("ts".into(), rec.ts.clone().into());
        let fields = match &rec.body {
            Body::Known(event) => serde_json::to_value(event).expect("events serialize"),
            Body::Ignorable { type_name, fields } => {
                let mut f = fields.clone();
                if let Value::Object(m) = &mut f {
                    m.insert("type".into(), type_name.clone().into());
                }
                f
            }
        };
        if let Value::Object(m) = fields {
            obj.extend(m);
        }
        if redact {
            let call_id = obj.get("call_id").and_then(Value::as_str);
            let reason = if rec.redaction == Redaction::Sensitive {
                if obj.get("type").and_then(Value::as_str) == Some("tool_call") {
                    sensitive_calls.extend(call_id.map(str::to_string));
                }
                Some(Reason::Sensitive)
            } else if call_id.is_some_and(|c| sensitive_calls.contains(c)) {
                Some(Reason::SensitiveCall)
            } else {
                None
            };
            if let Some(reason) = reason {
                for field in PAYLOAD_FIELDS {
                    if let Some(v) = obj.get_mut(*field) {
                        if !v.is_null() {
                            *v = Value::String(MASK.into());
                            report.masked.push(Masked {
                                seq: rec.seq,
                                path: field.to_string(),
                                reason: reason.clone(),
                            });
                        }
                    }
                }
            }
            redact_object(&mut obj, rec.seq, &mut String::new(), &mut report.masked);
        }
        let mut line = serde_json::to_vec(&obj).expect("JSON values serialize");
        line.push(b'\n');
        out.write_all(&line)
            .map_err(Error::io("write export", "<output>"))?;
        report.events += 1;
    }
    Ok(report)
}

/// Whether an object key's name says its value is a secret. The name is
/// split into lowercase words (at `-`, `_`, `.`, spaces and camelCase), so
/// `X-Api-Key`, `apiKey` and `API_KEY` all read `api_key`; a word that says
/// the value is about a secret rather than the secret (`token_count`,
/// `max_tokens`, `password_policy`, `token_url`) keeps it.
pub fn is_secret_key(key: &str) -> bool {
    static SECRET: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(concat!(
            r"password|passwd|passphrase|apikey|privatekey|accesskey|secretkey|credential|authorization",
            r"|(?:^|_)(?:[a-z0-9]*token|[a-z0-9]*secrets?|cookies?|auth|bearer|jwt)(?:_|$)",
            r"|(?:^|_)(?:api|private|access|secret|signing|encryption|master)_key(?:_|$)",
        ))
        .expect("the secret key pattern compiles")
    });
    static ABOUT: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(concat!(
            r"(?:^|_)(?:count|counts|max|min|limit|budget|before|after|len|length|size|usage|used",
            r"|total|num|remaining|ttl|expiry|expires|type|kind|url|uri|endpoint|policy|reset)(?:_|$)",
        ))
        .expect("the not-a-secret pattern compiles")
    });
    let words = key_words(key);
    SECRET.is_match(&words) && !ABOUT.is_match(&words)
}

/// `accessToken` → `access_token`, `X-API-Key` → `x_api_key`.
fn key_words(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let mut out = String::with_capacity(key.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !out.is_empty() && !out.ends_with('_') {
                out.push('_');
            }
            continue;
        }
        let prev = i.checked_sub(1).map(|j| chars[j]);
        let next = chars.get(i + 1).copied();
        let starts_word = c.is_uppercase()
            && prev.is_some_and(|p| {
                p.is_lowercase()
                    || p.is_numeric()
                    || (p.is_uppercase() && next.is_some_and(char::is_lowercase))
            });
        if starts_word && !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// A well-known credential format. The credential is the first capture
/// group without a name that took part in the match, or the whole match;
/// named groups are context (the `name` of a `NAME=value`).
struct Pattern {
    kind: &'static str,
    regex: Regex,
    /// What the regex cannot say: whether this match is a credential.
    accept: fn(&Captures) -> bool,
    /// Indices of the unnamed capture groups.
    secret_groups: Vec<usize>,
}

impl Pattern {
    fn new(kind: &'static str, regex: &str, accept: fn(&Captures) -> bool) -> Pattern {
        let regex = Regex::new(regex).expect("credential patterns compile");
        let secret_groups = regex
            .capture_names()
            .enumerate()
            .skip(1)
            .filter(|(_, name)| name.is_none())
            .map(|(i, _)| i)
            .collect();
        Pattern {
            kind,
            regex,
            accept,
            secret_groups,
        }
    }

    /// Byte ranges of the credentials in `text`.
    fn find(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        self.regex
            .captures_iter(text)
            .filter(|c| (self.accept)(c))
            .filter_map(|c| {
                let m = self
                    .secret_groups
                    .iter()
                    .find_map(|&i| c.get(i))
                    .or_else(|| c.get(0))?;
                let value = m.as_str();
                (!value.is_empty() && !value.starts_with("[redacted")).then(|| m.range())
            })
            .collect()
    }
}

fn any(_: &Captures) -> bool {
    true
}

/// A bearer token looks random: a digit or punctuation, or length.
fn random_looking(c: &Captures) -> bool {
    let token = c.get(1).map_or("", |m| m.as_str());
    token.len() >= 32 || token.bytes().any(|b| !b.is_ascii_alphabetic())
}

/// `NAME=value`, `"name": "value"`, `--name value`: a secret if the name is.
fn secret_name(c: &Captures) -> bool {
    c.name("name").is_some_and(|n| is_secret_key(n.as_str()))
}

static PATTERNS: LazyLock<Vec<Pattern>> = LazyLock::new(|| {
    vec![
        Pattern::new(
            "private key",
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)",
            any,
        ),
        Pattern::new(
            "jwt",
            r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
            any,
        ),
        Pattern::new("anthropic key", r"\bsk-ant-[A-Za-z0-9_-]{20,}", any),
        Pattern::new("openai key", r"\bsk-[A-Za-z0-9_-]{20,}", any),
        Pattern::new(
            "stripe key",
            r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
            any,
        ),
        Pattern::new(
            "github token",
            r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
            any,
        ),
        Pattern::new("aws access key id", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b", any),
        Pattern::new("slack token", r"\bxox[abprs]-[A-Za-z0-9-]{10,}", any),
        Pattern::new("google api key", r"\bAIza[A-Za-z0-9_-]{35}", any),
        Pattern::new(
            "bearer token",
            r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{16,}=*)",
            random_looking,
        ),
        Pattern::new(
            "url password",
            r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]+:([^\s/@]+)@",
            any,
        ),
        Pattern::new(
            "assigned secret",
            r#"(?P<name>[A-Za-z0-9_.-]*[A-Za-z0-9])["']?\s*[:=]\s*(?:"([^"\\\n]*)"|'([^'\n]*)'|(?:(?i:basic|bearer|token|digest)\s+)?([^\s,;&'"}\]]+))"#,
            secret_name,
        ),
        Pattern::new(
            "secret flag",
            r#"(?:^|\s)--(?P<name>[A-Za-z0-9][A-Za-z0-9_-]*)\s+([^\s'"-][^\s'"]*)"#,
            secret_name,
        ),
    ]
});

/// `text` with every credential masked and the kinds found, or `None`.
fn mask_credentials(text: &str) -> Option<(String, Vec<&'static str>)> {
    let mut current: Option<String> = None;
    let mut kinds = Vec::new();
    for pattern in PATTERNS.iter() {
        let source = current.as_deref().unwrap_or(text);
        let found = pattern.find(source);
        if found.is_empty() {
            continue;
        }
        let mut masked = String::with_capacity(source.len());
        let mut at = 0;
        for range in found {
            masked.push_str(&source[at..range.start]);
            masked.push_str(MASK);
            at = range.end;
        }
        masked.push_str(&source[at..]);
        current = Some(masked);
        kinds.push(pattern.kind);
    }
    current.map(|masked| (masked, kinds))
}

/// Appends one key to a JSON path: `.name`, or `["odd key"]` (quoted, cut short).
fn push_key(path: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key.len() <= crate::error::QUOTE_CHARS
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    } else {
        path.push('[');
        path.push_str(&quote(key));
        path.push(']');
    }
}

/// Applies rules 3 and 4 to every value (and key) under `obj`.
fn redact_object(obj: &mut Map<String, Value>, seq: Seq, path: &mut String, out: &mut Vec<Masked>) {
    for (key, mut value) in std::mem::take(obj) {
        let secret = is_secret_key(&key);
        let mut name = match mask_credentials(&key) {
            Some((masked, kinds)) => {
                let mut at = path.clone();
                push_key(&mut at, &masked);
                out.push(Masked {
                    seq,
                    path: at,
                    reason: Reason::Credentials(kinds),
                });
                masked
            }
            None => key,
        };
        while obj.contains_key(&name) {
            name.push('\'');
        }
        let len = path.len();
        push_key(path, &name);
        if secret && !value.is_null() && value.as_str() != Some(MASK) {
            value = Value::String(MASK.into());
            out.push(Masked {
                seq,
                path: path.clone(),
                reason: Reason::SecretKey,
            });
        } else {
            redact_value(&mut value, seq, path, out);
        }
        path.truncate(len);
        obj.insert(name, value);
    }
}

fn redact_value(value: &mut Value, seq: Seq, path: &mut String, out: &mut Vec<Masked>) {
    match value {
        Value::String(s) => {
            if let Some((masked, kinds)) = mask_credentials(s) {
                *s = masked;
                out.push(Masked {
                    seq,
                    path: path.clone(),
                    reason: Reason::Credentials(kinds),
                });
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                redact_value(item, seq, path, out);
                path.truncate(len);
            }
        }
        Value::Object(obj) => redact_object(obj, seq, path, out),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Effect, Event, Redaction, ResultStatus};
    use crate::session::{Session, SessionOptions};
    use serde_json::json;

    fn session(dir: &std::path::Path) -> Session {
        let id = crate::SessionId::new("s").unwrap();
        Session::create(&dir.join("r"), &id, dir, SessionOptions::default()).unwrap()
    }

    fn redacted(s: &Session) -> (String, Vec<String>) {
        let mut out = Vec::new();
        let report = export(s.paths(), true, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines = report.masked.iter().map(Masked::to_string).collect();
        (text, lines)
    }

    #[test]
    fn sensitive_payloads_are_masked_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = session(dir.path());
        s.append(Event::UserMessage {
            parent: None,
            text: "public words".into(),
        })
        .unwrap();
        s.append_redacted(
            Event::UserMessage {
                parent: Some("e1".into()),
                text: "my api key is hunter2".into(),
            },
            Redaction::Sensitive,
        )
        .unwrap();
        let mut out = Vec::new();
        let report = export(s.paths(), true, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(report.events, 3);
        assert!(text.contains("public words"));
        assert!(!text.contains("hunter2"), "{text}");
        assert_eq!(
            report.masked,
            vec![Masked {
                seq: 2,
                path: "text".into(),
                reason: Reason::Sensitive,
            }]
        );
        let mut plain = Vec::new();
        export(s.paths(), false, &mut plain).unwrap();
        assert!(String::from_utf8(plain).unwrap().contains("hunter2"));
    }

    /// The four leaks found in review: the result of a sensitive call, a key
    /// in a plain message, a password argument of an unmarked call; and ids
    /// of sensitive events that must stay so the export can be followed.
    #[test]
    fn results_of_sensitive_calls_secret_keys_and_credentials_are_masked() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = session(dir.path());
        let call = |call_id: &str, args| Event::ToolCall {
            parent: None,
            call_id: call_id.into(),
            tool: "vault".into(),
            args,
            effect: Effect::SideEffect,
            operation_id: Some(format!("op-{call_id}")),
            target: None,
            needs_approval: false,
        };
        s.append_redacted(call("c1", json!({"path": "db"})), Redaction::Sensitive)
            .unwrap();
        s.append(Event::ToolResult {
            parent: None,
            call_id: "c1".into(),
            status: ResultStatus::Ok,
            output: Some(json!("db password is correct-horse")),
            blob: None,
        })
        .unwrap();
        s.append(Event::UserMessage {
            parent: None,
            text: "use sk-abcdefghijklmnopqrstuvwxyz0123 please".into(),
        })
        .unwrap();
        s.append(call(
            "c2",
            json!({"user": "ann", "password": "hunter2", "deep": [{"Api-Key": 12345}]}),
        ))
        .unwrap();
        let (text, report) = redacted(&s);
        for secret in [
            "correct-horse",
            "sk-abcdefghijklmnopqrstuvwxyz0123",
            "hunter2",
            "12345",
        ] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        assert!(text.contains("use [redacted] please"), "{text}");
        assert!(text.contains(r#""user":"ann""#), "{text}");
        for (id, times) in [
            (r#""call_id":"c1""#, 2),
            (r#""operation_id":"op-c1""#, 1),
            (r#""call_id":"c2""#, 1),
        ] {
            assert_eq!(text.matches(id).count(), times, "{id}: {text}");
        }
        assert_eq!(
            report,
            [
                "seq 1 args [sensitive event]",
                "seq 2 output [sensitive call]",
                "seq 3 text [openai key]",
                "seq 4 args.deep[0].Api-Key",
                "seq 4 args.password",
            ]
        );
    }

    const SECRETS: &[(&str, &str)] = &[
        ("openai key", "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"),
        ("anthropic key", "sk-ant-api03-Zx9Cv8Bn7Mm6Ll5Kk4Jj3Hh2Gg1Ff0"),
        ("github token", "ghp_0123456789abcdefghijABCDEFGHIJklmnop"),
        ("github token", "gho_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8"),
        ("github token", "ghs_L1k2J3h4G5f6D7s8A9p0O1i2U3y4T5r6E7w8"),
        ("github token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv"),
        ("aws access key id", "AKIAIOSFODNN7EXAMPLE"),
        ("aws access key id", "ASIAJEXAMPLEXEG2JICE"),
        ("slack token", "xoxb-123456789012-1234567890123-AbCdEfGhIjKl"),
        ("slack token", "xoxp-987654321098-abcdefABCDEF"),
        ("google api key", "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"),
        ("stripe key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
        ("stripe key", "rk_live_51H8xYzAbCdEfGhIjKlMnOp"),
        (
            "jwt",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        ),
        ("bearer token", "Q2hhbmdlTWUtVG9rZW4tMTIzNDU2Nzg5"),
        ("url password", "s3cr3t-pw"),
        ("assigned secret", "envpass-9f8e7d"),
        ("secret flag", "flagpass-1a2b3c"),
    ];

    const PEM_BODY: &str = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7";

    /// Every kind of secret, in every kind of place, must be gone from the
    /// export bytes; innocent text that merely resembles one must survive.
    #[test]
    fn corpus_no_secret_survives_and_innocent_text_does() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = session(dir.path());
        let innocent = [
            "the skeleton key",
            "tokenizer",
            "sk-",
            "our password reset policy changed in May",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "123e4567-e89b-12d3-a456-426614174000",
            "the bearer of bad news",
            "max_tokens=1024",
            "ask-anyone-about-it",
        ];
        for (i, (_, secret)) in SECRETS.iter().enumerate() {
            let text = match i % 4 {
                0 => format!("here it is: {secret} (keep it safe)"),
                1 => secret.to_string(),
                2 => format!("line one\n{secret}\nline three"),
                _ => format!("prefix ({secret})"),
            };
            let text = match SECRETS[i].0 {
                "bearer token" => format!("Authorization: Bearer {secret}"),
                "url password" => format!("clone https://ann:{secret}@git.example.com/x.git"),
                "assigned secret" => format!("export DB_PASSWORD={secret} && run"),
                "secret flag" => format!("mysql --password {secret} -h db"),
                _ => text,
            };
            s.append(Event::AssistantMessage { parent: None, text })
                .unwrap();
        }
        let pem =
            format!("-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----\nafter");
        let args = json!({
            "headers": {"Authorization": "Basic YW5uOmh1bnRlcjI=", "X-Api-Key": "xk-1", "Cookie": "sid=42"},
            "accessToken": "at-value-1",
            "client_secret": "cs-value-1",
            "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "session-token": "st-value-1",
            "private_key": pem,
            "nested": [{"credentials": {"user": "u", "pw": "pw-value-1"}}, {"passwd": "pd-value-1"}],
            "note": innocent[3],
            "tokenizer": innocent[1],
            "max_tokens": 1024,
            "digest": innocent[4],
            "request_id": innocent[5],
        });
        s.append(Event::ToolCall {
            parent: None,
            call_id: "call-1".into(),
            tool: "http".into(),
            args,
            effect: Effect::None,
            operation_id: None,
            target: None,
            needs_approval: false,
        })
        .unwrap();
        s.append(Event::ToolResult {
            parent: None,
            call_id: "call-1".into(),
            status: ResultStatus::Ok,
            output: Some(json!({"body": pem.replace("PRIVATE KEY", "RSA PRIVATE KEY"), "truncated": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA"})),
            blob: None,
        })
        .unwrap();
        for text in innocent {
            s.append(Event::UserMessage {
                parent: None,
                text: text.into(),
            })
            .unwrap();
        }
        let (text, report) = redacted(&s);
        let values = [
            "YW5uOmh1bnRlcjI",
            "xk-1",
            "sid=42",
            "at-value-1",
            "cs-value-1",
            "wJalrXUtnFEMI",
            "st-value-1",
            PEM_BODY,
            "b3BlbnNzaC1rZXktdjEAAAAA",
            "pw-value-1",
            "pd-value-1",
        ];
        for secret in SECRETS.iter().map(|(_, s)| *s).chain(values) {
            assert!(!text.contains(secret), "{secret} leaked");
            assert!(
                !report.join("\n").contains(secret),
                "{secret} in the report"
            );
        }
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            assert!(v["seq"].is_u64() && v["type"].is_string(), "{line}");
        }
        for innocent in innocent {
            let exact = serde_json::to_string(innocent).unwrap();
            assert!(
                text.contains(&format!("\"text\":{exact}")),
                "{innocent} lost"
            );
        }
        assert!(text.contains(r#""tokenizer":"tokenizer""#), "{text}");
        assert!(text.contains(r#""max_tokens":1024"#), "{text}");
        assert!(text.contains(r#""call_id":"call-1""#), "{text}");
        assert!(
            text.contains("\\nafter"),
            "the text after a PEM block stays"
        );
        for (i, (kind, _)) in SECRETS.iter().enumerate() {
            let line = format!("seq {} text [{kind}]", i + 1);
            assert!(report.contains(&line), "{line} not in {report:#?}");
        }
        let call = SECRETS.len() + 1;
        for path in [
            "args.headers.Authorization",
            "args.headers.X-Api-Key",
            "args.headers.Cookie",
            "args.accessToken",
            "args.client_secret",
            "args.AWS_SECRET_ACCESS_KEY",
            "args.session-token",
            "args.private_key",
            "args.nested[0].credentials",
            "args.nested[1].passwd",
        ] {
            let line = format!("seq {call} {path}");
            assert!(report.contains(&line), "{line} not in {report:#?}");
        }
        assert!(report.contains(&format!("seq {} output.body [private key]", call + 1)));
        assert!(report.contains(&format!("seq {} output.truncated [private key]", call + 1)));
        let innocent_seqs = call + 2..call + 2 + innocent.len();
        assert!(
            report.iter().all(|l| !innocent_seqs
                .clone()
                .any(|s| l.starts_with(&format!("seq {s} ")))),
            "innocent text was masked: {report:#?}"
        );
    }

    #[test]
    fn secret_key_names() {
        for key in [
            "password",
            "PASSWORD",
            "db_password",
            "userPassword",
            "passwd",
            "api_key",
            "apiKey",
            "API-KEY",
            "x-api-key",
            "apikey",
            "token",
            "access_token",
            "accessToken",
            "idToken",
            "Authorization",
            "cookie",
            "Set-Cookie",
            "private_key",
            "privateKey",
            "client_secret",
            "clientSecret",
            "aws_access_key_id",
            "AWS_SECRET_ACCESS_KEY",
            "credentials",
            "session_token",
            "X-Amz-Security-Token",
            "auth",
            "passphrase",
            "secret",
        ] {
            assert!(is_secret_key(key), "{key} should be secret");
        }
        for key in [
            "tokenizer",
            "max_tokens",
            "tokens_before",
            "input_tokens",
            "token_count",
            "author",
            "oauth_provider",
            "key",
            "monkey",
            "session_id",
            "call_id",
            "operation_id",
            "password_policy",
            "token_type",
            "token_url",
            "keyboard",
            "secretary_name_len",
        ] {
            assert!(!is_secret_key(key), "{key} should not be secret");
        }
    }

    #[test]
    fn odd_keys_are_quoted_in_the_report_and_never_leak() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = session(dir.path());
        let long = "k".repeat(500);
        s.append(Event::ToolCall {
            parent: None,
            call_id: "c".into(),
            tool: "t".into(),
            args: json!({
                "a b\npassword": "v1-secret",
                "sk-abcdefghijklmnopqrstuvwx": "v2",
                long.clone(): {"token": "v3-secret"},
            }),
            effect: Effect::None,
            operation_id: None,
            target: None,
            needs_approval: false,
        })
        .unwrap();
        let (text, report) = redacted(&s);
        assert!(
            !text.contains("v1-secret") && !text.contains("v3-secret"),
            "{text}"
        );
        assert!(!text.contains("sk-abcdefghijklmnopqrstuvwx"), "{text}");
        let joined = report.join("\n");
        assert!(!joined.contains("sk-abcdefghijklmnopqrstuvwx"), "{joined}");
        assert!(
            report.contains(&r#"seq 1 args["a b\npassword"]"#.to_string()),
            "{joined}"
        );
        assert!(
            report.contains(&"seq 1 args[\"[redacted]\"] [openai key]".to_string()),
            "{joined}"
        );
        assert!(
            report.iter().all(|l| l.len() < 200 && !l.contains('\n')),
            "{joined}"
        );
    }
}
