//! A receiver's lane: its own queue of notices and its own workers, so
//! that a receiver that is slow, hangs or refuses delays nobody else.
//!
//! - A lane holds at most [`QUEUED`] notices of pauses and [`QUEUED`]
//!   others; one offered to a full lane is not queued, and waits in the
//!   store to be offered again.
//! - Its [`CONCURRENT`] workers take the pauses first, oldest first, then
//!   the others: a pause is what a person acts on, and never waits behind
//!   the ends of other runs for the same receiver.
//! - After a failed attempt the lane backs off as a notice does (doubling
//!   from `retry_first` to `retry_max`): the notices it takes meanwhile
//!   are handed back deferred, untried, so that a dead receiver costs one
//!   attempt a backoff, not one a notice.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use leasehold_actors::Clock;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use super::super::Receiver;
use super::super::sign::{ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};
use super::{DeliveryConfig, error_chain};
use crate::secret::Secrets;

/// At most this many requests in flight to one receiver.
pub(super) const CONCURRENT: usize = 4;

/// At most this many notices of each kind (pauses, others) queued for one
/// receiver.
pub(super) const QUEUED: usize = 256;

/// One notice to post to one receiver: its id, its message id and its
/// payload, shared by the lanes it is offered to.
#[derive(Debug)]
pub(super) struct Job {
    pub notice: u64,
    pub message_id: String,
    pub body: Vec<u8>,
    pub pause: bool,
}

/// What became of a job in a lane.
#[derive(Debug)]
pub(super) enum Sent {
    /// The receiver answered 2xx.
    Delivered,
    /// The receiver refused it or did not answer in time.
    Failed(String),
    /// Not tried: the lane is backing off until then (Unix ms).
    Deferred(u64),
}

/// A job's outcome, as a lane reports it to the dispatcher.
#[derive(Debug)]
pub(super) struct Outcome {
    pub notice: u64,
    pub lane: usize,
    pub sent: Sent,
}

#[derive(Default)]
struct Queue {
    pauses: VecDeque<Arc<Job>>,
    others: VecDeque<Arc<Job>>,
    /// Failed attempts in a row.
    failures: u32,
    /// Until when (Unix ms) the lane takes nothing but defers it.
    backoff_until: u64,
}

/// A receiver's queue and the workers that empty it.
pub(super) struct Lane {
    index: usize,
    receiver: Receiver,
    queue: Mutex<Queue>,
    ready: Notify,
}

/// What lanes share: how to post, and where outcomes go.
#[derive(Clone)]
pub(super) struct Posting {
    pub client: reqwest::Client,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<DeliveryConfig>,
    pub outcomes: mpsc::UnboundedSender<Outcome>,
}

impl Lane {
    /// The lane of `receiver`, the `index`-th of the configuration, with
    /// its workers started until `stop`.
    pub fn start(
        index: usize,
        receiver: Receiver,
        posting: &Posting,
        stop: &CancellationToken,
    ) -> Arc<Self> {
        let lane = Arc::new(Self {
            index,
            receiver,
            queue: Mutex::new(Queue::default()),
            ready: Notify::new(),
        });
        for _ in 0..CONCURRENT {
            tokio::spawn(Arc::clone(&lane).work(posting.clone(), stop.clone()));
        }
        lane
    }

    /// The receiver it posts to.
    pub fn receiver(&self) -> &Receiver {
        &self.receiver
    }

    /// Queues `job`, pauses before the others; `false` if the lane's queue
    /// of its kind is full.
    pub fn offer(&self, job: Arc<Job>) -> bool {
        {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            let kind = if job.pause {
                &mut queue.pauses
            } else {
                &mut queue.others
            };
            if kind.len() >= QUEUED {
                return false;
            }
            kind.push_back(job);
        }
        self.ready.notify_one();
        true
    }

    /// The next job, pauses first, and whether the lane backs off until a
    /// time (Unix ms) instead of trying it.
    fn next(&self, now_ms: u64) -> Option<(Arc<Job>, Option<u64>)> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let job = queue
            .pauses
            .pop_front()
            .or_else(|| queue.others.pop_front())?;
        let deferred = (queue.backoff_until > now_ms).then_some(queue.backoff_until);
        Some((job, deferred))
    }

    /// Records an attempt's result: a success ends the backoff, a failure
    /// doubles it.
    fn attempted(&self, delivered: bool, now_ms: u64, config: &DeliveryConfig) {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if delivered {
            queue.failures = 0;
            queue.backoff_until = 0;
        } else {
            queue.failures = queue.failures.saturating_add(1);
            let wait =
                u64::try_from(config.backoff(queue.failures).as_millis()).unwrap_or(u64::MAX);
            queue.backoff_until = now_ms.saturating_add(wait);
        }
    }

    async fn work(self: Arc<Self>, posting: Posting, stop: CancellationToken) {
        loop {
            let Some((job, deferred)) = self.next(posting.clock.now_unix_ms()) else {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = self.ready.notified() => continue,
                }
            };
            let sent = match deferred {
                Some(until) => Sent::Deferred(until),
                None => {
                    let posted = tokio::select! {
                        () = stop.cancelled() => return,
                        posted = self.post(&posting, &job) => posted,
                    };
                    self.attempted(posted.is_ok(), posting.clock.now_unix_ms(), &posting.config);
                    match posted {
                        Ok(()) => Sent::Delivered,
                        Err(error) => Sent::Failed(error),
                    }
                }
            };
            let outcome = Outcome {
                notice: job.notice,
                lane: self.index,
                sent,
            };
            if posting.outcomes.send(outcome).is_err() {
                return;
            }
        }
    }

    /// One signed POST of the job to the receiver: `Ok` on a 2xx answer.
    async fn post(&self, posting: &Posting, job: &Job) -> Result<(), String> {
        let receiver = &self.receiver;
        let timestamp = posting.clock.now_unix_ms() / 1000;
        let signature = sign(&receiver.secret, &job.message_id, timestamp, &job.body);
        let sent = posting
            .client
            .post(&receiver.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(ID_HEADER, &job.message_id)
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(SIGNATURE_HEADER, signature)
            .body(job.body.clone())
            .send()
            .await;
        // The answer's body is never read: only its status counts.
        match sent {
            Ok(answer) if answer.status().is_success() => Ok(()),
            Ok(answer) => Err(format!("answered {}", answer.status())),
            Err(error) => Err(Secrets::of_url(&receiver.url).scrub(&error_chain(&error))),
        }
    }
}
