//! Log framing: the bytes of one line, and how a line is checked on the way back.
//!
//! A line is one JSON object followed by `\n`:
//!
//! ```text
//! {"crc":"d1f07035","seq":0,"id":"e0","ts":"2026-11-29T08:00:00.000Z","type":"run_started","run_id":"r1"}
//! ```
//!
//! `crc` always comes first and is the CRC32C (hex, 8 digits) of the same
//! object without it, i.e. of the bytes `{` + everything after `"crc":"XXXXXXXX",`.
//! The fixed position makes the check cheap and unambiguous, and the line
//! stays plain JSON for any other reader. This module never touches files.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{Body, Event, Record, Redaction, Seq};

/// The largest line the store writes or accepts, newline included. Larger
/// payloads belong in blobs.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

const CRC_PREFIX: &[u8] = b"{\"crc\":\"";
/// The bytes every line starts with.
pub const LINE_START: &[u8] = CRC_PREFIX;
/// `{"crc":"` + 8 hex digits + `",`
const CRC_HEADER_LEN: usize = CRC_PREFIX.len() + 8 + 2;

/// Why a line could not be read back as an event.
#[derive(Debug, Clone, PartialEq)]
pub enum LineError {
    /// The bytes are not a framed event line (zeros, garbage, a fragment).
    Frame(String),
    /// The checksum does not match the content.
    Checksum { stored: u32, computed: u32 },
    /// Checksum fine but the JSON does not fit the schema.
    Schema(String),
    /// A type this build does not know, on a line that is not ignorable.
    UnknownType(String),
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineError::Frame(why) => write!(f, "not an event line: {why}"),
            LineError::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch: line says {stored:08x}, content hashes to {computed:08x}"
            ),
            LineError::Schema(why) => write!(f, "checksum ok but fields do not fit: {why}"),
            LineError::UnknownType(t) => write!(f, "unknown event type {t:?}"),
        }
    }
}

#[derive(Serialize)]
struct OutLine<'a> {
    seq: Seq,
    id: &'a str,
    ts: &'a str,
    #[serde(skip_serializing_if = "is_public")]
    redaction: Redaction,
    #[serde(flatten)]
    event: &'a Event,
}

fn is_public(r: &Redaction) -> bool {
    *r == Redaction::Public
}

#[derive(Deserialize)]
struct InLine {
    /// Verified before the line is decoded; taken here so that the event,
    /// whose schema is closed, is not given it as a field of its own.
    #[serde(rename = "crc")]
    _crc: serde::de::IgnoredAny,
    seq: Seq,
    id: String,
    ts: String,
    #[serde(default)]
    redaction: Redaction,
    #[serde(flatten)]
    event: Event,
}

/// Encodes one event as a complete line (with its trailing newline) into `out`.
pub fn encode_into(
    out: &mut Vec<u8>,
    seq: Seq,
    id: &str,
    ts: &str,
    redaction: Redaction,
    event: &Event,
) {
    out.clear();
    out.extend_from_slice(CRC_PREFIX);
    out.extend_from_slice(b"00000000\",");
    let body_start = out.len();
    let line = OutLine {
        seq,
        id,
        ts,
        redaction,
        event,
    };
    serde_json::to_writer(&mut *out, &line).expect("serializing an Event to memory cannot fail");
    // Drop the body's own `{`: the header already opened the object.
    out.remove(body_start);
    let crc = crc32c::crc32c_append(crc32c::crc32c(b"{"), &out[body_start..]);
    write_hex(&mut out[CRC_PREFIX.len()..CRC_PREFIX.len() + 8], crc);
    out.push(b'\n');
}

