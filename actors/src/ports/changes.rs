//! The store's change feed and a person's commands for a run held
//! elsewhere.
//!
//! Every store tells its subscribers what changed, after the write that
//! changed it landed ([`ChangeSource::changes`](super::ChangeSource::changes)): new events
//! of a run, a run's record, a queued run, a command for a run, a notice
//! kept in the outbox. A change
//! says *what* to read again, never the data itself: a subscriber reads the
//! store after it hears of a change, so a change it misses costs it only a
//! read. The feed is bounded ([`CHANGE_FEED_CAPACITY`]): a subscriber that
//! falls behind is told ([`ChangeFeed::recv`] answers
//! [`StoreChange::Lagged`]) and re-reads what it follows, as it does on
//! [`StoreChange::Resync`] (a store that lost its source of changes for a
//! while, such as a dropped `LISTEN` connection, says so).
//!
//! A write that was refused (a stale fence) or failed publishes nothing.
//!
//! [`RunCommand`]s let any executor answer a run another executor holds:
//! the command is stored for the run ([`QueueStore::send_command`]), its
//! [`StoreChange::Command`] wakes the owner, and the owner takes the
//! commands of the runs it holds ([`QueueStore::take_commands`]), each once.
//!
//! [`QueueStore::send_command`]: super::QueueStore::send_command
//! [`QueueStore::take_commands`]: super::QueueStore::take_commands

use serde::{Deserialize, Serialize};

use tokio::sync::broadcast;

/// How many changes a subscriber may fall behind before it is told it
/// lagged.
pub const CHANGE_FEED_CAPACITY: usize = 1024;

/// What changed in a store. A subscriber reads the store again to learn
/// how.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StoreChange {
    /// Events were appended to a run's log.
    Events {
        /// The run.
        run_id: String,
    },
    /// A run's record changed: created, claimed, its status, orphaned.
    /// (A heartbeat, which only moves the lease's expiry, is not a change.)
    Run {
        /// The run.
        run_id: String,
    },
    /// A run was queued for an executor to claim.
    Queued,
    /// A notice (a run's pause or end) was kept in the outbox: what wakes
    /// whoever delivers notices, who has nothing to take otherwise. The
    /// write that kept it also changed the run's record, and publishes a
    /// [`StoreChange::Run`] before it.
    Notice {
        /// The run.
        run_id: String,
    },
    /// A command was stored for a run.
    Command {
        /// The run.
        run_id: String,
    },
    /// The store may have missed changes (its source of changes dropped
    /// and came back): re-read everything followed.
    Resync,
    /// This subscriber fell behind and lost changes: re-read everything
    /// followed.
    Lagged {
        /// How many changes were lost.
        missed: u64,
    },
}

impl StoreChange {
    /// Whether a subscriber that follows `run_id` should read the store
    /// again: a change of that run, or one that says changes were missed.
    pub fn concerns(&self, run_id: &str) -> bool {
        match self {
            Self::Events { run_id: id }
            | Self::Run { run_id: id }
            | Self::Command { run_id: id } => id == run_id,
            Self::Resync | Self::Lagged { .. } => true,
            // The record's own change, published with it, says so.
            Self::Queued | Self::Notice { .. } => false,
        }
    }

    /// Whether changes may have been missed.
    pub fn is_gap(&self) -> bool {
        matches!(self, Self::Resync | Self::Lagged { .. })
    }
}

/// The publishing side of a change feed: what a store holds.
#[derive(Clone, Debug)]
pub struct ChangeHub {
    sender: broadcast::Sender<StoreChange>,
}

impl Default for ChangeHub {
    fn default() -> Self {
        Self::new()
    }
}

impl ChangeHub {
    /// A hub with room for [`CHANGE_FEED_CAPACITY`] changes per subscriber.
    pub fn new() -> Self {
        Self {
            sender: broadcast::channel(CHANGE_FEED_CAPACITY).0,
        }
    }

    /// A new subscriber: it hears of every change published from now on.
    pub fn subscribe(&self) -> ChangeFeed {
        ChangeFeed {
            receiver: self.sender.subscribe(),
        }
    }

    /// Tells every subscriber; nobody listening is not an error.
    pub fn publish(&self, change: StoreChange) {
        let _ = self.sender.send(change);
    }
}

/// One subscriber's view of a store's changes.
#[derive(Debug)]
pub struct ChangeFeed {
    receiver: broadcast::Receiver<StoreChange>,
}

impl ChangeFeed {
    /// The next change, [`StoreChange::Lagged`] if this subscriber fell
    /// behind, or `None` once the store is gone.
    pub async fn recv(&mut self) -> Option<StoreChange> {
        match self.receiver.recv().await {
            Ok(change) => Some(change),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                Some(StoreChange::Lagged { missed })
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// The next change already published, without waiting: `None` when
    /// there is none yet (or the store is gone), [`StoreChange::Lagged`]
    /// if this subscriber fell behind.
    pub fn try_recv(&mut self) -> Option<StoreChange> {
        match self.receiver.try_recv() {
            Ok(change) => Some(change),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                Some(StoreChange::Lagged { missed })
            }
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed) => {
                None
            }
        }
    }

