//! Supervision strategies: what a supervisor does when one of its children
//! ends.
//!
//! A child — a model call, a tool call, a worker — ends in one of the ways of
//! [`ChildEnd`]: it completed, the watchdog answered `INTERVENE` or
//! `ESCALATE`, it failed, it panicked, or its lease was capped. A
//! [`SupervisionStrategy`] maps that end to a [`SupervisionAction`]: restart
//! after a delay, pause the run for a person, fail the run, or carry on.
//! Strategies are pure, deterministic logic with no actor inside: time is
//! passed in as a `tokio::time::Instant`, so every strategy runs on paused
//! time in tests, and users run supervision experiments by implementing the
//! trait and boxing it as `Box<dyn SupervisionStrategy>`.
//!
//! Two strategies ship:
//!
//! - [`RestartOnIntervene`], the default. `INTERVENE`, a panic, a capped
//!   lease and a retryable failure restart the child; `ESCALATE` pauses. A
//!   non-retryable failure of a tool call or worker is left to the loop (the
//!   model sees the error as the call's result), while one of a model call
//!   fails the run, since there is nothing left to drive it. Past the
//!   limits the child is given up and the failure goes up the tree
//!   ([`SupervisionAction::GiveUp`]).
//! - [`FailFast`]: any failure fails the run at once; `ESCALATE` still
//!   pauses, because a person asked to decide must be allowed to.
//!
//! # Why these defaults
//!
//! Restarts are bounded by a *restart intensity* in the Erlang sense: at most
//! [`RestartPolicy::max_restarts`] restarts (default 3) within
//! [`RestartPolicy::within`] (default 60 s), counted per strategy instance
//! over all its children, as an Erlang supervisor counts them. A child that
//! keeps dying is a fault a restart will not fix; past the limit the child
//! is given up instead of spinning, and the failure goes up the tree as an
//! Erlang supervisor hands it to its parent: a tool call or a worker ends as
//! an error result its loop's model sees and can work around; a model call,
//! or a root loop past its intensity, pauses the run for a person
//! ([`OnExhausted::Pause`], the default: a dead endpoint that comes back
//! loses nothing) or fails it ([`OnExhausted::Fail`]).
//!
//! Between restarts the strategy backs off exponentially — 1 s, 2 s, 4 s, …
//! capped at 30 s — so a struggling provider or tool gets room to recover.
//! Each delay is then spread by a random *jitter* (default ±10 %) so that
//! many runs hit by the same outage do not all retry in the same instant and
//! knock the dependency over again (the thundering herd). The jitter comes
//! from a seedable generator: [`RestartOnIntervene::with_seed`] makes it
//! reproducible.
//!
//! ```
//! use std::time::Duration;
//! use leasehold_actors::{
//!     ChildEnd, ChildInfo, ChildKind, GiveUpScope, OnExhausted, RestartOnIntervene,
//!     RestartPolicy, SupervisionAction, SupervisionStrategy,
//! };
//! use tokio::time::Instant;
//!
//! let policy = RestartPolicy { jitter: 0.0, ..RestartPolicy::default() };
//! policy.validate()?;
//! let mut strategy = RestartOnIntervene::with_seed(policy, 7);
//! let child = ChildInfo {
//!     path: "run/step-1/search".into(),
//!     kind: ChildKind::ToolCall,
//!     subject: "search".into(),
//!     attempt: 1,
//! };
//! let intervened = ChildEnd::Intervened { reason: "stuck in a loop".into() };
//! let now = Instant::now();
//!
//! // Three restarts, backing off 1 s, 2 s, 4 s ...
//! for expected in [1, 2, 4] {
//!     assert_eq!(
//!         strategy.decide(&child, &intervened, now),
//!         SupervisionAction::Restart { after: Duration::from_secs(expected) },
//!     );
//! }
//! // ... and the fourth within a minute gives up: the loop's restart
//! // intensity is spent, and the failure goes up the tree.
//! assert_eq!(
//!     strategy.decide(&child, &intervened, now),
//!     SupervisionAction::GiveUp {
//!         reason: "restart intensity exceeded: more than 3 restarts in 60s".into(),
//!         scope: GiveUpScope::Supervisor,
//!         on_exhausted: OnExhausted::Pause,
//!     },
//! );
//! # Ok::<(), leasehold_actors::ConfigError>(())
//! ```

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::duration::{check_duration, check_positive_duration, clamp_duration};
use crate::error::ConfigError;