/// Frames any serialized JSON object the way event lines are framed: the
/// CRC32C of the object goes first, as `"crc"`. Used for snapshots.
pub fn frame_object(object_json: &[u8]) -> Vec<u8> {
    assert!(
        object_json.len() > 2 && object_json[0] == b'{' && object_json[1] != b'}',
        "frame_object takes a non-empty JSON object"
    );
    let mut out = Vec::with_capacity(object_json.len() + CRC_HEADER_LEN);
    out.extend_from_slice(CRC_PREFIX);
    out.extend_from_slice(b"00000000\",");
    out.extend_from_slice(&object_json[1..]);
    let crc = crc32c::crc32c(object_json);
    write_hex(&mut out[CRC_PREFIX.len()..CRC_PREFIX.len() + 8], crc);
    out
}

fn write_hex(dst: &mut [u8], v: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, slot) in dst.iter_mut().enumerate() {
        *slot = HEX[((v >> (28 - 4 * i)) & 0xf) as usize];
    }
}

fn parse_hex(src: &[u8]) -> Option<u32> {
    let mut v: u32 = 0;
    for &b in src {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        v = (v << 4) | d as u32;
    }
    Some(v)
}

/// Checks the frame and checksum of `line` (without its newline).
pub fn verify_checksum(line: &[u8]) -> Result<(), LineError> {
    if line.len() < CRC_HEADER_LEN + 1 || !line.starts_with(CRC_PREFIX) {
        return Err(LineError::Frame(describe_start(line)));
    }
    let stored = parse_hex(&line[CRC_PREFIX.len()..CRC_PREFIX.len() + 8])
        .ok_or_else(|| LineError::Frame("crc is not 8 lowercase hex digits".into()))?;
    if &line[CRC_PREFIX.len() + 8..CRC_HEADER_LEN] != b"\"," {
        return Err(LineError::Frame(
            "crc field is not followed by '\",'".into(),
        ));
    }
    let computed = crc32c::crc32c_append(crc32c::crc32c(b"{"), &line[CRC_HEADER_LEN..]);
    if stored != computed {
        return Err(LineError::Checksum { stored, computed });
    }
    Ok(())
}

/// What follows `{"crc":"XXXXXXXX",` in a line whose frame was verified.
pub fn after_checksum(line: &[u8]) -> &[u8] {
    &line[CRC_HEADER_LEN..]
}

fn describe_start(line: &[u8]) -> String {
    if line.is_empty() {
        return "empty line".into();
    }
    if line.iter().all(|&b| b == 0) {
        return format!("{} zero byte(s)", line.len());
    }
    let shown: String = String::from_utf8_lossy(&line[..line.len().min(24)])
        .chars()
        .map(|c| if c.is_control() { '.' } else { c })
        .collect();
    format!("does not start with {{\"crc\":\" (starts with {shown:?})")
}

/// The name of a frame's event type: one of [`Event::TYPE_NAMES`], or the
/// type of an ignorable line this build does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeName {
    Known(&'static str),
    Ignorable(String),
}

impl TypeName {
    pub fn as_str(&self) -> &str {
        match self {
            TypeName::Known(t) => t,
            TypeName::Ignorable(t) => t,
        }
    }
}

/// What checking a frame reads of a line: its checksum verified, its
/// envelope read, its event not built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub seq: Seq,
    /// The seq its `id` names (`None`: the id is not `e<digits>`).
    pub id_seq: Option<Seq>,
    pub type_name: TypeName,
}

/// The envelope as serde reads it when the line is not laid out as
/// [`encode_into`] writes it (other key order, escapes, whitespace).
#[derive(Deserialize)]
struct Envelope<'a> {
    seq: Seq,
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[serde(rename = "type", borrow)]
    type_name: std::borrow::Cow<'a, str>,
}

