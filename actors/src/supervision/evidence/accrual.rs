//! The phi accrual failure detector (Hayashibara et al., 2004), over the
//! inter-arrival times of a lease's evidence.
//!
//! Instead of a yes/no "is it alive", phi is a suspicion *level*:
//! `phi = -log10(P(the next item arrives later than now))`, with the
//! inter-arrival times taken as normally distributed. phi 1 means a 10 %
//! chance that the silence so far is normal, phi 8 one in 10⁸. The formula,
//! the logistic approximation of the normal tail and the seeding of the
//! history with two synthetic samples are Pekko's (`PhiAccrualFailureDetector`).
//!
//! Pekko's defaults are tuned for cluster heartbeats, one a second: threshold
//! 8.0, minimum standard deviation 100 ms, acceptable pause 3 s, a window of
//! 1000 samples, first estimate 1 s. leasehold's evidence arrives at very
//! different rates per kind of operation, so [`AccrualPolicy::default`] keeps
//! the threshold and the window and scales the rest per lease kind (see
//! `docs/runtime-semantics.md`).

use std::collections::VecDeque;
use std::time::Duration;

use crate::error::ConfigError;
use crate::pace::{PRIOR_SAMPLES, Spread};
use crate::vocabulary::lease::LeaseKind;

/// How many inter-arrival samples a lease keeps (Pekko's `max-sample-size`).
pub const WINDOW_SAMPLES: usize = 1000;

/// phi is reported no higher than this, so that it stays a finite number in
/// JSON; anything near it means "silent for far longer than ever before".
pub const PHI_CEILING: f64 = 1000.0;

/// The parameters of the detector for one kind of operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AccrualConfig {
    /// phi at or above which evidence counts as suspicious.
    pub threshold: f64,
    /// Floor of the standard deviation, so that very regular evidence does
    /// not make a small jitter look like death.
    pub min_std_deviation: Duration,
    /// A pause that is always acceptable on top of the mean interval.
    pub acceptable_pause: Duration,
    /// The interval assumed before any has been measured.
    pub first_interval_estimate: Duration,
}

impl AccrualConfig {
    /// Pekko's defaults for cluster heartbeats.
    pub const PEKKO: Self = Self {
        threshold: 8.0,
        min_std_deviation: Duration::from_millis(100),
        acceptable_pause: Duration::from_secs(3),
        first_interval_estimate: Duration::from_secs(1),
    };

    /// Refuses a non-positive threshold, a zero standard deviation or
    /// estimate, or any duration above [`MAX_DURATION`](crate::MAX_DURATION),
    /// naming the field under `prefix`.
    pub fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        crate::check_duration(
            format!("{prefix}.min_std_deviation"),
            self.min_std_deviation,
        )?;
        crate::check_duration(format!("{prefix}.acceptable_pause"), self.acceptable_pause)?;
        crate::check_duration(
            format!("{prefix}.first_interval_estimate"),
            self.first_interval_estimate,
        )?;
        if !(self.threshold.is_finite() && self.threshold > 0.0) {
            return Err(ConfigError::new(
                format!("{prefix}.threshold"),
                "a finite number above 0",
                self.threshold,
            ));
        }
        if self.min_std_deviation.is_zero() {
            return Err(ConfigError::new(
                format!("{prefix}.min_std_deviation"),
                "a duration above 0",
                "0",
            ));
        }
        if self.first_interval_estimate.is_zero() {
            return Err(ConfigError::new(
                format!("{prefix}.first_interval_estimate"),
                "a duration above 0",
                "0",
            ));
        }
        Ok(())
    }

    /// phi for a silence of `elapsed` after a history with the given mean and
    /// standard deviation (both before the floor and pause are applied).
    /// Never panics, whatever the durations.
    pub fn phi(&self, elapsed: Duration, mean: Duration, std_deviation: Duration) -> f64 {
        let mean_ms = millis(mean.saturating_add(self.acceptable_pause));
        let std_ms = millis(std_deviation.max(self.min_std_deviation));
        phi(millis(elapsed), mean_ms, std_ms)
    }

    /// How long a silence must last for phi to reach the threshold, after a
    /// history with the given mean and standard deviation: the inverse of
    /// [`AccrualConfig::phi`].
    pub fn crossing(&self, mean: Duration, std_deviation: Duration) -> Duration {
        let mean_ms = millis(mean.saturating_add(self.acceptable_pause));
        let std_ms = millis(std_deviation.max(self.min_std_deviation));
        let y = threshold_deviations(self.threshold);
        // A millisecond past the crossing: phi computed there again, after
        // the rounding of durations, is at the threshold, not a hair below.
        Duration::try_from_secs_f64((mean_ms + y * std_ms + 1.0) / 1e3).unwrap_or(Duration::MAX)
    }
}

