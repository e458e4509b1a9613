//! The store port's conformance suite (`leasehold::testing::conformance`:
//! fencing, claims, orphans, tool-call records, terminal writes, the event
//! log, what survives a reopen, listing and summaries, commands,
//! idempotency keys, the change
//! feed, the queue, learned paces, the outbox, retention, and outcome-for-outcome
//! agreement with `MemoryStore`) run against the in-memory store, sled and
//! PostgreSQL (a throwaway cluster, see `support/postgres.rs`): one test per
//! store and rule, `memory::RULE`, `sled::RULE`, `on_postgres::RULE`. Then
//! the rules only PostgreSQL has: its `LISTEN` connection dropped, what an
//! end costs it in statements, its statements parsed once per connection,
//! and its URL in the configuration.

use std::sync::Arc;
use std::time::Duration;

use leasehold::store::{Durability, PostgresConfig, PostgresStore, SledConfig, SledStore};
use leasehold::testing::conformance::{self, StoreFixture};
use leasehold::{
    ChangeFeed, ClaimOutcome, GoneHolder, LayeredStore, MemoryStore, NoticeTake, Pace, RunStatus,
    RunUpdate, Store, StoreChange, StoreError, StoreFuture,
};

#[path = "support/postgres.rs"]
mod postgres;
#[path = "support/records.rs"]
mod records;
#[path = "support/wire.rs"]
mod wire;

use records::unowned;

/// In-memory stores; "reopened", the same data through another handle.
struct Memory;

impl StoreFixture for Memory {
    type Place = MemoryStore;

    async fn fresh(&self) -> Result<MemoryStore, StoreError> {
        Ok(MemoryStore::new())
    }

    async fn open(&self, place: &MemoryStore) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(place.clone()))
    }
}

/// Sled stores, each in a temporary directory (removed when its rule
/// ends), written in `sync` mode. Sled is opened by one process at a time:
/// another executor's handle is the same store (the default).
struct Sled;

impl StoreFixture for Sled {
    type Place = tempfile::TempDir;

    async fn fresh(&self) -> Result<tempfile::TempDir, StoreError> {
        tempfile::tempdir().map_err(|e| StoreError::failed(e.to_string()).with_source(e))
    }

    async fn open(&self, dir: &tempfile::TempDir) -> Result<Arc<dyn Store>, StoreError> {
        let config = SledConfig::new(dir.path()).with_durability(Durability::Sync);
        Ok(Arc::new(SledStore::open(config)?))
    }
}

/// PostgreSQL stores, each on a new database of the binary's throwaway
/// cluster; another executor's handle is a new pool on the same database.
struct Postgres;

impl StoreFixture for Postgres {
    /// The cluster (held: it runs while a store on it lives) and the
    /// database's URL.
    type Place = (Arc<postgres::Cluster>, String);

    async fn fresh(&self) -> Result<Self::Place, StoreError> {
        Ok(postgres::database().await)
    }

    async fn open(&self, (_, url): &Self::Place) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(open_postgres(url).await?))
    }

    async fn another_handle(
        &self,
        (_, url): &Self::Place,
        _open: &Arc<dyn Store>,
    ) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(open_postgres(url).await?))
    }
}

async fn open_postgres(url: &str) -> Result<PostgresStore, StoreError> {
    PostgresStore::connect(PostgresConfig::new(url)).await
}

/// Stamps one test per store and rule, `memory::RULE`, `sled::RULE`,
/// `on_postgres::RULE`, each checking the suite's rule of that name; and a
/// test that every rule of the suite is stamped.
macro_rules! conformance {
    ($($rule:ident),* $(,)?) => {
        conformance!(@stamp memory, Memory, [$($rule),*]);
        conformance!(@stamp sled, Sled, [$($rule),*]);
        conformance!(@stamp on_postgres, Postgres, [$($rule),*]);

        #[test]
        fn every_rule_of_the_suite_runs_on_every_store() {
            assert_eq!(
                conformance::rules().collect::<Vec<_>>(),
                [$(stringify!($rule)),*],
                "the tests above stamp each rule of the suite, in its order"
            );
        }
    };
    (@stamp $store:ident, $fixture:expr, [$($rule:ident),*]) => {
        mod $store {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $rule() {
                    conformance::check_rule($fixture, stringify!($rule))
                        .await
                        .assert_passed();
                }
            )*
        }
    };
}

