//! [`SledConfig`]: where the sled store lives and how durable its writes are.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::store::{DEFAULT_CACHE_CAPACITY, Durability};

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
    /// The most memory sled's page cache may hold, in bytes (default
    /// [`DEFAULT_CACHE_CAPACITY`]; sled's own default is 1 GiB, which a
    /// busy executor's cache grows into).
    #[serde(default = "default_cache_capacity")]
    pub cache_capacity: u64,
}

fn default_cache_capacity() -> u64 {
    DEFAULT_CACHE_CAPACITY
}

impl SledConfig {
    /// A persistent store at `path` with the default durability (`sync`).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            durability: Durability::default(),
            temporary: false,
            cache_capacity: DEFAULT_CACHE_CAPACITY,
        }
    }

    /// The same with sled's page cache bounded to `bytes`.
    #[must_use]
    pub fn with_cache_capacity(mut self, bytes: u64) -> Self {
        self.cache_capacity = bytes;
        self
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
