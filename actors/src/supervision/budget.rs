//! Budget checkpoints: whether a loop that has used up its steps gets more.
//!
//! A step budget (`max_steps`) is an *allocation*, not a failure detector,
//! so running out of it must not end a loop by itself. When a loop — the
//! root **or any worker** — has taken as many steps as its current limit
//! ([`checkpoint_due`]), it asks its checkpoint, showing the real state in a
//! [`BudgetEvaluationRequest`]: its [`BudgetFigures`] — steps used and
//! declared, tool calls, spawns, milestones closed and open, extensions used
//! and left. The checkpoint
//! applies these rules, in order:
//!
//! 1. **Unlimited stays unlimited.** A limit of 0 is unlimited: the answer is
//!    [`BudgetDecision::Unlimited`], with no event and no evaluator call, so
//!    an extension can never turn an unlimited budget into a finite cap.
//! 2. **Cap.** At most [`BudgetConfig::max_extensions`] (default 3, and
//!    never more: [`MAX_EXTENSIONS`]) extensions per loop, whatever the
//!    evaluator says: with no extensions
//!    left — as the request counts them, or because `extensions_used` has
//!    reached the configured cap — the loop wraps up (`decided_by = cap`)
//!    and no evaluator is asked.
//! 3. **Breaker.** With no evaluator configured the loop wraps up
//!    (`decided_by = breaker`). Ambiguity on a budget wraps up — the
//!    opposite of a lease, which renews — because the costs of being wrong
//!    are opposite: waiting longer on work already in flight is free, while
//!    every extended step costs real model calls.
//! 4. **Evaluator.** Otherwise the evaluator is asked, under a flat timeout
//!    (default 15 s) that is a deadline on purpose and never a lease: its
//!    work has a known duration. Its answer must be the strict JSON of
//!    [`parse_budget_decision`]. A transport error, a timeout, a panic or a
//!    refused answer wraps up by the breaker; a valid `WRAP_UP` wraps up; a
//!    valid `EXTEND` grants the **proportional** extension:
//!
//! ```text
//! granted   = max(1, ceil(limit × clamp(confidence, min_confidence, 1)))
//! new_limit = limit + granted            (saturating)
//! ```
//!
//! The extension is proportional to the current limit, not a flat number of
//! steps, because a flat increment quietly re-imposes the very ceiling the
//! checkpoint exists to remove: "+5 steps" is generous for a loop declared
//! with 3 and meaningless for one declared with 200. Being proportional to
//! the *current* limit, extensions compound — a loop declared with 3 steps,
//! extended three times at full confidence, goes 3 → 6 → 12 → 24 — and it is
//! the cap on extensions that bounds the growth (at most 2³ × the declared
//! steps). `min_confidence` (default 0.25) floors a hesitant `EXTEND`, so an
//! extension the evaluator chose to grant is always worth taking; the
//! confidence counts to the millionth (see [`proportional_extension`]).
//!
//! Every decision but `Unlimited` is published as a `budget_extended` or
//! `budget_exhausted` event carrying its [`BudgetRecord`], the audit trail,
//! *before* the loop gets its reply. Evaluator calls are attributed to the
//! consumer [`BUDGET_CONSUMER`], and accounted even when they fail. The actor
//! never awaits an evaluation in its handler: each runs in a task of its own
//! that replies when done, so one slow evaluation never delays another
//! loop's checkpoint.
//!
//! ```
//! use std::sync::Arc;
//! use leasehold_actors::testing::actors::{BudgetCheckpointActor, BudgetCheckpointArgs};
//! use leasehold_actors::{BudgetConfig, BudgetDecision, BudgetFigures};
//! use leasehold_actors::EventBus;
//! use leasehold_actors::BudgetEvaluationRequest;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let checkpoint = BudgetCheckpointActor::start(BudgetCheckpointArgs {
//!     config: BudgetConfig::default(),
//!     evaluator: None,
//!     events: Arc::new(EventBus::new()),
//!     prices: Default::default(),
//! })
//! .await?;
//! let request = BudgetEvaluationRequest {
//!     run_id: "run-1".into(),
//!     path: "run".into(),
//!     figures: BudgetFigures {
//!         steps_used: 3,
//!         steps_declared: 3,
//!         limit: 3,
//!         tool_calls: 2,
//!         spawns: 0,
//!         milestones_closed: vec![],
//!         milestones_open: vec!["answer".into()],
//!         extensions_used: 0,
//!         extensions_left: 3,
//!         spending: None,
//!     },
//!     transcript_tail: Arc::new([]),
//! };
//! // No evaluator is configured: ambiguity on a budget wraps up.
//! let decision = BudgetCheckpointActor::check(&checkpoint, request).await;
//! assert!(matches!(decision, BudgetDecision::WrapUp { .. }));
//! # Ok(())
//! # }
//! ```