/// Checks the frame of `line` (without its newline): the checksum, then
/// `seq`, `id` and `type`, without building the event. Fails with the error
/// [`decode`] gives for the same line wherever the envelope is bad or the
/// type unknown; a known type's fields are not checked here (that is
/// [`decode_verified`]'s work, done where an event is needed).
pub fn decode_header(line: &[u8]) -> Result<Header, LineError> {
    verify_checksum(line)?;
    let (seq, id_seq, type_name) = match written_envelope(&line[CRC_HEADER_LEN..]) {
        Some((seq, id, t)) => (seq, crate::event::seq_of_event_id(id), t),
        None => match serde_json::from_slice::<Envelope<'_>>(line) {
            Ok(e) => (
                e.seq,
                crate::event::seq_of_event_id(&e.id),
                known_type(&e.type_name).map_or(
                    TypeName::Ignorable(e.type_name.into_owned()),
                    TypeName::Known,
                ),
            ),
            // The full decode says exactly what is wrong (or, for a shape
            // serde's envelope cannot take, reads it after all).
            Err(_) => return decode_verified(line).map(|rec| header_of(&rec)),
        },
    };
    match type_name {
        TypeName::Known(_) => Ok(Header {
            seq,
            id_seq,
            type_name,
        }),
        // Unknown: refused unless it marks itself ignorable, as decode says.
        TypeName::Ignorable(_) => decode_verified(line).map(|rec| header_of(&rec)),
    }
}

fn header_of(rec: &Record) -> Header {
    let type_name = rec.body.type_name();
    Header {
        seq: rec.seq,
        id_seq: crate::event::seq_of_event_id(&rec.id),
        type_name: known_type(type_name)
            .map_or(TypeName::Ignorable(type_name.to_string()), TypeName::Known),
    }
}

fn known_type(name: &str) -> Option<&'static str> {
    Event::TYPE_NAMES.iter().copied().find(|t| *t == name)
}

/// The envelope of a line laid out exactly as [`encode_into`] writes it,
/// read by position: `body` is what follows `{"crc":"XXXXXXXX",`. `None` for
/// any other layout (then serde reads it): every string must be free of
/// escapes, and the number a plain JSON integer.
fn written_envelope(body: &[u8]) -> Option<(Seq, &str, TypeName)> {
    let rest = body.strip_prefix(b"\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 || (digits > 1 && rest[0] == b'0') {
        return None;
    }
    let seq: Seq = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let rest = rest[digits..].strip_prefix(b",\"id\":")?;
    let (id, rest) = plain_string(rest)?;
    let rest = rest.strip_prefix(b",\"ts\":")?;
    let (_, mut rest) = plain_string(rest)?;
    if let Some(r) = rest.strip_prefix(b",\"redaction\":") {
        rest = plain_string(r)?.1;
    }
    let rest = rest.strip_prefix(b",\"type\":")?;
    let (t, rest) = plain_string(rest)?;
    if !matches!(rest.first(), Some(b',' | b'}')) {
        return None;
    }
    Some((seq, id, TypeName::Known(known_type(t)?)))
}

/// A JSON string with no escapes at the start of `s`: its text and the rest.
fn plain_string(s: &[u8]) -> Option<(&str, &[u8])> {
    let s = s.strip_prefix(b"\"")?;
    let end = s
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
    if s[end] != b'"' {
        return None;
    }
    Some((std::str::from_utf8(&s[..end]).ok()?, &s[end + 1..]))
}

/// Verifies and decodes one line (without its newline).
pub fn decode(line: &[u8]) -> Result<Record, LineError> {
    verify_checksum(line)?;
    decode_verified(line)
}

/// Decodes one line (without its newline) whose checksum was verified.
pub fn decode_verified(line: &[u8]) -> Result<Record, LineError> {
    match serde_json::from_slice::<InLine>(line) {
        Ok(l) => Ok(Record {
            seq: l.seq,
            id: l.id,
            ts: l.ts,
            redaction: l.redaction,
            body: Body::Known(l.event),
        }),
        Err(typed_err) => decode_untyped(line, typed_err),
    }
}