/// How many standard deviations past the mean phi reaches `threshold`.
/// Asked at every expiry with the few thresholds of the configuration:
/// the last answer is kept per thread, and the bisection runs for a new
/// threshold only.
fn threshold_deviations(threshold: f64) -> f64 {
    thread_local! {
        static LAST: std::cell::Cell<Option<(u64, f64)>> = const { std::cell::Cell::new(None) };
    }
    let bits = threshold.to_bits();
    if let Some((known, deviations)) = LAST.get()
        && known == bits
    {
        return deviations;
    }
    let deviations = bisect_deviations(threshold);
    LAST.set(Some((bits, deviations)));
    deviations
}

/// [`threshold_deviations`], computed: phi is increasing in the silence,
/// so found by bisection.
fn bisect_deviations(threshold: f64) -> f64 {
    let (mut low, mut high) = (0.0_f64, 64.0_f64);
    for _ in 0..60 {
        let middle = (low + high) / 2.0;
        if phi(middle, 0.0, 1.0) < threshold {
            low = middle;
        } else {
            high = middle;
        }
    }
    high
}

/// The accrual parameters per lease kind.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AccrualPolicy {
    /// Tokens of a streaming model call: tens a second, with pauses while
    /// the model thinks. Pekko's values as they are.
    pub model_stream: AccrualConfig,
    /// A blocking model call sends no evidence until it answers; a hint from
    /// the transport (headers, keep-alives) is judged like a stream.
    pub model_blocking: AccrualConfig,
    /// MCP progress notifications: typically one every second or few.
    pub tool_call: AccrualConfig,
    /// Worker steps: each is a model call and its tools, tens of seconds.
    pub worker_step: AccrualConfig,
}

impl AccrualPolicy {
    /// The parameters for `kind`.
    pub fn for_kind(&self, kind: LeaseKind) -> &AccrualConfig {
        match kind {
            LeaseKind::ModelStream => &self.model_stream,
            LeaseKind::ModelBlocking => &self.model_blocking,
            LeaseKind::ToolCall => &self.tool_call,
            LeaseKind::WorkerStep => &self.worker_step,
        }
    }

    /// Validates every kind's parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.model_stream.validate("accrual.model_stream")?;
        self.model_blocking.validate("accrual.model_blocking")?;
        self.tool_call.validate("accrual.tool_call")?;
        self.worker_step.validate("accrual.worker_step")
    }
}

impl Default for AccrualPolicy {
    fn default() -> Self {
        Self {
            model_stream: AccrualConfig::PEKKO,
            model_blocking: AccrualConfig::PEKKO,
            tool_call: AccrualConfig {
                threshold: 8.0,
                min_std_deviation: Duration::from_millis(500),
                acceptable_pause: Duration::from_secs(10),
                first_interval_estimate: Duration::from_secs(2),
            },
            worker_step: AccrualConfig {
                threshold: 8.0,
                min_std_deviation: Duration::from_secs(5),
                acceptable_pause: Duration::from_secs(60),
                first_interval_estimate: Duration::from_secs(30),
            },
        }
    }
}

/// The last [`WINDOW_SAMPLES`] inter-arrival times of one lease's evidence,
/// with running sums so that the mean and deviation cost O(1).
#[derive(Debug, Default)]
pub(crate) struct ArrivalWindow {
    // Microseconds, saturating at u32::MAX (71 minutes): 4 bytes a sample.
    intervals: VecDeque<u32>,
    sum: f64,
    sum_squares: f64,
    /// A learned pace's intervals (mean and deviation, microseconds),
    /// counted as [`PRIOR_SAMPLES`] samples in place of the first estimate.
    prior: Option<(f64, f64)>,
}

