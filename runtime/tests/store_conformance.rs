//! One conformance suite for every store: the rules of the `Store` port —
//! fencing, claims, orphans, tool-call records, terminal writes, the event
//! log, what survives a reopen, and outcome-for-outcome agreement with
//! `MemoryStore` — written once against `Arc<dyn Store>` and run against the
//! in-memory store, sled and PostgreSQL alike (a throwaway cluster, see
//! `support/postgres.rs`).
//!
//! Times are Unix milliseconds given to the store: a lease "expires" by
//! passing a later `now_ms`, never by sleeping.

use std::sync::Arc;
use std::time::Duration;

use leasehold::store::{Durability, PostgresConfig, PostgresStore, SledConfig, SledStore};
use leasehold::{
    ChangeFeed, ClaimOutcome, MemoryStore, PauseRecord, QueueClaim, ReconcileDecision, RunCommand,
    RunQuery, RunRecord, RunStatus, RunSummary, RunUpdate, SUMMARY_CHARS, Snapshot, Store,
    StoreChange, SummaryPage, ToolCallState, fencing, listing,
};

#[path = "support/postgres.rs"]
mod postgres;
#[path = "support/records.rs"]
mod records;

use records::*;

/// A store under test, and what it takes to open it again.
struct Fixture {
    store: Arc<dyn Store>,
    reopen: Reopen,
}

enum Reopen {
    /// The same data, through another handle.
    Memory(MemoryStore),
    /// The directory, opened again once the store is dropped.
    Sled(tempfile::TempDir),
    /// The database, through a new pool (the cluster lives while held).
    Postgres {
        /// Held: the cluster runs while a fixture on it lives.
        _cluster: Arc<postgres::Cluster>,
        url: String,
    },
}

impl Fixture {
    fn memory() -> Self {
        let store = MemoryStore::new();
        Self {
            store: Arc::new(store.clone()),
            reopen: Reopen::Memory(store),
        }
    }

    fn sled() -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self {
            store: Arc::new(open_sled(dir.path())),
            reopen: Reopen::Sled(dir),
        }
    }

    async fn postgres() -> Self {
        let (cluster, url) = postgres::database().await;
        Self {
            store: Arc::new(open_postgres(&url).await),
            reopen: Reopen::Postgres {
                _cluster: cluster,
                url,
            },
        }
    }

    /// Another handle on the same data, as another executor would have
    /// one: a new pool on PostgreSQL; on sled, which one process opens at
    /// a time, the same store.
    async fn another_handle(&self) -> Arc<dyn Store> {
        match &self.reopen {
            Reopen::Memory(store) => Arc::new(store.clone()),
            Reopen::Sled(_) => Arc::clone(&self.store),
            Reopen::Postgres { url, .. } => Arc::new(open_postgres(url).await),
        }
    }

    /// The same store, closed and opened again.
    async fn reopened(self) -> Self {
        drop(self.store);
        let store: Arc<dyn Store> = match &self.reopen {
            Reopen::Memory(store) => Arc::new(store.clone()),
            Reopen::Sled(dir) => Arc::new(open_sled(dir.path())),
            Reopen::Postgres { url, .. } => Arc::new(open_postgres(url).await),
        };
        Self {
            store,
            reopen: self.reopen,
        }
    }
}

fn open_sled(path: &std::path::Path) -> SledStore {
    SledStore::open(SledConfig::new(path).with_durability(Durability::Sync)).unwrap()
}

async fn open_postgres(url: &str) -> PostgresStore {
    PostgresStore::connect(PostgresConfig::new(url))
        .await
        .unwrap()
}

/// Stamps one test per rule and store: `memory::RULE`, `sled::RULE`,
/// `postgres::RULE`. Rules in `store` take the store; rules in `fixture`
/// take the fixture (to reopen it).
macro_rules! conformance {
    (store: [$($rule:ident),* $(,)?], fixture: [$($fixture_rule:ident),* $(,)?] $(,)?) => {
        conformance!(@stamp memory, Fixture::memory(), [$($rule),*], [$($fixture_rule),*]);
        conformance!(@stamp sled, Fixture::sled(), [$($rule),*], [$($fixture_rule),*]);
        conformance!(@stamp on_postgres, Fixture::postgres().await, [$($rule),*], [$($fixture_rule),*]);
    };
    (@stamp $store:ident, $open:expr, [$($rule:ident),*], [$($fixture_rule:ident),*]) => {
        mod $store {
            #[allow(unused_imports, reason = "the memory and sled fixtures are not async")]
            use super::Fixture;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $rule() {
                    super::$rule($open.store).await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $fixture_rule() {
                    super::$fixture_rule($open).await;
                }
            )*
        }
    };
}