/// Makes one supervision strategy per supervisor (each loop is one).
pub type StrategyFactory = std::sync::Arc<dyn Fn() -> Box<dyn SupervisionStrategy> + Send + Sync>;

/// What kind of child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ChildKind {
    /// A call to the model.
    ModelCall,
    /// A call to a tool.
    ToolCall,
    /// A long-lived worker.
    Worker,
}

/// The child that ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildInfo {
    /// Where the child sits in the supervision tree.
    pub path: String,
    /// What kind of child it is.
    pub kind: ChildKind,
    /// What it was doing, as its lease names it (e.g. the tool's name).
    pub subject: String,
    /// The attempt that just ended, 1 for the first.
    pub attempt: u32,
}

/// How a child ended.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ChildEnd {
    /// It finished its work.
    Completed,
    /// The watchdog answered `INTERVENE`.
    Intervened {
        /// The watchdog's reason.
        reason: String,
    },
    /// The watchdog answered `ESCALATE`: a person must decide.
    Escalated {
        /// The watchdog's reason.
        reason: String,
        /// The evidence when it escalated, if a lease escalated it.
        evidence: Option<crate::vocabulary::evidence::EvidenceSummary>,
    },
    /// It returned an error.
    Failed {
        /// The error.
        reason: String,
        /// Whether trying again may succeed.
        retryable: bool,
    },
    /// It panicked.
    Panicked {
        /// The panic message.
        message: String,
    },
    /// Its lease reached the renewal cap.
    Capped {
        /// The cap it reached.
        max_renewals: u32,
    },
}

impl ChildEnd {
    /// Whether a restart may help: `INTERVENE`, a panic, a capped lease or
    /// a retryable failure.
    pub fn is_restartable(&self) -> bool {
        matches!(
            self,
            Self::Intervened { .. }
                | Self::Panicked { .. }
                | Self::Capped { .. }
                | Self::Failed {
                    retryable: true,
                    ..
                }
        )
    }
}

/// What the supervisor does about a child that ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SupervisionAction {
    /// Start the child again after this delay.
    Restart {
        /// The delay before the restart.
        after: Duration,
    },
    /// Pause the run until a person answers.
    Pause {
        /// Why.
        reason: String,
    },
    /// Fail the run.
    Fail {
        /// Why.
        reason: String,
    },
    /// Do nothing: the run carries on.
    Ignore,
    /// Give the child up: restarting it again will not help, so its
    /// supervisor hands the failure up the tree, as a supervisor that gives
    /// up hands it to its parent. A tool call or a worker ends as an error
    /// result its loop's model sees; a model call, and a root loop past its
    /// restart intensity, reach the person at the top (`on_exhausted`); a
    /// worker's loop past its intensity fails, which is its parent's error
    /// result.
    GiveUp {
        /// Why, naming the child and its attempts or the intensity limit.
        reason: String,
        /// Whether the child's own attempts or the supervisor's restart
        /// intensity ran out.
        scope: GiveUpScope,
        /// What the top of the tree does with it.
        on_exhausted: OnExhausted,
    },
}

/// What ran out when a strategy gives a child up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUpScope {
    /// The child's own attempts: `1 + max_restarts`, however far apart.
    Child,
    /// The supervisor's restart intensity: more than `max_restarts`
    /// restarts of its children within the window.
    Supervisor,
}

/// What a run does with a failure that reaches the top of its tree: a
/// model call whose restarts ran out, or a root loop past its restart
/// intensity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExhausted {
    /// Pause the run `waiting_human`, with a reason naming the endpoint or
    /// the tool and its attempts; `resume` tries again. Nothing done is
    /// lost (the default).
    #[default]
    Pause,
    /// Fail the run.
    Fail,
}

impl OnExhausted {
    /// Its name in configuration and flows: `pause` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Fail => "fail",
        }
    }
}

impl std::fmt::Display for OnExhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for OnExhausted {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "pause" => Ok(Self::Pause),
            "fail" => Ok(Self::Fail),
            other => Err(ConfigError::new(
                "supervision.on_exhausted",
                "pause or fail",
                format_args!("{other:?}"),
            )),
        }
    }
}

