//! [`PaceStore`]: the paces learned of each endpoint
//! ([`PaceBook`](crate::PaceBook)), kept across runs, restarts and
//! executors.

use super::StoreFuture;
use crate::pace::Pace;

/// Learned paces, by pace key.
pub trait PaceStore: Send + Sync + 'static {
    /// Every pace key's learned pace, in key order: what an engine starts
    /// from, so that what earlier runs learned of each endpoint carries to
    /// the next, across restarts and executors.
    fn load_paces(&self) -> StoreFuture<Vec<(String, Pace)>>;

    /// Writes learned paces: each key's pace replaces what was kept, and a
    /// `None` deletes the key's (a reset).
    fn save_paces(&self, paces: Vec<(String, Option<Pace>)>) -> StoreFuture<()>;
}
