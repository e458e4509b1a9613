//! One argument of a stdio tool server's command line, plain or secret.
//!
//! A secret argument is written where it stands, as a table with one key:
//!
//! ```toml
//! command = ["ops-server", "--region", "eu", "--token", { secret = "hunter2" }]
//! ```
//!
//! (`["ops-server", …, {"secret": "hunter2"}]` in JSON). The process is
//! started with the real value; everything that shows the command — the
//! API, listings, errors, logs, `leasehold config` — shows `***` in its
//! place. Marking the value itself, rather than naming its position in a
//! separate list, keeps the mark with the value when arguments are added,
//! removed or reordered.

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One argument of a command line: plain text, or a secret shown as `***`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum CommandArg {
    /// An argument shown as it is.
    Plain(String),
    /// An argument the process gets but nothing shows.
    Secret(String),
}

impl CommandArg {
    /// The value the process is started with.
    pub fn value(&self) -> &str {
        match self {
            Self::Plain(value) | Self::Secret(value) => value,
        }
    }

    /// Whether the argument was marked secret.
    pub fn is_secret(&self) -> bool {
        matches!(self, Self::Secret(_))
    }
}

impl From<&str> for CommandArg {
    fn from(value: &str) -> Self {
        Self::Plain(value.to_owned())
    }
}

impl From<String> for CommandArg {
    fn from(value: String) -> Self {
        Self::Plain(value)
    }
}

/// A secret's value never reaches a debug print (a flow's `Debug` may end
/// up in a log).
impl fmt::Debug for CommandArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Plain(value) => fmt::Debug::fmt(value, f),
            Self::Secret(_) => f.write_str("{ secret = *** }"),
        }
    }
}

impl Serialize for CommandArg {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Self::Plain(value) => serializer.serialize_str(value),
            Self::Secret(value) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("secret", value)?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for CommandArg {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ArgVisitor)
    }
}

struct ArgVisitor;

impl<'de> Visitor<'de> for ArgVisitor {
    type Value = CommandArg;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, or a table `{ secret = \"…\" }` for an argument nothing shows")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<CommandArg, E> {
        Ok(CommandArg::Plain(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<CommandArg, E> {
        Ok(CommandArg::Plain(value))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CommandArg, A::Error> {
        let mut secret: Option<String> = None;
        while let Some(key) = map.next_key::<String>()? {
            if key != "secret" {
                return Err(de::Error::unknown_field(&key, &["secret"]));
            }
            if secret.is_some() {
                return Err(de::Error::duplicate_field("secret"));
            }
            secret = Some(map.next_value()?);
        }
        secret
            .map(CommandArg::Secret)
            .ok_or_else(|| de::Error::missing_field("secret"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_argument_round_trips_and_hides_from_debug() {
        #[derive(Deserialize, Serialize)]
        struct Line {
            command: Vec<CommandArg>,
        }
        let text = r#"{"command":["ops","--token",{"secret":"hunter2"}]}"#;
        let line: Line = serde_json::from_str(text).unwrap();
        assert_eq!(line.command[2], CommandArg::Secret("hunter2".into()));
        assert_eq!(line.command[2].value(), "hunter2");
        assert!(line.command[2].is_secret() && !line.command[1].is_secret());
        assert!(!format!("{:?}", line.command).contains("hunter2"));
        assert_eq!(serde_json::to_string(&line).unwrap(), text);
        let wrong = serde_json::from_str::<Line>(r#"{"command":[{"secret":"a","x":1}]}"#)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(wrong.contains("unknown field `x`"), "{wrong}");
        assert!(serde_json::from_str::<Line>(r#"{"command":[{}]}"#).is_err());
        assert!(serde_json::from_str::<Line>(r#"{"command":[3]}"#).is_err());
    }
}
