//! How many workers a run may spawn: per model answer, per run, and how
//! deep they may nest.
//!
//! A model spawns a worker by calling the built-in `spawn_worker` tool, and
//! a worker's loop may spawn workers of its own. Nothing in a model's answer
//! is trusted to be small: one answer may ask for thousands of workers, and
//! workers that spawn workers multiply. [`SpawnLimits`] bounds all three
//! ways a run's tree can grow:
//!
//! * **per answer** — the first `max_per_answer` `spawn_worker` calls of one
//!   answer start, in the order the model gave them;
//! * **per run** — at most `max_per_run` workers are started in the whole
//!   run, restarts and resumes included (each restart is a new worker);
//! * **in depth** — a worker at depth `max_depth` (the root's workers are at
//!   depth 1) spawns none.
//!
//! A spawn past a limit is not an error of the run: the call gets an error
//! result that the model sees, naming the limit and its bound, and a
//! `spawn_refused` event says so. The run goes on. The engine's
//! configuration holds the limits; a flow's `spawn` table may only lower
//! them.
//!
//! ```
//! use leasehold_actors::SpawnLimits;
//!
//! let limits = SpawnLimits::default();
//! assert_eq!((limits.max_per_answer, limits.max_per_run, limits.max_depth), (16, 256, 4));
//! ```

use serde::{Deserialize, Serialize};

/// The limits on spawning workers: per model answer, per run (restarts
/// included) and in depth. A `spawn_worker` call past one gets an error
/// result the model sees, naming the limit, and a `spawn_refused` event;
/// the run goes on. Set by [`EngineConfig::spawn`](crate::EngineConfig);
/// a flow's `spawn` table may only lower them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnLimits {
    /// Workers one model answer may spawn (default 16): more than the
    /// parallel tool calls any model makes for real work, few enough that
    /// one answer cannot start a crowd of model loops at once.
    pub max_per_answer: u32,
    /// Workers one run may start in all, restarts included (default 256):
    /// sixteen answers' worth at the root, and a bound on what nesting can
    /// multiply to (16 per answer over 4 levels would otherwise be 65 536).
    pub max_per_run: u32,
    /// How deep workers may nest (default 4): a root, its workers, theirs
    /// and so on, four levels below the root — deeper than any delegation a
    /// flow describes, shallow enough that a worker spawning itself stops.
    pub max_depth: u32,
}

impl Default for SpawnLimits {
    fn default() -> Self {
        Self {
            max_per_answer: 16,
            max_per_run: 256,
            max_depth: 4,
        }
    }
}

/// Which limit refused a spawn, with its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "limit", content = "bound", rename_all = "snake_case")]
pub enum SpawnRefusal {
    /// The answer already spawned `max_per_answer` workers.
    PerAnswer(u32),
    /// The run already started `max_per_run` workers.
    PerRun(u32),
    /// The loop is at `max_depth`.
    Depth(u32),
}

impl SpawnRefusal {
    /// The configuration key of the limit: `spawn.max_per_answer`,
    /// `spawn.max_per_run` or `spawn.max_depth` (the flow's key is the same).
    pub fn key(self) -> &'static str {
        match self {
            Self::PerAnswer(_) => "spawn.max_per_answer",
            Self::PerRun(_) => "spawn.max_per_run",
            Self::Depth(_) => "spawn.max_depth",
        }
    }

    /// The limit's bound.
    pub fn bound(self) -> u32 {
        match self {
            Self::PerAnswer(bound) | Self::PerRun(bound) | Self::Depth(bound) => bound,
        }
    }

    /// What the model is told, as the call's error result.
    pub(crate) fn message(self) -> String {
        let bound = self.bound();
        let key = self.key();
        let what = match self {
            Self::PerAnswer(_) => format!(
                "one answer may spawn at most {bound} workers ({key}); the first {bound} of this \
                 answer were started: wait for their results, and spawn more in a later step if \
                 you still need them"
            ),
            Self::PerRun(_) => format!(
                "this run has started {bound} workers, the most it may ({key}): finish the task \
                 with the workers' results you have"
            ),
            Self::Depth(_) => format!(
                "workers may nest at most {bound} deep ({key}), and this loop is at that depth: \
                 do the task yourself"
            ),
        };
        format!("error: the worker was not spawned: {what}")
    }
}

impl SpawnLimits {
    /// Whether the spawn of call `ordinal` (1 for the answer's first
    /// `spawn_worker` call) by a loop at `depth` (0 for the root) may start,
    /// before the run's count is checked; `None` if it may.
    pub(crate) fn check_answer(self, ordinal: usize, depth: usize) -> Option<SpawnRefusal> {
        let within = |count: usize, bound: u32| u32::try_from(count).is_ok_and(|n| n <= bound);
        if !within(depth.saturating_add(1), self.max_depth) {
            return Some(SpawnRefusal::Depth(self.max_depth));
        }
        if !within(ordinal, self.max_per_answer) {
            return Some(SpawnRefusal::PerAnswer(self.max_per_answer));
        }
        None
    }
}

/// The depth of the loop at `path`: 0 for the root, 1 for its workers, one
/// more for each worker below.
pub(crate) fn depth_of(path: &str) -> usize {
    path.split('/')
        .filter(|part| part.starts_with("worker:"))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_the_workers_in_a_path() {
        assert_eq!(depth_of("root"), 0);
        assert_eq!(depth_of("root/worker:a:1"), 1);
        assert_eq!(depth_of("root/worker:a:1/worker:b:7"), 2);
    }

    #[test]
    fn each_limit_refuses_past_its_bound() {
        let limits = SpawnLimits {
            max_per_answer: 2,
            max_per_run: 5,
            max_depth: 1,
        };
        assert_eq!(limits.check_answer(1, 0), None);
        assert_eq!(limits.check_answer(2, 0), None);
        assert_eq!(limits.check_answer(3, 0), Some(SpawnRefusal::PerAnswer(2)));
        assert_eq!(limits.check_answer(1, 1), Some(SpawnRefusal::Depth(1)));
        let none = SpawnLimits {
            max_depth: 0,
            ..limits
        };
        assert_eq!(none.check_answer(1, 0), Some(SpawnRefusal::Depth(0)));
        let message = SpawnRefusal::PerRun(5).message();
        assert!(message.starts_with("error: "), "{message}");
        assert!(message.contains("spawn.max_per_run"), "{message}");
    }
}
