//! Each endpoint's normal pace, learned over its calls.
//!
//! A lease's accrual detector learns the inter-arrival times of its own
//! evidence, so without more every call would start cold: a model that
//! normally pauses 2 s between chunks would look suspicious on its first
//! long pause, and a stream that normally sends a chunk every 50 ms would
//! have to fall silent for a long while before its silence meant anything.
//! A [`PaceBook`] keeps, per *pace key* — a model at its endpoint, a tool,
//! a kind of worker ([`LeaseSpec::with_pace_key`](crate::LeaseSpec::with_pace_key))
//! — what earlier calls showed ([`Pace`]): the time to the first item of
//! evidence and the time between items, as exponentially weighted means and
//! deviations, the newest call weighing [`DECAY`]. So the statistics decay:
//! a model that got faster is not excused for ever by what it used to be.
//!
//! A new lease with a pace key is seeded with its pace: the detector starts
//! from the learned intervals ([`PRIOR_SAMPLES`] of them, which the call's
//! own samples soon outweigh), and a silence before the first item is
//! judged against the learned time to a first item. A lease learns back
//! only when its operation ends by itself: a call cut by its lease, hung or
//! cancelled teaches nothing.
//!
//! The book is what a [`Store`](crate::Store) persists, so what was learned
//! carries from one run to the next and across restarts; a flow may pin a
//! key's pace or reset it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};

/// The weight of the newest call in a pace (the older ones share the rest,
/// decaying geometrically): after five calls, what came before them weighs
/// about a sixth.
pub const DECAY: f64 = 0.3;

/// How many inter-arrival samples a learned pace counts for when it seeds
/// a new lease's detector.
pub const PRIOR_SAMPLES: u32 = 8;

/// The most pace keys a book holds: keys come from what flows name (a
/// worker kind, a tool), so a client posting flows with ever new names
/// must not grow the book, and the store beside it, without bound. Once
/// full, a new key is not learned (its calls start cold); known keys go on
/// learning.
pub const MAX_PACE_KEYS: usize = 4096;

/// Fewer inter-arrival samples than this in one call teach nothing about
/// its intervals (its time to the first item still counts).
pub const MIN_CALL_SAMPLES: u64 = 2;

/// What a run's leases do with each endpoint's learned pace (a flow's
/// `leases.pace`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaceMode {
    /// Seed each lease with what earlier calls of its key showed, and
    /// learn from the calls that end by themselves (the default).
    #[default]
    Learn,
    /// Forget what was learned of each key at the run's first call of it,
    /// then learn anew: for an endpoint that changed (a new model behind
    /// the same URL, a tool that got faster).
    Reset,
    /// Neither use nor teach a learned pace: each call starts cold, and
    /// only its own items give it a history.
    Off,
}

impl PaceMode {
    /// Its name, as in flows: `learn`, `reset` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Learn => "learn",
            Self::Reset => "reset",
            Self::Off => "off",
        }
    }
}

/// What is normal for one pace key, learned over its calls. Milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pace {
    /// How many calls it was learned from.
    pub calls: u64,
    /// The usual time from the start of a call to its first item of
    /// evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_item: Option<Spread>,
    /// The usual time between two items of evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Spread>,
    /// Whether a flow pinned it: a pinned pace is not learned over.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
}

/// A mean and a standard deviation, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// The mean.
    pub mean_ms: f64,
    /// The standard deviation.
    pub std_ms: f64,
}

impl Spread {
    /// Folds `observed` (a mean with its own deviation) into `self` with
    /// weight [`DECAY`]: an exponentially weighted mean and variance.
    fn fold(self, observed: Spread) -> Spread {
        let delta = observed.mean_ms - self.mean_ms;
        let mean_ms = self.mean_ms + DECAY * delta;
        let variance = (1.0 - DECAY) * (self.std_ms.powi(2) + DECAY * delta.powi(2))
            + DECAY * observed.std_ms.powi(2);
        Spread {
            mean_ms,
            std_ms: variance.max(0.0).sqrt(),
        }
    }

    fn is_valid(self) -> bool {
        self.mean_ms.is_finite()
            && self.std_ms.is_finite()
            && self.mean_ms >= 0.0
            && self.std_ms >= 0.0
    }
}

/// What one call showed of its pace.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CallPace {
    /// The time to its first item of evidence, if it had one.
    pub first_item_ms: Option<f64>,
    /// Its inter-arrival samples: how many, their mean and deviation.
    pub intervals: Option<(u64, Spread)>,
}

impl Pace {
    /// `self` with `call` learned: the first call's figures as they are,
    /// later ones folded in with weight [`DECAY`]. A pinned pace is kept.
    pub fn learn(self, call: &CallPace) -> Pace {
        if self.pinned {
            return self;
        }
        let first = call
            .first_item_ms
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(|ms| Spread {
                mean_ms: ms,
                // One figure has no deviation of its own: a quarter of it, as
                // the detector's first estimate assumes.
                std_ms: ms / 4.0,
            });
        let intervals = call
            .intervals
            .filter(|(n, spread)| *n >= MIN_CALL_SAMPLES && spread.is_valid())
            .map(|(_, spread)| spread);
        let merge = |old: Option<Spread>, new: Option<Spread>| match (old, new) {
            (Some(old), Some(new)) => Some(old.fold(new)),
            (old, new) => new.or(old),
        };
        Pace {
            calls: self.calls.saturating_add(1),
            first_item: merge(self.first_item, first),
            interval: merge(self.interval, intervals),
            pinned: false,
        }
    }
}

