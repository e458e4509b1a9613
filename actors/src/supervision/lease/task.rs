//! The task a supervised operation runs in: [`OperationTask`] for
//! [`Leases::supervise`](super::Leases::supervise), [`ThenTask`] for
//! [`Leases::supervise_then`](super::Leases::supervise_then) (the
//! operation, then its owner's report of the outcome), and the guard that
//! tells the lease actor the operation is over however it ends.
//!
//! Written out as state machines, not `async` blocks: a block keeps what
//! it captured for its whole life, beside the futures it builds from it
//! and awaits, so the operation's future was held three times over in its
//! task (about 1 KB for a model call's, where these hold it once).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use futures_util::FutureExt;
use futures_util::future::CatchUnwind;
use ractor::ActorRef;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::LeaseEnd;
use super::cancel::UntilCancelled;
use super::error::LeaseError;
use super::protocol::LeaseMsg;
use crate::supervision::evidence::Evidence;
use crate::vocabulary::lease::LeaseId;

/// What the task needs once the operation is over.
pub(super) struct After<R> {
    pub(super) token: CancellationToken,
    pub(super) cut: Arc<AtomicBool>,
    pub(super) end: oneshot::Receiver<LeaseEnd>,
    pub(super) evidence: Evidence,
    pub(super) then: R,
}

pin_project_lite::pin_project! {
    #[project = Stage]
    pub(super) enum ThenTask<Fut: Future, R, RFut> {
        // The operation runs.
        Working {
            #[pin]
            work: CatchUnwind<AssertUnwindSafe<OperationTask<Fut>>>,
            after: Option<After<R>>,
        },
        // A verdict cut it: its end is awaited (sent once the run's log
        // holds the verdict).
        Ending {
            output: Option<Option<Fut::Output>>,
            after: Option<After<R>>,
        },
        // The owner reports the outcome.
        Reporting {
            #[pin]
            report: RFut,
        },
        Over,
    }
}

impl<Fut, R, RFut> ThenTask<Fut, R, RFut>
where
    Fut: Future,
{
    pub(super) fn new(work: OperationTask<Fut>, after: After<R>) -> Self {
        Self::Working {
            work: AssertUnwindSafe(work).catch_unwind(),
            after: Some(after),
        }
    }
}

impl<Fut, R, RFut> Future for ThenTask<Fut, R, RFut>
where
    Fut: Future,
    R: FnOnce(Result<Fut::Output, LeaseError>) -> RFut,
    RFut: Future<Output = ()>,
{
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let (outcome, after) = match self.as_mut().project() {
                Stage::Working { work, after } => {
                    let worked = ready!(work.poll(cx));
                    let Some(mut after) = after.take() else {
                        return Poll::Ready(());
                    };
                    match worked {
                        Err(payload) => {
                            // The operation goes, and its guard with it,
                            // before its token is cancelled.
                            self.set(Self::Over);
                            after.token.cancel();
                            let message = crate::error::panic_message(payload.as_ref());
                            (Err(LeaseError::Panicked { message }), after)
                        }
                        // Its guard told the actor as it ended.
                        Ok(output) => {
                            if after.cut.load(Ordering::Acquire) {
                                self.set(Self::Ending {
                                    output: Some(output),
                                    after: Some(after),
                                });
                                continue;
                            }
                            (settled(output, &mut after.end), after)
                        }
                    }
                }
                Stage::Ending { output, after } => {
                    let Some(after_ref) = after.as_mut() else {
                        return Poll::Ready(());
                    };
                    let end = ready!(Pin::new(&mut after_ref.end).poll(cx));
                    let (Some(output), Some(mut after)) = (output.take(), after.take()) else {
                        return Poll::Ready(());
                    };
                    let outcome = match end {
                        Ok(end) => Err(end.into()),
                        Err(_) => settled(output, &mut after.end),
                    };
                    (outcome, after)
                }
                Stage::Reporting { report } => {
                    ready!(report.poll(cx));
                    self.set(Self::Over);
                    return Poll::Ready(());
                }
                Stage::Over => return Poll::Ready(()),
            };
            // Progress not yet said is said before the owner goes on.
            after.evidence.settle();
            let report = (after.then)(outcome);
            self.set(Self::Reporting { report });
        }
    }
}

pin_project_lite::pin_project! {
    /// The task of [`Leases::supervise`](super::Leases::supervise): the
    /// operation under its lease, its actor told it is over however it ends
    /// (a panic included: the guard goes with the task). Written out for
    /// the same reason as [`ThenTask`].
    pub(super) struct OperationTask<Fut> {
        #[pin]
        work: UntilCancelled<Fut>,
        done: Option<DoneGuard>,
    }
}

impl<Fut: Future> OperationTask<Fut> {
    pub(super) fn new(work: UntilCancelled<Fut>, done: DoneGuard) -> Self {
        Self {
            work,
            done: Some(done),
        }
    }
}

impl<Fut: Future> Future for OperationTask<Fut> {
    type Output = Option<Fut::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = ready!(this.work.poll(cx));
        if let Some(done) = this.done.as_mut() {
            done.cancelled = output.is_none();
        }
        *this.done = None;
        Poll::Ready(output)
    }
}

/// What an operation that ended by itself (`Some`) or was cancelled
/// (`None`) comes to: its output, or, cancelled, its lease's end if one was
/// sent (else it was its parent that cancelled it).
pub(super) fn settled<T>(
    output: Option<T>,
    end: &mut oneshot::Receiver<super::LeaseEnd>,
) -> Result<T, LeaseError> {
    match output {
        Some(value) => Ok(value),
        None => Err(end.try_recv().map_or(LeaseError::Cancelled, Into::into)),
    }
}

pub(super) struct DoneGuard {
    pub(super) actor: ActorRef<LeaseMsg>,
    pub(super) id: LeaseId,
    pub(super) cancelled: bool,
    pub(super) evidence: Evidence,
}

impl Drop for DoneGuard {
    fn drop(&mut self) {
        self.evidence.settle();
        let _ = self.actor.send_message(LeaseMsg::Done {
            id: self.id,
            cancelled: self.cancelled,
        });
    }
}