impl ArrivalWindow {
    pub(crate) fn push(&mut self, interval: Duration) {
        let micros = u32::try_from(interval.as_micros()).unwrap_or(u32::MAX);
        if self.intervals.len() == WINDOW_SAMPLES
            && let Some(oldest) = self.intervals.pop_front()
        {
            let oldest = f64::from(oldest);
            self.sum -= oldest;
            self.sum_squares -= oldest * oldest;
        }
        let value = f64::from(micros);
        self.intervals.push_back(micros);
        self.sum += value;
        self.sum_squares += value * value;
    }

    /// How many real samples are held.
    pub(crate) fn len(&self) -> usize {
        self.intervals.len()
    }

    /// Seeds the history with a learned pace's intervals.
    pub(crate) fn seed(&mut self, interval: Spread) {
        self.prior = Some((interval.mean_ms * 1e3, interval.std_ms * 1e3));
    }

    /// Whether a learned pace seeds the history.
    pub(crate) fn is_seeded(&self) -> bool {
        self.prior.is_some()
    }

    /// The mean and standard deviation of the history, seeded as Pekko does
    /// with two synthetic samples around the first estimate (or with a
    /// learned pace, as [`PRIOR_SAMPLES`] samples) while the window has room
    /// for them.
    pub(crate) fn stats(&self, config: &AccrualConfig) -> (Duration, Duration) {
        let (mut n, mut sum, mut sum_squares) = (self.len(), self.sum, self.sum_squares);
        match self.prior {
            Some((mean, std)) => {
                let weight = f64::from(PRIOR_SAMPLES);
                if n < WINDOW_SAMPLES {
                    n += PRIOR_SAMPLES as usize;
                    sum += weight * mean;
                    sum_squares += weight * (std * std + mean * mean);
                }
            }
            None if n + 2 <= WINDOW_SAMPLES => {
                let estimate = micros(config.first_interval_estimate);
                let spread = estimate / 4.0;
                for sample in [estimate - spread, estimate + spread] {
                    n += 1;
                    sum += sample;
                    sum_squares += sample * sample;
                }
            }
            None => {}
        }
        let count = f64::from(u32::try_from(n).unwrap_or(u32::MAX));
        let mean = sum / count;
        let variance = (sum_squares / count - mean * mean).max(0.0);
        // `try_`: an unvalidated, enormous first estimate must not panic.
        let seconds = |micros: f64| {
            Duration::try_from_secs_f64(micros.max(0.0) / 1e6).unwrap_or(Duration::MAX)
        };
        (seconds(mean), seconds(variance.sqrt()))
    }

    /// phi for a silence of `elapsed`.
    pub(crate) fn phi(&self, elapsed: Duration, config: &AccrualConfig) -> f64 {
        let (mean, std) = self.stats(config);
        config.phi(elapsed, mean, std)
    }

    /// How long a silence must last for phi to reach the threshold.
    pub(crate) fn crossing(&self, config: &AccrualConfig) -> Duration {
        let (mean, std) = self.stats(config);
        config.crossing(mean, std)
    }