/// The paces of every key an engine has seen. Cheap to clone; every clone
/// is the same book.
#[derive(Clone, Default)]
pub struct PaceBook {
    inner: Arc<Mutex<BookState>>,
}

#[derive(Default)]
struct BookState {
    paces: BTreeMap<String, Pace>,
    /// Keys learned or changed since [`PaceBook::take_changed`].
    changed: std::collections::BTreeSet<String>,
}

impl PaceBook {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, BookState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pace of `key`, if any was learned or set.
    pub fn get(&self, key: &str) -> Option<Pace> {
        self.state().paces.get(key).copied()
    }

    /// Learns `call` into the pace of `key`.
    pub fn learn(&self, key: &str, call: &CallPace) {
        let mut state = self.state();
        if !state.paces.contains_key(key) && state.paces.len() >= MAX_PACE_KEYS {
            tracing::debug!(%key, "the pace book is full: a new key is not learned");
            return;
        }
        let pace = state
            .paces
            .get(key)
            .copied()
            .unwrap_or_default()
            .learn(call);
        state.paces.insert(key.to_owned(), pace);
        state.changed.insert(key.to_owned());
    }

    /// Sets the pace of `key` (a pace loaded from the store, or pinned by a
    /// flow). Not counted as a change unless `changed`.
    pub fn set(&self, key: &str, pace: Pace, changed: bool) {
        let mut state = self.state();
        state.paces.insert(key.to_owned(), pace);
        if changed {
            state.changed.insert(key.to_owned());
        }
    }

    /// Forgets what was learned of `key`.
    pub fn reset(&self, key: &str) {
        let mut state = self.state();
        if state.paces.remove(key).is_some() {
            state.changed.insert(key.to_owned());
        }
    }

    /// Every key's pace.
    pub fn all(&self) -> BTreeMap<String, Pace> {
        self.state().paces.clone()
    }

    /// The keys changed since the last call, with their pace (`None` for a
    /// key reset): what a store must write.
    pub fn take_changed(&self) -> Vec<(String, Option<Pace>)> {
        let mut state = self.state();
        let changed = std::mem::take(&mut state.changed);
        changed
            .into_iter()
            .map(|key| {
                let pace = state.paces.get(&key).copied();
                (key, pace)
            })
            .collect()
    }
}

impl std::fmt::Debug for PaceBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaceBook")
            .field("keys", &self.state().paces.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(first: f64, mean: f64) -> CallPace {
        CallPace {
            first_item_ms: Some(first),
            intervals: Some((
                20,
                Spread {
                    mean_ms: mean,
                    std_ms: mean / 10.0,
                },
            )),
        }
    }

    #[test]
    fn the_first_call_is_taken_as_it_is_and_later_ones_decay_the_old() {
        let pace = Pace::default().learn(&call(60_000.0, 2_000.0));
        assert_eq!(pace.calls, 1);
        assert_eq!(pace.first_item.map(|s| s.mean_ms), Some(60_000.0));
        assert_eq!(pace.interval.map(|s| s.mean_ms), Some(2_000.0));
        // The model got faster: after a few calls its old pace no longer
        // excuses it.
        let mut faster = pace;
        for _ in 0..15 {
            faster = faster.learn(&call(500.0, 50.0));
        }
        let interval = faster.interval.expect("learned");
        assert!(interval.mean_ms < 100.0, "{interval:?}");
        assert!(faster.first_item.expect("learned").mean_ms < 2_000.0);
    }

    #[test]
    fn a_pinned_pace_is_not_learned_over_and_nonsense_teaches_nothing() {
        let pinned = Pace {
            pinned: true,
            ..Pace::default().learn(&call(1_000.0, 100.0))
        };
        assert_eq!(pinned.learn(&call(5.0, 5.0)), pinned);
        let pace = Pace::default().learn(&CallPace {
            first_item_ms: Some(f64::NAN),
            intervals: Some((
                1,
                Spread {
                    mean_ms: 10.0,
                    std_ms: 1.0,
                },
            )),
        });
        assert_eq!((pace.first_item, pace.interval), (None, None));
    }

    #[test]
    fn a_full_book_learns_no_new_key_and_goes_on_learning_the_known_ones() {
        let book = PaceBook::new();
        for n in 0..MAX_PACE_KEYS + 10 {
            book.learn(&format!("worker_step:worker:kind-{n}"), &call(100.0, 10.0));
        }
        assert_eq!(book.all().len(), MAX_PACE_KEYS);
        assert_eq!(book.get("worker_step:worker:kind-5000"), None);
        book.learn("worker_step:worker:kind-0", &call(100.0, 10.0));
        assert_eq!(
            book.get("worker_step:worker:kind-0").map(|p| p.calls),
            Some(2)
        );
    }

    #[test]
    fn the_book_says_what_changed_once() {
        let book = PaceBook::new();
        book.learn("m", &call(100.0, 10.0));
        book.set("loaded", Pace::default(), false);
        book.reset("absent");
        assert_eq!(book.take_changed().len(), 1);
        assert!(book.take_changed().is_empty());
        book.reset("m");
        assert_eq!(book.take_changed(), [("m".to_owned(), None)]);
    }
}
