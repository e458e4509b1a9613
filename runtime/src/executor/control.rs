//! A person's controls — pause, resume, cancel, reconcile, a lease by
//! hand — routed to whichever
//! executor runs the run, from any executor or command line sharing its
//! store, with each rule checked once.
//!
//! [`Executor::control`] decides, for one control on one run, where it
//! goes:
//!
//! - **here**, when this process runs the run: applied to its handle;
//! - **claimed**, when nobody holds it (orphaned, paused by an executor
//!   that died, its lease expired or released): this executor claims it
//!   (a compare-and-set that raises its fence) and applies the control —
//!   a cancel without starting the run's loops, a resume or a decision by
//!   resuming it from its snapshots, within its admission;
//! - **forwarded**, when another executor holds it with a live lease: the
//!   command is stored for it
//!   ([`QueueStore::send_command`](leasehold_actors::QueueStore::send_command))
//!   and its change wakes that owner, which takes it (`follow`) and applies
//!   it as if it had been sent there;
//! - **refused**, with the rule's reason ([`Refused`]).
//!
//! The rules are one function, [`check`], applied to the freshest view of
//! the run there is (its live state here, its record otherwise): a run
//! that has ended takes no control; a resume is refused while the run
//! waits for a decision on a tool call of unknown outcome, and for a run
//! held elsewhere or here that is not paused; a decision is refused for a
//! run that waits for none. The run's actor keeps its own guard (a control
//! that raced a change of state is refused there, and said with the same
//! words). The server's handlers and `leasehold runs resume|cancel|
//! reconcile` only translate to and from [`Executor::control`]; every process that
//! runs runs on a shared store — `leasehold serve`, `leasehold run`, a
//! `leasehold runs resume` that took a run on — follows the commands
//! forwarded to it (`follow`).
//!
//! A forwarded control's outcome is the owner's: it shows in the run's
//! status and events, and a refusal there is logged as `control_refused`
//! (the only answer the sender can read). [`watch`] follows a run through
//! the store until a forwarded control has taken effect, was refused, or
//! a patience ran out.

use std::sync::Arc;

use leasehold_actors::{
    ClaimOutcome, ControlError, EngineError, EventKind, PauseRecord, ReconcileDecision, RunCommand,
    RunHandle, RunRecord, RunStatus, Steer, fencing,
};

use super::Executor;

pub mod by_hand;
mod follow;
pub mod many;
mod refused;
mod watch;

pub(super) use follow::follow;
pub use refused::Refused;
pub use watch::{Outcome, watch};

pub use refused::MAX_WAITING_COMMANDS;

/// What a control did.
#[derive(Debug)]
pub enum Controlled {
    /// Applied in this process: the run ran here, or this executor
    /// claimed it for the control.
    Applied {
        /// The run's status after it.
        status: RunStatus,
        /// The run, when this executor claimed and resumed it for the
        /// control (an orphan's resume, a paused run's answer): the caller
        /// keeps it running, or follows it.
        claimed: Option<RunHandle>,
    },
    /// Stored for the executor that holds the run, which applies it.
    Forwarded {
        /// That executor.
        owner_id: String,
        /// The run's status as stored when it was sent.
        status: RunStatus,
        /// The command's id in the store.
        command_id: u64,
        /// The run's record when it was sent: what [`watch`] compares.
        record: Box<RunRecord>,
        /// The last event of the run's log when it was sent.
        after_seq: u64,
    },
}

/// Who has the run, for a control.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// This process runs it.
    Here,
    /// Another executor holds it with a live lease.
    Elsewhere {
        /// That executor.
        owner_id: String,
        /// When its lease on the run ends unless renewed (Unix ms).
        until_ms: u64,
        /// How long that is from now.
        remaining_ms: u64,
    },
    /// Nobody: this executor would claim it.
    Nobody,
}