conformance! {
    stale_fence_writes_are_refused_and_land_nothing,
    a_write_racing_a_claim_lands_before_it_or_not_at_all,
    claim_is_refused_while_another_lease_is_live,
    claim_of_a_finished_run_is_refused,
    concurrent_claims_yield_exactly_one_owner,
    reconcile_marks_expired_running_runs_orphaned_with_the_message,
    a_run_stopped_in_place_is_orphaned_as_stopped_and_claimed_clean,
    orphaned_run_can_be_claimed_and_runs_again,
    a_store_is_shared_exactly_when_another_executors_handle_is_another_store,
    a_store_that_holds_its_place_alone_says_it_is_exclusive,
    runs_of_a_gone_holder_are_orphaned_only_on_an_exclusive_store,
    tool_calls_keep_one_record_per_idempotency_key,
    events_resume_after_an_event_id,
    events_appended_out_of_order_are_read_in_seq_order_each_once,
    snapshot_history_and_a_forks_lineage_are_kept_as_written,
    a_loops_history_grows_with_its_steps_not_their_square,
    a_fork_shares_its_parents_history_and_stores_only_its_own_steps,
    a_terminal_write_and_everything_before_it_survive_a_reopen,
    the_store_answers_a_scripted_sequence_as_the_memory_store_does,
    pages_list_what_the_listing_rule_selects_newest_first_by_byte_order,
    summaries_cut_each_text_to_its_first_characters_as_the_rule_does,
    runs_are_counted_by_status_as_they_are_recorded,
    counts_by_status_stay_exact_through_every_change_and_a_reopen,
    a_listing_as_seen_lists_a_run_nobody_runs_as_orphaned,
    a_command_is_taken_once_and_by_the_runs_owner_only,
    changes_are_published_for_writes_that_landed_and_only_those,
    a_key_creates_one_run_and_answers_it_while_it_holds,
    creations_racing_under_one_key_create_one_run,
    queued_runs_are_claimed_oldest_first_at_most_max,
    queued_runs_are_claimed_in_fair_turns_across_tenants,
    queued_runs_are_claimed_within_the_room_of_each_key,
    claimers_racing_claim_each_queued_run_exactly_once,
    learned_paces_are_kept_replaced_reset_and_survive_a_reopen,
    api_keys_are_kept_once_listed_by_tenant_revoked_once_and_survive_a_reopen,
    a_pause_or_an_end_keeps_one_notice_held_by_its_taker_until_settled,
    an_undelivered_notice_and_its_progress_survive_a_reopen,
    finished_runs_past_their_retention_go_with_everything_kept_of_them,
    a_flows_retention_shortens_the_servers,
}

/// A PostgreSQL store on a new database, its URL, and the cluster (held:
/// it runs while the store lives).
async fn postgres_store() -> (Arc<dyn Store>, String, Arc<postgres::Cluster>) {
    let (cluster, url) = postgres::database().await;
    let store = open_postgres(&url).await.unwrap();
    (Arc::new(store), url, cluster)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_listen_connection_comes_back_with_a_resync() {
    let (store, url, _cluster) = postgres_store().await;
    let mut feed = store.changes();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
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

/// Ending a run on PostgreSQL is four statements, as pg_stat_statements
/// counts them: `START TRANSACTION`, the record read `FOR UPDATE`, one
/// write of the record, its notice and its notification, `COMMIT` (it was
/// six: the notice's insert and the notification were statements of their
/// own). The end is still heard, and its notice kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_on_postgres_is_four_statements_and_keeps_its_notice() {
    let (store, url, _cluster) = postgres_store().await;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute("CREATE EXTENSION pg_stat_statements")
        .await
        .unwrap();
    let mut feed = store.changes();
    store.create_run(unowned("ends")).await.unwrap();
    let ClaimOutcome::Claimed(run) = store
        .claim_run("ends", "exec-a", 1_000, 60_000)
        .await
        .unwrap()
    else {
        panic!("the run is claimed");
    };
    reset_statements(&client).await;
    let end = RunUpdate {
        status: RunStatus::Completed,
        reason: None,
        answer: Some("42".to_owned()),
        pause: None,
        at_ms: 1_100,
    };
    assert!(
        store
            .update_run("ends", run.fence, end)
            .await
            .unwrap()
            .is_applied()
    );
    let sent = statements(&client).await;
    let calls: i64 = sent.iter().map(|(calls, _)| calls).sum();
    assert_eq!(calls, 4, "the end's statements: {sent:#?}");
    // Heard: its creation, its claim, its end.
    let changed = StoreChange::Run {
        run_id: "ends".to_owned(),
    };
    let mut heard = 0;
    while heard < 3 {
        if next_change(&mut feed).await == changed {
            heard += 1;
        }
    }
    let take = NoticeTake {
        now_ms: 2_000,
        hold_ms: 1_000,
        max: 10,
    };
    let kept = store.take_notices(take).await.unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        (
            kept[0].run_id.as_str(),
            kept[0].status,
            kept[0].answer.as_deref()
        ),
        ("ends", RunStatus::Completed, Some("42"))
    );
}

