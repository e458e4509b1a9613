//! Reading a workload's values — durations as people write them — and the
//! refusal that names the offending key. Shared by the workload and its
//! strategies, so neither reads through the other.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A workload file that was refused: the offending key and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("workload refused at `{key}`: {message}")]
pub struct WorkloadError {
    /// The key's path, as `model_streams.duration.sigma` (`.` for the
    /// document).
    pub key: String,
    /// What was wrong.
    pub message: String,
}

impl WorkloadError {
    /// A refusal at `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// A humantime duration: `"250ms"`, `"2s"`, `"5m"`.
pub(crate) fn human<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    parse_human(&String::deserialize(d)?).map_err(serde::de::Error::custom)
}

/// Reads a humantime duration, or says what was expected.
pub(crate) fn parse_human(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!(r#"expected a duration such as "250ms", "2s" or "5m", got "{text}" ({e})"#)
    })
}

pub(crate) fn human_option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    human(d).map(Some)
}
