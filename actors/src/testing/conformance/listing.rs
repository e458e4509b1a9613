//! The rules of listing runs
//! ([`RunStore::list_runs_page`](crate::RunStore::list_runs_page) and its
//! summaries and counts): pages as [`listing`](crate::listing) cuts them, and
//! as a reader sees them.

use std::sync::Arc;

use crate::ports::{
    PauseRecord, RunQuery, RunRecord, RunStatus, RunSummary, RunUpdate, SUMMARY_CHARS, Store,
    SummaryPage, ToolCallState, fencing, listing, seen,
};
use crate::testing::records::*;

/// Pages list the runs `listing::matches` selects, newest first in the byte
/// order of their ids (not a locale's collation), followed to the end by
/// their cursors, and pages of summaries are cut the same; a page of one
/// tenant holds its runs only (a run kept without a tenant is the default
/// tenant's).
pub(super) async fn pages_list_what_the_listing_rule_selects_newest_first_by_byte_order(
    store: Arc<dyn Store>,
) {
    // Ids whose byte order is not a dictionary's: upper before lower case,
    // `-` before `_` before letters, so a store that sorts by its locale's
    // collation lists them in another order.
    let mut all = Vec::new();
    for (n, prefix) in ["A-", "a-", "B_", "b-", "a_", "Z", "run-", "run_"]
        .iter()
        .enumerate()
    {
        for m in 0..5_u64 {
            let index = u64::try_from(n).unwrap() * 5 + m;
            let mut record = unowned(&format!("{prefix}{m}"));
            record.flow =
                serde_json::json!({"name": if index % 2 == 0 { "alpha" } else { "beta" }});
            record.created_at_ms = 1_000 + index;
            // Runs of three tenants: the default one's (no tenant kept),
            // `acme`'s and `zeta`'s.
            record.tenant = match index % 3 {
                0 => None,
                1 => Some("acme".to_owned()),
                _ => Some("zeta".to_owned()),
            };
            store.create_run(record).await.unwrap();
        }
    }
    // Every third run is claimed and completes.
    for (index, record) in store.list_runs().await.unwrap().iter().enumerate() {
        if index % 3 == 0 {
            let claimed = claimed(
                store
                    .claim_run(&record.run_id, "a", 1_000, TTL)
                    .await
                    .unwrap(),
            );
            let update = RunUpdate {
                status: RunStatus::Completed,
                reason: None,
                answer: Some("done".to_owned()),
                pause: None,
                at_ms: 2_000,
            };
            assert!(
                store
                    .update_run(&record.run_id, claimed.fence, update)
                    .await
                    .unwrap()
                    .is_applied()
            );
        }
    }
    all.extend(store.list_runs().await.unwrap());
    let queries = [
        RunQuery::first(7),
        RunQuery {
            status: Some(RunStatus::Completed),
            ..RunQuery::first(4)
        },
        RunQuery {
            status: Some(RunStatus::Running),
            flow: Some("beta".to_owned()),
            ..RunQuery::first(2)
        },
        RunQuery {
            flow: Some("alpha".to_owned()),
            created_from_ms: Some(1_010),
            created_before_ms: Some(1_030),
            ..RunQuery::first(3)
        },
        RunQuery {
            tenant: Some("acme".to_owned()),
            ..RunQuery::first(3)
        },
        RunQuery {
            tenant: Some(crate::tenancy::DEFAULT_TENANT.to_owned()),
            status: Some(RunStatus::Completed),
            ..RunQuery::first(2)
        },
        RunQuery {
            tenant: Some("zeta".to_owned()),
            flow: Some("beta".to_owned()),
            ..RunQuery::first(5)
        },
    ];
    for query in queries {
        let mut want: Vec<String> = all
            .iter()
            .filter(|r: &&RunRecord| listing::matches(&query, r))
            .map(|r| r.run_id.clone())
            .collect();
        // Byte order, newest (greatest) first.
        want.sort();
        want.reverse();
        assert!(!want.is_empty(), "{query:?}");
        if let Some(tenant) = &query.tenant {
            let of_others = all.iter().filter(|r| {
                crate::tenancy::tenant_or_default(r.tenant.as_deref()) != tenant
                    && want.contains(&r.run_id)
            });
            assert_eq!(of_others.count(), 0, "{query:?}");
        }
        assert_eq!(
            every_page(store.as_ref(), query.clone()).await,
            want,
            "{query:?}"
        );
    }
}