/// A pluggable supervision strategy: users run supervision experiments by
/// implementing this.
///
/// A strategy is told of every child that ends, with the current time from
/// tokio, and answers what to do. It may keep state (restart history, a
/// random generator) across calls; the supervisor holds one instance for all
/// its children. Give one to the engine with
/// [`EngineBuilder::strategy`](crate::EngineBuilder::strategy).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leasehold_actors::prelude::*;
///
/// /// Restarts a failed child once, after a second; pauses the run for a
/// /// person at its second failure.
/// struct OnceThenAsk;
///
/// impl SupervisionStrategy for OnceThenAsk {
///     fn decide(
///         &mut self,
///         child: &ChildInfo,
///         end: &ChildEnd,
///         _now: tokio::time::Instant,
///     ) -> SupervisionAction {
///         match end {
///             ChildEnd::Completed => SupervisionAction::Ignore,
///             _ if child.attempt < 2 => SupervisionAction::Restart {
///                 after: Duration::from_secs(1),
///             },
///             _ => SupervisionAction::Pause {
///                 reason: format!("{} failed twice", child.subject),
///             },
///         }
///     }
/// }
///
/// let factory: StrategyFactory = Arc::new(|| Box::new(OnceThenAsk));
/// # let _ = factory;
/// ```
pub trait SupervisionStrategy: Send + 'static {
    /// Decides what to do about `child`, which just ended as `end`, at `now`.
    fn decide(&mut self, child: &ChildInfo, end: &ChildEnd, now: Instant) -> SupervisionAction;

    /// Whether this strategy meets `end` of `child` with a restart, limits
    /// aside. The loop asks before [`Self::decide`] when a restart may not
    /// happen blindly (a call of unknown outcome to a tool not known to be
    /// idempotent): a person decides instead, and that costs no restart
    /// intensity. By default, the ends [`ChildEnd::is_restartable`] names.
    fn restarts(&self, child: &ChildInfo, end: &ChildEnd) -> bool {
        let _ = child;
        end.is_restartable()
    }
}

/// Restart parameters: the restart intensity and the backoff between
/// restarts.
///
/// `max_restarts` bounds restarts twice: at most that many within `window`
/// over all the supervisor's children (the intensity, in the Erlang sense,
/// which stops a crash loop), and at most that many for any one call, however
/// far apart (which stops a call that fails slowly — an attempt cut by its
/// renewal cap can last far longer than any sensible window). A call thus
/// gets at most `1 + max_restarts` attempts.
///
/// Defaults: at most 3 restarts within 60 s and 3 per call, backoff from 1 s
/// doubling up to 30 s, jitter ±10 %.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RestartPolicy {
    /// At most this many restarts ... (default 3); and at most this many of
    /// any one call.
    pub max_restarts: u32,
    /// ... within this window (default 60 s).
    pub window: Duration,
    /// The backoff before the first restart (default 1 s).
    pub backoff_initial: Duration,
    /// The longest backoff, before jitter (default 30 s).
    pub backoff_max: Duration,
    /// The growth of the backoff from one restart to the next (default 2.0).
    pub multiplier: f64,
    /// The spread of the backoff: each delay is multiplied by a factor drawn
    /// uniformly in `[1 - jitter, 1 + jitter]` (default 0.1).
    pub jitter: f64,
    /// What the top of the tree does once the limits give a child up
    /// (default [`OnExhausted::Pause`]).
    pub on_exhausted: OnExhausted,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            max_restarts: 3,
            window: Duration::from_secs(60),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            multiplier: 2.0,
            jitter: 0.1,
            on_exhausted: OnExhausted::Pause,
        }
    }
}

