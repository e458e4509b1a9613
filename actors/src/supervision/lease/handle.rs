//! Starting a supervised operation and waiting for its outcome.

use std::future::Future;
use std::sync::Arc;

use ractor::ActorRef;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::error::LeaseError;
use super::protocol::{LeaseMsg, Registration};
use super::spec::LeaseSpec;
use super::task::{DoneGuard, settled};
use super::terms::TermsByKind;
use crate::duration::deadline_after;
use crate::event::EventLimits;
use crate::ports::EventSink;
use crate::supervision::evidence::Evidence;
use crate::vocabulary::lease::{LeaseId, LeaseMeta};

/// A client of one lease actor: starts operations under its leases.
#[derive(Clone)]
pub struct Leases {
    actor: ActorRef<LeaseMsg>,
    events: Arc<dyn EventSink>,
    limits: EventLimits,
    /// The terms of leases started without their own, per kind.
    terms: TermsByKind,
    /// The run whose leases these are, on an actor that holds many runs':
    /// pausing, resuming, draining and releasing are then the run's alone.
    run: Option<Arc<str>>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("actor", &self.actor)
            .finish_non_exhaustive()
    }
}

impl Leases {
    pub(crate) fn new(
        actor: ActorRef<LeaseMsg>,
        events: Arc<dyn EventSink>,
        limits: EventLimits,
        terms: TermsByKind,
    ) -> Self {
        Self {
            actor,
            events,
            limits,
            terms,
            run: None,
        }
    }

    /// These leases, as one run's among those of other runs on the same
    /// actor: [`Self::pause`], [`Self::resume`], [`Self::drained`] and
    /// [`Self::release`] then act on `run_id`'s leases alone.
    pub fn for_run(mut self, run_id: &str) -> Self {
        self.run = Some(Arc::from(run_id));
        self
    }

    /// The lease actor, for tests of the actors alone (feature
    /// `test-util`): its protocol is not the public API.
    #[cfg(feature = "test-util")]
    pub fn actor(&self) -> &ActorRef<LeaseMsg> {
        &self.actor
    }

    /// The lease actor.
    #[cfg(not(feature = "test-util"))]
    pub(crate) fn actor(&self) -> &ActorRef<LeaseMsg> {
        &self.actor
    }

    /// Stops every clock of these leases (of the actor's, or of the run's
    /// alone when they are one run's): no lease expires, new leases start
    /// disarmed, evidence does not age and verdicts that arrive are
    /// dropped, until [`Self::resume`].
    pub fn pause(&self) {
        let _ = self.actor.send_message(match &self.run {
            Some(run) => LeaseMsg::PauseRun(run.clone()),
            None => LeaseMsg::Pause,
        });
    }

    /// Restarts every clock: each lease gets a full, fresh period.
    pub fn resume(&self) {
        let _ = self.actor.send_message(match &self.run {
            Some(run) => LeaseMsg::ResumeRun(run.clone()),
            None => LeaseMsg::Resume,
        });
    }

    /// Cancels every operation under these leases and lets them go: a
    /// run's, on an actor shared with other runs; else stops the actor.
    pub fn release(&self) {
        match &self.run {
            Some(run) => {
                let _ = self.actor.send_message(LeaseMsg::ReleaseRun(run.clone()));
            }
            None => self.actor.stop(None),
        }
    }

    /// A person's act by hand on `lease`, or on every lease in flight of
    /// these (the run's, when they are one run's) with `None`: recorded as
    /// verdicts decided by the person. Answers how many leases it acted
    /// on, or why it acted on none (the lease is not in flight, the run's
    /// clocks are stopped, the lease actor is gone).
    pub(crate) async fn by_person(
        &self,
        lease: Option<LeaseId>,
        of_loop: Option<String>,
        act: crate::ports::LeaseAct,
        by: String,
    ) -> Result<usize, String> {
        let (reply, answer) = oneshot::channel();
        let asked = LeaseMsg::ByPerson(Box::new(super::protocol::ByPerson {
            run: self.run.clone(),
            lease,
            of_loop,
            act,
            by,
            reply,
        }));
        if self.actor.send_message(asked).is_err() {
            return Err("the run's lease actor is gone".to_owned());
        }
        answer
            .await
            .unwrap_or_else(|_| Err("the run's lease actor is gone".to_owned()))
    }

