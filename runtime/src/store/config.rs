//! [`SledConfig`]: where the sled store lives and how durable its writes are.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Durability;

/// How to open a [`SledStore`](super::SledStore).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SledConfig {
    /// The database directory (created if missing). One process at a time
    /// may have it open.
    pub path: PathBuf,
    /// When a write counts as done.
    #[serde(default)]
    pub durability: Durability,
    /// Delete the directory when the store is dropped (tests, demos). sled
    /// skips `sync_file_range` for a temporary database, so nothing in it is
    /// durable in any mode.
    #[serde(default)]
    pub temporary: bool,
}

impl SledConfig {
    /// A persistent store at `path` with the default durability (`sync`).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            durability: Durability::default(),
            temporary: false,
        }
    }

    /// The same with `durability`.
    #[must_use]
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The same, deleted on drop if `temporary`.
    #[must_use]
    pub fn with_temporary(mut self, temporary: bool) -> Self {
        self.temporary = temporary;
        self
    }
}
