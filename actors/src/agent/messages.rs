//! The messages of a loop, and the run's controls.

use ractor::{ActorRef, RpcReplyPort};

pub use crate::ports::ReconcileDecision;
use crate::ports::{ModelReply, RunStatus, ToolCallRecord};
use crate::supervision::budget::BudgetDecision;
use crate::supervision::strategy::ChildEnd;
use crate::vocabulary::evidence::EvidenceSummary;

/// A request the server refused as longer than the model's context window
/// (what `context_window.rs` does with it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overflow {
    /// The request's tokens, as the server counted them, when it said.
    pub(crate) requested_tokens: Option<u64>,
    /// The context window, in tokens, when the server said.
    pub(crate) context_tokens: Option<u64>,
    /// The server's own words.
    pub(crate) message: String,
}

/// A loop's messages. The root loop also takes the run's controls.
#[derive(Debug)]
pub enum LoopMsg {
    /// Go on: pass a budget checkpoint if one is due, else start a step.
    Next,
    /// A write of the run's was given up (root only): the run pauses or
    /// fails, as the engine says, with this reason.
    StoreFailed(String),
    /// A model call ended.
    ModelDone {
        /// Its step.
        step: u32,
        /// Its attempt.
        attempt: u32,
        /// Its reply, or how it ended.
        outcome: Result<ModelReply, ChildEnd>,
        /// How long the server asked to wait before trying again (a 429's
        /// `Retry-After`): a restart waits at least this long.
        retry_after: Option<std::time::Duration>,
        /// The request did not fit the model's context window, as the
        /// server said: the loop shortens, or pauses for a person.
        overflow: Option<Overflow>,
        /// The endpoint could not be reached: what the call said.
        unreachable: Option<String>,
    },
    /// A loop's call found its endpoint down (root only): the run pauses
    /// until it answers again.
    EndpointDown(Box<Outage>),
    /// An endpoint the run waits on answers again, or was marked up (root
    /// only).
    EndpointUp {
        /// What its client calls it.
        endpoint: String,
    },
    /// The run was taken over, paused on its endpoint, from an executor
    /// that is gone: it waits on the endpoint here instead of for a person
    /// (root only; [`crate::Engine::take_over_endpoint_waits_up_to`]).
    WaitOnEndpoint,
    /// A tool call or a worker ended.
    CallDone {
        /// Its step.
        step: u32,
        /// Its index among the step's calls.
        index: usize,
        /// Its attempt.
        attempt: u32,
        /// Its result, or how it ended.
        outcome: Result<String, ChildEnd>,
    },
    /// The budget checkpoint decided.
    Budget(BudgetDecision),
    /// The run's spending budget was checked: go on, or, with a reason,
    /// pause the run for a person.
    Spending(Option<String>),
    /// Start attempt `attempt` of a call (`index`: `None` for the model call).
    Retry {
        /// The step.
        step: u32,
        /// The call, or `None` for the step's model call.
        index: Option<usize>,
        /// The attempt to start.
        attempt: u32,
    },
    /// Start the calls of `step` that have not started (deferred while the
    /// run was paused).
    StartCalls {
        /// The step.
        step: u32,
    },
    /// A loop found a tool call of unknown outcome: pause the run in
    /// `reconciliation_required` (root only).
    Reconcile(Box<Reconciliation>),
    /// A person's decision on a call of unknown outcome (root only).
    Decide {
        /// The call's idempotency key.
        key: String,
        /// What to do.
        decision: ReconcileDecision,
        /// Whether it was accepted.
        reply: RpcReplyPort<Result<(), ControlError>>,
    },
    /// The decision, delivered to the loop that owns the call.
    Reconciled {
        /// The step.
        step: u32,
        /// The call.
        index: usize,
        /// The attempt whose outcome is unknown.
        attempt: u32,
        /// What to do.
        decision: ReconcileDecision,
    },
    /// A loop of the run escalated: pause the run (root only).
    Escalate(Box<Escalation>),
    /// A person resumes the paused run (root only).
    Resume {
        /// What they said; the escalated loops' next model calls see it.
        guidance: Option<String>,
        /// Whether it was accepted.
        reply: RpcReplyPort<Result<(), ControlError>>,
    },
    /// The run's tool servers are connected, or why not (root only): its
    /// first work, before the root loop's first step.
    ToolsConnected(Box<Result<crate::agent::tools::ConnectedTools, String>>),
    /// A person pauses the running run (root only).
    Pause {
        /// Why, who asked, and what becomes of the operations in flight.
        request: Box<crate::ports::PauseRequest>,
        /// Whether it was accepted.
        reply: RpcReplyPort<Result<(), ControlError>>,
    },
    /// The root loop's answer, held while the run was paused or a person's
    /// message waited: once the gate opens, the run ends with it, or, if a
    /// person's message waits for it, the loop takes another step.
    Conclude {
        /// The answer.
        answer: String,
    },
    /// A person's message to the run (root only).
    Steer {
        /// The message.
        text: String,
        /// How it is delivered (not `rollback`: a fork, made by the
        /// executor).
        policy: crate::ports::Steer,
        /// Who sent it.
        by: String,
        /// Whether it was taken.
        reply: RpcReplyPort<Result<(), ControlError>>,
    },
    /// A person extends or stops one lease of the run by hand (root only).
    Lease {
        /// The lease.
        lease_id: crate::vocabulary::lease::LeaseId,
        /// What to do with it.
        act: crate::ports::LeaseAct,
        /// Who asked.
        by: String,
        /// Whether it was done.
        reply: RpcReplyPort<Result<(), ControlError>>,
    },
    /// A person cancels the run (root only).
    Cancel {
        /// Why.
        reason: String,
        /// Whether it was accepted.
        reply: RpcReplyPort<Result<(), ControlError>>,
    },
}

