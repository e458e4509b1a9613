//! The [`Deliverer`]: a task beside the runs that takes the store's due
//! notices and posts each to the receivers that should hear of it, each
//! receiver in its own lane.
//!
//! - A notice is taken with a hold ([`Outbox::take_notices`](crate::Outbox::take_notices)): another
//!   deliverer (another executor on a shared store) does not take it
//!   meanwhile, and one that dies mid-delivery leaves it to be taken again
//!   once the hold ends. The hold is renewed while the notice waits in a
//!   lane.
//! - Each receiver has its own queue and workers (its lane): one that is
//!   slow, hangs or refuses delays no other receiver, and a pause, which a
//!   person acts on, goes before the ends queued for the same receiver.
//! - Each receiver that answers 2xx is recorded in the store as having it
//!   at once, and is not sent it again. The others are tried again after a
//!   backoff that doubles from `retry_first` up to `retry_max`, until the
//!   notice is `give_up_after` old; then it is dropped, said in the log
//!   and counted.
//! - A request is bounded by `timeout`, follows no redirect and reads no
//!   answer body: a receiver that is slow, huge or endless costs one
//!   timeout per attempt, never a run's time, and never another
//!   receiver's.
//! - The deliverer wakes when the store says it kept a notice
//!   ([`StoreChange::Notice`]; not on a run's events or on the other
//!   changes of its record, which keep none) or may have missed changes,
//!   answers every change already in with one take, and otherwise looks
//!   at least once a [`POLL`].

mod lane;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leasehold_actors::{Clock, Delivery, Notice, NoticeTake, RunStatus, Store, StoreChange};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::lane::{Job, Lane, Outcome, Posting, Sent};
use super::Receiver;
use super::payload::{Links, message_id, payload};
use super::unknown_receivers;

/// How often the deliverer looks for due notices when nothing wakes it,
/// and renews the holds of the notices waiting in its lanes.
pub const POLL: Duration = Duration::from_secs(1);

/// At most this many notices a take.
const BATCH: usize = 64;

/// What delivery needs: the receivers, where links point, and its bounds.
#[derive(Clone, Debug)]
pub struct DeliveryConfig {
    /// The receivers the configuration declares.
    pub receivers: Vec<Receiver>,
    /// Where the payloads' links point.
    pub links: Links,
    /// How long one request may take, connecting included.
    pub timeout: Duration,
    /// The wait before the first retry; it doubles with each.
    pub retry_first: Duration,
    /// The longest wait between retries.
    pub retry_max: Duration,
    /// How old a notice may grow before it is dropped undelivered.
    pub give_up_after: Duration,
}

impl DeliveryConfig {
    /// The wait after the `attempts`-th failed attempt: `retry_first`
    /// doubled `attempts - 1` times, at most `retry_max`.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(32);
        self.retry_first
            .saturating_mul(1_u32 << doublings.min(31))
            .min(self.retry_max)
    }

    /// How long a take holds a notice: long enough to try it once, with
    /// room to settle; renewed while the notice waits in a lane.
    fn hold(&self) -> Duration {
        self.timeout
            .saturating_mul(2)
            .saturating_add(Duration::from_secs(5))
    }

    fn hold_ms(&self) -> u64 {
        u64::try_from(self.hold().as_millis()).unwrap_or(u64::MAX)
    }
}

/// How deliveries went, since the deliverer started.
#[derive(Debug, Default)]
pub struct DeliveryCounts {
    delivered: AtomicU64,
    failed: AtomicU64,
    given_up: AtomicU64,
}

impl DeliveryCounts {
    /// Notices a receiver took (2xx), one per receiver.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Attempts a receiver refused or did not answer in time.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Notices dropped undelivered, too old.
    pub fn given_up(&self) -> u64 {
        self.given_up.load(Ordering::Relaxed)
    }
}

/// Delivers the store's notices until stopped.
pub struct Deliverer {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    counts: Arc<DeliveryCounts>,
}

