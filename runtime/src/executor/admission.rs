//! Adaptive admission: a serving executor takes on runs only as fast as it
//! can keep their leases on time.
//!
//! `server.max_live_runs` is the most runs this executor holds at once; the
//! *admitted limit* is how many it holds now, at most that. It adapts to
//! the executor's lag ([`LoadGauge`]) against a target
//! (`executor.lag_target`), additive increase, multiplicative decrease, as
//! TCP does with its window:
//!
//! - while the lag is under the target and the limit held a run back (a
//!   post was queued for want of room, a claim filled its room, or found
//!   none while runs wait queued), the limit grows by a step every
//!   [`ADAPT_INTERVAL`] — a 64th of the ceiling, at least one run, so that
//!   from the floor to the ceiling takes 64 on-time intervals (6.4 s);
//! - while the lag is over the target the limit halves, at most once per
//!   [`CUT_EVERY`] intervals (a second), since the gauge's decaying maximum
//!   stays high for a few samples after one stall; and no run is admitted
//!   at all beyond the floor — a late executor starts nothing new;
//! - it never goes above the ceiling nor below [`FLOOR`] (one run): an idle
//!   executor always takes on one run, however late it reads.
//!
//! The limit starts at the ceiling: the configuration is trusted until the
//! lag says otherwise, and an executor that is never late behaves exactly
//! as a fixed limit would. A run that finds no room is recorded `queued`
//! and waits durably; another executor sharing the store may take it.
//!
//! Without a gauge, or with a zero target, the limit is the ceiling.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_actors::{LoadGauge, RunStatus, Store, StoreError};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The default lag target of admission (`executor.lag_target`, 100 ms):
/// below the load bound of the leases (250 ms), so that an executor stops
/// taking on runs before its leases start being renewed by `load`, and far
/// above the lag of an executor with time to spare (a millisecond or so).
pub const DEFAULT_LAG_TARGET: Duration = Duration::from_millis(100);

/// How often the admitted limit adapts: as often as the probe samples.
pub const ADAPT_INTERVAL: Duration = leasehold_actors::DEFAULT_PROBE_INTERVAL;

/// Intervals between two cuts of the limit (one second at
/// [`ADAPT_INTERVAL`]).
pub const CUT_EVERY: u32 = 10;

/// The fewest runs the limit allows.
pub const FLOOR: usize = 1;

/// On-time intervals from the floor to the ceiling: the step is a 64th of
/// the ceiling.
const STEPS: usize = 64;

/// The admitted limit, additive increase and multiplicative decrease: pure
/// state, one [`Aimd::tick`] per interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aimd {
    limit: usize,
    ceiling: usize,
    step: usize,
    since_cut: u32,
}

impl Aimd {
    /// A limit at `ceiling` (at least [`FLOOR`]).
    pub fn new(ceiling: usize) -> Self {
        let ceiling = ceiling.max(FLOOR);
        Self {
            limit: ceiling,
            ceiling,
            step: ceiling.div_ceil(STEPS).max(1),
            // The first late interval cuts at once.
            since_cut: CUT_EVERY,
        }
    }

    /// The limit now.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// One interval: `late` if the lag was over the target, `held_back`
    /// if the limit kept a run out. Answers whether the limit grew.
    pub fn tick(&mut self, late: bool, held_back: bool) -> bool {
        self.since_cut = self.since_cut.saturating_add(1);
        if late {
            if self.since_cut >= CUT_EVERY {
                self.limit = (self.limit / 2).max(FLOOR);
                self.since_cut = 0;
            }
            return false;
        }
        if held_back && self.limit < self.ceiling {
            self.limit = self.limit.saturating_add(self.step).min(self.ceiling);
            return true;
        }
        false
    }
}

/// A serving executor's admission: its admitted limit, adapted to its lag.
#[derive(Debug)]
pub struct Admission {
    gauge: Option<LoadGauge>,
    target: Duration,
    ceiling: usize,
    aimd: Mutex<Aimd>,
    /// The limit as last adapted, for readers.
    limit: AtomicUsize,
    /// Whether the limit kept a run out since the last interval.
    held_back: AtomicBool,
}

impl Admission {
    /// Admission under `ceiling` (`server.max_live_runs`), adapted to
    /// `gauge` against `target`; a fixed limit at the ceiling without a
    /// gauge or with a zero target.
    pub fn new(ceiling: u32, target: Duration, gauge: Option<LoadGauge>) -> Self {
        let ceiling = usize::try_from(ceiling).unwrap_or(usize::MAX).max(FLOOR);
        let gauge = gauge.filter(|_| !target.is_zero());
        Self {
            gauge,
            target,
            ceiling,
            aimd: Mutex::new(Aimd::new(ceiling)),
            limit: AtomicUsize::new(ceiling),
            held_back: AtomicBool::new(false),
        }
    }

    /// The admitted limit now.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// The most the limit may be (`server.max_live_runs`).
    pub fn ceiling(&self) -> usize {
        self.ceiling
    }

    /// The lag target; `None` when admission does not adapt.
    pub fn target(&self) -> Option<Duration> {
        self.gauge.as_ref().map(|_| self.target)
    }

    /// The executor's lag now, if a gauge measures it.
    pub fn lag(&self) -> Option<Duration> {
        self.gauge.as_ref().map(LoadGauge::lag)
    }

    fn late(&self) -> bool {
        self.lag().is_some_and(|lag| lag > self.target)
    }

