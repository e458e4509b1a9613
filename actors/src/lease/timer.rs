//! The timer queue beside the leases: one task and one `DelayQueue` for all
//! the leases of a lease actor, each lease an entry.
//!
//! The actor arms and disarms through a channel; an expiry comes back as a
//! [`LeaseMsg::Expired`] carrying the generation it was armed with, so the
//! actor can ignore a fire that a renewal has made stale.

use std::collections::HashMap;

use ractor::ActorRef;
use tokio::sync::mpsc;
use tokio_util::time::{DelayQueue, delay_queue::Key};

use super::{LeaseId, LeaseMsg};

pub(crate) enum TimerCmd {
    Arm {
        id: LeaseId,
        generation: u64,
        at: tokio::time::Instant,
    },
    Disarm(LeaseId),
}

/// Runs the timer queue until the actor drops its sender.
pub(crate) async fn drive(
    mut commands: mpsc::UnboundedReceiver<TimerCmd>,
    actor: ActorRef<LeaseMsg>,
) {
    let mut queue: DelayQueue<(LeaseId, u64)> = DelayQueue::new();
    let mut keys: HashMap<LeaseId, Key> = HashMap::new();
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(TimerCmd::Arm { id, generation, at }) => {
                    if let Some(old) = keys.remove(&id) {
                        queue.try_remove(&old);
                    }
                    keys.insert(id, queue.insert_at((id, generation), at));
                }
                Some(TimerCmd::Disarm(id)) => {
                    if let Some(old) = keys.remove(&id) {
                        queue.try_remove(&old);
                    }
                }
                None => return,
            },
            Some(expired) = std::future::poll_fn(|cx| queue.poll_expired(cx)) => {
                let (id, generation) = expired.into_inner();
                keys.remove(&id);
                if actor.send_message(LeaseMsg::Expired { id, generation }).is_err() {
                    return;
                }
            }
        }
    }
}