impl RestartPolicy {
    /// Refuses nonsense, naming the field by its configuration key
    /// (`restart.<field>`; a flow's `supervision.<field>`): a zero
    /// `window`, a zero `backoff_initial`, any of the three durations above
    /// [`MAX_DURATION`](crate::MAX_DURATION), a `backoff_max` below
    /// `backoff_initial` ([`rules::backoffs_in_order`](crate::rules::backoffs_in_order)),
    /// a `multiplier` below 1 or not finite, a `jitter`
    /// outside `[0, 1]` or not finite.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_positive_duration("restart.window", self.window)?;
        check_positive_duration("restart.backoff_initial", self.backoff_initial)?;
        check_duration("restart.backoff_max", self.backoff_max)?;
        crate::rules::backoffs_in_order(self.backoff_initial, self.backoff_max)?;
        if !self.multiplier.is_finite() || self.multiplier < 1.0 {
            return Err(ConfigError::new(
                "restart.multiplier",
                "a finite number of at least 1.0",
                self.multiplier,
            ));
        }
        if !self.jitter.is_finite() || !(0.0..=1.0).contains(&self.jitter) {
            return Err(ConfigError::new(
                "restart.jitter",
                "a number between 0.0 and 1.0",
                self.jitter,
            ));
        }
        Ok(())
    }

    /// The backoff before restart number `restart` (1 for the first), without
    /// jitter: `backoff_initial × multiplier^(restart - 1)`, never below
    /// `backoff_initial` and capped at `backoff_max` and at
    /// [`MAX_DURATION`](crate::MAX_DURATION).
    ///
    /// Never panics, whatever `restart` and whatever the policy; `0` is
    /// treated as `1`.
    pub fn backoff(&self, restart: u32) -> Duration {
        let exponent = restart.saturating_sub(1);
        if exponent == 0 {
            return clamp_duration(self.backoff_initial.min(self.backoff_max));
        }
        let factor = self.multiplier.powf(f64::from(exponent));
        // An infinite or NaN product (huge `restart`, nonsense multiplier) is
        // refused by `try_from_secs_f64`: both mean "past the cap".
        let grown = Duration::try_from_secs_f64(self.backoff_initial.as_secs_f64() * factor)
            .unwrap_or(self.backoff_max);
        // Never below the first backoff, whatever the float rounding did.
        clamp_duration(grown.max(self.backoff_initial).min(self.backoff_max))
    }

    /// The per-call limit, as the reason the call is given up with.
    fn attempts_exhausted(&self, subject: &str, attempt: u32) -> String {
        format!(
            "{subject}: failed on each of its {attempt} attempts, the most that {} restarts allow",
            self.max_restarts
        )
    }

    fn give_up(&self, reason: String, scope: GiveUpScope) -> SupervisionAction {
        SupervisionAction::GiveUp {
            reason,
            scope,
            on_exhausted: self.on_exhausted,
        }
    }

    fn intensity_exceeded(&self) -> String {
        format!(
            "restart intensity exceeded: more than {} restarts in {}",
            self.max_restarts,
            format_window(self.window)
        )
    }
}

/// `60s` for whole seconds, `1500ms` for whole milliseconds, the `Debug`
/// form (`1.5ms`) for anything finer.
fn format_window(window: Duration) -> String {
    if window.subsec_nanos() == 0 {
        format!("{}s", window.as_secs())
    } else if window.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", window.as_millis())
    } else {
        format!("{window:?}")
    }
}

/// The default strategy: `INTERVENE` (and a panic, a capped lease, a
/// retryable failure) restarts with exponential backoff and jitter under the
/// restart intensity limit; `ESCALATE` pauses.
///
/// The rules of [`SupervisionStrategy::decide`]:
///
/// - `Completed` → `Ignore`.
/// - `Escalated { reason }` → `Pause { reason }`.
/// - `Intervened`, `Panicked`, `Capped` and `Failed { retryable: true }` →
///   restart under the limits. A call whose attempt `max_restarts + 1`
///   ended so is given up (`GiveUp` with [`GiveUpScope::Child`]: `search:
///   failed on each of its 4 attempts, the most that 3 restarts allow`),
///   however long its attempts took. Restarts older than `now - within`
///   are forgotten; if `max_restarts` restarts remain in the window, the
///   child is given up with [`GiveUpScope::Supervisor`] and a reason naming
///   the limit (`restart intensity exceeded: more than 3 restarts in 60s`);
///   otherwise the restart is recorded at `now` and
///   `Restart { after }` is returned, `after` being
///   [`RestartPolicy::backoff`] of the number of restarts now in the window,
///   times a jitter factor drawn uniformly in `[1 - jitter, 1 + jitter]`.
/// - `Failed { retryable: false }` → `Ignore` for a tool call or a worker
///   (the error goes back to the model as the call's result), `Fail {
///   reason: "{subject}: {reason}" }` for a model call.
///
/// The intensity is counted per instance, over all children, as an Erlang
/// supervisor counts it.
///
/// The policy is not checked here: call [`RestartPolicy::validate`] first.
/// An invalid policy gives odd delays but never a panic.
#[derive(Debug)]
pub struct RestartOnIntervene {
    policy: RestartPolicy,
    /// When the restarts still inside the window happened, oldest first.
    restarts: VecDeque<Instant>,
    rng: fastrand::Rng,
}

impl RestartOnIntervene {
    /// The strategy under `policy`, its jitter seeded from entropy.
    pub fn new(policy: RestartPolicy) -> Self {
        Self::with_rng(policy, fastrand::Rng::new())
    }

