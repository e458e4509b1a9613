//! The timer queue beside the leases: one task for all the leases of a
//! lease actor, each lease an entry in an ordered set, and one tokio
//! `Sleep` set to the earliest.
//!
//! The actor arms and disarms through a channel; an expiry comes back as a
//! [`LeaseMsg::Expired`] carrying the generation it was armed with, so the
//! actor can ignore a fire that a renewal has made stale.
//!
//! A lease actor holds the few leases of one run: an ordered set costs a
//! few hundred bytes where a timer wheel of its own (`DelayQueue`) cost six
//! kilobytes per run before its first entry. Deadlines are clamped to
//! [`MAX_DURATION`](crate::MAX_DURATION) from now, so none can panic the
//! task; were the task to die, none of its leases would ever expire again.

use std::collections::BTreeSet;
use std::pin::pin;

use ractor::ActorRef;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{LeaseId, LeaseMsg};
use crate::duration::{MAX_DURATION, deadline_after};

pub(crate) enum TimerCmd {
    Arm {
        id: LeaseId,
        generation: u64,
        at: Instant,
    },
    Disarm(LeaseId),
}

/// The armed leases: by deadline (then id, for ties), and by id with
/// their generation and deadline.
#[derive(Default)]
struct Timers {
    due: BTreeSet<(Instant, LeaseId)>,
    armed: crate::hash::Map<LeaseId, (u64, Instant)>,
}

impl Timers {
    fn arm(&mut self, id: LeaseId, generation: u64, at: Instant) {
        self.disarm(id);
        let at = at.min(deadline_after(Instant::now(), MAX_DURATION));
        self.due.insert((at, id));
        self.armed.insert(id, (generation, at));
    }

    fn disarm(&mut self, id: LeaseId) {
        if let Some((_, at)) = self.armed.remove(&id) {
            self.due.remove(&(at, id));
        }
    }

    /// The earliest deadline, if any lease is armed.
    fn next(&self) -> Option<Instant> {
        self.due.first().map(|(at, _)| *at)
    }

    /// Takes every lease due at `now`, with the generation it was armed
    /// with, earliest first.
    fn expired(&mut self, now: Instant) -> Vec<(LeaseId, u64)> {
        let mut fired = Vec::new();
        while let Some(&(at, id)) = self.due.first() {
            if at > now {
                break;
            }
            self.due.pop_first();
            if let Some((generation, _)) = self.armed.remove(&id) {
                fired.push((id, generation));
            }
        }
        fired
    }
}

/// Runs the timer queue until the actor drops its sender.
pub(crate) async fn drive(
    mut commands: mpsc::UnboundedReceiver<TimerCmd>,
    actor: ActorRef<LeaseMsg>,
) {
    let mut timers = Timers::default();
    let mut sleep = pin!(tokio::time::sleep_until(Instant::now()));
    loop {
        let next = timers.next();
        if let Some(at) = next
            && sleep.deadline() != at
        {
            sleep.as_mut().reset(at);
        }
        tokio::select! {
            command = commands.recv() => match command {
                Some(TimerCmd::Arm { id, generation, at }) => timers.arm(id, generation, at),
                Some(TimerCmd::Disarm(id)) => timers.disarm(id),
                None => return,
            },
            () = &mut sleep, if next.is_some() => {
                // What else is due at this instant runs first, so that an
                // operation ending the very instant its lease expires has
                // ended (its `Done` reaches the actor before the expiry),
                // whatever order the timers were set in: as a ready inner
                // future wins over `tokio::time::timeout`.
                tokio::task::yield_now().await;
                for (id, generation) in timers.expired(Instant::now()) {
                    if actor.send_message(LeaseMsg::Expired { id, generation }).is_err() {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn leases_fire_in_deadline_order_and_a_rearm_replaces_the_deadline() {
        let now = Instant::now();
        let mut timers = Timers::default();
        let (a, b, c) = (LeaseId(1), LeaseId(2), LeaseId(3));
        timers.arm(a, 1, now + Duration::from_millis(30));
        timers.arm(b, 1, now + Duration::from_millis(10));
        timers.arm(c, 1, now + Duration::from_millis(20));
        timers.arm(a, 2, now + Duration::from_millis(5));
        timers.disarm(c);
        assert_eq!(timers.next(), Some(now + Duration::from_millis(5)));
        assert_eq!(timers.expired(now + Duration::from_millis(4)), vec![]);
        assert_eq!(
            timers.expired(now + Duration::from_millis(50)),
            vec![(a, 2), (b, 1)]
        );
        assert_eq!(timers.next(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_beyond_the_longest_lease_is_clamped() {
        let now = Instant::now();
        let mut timers = Timers::default();
        timers.arm(LeaseId(1), 1, now + MAX_DURATION * 40);
        assert_eq!(timers.next(), Some(deadline_after(now, MAX_DURATION)));
    }
}
