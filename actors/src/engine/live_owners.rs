//! The owner ids of the engines alive in this process: what tells a run's
//! holder that died from one that runs here, on a store one process opens
//! at a time ([`Engine::holder_is_gone`](super::Engine::holder_is_gone)).

use std::collections::HashMap;
use std::sync::PoisonError;

/// An engine's owner id, known as live in this process while the engine
/// is.
pub(super) struct LiveOwner(String);

/// How many engines of this process have each owner id.
static LIVE_OWNERS: std::sync::LazyLock<std::sync::Mutex<HashMap<String, usize>>> =
    std::sync::LazyLock::new(Default::default);

impl LiveOwner {
    pub(super) fn new(owner_id: &str) -> Self {
        *LIVE_OWNERS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(owner_id.to_owned())
            .or_default() += 1;
        Self(owner_id.to_owned())
    }

    fn lives(owner_id: &str) -> bool {
        LIVE_OWNERS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(owner_id)
    }
}

impl Drop for LiveOwner {
    fn drop(&mut self) {
        let mut owners = LIVE_OWNERS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = owners.get_mut(&self.0) {
            *count -= 1;
            if *count == 0 {
                owners.remove(&self.0);
            }
        }
    }
}

/// Whether `owner`, seen holding a run by the engine `own`, is gone from
/// this process: neither that engine nor any other live here.
pub(super) fn gone(own: &str, owner: &str) -> bool {
    owner != own && !LiveOwner::lives(owner)
}
