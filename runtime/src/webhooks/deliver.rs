//! The [`Deliverer`]: a task beside the runs that takes the store's due
//! notices and posts each to the receivers that should hear of it.
//!
//! - A notice is taken with a hold ([`Outbox::take_notices`](crate::Outbox::take_notices)): another
//!   deliverer (another executor on a shared store) does not take it
//!   meanwhile, and one that dies mid-delivery leaves it to be taken again
//!   once the hold ends.
//! - Each receiver that answers 2xx is recorded as having it, and is not
//!   sent it again. The others are tried again after a backoff that
//!   doubles from `retry_first` up to `retry_max`, until the notice is
//!   `give_up_after` old; then it is dropped, said in the log and counted.
//! - A request is bounded by `timeout`, follows no redirect and reads no
//!   answer body: a receiver that is slow, huge or endless costs one
//!   timeout per attempt, never a run's time.
//! - The deliverer wakes when the store says a run changed, and otherwise
//!   looks at least once a [`POLL`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt as _;
use leasehold_actors::{Clock, Delivery, Notice, NoticeTake, Store};
use tokio_util::sync::CancellationToken;

use super::payload::{Links, message_id, payload};
use super::sign::{ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};
use super::{Receiver, unknown_receivers};
use crate::secret::Secrets;

/// How often the deliverer looks for due notices when nothing wakes it.
pub const POLL: Duration = Duration::from_secs(1);

/// At most this many notices a take.
const BATCH: usize = 32;

/// At most this many notices delivered at once.
const CONCURRENT: usize = 8;

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

    /// How long a take holds a notice: long enough to try every receiver
    /// once, one after another, with room to settle.
    fn hold(&self) -> Duration {
        let receivers = u32::try_from(self.receivers.len()).unwrap_or(u32::MAX);
        self.timeout
            .saturating_mul(receivers.max(1))
            .saturating_add(Duration::from_secs(5))
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
        let work = Work {
            store,
            config: Arc::new(config),
            clock,
            client,
            counts: Arc::clone(&counts),
        };
        let task = tokio::spawn(work.run(stop.clone()));
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

struct Work {
    store: Arc<dyn Store>,
    config: Arc<DeliveryConfig>,
    clock: Arc<dyn Clock>,
    client: reqwest::Client,
    counts: Arc<DeliveryCounts>,
}

impl Work {
    async fn run(self, stop: CancellationToken) {
        let mut changes = self.store.changes();
        let hold = u64::try_from(self.config.hold().as_millis()).unwrap_or(u64::MAX);
        let mut failing = false;
        loop {
            let take = NoticeTake {
                now_ms: self.clock.now_unix_ms(),
                hold_ms: hold,
                max: BATCH,
            };
            let full = tokio::select! {
                () = stop.cancelled() => return,
                taken = self.store.take_notices(take) => match taken {
                    Ok(notices) => {
                        failing = false;
                        let full = notices.len() == BATCH;
                        let delivering = futures_util::stream::iter(notices)
                            .for_each_concurrent(CONCURRENT, |notice| self.deliver(notice));
                        tokio::select! {
                            () = stop.cancelled() => return,
                            () = delivering => {}
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
                },
            };
            if full {
                continue;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                _ = changes.recv() => {}
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// Posts `notice` to each receiver that should have it and does not
    /// yet, then settles it.
    async fn deliver(&self, notice: Notice) {
        let held_until = notice.delivery.due_at_ms;
        if notice.delivery.attempts == 0 {
            let unknown = unknown_receivers(&self.config.receivers, &notice.notify);
            if !unknown.is_empty() {
                tracing::warn!(run_id = %notice.run_id, receivers = ?unknown,
                    "webhooks: the run's flow names receivers the configuration does not declare; they are not told");
            }
        }
        let pending: Vec<&Receiver> = self
            .config
            .receivers
            .iter()
            .filter(|r| r.hears(notice.status, &notice.notify))
            .filter(|r| !notice.delivery.delivered.contains(&r.name))
            .collect();
        if pending.is_empty() {
            self.settle(&notice, held_until, None).await;
            return;
        }
        let body = match serde_json::to_vec(&payload(&notice, &self.config.links)) {
            Ok(body) => body,
            Err(error) => {
                tracing::warn!(run_id = %notice.run_id, %error, "webhooks: cannot write a notice's payload; dropped");
                self.settle(&notice, held_until, None).await;
                return;
            }
        };
        let id = message_id(&notice);
        let sent = futures_util::future::join_all(
            pending
                .iter()
                .map(|receiver| self.post(receiver, &id, &body)),
        )
        .await;
        let mut delivery = notice.delivery.clone();
        delivery.attempts = delivery.attempts.saturating_add(1);
        let mut errors = Vec::new();
        for (receiver, outcome) in pending.iter().zip(sent) {
            match outcome {
                Ok(()) => {
                    self.counts.delivered.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(run_id = %notice.run_id, receiver = %receiver.name,
                        status = notice.status.name(), "webhooks: delivered");
                    delivery.delivered.push(receiver.name.clone());
                }
                Err(error) => {
                    self.counts.failed.fetch_add(1, Ordering::Relaxed);
                    errors.push(format!("{}: {error}", receiver.name));
                }
            }
        }
        if errors.is_empty() {
            self.settle(&notice, held_until, None).await;
            return;
        }
        let now = self.clock.now_unix_ms();
        let age = Duration::from_millis(now.saturating_sub(notice.at_ms));
        let last_error = errors.join("; ");
        if age >= self.config.give_up_after {
            self.counts.given_up.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(run_id = %notice.run_id, status = notice.status.name(),
                attempts = delivery.attempts, error = %last_error,
                "webhooks: gave up on a notice, older than webhooks.give_up_after");
            self.settle(&notice, held_until, None).await;
            return;
        }
        let wait = self.config.backoff(delivery.attempts);
        tracing::warn!(run_id = %notice.run_id, status = notice.status.name(),
            attempts = delivery.attempts, error = %last_error,
            retry_in = %humantime::format_duration(wait), "webhooks: not delivered; will retry");
        delivery.due_at_ms =
            now.saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        delivery.last_error = Some(last_error);
        self.settle(&notice, held_until, Some(delivery)).await;
    }

    /// One signed POST of `body` to `receiver`: `Ok` on a 2xx answer.
    async fn post(&self, receiver: &Receiver, id: &str, body: &[u8]) -> Result<(), String> {
        let timestamp = self.clock.now_unix_ms() / 1000;
        let signature = sign(&receiver.secret, id, timestamp, body);
        let sent = self
            .client
            .post(&receiver.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(ID_HEADER, id)
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(SIGNATURE_HEADER, signature)
            .body(body.to_vec())
            .send()
            .await;
        // The answer's body is never read: only its status counts.
        match sent {
            Ok(answer) if answer.status().is_success() => Ok(()),
            Ok(answer) => Err(format!("answered {}", answer.status())),
            Err(error) => Err(Secrets::of_url(&receiver.url).scrub(&error_chain(&error))),
        }
    }

    async fn settle(&self, notice: &Notice, held_until: u64, delivery: Option<Delivery>) {
        match self
            .store
            .settle_notice(notice.id, held_until, delivery)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(run_id = %notice.run_id, "webhooks: a notice was taken again before it was settled");
            }
            Err(error) => {
                tracing::warn!(run_id = %notice.run_id, error = %error.message(),
                    "webhooks: cannot settle a notice; it is taken again once its hold ends");
            }
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