mod extension;
mod parse;
pub(crate) mod spending;

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::error::ConfigError;
use crate::event::{BudgetRecord, EventKind};
use crate::ports::{BudgetEvaluationRequest, Evaluator, EventSink, TokenCost};
use crate::supervision::evaluation::{Judge, JudgeConfig, timed};
use crate::vocabulary::verdict::{DecidedBy, EvaluatorUsage};

pub use crate::vocabulary::budget::BudgetFigures;
pub use crate::vocabulary::budget::SpendingFigures;
pub use extension::{checkpoint_due, proportional_extension};
pub use parse::{BudgetParseError, ParsedBudgetDecision, parse_budget_decision};

/// The consumer that evaluator calls of budget checkpoints are attributed to.
pub const BUDGET_CONSUMER: &str = "engine.budget";

/// The most extensions one loop may ever get, whatever the evaluator says:
/// configurations and flows may lower [`BudgetConfig::max_extensions`], never
/// raise it past this.
pub const MAX_EXTENSIONS: u32 = 3;

/// What a refused extension cap is told it should have been, naming
/// [`MAX_EXTENSIONS`].
pub fn max_extensions_expected() -> String {
    format!(
        "at most {MAX_EXTENSIONS} (a loop is extended at most {MAX_EXTENSIONS} times, whatever \
         the evaluator says: lower it, never raise it)"
    )
}

/// A budget checkpoint's policy parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetConfig {
    /// Extensions one loop may get in all, whatever the evaluator says
    /// (default and most [`MAX_EXTENSIONS`], 3).
    pub max_extensions: u32,
    /// The flat timeout of one evaluation (default 15 s).
    pub evaluator_timeout: Duration,
    /// The least confidence an `EXTEND` is weighted by, in (0, 1]
    /// (default 0.25).
    pub min_confidence: f64,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            max_extensions: MAX_EXTENSIONS,
            evaluator_timeout: Duration::from_secs(15),
            min_confidence: 0.25,
        }
    }
}

impl BudgetConfig {
    /// Refuses more than [`MAX_EXTENSIONS`] extensions
    /// (`budget.max_extensions`), a zero evaluator timeout or one above
    /// [`MAX_DURATION`](crate::MAX_DURATION) (`budget.evaluator_timeout`)
    /// and a `min_confidence` outside (0, 1] (`budget.min_confidence`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_extensions > MAX_EXTENSIONS {
            return Err(ConfigError::new(
                "budget.max_extensions",
                max_extensions_expected(),
                self.max_extensions,
            ));
        }
        crate::check_positive_duration("budget.evaluator_timeout", self.evaluator_timeout)?;
        // Written so that NaN fails it too.
        let in_range = self.min_confidence > 0.0 && self.min_confidence <= 1.0;
        if !in_range {
            return Err(ConfigError::new(
                "budget.min_confidence",
                "a number in (0, 1]",
                self.min_confidence,
            ));
        }
        Ok(())
    }
}

impl JudgeConfig for BudgetConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        BudgetConfig::validate(self)
    }
}

/// A checkpoint's decision.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum BudgetDecision {
    /// Keep stepping: the limit grew by `granted` to `new_limit`.
    Extend {
        /// Steps added (`new_limit - limit`).
        granted: u32,
        /// The loop's limit from now on.
        new_limit: u32,
        /// At a checkpoint of the run's spending budget: its figures with
        /// the new limits (the steps are then unchanged).
        spending: Option<Box<SpendingFigures>>,
    },
    /// Stop stepping and wrap up.
    WrapUp {
        /// Why, in words (also in the `budget_exhausted` record).
        reason: String,
    },
    /// The limit is unlimited (0): keep stepping; nothing was decided and
    /// nothing recorded.
    Unlimited,
}