/// The control rules, checked once for every way a control comes: may
/// `command` be applied to `run_id` in `status`, paused for `pause`, held
/// by `holder`?
///
/// The key of a decision is checked here against the pause of a run
/// nobody runs (its record is all there is before it is taken on); the
/// actor of a live run checks it against every call that awaits one.
pub fn check(
    run_id: &str,
    command: &RunCommand,
    status: RunStatus,
    pause: Option<&PauseRecord>,
    holder: &Holder,
) -> Result<(), Refused> {
    let run_id = run_id.to_owned();
    let pending = || pause.and_then(|p| p.call.as_ref()).map(|c| c.key.clone());
    match command {
        RunCommand::Reconcile { key, .. } => {
            if status != RunStatus::ReconciliationRequired {
                return Err(Refused::NoReconciliation { run_id, status });
            }
            let pending = pending();
            if *holder == Holder::Nobody && pending.as_ref().is_some_and(|p| p != key) {
                return Err(Refused::NoSuchCall {
                    run_id,
                    key: key.clone(),
                    pending,
                });
            }
            Ok(())
        }
        _ if status.is_terminal() => Err(Refused::Finished { run_id, status }),
        RunCommand::Resume { .. } if status == RunStatus::ReconciliationRequired => {
            Err(Refused::AwaitsReconciliation {
                run_id,
                key: pending().unwrap_or_default(),
            })
        }
        // A run nobody holds is resumed by being claimed: an orphan, a run
        // stopped in place, a queued run. One another executor holds runs
        // there, unless that executor died without letting it go: then it
        // is free once the lease ends.
        RunCommand::Resume { .. } if !status.is_paused() => match holder {
            Holder::Nobody => Ok(()),
            Holder::Here => Err(Refused::NotPaused { run_id, status }),
            Holder::Elsewhere {
                owner_id,
                until_ms,
                remaining_ms,
            } => Err(Refused::RunsElsewhere {
                run_id,
                owner_id: owner_id.clone(),
                until_ms: *until_ms,
                remaining_ms: *remaining_ms,
            }),
        },
        RunCommand::Resume { .. } | RunCommand::Cancel { .. } => Ok(()),
        // A pause, and an act on a lease, are for a run that runs: one
        // nobody runs has no clock to stop and no lease in flight.
        RunCommand::Pause { .. } if status.is_paused() => {
            Err(Refused::Run(ControlError::AlreadyPaused { run_id, status }))
        }
        RunCommand::Pause { .. } | RunCommand::Lease { .. } | RunCommand::Message { .. }
            if *holder == Holder::Nobody =>
        {
            Err(Refused::NotRunning {
                run_id,
                status,
                command: name(command),
            })
        }
        RunCommand::Message {
            policy: Steer::Reject,
            ..
        } if !status.is_paused() => Err(Refused::Run(ControlError::Busy { run_id, status })),
        RunCommand::Pause { .. } | RunCommand::Lease { .. } | RunCommand::Message { .. } => Ok(()),
    }
}

/// `resume`, `cancel` or `reconcile`: the command's name, as the CLI and
/// the API name it.
pub fn name(command: &RunCommand) -> &'static str {
    match command {
        RunCommand::Resume { .. } => "resume",
        RunCommand::Cancel { .. } => "cancel",
        RunCommand::Reconcile { .. } => "reconcile",
        RunCommand::Pause { .. } => "pause",
        RunCommand::Lease { .. } => "lease",
        RunCommand::Message { .. } => "message",
    }
}

impl Executor {
    /// Applies `command` to `run_id` wherever the run is: here, claimed by
    /// this executor, or forwarded to the executor that holds it; or
    /// refuses it with the rule's reason.
    pub async fn control(
        self: &Arc<Self>,
        run_id: &str,
        command: RunCommand,
    ) -> Result<Controlled, Refused> {
        // A run claimed by someone else between the look and the claim is
        // looked at again, once: it is then held, and the control forwarded.
        match route(self, run_id, &command).await {
            Err(Refused::Engine(EngineError::Held { .. })) => route(self, run_id, &command).await,
            routed => routed,
        }
    }
}

async fn route(
    executor: &Arc<Executor>,
    run_id: &str,
    command: &RunCommand,
) -> Result<Controlled, Refused> {
    if let Some(handle) = executor.handle(run_id) {
        let state = handle.state();
        if state.lost.is_none() {
            check(
                run_id,
                command,
                state.status,
                state.paused.as_ref(),
                &Holder::Here,
            )?;
            apply(&handle, command.clone()).await?;
            return Ok(Controlled::Applied {
                status: handle.state().status,
                claimed: None,
            });
        }
    }
    let engine = executor.engine();
    let store = engine.store();
    let record = store
        .load_run(run_id)
        .await?
        .ok_or_else(|| Refused::NotFound {
            run_id: run_id.to_owned(),
        })?;
    // The claim rule says who holds the run: the answer a claim by this
    // executor would get now.
    let now_ms = engine.clock().now_unix_ms();
    let holder = match fencing::claim(&record, engine.owner_id(), now_ms, 0) {
        // On a store this process alone opens, a holder that is not an
        // engine here died: nobody holds the run, and it is taken over at
        // once.
        Err(ClaimOutcome::HeldBy { owner_id, .. }) if engine.holder_is_gone(&owner_id) => {
            Holder::Nobody
        }
        Err(ClaimOutcome::HeldBy {
            owner_id,
            expires_at_ms,
        }) => Holder::Elsewhere {
            owner_id,
            until_ms: expires_at_ms,
            remaining_ms: expires_at_ms.saturating_sub(now_ms),
        },
        _ => Holder::Nobody,
    };
    check(
        run_id,
        command,
        record.status,
        record.pause.as_ref(),
        &holder,
    )?;
    match holder {
        // On a store one process opens at a time, the holder is not in
        // another live process: it died, and the run is free once its
        // lease ends. Nobody would take a forwarded command.
        Holder::Elsewhere {
            owner_id,
            until_ms,
            remaining_ms,
        } if !store.is_shared() => Err(Refused::Engine(EngineError::Held {
            run_id: run_id.to_owned(),
            owner_id,
            expires_at_ms: until_ms,
            remaining_ms,
        })),
        Holder::Elsewhere { owner_id, .. } => {
            forward(executor, record, owner_id, command.clone()).await
        }
        Holder::Here | Holder::Nobody => claim_and_apply(executor, record, command.clone()).await,
    }
}