conformance! {
    store: [
        stale_fence_writes_are_refused_and_land_nothing,
        a_write_racing_a_claim_lands_before_it_or_not_at_all,
        claim_is_refused_while_another_lease_is_live,
        claim_of_a_finished_run_is_refused,
        reconcile_marks_expired_running_runs_orphaned_with_the_message,
        a_run_stopped_in_place_is_orphaned_as_stopped_and_claimed_clean,
        orphaned_run_can_be_claimed_and_runs_again,
        concurrent_claims_yield_exactly_one_owner,
        events_resume_after_an_event_id,
        tool_calls_keep_one_record_per_idempotency_key,
        the_store_answers_a_scripted_sequence_as_the_memory_store_does,
        pages_list_what_the_listing_rule_selects_newest_first_by_byte_order,
        queued_runs_are_claimed_oldest_first_at_most_max,
        a_command_is_taken_once_and_by_the_runs_owner_only,
        changes_are_published_for_writes_that_landed_and_only_those,
        runs_are_counted_by_status_as_they_are_recorded,
        summaries_cut_each_text_to_its_first_characters_as_the_rule_does,
    ],
    fixture: [
        a_terminal_write_and_everything_before_it_survive_a_reopen,
        claimers_racing_claim_each_queued_run_exactly_once,
        learned_paces_are_kept_replaced_reset_and_survive_a_reopen,
    ],
}

async fn learned_paces_are_kept_replaced_reset_and_survive_a_reopen(fixture: Fixture) {
    use leasehold::{Pace, PaceBook};
    let book = PaceBook::new();
    let call = |first: f64, interval: f64| leasehold::CallPace {
        first_item_ms: Some(first),
        intervals: Some((
            10,
            leasehold::Spread {
                mean_ms: interval,
                std_ms: interval / 10.0,
            },
        )),
    };
    book.learn(
        "model_stream:model a at http://127.0.0.1:1/v1",
        &call(300.0, 50.0),
    );
    book.learn("tool_call:search", &call(2_000.0, 1_000.0));
    book.learn("worker_step:worker:w", &call(10_000.0, 10_000.0));
    let store = Arc::clone(&fixture.store);
    store.save_paces(book.take_changed()).await.unwrap();
    // Learned again: replaced, not added. Reset: gone.
    book.learn("tool_call:search", &call(1_000.0, 500.0));
    book.reset("worker_step:worker:w");
    store.save_paces(book.take_changed()).await.unwrap();
    store.flush().await.unwrap();
    drop(store);
    let fixture = fixture.reopened().await;
    let kept: Vec<(String, Pace)> = fixture.store.load_paces().await.unwrap();
    let expected: Vec<(String, Pace)> = book.all().into_iter().collect();
    assert_eq!(kept, expected);
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(kept[1].1.calls, 2, "{kept:?}");
}

