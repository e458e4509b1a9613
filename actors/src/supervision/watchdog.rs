//! The watchdog: asks the evaluator about the expiries a lease's policy
//! leaves to it.
//!
//! A verdict is decided in one place, the lease actor: each expiry is
//! judged there by its lease's [`VerdictPolicy`](crate::VerdictPolicy),
//! on the evidence of that instant. What the policy cannot tell reaches the
//! watchdog as a [`LeaseExpiry`] carrying that evidence, and the watchdog
//! does one thing with it:
//!
//! 1. **Evaluator.** The evaluator is asked, shown the evidence
//!    (phi and repetition included), the tail of the stream's text and the
//!    transcript tail, under a flat timeout (default
//!    15 s) that is a deadline on purpose and never a lease. Its answer must
//!    be the strict JSON of [`parse_verdict`].
//! 2. **Breaker.** Any failure of step 1 — transport error, timeout, panic,
//!    an answer that is not exactly the JSON — and a watchdog with no
//!    evaluator yield `RENEW` (`decided_by = breaker`): the watchdog never
//!    kills by accident.
//!
//! The actor never awaits an evaluation in its handler: each runs in a task
//! of its own that replies when done, so one slow evaluation never delays
//! another lease's verdict. Every verdict is published as a `verdict` event
//! carrying its [`VerdictRecord`], the audit trail, with evaluator calls
//! attributed to the consumer `engine.watchdog`.
//!
//! [`WatchdogConfig`] holds the settings leases' terms are resolved from
//! ([`WatchdogConfig::terms`]) beside the evaluator's timeout.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::error::ConfigError;
use crate::event::EventKind;
use crate::ports::{EvaluationRequest, Evaluator, EventSink, TokenCost};
use crate::supervision::evaluation::timed;
use crate::supervision::lease::terms::{
    DEFAULT_EVIDENCE_RENEWALS, DEFAULT_FREE_RENEWALS, DEFAULT_REPETITION_THRESHOLD, LeaseTerms,
    TermsByKind,
};
use crate::supervision::policy::{Policies, PolicyChoice};
use crate::vocabulary::lease::{LeaseConfig, LeaseKind, LeaseMeta};

pub use crate::error::StartError;
pub use crate::supervision::evaluation::{Judge, JudgeConfig};
pub use crate::supervision::evidence::accrual::{AccrualConfig, AccrualPolicy};
use crate::vocabulary::verdict::{DecidedBy, Decision, VerdictRecord, parse_verdict};

/// The consumer that evaluator calls of the watchdog are attributed to.
pub const WATCHDOG_CONSUMER: &str = "engine.watchdog";

/// The verdict policy of each lease kind and the numbers it judges by —
/// what leases' terms are resolved from — and the evaluator's timeout.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchdogConfig {
    /// Expiries renewed without any evaluator call (default 2).
    pub free_renewals: u32,
    /// The flat timeout of one evaluation (default 15 s).
    pub evaluator_timeout: Duration,
    /// The accrual detector's parameters per lease kind.
    pub accrual: AccrualPolicy,
    /// Consecutive renewals on evidence alone after which the evaluator is
    /// asked anyway (default 3). With the default stream lease (2 min) and
    /// ladder (2), a live stream is first judged at its sixth expiry, then
    /// every fourth: one cheap `fast` call per 8 minutes of streaming, and a
    /// stream that reaches the renewal cap (10) has been shown to the
    /// evaluator twice rather than never. 0 never renews on evidence alone.
    pub evidence_renewals: u32,
    /// Above this share of repeated word 3-grams in a stream's recent text
    /// (from 0 to 1; default 0.5, a phrase said more than twice over), its
    /// evidence is suspicious and does not renew by itself.
    pub repetition_threshold: f64,
    /// The verdict policy of each lease kind whose flow names none
    /// (default `leasehold` for every kind).
    pub policy: PolicyChoice,
    /// What leases do with each endpoint's learned pace (a flow's
    /// `leases.pace`; `learn` by default).
    pub pace: crate::pace::PaceMode,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        Self {
            free_renewals: DEFAULT_FREE_RENEWALS,
            evaluator_timeout: Duration::from_secs(15),
            accrual: AccrualPolicy::default(),
            evidence_renewals: DEFAULT_EVIDENCE_RENEWALS,
            repetition_threshold: DEFAULT_REPETITION_THRESHOLD,
            pace: crate::pace::PaceMode::Learn,
            policy: PolicyChoice::all(crate::supervision::policy::PolicyName::LEASEHOLD),
        }
    }
}

impl WatchdogConfig {
    /// Refuses a zero evaluator timeout, a duration above
    /// [`MAX_DURATION`](crate::MAX_DURATION), a repetition threshold outside
    /// `[0, 1]` or bad accrual parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        crate::check_positive_duration("watchdog.evaluator_timeout", self.evaluator_timeout)?;
        if !(0.0..=1.0).contains(&self.repetition_threshold) {
            return Err(ConfigError::new(
                "watchdog.repetition_threshold",
                "a share from 0 to 1",
                self.repetition_threshold,
            ));
        }
        self.accrual.validate()
    }

    /// The terms of each lease kind: its policy looked up in `policies`,
    /// the renewal cap of `lease`, this configuration's ladder, evidence
    /// streak and thresholds. A policy name that `policies` does not know
    /// is refused, naming `key` (`watchdog.policy`, `leases.policy.tool_call`)
    /// and the names it knows.
    pub fn terms(
        &self,
        lease: &LeaseConfig,
        policies: &Policies,
        key: &str,
    ) -> Result<TermsByKind, ConfigError> {
        policies.check(&self.policy, key)?;
        Ok(TermsByKind::from_fn(|kind: LeaseKind| LeaseTerms {
            policy: policies.resolve(&self.policy, kind),
            max_renewals: lease.max_renewals,
            free_renewals: self.free_renewals,
            evidence_renewals: self.evidence_renewals,
            accrual: *self.accrual.for_kind(kind),
            repetition_threshold: self.repetition_threshold,
            ceiling: lease.ceiling,
        }))
    }
}