/// Applies `command` to a run live here; its refusals said as the rules
/// say them.
pub async fn apply(handle: &RunHandle, command: RunCommand) -> Result<(), Refused> {
    let applied = match command {
        RunCommand::Resume { guidance } => handle.resume(guidance).await,
        RunCommand::Cancel { reason } => handle.cancel(reason).await,
        RunCommand::Reconcile { key, decision } => handle.reconcile(key, decision).await,
        RunCommand::Pause {
            reason,
            in_flight,
            by,
        } => {
            let request = leasehold_actors::PauseRequest::new(reason)
                .in_flight(in_flight)
                .by(by);
            handle.pause(request).await
        }
        RunCommand::Lease { lease_id, act, by } => handle.lease(lease_id, act, by).await,
        RunCommand::Message { text, policy, by } => handle.steer(text, policy, by).await,
    };
    applied.map_err(|error| match Refused::from(error) {
        Refused::NoSuchCall { run_id, key, .. } => Refused::NoSuchCall {
            run_id,
            key,
            pending: handle
                .state()
                .paused
                .and_then(|p| p.call)
                .map(|call| call.key),
        },
        refused => refused,
    })
}

/// Stores `command` for `owner_id`, which holds the run, unless too many
/// wait for it already.
async fn forward(
    executor: &Executor,
    record: RunRecord,
    owner_id: String,
    command: RunCommand,
) -> Result<Controlled, Refused> {
    let store = executor.engine().store();
    let run_id = record.run_id.clone();
    // An owner that lives takes its commands at once; one that hangs keeps
    // its lease for up to `run_lease_ttl`, and what is sent meanwhile
    // waits in the store: bounded per run.
    let waiting = store.count_commands(&run_id).await?;
    if waiting >= MAX_WAITING_COMMANDS {
        return Err(Refused::CommandsWaiting {
            run_id,
            owner_id,
            waiting,
        });
    }
    let after_seq = store
        .last_event(&run_id)
        .await?
        .map_or(0, |event| event.seq);
    let command_id = store.send_command(&run_id, command).await?;
    tracing::info!(%run_id, command = command_id, owner = %owner_id, "control forwarded to the run's owner");
    Ok(Controlled::Forwarded {
        owner_id,
        status: record.status,
        command_id,
        record: Box::new(record),
        after_seq,
    })
}

/// Claims a run nobody holds and applies `command`: a cancel (or a
/// decision to cancel) without starting the run's loops; a resume or
/// another decision by resuming it here.
async fn claim_and_apply(
    executor: &Arc<Executor>,
    record: RunRecord,
    command: RunCommand,
) -> Result<Controlled, Refused> {
    let run_id = record.run_id.as_str();
    let reason = match &command {
        RunCommand::Cancel { reason } => Some(reason.clone()),
        RunCommand::Reconcile {
            key,
            decision: ReconcileDecision::Cancel,
        } => Some(format!("cancelled by a person deciding on tool call {key}")),
        _ => None,
    };
    if let Some(reason) = reason {
        executor.engine().cancel_stored(run_id, &reason).await?;
        return Ok(Controlled::Applied {
            status: RunStatus::Cancelled,
            claimed: None,
        });
    }
    let mut handle = executor.take_on(run_id).await?;
    // An orphan's resume is its claim: there is no pause to answer.
    if record.status.is_paused() {
        handle.wait_until(|s| s.status.is_paused()).await;
        apply(&handle, command).await?;
    }
    Ok(Controlled::Applied {
        status: handle.state().status,
        claimed: Some(handle),
    })
}

