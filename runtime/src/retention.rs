//! Retention in a serving executor: a background task deletes the
//! finished runs whose retention has passed
//! ([`Retention::purge_finished`](crate::Retention::purge_finished)),
//! so that an executor that serves for days holds a bounded history on
//! disk, not every run it ever ran.
//!
//! It wakes every [`period_of`] the retention (a quarter of it, between
//! [`MIN_PERIOD`] and [`MAX_PERIOD`]) and deletes in batches of at most
//! [`PURGE_BATCH`] runs, yielding to the runtime between two batches, so
//! that the live runs' writes never wait behind a long deletion: a batch
//! holds each run's lock (sled) or row (PostgreSQL) only while that run is
//! deleted. A purge that fails is logged; the next period tries again.
//!
//! Which runs go is the store port's rule
//! ([`retention`](leasehold_actors::retention)): finished (`completed`,
//! `failed`, `cancelled`) at least the retention ago, the server's
//! (`executor.retention`) or, shorter, the run's flow's. Runs that wait
//! for a person, queued, running or orphaned runs are never deleted.
//!
//! `leasehold serve` runs it; the one-shot commands (`leasehold run`,
//! `leasehold runs …`) do not: they hold the store for moments, and a
//! deletion there would surprise whoever reads a run they just listed.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::{Clock, PurgeRule, Store, StoreError};
use tokio_util::sync::CancellationToken;

/// The rule: which finished runs are due, as every store applies it.
pub use leasehold_actors::retention::{expired, flow_retention_ms, retention_of};

/// The most runs one batch deletes.
pub const PURGE_BATCH: usize = 256;

/// The shortest period between two purges.
pub const MIN_PERIOD: Duration = Duration::from_millis(250);

/// The longest period between two purges (also the period when finished
/// runs are kept for ever, for the flows that shorten it).
pub const MAX_PERIOD: Duration = Duration::from_secs(60);

/// How often an executor with `retention` purges: a quarter of it, so a
/// run is deleted at most a quarter late, between [`MIN_PERIOD`] and
/// [`MAX_PERIOD`].
pub fn period_of(retention: Option<Duration>) -> Duration {
    retention.map_or(MAX_PERIOD, |kept| (kept / 4).clamp(MIN_PERIOD, MAX_PERIOD))
}

/// Deletes every finished run past its retention at the clock's now, in
/// batches of at most `batch`, yielding between batches; answers how many
/// it deleted.
pub async fn purge_due(
    store: &dyn Store,
    clock: &dyn Clock,
    retention: Option<Duration>,
    batch: usize,
) -> Result<usize, StoreError> {
    let retention_ms = retention.map(|kept| u64::try_from(kept.as_millis()).unwrap_or(u64::MAX));
    let mut purged = 0;
    loop {
        let rule = PurgeRule {
            now_ms: clock.now_unix_ms(),
            retention_ms,
            limit: batch,
        };
        let report = store.purge_finished(rule).await?;
        purged += report.purged.len();
        if !report.more {
            return Ok(purged);
        }
        // Live runs first: the next batch waits its turn.
        tokio::task::yield_now().await;
    }
}

/// Purges `store` every [`period_of`] `retention` until `stop`; tells
/// `purged` how many runs each purge deleted (the server's metrics count
/// them).
pub fn spawn(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    retention: Option<Duration>,
    stop: CancellationToken,
    purged: impl Fn(usize) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let period = period_of(retention);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let deleted = tokio::select! {
                () = stop.cancelled() => return,
                deleted = purge_due(store.as_ref(), clock.as_ref(), retention, PURGE_BATCH) => deleted,
            };
            match deleted {
                Ok(0) => {}
                Ok(runs) => {
                    purged(runs);
                    tracing::info!(runs, "finished runs past their retention deleted");
                }
                Err(error) => tracing::error!(%error, "deleting finished runs failed"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use leasehold_actors::{MemoryStore, RunRecord, RunStatus, RunStore};

    use super::*;

    struct Fixed(AtomicU64);

    impl Clock for Fixed {
        fn now_unix_ms(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn the_period_is_a_quarter_of_the_retention_within_bounds() {
        assert_eq!(period_of(Some(Duration::from_secs(1))), MIN_PERIOD);
        assert_eq!(
            period_of(Some(Duration::from_secs(8))),
            Duration::from_secs(2)
        );
        assert_eq!(period_of(Some(Duration::from_secs(7 * 86_400))), MAX_PERIOD);
        assert_eq!(period_of(None), MAX_PERIOD);
    }

    #[tokio::test]
    async fn every_due_run_goes_in_batches_and_no_other() {
        let store = MemoryStore::new();
        for n in 0..10_u64 {
            let status = if n == 9 {
                RunStatus::WaitingHuman
            } else {
                RunStatus::Completed
            };
            store
                .create_run(RunRecord {
                    trace_parent: None,
                    tenant: None,
                    run_id: format!("run-{n}"),
                    flow: serde_json::json!({"name": "n"}),
                    status,
                    owner_id: None,
                    fence: 0,
                    lease_expires_at_ms: 0,
                    reason: None,
                    answer: None,
                    pause: None,
                    created_at_ms: 0,
                    updated_at_ms: 1_000,
                    fork: None,
                })
                .await
                .unwrap();
        }
        let clock = Fixed(AtomicU64::new(1_999));
        let kept = Some(Duration::from_secs(1));
        assert_eq!(purge_due(&store, &clock, kept, 4).await.unwrap(), 0);
        clock.0.store(2_000, Ordering::Relaxed);
        assert_eq!(purge_due(&store, &clock, kept, 4).await.unwrap(), 9);
        assert_eq!(store.list_ids(), ["run-9"]);
    }
}
