//! The registry of the runs live in an executor's process: the one place
//! that knows which runs run here.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use leasehold_actors::RunHandle;

/// The handles of the runs an executor runs, by run id.
#[derive(Default)]
pub(super) struct Registry {
    runs: Mutex<HashMap<String, RunHandle>>,
}

impl Registry {
    pub(super) fn insert(&self, run_id: String, handle: RunHandle) {
        self.lock().insert(run_id, handle);
    }

    pub(super) fn get(&self, run_id: &str) -> Option<RunHandle> {
        self.lock().get(run_id).cloned()
    }

    /// Lets go of `run_id` if its run is over (ended or lost): only if it
    /// is still the handle that ended, since a resume may have replaced it.
    pub(super) fn remove_if_over(&self, run_id: &str) {
        let mut runs = self.lock();
        if runs.get(run_id).is_some_and(|h| !is_live(h)) {
            runs.remove(run_id);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    /// How many of them go on (not ended, not lost).
    pub(super) fn live(&self) -> usize {
        self.lock().values().filter(|h| is_live(h)).count()
    }

    /// What keyed limits read of the runs that go on.
    pub(super) fn live_labels(&self) -> Vec<leasehold_actors::keyed_limits::RunLabels> {
        self.lock()
            .values()
            .filter(|h| is_live(h))
            .map(|h| h.labels().clone())
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, RunHandle>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn is_live(handle: &RunHandle) -> bool {
    let state = handle.state();
    !state.status.is_terminal() && state.lost.is_none()
}