    /// The number of samples, their mean and deviation, in milliseconds:
    /// what this call teaches its pace (the seed left out).
    pub(crate) fn own(&self) -> Option<(u64, Spread)> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        let count = f64::from(u32::try_from(n).unwrap_or(u32::MAX));
        let mean = self.sum / count;
        let variance = (self.sum_squares / count - mean * mean).max(0.0);
        Some((
            u64::try_from(n).unwrap_or(u64::MAX),
            Spread {
                mean_ms: mean / 1e3,
                std_ms: variance.sqrt() / 1e3,
            },
        ))
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Pekko's logistic approximation of the normal tail, in milliseconds.
fn phi(elapsed: f64, mean: f64, std_deviation: f64) -> f64 {
    let y = (elapsed - mean) / std_deviation;
    let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
    let value = if elapsed > mean {
        -(e / (1.0 + e)).log10()
    } else {
        -(1.0 - 1.0 / (1.0 + e)).log10()
    };
    if value.is_nan() {
        PHI_CEILING
    } else {
        // `+ 0.0` turns a negative zero into zero.
        value.clamp(0.0, PHI_CEILING) + 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_deviations_are_those_of_the_threshold_asked() {
        for threshold in [8.0, 3.0, 8.0, 8.0, 1.5, 3.0] {
            let deviations = threshold_deviations(threshold);
            assert_eq!(deviations.to_bits(), bisect_deviations(threshold).to_bits());
            assert!((phi(deviations, 0.0, 1.0) - threshold).abs() < 1e-9);
        }
    }

    #[test]
    fn phi_rises_with_silence_and_stays_finite() {
        let config = AccrualConfig::PEKKO;
        let mut window = ArrivalWindow::default();
        for _ in 0..100 {
            window.push(Duration::from_secs(1));
        }
        let mut last = 0.0;
        for secs in [0, 1, 2, 3, 4, 5, 6, 8, 60, 3600] {
            let value = window.phi(Duration::from_secs(secs), &config);
            assert!(value >= last, "phi fell from {last} to {value} at {secs}s");
            assert!(value.is_finite());
            last = value;
        }
        assert!(window.phi(Duration::from_secs(1), &config) < 1.0);
        assert!(window.phi(Duration::from_secs(60), &config) > config.threshold);
    }

    #[test]
    fn phi_matches_pekko_reference_values() {
        // Pekko's PhiAccrualFailureDetectorSpec checks cdf(phi) = 1 - 10^-phi:
        // 0.5 at the mean, 0.8413 one deviation past it, 0.9772 two past.
        let cdf = |p: f64| 1.0 - 10f64.powf(-p);
        assert!((cdf(phi(0.0, 0.0, 10.0)) - 0.5).abs() < 0.001);
        assert!((cdf(phi(10.0, 0.0, 10.0)) - 0.8413).abs() < 0.001);
        assert!((cdf(phi(20.0, 0.0, 10.0)) - 0.9772).abs() < 0.001);
        assert!(phi(100.0, 0.0, 10.0) > 8.0);
    }

    #[test]
    fn window_forgets_the_oldest_samples() {
        let mut window = ArrivalWindow::default();
        for _ in 0..WINDOW_SAMPLES {
            window.push(Duration::from_secs(100));
        }
        for _ in 0..WINDOW_SAMPLES {
            window.push(Duration::from_millis(10));
        }
        assert_eq!(window.len(), WINDOW_SAMPLES);
        let config = AccrualConfig {
            acceptable_pause: Duration::ZERO,
            ..AccrualConfig::PEKKO
        };
        // Only the 10 ms samples remain: a 2 s silence is deeply suspicious.
        assert!(window.phi(Duration::from_secs(2), &config) > 8.0);
    }

    #[test]
    fn the_crossing_is_where_phi_reaches_the_threshold() {
        let config = AccrualConfig::PEKKO;
        let (mean, std) = (Duration::from_millis(500), Duration::from_millis(50));
        let at = config.crossing(mean, std);
        let just_before = at.saturating_sub(Duration::from_millis(2));
        assert!(
            config.phi(just_before, mean, std) < config.threshold,
            "{at:?}"
        );
        assert!(config.phi(at, mean, std) >= config.threshold, "{at:?}");
        // mean + pause + about 5.2 floored deviations.
        assert!(
            at > Duration::from_millis(3_900) && at < Duration::from_millis(4_100),
            "{at:?}"
        );
    }

    #[test]
    fn a_learned_pace_seeds_the_window_in_place_of_the_first_estimate() {
        let config = AccrualConfig {
            acceptable_pause: Duration::ZERO,
            ..AccrualConfig::PEKKO
        };
        let cold = ArrivalWindow::default();
        let mut warm = ArrivalWindow::default();
        warm.seed(Spread {
            mean_ms: 50.0,
            std_ms: 5.0,
        });
        // Cold, 2 s of silence is what the first estimate (1 s) expects
        // give or take; warm, after a pace of 50 ms, it is death.
        let silence = Duration::from_secs(2);
        assert!(cold.phi(silence, &config) < config.threshold);
        assert!(warm.phi(silence, &config) >= config.threshold);
        assert!(warm.crossing(&config) < Duration::from_millis(600));
        assert_eq!(warm.own(), None, "the seed is not the call's own");
    }
}