/// The event an owner logs for a forwarded control it refused.
pub(crate) fn refusal_event(command: &RunCommand, refused: &Refused) -> EventKind {
    EventKind::ControlRefused {
        command: name(command).to_owned(),
        reason: refused.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_actors::ControlError;

    fn elsewhere() -> Holder {
        Holder::Elsewhere {
            owner_id: "leasehold@b".into(),
            until_ms: 90_000,
            remaining_ms: 30_000,
        }
    }

    fn resume() -> RunCommand {
        RunCommand::Resume { guidance: None }
    }

    fn reconcile(key: &str) -> RunCommand {
        RunCommand::Reconcile {
            key: key.to_owned(),
            decision: ReconcileDecision::Retry,
        }
    }

    fn pause_on(key: &str) -> PauseRecord {
        PauseRecord {
            reason: "unknown outcome".into(),
            subject: "charge".into(),
            path: "run".into(),
            call: Some(leasehold_actors::ToolCallRecord {
                key: key.to_owned(),
                path: "run".into(),
                step: 1,
                index: 0,
                tool: "charge".into(),
                arguments: serde_json::json!({}),
                idempotent: Some(false),
                state: leasehold_actors::ToolCallState::Sent,
                result: None,
                by_person: false,
                made_by: None,
                seq: 0,
            }),
        }
    }

    #[test]
    fn a_resume_of_a_run_awaiting_a_decision_is_refused_wherever_it_is() {
        let pause = pause_on("k1");
        for holder in [Holder::Here, elsewhere(), Holder::Nobody] {
            let refused = check(
                "run-1",
                &resume(),
                RunStatus::ReconciliationRequired,
                Some(&pause),
                &holder,
            )
            .expect_err("refused");
            assert!(
                matches!(&refused, Refused::AwaitsReconciliation { key, .. } if key == "k1"),
                "{refused}"
            );
            let message = refused.to_string();
            assert!(
                message.contains("leasehold runs reconcile run-1 --key k1")
                    && message.contains("POST /runs/run-1/reconcile"),
                "{message}"
            );
        }
    }

    #[test]
    fn each_rule_refuses_what_it_should_and_no_more() {
        let finished = check("r", &resume(), RunStatus::Completed, None, &Holder::Nobody);
        assert!(matches!(finished, Err(Refused::Finished { .. })));
        let cancel = RunCommand::Cancel { reason: "x".into() };
        assert!(matches!(
            check("r", &cancel, RunStatus::Cancelled, None, &elsewhere()),
            Err(Refused::Finished { .. })
        ));
        assert!(check("r", &cancel, RunStatus::Running, None, &elsewhere()).is_ok());
        // A running run held by someone has nothing to resume; an orphan
        // nobody holds is resumed by its claim.
        assert!(matches!(
            check("r", &resume(), RunStatus::Running, None, &elsewhere()),
            Err(Refused::RunsElsewhere { .. })
        ));
        assert!(matches!(
            check("r", &resume(), RunStatus::Running, None, &Holder::Here),
            Err(Refused::NotPaused { .. })
        ));
        assert!(check("r", &resume(), RunStatus::Orphaned, None, &Holder::Nobody).is_ok());
        assert!(check("r", &resume(), RunStatus::WaitingHuman, None, &Holder::Here).is_ok());
        // A decision needs a run that waits for one, and for a run nobody
        // runs, the call its pause names.
        let refused = check(
            "r",
            &reconcile("k1"),
            RunStatus::Cancelled,
            None,
            &Holder::Nobody,
        )
        .expect_err("refused");
        assert_eq!(
            refused.to_string(),
            "run r does not wait for a reconciliation: it is cancelled"
        );
        let pause = pause_on("k1");
        let refused = check(
            "r",
            &reconcile("k2"),
            RunStatus::ReconciliationRequired,
            Some(&pause),
            &Holder::Nobody,
        )
        .expect_err("refused");
        assert!(
            refused.to_string().contains("k1") && refused.to_string().contains("k2"),
            "{refused}"
        );
        assert!(
            check(
                "r",
                &reconcile("k2"),
                RunStatus::ReconciliationRequired,
                Some(&pause),
                &elsewhere()
            )
            .is_ok(),
            "the owner's actor knows every call that waits"
        );
    }

    #[test]
    fn the_actors_refusals_are_said_as_the_rules_say_them() {
        let from_actor = Refused::from(ControlError::NeedsReconciliation {
            run_id: "r".into(),
            key: "k".into(),
        });
        let from_rule = check(
            "r",
            &resume(),
            RunStatus::ReconciliationRequired,
            Some(&pause_on("k")),
            &Holder::Here,
        )
        .expect_err("refused");
        assert_eq!(from_actor.to_string(), from_rule.to_string());
    }
}
