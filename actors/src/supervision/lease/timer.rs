//! The timer queue beside the leases: one task and one `DelayQueue` for all
//! the leases of a lease actor, each lease an entry.
//!
//! The actor arms and disarms through a channel; an expiry comes back as a
//! [`LeaseMsg::Expired`] carrying the generation it was armed with, so the
//! actor can ignore a fire that a renewal has made stale.
//!
//! No deadline can panic the task. Each is clamped to
//! [`MAX_DURATION`](crate::MAX_DURATION) from now; and since a `DelayQueue`
//! refuses (by panicking) any deadline more than about 795 days after the
//! last time it fired — which, for a queue that rarely fires, can be the
//! moment it was created — the queue is rebuilt around the present, its
//! entries moved over, once a deadline would land more than
//! [`REBASE_AFTER`] after the queue's start. Were the task to die, none of
//! its leases would ever expire again.

use std::collections::HashMap;
use std::time::Duration;

use ractor::ActorRef;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue::Key};

use super::{LeaseId, LeaseMsg};
use crate::duration::{MAX_DURATION, deadline_after};

/// How far past its start a queue may be asked to fire before it is
/// rebuilt: well inside `DelayQueue`'s limit of 2^36 ms (about 795 days),
/// with room for a [`MAX_DURATION`] lease on top.
pub(crate) const REBASE_AFTER: Duration = Duration::from_secs(365 * 24 * 60 * 60);

pub(crate) enum TimerCmd {
    Arm {
        id: LeaseId,
        generation: u64,
        at: Instant,
    },
    Disarm(LeaseId),
}

/// The queue, its start and, per lease, its key, generation and deadline
/// (kept so that the queue can be rebuilt).
struct Timers {
    queue: DelayQueue<(LeaseId, u64)>,
    start: Instant,
    armed: HashMap<LeaseId, (Key, u64, Instant)>,
}

impl Timers {
    fn new() -> Self {
        Self {
            queue: DelayQueue::new(),
            start: Instant::now(),
            armed: HashMap::new(),
        }
    }

    fn arm(&mut self, id: LeaseId, generation: u64, at: Instant) {
        self.disarm(id);
        let now = Instant::now();
        let at = at.min(deadline_after(now, MAX_DURATION));
        if at.saturating_duration_since(self.start) > REBASE_AFTER {
            self.rebase(now);
        }
        let key = self.queue.insert_at((id, generation), at);
        self.armed.insert(id, (key, generation, at));
    }

    fn disarm(&mut self, id: LeaseId) {
        if let Some((key, _, _)) = self.armed.remove(&id) {
            self.queue.try_remove(&key);
        }
    }

    /// A fresh queue started now, holding the same entries. Every entry's
    /// deadline is at most [`MAX_DURATION`] after the moment it was armed,
    /// so at most that far from now.
    fn rebase(&mut self, now: Instant) {
        tracing::debug!(entries = self.armed.len(), "lease timer queue rebuilt");
        self.queue = DelayQueue::new();
        self.start = now;
        for (id, (key, generation, at)) in &mut self.armed {
            *key = self.queue.insert_at((*id, *generation), *at);
        }
    }
}

/// Runs the timer queue until the actor drops its sender.
pub(crate) async fn drive(
    mut commands: mpsc::UnboundedReceiver<TimerCmd>,
    actor: ActorRef<LeaseMsg>,
) {
    let mut timers = Timers::new();
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(TimerCmd::Arm { id, generation, at }) => timers.arm(id, generation, at),
                Some(TimerCmd::Disarm(id)) => timers.disarm(id),
                None => return,
            },
            Some(expired) = std::future::poll_fn(|cx| timers.queue.poll_expired(cx)) => {
                let (id, generation) = expired.into_inner();
                timers.armed.remove(&id);
                if actor.send_message(LeaseMsg::Expired { id, generation }).is_err() {
                    return;
                }
            }
        }
    }
}
