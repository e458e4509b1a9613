//! What a call does once its operation is over: started by its loop beside
//! the call's operation, it runs in the operation's own task, after it,
//! under its lease (MISSION, lease rule 1): it reports the call's outcome to
//! the loop. A panic of its own reaches the loop as the call's panic, as a
//! panic of the call does.
//!
//! It is neither an actor nor a task of its own: the call's work already
//! runs in its own task with its own cancellation, and the loop supervises
//! it through the outcome it is sent. An actor around it would only wait,
//! at the price of its mailbox's four channels, its name in ractor's
//! registry and its supervision messages; a task would only wait, at the
//! price of its cell and a wake more.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use ractor::ActorRef;
use tracing::Instrument;

use super::LoopMsg;
use crate::supervision::evidence::Evidence;
use crate::supervision::lease::{LeaseError, LeaseSpec, Leases};
use crate::supervision::strategy::ChildEnd;

/// One call: what it does with its outcome.
pub(crate) trait Call: Send + 'static {
    /// What the call's operation returns.
    type Output: Send + 'static;

    /// Reports the call's outcome under its lease to its loop.
    fn run(self, outcome: Result<Self::Output, LeaseError>) -> impl Future<Output = ()> + Send;

    /// Where and as what a panic of [`Call::run`] is reported.
    fn on_panic(&self) -> Panicked;
}

/// Which call a panic is of, and the loop to tell.
pub(crate) struct Panicked {
    pub(crate) reply_to: ActorRef<LoopMsg>,
    pub(crate) step: u32,
    /// The call's index in its step; `None` for the step's model call.
    pub(crate) index: Option<usize>,
    pub(crate) attempt: u32,
}

impl Panicked {
    fn report(self, message: String) {
        let Panicked {
            reply_to,
            step,
            index,
            attempt,
        } = self;
        let end = ChildEnd::Panicked { message };
        let _ = match index {
            None => reply_to.send_message(LoopMsg::ModelDone {
                step,
                attempt,
                outcome: Err(end),
                retry_after: None,
                overflow: None,
                unreachable: None,
            }),
            Some(index) => reply_to.send_message(LoopMsg::CallDone {
                step,
                index,
                attempt,
                outcome: Err(end),
            }),
        };
    }
}

/// Begins `operation` under a lease of `spec` now (the lease counts from
/// this moment, however long a busy runtime takes to start its task), and
/// `call` with its outcome after it, in `span`.
pub(crate) fn start<C, F, Fut>(
    leases: &Leases,
    spec: LeaseSpec,
    operation: F,
    call: C,
    span: tracing::Span,
) where
    C: Call,
    F: FnOnce(Evidence) -> Fut,
    Fut: Future<Output = C::Output> + Send + 'static,
{
    leases.supervise_then(spec, operation, move |outcome| finish(call, outcome, span));
}

/// Runs `call` with its `outcome` in `span`; a panic of it reaches its loop
/// as the call's.
async fn finish<C: Call>(call: C, outcome: Result<C::Output, LeaseError>, span: tracing::Span) {
    let panicked = call.on_panic();
    if let Err(payload) = AssertUnwindSafe(call.run(outcome).instrument(span))
        .catch_unwind()
        .await
    {
        panicked.report(crate::error::panic_message(payload.as_ref()));
    }
}

#[cfg(test)]
mod tests {
    use ractor::{Actor, ActorProcessingErr, ActorRef};
    use tokio::sync::mpsc;

    use super::{Call, Panicked, finish};
    use crate::agent::LoopMsg;
    use crate::supervision::lease::LeaseError;
    use crate::supervision::strategy::ChildEnd;

    /// A stand-in loop: forwards what it is sent.
    struct Forward;

    impl Actor for Forward {
        type Msg = LoopMsg;
        type State = mpsc::UnboundedSender<LoopMsg>;
        type Arguments = mpsc::UnboundedSender<LoopMsg>;

        async fn pre_start(
            &self,
            _myself: ActorRef<LoopMsg>,
            to: Self::Arguments,
        ) -> Result<Self::State, ActorProcessingErr> {
            Ok(to)
        }

        async fn handle(
            &self,
            _myself: ActorRef<LoopMsg>,
            message: LoopMsg,
            to: &mut Self::State,
        ) -> Result<(), ActorProcessingErr> {
            let _ = to.send(message);
            Ok(())
        }
    }

    /// A call whose task panics while it waits.
    struct Panics {
        reply_to: ActorRef<LoopMsg>,
        index: Option<usize>,
    }

    impl Call for Panics {
        type Output = ();

        async fn run(self, _outcome: Result<(), LeaseError>) {
            tokio::task::yield_now().await;
            panic!("the waiting went wrong");
        }

        fn on_panic(&self) -> Panicked {
            Panicked {
                reply_to: self.reply_to.clone(),
                step: 4,
                index: self.index,
                attempt: 2,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panic_of_a_calls_own_task_reaches_its_loop_as_the_calls_panic() {
        let (to, mut received) = mpsc::unbounded_channel();
        let (forward, task) = Actor::spawn(None, Forward, to).await.expect("spawns");
        tokio::spawn(finish(
            Panics {
                reply_to: forward.clone(),
                index: None,
            },
            Err(LeaseError::Cancelled),
            tracing::Span::none(),
        ));
        match tokio::time::timeout(std::time::Duration::from_secs(5), received.recv())
            .await
            .expect("the panic is reported")
            .expect("a report")
        {
            LoopMsg::ModelDone {
                step: 4,
                attempt: 2,
                outcome: Err(ChildEnd::Panicked { message }),
                ..
            } => assert_eq!(message, "the waiting went wrong"),
            other => panic!("not the model call's panic: {other:?}"),
        }
        tokio::spawn(finish(
            Panics {
                reply_to: forward.clone(),
                index: Some(1),
            },
            Ok(()),
            tracing::Span::none(),
        ));
        match tokio::time::timeout(std::time::Duration::from_secs(5), received.recv())
            .await
            .expect("the panic is reported")
            .expect("a report")
        {
            LoopMsg::CallDone {
                step: 4,
                index: 1,
                attempt: 2,
                outcome: Err(ChildEnd::Panicked { message }),
            } => assert_eq!(message, "the waiting went wrong"),
            other => panic!("not the tool call's panic: {other:?}"),
        }
        forward.stop(None);
        task.await.expect("stops");
    }
}
