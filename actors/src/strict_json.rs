//! The strict-JSON discipline shared by every evaluator answer: exactly one
//! JSON object with exactly the expected keys, each of the expected type.
//! Anything else is refused with a message saying what was wrong, and so is
//! an object that names a key twice, at any depth (serde_json alone would
//! keep the last one silently).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `text` as one JSON object whose keys are all among `keys`, each
/// named once.
pub(crate) fn object(text: &str, keys: &[&str]) -> Result<Map<String, Value>, String> {
    let Unique(value) = serde_json::from_str(text).map_err(|e| {
        if e.is_data() {
            // Only a duplicate key is a data error: the message names it.
            e.to_string()
        } else {
            format!("not a single JSON value: {e}")
        }
    })?;
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

/// A JSON value in which no object names a key twice.
struct Unique(Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor).map(Unique)
    }
}

/// Builds a [`Value`] as serde_json does, but refuses a repeated key.
struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
            }
            let Unique(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_key_is_refused_naming_it_at_any_depth() {
        let keys = ["verdict", "reason"];
        let error = object(r#"{"verdict":"RENEW","verdict":"INTERVENE"}"#, &keys)
            .expect_err("a duplicate key is refused");
        assert!(error.starts_with("duplicate key `verdict`"), "{error}");
        let error = object(r#"{"verdict":"RENEW","reason":[{"a":1,"a":2}]}"#, &keys)
            .expect_err("a nested duplicate key is refused");
        assert!(error.starts_with("duplicate key `a`"), "{error}");
        let parsed = object(
            r#"{"verdict":"RENEW","reason":[{"a":1,"b":null}, 2.5, -3, true]}"#,
            &keys,
        )
        .expect("distinct keys are accepted");
        assert_eq!(
            Value::Object(parsed),
            serde_json::json!({"verdict":"RENEW","reason":[{"a":1,"b":null}, 2.5, -3, true]})
        );
        let error = object("{\"verdict\":", &keys).expect_err("cut short");
        assert!(error.starts_with("not a single JSON value"), "{error}");
    }
}