/// The PostgreSQL store has PostgreSQL parse each statement of a run's
/// life once per connection, not on every use: after one run is created,
/// claimed, given events and a snapshot, counted, read, its model's pace
/// saved, ended, and its notice taken and settled, twenty more runs living the same through the
/// same connection make PostgreSQL parse nothing more (the `Parse`
/// messages counted on the wire by a proxy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_stores_statements_of_a_runs_life_are_parsed_once_per_connection() {
    let (_cluster, url) = postgres::database().await;
    let (port, counts) = wire::proxy(wire::port_of(&url)).await;
    let config = PostgresConfig::new(wire::with_port(&url, port)).with_pool_size(1);
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(config).await.unwrap());
    live_a_run(store.as_ref(), "first").await;
    let parsed = counts.parses();
    assert!(parsed > 0, "the proxy counts the store's parses");
    for n in 0..20 {
        live_a_run(store.as_ref(), &format!("run-{n}")).await;
    }
    assert_eq!(
        counts.parses(),
        parsed,
        "statements parsed again for twenty more runs"
    );
}

/// One run's life as an executor writes it, its notice delivered.
async fn live_a_run(store: &dyn Store, run_id: &str) {
    store.create_run(unowned(run_id)).await.unwrap();
    let ClaimOutcome::Claimed(run) = store
        .claim_run(run_id, "exec-a", 1_000, 60_000)
        .await
        .unwrap()
    else {
        panic!("run `{run_id}` is claimed");
    };
    let appended = store.append_events(run_id, records::shared_events(run_id, 1..=2), run.fence);
    assert!(appended.await.unwrap().is_applied());
    let snapshot = records::snapshot(run_id, "run", 1, "hello");
    assert!(
        store
            .save_snapshot(snapshot, run.fence)
            .await
            .unwrap()
            .is_applied()
    );
    store.count_runs(RunStatus::Queued).await.unwrap();
    assert!(store.load_run(run_id).await.unwrap().is_some());
    let pace = (format!("model:{run_id}"), Some(Pace::default()));
    store.save_paces(vec![pace]).await.unwrap();
    let end = records::update(RunStatus::Completed, 1_100);
    assert!(
        store
            .update_run(run_id, run.fence, end)
            .await
            .unwrap()
            .is_applied()
    );
    let take = NoticeTake {
        now_ms: 2_000,
        hold_ms: 1_000,
        max: 10,
    };
    for notice in store.take_notices(take).await.unwrap() {
        let settled = store.settle_notice(notice.id, notice.delivery.due_at_ms, None);
        assert!(settled.await.unwrap());
    }
}

/// The statements sent to the database of `client` since
/// [`reset_statements`] (its own counting excepted), as `(calls, query)`,
/// most called first. Needs `CREATE EXTENSION pg_stat_statements` in that
/// database.
async fn statements(client: &tokio_postgres::Client) -> Vec<(i64, String)> {
    let rows = client
        .query(
            "SELECT s.calls, s.query FROM pg_stat_statements s \
             JOIN pg_database d ON d.oid = s.dbid \
             WHERE d.datname = current_database() AND s.toplevel \
             AND s.query NOT LIKE '%pg_stat_statements%' \
             ORDER BY s.calls DESC, s.query",
            &[],
        )
        .await
        .expect("pg_stat_statements is read");
    rows.iter().map(|row| (row.get(0), row.get(1))).collect()
}