    /// Waits until the lease actor holds no lease — none of the run's, when
    /// these are one run's — at once if it holds none, or is gone. Every `lease_cancelled` of the leases it let go
    /// was published before this returns.
    pub async fn drained(&self) {
        let (reply, drained) = oneshot::channel();
        let asked = match &self.run {
            Some(run) => LeaseMsg::DrainedRun(run.clone(), reply),
            None => LeaseMsg::Drained(reply),
        };
        if self.actor.send_message(asked).is_ok() {
            let _ = drained.await;
        }
    }

    /// Runs `operation` once, in a task of its own, under a lease built from
    /// `spec`. The operation is given its [`Evidence`] cell to report
    /// progress into.
    pub fn supervise<T, F, Fut>(
        &self,
        spec: LeaseSpec,
        operation: F,
    ) -> Result<LeaseHandle<T>, LeaseError>
    where
        T: Send + 'static,
        F: FnOnce(Evidence) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
    {
        let Begun {
            id,
            evidence,
            token,
            end,
            cut,
            work,
            done,
        } = self.begin(spec, operation)?;
        let work = super::cancel::until_cancelled(token.clone(), work);
        let join = tokio::spawn(super::task::OperationTask::new(work, done));
        Ok(LeaseHandle {
            id,
            evidence,
            token,
            end,
            cut,
            join,
            finished: false,
        })
    }

    /// Runs `operation` once under a lease built from `spec`, as
    /// [`Self::supervise`] does, and then `then` with its outcome — what
    /// [`LeaseHandle::outcome`] would have answered — in the same task: no
    /// task of the owner's waits beside the operation's. `then` is called
    /// once, in a task of its own if the lease could not be taken.
    pub(crate) fn supervise_then<T, F, Fut, R, RFut>(&self, spec: LeaseSpec, operation: F, then: R)
    where
        T: Send + 'static,
        F: FnOnce(Evidence) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        R: FnOnce(Result<T, LeaseError>) -> RFut + Send + 'static,
        RFut: Future<Output = ()> + Send + 'static,
    {
        let Begun {
            id: _,
            evidence,
            token,
            end,
            cut,
            work,
            done,
        } = match self.begin(spec, operation) {
            Ok(begun) => begun,
            Err(error) => {
                tokio::spawn(then(Err(error)));
                return;
            }
        };
        let work = super::cancel::until_cancelled(token.clone(), work);
        let task = super::task::ThenTask::new(
            super::task::OperationTask::new(work, done),
            super::task::After {
                token,
                cut,
                end,
                evidence,
                then,
            },
        );
        tokio::spawn(task);
    }

    /// Takes a lease for `operation`: its terms, evidence and cancellation
    /// settled, the operation built and registered with the actor before
    /// it starts.
    fn begin<T, F, Fut>(&self, spec: LeaseSpec, operation: F) -> Result<Begun<Fut>, LeaseError>
    where
        T: Send + 'static,
        F: FnOnce(Evidence) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
    {
        let id = spec.id.unwrap_or_else(LeaseId::next);
        // The lease's terms are settled here, once: its own, else this
        // actor's for its kind, with its cap.
        let terms = spec
            .terms
            .clone()
            .unwrap_or_else(|| self.terms.capped(spec.kind, spec.max_renewals));
        let meta = Arc::new(LeaseMeta::new(id, &spec, &terms));
        let evidence = Evidence::for_lease(meta.clone(), self.events.clone(), self.limits);
        let token = spec
            .parent
            .as_ref()
            .map_or_else(CancellationToken::new, CancellationToken::child_token);
        // Built before the lease is registered: if building it panics, no
        // lease is left behind.
        let work = operation(evidence.clone());
        let (end_tx, end_rx) = oneshot::channel();
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Registered before the operation starts, so the actor always sees
        // the registration before the operation's `Done`.
        self.actor
            .send_message(LeaseMsg::Register(Box::new(Registration {
                deadline: deadline_after(tokio::time::Instant::now(), meta.duration),
                meta,
                terms,
                evidence: evidence.clone(),
                token: token.clone(),
                end: end_tx,
                cut: cut.clone(),
                nudges: spec.nudges,
            })))
            .map_err(|_| LeaseError::LeaseActorGone)?;
        Ok(Begun {
            id,
            done: DoneGuard {
                actor: self.actor.clone(),
                id,
                cancelled: false,
                evidence: evidence.clone(),
            },
            evidence,
            token,
            end: end_rx,
            cut,
            work,
        })
    }
}