impl Deliverer {
    /// Starts delivering the notices of `store` on the current runtime.
    /// Fails if the HTTP client cannot be built.
    pub fn start(
        store: Arc<dyn Store>,
        config: DeliveryConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, String> {
        // A receiver is no supervised work: its answer is bounded by a
        // deadline, so that a slow one costs one timeout an attempt.
        #[allow(
            clippy::disallowed_methods,
            reason = "a webhook request is not the model path: a deadline is what bounds it"
        )]
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.timeout)
            .timeout(config.timeout)
            .user_agent(concat!("leasehold/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the webhooks' HTTP client: {e}"))?;
        let counts = Arc::new(DeliveryCounts::default());
        let stop = CancellationToken::new();
        let config = Arc::new(config);
        let (outcomes, reports) = mpsc::unbounded_channel();
        let posting = Posting {
            client,
            clock: Arc::clone(&clock),
            config: Arc::clone(&config),
            outcomes,
        };
        let lanes = config
            .receivers
            .iter()
            .enumerate()
            .map(|(index, receiver)| Lane::start(index, receiver.clone(), &posting, &stop))
            .collect();
        drop(posting);
        let work = Work {
            store,
            config,
            clock,
            counts: Arc::clone(&counts),
            lanes,
            flights: HashMap::new(),
        };
        let task = tokio::spawn(work.run(stop.clone(), reports));
        Ok(Self { stop, task, counts })
    }

    /// How deliveries went.
    pub fn counts(&self) -> Arc<DeliveryCounts> {
        Arc::clone(&self.counts)
    }

    /// Stops delivering: a notice in flight is left held, and taken again
    /// once its hold ends.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// The dispatcher: takes the due notices, offers each to the lanes of the
/// receivers that should have it, and settles it from their outcomes. It
/// alone writes the outbox, so that a notice's settlements never race.
struct Work {
    store: Arc<dyn Store>,
    config: Arc<DeliveryConfig>,
    clock: Arc<dyn Clock>,
    counts: Arc<DeliveryCounts>,
    lanes: Vec<Arc<Lane>>,
    flights: HashMap<u64, Flight>,
}

/// A taken notice whose lanes have not all answered yet.
struct Flight {
    run_id: String,
    status: RunStatus,
    at_ms: u64,
    /// Its due time as the store holds it: what settling it names.
    held_until: u64,
    /// Its progress, as the next settlement writes it.
    delivery: Delivery,
    /// Lanes that have it and have not answered.
    waiting: usize,
    /// What the receivers that failed said.
    errors: Vec<String>,
    /// The earliest time (Unix ms) a lane that did not try it asked to be
    /// offered it again.
    deferred_until: Option<u64>,
}

/// Whether `change` may have made a notice: one was kept, or changes were
/// missed.
fn makes_notices(change: &StoreChange) -> bool {
    matches!(change, StoreChange::Notice { .. }) || change.is_gap()
}

impl Work {
    async fn run(
        mut self,
        stop: CancellationToken,
        mut outcomes: mpsc::UnboundedReceiver<Outcome>,
    ) {
        let mut changes = self.store.changes();
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        let mut look = true;
        loop {
            if look {
                let take = NoticeTake {
                    now_ms: self.clock.now_unix_ms(),
                    hold_ms: self.config.hold_ms(),
                    max: BATCH,
                };
                let taken = tokio::select! {
                    () = stop.cancelled() => return,
                    taken = self.store.take_notices(take) => taken,
                };
                look = match taken {
                    Ok(notices) => {
                        failing = false;
                        let full = notices.len() == BATCH;
                        for notice in notices {
                            self.begin(notice).await;
                        }
                        full
                    }
                    Err(error) => {
                        if !failing {
                            tracing::warn!(error = %error.message(), "webhooks: cannot take the due notices; trying again");
                        }
                        failing = true;
                        false
                    }
                };
                // Outcomes already in are settled between takes, so that
                // a long backlog does not keep them waiting.
                while let Ok(outcome) = outcomes.try_recv() {
                    self.apply(outcome).await;
                }
                continue;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                Some(outcome) = outcomes.recv() => self.apply(outcome).await,
                change = changes.recv() => {
                    // Only a kept notice is worth a take (a run's pause
                    // or end); its events, the other changes of its record,
                    // commands and the queue make none. Changes already in
                    // are read at once, and one take answers them all.
                    look = change.as_ref().is_none_or(makes_notices);
                    while let Some(change) = changes.try_recv() {
                        look |= makes_notices(&change);
                    }
                }
                _ = tick.tick() => {
                    self.renew_holds().await;
                    look = true;
                }
            }
        }
    }