/// Forgets the statements counted in the database of `client` (the other
/// tests' databases keep theirs).
async fn reset_statements(client: &tokio_postgres::Client) {
    client
        .execute(
            "SELECT pg_stat_statements_reset(0, d.oid, 0) FROM pg_database d \
             WHERE d.datname = current_database()",
            &[],
        )
        .await
        .expect("pg_stat_statements is reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_url_in_the_configuration_selects_the_postgresql_store() {
    use leasehold::config::{Config, Flag};
    let (store, url, _cluster) = postgres_store().await;
    let flag = Flag {
        key: "store".into(),
        value: url,
        given_as: "--store".into(),
    };
    let config = Config::load_layers(None, |_| None, &[flag]).unwrap();
    let configured = config.open_store().unwrap();
    configured.create_run(unowned("r")).await.unwrap();
    assert!(
        store.load_run("r").await.unwrap().is_some(),
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
        gone.message()
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

/// A wrapper that forgot to pass on what its store says of itself, as one
/// written by hand did: it answers the port's defaults (not shared, not
/// exclusive, no run of a gone holder to orphan).
struct Forgetting(Arc<dyn Store>);

impl LayeredStore for Forgetting {
    fn inner(&self) -> &dyn Store {
        self.0.as_ref()
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn is_exclusive(&self) -> bool {
        false
    }

    fn orphan_runs_of_gone_holders(
        &self,
        _now_ms: u64,
        _gone: GoneHolder,
    ) -> StoreFuture<Vec<String>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
}

/// Sled stores behind a [`Forgetting`] wrapper.
struct ForgetfulSled;

impl StoreFixture for ForgetfulSled {
    type Place = tempfile::TempDir;

    async fn fresh(&self) -> Result<tempfile::TempDir, StoreError> {
        Sled.fresh().await
    }

    async fn open(&self, dir: &tempfile::TempDir) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(Forgetting(Sled.open(dir).await?)))
    }
}

/// PostgreSQL stores behind a [`Forgetting`] wrapper.
struct ForgetfulPostgres;

impl StoreFixture for ForgetfulPostgres {
    type Place = (Arc<postgres::Cluster>, String);

    async fn fresh(&self) -> Result<Self::Place, StoreError> {
        Postgres.fresh().await
    }

    async fn open(&self, place: &Self::Place) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(Forgetting(Postgres.open(place).await?)))
    }

    async fn another_handle(
        &self,
        place: &Self::Place,
        open: &Arc<dyn Store>,
    ) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(Forgetting(
            Postgres.another_handle(place, open).await?,
        )))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrapper_that_forgets_what_sled_says_of_itself_fails_the_suite() {
    let rule = "a_store_that_holds_its_place_alone_says_it_is_exclusive";
    let report = conformance::check_rule(ForgetfulSled, rule).await;
    assert_eq!(report.failed().map(|(r, _)| r).collect::<Vec<_>>(), [rule]);
    conformance::check_rule(Sled, rule).await.assert_passed();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrapper_that_forgets_that_postgres_is_shared_fails_the_suite() {
    let rule = "a_store_is_shared_exactly_when_another_executors_handle_is_another_store";
    let report = conformance::check_rule(ForgetfulPostgres, rule).await;
    assert_eq!(report.failed().map(|(r, _)| r).collect::<Vec<_>>(), [rule]);
}

/// A store whose every Nth write fails, N from 1 to 10, on each store:
/// every run that starts completes, its stored log whole from position 1
/// to its `run_completed`; with every write failing no run starts and
/// nothing is stored (`testing::faults::run_with_every_nth_write_failing`).
mod every_nth_write_failing {
    use super::*;
    use leasehold::testing::faults::run_with_every_nth_write_failing;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_sled_no_run_is_left_running_and_no_completed_log_has_a_gap() {
        for n in 1..=10 {
            let place = Sled.fresh().await.expect("a directory");
            let store = Sled.open(&place).await.expect("sled opens");
            run_with_every_nth_write_failing(n, store)
                .await
                .assert_holds();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_postgres_no_run_is_left_running_and_no_completed_log_has_a_gap() {
        for n in 1..=10 {
            let place = Postgres.fresh().await.expect("a database");
            let store = Postgres.open(&place).await.expect("PostgreSQL connects");
            run_with_every_nth_write_failing(n, store)
                .await
                .assert_holds();
        }
    }
}