/// A lease taken, its operation not started yet.
struct Begun<Fut> {
    id: LeaseId,
    evidence: Evidence,
    token: CancellationToken,
    end: oneshot::Receiver<super::LeaseEnd>,
    cut: Arc<std::sync::atomic::AtomicBool>,
    work: Fut,
    /// Tells the actor the operation is over when dropped.
    done: DoneGuard,
}

/// The owner's handle on one supervised operation. Dropping it cancels the
/// operation.
#[derive(Debug)]
pub struct LeaseHandle<T> {
    id: LeaseId,
    evidence: Evidence,
    token: CancellationToken,
    end: oneshot::Receiver<super::LeaseEnd>,
    /// Set once a verdict ended the operation (its end follows once the
    /// run's log holds the verdict).
    cut: Arc<std::sync::atomic::AtomicBool>,
    join: JoinHandle<Option<T>>,
    finished: bool,
}

impl<T> LeaseHandle<T> {
    /// The lease.
    pub fn id(&self) -> LeaseId {
        self.id
    }

    /// The operation's evidence cell.
    pub fn evidence(&self) -> &Evidence {
        &self.evidence
    }

    /// Cancels the operation now, without asking the watchdog.
    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// A token that cancels the operation when cancelled.
    pub fn cancellation(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Waits for the operation: its own result, or why the lease ended it.
    pub async fn outcome(mut self) -> Result<T, LeaseError> {
        let result = tokio::select! {
            biased;
            end = &mut self.end => match end {
                Ok(end) => Err(end.into()),
                // The lease was dropped without an end: the operation ended
                // by itself (or the actor stopped); its task says how.
                Err(_) => self.joined().await,
            },
            joined = &mut self.join => match self.cut.load(std::sync::atomic::Ordering::Acquire) {
                // A verdict ended it first: its end, not its result.
                true => match (&mut self.end).await {
                    Ok(end) => Err(end.into()),
                    Err(_) => self.settle(joined),
                },
                false => self.settle(joined),
            },
        };
        // Progress not yet said is said before the owner goes on, so it
        // comes before whatever the owner logs about the end.
        self.evidence.settle();
        self.finished = true;
        result
    }

    async fn joined(&mut self) -> Result<T, LeaseError> {
        let joined = (&mut self.join).await;
        self.settle(joined)
    }

    fn settle(
        &mut self,
        joined: Result<Option<T>, tokio::task::JoinError>,
    ) -> Result<T, LeaseError> {
        match joined {
            Ok(output) => settled(output, &mut self.end),
            Err(join) => {
                self.token.cancel();
                Err(LeaseError::Panicked {
                    message: panic_message(join),
                })
            }
        }
    }
}

impl<T> Drop for LeaseHandle<T> {
    fn drop(&mut self) {
        if !self.finished {
            self.token.cancel();
        }
    }
}

fn panic_message(join: tokio::task::JoinError) -> String {
    match join.try_into_panic() {
        Ok(payload) => crate::error::panic_message(payload.as_ref()),
        Err(join) => join.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::future::pending;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::oneshot;
    use tokio_util::sync::CancellationToken;

    use super::LeaseError;
    use crate::supervision::lease::{LeaseKind, LeaseSpec};
    use crate::supervision::{Supervision, SupervisionConfig};
    use crate::testing::{RecordingSink, Scripted, ScriptedEvaluator};

    async fn supervision(evaluator: Option<ScriptedEvaluator>) -> (Supervision, RecordingSink) {
        let events = RecordingSink::new();
        let mut config = SupervisionConfig::default();
        config.watchdog.free_renewals = 2;
        config.lease.max_renewals = 10;
        let evaluator = evaluator.map(|e| Arc::new(e) as Arc<dyn crate::Evaluator>);
        let supervision = Supervision::start(config, evaluator, Arc::new(events.clone()))
            .await
            .expect("supervision starts");
        (supervision, events)
    }

    fn spec() -> LeaseSpec {
        LeaseSpec::new(LeaseKind::ToolCall, "search", Duration::from_secs(1))
            .expect("valid spec")
            .in_run("run-1", "run")
    }

    /// Runs `operation` with [`super::Leases::supervise_then`] and answers
    /// what `then` was given.
    async fn then_of<T, Fut>(
        supervision: &Supervision,
        spec: LeaseSpec,
        operation: impl FnOnce(crate::Evidence) -> Fut,
    ) -> Result<T, LeaseError>
    where
        T: Send + 'static,
        Fut: std::future::Future<Output = T> + Send + 'static,
    {
        let (given, outcome) = oneshot::channel();
        supervision
            .leases
            .supervise_then(spec, operation, move |outcome| async move {
                let _ = given.send(outcome);
            });
        outcome.await.expect("then is called")
    }

    /// What `then` is given is what the handle's outcome answers: the
    /// operation's result, a verdict's end (the operation cut), a parent's
    /// cancellation, a panic — and the lease goes with its operation.
    #[tokio::test(start_paused = true)]
    async fn then_is_given_what_the_handles_outcome_would_answer() {
        let (supervision, events) = supervision(None).await;
        let done = then_of(&supervision, spec(), |_| async {
            tokio::time::sleep(Duration::from_millis(2_500)).await;
            42
        });
        assert_eq!(done.await, Ok(42), "two expiries renewed, then its result");

        let parent = CancellationToken::new();
        let cancel = parent.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
        });
        let cancelled: Result<(), _> =
            then_of(&supervision, spec().with_parent(&parent), |_| pending()).await;
        assert_eq!(cancelled, Err(LeaseError::Cancelled));

        let panicked: Result<(), _> = then_of(&supervision, spec(), |_| async {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            panic!("tool crashed")
        })
        .await;
        assert_eq!(
            panicked,
            Err(LeaseError::Panicked {
                message: "tool crashed".into()
            })
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            events.count("wait"),
            2 + 1,
            "a lease outlived its operation"
        );

        let (supervision, events) = supervision_intervening().await;
        let intervened: Result<(), _> = then_of(&supervision, spec(), |_| pending()).await;
        assert_eq!(
            intervened,
            Err(LeaseError::Intervened {
                reason: "no progress for 3 leases".into()
            })
        );
        assert_eq!(events.count("intervened"), 1);
    }

