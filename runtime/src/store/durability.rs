//! [`Durability`]: when a write to the sled store counts as done, and its
//! names in configuration (`sync`, `async`, `exit`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// When a write to the sled store counts as done.
///
/// | mode | a fenced write returns | durable |
/// |---|---|---|
/// | `sync` (default) | once it is on disk | before the call returns |
/// | `async` | once it is in sled's memory | by the group commit shortly after: within 2 ms and one flush |
/// | `exit` | once it is in sled's memory | at [`ChangeSource::flush`](leasehold_actors::ChangeSource::flush) (the end of a run) or when the store is dropped |
///
/// Whatever the mode, `ChangeSource::flush` returns once everything written before
/// it is durable. "On disk" means what sled's `flush()` gives, which on
/// Linux is `sync_file_range`, not `fsync`: `docs/durability.md` says what
/// each mode guarantees after a crash and after a power cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Every fenced write returns once it is durable on disk.
    #[default]
    Sync,
    /// Writes return once applied in memory; the group commit makes them
    /// durable shortly after.
    Async,
    /// Nothing is made durable until `ChangeSource::flush` or drop.
    Exit,
}

impl Durability {
    /// Every mode, in the order of the documentation.
    pub const ALL: [Self; 3] = [Self::Sync, Self::Async, Self::Exit];

    /// The mode's name, as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Async => "async",
            Self::Exit => "exit",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A durability mode that is not one of `sync`, `async`, `exit`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown durability `{given}`: expected one of `sync`, `async`, `exit`")]
pub struct ParseDurabilityError {
    /// What was given.
    pub given: String,
}

impl FromStr for Durability {
    type Err = ParseDurabilityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|mode| mode.as_str() == s)
            .ok_or_else(|| ParseDurabilityError {
                given: s.to_owned(),
            })
    }
}