/// Where a checkpoint's decision goes. Called exactly once: if it is dropped
/// unanswered (the checkpoint went away), it answers `WrapUp` by the
/// breaker, so a loop can never wait forever for its checkpoint.
pub type BudgetReply = crate::reply::Reply<BudgetDecision>;

impl crate::reply::Unanswered for BudgetDecision {
    fn unanswered() -> Self {
        Self::WrapUp {
            reason: "breaker: the budget checkpoint dropped the request unanswered".into(),
        }
    }
}

/// The budget checkpoint's messages.
#[derive(Debug)]
pub enum BudgetMsg {
    /// Decide whether a loop that used up its steps gets more, and reply.
    Check(Box<(BudgetEvaluationRequest, BudgetReply)>),
}

/// What a budget checkpoint is started with, and keeps: its policy, its
/// evaluator (with none, every checkpoint that is not unlimited wraps up by
/// the breaker) and where its `budget_extended` / `budget_exhausted` records
/// go.
pub type BudgetCheckpointArgs = Judge<BudgetConfig>;

/// The budget checkpoint actor. It keeps no per-loop state (each request
/// carries the loop's figures), so one can serve many loops; it never
/// blocks on an evaluation.
#[derive(Debug, Default, Clone, Copy)]
pub struct BudgetCheckpointActor;

impl BudgetCheckpointActor {
    /// Validates `args.config` and spawns an unlinked checkpoint. (Linked
    /// spawning through [`Actor::spawn_linked`] validates the same way, in
    /// `pre_start`.)
    #[cfg(any(test, feature = "test-util"))]
    pub async fn start(
        args: BudgetCheckpointArgs,
    ) -> Result<ActorRef<BudgetMsg>, crate::error::StartError> {
        args.spawn(BudgetCheckpointActor).await
    }

    /// Asks `actor` whether the loop of `request` gets more steps, and waits
    /// for the decision. A checkpoint that is gone answers `WrapUp`.
    pub async fn check(
        actor: &ActorRef<BudgetMsg>,
        request: BudgetEvaluationRequest,
    ) -> BudgetDecision {
        let (reply, rx) = BudgetReply::oneshot();
        // If the send fails the reply is dropped, which answers the breaker's WrapUp.
        let _ = actor.send_message(BudgetMsg::Check(Box::new((request, reply))));
        rx.await.unwrap_or_else(|_| BudgetDecision::WrapUp {
            reason: "breaker: the budget checkpoint dropped the request".into(),
        })
    }
}

impl Actor for BudgetCheckpointActor {
    type Msg = BudgetMsg;
    type State = BudgetCheckpointArgs;
    type Arguments = BudgetCheckpointArgs;

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
            BudgetMsg::Check(check) => {
                let (request, reply) = *check;
                state.check(request, reply);
            }
        }
        Ok(())
    }
}

/// A decision with what the record needs beside it.
struct Judgement {
    decision: BudgetDecision,
    reason: String,
    decided_by: DecidedBy,
    confidence: Option<f64>,
}

impl Judgement {
    fn wrap_up(decided_by: DecidedBy, reason: String, confidence: Option<f64>) -> Self {
        Self {
            decision: BudgetDecision::WrapUp {
                reason: reason.clone(),
            },
            reason,
            decided_by,
            confidence,
        }
    }
}

impl Judge<BudgetConfig> {
    fn check(&self, request: BudgetEvaluationRequest, reply: BudgetReply) {
        if request.figures.limit == 0 && request.figures.spending.is_none() {
            return reply.send(BudgetDecision::Unlimited);
        }
        let evaluator = match self.evaluator_for(&request.figures) {
            Ok(evaluator) => evaluator,
            Err(judgement) => return publish(&*self.events, &request, judgement, None, reply),
        };
        let config = self.config;
        let events = self.events.clone();
        let prices = self.prices.clone();
        tokio::spawn(async move {
            let model = evaluator.model_name();
            let evaluation = evaluate(evaluator, request.clone(), config);
            let (judgement, usage) = timed(BUDGET_CONSUMER, (model, &prices), evaluation).await;
            publish(&*events, &request, judgement, Some(usage), reply);
        });
    }