    /// Offers a taken notice to the lanes of the receivers that should
    /// have it and do not yet; settles it at once if there are none.
    async fn begin(&mut self, notice: Notice) {
        let held_until = notice.delivery.due_at_ms;
        if let Some(flight) = self.flights.get_mut(&notice.id) {
            // Taken again while it waits in a lane (its hold ran out before
            // it could be renewed): still ours, held anew, not sent twice.
            flight.held_until = held_until;
            return;
        }
        if notice.delivery.attempts == 0 {
            let unknown = unknown_receivers(&self.config.receivers, &notice.notify);
            if !unknown.is_empty() {
                tracing::warn!(run_id = %notice.run_id, receivers = ?unknown,
                    "webhooks: the run's flow names receivers the configuration does not declare; they are not told");
            }
        }
        let pending: Vec<&Arc<Lane>> = self
            .lanes
            .iter()
            .filter(|lane| lane.receiver().hears(notice.status, &notice.notify))
            .filter(|lane| !notice.delivery.delivered.contains(&lane.receiver().name))
            .collect();
        if pending.is_empty() {
            settle(&*self.store, &notice.run_id, notice.id, held_until, None).await;
            return;
        }
        let body = match serde_json::to_vec(&payload(&notice, &self.config.links)) {
            Ok(body) => body,
            Err(error) => {
                tracing::warn!(run_id = %notice.run_id, %error, "webhooks: cannot write a notice's payload; dropped");
                settle(&*self.store, &notice.run_id, notice.id, held_until, None).await;
                return;
            }
        };
        let job = Arc::new(Job {
            notice: notice.id,
            message_id: message_id(&notice),
            body,
            pause: notice.status.is_paused(),
        });
        let mut flight = Flight {
            run_id: notice.run_id.clone(),
            status: notice.status,
            at_ms: notice.at_ms,
            held_until,
            delivery: notice.delivery.clone(),
            waiting: 0,
            errors: Vec::new(),
            deferred_until: None,
        };
        // Offered to every lane before anything awaits: a lane seen to
        // have it means every lane does.
        for lane in pending {
            if lane.offer(Arc::clone(&job)) {
                flight.waiting += 1;
            } else {
                // The lane is full: the notice waits in the store, and is
                // offered again once the lane may have room.
                let again = self.clock.now_unix_ms().saturating_add(
                    u64::try_from(self.config.timeout.as_millis()).unwrap_or(u64::MAX),
                );
                flight.deferred_until =
                    Some(flight.deferred_until.map_or(again, |at| at.min(again)));
            }
        }
        let waiting = flight.waiting;
        self.flights.insert(notice.id, flight);
        if waiting == 0 {
            self.finish(notice.id).await;
        }
    }

    /// Records a lane's outcome; settles the notice once every lane that
    /// had it answered, and records a delivery in the store at once.
    async fn apply(&mut self, outcome: Outcome) {
        let Some(flight) = self.flights.get_mut(&outcome.notice) else {
            return;
        };
        let Some(lane) = self.lanes.get(outcome.lane) else {
            return;
        };
        let receiver = &lane.receiver().name;
        flight.waiting = flight.waiting.saturating_sub(1);
        let delivered = matches!(outcome.sent, Sent::Delivered);
        match outcome.sent {
            Sent::Delivered => {
                self.counts.delivered.fetch_add(1, Ordering::Relaxed);
                tracing::info!(run_id = %flight.run_id, receiver = %receiver,
                    status = flight.status.name(), "webhooks: delivered");
                flight.delivery.delivered.push(receiver.clone());
            }
            Sent::Failed(error) => {
                self.counts.failed.fetch_add(1, Ordering::Relaxed);
                flight.errors.push(format!("{receiver}: {error}"));
            }
            Sent::Deferred(until) => {
                flight.deferred_until =
                    Some(flight.deferred_until.map_or(until, |at| at.min(until)));
            }
        }
        if flight.waiting == 0 {
            self.finish(outcome.notice).await;
        } else if delivered {
            // The receivers that have it are kept with the notice now, so
            // that a restart or another deliverer does not send it to them
            // again while the others are still waited for.
            self.hold_again(outcome.notice).await;
        }
    }

