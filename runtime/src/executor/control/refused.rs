//! Why a control was refused: one variant per rule, each said the same
//! way wherever the control came from (the API, the command line, an
//! owner applying a forwarded control, the run's own actor).

use leasehold_actors::{ControlError, EngineError, RunStatus, StoreError};

/// How many forwarded controls may wait in the store for one run's owner
/// to take them: more than a person sends a run that does not answer.
pub const MAX_WAITING_COMMANDS: u64 = 16;

/// A control refused, with the rule's reason; or one that could not be
/// done. Each message is the same from every place a control comes from.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// No such run.
    #[error("no run {run_id}")]
    NotFound {
        /// The run asked for.
        run_id: String,
    },
    /// The run has ended.
    #[error("run {run_id} has already finished: it is {}", .status.name())]
    Finished {
        /// The run.
        run_id: String,
        /// How it ended.
        status: RunStatus,
    },
    /// A resume of a run that waits for a decision on a call of unknown
    /// outcome.
    #[error(
        "run {run_id} waits for a decision on a tool call of unknown outcome (key {key}), not a \
         resume: decide with `leasehold runs reconcile {run_id} --key {key} (--mark-done \
         [--result TEXT] | --retry | --cancel)` or POST /runs/{run_id}/reconcile with the key \
         and a decision (mark_done, retry or cancel)"
    )]
    AwaitsReconciliation {
        /// The run.
        run_id: String,
        /// The call's idempotency key.
        key: String,
    },
    /// A resume of a run another executor holds and runs: nothing to
    /// resume there, unless that executor died; then the run is free once
    /// its lease ends.
    #[error("{}", runs_elsewhere(.run_id, .owner_id, *.until_ms, *.remaining_ms))]
    RunsElsewhere {
        /// The run.
        run_id: String,
        /// The executor that holds it.
        owner_id: String,
        /// When its lease on the run ends unless renewed (Unix ms).
        until_ms: u64,
        /// How long that is from when it was looked at.
        remaining_ms: u64,
    },
    /// A resume of a run this executor runs: nothing to resume.
    #[error("run {run_id} is not paused (it is {}): there is nothing to resume", .status.name())]
    NotPaused {
        /// The run.
        run_id: String,
        /// What it is.
        status: RunStatus,
    },
    /// A pause, or an act on a lease, of a run nobody runs: it has no
    /// clock to stop and no lease in flight.
    #[error(
        "run {run_id} is {} and no executor runs it: there is nothing to {command} (resume it \
         first, or cancel it)",
        .status.name()
    )]
    NotRunning {
        /// The run.
        run_id: String,
        /// What it is.
        status: RunStatus,
        /// `pause` or `lease`.
        command: &'static str,
    },
    /// A decision on a run that waits for none.
    #[error("run {run_id} does not wait for a reconciliation: it is {}", .status.name())]
    NoReconciliation {
        /// The run.
        run_id: String,
        /// What it is.
        status: RunStatus,
    },
    /// A decision on a call that awaits none.
    #[error(
        "run {run_id} has no tool call awaiting a decision with key {key}{}",
        .pending.as_ref().map(|p| format!(": it waits for a decision on the call with key {p}")).unwrap_or_default()
    )]
    NoSuchCall {
        /// The run.
        run_id: String,
        /// The key given.
        key: String,
        /// The key of the call the run's pause names, where known.
        pending: Option<String>,
    },
    /// Too many controls already wait for the run's owner.
    #[error(
        "{waiting} controls for run {run_id} already wait for its owner {owner_id} to take them \
         (at most {MAX_WAITING_COMMANDS}): nothing was stored; try again once it has taken them, \
         or once its lease has expired and the run can be claimed"
    )]
    CommandsWaiting {
        /// The run.
        run_id: String,
        /// The executor that holds it.
        owner_id: String,
        /// How many wait.
        waiting: u64,
    },
    /// This executor cannot take the run on now; nothing was done.
    #[error("{message}")]
    CannotTakeOn {
        /// Why, for a person.
        message: String,
        /// Whether it is only busy (at its limit of live runs): try again
        /// later.
        busy: bool,
    },
    /// The run's actor refused or could not apply the control otherwise
    /// (this executor lost the run, its actor is gone).
    #[error(transparent)]
    Run(ControlError),
    /// The engine refused or failed.
    #[error(transparent)]
    Engine(EngineError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<EngineError> for Refused {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::NotFound(run_id) => Self::NotFound { run_id },
            EngineError::Finished { run_id, status } => Self::Finished { run_id, status },
            EngineError::Store(error) => Self::Store(error),
            error => Self::Engine(error),
        }
    }
}

impl From<ControlError> for Refused {
    /// The actor's refusals, said as the rules say them.
    fn from(error: ControlError) -> Self {
        match error {
            ControlError::NotPaused { run_id, status } => Self::NotPaused { run_id, status },
            ControlError::AlreadyFinished { run_id, status } => Self::Finished { run_id, status },
            ControlError::NeedsReconciliation { run_id, key } => {
                Self::AwaitsReconciliation { run_id, key }
            }
            ControlError::NoSuchCall { run_id, key } => Self::NoSuchCall {
                run_id,
                key,
                pending: None,
            },
            error => Self::Run(error),
        }
    }
}

impl Refused {
    /// Whether it is a rule's refusal of the control for the run as it is
    /// (a conflict), not a failure or an unknown run.
    pub fn is_rule(&self) -> bool {
        matches!(
            self,
            Self::Finished { .. }
                | Self::AwaitsReconciliation { .. }
                | Self::NotPaused { .. }
                | Self::RunsElsewhere { .. }
                | Self::NoReconciliation { .. }
                | Self::NoSuchCall { .. }
        )
    }
}

/// The message of [`Refused::RunsElsewhere`]: who runs the run, until
/// when its lease holds it, and what to do if that executor died.
fn runs_elsewhere(run_id: &str, owner_id: &str, until_ms: u64, remaining_ms: u64) -> String {
    let until = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(until_ms),
    );
    let wait =
        humantime::format_duration(std::time::Duration::from_secs(remaining_ms.div_ceil(1000)));
    // An executor that serves the API says where in its id.
    let owner = leasehold_actors::OwnerId::parse(owner_id);
    let server = owner.serving().unwrap_or("URL");
    format!(
        "run {run_id} is held by executor {owner_id}, which runs it: there is nothing to \
         resume (follow it there: `leasehold runs events {run_id} --follow --server {server}`). \
         Its lease on the run lasts until {until} (in {wait}) unless renewed; if that executor \
         died, the run is free once the lease ends: resume it after {until}."
    )
}