/// Every page of `query`, followed to the end: the ids in the order listed.
/// Pages of summaries cut the same pages with the same cursors.
async fn every_page(store: &dyn Store, mut query: RunQuery) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        let page = store.list_runs_page(&query).await.expect("a page");
        let summaries = store.list_run_summaries(&query).await.expect("a page");
        assert!(page.runs.len() <= query.limit.max(1), "{query:?}");
        assert_eq!(
            summaries,
            SummaryPage {
                runs: page.runs.iter().cloned().map(RunSummary::of).collect(),
                next: page.next.clone(),
            },
            "{query:?}"
        );
        ids.extend(page.runs.into_iter().map(|r| r.run_id));
        match page.next {
            Some(next) => query.after = Some(next),
            None => return ids,
        }
    }
}

/// A listing as a reader sees it ([`seen::summaries`]) lists a running run
/// whose lease has ended — or, for a reader that knows its holder is gone,
/// any running run — as orphaned, as `fencing::orphan` shows it whole, and
/// writes nothing; a page of orphaned runs merges those stored so with those
/// seen so, in listing order, through their cursors.
pub(super) async fn a_listing_as_seen_lists_a_run_nobody_runs_as_orphaned(store: Arc<dyn Store>) {
    // By index: stored orphaned, running on a lease that ended at 1 500,
    // running on a lease until 9 000; read at 5 000.
    for n in 0..12_u64 {
        let id = format!("r{n:02}");
        let record = match n % 3 {
            0 => run_record(&id, None, 1, 0, RunStatus::Orphaned),
            1 => run_record(&id, Some("gone"), 1, 1_500, RunStatus::Running),
            _ => run_record(&id, Some("live"), 1, 9_000, RunStatus::Running),
        };
        store.create_run(record).await.unwrap();
    }
    let now = 5_000;
    let ids = |keep: fn(u64) -> bool| -> Vec<String> {
        (0..12_u64)
            .rev()
            .filter(|n| keep(*n))
            .map(|n| format!("r{n:02}"))
            .collect()
    };
    for limit in [1, 2, 5, 12] {
        let orphaned = RunQuery {
            status: Some(RunStatus::Orphaned),
            ..RunQuery::first(limit)
        };
        let running = RunQuery {
            status: Some(RunStatus::Running),
            ..RunQuery::first(limit)
        };
        let pages =
            |query: &RunQuery, gone| every_seen_page(store.as_ref(), query.clone(), now, gone);
        assert_eq!(
            pages(&orphaned, false).await,
            ids(|n| n % 3 != 2),
            "{limit}"
        );
        assert_eq!(pages(&running, false).await, ids(|n| n % 3 == 2), "{limit}");
        // Its holder known gone, every running run is orphaned.
        assert_eq!(pages(&orphaned, true).await, ids(|_| true), "{limit}");
        assert!(pages(&running, true).await.is_empty(), "{limit}");
    }
    let all = seen::summaries(store.as_ref(), &RunQuery::first(12), now, false)
        .await
        .unwrap();
    assert_eq!(all.runs.len(), 12);
    for run in &all.runs {
        let n: u64 = run.run_id[1..].parse().unwrap();
        let (status, reason) = match n % 3 {
            0 => (RunStatus::Orphaned, None),
            1 => (RunStatus::Orphaned, Some(fencing::ORPHANED)),
            _ => (RunStatus::Running, None),
        };
        assert_eq!(
            (run.status, run.reason.as_deref()),
            (status, reason),
            "{run:?}"
        );
    }
    assert_eq!(
        store.count_runs(RunStatus::Running).await.unwrap(),
        8,
        "a listing writes nothing"
    );
}