    /// Waits for a change that concerns `run_id`
    /// ([`StoreChange::concerns`]); `None` once the store is gone.
    pub async fn changed(&mut self, run_id: &str) -> Option<StoreChange> {
        loop {
            let change = self.recv().await?;
            if change.concerns(run_id) {
                return Some(change);
            }
        }
    }
}

/// A person's control of a run, stored for the executor that holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum RunCommand {
    /// Resume the paused run, with guidance.
    Resume {
        /// What the person said.
        guidance: Option<String>,
    },
    /// Cancel the run.
    Cancel {
        /// Why.
        reason: String,
    },
    /// Decide on a tool call of unknown outcome.
    Reconcile {
        /// The call's idempotency key.
        key: String,
        /// What to do.
        decision: ReconcileDecision,
    },
    /// Pause the running run for a person, as an `ESCALATE` pauses it:
    /// every clock stopped, no step or retry started, until it is resumed.
    Pause {
        /// Why, in the person's words.
        reason: String,
        /// What becomes of the operations in flight.
        #[serde(default)]
        in_flight: InFlight,
        /// Who asked.
        by: String,
    },
    /// A person's message to the running run, delivered as `policy` says.
    Message {
        /// The message.
        text: String,
        /// How it is delivered.
        #[serde(default)]
        policy: Steer,
        /// Who sent it.
        by: String,
    },
    /// Extend or stop one lease of the running run by hand.
    Lease {
        /// The lease, as the run's events name it.
        lease_id: crate::vocabulary::lease::LeaseId,
        /// What to do with it.
        act: LeaseAct,
        /// Who asked.
        by: String,
    },
}

/// How a person's message reaches a running run: LangGraph's
/// double-texting policies, by their names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Steer {
    /// The root loop's next model call sees it; nothing in flight is
    /// stopped.
    #[default]
    Enqueue,
    /// The root loop's own call in flight is stopped as an `INTERVENE`
    /// stops it (workers go on), and its next model call sees the message.
    Interrupt,
    /// Refused while the run is running; taken, as `enqueue`, while it
    /// waits for a person.
    Reject,
    /// A fork of the run before its current step, with the message as its
    /// guidance; the run itself is cancelled.
    Rollback,
}

impl Steer {
    /// The policy's name, as the API and the command line say it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Enqueue => "enqueue",
            Self::Interrupt => "interrupt",
            Self::Reject => "reject",
            Self::Rollback => "rollback",
        }
    }
}

/// A person's pause of a running run ([`RunHandle::pause`](crate::RunHandle::pause)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PauseRequest {
    /// Why, in the person's words.
    pub reason: String,
    /// What becomes of the operations in flight.
    pub in_flight: InFlight,
    /// Who asked, as the run's trace says it.
    pub by: String,
}

impl PauseRequest {
    /// A pause for `reason`, asked by "a person", whose operations in
    /// flight finish.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            in_flight: InFlight::Finish,
            by: "a person".to_owned(),
        }
    }

    /// Who asked.
    #[must_use]
    pub fn by(mut self, who: impl Into<String>) -> Self {
        self.by = who.into();
        self
    }

    /// What becomes of the operations in flight.
    #[must_use]
    pub fn in_flight(mut self, in_flight: InFlight) -> Self {
        self.in_flight = in_flight;
        self
    }
}

/// What a person's pause does to the operations in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum InFlight {
    /// They go on, with their clocks stopped, and their results are kept:
    /// no step starts after them until the run is resumed.
    #[default]
    Finish,
    /// Each model and tool call in flight is stopped as an `INTERVENE`
    /// stops it, decided by the person: its loop's strategy makes it again
    /// once the run is resumed (a tool call of unknown outcome not known
    /// to be idempotent waits for a decision instead, as after any
    /// intervention). Workers are not stopped, only their calls: their
    /// steps so far are kept.
    Cancel,
}

impl InFlight {
    /// `finish` or `cancel`, as the API and the command line say it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Finish => "finish",
            Self::Cancel => "cancel",
        }
    }
}

/// What a person does to a lease by hand.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "act")]
pub enum LeaseAct {
    /// Moves the end of its current period later by `by_ms`: a renewal
    /// that counts toward no cap.
    Extend {
        /// How much later, in milliseconds.
        by_ms: u64,
    },
    /// Stops its operation as an `INTERVENE` does.
    Intervene {
        /// Why.
        reason: String,
    },
}

/// A command as a store keeps it until its run's owner takes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCommand {
    /// Its id: commands are taken in id order.
    pub id: u64,
    /// The run.
    pub run_id: String,
    /// The command.
    pub command: RunCommand,
}

/// What a person decides about a tool call of unknown outcome.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case", tag = "decision")]
#[non_exhaustive]
pub enum ReconcileDecision {
    /// It took effect: this is its result.
    MarkDone {
        /// The result the model will see.
        result: String,
    },
    /// Call it again, with the same idempotency key.
    Retry,
    /// Cancel the run.
    Cancel,
}