async fn runs_are_counted_by_status_as_they_are_recorded(store: Arc<dyn Store>) {
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

async fn stale_fence_writes_are_refused_and_land_nothing(a: Arc<dyn Store>) {
    let b = Arc::clone(&a); // a second executor on the same database
    a.create_run(unowned("r")).await.unwrap();

    let a_run = claimed(a.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    assert_eq!(a_run.fence, 1);
    assert!(
        a.save_snapshot(snapshot("r", "run", 1, "a before"), 1)
            .await
            .unwrap()
            .is_applied()
    );

    // A's lease ran out at 1 500; B claims at 2 000.
    let b_run = claimed(b.claim_run("r", "exec-b", 2_000, TTL).await.unwrap());
    assert_eq!(b_run.fence, 2);

    let refused = stale(2, "exec-b");
    assert_eq!(
        a.save_snapshot(snapshot("r", "run", 2, "a after"), 1)
            .await
            .unwrap(),
        refused
    );
    assert_eq!(
        a.save_snapshot(snapshot("r", "run/worker:w:1", 2, "a after"), 1)
            .await
            .unwrap(),
        refused
    );
    assert_eq!(
        a.record_tool_call("r", tool_call("r/run/2/0", 2, ToolCallState::Sent), 1)
            .await
            .unwrap(),
        refused
    );
    assert_eq!(
        a.append_events("r", events("r", 1..=2), 1).await.unwrap(),
        refused
    );
    assert_eq!(
        a.update_run("r", 1, update(RunStatus::Completed, 2_100))
            .await
            .unwrap(),
        refused
    );
    assert_eq!(a.renew_run("r", 1, 2_100, TTL).await.unwrap(), refused);

    // Nothing A wrote after losing the run is readable.
    assert_eq!(
        b.load_snapshots("r").await.unwrap(),
        vec![snapshot("r", "run", 1, "a before")]
    );
    assert_eq!(b.load_tool_calls("r").await.unwrap(), vec![]);
    assert_eq!(b.load_events("r", 0).await.unwrap(), vec![]);
    assert_eq!(b.load_run("r").await.unwrap(), Some(b_run.clone()));

    // B's writes land.
    assert!(
        b.save_snapshot(snapshot("r", "run", 2, "b"), 2)
            .await
            .unwrap()
            .is_applied()
    );
    let call = tool_call("r/run/2/0", 2, ToolCallState::Sent);
    assert!(
        b.record_tool_call("r", call.clone(), 2)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        b.append_events("r", events("r", 1..=2), 2)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(b.renew_run("r", 2, 2_200, TTL).await.unwrap().is_applied());
    assert!(
        b.update_run("r", 2, update(RunStatus::Completed, 2_300))
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        b.load_snapshots("r").await.unwrap(),
        vec![snapshot("r", "run", 2, "b")]
    );
    assert_eq!(b.load_tool_calls("r").await.unwrap(), vec![call]);
    assert_eq!(b.load_events("r", 0).await.unwrap(), events("r", 1..=2));
    let done = b.load_run("r").await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.fence, done.owner_id.as_deref()),
        (RunStatus::Completed, 2, Some("exec-b"))
    );
}

async fn a_write_racing_a_claim_lands_before_it_or_not_at_all(store: Arc<dyn Store>) {
    store.create_run(unowned("r")).await.unwrap();
    claimed(store.claim_run("r", "exec-a", 0, 10).await.unwrap());

    let a = store.clone();
    let writer = tokio::spawn(async move {
        // Writes until well after the claim: twenty refusals.
        let mut outcomes = Vec::new();
        for step in 1..=1_000_000 {
            let outcome = a
                .save_snapshot(snapshot("r", "run", step, "a"), 1)
                .await
                .unwrap();
            outcomes.push(outcome.is_applied());
            if outcomes.iter().filter(|applied| !**applied).count() == 20 {
                break;
            }
        }
        outcomes
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    claimed(store.claim_run("r", "exec-b", 100, TTL).await.unwrap());
    let seen_by_b = store.load_snapshots("r").await.unwrap();

    let outcomes = writer.await.unwrap();
    let landed = outcomes.iter().take_while(|applied| **applied).count();
    assert!(
        outcomes[landed..].iter().all(|applied| !applied),
        "once refused, A is refused for good"
    );
    let last_landed = u32::try_from(landed).unwrap();
    let expected: Vec<Snapshot> = (last_landed > 0)
        .then(|| snapshot("r", "run", last_landed, "a"))
        .into_iter()
        .collect();
    assert_eq!(seen_by_b, expected, "B sees A's last write that landed");
    assert_eq!(
        store.load_snapshots("r").await.unwrap(),
        expected,
        "and nothing after it"
    );
}

async fn claim_is_refused_while_another_lease_is_live(store: Arc<dyn Store>) {
    store.create_run(unowned("r")).await.unwrap();
    let a_run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());

    assert_eq!(
        store.claim_run("r", "exec-b", 1_499, TTL).await.unwrap(),
        ClaimOutcome::HeldBy {
            owner_id: "exec-a".to_owned(),
            expires_at_ms: 1_500,
        }
    );
    assert_eq!(
        store.load_run("r").await.unwrap(),
        Some(a_run),
        "a refused claim changes nothing"
    );

    // The owner may claim again (after a restart): the fence still goes up.
    let again = claimed(store.claim_run("r", "exec-a", 1_200, TTL).await.unwrap());
    assert_eq!((again.fence, again.lease_expires_at_ms), (2, 1_700));

    // At the expiry instant the lease is no longer live.
    let b_run = claimed(store.claim_run("r", "exec-b", 1_700, TTL).await.unwrap());
    assert_eq!(
        (b_run.owner_id.as_deref(), b_run.fence),
        (Some("exec-b"), 3)
    );
    assert_eq!(
        store
            .claim_run("missing", "exec-b", 1_700, TTL)
            .await
            .unwrap(),
        ClaimOutcome::NotFound
    );
}

async fn claim_of_a_finished_run_is_refused(store: Arc<dyn Store>) {
    for (run_id, status) in [
        ("done", RunStatus::Completed),
        ("failed", RunStatus::Failed),
        ("cancelled", RunStatus::Cancelled),
    ] {
        store.create_run(unowned(run_id)).await.unwrap();
        let run = claimed(store.claim_run(run_id, "exec-a", 1_000, TTL).await.unwrap());
        let mut end = update(status, 1_100);
        end.answer = Some("42".to_owned());
        assert!(
            store
                .update_run(run_id, run.fence, end)
                .await
                .unwrap()
                .is_applied()
        );
        let ended = store.load_run(run_id).await.unwrap().unwrap();
        assert_eq!(
            ended.lease_expires_at_ms, 0,
            "a terminal status releases the lease"
        );

        assert_eq!(
            store.claim_run(run_id, "exec-b", 5_000, TTL).await.unwrap(),
            ClaimOutcome::Finished(status)
        );
        assert_eq!(store.load_run(run_id).await.unwrap(), Some(ended));
    }
}

async fn reconcile_marks_expired_running_runs_orphaned_with_the_message(store: Arc<dyn Store>) {
    let runs = [
        run_record("live", Some("a"), 1, 5_000, RunStatus::Running),
        run_record("expired", Some("a"), 1, 1_500, RunStatus::Running),
        run_record("expired-too", Some("b"), 3, 2_000, RunStatus::Running),
        run_record("paused", Some("a"), 1, 1_500, RunStatus::WaitingHuman),
        run_record(
            "unknown-call",
            Some("a"),
            1,
            1_500,
            RunStatus::ReconciliationRequired,
        ),
        run_record("done", Some("a"), 1, 0, RunStatus::Completed),
    ];
    for run in &runs {
        store.create_run(run.clone()).await.unwrap();
    }

    let orphaned = store.reconcile_orphans(2_000).await.unwrap();
    assert_eq!(orphaned, ["expired", "expired-too"]);
    for run_id in ["expired", "expired-too"] {
        let run = store.load_run(run_id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Orphaned);
        assert_eq!(
            run.reason.as_deref(),
            Some("run orphaned: executor lease expired")
        );
        assert_eq!(run.updated_at_ms, 2_000);
    }
    for run in runs.iter().filter(|r| !r.run_id.starts_with("expired")) {
        assert_eq!(
            store.load_run(&run.run_id).await.unwrap().as_ref(),
            Some(run),
            "{} is untouched",
            run.run_id
        );
    }
    assert_eq!(
        store.reconcile_orphans(2_000).await.unwrap(),
        Vec::<String>::new(),
        "reconciling twice changes nothing"
    );
}

/// A run its executor let go on a clean shutdown says so: once swept, it
/// is orphaned by a shutdown, not by an executor lease that expired; and
/// claimed straight from `running`, it no longer says it is stopped.
async fn a_run_stopped_in_place_is_orphaned_as_stopped_and_claimed_clean(store: Arc<dyn Store>) {
    let mut stopped = run_record("stopped", Some("a"), 1, 1_500, RunStatus::Running);
    stopped.reason = Some(fencing::STOPPED_IN_PLACE.to_owned());
    let mut taken = run_record("taken", Some("a"), 1, 1_500, RunStatus::Running);
    taken.reason = Some(fencing::STOPPED_IN_PLACE.to_owned());
    store.create_run(stopped).await.unwrap();
    store.create_run(taken).await.unwrap();

    let claimed = store.claim_run("taken", "b", 1_600, TTL).await.unwrap();
    let ClaimOutcome::Claimed(claimed) = claimed else {
        panic!("a released run is claimed: {claimed:?}");
    };
    assert_eq!(claimed.status, RunStatus::Running);
    assert_eq!(claimed.reason, None, "a run taken on again is not stopped");

    assert_eq!(store.reconcile_orphans(2_000).await.unwrap(), ["stopped"]);
    let run = store.load_run("stopped").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Orphaned);
    assert_eq!(run.reason.as_deref(), Some(fencing::ORPHANED_AFTER_STOP));
    assert_ne!(run.reason.as_deref(), Some(fencing::ORPHANED));
}

async fn orphaned_run_can_be_claimed_and_runs_again(store: Arc<dyn Store>) {
    store.create_run(unowned("r")).await.unwrap();
    claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    assert!(
        store
            .save_snapshot(snapshot("r", "run", 3, "before the crash"), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(store.reconcile_orphans(2_000).await.unwrap(), ["r"]);

    let resumed = claimed(store.claim_run("r", "exec-b", 2_500, TTL).await.unwrap());
    assert_eq!(resumed.status, RunStatus::Running);
    assert_eq!(resumed.reason, None);
    assert_eq!(
        (resumed.owner_id.as_deref(), resumed.fence),
        (Some("exec-b"), 2)
    );
    assert_eq!(
        store.load_snapshots("r").await.unwrap(),
        vec![snapshot("r", "run", 3, "before the crash")]
    );
    assert!(
        store
            .save_snapshot(snapshot("r", "run", 4, "resumed"), 2)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .update_run("r", 2, update(RunStatus::Completed, 3_000))
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        store.load_run("r").await.unwrap().unwrap().status,
        RunStatus::Completed
    );
}

async fn concurrent_claims_yield_exactly_one_owner(store: Arc<dyn Store>) {
    for round in 0..4 {
        let run_id = format!("r{round}");
        store.create_run(unowned(&run_id)).await.unwrap();
        let start = Arc::new(tokio::sync::Barrier::new(32));
        let claims: Vec<_> = (0..32)
            .map(|i| {
                let (store, start, run_id) = (store.clone(), Arc::clone(&start), run_id.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    store
                        .claim_run(&run_id, &format!("exec-{i}"), 1_000, TTL)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut holders = Vec::new();
        for claim in claims {
            match claim.await.unwrap() {
                ClaimOutcome::Claimed(record) => winners.push(record),
                ClaimOutcome::HeldBy { owner_id, .. } => holders.push(owner_id),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one claim wins");
        let winner = winners.pop().unwrap();
        assert_eq!(winner.fence, 1);
        let owner = winner.owner_id.clone().unwrap();
        assert!(
            holders.iter().all(|h| *h == owner),
            "every loser is told who won"
        );
        assert_eq!(store.load_run(&run_id).await.unwrap(), Some(winner));
    }
}

async fn events_resume_after_an_event_id(store: Arc<dyn Store>) {
    for run_id in ["run-1", "run-10"] {
        store.create_run(unowned(run_id)).await.unwrap();
        claimed(store.claim_run(run_id, "a", 1_000, TTL).await.unwrap());
    }
    // Seqs across byte boundaries: the order is numeric, not textual.
    let seqs = [1, 2, 9, 10, 255, 256, 257, 1_000, 65_536];
    assert!(
        store
            .append_events("run-1", events("run-1", seqs[..4].to_vec()), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .append_events("run-1", events("run-1", seqs[4..].to_vec()), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .append_events("run-10", events("run-10", [3, 4]), 1)
            .await
            .unwrap()
            .is_applied()
    );

    assert_eq!(
        store.load_events("run-1", 0).await.unwrap(),
        events("run-1", seqs)
    );
    assert_eq!(
        store.load_events("run-1", 10).await.unwrap(),
        events("run-1", seqs[4..].to_vec())
    );
    assert_eq!(
        store.load_events("run-1", 11).await.unwrap(),
        events("run-1", seqs[4..].to_vec())
    );
    assert_eq!(store.load_events("run-1", 65_536).await.unwrap(), vec![]);
    assert_eq!(store.load_events("run-1", u64::MAX).await.unwrap(), vec![]);
    assert_eq!(
        store.load_events("run-10", 0).await.unwrap(),
        events("run-10", [3, 4]),
        "runs do not mix"
    );
    assert_eq!(store.load_events("run-2", 0).await.unwrap(), vec![]);
}

/// Runs one scripted sequence of operations and writes down every outcome.
async fn script(store: &dyn Store) -> Vec<String> {
    let mut log = Vec::new();
    macro_rules! step {
        ($e:expr) => {
            log.push(format!("{} => {:?}", stringify!($e), $e.await));
        };
    }
    step!(store.create_run(run_record("r1", Some("a"), 1, 1_500, RunStatus::Running)));
    step!(store.create_run(run_record("r1", Some("b"), 1, 1_500, RunStatus::Running)));
    step!(store.create_run(unowned("r2")));
    step!(store.claim_run("r2", "b", 1_000, TTL));
    step!(store.claim_run("r2", "a", 1_200, TTL));
    step!(store.claim_run("nope", "a", 1_200, TTL));
    step!(store.save_snapshot(snapshot("r1", "run", 1, "one"), 1));
    step!(store.save_snapshot(snapshot("r1", "run/worker:w:1", 1, "w"), 1));
    step!(store.save_snapshot(snapshot("r1", "run", 2, "two"), 1));
    step!(store.save_snapshot(snapshot("r1", "run", 3, "stale"), 7));
    step!(store.save_snapshot(snapshot("nope", "run", 1, "none"), 1));
    step!(store.record_tool_call("r1", tool_call("k2", 2, ToolCallState::Sent), 1));
    step!(store.record_tool_call("r1", tool_call("k1", 1, ToolCallState::Sent), 1));
    step!(store.record_tool_call("r1", tool_call("k1", 1, ToolCallState::Done), 1));
    step!(store.record_tool_call("r2", tool_call("k1", 1, ToolCallState::Sent), 0));
    step!(store.record_tool_call("nope", tool_call("k1", 1, ToolCallState::Sent), 0));
    step!(store.append_events("r1", events("r1", 1..=3), 1));
    step!(store.append_events("r1", events("r1", 4..=4), 2));
    step!(store.append_events("r1", events("r1", 4..=5), 1));
    step!(store.append_events("nope", events("nope", 1..=1), 1));
    step!(store.renew_run("r1", 1, 1_400, TTL));
    step!(store.renew_run("r1", 2, 1_400, TTL));
    step!(store.renew_run("nope", 1, 1_400, TTL));
    let mut paused = update(RunStatus::WaitingHuman, 1_450);
    paused.pause = Some(PauseRecord {
        reason: "escalated".to_owned(),
        subject: "search".to_owned(),
        path: "run".to_owned(),
        call: Some(tool_call("k2", 2, ToolCallState::Unknown)),
    });
    step!(store.update_run("r2", 1, paused.clone()));
    step!(store.update_run("r2", 0, paused.clone()));
    step!(store.update_run("nope", 1, paused.clone()));
    step!(store.create_run(unowned("r0")));
    step!(store.reconcile_orphans(1_800));
    step!(store.reconcile_orphans(5_000));
    step!(store.claim_run("r1", "b", 5_000, TTL));
    step!(store.save_snapshot(snapshot("r1", "run", 4, "resumed"), 2));
    let mut done = update(RunStatus::Completed, 5_100);
    done.answer = Some("42".to_owned());
    step!(store.update_run("r1", 2, done.clone()));
    step!(store.claim_run("r1", "c", 9_000, TTL));
    step!(store.claim_run("r2", "c", 9_000, TTL));
    step!(store.load_run("r1"));
    step!(store.load_run("nope"));
    step!(store.list_runs());
    step!(store.load_snapshots("r1"));
    step!(store.load_snapshots("r2"));
    step!(store.load_tool_calls("r1"));
    step!(store.load_events("r1", 0));
    step!(store.load_events("r1", 2));
    step!(store.load_events("r2", 0));
    step!(store.flush());
    log
}

async fn tool_calls_keep_one_record_per_idempotency_key(store: Arc<dyn Store>) {
    store.create_run(unowned("r")).await.unwrap();
    let run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    for call in [
        tool_call("r/run/1/0", 1, ToolCallState::Sent),
        tool_call("r/run/1/1", 1, ToolCallState::Sent),
        tool_call("r/run/1/0", 1, ToolCallState::Done),
        tool_call("r/run/1/1", 1, ToolCallState::Unknown),
    ] {
        assert!(
            store
                .record_tool_call("r", call, run.fence)
                .await
                .unwrap()
                .is_applied()
        );
    }
    assert_eq!(
        store.load_tool_calls("r").await.unwrap(),
        vec![
            tool_call("r/run/1/0", 1, ToolCallState::Done),
            tool_call("r/run/1/1", 1, ToolCallState::Unknown),
        ],
        "the latest record of each key, in key order"
    );
}

async fn a_terminal_write_and_everything_before_it_survive_a_reopen(fixture: Fixture) {
    let store = Arc::clone(&fixture.store);
    store.create_run(unowned("r")).await.unwrap();
    let run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    let call = tool_call("r/run/1/0", 1, ToolCallState::Done);
    assert!(
        store
            .save_snapshot(snapshot("r", "run", 1, "one"), run.fence)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .record_tool_call("r", call.clone(), run.fence)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .append_events("r", events("r", 1..=3), run.fence)
            .await
            .unwrap()
            .is_applied()
    );
    let mut done = update(RunStatus::Completed, 1_200);
    done.answer = Some("42".to_owned());
    assert!(
        store
            .update_run("r", run.fence, done)
            .await
            .unwrap()
            .is_applied()
    );
    store.flush().await.unwrap();
    drop(store);

    let fixture = fixture.reopened().await;
    let store = &fixture.store;
    let ended = store.load_run("r").await.unwrap().unwrap();
    assert_eq!(
        (
            ended.status,
            ended.answer.as_deref(),
            ended.lease_expires_at_ms,
            ended.fence
        ),
        (RunStatus::Completed, Some("42"), 0, 1)
    );
    assert_eq!(
        store.load_snapshots("r").await.unwrap(),
        vec![snapshot("r", "run", 1, "one")]
    );
    assert_eq!(store.load_tool_calls("r").await.unwrap(), vec![call]);
    assert_eq!(store.load_events("r", 0).await.unwrap(), events("r", 1..=3));
    assert_eq!(store.list_runs().await.unwrap(), vec![ended]);
    assert_eq!(
        store.claim_run("r", "exec-b", 9_000, TTL).await.unwrap(),
        ClaimOutcome::Finished(RunStatus::Completed)
    );
}

async fn the_store_answers_a_scripted_sequence_as_the_memory_store_does(store: Arc<dyn Store>) {
    let memory = script(&MemoryStore::new()).await;
    let got = script(&*store).await;
    for (expected, got) in memory.iter().zip(&got) {
        assert_eq!(got, expected, "the stores disagree");
    }
    assert_eq!(got.len(), memory.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_url_in_the_configuration_selects_the_postgresql_store() {
    use leasehold::config::{Config, Flag};
    let fixture = Fixture::postgres().await;
    let Reopen::Postgres { url, .. } = &fixture.reopen else {
        unreachable!("a PostgreSQL fixture")
    };
    let flag = Flag {
        key: "store".into(),
        value: url.clone(),
        given_as: "--store".into(),
    };
    let config = Config::load_layers(None, |_| None, &[flag]).unwrap();
    let configured = config.open_store().unwrap();
    configured.create_run(unowned("r")).await.unwrap();
    assert!(
        fixture.store.load_run("r").await.unwrap().is_some(),
        "the configured store is the database"
    );

    let wrong = |name: &str| match name {
        "LEASEHOLD_STORE" => Some("mysql://lh:s3cret@db/runs".to_owned()),
        _ => None,
    };
    let error = Config::load_layers(None, wrong, &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("LEASEHOLD_STORE"), "{error}");
    assert!(error.contains("PostgreSQL URL"), "{error}");
    assert!(!error.contains("s3cret"), "{error}");

    let gone = PostgresStore::connect(PostgresConfig::new(format!(
        "postgres://postgres@127.0.0.1:{}/runs",
        free_port_nobody_listens_on()
    )))
    .await
    .unwrap_err();
    assert!(
        gone.message
            .contains("cannot get a connection to the PostgreSQL store"),
        "{gone}"
    );
}

/// A loopback port with no server on it.
fn free_port_nobody_listens_on() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .unwrap()
        .port()
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

async fn summaries_cut_each_text_to_its_first_characters_as_the_rule_does(store: Arc<dyn Store>) {
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

async fn pages_list_what_the_listing_rule_selects_newest_first_by_byte_order(
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
        assert_eq!(
            every_page(store.as_ref(), query.clone()).await,
            want,
            "{query:?}"
        );
    }
}

async fn a_command_is_taken_once_and_by_the_runs_owner_only(store: Arc<dyn Store>) {
    store.create_run(unowned("r")).await.unwrap();
    claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    let resume = RunCommand::Resume {
        guidance: Some("go on".to_owned()),
    };
    let reconcile = RunCommand::Reconcile {
        key: "r/run/1/0".to_owned(),
        decision: ReconcileDecision::MarkDone {
            result: "done".to_owned(),
        },
    };
    let first = store.send_command("r", resume.clone()).await.unwrap();
    let second = store.send_command("r", reconcile.clone()).await.unwrap();
    assert!(first < second, "ids go up: {first}, {second}");
    assert!(
        store
            .send_command(
                "missing",
                RunCommand::Cancel {
                    reason: "no".to_owned()
                }
            )
            .await
            .is_err(),
        "a command for no run is refused"
    );

    // Each run's waiting commands are counted, and only its own.
    store.create_run(unowned("other")).await.unwrap();
    assert_eq!(store.count_commands("r").await.unwrap(), 2);
    assert_eq!(store.count_commands("other").await.unwrap(), 0);

    // Another executor takes nothing: the run is not its own.
    assert!(store.take_commands("exec-b").await.unwrap().is_empty());
    let taken = store.take_commands("exec-a").await.unwrap();
    let taken: Vec<_> = taken
        .into_iter()
        .map(|c| (c.id, c.run_id, c.command))
        .collect();
    assert_eq!(
        taken,
        vec![
            (first, "r".to_owned(), resume),
            (second, "r".to_owned(), reconcile),
        ]
    );
    // Taken once.
    assert!(store.take_commands("exec-a").await.unwrap().is_empty());
    assert_eq!(store.count_commands("r").await.unwrap(), 0);

    // A command waits for whoever holds the run when it is taken.
    let cancel = RunCommand::Cancel {
        reason: "stop".to_owned(),
    };
    store.send_command("r", cancel.clone()).await.unwrap();
    claimed(store.claim_run("r", "exec-b", 2_000, TTL).await.unwrap());
    assert!(store.take_commands("exec-a").await.unwrap().is_empty());
    let taken = store.take_commands("exec-b").await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].command, cancel);
}

/// The next change on `feed` that is not a resync (a store that listens
/// elsewhere announces one when it starts listening).
async fn next_change(feed: &mut ChangeFeed) -> StoreChange {
    loop {
        let change = tokio::time::timeout(Duration::from_secs(30), feed.recv())
            .await
            .expect("a change within 30 s")
            .expect("the store is open");
        if change != StoreChange::Resync {
            return change;
        }
    }
}

async fn changes_are_published_for_writes_that_landed_and_only_those(store: Arc<dyn Store>) {
    let mut feed = store.changes();
    let run = |id: &str| StoreChange::Run {
        run_id: id.to_owned(),
    };
    store.create_run(unowned("r")).await.unwrap();
    assert_eq!(next_change(&mut feed).await, run("r"));
    claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    assert_eq!(next_change(&mut feed).await, run("r"));
    assert!(
        store
            .append_events("r", events("r", 1..=2), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        next_change(&mut feed).await,
        StoreChange::Events {
            run_id: "r".to_owned()
        }
    );
    store
        .send_command("r", RunCommand::Resume { guidance: None })
        .await
        .unwrap();
    assert_eq!(
        next_change(&mut feed).await,
        StoreChange::Command {
            run_id: "r".to_owned()
        }
    );

    // B takes the run over; A's writes are refused and publish nothing, and
    // neither does a heartbeat.
    claimed(store.claim_run("r", "exec-b", 2_000, TTL).await.unwrap());
    assert_eq!(next_change(&mut feed).await, run("r"));
    assert!(
        !store
            .append_events("r", events("r", 3..=3), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        !store
            .update_run("r", 1, update(RunStatus::Failed, 2_100))
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .renew_run("r", 2, 2_100, TTL)
            .await
            .unwrap()
            .is_applied()
    );
    // The next change is B's write, not one of A's refused ones.
    assert!(
        store
            .update_run("r", 2, update(RunStatus::Completed, 2_200))
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(next_change(&mut feed).await, run("r"));

    // Orphans are changes of their runs.
    store.create_run(unowned("s")).await.unwrap();
    assert_eq!(next_change(&mut feed).await, run("s"));
    claimed(store.claim_run("s", "exec-a", 3_000, TTL).await.unwrap());
    assert_eq!(next_change(&mut feed).await, run("s"));
    assert_eq!(
        store.reconcile_orphans(10_000).await.unwrap(),
        vec!["s".to_owned()]
    );
    assert_eq!(next_change(&mut feed).await, run("s"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_listen_connection_comes_back_with_a_resync() {
    let fixture = Fixture::postgres().await;
    let Reopen::Postgres { url, .. } = &fixture.reopen else {
        unreachable!("a PostgreSQL fixture")
    };
    let store = Arc::clone(&fixture.store);
    let mut feed = store.changes();
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let killed: i64 = client
        .query_one(
            // This test's database only: the cluster serves other tests'.
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE query = 'LISTEN leasehold' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1, "the store's LISTEN connection was found");
    // A write while it is down is not heard; the resync says so.
    store.create_run(unowned("while down")).await.unwrap();
    loop {
        let change = tokio::time::timeout(Duration::from_secs(30), feed.recv())
            .await
            .expect("a resync within 30 s")
            .expect("the store is open");
        if change == StoreChange::Resync {
            break;
        }
    }
    // Listening again: a write is heard (after, perhaps, the one made
    // while it was down, had it landed once the connection was back).
    store.create_run(unowned("after")).await.unwrap();
    let after = StoreChange::Run {
        run_id: "after".to_owned(),
    };
    while next_change(&mut feed).await != after {}
}

/// A claim of at most `max` queued runs by `owner_id` at `now_ms`.
fn claim(owner_id: &str, now_ms: u64, max: usize) -> QueueClaim {
    QueueClaim {
        owner_id: owner_id.to_owned(),
        now_ms,
        ttl_ms: TTL,
        max,
    }
}

fn queued(run_id: &str) -> RunRecord {
    run_record(run_id, None, 0, 0, RunStatus::Queued)
}

async fn queued_ids(store: &dyn Store) -> Vec<String> {
    let mut query = RunQuery::first(1_000);
    query.status = Some(RunStatus::Queued);
    store
        .list_runs_page(&query)
        .await
        .unwrap()
        .runs
        .into_iter()
        .map(|r| r.run_id)
        .collect()
}

async fn queued_runs_are_claimed_oldest_first_at_most_max(store: Arc<dyn Store>) {
    // Created out of id order: the oldest is the smallest id.
    for run_id in ["q2", "q0", "q3", "q1"] {
        store.create_run(queued(run_id)).await.unwrap();
    }
    for (run_id, status) in [
        ("a-running", RunStatus::Running),
        ("a-orphaned", RunStatus::Orphaned),
        ("a-waiting", RunStatus::WaitingHuman),
        ("a-completed", RunStatus::Completed),
    ] {
        store
            .create_run(run_record(run_id, None, 1, 0, status))
            .await
            .unwrap();
    }
    assert!(
        store
            .claim_queued(claim("exec-a", 2_000, 0))
            .await
            .unwrap()
            .is_empty(),
        "max 0 claims nothing"
    );
    let before = store.load_run("q0").await.unwrap().unwrap();
    let first = store.claim_queued(claim("exec-a", 2_000, 2)).await.unwrap();
    let ids: Vec<&str> = first.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["q0", "q1"]);
    // The record every store makes is the rule's.
    assert_eq!(
        Some(first[0].clone()),
        fencing::claim_queued(&before, &claim("exec-a", 2_000, 2))
    );
    for record in &first {
        assert_eq!(record.status, RunStatus::Running);
        assert_eq!(record.owner_id.as_deref(), Some("exec-a"));
        assert_eq!(record.fence, 1);
        assert_eq!(record.lease_expires_at_ms, 2_000 + TTL);
        assert_eq!(
            store.load_run(&record.run_id).await.unwrap().as_ref(),
            Some(record)
        );
    }
    assert_eq!(queued_ids(store.as_ref()).await, ["q3", "q2"]);
    // A queued run claimed by id runs too.
    match store.claim_run("q2", "exec-b", 2_000, TTL).await.unwrap() {
        ClaimOutcome::Claimed(record) => assert_eq!(record.status, RunStatus::Running),
        other => panic!("unexpected {other:?}"),
    }
    let rest = store
        .claim_queued(claim("exec-b", 3_000, 10))
        .await
        .unwrap();
    let ids: Vec<&str> = rest.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["q3"], "only queued runs are claimed");
    assert!(
        store
            .claim_queued(claim("exec-b", 3_000, 10))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(queued_ids(store.as_ref()).await.is_empty());
    for (run_id, status) in [
        ("a-running", RunStatus::Running),
        ("a-orphaned", RunStatus::Orphaned),
        ("a-waiting", RunStatus::WaitingHuman),
        ("a-completed", RunStatus::Completed),
    ] {
        let record = store.load_run(run_id).await.unwrap().unwrap();
        assert_eq!((record.status, record.fence), (status, 1), "{run_id}");
    }
}

async fn claimers_racing_claim_each_queued_run_exactly_once(fixture: Fixture) {
    const RUNS: usize = 50;
    const CLAIMERS: usize = 5;
    for n in 0..RUNS {
        fixture
            .store
            .create_run(queued(&format!("q{n:03}")))
            .await
            .unwrap();
    }
    let start = Arc::new(tokio::sync::Barrier::new(CLAIMERS));
    let mut claimers = Vec::new();
    for i in 0..CLAIMERS {
        let (store, start) = (fixture.another_handle().await, Arc::clone(&start));
        claimers.push(tokio::spawn(async move {
            let owner = format!("exec-{i}");
            start.wait().await;
            let mut mine = Vec::new();
            loop {
                let claimed = store.claim_queued(claim(&owner, 1_000, 3)).await.unwrap();
                if claimed.is_empty() {
                    return mine;
                }
                assert!(claimed.len() <= 3);
                mine.extend(claimed);
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut owners = std::collections::BTreeMap::new();
    for (i, claimer) in claimers.into_iter().enumerate() {
        for record in claimer.await.unwrap() {
            assert_eq!(record.owner_id, Some(format!("exec-{i}")));
            assert_eq!((record.status, record.fence), (RunStatus::Running, 1));
            let earlier = owners.insert(record.run_id.clone(), i);
            assert_eq!(earlier, None, "{} claimed twice", record.run_id);
        }
    }
    assert_eq!(owners.len(), RUNS, "every queued run is claimed");
    for (run_id, i) in &owners {
        let stored = fixture.store.load_run(run_id).await.unwrap().unwrap();
        assert_eq!(stored.owner_id, Some(format!("exec-{i}")), "{run_id}");
        assert_eq!(stored.status, RunStatus::Running);
    }
    assert!(queued_ids(fixture.store.as_ref()).await.is_empty());
}
