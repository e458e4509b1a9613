//! The actor both kinds of call run in: started by its loop, it runs one
//! supervised call to its end, reports the outcome to the loop, and stops.
//! A panic of the actor itself reaches the loop through ractor's supervision
//! and is handled like the call's own panic.

use std::future::Future;
use std::marker::PhantomData;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr};
use tracing::Instrument;

/// One call: what runs inside a [`CallActor`].
pub(crate) trait Call: Send + 'static {
    /// Runs the call under its lease and reports the outcome to its loop.
    fn run(self) -> impl Future<Output = ()> + Send;
}

/// An actor running one [`Call`].
pub(crate) struct CallActor<C>(PhantomData<fn() -> C>);

impl<C> std::fmt::Debug for CallActor<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CallActor<{}>", std::any::type_name::<C>())
    }
}

impl<C: Call> CallActor<C> {
    /// Starts `call` under `supervisor`; the call runs inside `span`.
    pub(crate) async fn spawn_linked(
        name: String,
        call: C,
        span: tracing::Span,
        supervisor: ActorCell,
    ) -> Result<ActorRef<()>, SpawnErr> {
        Actor::spawn_linked(Some(name), Self(PhantomData), (call, span), supervisor)
            .await
            .map(|(actor, _)| actor)
    }
}

impl<C: Call> Actor for CallActor<C> {
    type Msg = ();
    type State = Option<(C, tracing::Span)>;
    type Arguments = (C, tracing::Span);

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        call: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(Some(call))
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some((call, span)) = state.take() {
            call.run().instrument(span).await;
        }
        myself.stop(None);
        Ok(())
    }
}