/// Slow path: the typed parse failed. Tell an unknown (maybe ignorable) type
/// apart from a malformed known one.
fn decode_untyped(line: &[u8], typed_err: serde_json::Error) -> Result<Record, LineError> {
    let mut obj = match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Err(LineError::Schema("not a JSON object".into())),
        Err(e) => return Err(LineError::Schema(e.to_string())),
    };
    let type_name = match obj.get("type") {
        Some(Value::String(t)) => t.clone(),
        _ => return Err(LineError::Schema("missing string field \"type\"".into())),
    };
    if Event::TYPE_NAMES.contains(&type_name.as_str()) {
        return Err(LineError::Schema(typed_err.to_string()));
    }
    if obj.get("ignorable") != Some(&Value::Bool(true)) {
        return Err(LineError::UnknownType(type_name));
    }
    let seq = obj
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or_else(|| LineError::Schema("missing integer field \"seq\"".into()))?;
    let id = obj
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| LineError::Schema("missing string field \"id\"".into()))?
        .to_string();
    let ts = obj
        .get("ts")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    for envelope in ["crc", "seq", "id", "ts", "type"] {
        obj.remove(envelope);
    }
    Ok(Record {
        seq,
        id,
        ts,
        redaction: Redaction::Sensitive,
        body: Body::Ignorable {
            type_name,
            fields: Value::Object(obj),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: Seq, event: &Event) -> Vec<u8> {
        let mut out = Vec::new();
        encode_into(
            &mut out,
            seq,
            &crate::event::event_id(seq),
            "2026-11-29T08:00:00.000Z",
            Redaction::Public,
            event,
        );
        out
    }

    #[test]
    fn round_trips_and_line_format_is_stable() {
        let ev = Event::RunStarted {
            run_id: "r1".into(),
        };
        let l = line(0, &ev);
        insta::assert_snapshot!(String::from_utf8(l.clone()).unwrap(), @r#"{"crc":"d1f07035","seq":0,"id":"e0","ts":"2026-11-29T08:00:00.000Z","type":"run_started","run_id":"r1"}
"#);
        let rec = decode(&l[..l.len() - 1]).unwrap();
        assert_eq!(rec.seq, 0);
        assert_eq!(rec.event(), Some(&ev));
        // The line is plain JSON for any other reader.
        let v: Value = serde_json::from_slice(&l).unwrap();
        assert_eq!(v["type"], "run_started");
    }

    /// One line of every event type, as written: the on-disk format is a
    /// promise to every reader, so any change to it must show up here.
    #[test]
    fn line_format_of_every_event_type() {
        use crate::event::*;
        let p = || Some("e1".to_string());
        let events = vec![
            Event::SessionCreated {
                session_id: "s1".into(),
                schema_version: SCHEMA_VERSION,
                workspace: "/work/repo".into(),
            },
            Event::RunStarted {
                run_id: "r1".into(),
            },
            Event::RequestHeader {
                run_id: "r1".into(),
                model: "model-1".into(),
                system_prompt_hash: "sp0".into(),
                tools_hash: "t0".into(),
            },
            Event::UserMessage {
                parent: None,
                text: "fix \"it\"\n\u{e9}".into(),
            },
            Event::AssistantMessage {
                parent: p(),
                text: "ok".into(),
            },
            Event::ToolCall {
                parent: p(),
                call_id: "c1".into(),
                tool: "write_file".into(),
                args: serde_json::json!({"path": "a.txt"}),
                effect: Effect::SideEffect,
                operation_id: Some("op-1".into()),
                target: Some("a.txt".into()),
                needs_approval: true,
            },
            Event::ToolStarted {
                call_id: "c1".into(),
            },
            Event::EffectCommitted {
                call_id: "c1".into(),
                operation_id: "op-1".into(),
                external_ref: "inode:42".into(),
            },
            Event::ToolResult {
                parent: p(),
                call_id: "c1".into(),
                status: ResultStatus::Error,
                output: None,
                blob: Some(BlobRef {
                    digest: "ab".into(),
                    size: 9,
                }),
            },
            Event::ToolRecovery {
                call_id: "c1".into(),
                status: RecoveryStatus::Uncertain,
                phase: Phase::Started,
            },
            Event::ToolReconciled {
                call_id: "c1".into(),
                outcome: ReconcileOutcome::Applied,
                evidence: "file exists".into(),
            },
            Event::PlanUpdated {
                goal: "g".into(),
                steps: vec![
                    PlanStep {
                        id: "1".into(),
                        title: "a".into(),
                        status: StepStatus::Done,
                    },
                    PlanStep {
                        id: "2".into(),
                        title: "b".into(),
                        status: StepStatus::Blocked("waiting".into()),
                    },
                ],
            },
            Event::Compaction {
                parent: p(),
                summary: "so far".into(),
                first_kept_id: "e1".into(),
                tokens_before: 1234,
            },
            Event::LeafMoved { leaf: "e1".into() },
            Event::Approval {
                call_id: "c1".into(),
                decision: Decision::Denied,
            },
            Event::RunFinished {
                run_id: "r1".into(),
                status: RunStatus::Completed,
            },
            Event::RunInterrupted {
                run_id: "r1".into(),
            },
            Event::WorkspaceRebound {
                from: "/a".into(),
                to: "/b".into(),
            },
            Event::TailQuarantined {
                file: "events.jsonl.torn-812".into(),
                offset: 812,
                len: 40,
                reason: "the last line has no newline".into(),
            },
        ];
        let mut covered: Vec<&str> = events.iter().map(Event::type_name).collect();
        covered.sort_unstable();
        let mut all = Event::TYPE_NAMES.to_vec();
        all.sort_unstable();
        assert_eq!(covered, all, "every type has a line in the snapshot");
        let mut text = String::new();
        for (seq, ev) in events.iter().enumerate() {
            let redaction = if seq == 3 {
                Redaction::Sensitive
            } else {
                Redaction::Public
            };
            let mut out = Vec::new();
            let seq = seq as Seq;
            let id = crate::event::event_id(seq);
            encode_into(
                &mut out,
                seq,
                &id,
                "2026-11-29T08:00:00.000Z",
                redaction,
                ev,
            );
            let rec = decode(&out[..out.len() - 1]).unwrap();
            assert_eq!(rec.event(), Some(ev));
            assert_eq!(rec.redaction, redaction);
            text.push_str(std::str::from_utf8(&out).unwrap());
        }
        insta::assert_snapshot!("line_format", text);
    }

    #[test]
    fn any_flipped_byte_is_detected() {
        let l = line(
            7,
            &Event::UserMessage {
                parent: Some("e6".into()),
                text: "fix the failing test".into(),
            },
        );
        let body = &l[..l.len() - 1];
        for i in 0..body.len() {
            let mut bad = body.to_vec();
            bad[i] ^= 0x20;
            assert!(decode(&bad).is_err(), "flip at {i} went unnoticed");
        }
    }

    #[test]
    fn unknown_types_are_refused_unless_ignorable() {
        let mk = |extra: &str| {
            let body =
                format!(r#"{{"seq":3,"id":"e3","ts":"t","type":"from_the_future","x":1{extra}}}"#);
            let crc = crc32c::crc32c(body.as_bytes());
            format!("{{\"crc\":\"{crc:08x}\",{}", &body[1..]).into_bytes()
        };
        assert_eq!(
            decode(&mk("")).unwrap_err(),
            LineError::UnknownType("from_the_future".into())
        );
        let rec = decode(&mk(r#","ignorable":true"#)).unwrap();
        assert_eq!(rec.seq, 3);
        assert_eq!(rec.body.type_name(), "from_the_future");
    }

    /// Frames `body` (a JSON object) the way the store does, whatever its layout.
    fn framed(body: &str) -> Vec<u8> {
        frame_object(body.as_bytes())
    }

    #[test]
    fn the_header_agrees_with_the_full_decode_whatever_the_layout() {
        let written = line(
            4,
            &Event::UserMessage {
                parent: None,
                text: "a \"quoted\" text".into(),
            },
        );
        let written = &written[..written.len() - 1];
        assert!(written_envelope(after_checksum(written)).is_some());
        let layouts = [
            // Other key order, whitespace, an escaped type and id: serde reads them.
            r#"{"type":"run_started","run_id":"r","ts":"t","id":"e4","seq":4}"#,
            r#"{ "seq" : 4, "id":"e4", "ts":"t", "type":"run_started", "run_id":"r"}"#,
            r#"{"seq":4,"id":"\u00654","ts":"t","type":"run\u005fstarted","run_id":"r"}"#,
            r#"{"seq":4,"id":"e4","ts":"t","redaction":"sensitive","type":"run_started","run_id":"r"}"#,
            // Unknown but ignorable; the id naming another seq.
            r#"{"seq":4,"id":"e4","ts":"t","type":"from_the_future","ignorable":true}"#,
            r#"{"seq":4,"id":"e5","ts":"t","type":"run_started","run_id":"r"}"#,
        ];
        let mut lines: Vec<Vec<u8>> = vec![written.to_vec()];
        lines.extend(layouts.iter().map(|b| framed(b)));
        for l in &lines {
            let rec = decode(l).unwrap();
            assert_eq!(
                decode_header(l).unwrap(),
                header_of(&rec),
                "{}",
                String::from_utf8_lossy(l)
            );
        }
    }

    #[test]
    fn a_bad_envelope_fails_the_header_as_it_fails_the_decode() {
        for body in [
            r#"{"seq":"4","id":"e4","ts":"t","type":"run_started","run_id":"r"}"#,
            r#"{"seq":04,"id":"e4","ts":"t","type":"run_started","run_id":"r"}"#,
            r#"{"seq":4,"id":"e4","ts":"t","run_id":"r"}"#,
            r#"{"seq":4,"seq":4,"id":"e4","ts":"t","type":"run_started","run_id":"r"}"#,
            r#"{"seq":4,"id":"e4","ts":"t","type":"from_the_future"}"#,
            "[1,2]",
        ] {
            let l = if body.starts_with('{') {
                framed(body)
            } else {
                let crc = crc32c::crc32c(body.as_bytes());
                format!("{{\"crc\":\"{crc:08x}\",{body}").into_bytes()
            };
            let full = decode(&l).expect_err(body);
            assert_eq!(decode_header(&l).expect_err(body), full, "{body}");
        }
        // Fields are the full decode's to check, not the header's.
        let l = framed(r#"{"seq":4,"id":"e4","ts":"t","type":"run_started"}"#);
        assert!(matches!(decode(&l), Err(LineError::Schema(_))));
        assert_eq!(
            decode_header(&l).unwrap().type_name,
            TypeName::Known("run_started")
        );
    }

    #[test]
    fn a_stored_line_with_a_field_the_schema_does_not_know_does_not_fit() {
        for body in [
            r#"{"seq":4,"id":"e4","ts":"t","type":"run_started","run_id":"r","bogus":1}"#,
            r#"{"seq":4,"id":"e4","ts":"t","type":"plan_updated","goal":"g","steps":[{"id":"1","title":"a","status":"done","bogus":1}]}"#,
        ] {
            match decode(&framed(body)) {
                Err(LineError::Schema(why)) => {
                    assert!(why.contains("unknown field `bogus`"), "{why}")
                }
                other => panic!("{body}: {other:?}"),
            }
        }
        // `ignorable` is for types this build does not know, not for its own.
        let l = framed(
            r#"{"seq":4,"id":"e4","ts":"t","type":"run_started","run_id":"r","ignorable":true}"#,
        );
        assert!(matches!(decode(&l), Err(LineError::Schema(_))));
    }

    #[test]
    fn zeros_and_fragments_are_frame_errors() {
        assert!(matches!(decode(&[0; 40]), Err(LineError::Frame(_))));
        let l = line(1, &Event::RunStarted { run_id: "r".into() });
        assert!(decode(&l[..20]).is_err());
    }
}