/// Every page of `query` as [`seen::summaries`] lists them at `now_ms`,
/// followed to the end: the ids in the order listed. A cursor is given
/// only when another run follows.
async fn every_seen_page(
    store: &dyn Store,
    mut query: RunQuery,
    now_ms: u64,
    holder_gone: bool,
) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        let page = seen::summaries(store, &query, now_ms, holder_gone)
            .await
            .expect("a page");
        assert!(page.runs.len() <= query.limit.max(1), "{query:?}");
        assert!(
            !page.runs.is_empty() || query.after.is_none(),
            "a cursor led to an empty page: {query:?}"
        );
        ids.extend(page.runs.into_iter().map(|r| r.run_id));
        match page.next {
            Some(next) => query.after = Some(next),
            None => return ids,
        }
    }
}

/// A page of summaries holds `RunSummary::of` each run: each text cut to its
/// first `SUMMARY_CHARS` characters, not bytes.
pub(super) async fn summaries_cut_each_text_to_its_first_characters_as_the_rule_does(
    store: Arc<dyn Store>,
) {
    // Multi-byte characters, so that a cut counted in bytes shows.
    let long = |c: &str| c.repeat(SUMMARY_CHARS + 50);
    let mut paused = unowned("r-paused");
    paused.status = RunStatus::ReconciliationRequired;
    paused.flow =
        serde_json::json!({"name": long("ñ"), "task": long("é"), "system_prompt": long("p")});
    paused.pause = Some(PauseRecord {
        reason: long("ü"),
        subject: "search".to_owned(),
        path: long("/"),
        call: Some(tool_call("k", 1, ToolCallState::Unknown)),
    });
    let mut ended = unowned("r-ended");
    ended.status = RunStatus::Completed;
    ended.flow = serde_json::json!({"name": 7, "task": "short"});
    ended.answer = Some(long("日"));
    ended.reason = Some("x".repeat(SUMMARY_CHARS));
    let mut bare = unowned("r-bare");
    bare.flow = serde_json::json!({});
    for record in [paused, ended, bare] {
        store.create_run(record).await.unwrap();
    }
    let page = store
        .list_run_summaries(&RunQuery::first(10))
        .await
        .unwrap();
    assert_eq!(page.next, None);
    let mut want = Vec::new();
    for id in ["r-paused", "r-ended", "r-bare"] {
        want.push(RunSummary::of(store.load_run(id).await.unwrap().unwrap()));
    }
    assert_eq!(page.runs, want);
    let paused = &page.runs[0];
    assert_eq!(paused.task, "é".repeat(SUMMARY_CHARS));
    assert_eq!(
        paused.truncated,
        ["flow_name", "task", "pause.reason", "pause.path"]
    );
    assert_eq!(paused.pause.as_ref().unwrap().call, None);
    assert_eq!(page.runs[1].truncated, ["answer"]);
    assert_eq!(page.runs[1].flow_name, "");
    assert!(page.runs[2].truncated.is_empty());
}

/// Runs are counted by status as they are recorded, every status of
/// `RunStatus::ALL` once and in that order, and the count of one status
/// agrees.
pub(super) async fn runs_are_counted_by_status_as_they_are_recorded(store: Arc<dyn Store>) {
    let statuses = [
        RunStatus::Running,
        RunStatus::Running,
        RunStatus::Queued,
        RunStatus::Completed,
        RunStatus::Completed,
        RunStatus::Completed,
        RunStatus::WaitingHuman,
    ];
    for (i, status) in statuses.into_iter().enumerate() {
        let run_id = format!("run-{i}");
        store
            .create_run(run_record(&run_id, Some("exec"), 1, 5_000, status))
            .await
            .unwrap();
    }
    // A run's count moves with its status.
    assert!(
        store
            .update_run("run-0", 1, update(RunStatus::Failed, 2_000))
            .await
            .unwrap()
            .is_applied()
    );
    let counts = store.count_runs_by_status().await.unwrap();
    for (status, count) in &counts {
        assert_eq!(
            store.count_runs(*status).await.unwrap(),
            *count,
            "{status:?}"
        );
    }
    let expected: Vec<(RunStatus, u64)> = RunStatus::ALL
        .into_iter()
        .map(|status| {
            let n = match status {
                RunStatus::Running
                | RunStatus::Queued
                | RunStatus::WaitingHuman
                | RunStatus::Failed => 1,
                RunStatus::Completed => 3,
                _ => 0,
            };
            (status, n)
        })
        .collect();
    assert_eq!(counts, expected);
}