/// An escalation on its way to the root.
#[derive(Debug)]
pub struct Escalation {
    pub(crate) path: String,
    pub(crate) reason: String,
    pub(crate) subject: String,
    pub(crate) evidence: Option<EvidenceSummary>,
}

/// A tool call of unknown outcome on its way to the root.
#[derive(Debug)]
pub struct Reconciliation {
    /// Why a person must decide.
    pub reason: String,
    /// The call.
    pub record: ToolCallRecord,
    /// The loop that owns it.
    pub owner: ActorRef<LoopMsg>,
    /// Its step.
    pub step: u32,
    /// Its index in the step.
    pub index: usize,
    /// The attempt whose outcome is unknown.
    pub attempt: u32,
}

/// A control that does not apply to the run as it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// Resume of a run that is not paused.
    #[error("run {run_id} is not paused (it is {status:?}): there is nothing to resume")]
    NotPaused {
        /// The run.
        run_id: String,
        /// What it is.
        status: RunStatus,
    },
    /// Resume or cancel of a run that has ended.
    #[error("run {run_id} has already finished ({status:?})")]
    AlreadyFinished {
        /// The run.
        run_id: String,
        /// How it ended.
        status: RunStatus,
    },
    /// Resume of a run that waits for a reconciliation, not a resume.
    #[error(
        "run {run_id} waits for a decision on a tool call of unknown outcome (key {key}): reconcile it"
    )]
    NeedsReconciliation {
        /// The run.
        run_id: String,
        /// The call's key.
        key: String,
    },
    /// A decision on a call that awaits none.
    #[error("run {run_id} has no tool call awaiting a decision with key {key}")]
    NoSuchCall {
        /// The run.
        run_id: String,
        /// The key given.
        key: String,
    },
    /// This executor lost the run to another (its fence is stale): the
    /// control was not applied here.
    #[error("run {run_id} is no longer owned by this executor: {reason}")]
    Lost {
        /// The run.
        run_id: String,
        /// What the store said.
        reason: String,
    },
    /// A person's pause of a run that is paused already.
    #[error(
        "run {run_id} is already paused ({}): resume it (its guidance reaches the loops that \
         paused) or cancel it",
        .status.name()
    )]
    AlreadyPaused {
        /// The run.
        run_id: String,
        /// How it is paused.
        status: RunStatus,
    },
    /// A message with the policy `reject` to a run that is busy.
    #[error(
        "run {run_id} is busy ({}): a message with the policy `reject` is taken only while \
         it waits for a person; send it with `enqueue` (its next step sees it) or `interrupt`",
        .status.name()
    )]
    Busy {
        /// The run.
        run_id: String,
        /// What it is.
        status: RunStatus,
    },
    /// A message to a run whose loop has too many waiting already.
    #[error(
        "run {run_id} has {waiting} messages waiting for its next step already (at most \
         {limit}): nothing was added; send it once its next step has taken them"
    )]
    TooManyMessages {
        /// The run.
        run_id: String,
        /// How many wait.
        waiting: usize,
        /// The most that may.
        limit: usize,
    },
    /// A message with the policy `rollback` sent to a run's handle: it is a
    /// fork of the run, made by its executor, not a message to the run.
    #[error(
        "run {run_id}: a message with the policy `rollback` forks the run before its current \
         step and cancels it, which its executor does (POST /runs/{run_id}/messages, \
         `leasehold runs steer`), not the run itself"
    )]
    RollbackIsAFork {
        /// The run.
        run_id: String,
    },
    /// A control of a run that is ending: it takes none any more.
    #[error("run {run_id} is ending: it takes no control any more")]
    Ending {
        /// The run.
        run_id: String,
    },
    /// A person's act on a lease that could not be done.
    #[error("{lease_id} of run {run_id} was not {act}: {reason}")]
    LeaseRefused {
        /// The run.
        run_id: String,
        /// The lease.
        lease_id: crate::vocabulary::lease::LeaseId,
        /// `extended` or `stopped`.
        act: &'static str,
        /// Why.
        reason: String,
    },
    /// The run's actor is gone.
    #[error("run {run_id} is not running in this process")]
    Gone {
        /// The run.
        run_id: String,
    },
}

/// A loop's call found its endpoint down: what its run pauses on.
#[derive(Debug)]
pub(crate) struct Outage {
    /// The loop.
    pub(crate) path: String,
    /// What the endpoint's client calls it.
    pub(crate) endpoint: String,
    /// Why the run pauses.
    pub(crate) reason: String,
}
