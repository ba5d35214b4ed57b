//! Reading one reply line: the checks every reply gets, whatever request
//! it answers (JSON, an object, the request's id, exactly one of `ok` and
//! `error`, the operation's shape), each failure as the problem it is.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Problem, StdoutLine};
use agentchaos_protocol::Refusal;

pub(super) type LineProblem = Box<dyn FnOnce(StdoutLine) -> Problem>;

/// Checks one reply line against request `id`: the body, a refusal, or what is wrong.
pub(super) fn parse_reply<T: DeserializeOwned>(
    line: &StdoutLine,
    id: u64,
) -> Result<Result<T, Refusal>, LineProblem> {
    let value: Value = serde_json::from_str(&line.text).map_err(|e| -> LineProblem {
        let reason = e.to_string();
        Box::new(move |line| Problem::NotJson { line, reason })
    })?;
    let shape =
        |reason: String| -> LineProblem { Box::new(move |line| Problem::Shape { line, reason }) };
    let Value::Object(mut obj) = value else {
        return Err(shape("a reply is a JSON object".into()));
    };
    match obj.get("id") {
        None | Some(Value::Null) => return Err(Box::new(|line| Problem::MissingId { line })),
        Some(Value::Number(n)) if n.as_u64() == Some(id) => {}
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= 1 && n < id) => {
            let found = n.as_u64().unwrap_or_default();
            return Err(Box::new(move |line| Problem::OutOfOrder { line, found }));
        }
        Some(other) => {
            let found = other.to_string();
            return Err(Box::new(move |line| Problem::WrongId { line, found }));
        }
    }
    match (obj.remove("ok"), obj.remove("error")) {
        (Some(ok), None) => serde_json::from_value::<T>(ok)
            .map(Ok)
            .map_err(|e| shape(e.to_string())),
        (None, Some(err)) => serde_json::from_value::<Refusal>(err)
            .map(Err)
            .map_err(|e| shape(format!("error: {e}"))),
        (Some(_), Some(_)) => Err(shape("both \"ok\" and \"error\"".into())),
        (None, None) => Err(shape("neither \"ok\" nor \"error\"".into())),
    }
}