    /// The evaluator to ask about a loop with these `figures`, or the wrap-up
    /// that settles it without one: by the cap with no extensions left, by
    /// the breaker with no evaluator configured.
    fn evaluator_for(&self, figures: &BudgetFigures) -> Result<Arc<dyn Evaluator>, Judgement> {
        let max_extensions = self.config.max_extensions;
        if figures.extensions_used >= max_extensions {
            let reason = format!("no extensions left: max_extensions = {max_extensions}");
            return Err(Judgement::wrap_up(DecidedBy::Cap, reason, None));
        }
        if figures.extensions_left == 0 {
            let reason = format!(
                "no extensions left: {} used, none left",
                figures.extensions_used
            );
            return Err(Judgement::wrap_up(DecidedBy::Cap, reason, None));
        }
        self.evaluator.clone().ok_or_else(|| {
            let reason = "no evaluator is configured: wrapping up".to_owned();
            Judgement::wrap_up(DecidedBy::Breaker, reason, None)
        })
    }
}

/// Runs one evaluation under the flat timeout and turns every failure into a
/// breaker `WrapUp`.
async fn evaluate(
    evaluator: Arc<dyn Evaluator>,
    request: BudgetEvaluationRequest,
    config: BudgetConfig,
) -> (Judgement, TokenCost) {
    let limit = request.figures.limit;
    let spending = request.figures.spending.clone();
    let timeout = config.evaluator_timeout;
    let breaker = |reason: String, cost: TokenCost| {
        (Judgement::wrap_up(DecidedBy::Breaker, reason, None), cost)
    };
    match crate::supervision::evaluation::run(move || evaluator.evaluate_budget(request), timeout)
        .await
    {
        Err(reason) => breaker(format!("{reason}: wrapping up"), TokenCost::default()),
        Ok(answer) => match parse_budget_decision(&answer.text) {
            Ok(parsed) if parsed.extend => {
                let new_limit = if spending.is_some() {
                    limit
                } else {
                    limit.saturating_add(proportional_extension(
                        limit,
                        parsed.confidence,
                        config.min_confidence,
                    ))
                };
                let spending = spending.map(|mut figures| {
                    let (tokens, cost) =
                        spending::extended(&figures, parsed.confidence, config.min_confidence);
                    figures.new_token_limit = tokens;
                    figures.new_cost_limit = cost;
                    Box::new(figures)
                });
                let judgement = Judgement {
                    decision: BudgetDecision::Extend {
                        granted: new_limit.saturating_sub(limit),
                        new_limit,
                        spending,
                    },
                    reason: parsed.reason,
                    decided_by: DecidedBy::Evaluator,
                    confidence: Some(parsed.confidence),
                };
                (judgement, answer.cost)
            }
            Ok(parsed) => (
                Judgement::wrap_up(DecidedBy::Evaluator, parsed.reason, Some(parsed.confidence)),
                answer.cost,
            ),
            Err(error) => breaker(
                format!("breaker: the evaluator's answer was refused: {error}: wrapping up"),
                answer.cost,
            ),
        },
    }
}

/// Publishes the budget record, then delivers the decision, so the record
/// always precedes the decision's consequences on the event stream.
fn publish(
    events: &dyn EventSink,
    request: &BudgetEvaluationRequest,
    judgement: Judgement,
    evaluator: Option<EvaluatorUsage>,
    reply: BudgetReply,
) {
    let mut figures = request.figures.clone();
    let (extended, new_limit) = match &judgement.decision {
        BudgetDecision::Extend {
            new_limit,
            spending,
            ..
        } => {
            if let Some(spending) = spending {
                figures.spending = Some(SpendingFigures::clone(spending));
            }
            (true, *new_limit)
        }
        BudgetDecision::WrapUp { .. } | BudgetDecision::Unlimited => (false, request.figures.limit),
    };
    let record = BudgetRecord {
        figures,
        new_limit,
        reason: judgement.reason,
        decided_by: judgement.decided_by,
        confidence: judgement.confidence,
        evaluator,
    };
    let kind = if extended {
        EventKind::BudgetExtended(Box::new(record))
    } else {
        EventKind::BudgetExhausted(Box::new(record))
    };
    events.emit(&request.run_id, &request.path, kind);
    reply.send(judgement.decision);
}
