//! Each endpoint's normal pace, learned over its calls.
//!
//! A lease's accrual detector learns the inter-arrival times of its own
//! evidence, so without more every call would start cold: a model that
//! normally pauses 2 s between chunks would look suspicious on its first
//! long pause, and a stream that normally sends a chunk every 50 ms would
//! have to fall silent for a long while before its silence meant anything.
//! A [`PaceBook`] keeps, per *pace key* — a model at its endpoint for one
//! kind of prompt (the flow, the loop or worker kind, the request's size),
//! a tool on its server, a kind of worker
//! ([`LeaseSpec::with_pace_key`](crate::LeaseSpec::with_pace_key)) — what
//! earlier calls showed ([`Pace`]): the time to the first item of evidence
//! and the time between items.
//!
//! No run teaches another to be impatient (rule 15). A pace is a window of
//! the last [`WINDOW_RUNS`] runs that called the key, one sample a run
//! (the run's latest call), and what judges a new call is a high quantile
//! of that window ([`QUANTILE_PERCENT`]), not a mean that one sample moves: one
//! quick run among slow ones moves nothing, and a run only counts once
//! however many calls it makes. A pace seeds other runs' detectors only
//! once [`MIN_RUNS`] runs taught it (a run's own earlier calls judge its
//! later ones from the first). A flow's `leases.pace = "reset"`
//! applies to its own run, whose calls start cold; the book itself is
//! reset only by an operator (`leasehold paces --reset KEY`).
//!
//! A new lease with a trusted pace is seeded with it: the detector starts
//! from the learned intervals ([`PRIOR_SAMPLES`] of them, which the call's
//! own samples soon outweigh), and a silence before the first item is
//! judged against the learned time to a first item — unless the executor
//! already has another call in flight to the same endpoint, whose queue,
//! not the call, may be what keeps the first item waiting ([`PaceBook::enter`]).
//! A lease learns back only when its operation ends by itself: a call cut
//! by its lease, hung or cancelled teaches nothing.
//!
//! The book is what a [`Store`](crate::Store) persists, so what was learned
//! carries from one run to the next and across restarts; a flow may pin a
//! key's pace.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};

/// How many runs a pace remembers, one sample each: the newest replace the
/// oldest.
pub const WINDOW_RUNS: usize = 16;

/// How many runs must have taught a pace before it judges other runs'
/// calls: no one run, nor two, sets what everyone else is held to.
pub const MIN_RUNS: usize = 3;

/// The quantile of the window that judges a new call: the time to a first
/// item, and between items, that nine in ten of the runs remembered
/// stayed within (by nearest rank: the slowest of up to nine runs, the
/// second slowest of ten to sixteen). Early expiry only past what the
/// endpoint has shown.
pub const QUANTILE_PERCENT: usize = 90;

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
    /// Seed each lease with what earlier runs' calls of its key showed, and
    /// teach the key from the calls that end by themselves (the default).
    #[default]
    Learn,
    /// This run's calls start cold, whatever the book says of their keys
    /// (for an endpoint that changed: a new model behind the same URL),
    /// and teach it as any run does — one sample among the window's. The
    /// book itself is not reset: another run is judged as before.
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

/// What is normal for one pace key, learned over the calls of its last
/// runs. Milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Pace {
    /// How many calls it was learned from, in all.
    pub calls: u64,
    /// The time from the start of a call to its first item of evidence
    /// that judges a new call: [`QUANTILE_PERCENT`] of the window's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_item: Option<Spread>,
    /// The time between two items of evidence that judges a new call:
    /// [`QUANTILE_PERCENT`] of the window's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Spread>,
    /// Whether a flow pinned it: a pinned pace is not learned over, and
    /// judges from its first call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// The window: the last [`WINDOW_RUNS`] runs' samples, oldest first,
    /// one a run. A pace kept by an earlier version has none, and judges
    /// nothing until runs teach it again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunSample>,
}

/// What one run's latest call of a key showed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunSample {
    /// Which run, as a stable hash of its id ([`run_tag`]).
    pub run: u64,
    /// Its time to a first item, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_item_ms: Option<f64>,
    /// Its intervals' mean and deviation, if it had enough of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Spread>,
}

/// A mean and a standard deviation, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Spread {
    /// The mean.
    pub mean_ms: f64,
    /// The standard deviation.
    pub std_ms: f64,
}

