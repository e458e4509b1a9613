//! [`StatusCounts`]: how many runs a store holds in each status, kept as
//! runs change rather than counted by reading them.
//!
//! A scrape of `/metrics`, `GET /executor` and every post read the counts
//! ([`RunStore::count_runs_by_status`](super::RunStore::count_runs_by_status),
//! [`RunStore::count_runs`](super::RunStore::count_runs)); counted from the
//! records, each costs as much as the store holds. A store keeps a
//! `StatusCounts` beside its records instead and moves it with every write
//! that creates, changes or deletes a record ([`StatusCounts::moved`]),
//! under the same lock, so the counts are exact whenever the lock is free
//! and read in constant time.

use super::RunStatus;

/// How many runs are in each status of [`RunStatus::ALL`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusCounts {
    counts: [u64; RunStatus::ALL.len()],
}

/// Where `status` is in [`RunStatus::ALL`].
fn slot(status: RunStatus) -> usize {
    match status {
        RunStatus::Queued => 0,
        RunStatus::Running => 1,
        RunStatus::WaitingHuman => 2,
        RunStatus::ReconciliationRequired => 3,
        RunStatus::Orphaned => 4,
        RunStatus::Completed => 5,
        RunStatus::Failed => 6,
        RunStatus::Cancelled => 7,
    }
}

impl StatusCounts {
    /// No run at all.
    pub fn new() -> Self {
        Self::default()
    }

    /// A run left `from` (`None`: it was created) for `to` (`None`: it
    /// was deleted). A count never goes below zero.
    pub fn moved(&mut self, from: Option<RunStatus>, to: Option<RunStatus>) {
        if from == to {
            return;
        }
        if let Some(from) = from {
            let count = &mut self.counts[slot(from)];
            *count = count.saturating_sub(1);
        }
        if let Some(to) = to {
            let count = &mut self.counts[slot(to)];
            *count = count.saturating_add(1);
        }
    }

    /// How many runs are in `status`.
    pub fn get(&self, status: RunStatus) -> u64 {
        self.counts[slot(status)]
    }

    /// Every status of [`RunStatus::ALL`] once, in that order, with its
    /// count: [`RunStore::count_runs_by_status`](super::RunStore::count_runs_by_status)'s answer.
    pub fn by_status(&self) -> Vec<(RunStatus, u64)> {
        RunStatus::ALL
            .into_iter()
            .map(|status| (status, self.get(status)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_moves_from_one_count_to_another_and_slots_follow_all() {
        for (index, status) in RunStatus::ALL.into_iter().enumerate() {
            assert_eq!(slot(status), index);
        }
        let mut counts = StatusCounts::new();
        counts.moved(None, Some(RunStatus::Queued));
        counts.moved(None, Some(RunStatus::Queued));
        counts.moved(Some(RunStatus::Queued), Some(RunStatus::Running));
        counts.moved(Some(RunStatus::Running), Some(RunStatus::Running));
        assert_eq!(counts.get(RunStatus::Queued), 1);
        assert_eq!(counts.get(RunStatus::Running), 1);
        counts.moved(Some(RunStatus::Running), None);
        counts.moved(Some(RunStatus::Completed), None);
        assert_eq!(counts.get(RunStatus::Running), 0);
        assert_eq!(counts.get(RunStatus::Completed), 0, "never below zero");
        assert_eq!(counts.by_status()[0], (RunStatus::Queued, 1));
    }
}