    /// Writes a waiting notice's progress, held for another hold.
    async fn hold_again(&mut self, id: u64) {
        let Some(flight) = self.flights.get_mut(&id) else {
            return;
        };
        let mut delivery = flight.delivery.clone();
        delivery.due_at_ms = self
            .clock
            .now_unix_ms()
            .saturating_add(self.config.hold_ms());
        let due = delivery.due_at_ms;
        if settle(
            &*self.store,
            &flight.run_id,
            id,
            flight.held_until,
            Some(delivery),
        )
        .await
        {
            flight.held_until = due;
        } else {
            // Taken by another deliverer: theirs to settle.
            self.flights.remove(&id);
        }
    }

    /// Renews the hold of every notice waiting in a lane whose hold ends
    /// within half a hold.
    async fn renew_holds(&mut self) {
        let soon = self
            .clock
            .now_unix_ms()
            .saturating_add(self.config.hold_ms() / 2);
        let ending: Vec<u64> = self
            .flights
            .iter()
            .filter(|(_, flight)| flight.held_until <= soon)
            .map(|(id, _)| *id)
            .collect();
        for id in ending {
            self.hold_again(id).await;
        }
    }

    /// Settles a notice every lane answered: removed if no receiver is
    /// left to tell, or kept with its progress and due again after its
    /// backoff, or dropped once too old.
    async fn finish(&mut self, id: u64) {
        let Some(flight) = self.flights.remove(&id) else {
            return;
        };
        let Flight {
            run_id,
            status,
            at_ms,
            held_until,
            mut delivery,
            errors,
            deferred_until,
            ..
        } = flight;
        if errors.is_empty() && deferred_until.is_none() {
            settle(&*self.store, &run_id, id, held_until, None).await;
            return;
        }
        let now = self.clock.now_unix_ms();
        let mut due = u64::MAX;
        if !errors.is_empty() {
            delivery.attempts = delivery.attempts.saturating_add(1);
            let wait = self.config.backoff(delivery.attempts);
            due = now.saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
            delivery.last_error = Some(errors.join("; "));
        }
        if let Some(deferred) = deferred_until {
            due = due.min(deferred.max(now));
        }
        let last_error = delivery.last_error.clone().unwrap_or_default();
        let age = Duration::from_millis(now.saturating_sub(at_ms));
        if age >= self.config.give_up_after {
            self.counts.given_up.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(run_id = %run_id, status = status.name(),
                attempts = delivery.attempts, error = %last_error,
                "webhooks: gave up on a notice, older than webhooks.give_up_after");
            settle(&*self.store, &run_id, id, held_until, None).await;
            return;
        }
        if !errors.is_empty() {
            let wait = Duration::from_millis(due.saturating_sub(now));
            tracing::warn!(run_id = %run_id, status = status.name(),
                attempts = delivery.attempts, error = %last_error,
                retry_in = %humantime::format_duration(wait), "webhooks: not delivered; will retry");
        }
        delivery.due_at_ms = due;
        settle(&*self.store, &run_id, id, held_until, Some(delivery)).await;
    }
}

/// Settles notice `id` of `run_id` as held until `held_until`; whether it
/// settled (`false`: taken again meanwhile, gone, or the store failed).
async fn settle(
    store: &dyn Store,
    run_id: &str,
    id: u64,
    held_until: u64,
    delivery: Option<Delivery>,
) -> bool {
    match store.settle_notice(id, held_until, delivery).await {
        Ok(true) => true,
        Ok(false) => {
            tracing::debug!(run_id = %run_id, "webhooks: a notice was taken again before it was settled");
            false
        }
        Err(error) => {
            tracing::warn!(run_id = %run_id, error = %error.message(),
                "webhooks: cannot settle a notice; it is taken again once its hold ends");
            false
        }
    }
}

/// An error and its causes, on one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_longest() {
        let config = DeliveryConfig {
            receivers: Vec::new(),
            links: Links::new("http://h", false),
            timeout: Duration::from_secs(10),
            retry_first: Duration::from_secs(5),
            retry_max: Duration::from_secs(60),
            give_up_after: Duration::from_secs(3600),
        };
        let waits: Vec<u64> = (1..=6).map(|n| config.backoff(n).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 60, 60]);
        assert_eq!(config.backoff(u32::MAX), Duration::from_secs(60));
    }
}