    /// Whether the limit adapts to a lag (a gauge and a target).
    pub fn adapts(&self) -> bool {
        self.gauge.is_some()
    }

    /// How many more runs may start now, with `live` running: up to the
    /// admitted limit while on time, up to the floor while late.
    pub fn room(&self, live: usize) -> usize {
        let limit = if self.late() { FLOOR } else { self.limit() };
        limit.saturating_sub(live)
    }

    /// The limit kept a run out (a post queued for want of room, a claim
    /// that filled its room): while on time, the next interval raises it.
    /// Only real demand raises the limit, so an idle executor's limit
    /// stays where its last burst left it.
    pub fn held_back(&self) {
        self.held_back.store(true, Ordering::Relaxed);
    }

    /// The limit was full at a claim: if runs wait queued in `store`, it
    /// held them back (asked of the store only when the limit adapts).
    pub async fn full(&self, store: &dyn Store) -> Result<(), StoreError> {
        if self.adapts() && store.count_runs(RunStatus::Queued).await? > 0 {
            self.held_back();
        }
        Ok(())
    }

    /// One interval of adaptation; answers whether room may have opened
    /// (the limit grew).
    pub fn adapt(&self) -> bool {
        if self.gauge.is_none() {
            return false;
        }
        let late = self.late();
        let held_back = self.held_back.swap(false, Ordering::Relaxed);
        let mut aimd = self.aimd.lock().unwrap_or_else(PoisonError::into_inner);
        let grew = aimd.tick(late, held_back);
        self.limit.store(aimd.limit(), Ordering::Relaxed);
        grew
    }

    /// Adapts every [`ADAPT_INTERVAL`] until `stop`, waking the claimer
    /// through `wake` when the limit grows or the executor is on time
    /// again; nothing to do (and no task) when admission does not adapt.
    pub fn drive(
        self: &Arc<Self>,
        wake: Arc<Notify>,
        stop: CancellationToken,
    ) -> Option<tokio::task::JoinHandle<()>> {
        self.gauge.as_ref()?;
        let admission = Arc::clone(self);
        Some(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(ADAPT_INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut was_late = false;
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                let grew = admission.adapt();
                let late = admission.late();
                if grew || (was_late && !late) {
                    wake.notify_one();
                }
                was_late = late;
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_halves_at_most_once_a_second_and_never_below_the_floor() {
        let mut aimd = Aimd::new(64);
        assert_eq!(aimd.limit(), 64);
        assert!(!aimd.tick(true, true));
        assert_eq!(aimd.limit(), 32, "the first late interval cuts at once");
        for _ in 1..CUT_EVERY {
            aimd.tick(true, true);
        }
        assert_eq!(aimd.limit(), 32, "one cut per second of lateness");
        aimd.tick(true, false);
        assert_eq!(aimd.limit(), 16);
        for _ in 0..100 * CUT_EVERY {
            aimd.tick(true, false);
        }
        assert_eq!(aimd.limit(), FLOOR);
    }

    #[test]
    fn the_limit_grows_by_a_step_while_on_time_and_held_back_up_to_the_ceiling() {
        let mut aimd = Aimd::new(640);
        for _ in 0..5 * CUT_EVERY {
            aimd.tick(true, false);
        }
        assert_eq!(aimd.limit(), 20);
        assert!(!aimd.tick(false, false), "no growth that nobody asked for");
        assert_eq!(aimd.limit(), 20);
        assert!(aimd.tick(false, true));
        assert_eq!(aimd.limit(), 30, "a step is a 64th of the ceiling");
        let mut ticks = 1;
        while aimd.tick(false, true) {
            ticks += 1;
        }
        assert_eq!(aimd.limit(), 640);
        assert_eq!(ticks, 62);
        let mut small = Aimd::new(3);
        small.tick(true, false);
        assert_eq!(small.limit(), 1);
        assert!(small.tick(false, true));
        assert_eq!(small.limit(), 2, "a step is at least one run");
    }

    #[test]
    fn a_late_executor_admits_only_up_to_the_floor_and_cuts_its_limit() {
        let gauge = LoadGauge::new();
        let admission = Admission::new(8, DEFAULT_LAG_TARGET, Some(gauge.clone()));
        assert!(admission.adapts());
        assert_eq!(admission.room(3), 5);
        gauge.set(Duration::from_millis(500));
        assert_eq!(admission.room(0), 1, "an idle executor always takes one");
        assert_eq!(admission.room(1), 0);
        admission.held_back();
        assert!(!admission.adapt());
        assert_eq!(admission.limit(), 4);
        gauge.set(Duration::from_millis(2));
        assert_eq!(admission.room(4), 0);
        assert!(!admission.adapt(), "nobody was held back: no growth");
        admission.held_back();
        assert!(admission.adapt(), "held back on time: it grows");
        assert_eq!(admission.limit(), 5);
        assert!(!admission.adapt(), "nobody held back since");
    }

    #[test]
    fn without_a_gauge_or_a_target_the_limit_is_the_ceiling() {
        let gauge = LoadGauge::new();
        gauge.set(Duration::from_secs(9));
        for admission in [
            Admission::new(8, DEFAULT_LAG_TARGET, None),
            Admission::new(8, Duration::ZERO, Some(gauge)),
        ] {
            assert_eq!(admission.room(2), 6);
            admission.held_back();
            assert!(!admission.adapt());
            assert!(!admission.adapts());
            assert_eq!(admission.limit(), 8);
            assert_eq!(admission.target(), None);
        }
    }
}
