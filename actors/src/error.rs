//! Errors shared across the actors crate.

use std::fmt::Display;

/// A configuration value that makes no sense, refused at construction.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid `{field}`: expected {expected}, got {got}")]
pub struct ConfigError {
    /// The offending field, as named in the configuration.
    pub field: String,
    /// What was expected.
    pub expected: String,
    /// What was given.
    pub got: String,
}

impl ConfigError {
    /// An error naming `field`, what it should have been and what it was.
    pub fn new(field: impl Into<String>, expected: impl Into<String>, got: impl Display) -> Self {
        Self {
            field: field.into(),
            expected: expected.into(),
            got: got.to_string(),
        }
    }

    /// "expected …, got …", without the key: for a message that names the
    /// key some other way (serde's path to the field).
    pub fn expected_got(&self) -> String {
        format!("expected {}, got {}", self.expected, self.got)
    }
}

/// An actor that could not be started.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// Its configuration was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// ractor could not spawn it.
    #[error("could not spawn the actor: {0}")]
    Spawn(String),
}

/// What a panic said: its message when it has one (a `&str` or a
/// `String`, as `panic!` makes them).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|message| (*message).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
}
