//! Retention: which finished runs a store deletes
//! ([`Retention::purge_finished`]), as pure functions every store applies.
//!
//! A run is kept while it lives and for a retention period after it
//! ended: `completed`, `failed` and `cancelled` are the only statuses a
//! run never leaves, so they are the only ones purged. A queued, running,
//! orphaned or paused run (`waiting_human`, `reconciliation_required`) is
//! never touched, however old: a person may still resume it, and the
//! purge must not decide for them.
//!
//! The period is the server's ([`PurgeRule::retention_ms`], `None` for
//! ever), shortened by the run's flow when its flow says `retention`
//! ([`flow_retention_ms`]); a flow never lengthens it (the engine refuses
//! such a flow when it plans the run, and the rule takes the shorter of
//! the two anyway, so a flow planned under a longer server retention is
//! held to today's). The clock starts when the run ended: its record's
//! `updated_at_ms`, which a finished run never changes again.

use super::{RunRecord, StoreFuture};

/// Which finished runs to purge, and how many at most in one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PurgeRule {
    /// Now (Unix ms).
    pub now_ms: u64,
    /// How long a finished run is kept (ms); `None` keeps it for ever,
    /// unless its flow says less.
    pub retention_ms: Option<u64>,
    /// At most this many runs in one call: a batch short enough that the
    /// store's live writers never wait long behind it.
    pub limit: usize,
}

/// What a purge deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// The runs deleted, each with everything kept of it.
    pub purged: Vec<String>,
    /// Whether the batch was full: more runs may be due.
    pub more: bool,
}

impl PurgeReport {
    /// The report of `purged` runs for a batch of at most `limit`.
    pub fn of(purged: Vec<String>, limit: usize) -> Self {
        let more = purged.len() >= limit.max(1);
        Self { purged, more }
    }
}

/// Deleting finished runs once their retention has passed.
pub trait Retention: Send + Sync + 'static {
    /// Deletes up to `rule.limit` finished runs past their retention
    /// ([`expired`]), each with everything kept of it: its record,
    /// snapshots (every loop's, workers' too), tool-call records, events,
    /// waiting commands and undelivered notices; answers which, and
    /// whether the batch was full. A run that is not finished is never
    /// touched. A deleted run is as if it never was:
    /// [`RunStore::load_run`](super::RunStore::load_run) answers `None`.
    fn purge_finished(&self, rule: PurgeRule) -> StoreFuture<PurgeReport>;
}

/// The retention a flow asks for, in ms: its `retention` key, a duration
/// as flows write them (`"1h"`, `"2days"`), if set and readable.
pub fn flow_retention_ms(flow: &serde_json::Value) -> Option<u64> {
    let text = flow.get("retention")?.as_str()?;
    let duration = humantime::parse_duration(text).ok()?;
    Some(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

/// How long `record` is kept once it ended under `rule` (ms): the
/// shorter of the server's retention and its flow's; `None` for ever.
pub fn retention_of(record: &RunRecord, rule: &PurgeRule) -> Option<u64> {
    match (rule.retention_ms, flow_retention_ms(&record.flow)) {
        (Some(server), Some(flow)) => Some(server.min(flow)),
        (server, flow) => server.or(flow),
    }
}

/// Whether `record` is due for deletion under `rule`: it ended (a terminal
/// status) at least its retention ago.
pub fn expired(record: &RunRecord, rule: &PurgeRule) -> bool {
    record.status.is_terminal()
        && retention_of(record, rule)
            .is_some_and(|kept| record.updated_at_ms.saturating_add(kept) <= rule.now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunStatus;

    fn record(status: RunStatus, ended_at_ms: u64, flow: serde_json::Value) -> RunRecord {
        RunRecord {
            trace_parent: None,
            tenant: None,
            run_id: "r".to_owned(),
            flow,
            status,
            owner_id: None,
            fence: 1,
            lease_expires_at_ms: 0,
            reason: None,
            answer: None,
            pause: None,
            created_at_ms: 0,
            updated_at_ms: ended_at_ms,
            fork: None,
        }
    }

    fn rule(now_ms: u64, retention_ms: Option<u64>) -> PurgeRule {
        PurgeRule {
            now_ms,
            retention_ms,
            limit: 10,
        }
    }

    #[test]
    fn only_a_finished_run_past_its_retention_is_due() {
        let plain = serde_json::json!({"name": "n"});
        for status in RunStatus::ALL {
            let old = record(status, 1_000, plain.clone());
            assert_eq!(
                expired(&old, &rule(1_000_000, Some(1_000))),
                status.is_terminal(),
                "{status:?}"
            );
        }
        let done = record(RunStatus::Completed, 1_000, plain);
        assert!(!expired(&done, &rule(1_999, Some(1_000))));
        assert!(expired(&done, &rule(2_000, Some(1_000))));
        assert!(!expired(&done, &rule(u64::MAX, None)), "kept for ever");
    }

    #[test]
    fn a_flow_shortens_the_retention_and_never_lengthens_it() {
        let short = serde_json::json!({"name": "n", "retention": "1s"});
        let long = serde_json::json!({"name": "n", "retention": "1h"});
        let short = record(RunStatus::Failed, 0, short);
        let long = record(RunStatus::Failed, 0, long);
        assert!(expired(&short, &rule(1_000, Some(60_000))));
        assert!(expired(&short, &rule(1_000, None)), "even kept for ever");
        assert!(!expired(&long, &rule(59_999, Some(60_000))));
        assert!(expired(&long, &rule(60_000, Some(60_000))), "the server's");
        assert_eq!(
            flow_retention_ms(&serde_json::json!({"retention": 5})),
            None
        );
    }
}