    /// An operation that ends the very instant its lease expires has
    /// ended: no expiry is asked about, whether its own timer was set
    /// before the lease's or after it (one sleep, or two stretches).
    #[tokio::test(start_paused = true)]
    async fn an_operation_ending_the_instant_its_lease_expires_has_ended() {
        let (supervision, events) = supervision(None).await;
        let whole = then_of(&supervision, spec(), |_| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            "one sleep"
        });
        assert_eq!(whole.await, Ok("one sleep"));
        let stretches = then_of(&supervision, spec(), |_| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            tokio::time::sleep(Duration::from_millis(700)).await;
            "two stretches"
        });
        assert_eq!(stretches.await, Ok("two stretches"));
        let handle = supervision
            .leases
            .supervise(spec(), |_| async {
                tokio::time::sleep(Duration::from_millis(999)).await;
                tokio::time::sleep(Duration::from_millis(1)).await;
                "through its handle"
            })
            .expect("started");
        assert_eq!(handle.outcome().await, Ok("through its handle"));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(events.count("wait"), 0, "a tie went to the expiry");
    }

    async fn supervision_intervening() -> (Supervision, RecordingSink) {
        supervision(Some(ScriptedEvaluator::new([Scripted::verdict(
            "INTERVENE",
            "no progress for 3 leases",
            "",
        )])))
        .await
    }

    /// With its lease actor gone, `then` is told so, once.
    #[tokio::test(start_paused = true)]
    async fn then_is_told_when_the_lease_actor_is_gone() {
        let (supervision, _events) = supervision(None).await;
        supervision.leases.release();
        supervision.leases.drained().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        let gone: Result<(), _> = then_of(&supervision, spec(), |_| async {}).await;
        assert_eq!(gone, Err(LeaseError::LeaseActorGone));
    }
}
