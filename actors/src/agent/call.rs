//! The task both kinds of call are awaited in: started by its loop beside
//! the call's operation (which runs in its lease's task), it waits for the
//! call's outcome, reports it to the loop, and ends. A panic of the task
//! itself reaches the loop as the call's panic, as a panic of the call does.
//!
//! It is a task, not an actor: the call's work already runs in its own task
//! with its own cancellation, under its lease (MISSION, lease rule 1), and
//! the loop supervises it through the outcome it is sent. An actor around
//! it would only wait, at the price of its mailbox's four channels, its
//! name in ractor's registry and its supervision messages.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use ractor::ActorRef;
use tracing::Instrument;

use super::LoopMsg;
use crate::supervision::strategy::ChildEnd;

/// One call: what its task runs.
pub(crate) trait Call: Send + 'static {
    /// Waits for the call's outcome under its lease and reports it to its
    /// loop.
    fn run(self) -> impl Future<Output = ()> + Send;

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

/// Starts `call`'s task; the call runs inside `span`.
pub(crate) fn spawn<C: Call>(call: C, span: tracing::Span) {
    let panicked = call.on_panic();
    tokio::spawn(async move {
        if let Err(payload) = AssertUnwindSafe(call.run().instrument(span))
            .catch_unwind()
            .await
        {
            panicked.report(crate::error::panic_message(payload.as_ref()));
        }
    });
}

#[cfg(test)]
mod tests {
    use ractor::{Actor, ActorProcessingErr, ActorRef};
    use tokio::sync::mpsc;

    use super::{Call, Panicked, spawn};
    use crate::agent::LoopMsg;
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
        async fn run(self) {
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
        spawn(
            Panics {
                reply_to: forward.clone(),
                index: None,
            },
            tracing::Span::none(),
        );
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
        spawn(
            Panics {
                reply_to: forward.clone(),
                index: Some(1),
            },
            tracing::Span::none(),
        );
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
