//! Export: a shareable JSONL copy of a session, optionally redacted.
//!
//! Each output line is the event as plain JSON (`seq`, `id`, `ts`, `type`,
//! fields; no checksum: an export is a copy for people, not a log to
//! append to). With redaction, every event marked `sensitive` has its
//! payload fields replaced by `"[redacted]"`, and the report says which
//! fields of which events were masked. The session itself is only read.

use std::io::Write;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::event::{Body, Redaction, Seq};
use crate::layout::SessionPaths;
use crate::scan::{LogPosition, Scanner};

/// Fields that carry payload (what a user typed, what a tool saw or did).
pub const PAYLOAD_FIELDS: &[&str] = &[
    "text",
    "args",
    "output",
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

/// One masked event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Masked {
    pub seq: Seq,
    pub fields: Vec<String>,
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExportReport {
    pub events: u64,
    pub masked: Vec<Masked>,
}

/// Writes the session's events to `out` as JSONL, masking sensitive payloads if `redact`.
pub fn export(paths: &SessionPaths, redact: bool, out: &mut dyn Write) -> Result<ExportReport> {
    let mut report = ExportReport::default();
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
        if redact && rec.redaction == Redaction::Sensitive {
            let mut masked = Vec::new();
            for field in PAYLOAD_FIELDS {
                if let Some(v) = obj.get_mut(*field) {
                    if !v.is_null() {
                        *v = Value::String(MASK.into());
                        masked.push(field.to_string());
                    }
                }
            }
            if !masked.is_empty() {
                report.masked.push(Masked {
                    seq: rec.seq,
                    fields: masked,
                });
            }
        }
        serde_json::to_writer(&mut *out, &obj).expect("JSON values serialize");
        out.write_all(b"\n")
            .map_err(Error::io("write export", "<output>"))?;
        report.events += 1;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, Redaction};
    use crate::session::{Session, SessionOptions};

    #[test]
    fn sensitive_payloads_are_masked_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let id = crate::SessionId::new("s").unwrap();
        let mut s = Session::create(
            &dir.path().join("r"),
            &id,
            dir.path(),
            SessionOptions::default(),
        )
        .unwrap();
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
                fields: vec!["text".into()]
            }]
        );
        let mut plain = Vec::new();
        export(s.paths(), false, &mut plain).unwrap();
        assert!(String::from_utf8(plain).unwrap().contains("hunter2"));
    }
}