impl Spread {
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

/// The size of a request, in words a pace key can carry: its estimated
/// tokens (a quarter of its characters), by powers of four — prompts of
/// very different sizes do not share a pace, since a long one takes longer
/// to its first token.
pub fn prompt_size(characters: usize) -> &'static str {
    match characters / 4 {
        0..1_024 => "under 1k tokens",
        1_024..4_096 => "1k to 4k tokens",
        4_096..16_384 => "4k to 16k tokens",
        16_384..65_536 => "16k to 64k tokens",
        _ => "64k tokens or more",
    }
}

/// A tool server's identity for its tools' pace keys and its calls in
/// flight: its name, and a hash of what it is — the address it is reached
/// at, or the program and arguments it is started with — so that two
/// servers a flow gives the same name never share a pace. Only the hash of
/// the target shows: it may carry a secret.
pub fn tool_server(name: &str, target: &[&str]) -> String {
    if target.is_empty() {
        return name.to_owned();
    }
    let tag = target.iter().fold(run_tag(""), |hash, part| {
        hash ^ run_tag(part).rotate_left(7)
    });
    format!("{name}#{:08x}", tag >> 32)
}

/// A stable 64-bit tag of a run id (FNV-1a): what a pace's window keeps of
/// the run that taught it, the same in every process and version.
pub fn run_tag(run_id: &str) -> u64 {
    run_id.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The value at [`QUANTILE_PERCENT`] of `values` by nearest rank; `None`
/// if empty.
fn quantile(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = (values.len() * QUANTILE_PERCENT).div_ceil(100);
    values.get(rank.clamp(1, values.len()) - 1).copied()
}

impl Pace {
    /// `self` with what `call` of the run tagged `run` showed: the run's
    /// sample replaced by this one (a run counts once however many calls
    /// it makes), the oldest run's dropped past [`WINDOW_RUNS`], and the
    /// figures that judge new calls taken again from the window. A pinned
    /// pace is kept.
    pub fn learn(mut self, run: u64, call: &CallPace) -> Pace {
        if self.pinned {
            return self;
        }
        let first_item_ms = call.first_item_ms.filter(|ms| ms.is_finite() && *ms >= 0.0);
        let interval = call
            .intervals
            .filter(|(n, spread)| *n >= MIN_CALL_SAMPLES && spread.is_valid())
            .map(|(_, spread)| spread);
        self.calls = self.calls.saturating_add(1);
        if first_item_ms.is_none() && interval.is_none() {
            return self;
        }
        self.runs.retain(|sample| sample.run != run);
        self.runs.push(RunSample {
            run,
            first_item_ms,
            interval,
        });
        if self.runs.len() > WINDOW_RUNS {
            let excess = self.runs.len() - WINDOW_RUNS;
            self.runs.drain(..excess);
        }
        self.first_item =
            quantile(self.runs.iter().filter_map(|s| s.first_item_ms).collect()).map(|ms| Spread {
                mean_ms: ms,
                // One figure has no deviation of its own: a quarter of it,
                // as the detector's first estimate assumes.
                std_ms: ms / 4.0,
            });
        let intervals: Vec<Spread> = self.runs.iter().filter_map(|s| s.interval).collect();
        self.interval =
            quantile(intervals.iter().map(|s| s.mean_ms).collect()).map(|mean_ms| Spread {
                mean_ms,
                std_ms: quantile(intervals.iter().map(|s| s.std_ms).collect()).unwrap_or(0.0),
            });
        self
    }

    /// Whether it may judge other runs' calls: pinned, or taught by at
    /// least [`MIN_RUNS`] runs.
    pub fn trusted(&self) -> bool {
        self.pinned || self.runs.len() >= MIN_RUNS
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
    /// Calls in flight to each endpoint, from every lease of the engine.
    in_flight: BTreeMap<String, u32>,
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
        self.state().paces.get(key).cloned()
    }

    /// The pace of `key` that may judge a call of the run tagged `run`:
    /// the whole window's once enough runs taught it ([`Pace::trusted`]),
    /// else what that run's own earlier calls showed, if they taught it
    /// (a run may learn from itself; it may not teach others before they
    /// are enough), else none.
    pub fn for_run(&self, key: &str, run: u64) -> Option<Pace> {
        let state = self.state();
        let pace = state.paces.get(key)?;
        if pace.trusted() {
            return Some(pace.clone());
        }
        let own = pace.runs.iter().find(|sample| sample.run == run)?;
        Some(Pace::default().learn(
            run,
            &CallPace {
                first_item_ms: own.first_item_ms,
                intervals: own.interval.map(|spread| (MIN_CALL_SAMPLES, spread)),
            },
        ))
    }

    /// Counts a call to `endpoint` in flight, and says how many others
    /// were: one of this executor's own calls ahead of it may be what keeps
    /// its first item waiting. Paired with [`PaceBook::leave`].
    pub fn enter(&self, endpoint: &str) -> u32 {
        let mut state = self.state();
        if !state.in_flight.contains_key(endpoint) && state.in_flight.len() >= MAX_PACE_KEYS {
            // Bounded like the keys: an endpoint past the bound is not
            // counted, and its calls are judged as if alone.
            return 0;
        }
        let slot = state.in_flight.entry(endpoint.to_owned()).or_default();
        let before = *slot;
        *slot = slot.saturating_add(1);
        before
    }

    /// A call to `endpoint` counted by [`PaceBook::enter`] ended.
    pub fn leave(&self, endpoint: &str) {
        let mut state = self.state();
        if let Some(slot) = state.in_flight.get_mut(endpoint) {
            *slot = slot.saturating_sub(1);
            if *slot == 0 {
                state.in_flight.remove(endpoint);
            }
        }
    }

    /// Calls in flight to `endpoint` now.
    pub fn in_flight(&self, endpoint: &str) -> u32 {
        self.state().in_flight.get(endpoint).copied().unwrap_or(0)
    }

    /// Learns `call`, made by the run tagged `run` ([`run_tag`]), into the
    /// pace of `key`.
    pub fn learn(&self, key: &str, run: u64, call: &CallPace) {
        let mut state = self.state();
        if !state.paces.contains_key(key) && state.paces.len() >= MAX_PACE_KEYS {
            tracing::debug!(%key, "the pace book is full: a new key is not learned");
            return;
        }
        let pace = state
            .paces
            .get(key)
            .cloned()
            .unwrap_or_default()
            .learn(run, call);
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
                let pace = state.paces.get(&key).cloned();
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

    fn taught(calls: &[(u64, f64)]) -> Pace {
        calls.iter().fold(Pace::default(), |pace, (run, first)| {
            pace.learn(*run, &call(*first, 50.0))
        })
    }

    #[test]
    fn a_pace_judges_by_a_high_quantile_of_its_runs_and_one_quick_run_moves_nothing() {
        // Three runs whose first item came after 8 s, then a quick one.
        let pace = taught(&[(1, 8_000.0), (2, 8_100.0), (3, 7_900.0), (4, 5.0)]);
        assert!(pace.trusted());
        assert_eq!(pace.first_item.map(|s| s.mean_ms), Some(8_100.0));
        // Five quick runs beside the three slow ones: still the slow ones'.
        let pace = taught(&[
            (1, 8_000.0),
            (2, 8_100.0),
            (3, 7_900.0),
            (4, 5.0),
            (5, 5.0),
            (6, 5.0),
            (7, 5.0),
            (8, 5.0),
        ]);
        assert_eq!(pace.first_item.map(|s| s.mean_ms), Some(8_100.0));
        // The endpoint got faster: once its window holds only quick runs,
        // its quick pace judges.
        let mut faster = pace;
        for run in 100..100 + WINDOW_RUNS as u64 {
            faster = faster.learn(run, &call(500.0, 50.0));
        }
        assert_eq!(faster.first_item.map(|s| s.mean_ms), Some(500.0));
    }

    #[test]
    fn a_run_counts_once_however_many_calls_it_makes_and_judges_only_with_others() {
        let mut pace = Pace::default();
        for _ in 0..50 {
            pace = pace.learn(7, &call(5.0, 1.0));
        }
        assert_eq!(pace.calls, 50);
        assert_eq!(pace.runs.len(), 1);
        assert!(!pace.trusted(), "one run sets nobody's pace");
        let pace = pace.learn(8, &call(5.0, 1.0));
        assert!(!pace.trusted(), "nor two");
        assert!(pace.learn(9, &call(5.0, 1.0)).trusted());
    }

    #[test]
    fn a_run_learns_from_its_own_calls_before_others_are_enough() {
        let book = PaceBook::new();
        book.learn("k", 1, &call(300.0, 50.0));
        book.learn("k", 2, &call(8_000.0, 50.0));
        let own = book.for_run("k", 1).expect("its own calls judge it");
        assert_eq!(own.first_item.map(|s| s.mean_ms), Some(300.0));
        assert_eq!(
            book.for_run("k", 3),
            None,
            "two runs set nobody else's pace"
        );
        book.learn("k", 3, &call(7_000.0, 50.0));
        let shared = book.for_run("k", 1).expect("trusted");
        assert_eq!(shared.first_item.map(|s| s.mean_ms), Some(8_000.0));
    }

    #[test]
    fn a_pinned_pace_is_not_learned_over_and_nonsense_teaches_nothing() {
        let pinned = Pace {
            pinned: true,
            ..Pace::default().learn(1, &call(1_000.0, 100.0))
        };
        assert!(pinned.trusted());
        assert_eq!(pinned.clone().learn(2, &call(5.0, 5.0)), pinned);
        let pace = Pace::default().learn(
            1,
            &CallPace {
                first_item_ms: Some(f64::NAN),
                intervals: Some((
                    1,
                    Spread {
                        mean_ms: 10.0,
                        std_ms: 1.0,
                    },
                )),
            },
        );
        assert_eq!((pace.first_item, pace.interval), (None, None));
        assert!(pace.runs.is_empty());
    }

    #[test]
    fn a_pace_kept_by_an_earlier_version_is_read_and_judges_nothing() {
        let old: Pace = serde_json::from_str(
            r#"{"calls": 7, "first_item": {"mean_ms": 60000.0, "std_ms": 5000.0}}"#,
        )
        .expect("read");
        assert_eq!(old.calls, 7);
        assert!(!old.trusted());
    }

    #[test]
    fn a_full_book_learns_no_new_key_and_goes_on_learning_the_known_ones() {
        let book = PaceBook::new();
        for n in 0..MAX_PACE_KEYS + 10 {
            book.learn(
                &format!("worker_step:worker:kind-{n}"),
                1,
                &call(100.0, 10.0),
            );
        }
        assert_eq!(book.all().len(), MAX_PACE_KEYS);
        assert_eq!(book.get("worker_step:worker:kind-5000"), None);
        book.learn("worker_step:worker:kind-0", 2, &call(100.0, 10.0));
        assert_eq!(
            book.get("worker_step:worker:kind-0").map(|p| p.calls),
            Some(2)
        );
    }

    #[test]
    fn the_book_says_what_changed_once() {
        let book = PaceBook::new();
        book.learn("m", 1, &call(100.0, 10.0));
        book.set("loaded", Pace::default(), false);
        book.reset("absent");
        assert_eq!(book.take_changed().len(), 1);
        assert!(book.take_changed().is_empty());
        book.reset("m");
        assert_eq!(book.take_changed(), [("m".to_owned(), None)]);
    }

    #[test]
    fn the_book_counts_calls_in_flight_per_endpoint() {
        let book = PaceBook::new();
        assert_eq!(book.enter("m at http://a"), 0);
        assert_eq!(book.enter("m at http://a"), 1);
        assert_eq!(book.enter("m at http://b"), 0);
        book.leave("m at http://a");
        assert_eq!(book.in_flight("m at http://a"), 1);
        book.leave("m at http://a");
        book.leave("m at http://a");
        assert_eq!(book.in_flight("m at http://a"), 0);
    }

    #[test]
    fn a_tool_of_the_same_name_on_another_server_has_another_key() {
        let here = tool_server("search", &["node", "/opt/a/index.js", "stdio"]);
        let there = tool_server("search", &["node", "/opt/b/index.js", "stdio"]);
        let remote = tool_server("search", &["https://tools.example/mcp"]);
        assert_ne!(here, there);
        assert_ne!(here, remote);
        assert!(here.starts_with("search#"), "{here}");
        assert!(
            !here.contains("/opt/a"),
            "the target shows only as a hash: {here}"
        );
        // A server the configuration provides by name is that server.
        assert_eq!(tool_server("search", &[]), "search");
        // The same server has the same identity in every process.
        assert_eq!(
            here,
            tool_server("search", &["node", "/opt/a/index.js", "stdio"])
        );
    }

    #[test]
    fn run_tags_are_stable() {
        assert_eq!(run_tag(""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(run_tag("run-1"), run_tag("run-2"));
    }
}
