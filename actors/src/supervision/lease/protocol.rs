//! What the lease actor is told: by [`Leases`](super::Leases) when an
//! operation starts and ends, by its timers, by evidence cells and by the
//! watchdog with a verdict.

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::terms::LeaseTerms;
use crate::nudge::NudgeQueue;
use crate::supervision::evidence::Evidence;
use crate::vocabulary::evidence::EvidenceSummary;
use crate::vocabulary::lease::{LeaseId, LeaseMeta};
use crate::vocabulary::verdict::Decision;

/// Why the lease, not the operation, ended it.
#[derive(Debug)]
pub(crate) enum LeaseEnd {
    Intervened(String),
    Escalated(String, EvidenceSummary),
    RenewalCapReached(u32),
}

/// A person's act on leases by hand: one lease, or every lease of a run
/// (of the actor's, when `run` is `None`), extended or stopped; answered
/// with how many it acted on, or why it acted on none.
#[derive(Debug)]
pub struct ByPerson {
    /// The run whose leases these are, on an actor that holds many runs'.
    pub(crate) run: Option<Arc<str>>,
    /// The lease, or `None` for every lease of the run.
    pub(crate) lease: Option<LeaseId>,
    /// With `lease: None`, only the calls of the loop at this path (its
    /// own model and tool calls), not every loop's.
    pub(crate) of_loop: Option<String>,
    /// What to do.
    pub(crate) act: crate::ports::LeaseAct,
    /// Who asked.
    pub(crate) by: String,
    /// How many leases it acted on, or why none.
    pub(crate) reply: oneshot::Sender<Result<usize, String>>,
}

/// A new lease, as sent by [`Leases::supervise`](super::Leases::supervise).
pub struct Registration {
    pub(super) meta: Arc<LeaseMeta>,
    /// What its expiries are judged by, settled when it was started.
    pub(super) terms: Arc<LeaseTerms>,
    /// When the first period ends: taken when the operation was started, so
    /// a busy mailbox does not lengthen the lease.
    pub(super) deadline: tokio::time::Instant,
    pub(super) evidence: Evidence,
    pub(super) token: CancellationToken,
    pub(super) end: oneshot::Sender<LeaseEnd>,
    /// Set when a verdict ends the operation, before the end is sent: an
    /// operation that finishes between the two is still ended by it.
    pub(super) cut: Arc<std::sync::atomic::AtomicBool>,
    pub(super) nudges: Option<NudgeQueue>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("meta", &self.meta)
            .finish_non_exhaustive()
    }
}

/// The lease actor's messages.
#[derive(Debug)]
pub enum LeaseMsg {
    /// Start watching an operation.
    Register(Box<Registration>),
    /// The operation is over: it returned, panicked, or (`cancelled`) its
    /// parent cancelled it.
    Done {
        /// The lease.
        id: LeaseId,
        /// Whether it was cancelled rather than finished.
        cancelled: bool,
    },
    /// A timer fired. Ignored unless `generation` is the lease's current one.
    Expired {
        /// The lease.
        id: LeaseId,
        /// The generation the timer was armed with.
        generation: u64,
    },
    /// The operation's evidence turned suspicious by itself — its text or
    /// its steps began to repeat: under a policy that expires early, the
    /// lease is judged now rather than at its period's end.
    Suspect(LeaseId),
    /// The operation's evidence got a history to judge its silences by:
    /// the lease's next check moves to when its silence would turn
    /// suspicious, if that is before its period's end.
    Rearm(LeaseId),
    /// Stop every clock: disarm all timers until [`LeaseMsg::Resume`]. No
    /// lease expires while paused, new leases start disarmed, evidence does
    /// not age, and verdicts that arrive are dropped.
    Pause,
    /// Restart every clock: each lease gets a full, fresh period, and its
    /// evidence's age goes on from where the pause found it.
    Resume,
    /// [`LeaseMsg::Pause`] for one run's leases, on an actor that holds
    /// many runs'.
    PauseRun(Arc<str>),
    /// [`LeaseMsg::Resume`] for one run's leases.
    ResumeRun(Arc<str>),
    /// [`LeaseMsg::Drained`] for one run's leases.
    DrainedRun(Arc<str>, oneshot::Sender<()>),
    /// Cancels every operation of one run, which has stopped (what stopping
    /// a lease actor does to all it holds); each lease goes once its
    /// operation's `Done` arrives.
    ReleaseRun(Arc<str>),
    /// Answer once no lease is held, at once if none is: a run that ends
    /// waits for its cancelled operations to be let go (and their
    /// `lease_cancelled` events published) before its end event, so the
    /// end is its log's last event.
    Drained(oneshot::Sender<()>),
    /// A person extends or stops leases by hand: what, on which, and who.
    ByPerson(Box<ByPerson>),
    /// The watchdog's verdict on an expiry of `generation`.
    Decided {
        /// The lease.
        id: LeaseId,
        /// The generation of the expiry it answers.
        generation: u64,
        /// The verdict.
        decision: Decision,
    },
}
