//! The executor's keyed limits (`[limits.NAME]`): how many more runs of
//! each key value it may start now, from the runs it holds live and the
//! runs it started in the last minute, and the queued runs each tenant may
//! hold.
//!
//! `live` and `per_minute` are counted per executor, as
//! `server.max_live_runs` is: with several executors sharing a store, a
//! key's runs are at most that many on each. `queued` is counted in the
//! store, over every executor sharing it.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use leasehold_actors::keyed_limits::{ClaimRoom, KeyRoom, KeyedLimit, RunLabels};
use tokio::time::Instant;

/// The window of a `per_minute` limit.
const MINUTE: Duration = Duration::from_secs(60);

/// The starts of the last minute: when each run started, with what keys
/// read of it.
#[derive(Default)]
pub(super) struct Starts {
    recent: Mutex<VecDeque<(Instant, RunLabels)>>,
}

impl Starts {
    /// Records that runs labelled `started` started now.
    pub(super) fn record<'a>(&self, started: impl IntoIterator<Item = &'a RunLabels>) {
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.extend(started.into_iter().map(|labels| (now, labels.clone())));
    }

    /// The runs started in the last minute; older ones are forgotten.
    fn last_minute(&self) -> Vec<RunLabels> {
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        while recent
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= MINUTE)
        {
            recent.pop_front();
        }
        recent.iter().map(|(_, labels)| labels.clone()).collect()
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
    let rated = limits.iter().any(|limit| limit.per_minute.is_some());
    let started = if rated {
        starts.last_minute()
    } else {
        Vec::new()
    };
    for limit in limits {
        if limit.live.is_none() && limit.per_minute.is_none() {
            continue;
        }
        let mut key_room =
            KeyRoom::new(&limit.name, limit.key.clone(), limit.live, limit.per_minute);
        for labels in live {
            key_room.count(labels, endpoint, true, false);
        }
        for labels in &started {
            key_room.count(labels, endpoint, false, true);
        }
        room.rooms.push(key_room);
    }
    room
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(tenant: &str, flow: &str) -> RunLabels {
        RunLabels::from_parts(Some(tenant.to_owned()), flow, None)
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
        starts.record(&live);
        let mut room = room(&limits, "e", &live, &starts);
        // acme holds two of three; flow `a` started one of two this minute.
        assert!(room.take(&labels("acme", "a")));
        assert!(!room.take(&labels("acme", "c")), "acme is at its limit");
        assert!(
            !room.take(&labels("other", "a")),
            "`a` started two this minute"
        );
        assert!(room.take(&labels("other", "c")));
        // A minute later the starts are forgotten; the live runs are not.
        tokio::time::advance(MINUTE).await;
        let mut room = super::room(&limits, "e", &live, &starts);
        assert!(room.take(&labels("other", "a")));
        assert!(room.take(&labels("other", "a")));
        assert!(!room.take(&labels("other", "a")));
        assert!(room.take(&labels("acme", "z")));
        assert!(!room.take(&labels("acme", "y")));
    }
}
