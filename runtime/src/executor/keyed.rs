//! The executor's keyed limits (`[limits.NAME]`): how many more runs of
//! each key value it may start now, from the runs it holds live and the
//! runs it started in the last minute, and the queued runs each tenant may
//! hold.
//!
//! `live` and `per_minute` are counted per executor, as
//! `server.max_live_runs` is: with several executors sharing a store, a
//! key's runs are at most that many on each. `queued` is counted in the
//! store, over every executor sharing it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use leasehold_actors::keyed_limits::{ClaimRoom, KeyRoom, KeyValue, KeyedLimit, RunLabels};
use tokio::time::Instant;

/// The window of a `per_minute` limit.
const MINUTE: Duration = Duration::from_secs(60);

/// The starts of the last minute, by limit and key value.
#[derive(Default)]
pub(super) struct Starts {
    recent: Mutex<HashMap<(usize, KeyValue), VecDeque<Instant>>>,
}

impl Starts {
    /// Records that runs labelled `started` started now, under each limit
    /// with a `per_minute`.
    pub(super) fn record<'a>(
        &self,
        limits: &[KeyedLimit],
        endpoint: &str,
        started: impl IntoIterator<Item = &'a RunLabels>,
    ) {
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        for labels in started {
            for (index, limit) in limits.iter().enumerate() {
                if limit.per_minute.is_some() {
                    let value = limit
                        .key
                        .value(labels.tenant.as_deref(), &labels.flow, endpoint);
                    recent.entry((index, value)).or_default().push_back(now);
                }
            }
        }
    }

    /// The starts of the last minute under the limit at `index`, by key
    /// value; older ones are forgotten.
    fn of(&self, index: usize) -> HashMap<KeyValue, usize> {
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.retain(|_, starts| {
            while starts
                .front()
                .is_some_and(|at| now.saturating_duration_since(*at) >= MINUTE)
            {
                starts.pop_front();
            }
            !starts.is_empty()
        });
        recent
            .iter()
            .filter(|((at, _), _)| *at == index)
            .map(|((_, value), starts)| (value.clone(), starts.len()))
            .collect()
    }
}

/// The room under `limits` of an executor calling `endpoint`, holding the
/// live runs labelled `live`, having started `starts`.
pub(super) fn room(
    limits: &[KeyedLimit],
    endpoint: &str,
    live: &[RunLabels],
    starts: &Starts,
) -> ClaimRoom {
    let mut room = ClaimRoom::unlimited(endpoint);
    for (index, limit) in limits.iter().enumerate() {
        if limit.live.is_none() && limit.per_minute.is_none() {
            continue;
        }
        let cap = |bound: Option<u32>| {
            bound.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        let (live_cap, rate_cap) = (cap(limit.live), cap(limit.per_minute));
        let mut key_room = KeyRoom::new(&limit.name, limit.key.clone(), live_cap.min(rate_cap));
        let mut held: HashMap<KeyValue, usize> = HashMap::new();
        for labels in live {
            let value = limit
                .key
                .value(labels.tenant.as_deref(), &labels.flow, endpoint);
            *held.entry(value).or_insert(0) += 1;
        }
        let started = if limit.per_minute.is_some() {
            starts.of(index)
        } else {
            HashMap::new()
        };
        for value in held.keys().chain(started.keys()) {
            let by_live = live_cap.saturating_sub(held.get(value).copied().unwrap_or(0));
            let by_rate = rate_cap.saturating_sub(started.get(value).copied().unwrap_or(0));
            key_room.left.insert(value.clone(), by_live.min(by_rate));
        }
        room.rooms.push(key_room);
    }
    room
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(tenant: &str, flow: &str) -> RunLabels {
        RunLabels {
            tenant: Some(tenant.to_owned()),
            flow: flow.to_owned(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_room_of_a_key_is_its_limit_less_its_live_runs_and_its_starts_of_the_last_minute() {
        let limits = [
            KeyedLimit {
                name: "per_tenant".to_owned(),
                key: "tenant".parse().unwrap(),
                live: Some(3),
                per_minute: None,
                queued: None,
            },
            KeyedLimit {
                name: "per_flow".to_owned(),
                key: "flow".parse().unwrap(),
                live: None,
                per_minute: Some(2),
                queued: None,
            },
        ];
        let starts = Starts::default();
        let live = [labels("acme", "a"), labels("acme", "b")];
        starts.record(&limits, "e", &live);
        let mut room = room(&limits, "e", &live, &starts);
        // acme holds two of three; flow `a` started one of two this minute.
        assert!(room.take(Some("acme"), "a"));
        assert!(!room.take(Some("acme"), "c"), "acme is at its limit");
        assert!(
            !room.take(Some("other"), "a"),
            "`a` started two this minute"
        );
        assert!(room.take(Some("other"), "c"));
        // A minute later the starts are forgotten; the live runs are not.
        tokio::time::advance(MINUTE).await;
        let mut room = super::room(&limits, "e", &live, &starts);
        assert!(room.take(Some("other"), "a"));
        assert!(room.take(Some("other"), "a"));
        assert!(!room.take(Some("other"), "a"));
        assert!(room.take(Some("acme"), "z"));
        assert!(!room.take(Some("acme"), "y"));
    }
}