impl JudgeConfig for WatchdogConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        WatchdogConfig::validate(self)
    }
}

pub use crate::vocabulary::expiry::{LeaseExpiry, VerdictReply, WatchdogMsg};

/// What the watchdog is started with, and keeps: its configuration (of
/// which it uses the evaluator's timeout), its evaluator (with none, every
/// expiry renews by the breaker) and where its verdict records go.
pub type WatchdogArgs = Judge<WatchdogConfig>;

/// The watchdog actor. One per runtime is enough: it never blocks, and its
/// per-lease state (the accrual history) lives in each lease's evidence cell.
#[derive(Debug, Default, Clone, Copy)]
pub struct WatchdogActor;

impl WatchdogActor {
    /// Validates `args.config` and spawns a watchdog.
    pub async fn start(args: WatchdogArgs) -> Result<ActorRef<WatchdogMsg>, StartError> {
        args.spawn(WatchdogActor).await
    }

    /// Asks `watchdog` for a verdict and waits for it.
    #[cfg(any(test, feature = "test-util"))]
    pub async fn assess(watchdog: &ActorRef<WatchdogMsg>, expiry: LeaseExpiry) -> Decision {
        let (reply, rx) = VerdictReply::oneshot();
        // If the send fails the reply is dropped, which answers the breaker's RENEW.
        let _ = watchdog.send_message(WatchdogMsg::Assess(Box::new((expiry, reply))));
        rx.await.unwrap_or_else(|_| {
            Decision::renew(DecidedBy::Breaker, "the watchdog dropped the request")
        })
    }
}

impl Actor for WatchdogActor {
    type Msg = WatchdogMsg;
    type State = WatchdogArgs;
    type Arguments = WatchdogArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(args.validated()?)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            WatchdogMsg::Assess(assessment) => {
                let (expiry, reply) = *assessment;
                state.assess(expiry, reply);
            }
        }
        Ok(())
    }
}

impl Judge<WatchdogConfig> {
    fn assess(&self, expiry: LeaseExpiry, reply: VerdictReply) {
        let LeaseExpiry {
            meta,
            renewals,
            counted,
            max_renewals,
            evidence_renewals,
            evidence,
            stream_tail,
            early,
        } = expiry;
        let Some(evaluator) = self.evaluator.clone() else {
            let decision = Decision::renew(DecidedBy::Breaker, "no evaluator is configured");
            let record =
                VerdictRecord::new(&meta, renewals, evidence, &decision, None).early(early);
            return publish(&*self.events, &meta, record, decision, reply);
        };
        let request = EvaluationRequest {
            lease_id: meta.id,
            run_id: meta.run_id.clone(),
            path: meta.path.clone(),
            kind: meta.kind,
            subject: meta.subject.clone(),
            renewals: counted,
            max_renewals,
            lease: meta.duration,
            evidence: evidence.clone(),
            evidence_renewals,
            stream_tail,
            transcript_tail: meta.transcript_tail.clone(),
        };
        let timeout = self.config.evaluator_timeout;
        let events = self.events.clone();
        let prices = self.prices.clone();
        tokio::spawn(async move {
            let model = evaluator.model_name();
            let evaluation = evaluate(evaluator, request, timeout);
            let (decision, usage) = timed(WATCHDOG_CONSUMER, (model, &prices), evaluation).await;
            let record =
                VerdictRecord::new(&meta, renewals, evidence, &decision, Some(usage)).early(early);
            publish(&*events, &meta, record, decision, reply);
        });
    }
}

/// Runs one evaluation under the flat timeout and turns every failure into a
/// breaker `RENEW`.
async fn evaluate(
    evaluator: Arc<dyn Evaluator>,
    request: EvaluationRequest,
    timeout: Duration,
) -> (Decision, TokenCost) {
    match crate::supervision::evaluation::run(move || evaluator.evaluate(request), timeout).await {
        Err(reason) => (
            Decision::renew(DecidedBy::Breaker, reason),
            TokenCost::default(),
        ),
        Ok(answer) => match parse_verdict(&answer.text) {
            Ok(parsed) => (
                Decision {
                    verdict: parsed.verdict,
                    reason: parsed.reason,
                    nudge: parsed.nudge,
                    decided_by: DecidedBy::Evaluator,
                },
                answer.cost,
            ),
            Err(error) => (
                Decision::renew(
                    DecidedBy::Breaker,
                    format!("breaker: the evaluator's answer was refused: {error}"),
                ),
                answer.cost,
            ),
        },
    }
}

/// Publishes the verdict record, then delivers the decision, so the record
/// always precedes the verdict's consequences on the event stream.
fn publish(
    events: &dyn EventSink,
    meta: &LeaseMeta,
    record: VerdictRecord,
    decision: Decision,
    reply: VerdictReply,
) {
    events.emit(
        &meta.run_id,
        &meta.path,
        EventKind::Verdict(Arc::new(record)),
    );
    reply.send(decision);
}
