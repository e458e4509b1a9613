//! The small traits the actors talk through.
//!
//! Actors never do I/O themselves: whatever leaves the process (a model that
//! judges a lease, the wall clock that stamps events, the sink that carries
//! them) comes in through one of these ports, so that the real parts live in
//! the `leasehold` crate and tests can swap in fakes (feature `test-util`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::event::EventKind;
use crate::evidence::EvidenceSummary;
use crate::lease::{LeaseId, LeaseKind};

/// A boxed, sendable future: what a port returns so it can be used as `dyn`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One message of a loop's transcript, as shown to an evaluator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The message text.
    pub content: String,
}

impl TranscriptMessage {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// What the watchdog shows an evaluator when a lease has expired and neither
/// the free ladder nor fresh evidence settled it.
#[derive(Clone, Debug, Serialize)]
pub struct EvaluationRequest {
    /// The lease that expired.
    pub lease_id: LeaseId,
    /// The run the lease belongs to.
    pub run_id: String,
    /// Where in the run's tree the supervised operation is.
    pub path: String,
    /// What kind of operation the lease watches.
    pub kind: LeaseKind,
    /// What the operation is doing, in words (a tool name, a model call).
    pub subject: String,
    /// How many times this lease has been renewed so far.
    pub renewals: u32,
    /// How many renewals the lease may have in all.
    pub max_renewals: u32,
    /// How long one lease period is.
    #[serde(with = "crate::event::millis")]
    pub lease: Duration,
    /// Liveness evidence: count, age of the last item, phi.
    pub evidence: EvidenceSummary,
    /// The last few messages of the loop's transcript.
    pub transcript_tail: Arc<[TranscriptMessage]>,
}

/// Tokens an evaluator spent, for cost attribution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCost {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// The raw answer of an evaluator: its text, unparsed, and what it cost.
///
/// The watchdog, not the evaluator, parses the text, so every evaluator is held
/// to the same strict-JSON discipline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvaluatorAnswer {
    /// The text the evaluator produced.
    pub text: String,
    /// What producing it cost.
    pub cost: TokenCost,
}

/// An evaluator that could not answer at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("evaluator failed: {message}")]
pub struct EvaluatorError {
    /// What went wrong (transport, refusal, …).
    pub message: String,
}

impl EvaluatorError {
    /// An error with the given message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// A judge of expired leases: in production a model of role `fast` prompted to
/// answer strict JSON `{"verdict": …, "reason": …, "nudge": …}`.
///
/// The watchdog runs it in a task of its own under a flat timeout, so an
/// implementation may take as long as it likes; whatever it returns that is
/// not exactly that JSON trips the breaker and renews.
pub trait Evaluator: Send + Sync + 'static {
    /// Judges one expired lease.
    fn evaluate(
        &self,
        request: EvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>>;
}

/// The wall clock that stamps events and persisted records.
///
/// Actor logic measures time with tokio only (so tests run on paused time);
/// this port is only for the timestamps people read.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_unix_ms(&self) -> u64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that starts at a fixed instant and follows tokio's clock, so that
/// timestamps are deterministic on paused time.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin_unix_ms: u64,
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading `origin_unix_ms` now.
    pub fn starting_at(origin_unix_ms: u64) -> Self {
        Self {
            origin_unix_ms,
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_unix_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.origin_unix_ms.saturating_add(elapsed)
    }
}

/// Where actors publish events. Emitting never blocks and never fails: a
/// supervised operation must not slow down because somebody reads slowly.
pub trait EventSink: Send + Sync + 'static {
    /// Publishes one event of `run_id`, at `path` in its tree.
    fn emit(&self, run_id: &str, path: &str, kind: EventKind);
}
