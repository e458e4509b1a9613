//! The strict-JSON discipline shared by every evaluator answer: exactly one
//! JSON object with exactly the expected keys, each of the expected type.
//! Anything else is refused with a message saying what was wrong.

use serde_json::{Map, Value};

/// Parses `text` as one JSON object whose keys are all among `keys`.
pub(crate) fn object(text: &str, keys: &[&str]) -> Result<Map<String, Value>, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("not a single JSON value: {e}"))?;
    let Value::Object(object) = value else {
        return Err(format!("expected a JSON object, got {}", kind_of(&value)));
    };
    if let Some(extra) = object.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err(format!("unexpected field `{extra}`"));
    }
    Ok(object)
}

/// The string at `key`, which must be present.
pub(crate) fn string_field<'a>(
    object: &'a Map<String, Value>,
    key: &str,
) -> Result<&'a str, String> {
    match object.get(key) {
        None => Err(format!("missing field `{key}`")),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!(
            "field `{key}` must be a string, got {}",
            kind_of(other)
        )),
    }
}

/// The non-blank string at `key`.
pub(crate) fn reason_field<'a>(
    object: &'a Map<String, Value>,
    key: &str,
) -> Result<&'a str, String> {
    let text = string_field(object, key)?;
    if text.trim().is_empty() {
        return Err(format!("field `{key}` is empty"));
    }
    Ok(text)
}

/// What kind of JSON value `value` is, in words.
pub(crate) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