    /// The strategy under `policy` with deterministic jitter: the same seed
    /// gives the same delays.
    pub fn with_seed(policy: RestartPolicy, seed: u64) -> Self {
        Self::with_rng(policy, fastrand::Rng::with_seed(seed))
    }

    fn with_rng(policy: RestartPolicy, rng: fastrand::Rng) -> Self {
        Self {
            policy,
            restarts: VecDeque::new(),
            rng,
        }
    }

    /// The restart policy.
    pub fn policy(&self) -> &RestartPolicy {
        &self.policy
    }

    /// A restart of `child` if the limits allow one, else the failure naming
    /// the limit: the intensity first, then the call's own attempts.
    fn restart(&mut self, child: &ChildInfo, now: Instant) -> SupervisionAction {
        let within = self.policy.window;
        while let Some(&oldest) = self.restarts.front() {
            if now.saturating_duration_since(oldest) > within {
                self.restarts.pop_front();
            } else {
                break;
            }
        }
        let in_window = u32::try_from(self.restarts.len()).unwrap_or(u32::MAX);
        if child.attempt > self.policy.max_restarts {
            return self.policy.give_up(
                self.policy
                    .attempts_exhausted(&child.subject, child.attempt),
                GiveUpScope::Child,
            );
        }
        if in_window >= self.policy.max_restarts {
            return self
                .policy
                .give_up(self.policy.intensity_exceeded(), GiveUpScope::Supervisor);
        }
        self.restarts.push_back(now);
        let backoff = self.policy.backoff(in_window.saturating_add(1));
        SupervisionAction::Restart {
            after: clamp_duration(self.jittered(backoff)),
        }
    }

    /// `backoff` times a factor drawn uniformly in `[1 - jitter, 1 + jitter]`,
    /// never negative.
    fn jittered(&mut self, backoff: Duration) -> Duration {
        let jitter = self.policy.jitter;
        if jitter == 0.0 {
            return backoff;
        }
        let factor = (1.0 - jitter + 2.0 * jitter * self.rng.f64_inclusive())
            .min(1.0 + jitter)
            .max(0.0);
        // Err only for a NaN factor or an overflow, i.e. an invalid policy.
        Duration::try_from_secs_f64(backoff.as_secs_f64() * factor).unwrap_or(backoff)
    }
}

impl SupervisionStrategy for RestartOnIntervene {
    fn decide(&mut self, child: &ChildInfo, end: &ChildEnd, now: Instant) -> SupervisionAction {
        match end {
            ChildEnd::Completed => SupervisionAction::Ignore,
            ChildEnd::Escalated { reason, .. } => SupervisionAction::Pause {
                reason: reason.clone(),
            },
            ChildEnd::Intervened { .. }
            | ChildEnd::Panicked { .. }
            | ChildEnd::Capped { .. }
            | ChildEnd::Failed {
                retryable: true, ..
            } => self.restart(child, now),
            ChildEnd::Failed {
                reason,
                retryable: false,
            } => match child.kind {
                ChildKind::ToolCall | ChildKind::Worker => SupervisionAction::Ignore,
                ChildKind::ModelCall => SupervisionAction::Fail {
                    reason: format!("{}: {reason}", child.subject),
                },
            },
        }
    }
}

/// Any failure fails the run at once; `ESCALATE` still pauses.
///
/// `Completed` → `Ignore`, `Escalated { reason }` → `Pause { reason }`, any
/// other end → `Fail` with a reason naming the child's subject and how it
/// ended.
#[derive(Debug, Default, Clone, Copy)]
pub struct FailFast;

impl SupervisionStrategy for FailFast {
    fn decide(&mut self, child: &ChildInfo, end: &ChildEnd, _now: Instant) -> SupervisionAction {
        let subject = &child.subject;
        let reason = match end {
            ChildEnd::Completed => return SupervisionAction::Ignore,
            ChildEnd::Escalated { reason, .. } => {
                return SupervisionAction::Pause {
                    reason: reason.clone(),
                };
            }
            ChildEnd::Intervened { reason } => format!("{subject}: intervened: {reason}"),
            ChildEnd::Failed { reason, .. } => format!("{subject}: {reason}"),
            ChildEnd::Panicked { message } => format!("{subject}: panicked: {message}"),
            ChildEnd::Capped { max_renewals } => {
                format!("{subject}: lease capped after {max_renewals} renewals")
            }
        };
        SupervisionAction::Fail { reason }
    }

    fn restarts(&self, _child: &ChildInfo, _end: &ChildEnd) -> bool {
        false
    }
}
