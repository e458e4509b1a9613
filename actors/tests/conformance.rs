//! The store port's conformance suite as an embedder runs it on a store of
//! their own, through the public API alone: one call checks every rule; a
//! store that cannot be reopened has the rules of what survives a reopen
//! skipped; a store that breaks a rule is reported by the rule's name.

use std::collections::BTreeSet;
use std::sync::Arc;

use leasehold_actors::testing::conformance::{self, RuleOutcome, StoreFixture};
use leasehold_actors::{
    BoxFuture, ChangeFeed, ClaimOutcome, Event, Fenced, MemoryStore, Pace, PurgeReport, PurgeRule,
    QueueClaim, RunCommand, RunPage, RunQuery, RunRecord, RunStatus, RunUpdate, Snapshot, Store,
    StoreError, StoredCommand, ToolCallRecord,
};

/// Fresh in-memory stores; "reopened", the same data through another
/// handle (clones of a `MemoryStore` share its data).
struct InMemory;

impl StoreFixture for InMemory {
    type Place = MemoryStore;

    async fn fresh(&self) -> Result<MemoryStore, StoreError> {
        Ok(MemoryStore::new())
    }

    async fn open(&self, place: &MemoryStore) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(place.clone()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_store_keeps_every_rule_of_the_store_port_through_the_public_api() {
    let report = conformance::check(InMemory).await;
    report.assert_passed();
    // Every rule ran, once each, in the suite's order: none was skipped.
    let ran: Vec<&str> = report.rules.iter().map(|r| r.rule).collect();
    assert_eq!(ran, conformance::rules().collect::<Vec<_>>());
    assert_eq!(report.passed().count(), conformance::rules().len());
    assert!(conformance::rules().len() >= 20, "{report}");
    let unique: BTreeSet<&str> = conformance::rules().collect();
    assert_eq!(unique.len(), conformance::rules().len());
}

/// A store that keeps nothing once its last handle is dropped: each open
/// is a new, empty store.
struct Forgetful;

impl StoreFixture for Forgetful {
    type Place = ();

    async fn fresh(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn open(&self, (): &()) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(MemoryStore::new()))
    }

    fn reopens(&self) -> bool {
        false
    }
}

// On a runtime of one thread: the racing rules race less there, but every
// rule still finishes.
#[tokio::test]
async fn a_store_that_cannot_be_reopened_has_the_reopen_rules_skipped_and_says_so() {
    let report = conformance::check(Forgetful).await;
    report.assert_passed();
    let skipped: Vec<&str> = report.skipped().map(|(rule, _)| rule).collect();
    assert_eq!(
        skipped,
        [
            "a_terminal_write_and_everything_before_it_survive_a_reopen",
            "learned_paces_are_kept_replaced_reset_and_survive_a_reopen",
            "an_undelivered_notice_and_its_progress_survive_a_reopen",
        ]
    );
    assert!(report.to_string().contains("3 skipped"), "{report}");
    assert!(
        report.to_string().contains("cannot be reopened"),
        "{report}"
    );
}

/// A store that never finds an orphan: every write as the in-memory
/// store's, but `reconcile_orphans` marks nothing.
struct NeverOrphans(MemoryStore);

struct NeverOrphansFixture;

impl StoreFixture for NeverOrphansFixture {
    type Place = MemoryStore;

    async fn fresh(&self) -> Result<MemoryStore, StoreError> {
        Ok(MemoryStore::new())
    }

    async fn open(&self, place: &MemoryStore) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(NeverOrphans(place.clone())))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_breaks_a_rule_is_reported_by_the_rules_name_and_fails_the_assertion() {
    let report = conformance::check(NeverOrphansFixture).await;
    let failed: BTreeSet<&str> = report.failed().map(|(rule, _)| rule).collect();
    assert_eq!(
        failed,
        BTreeSet::from([
            "reconcile_marks_expired_running_runs_orphaned_with_the_message",
            "a_run_stopped_in_place_is_orphaned_as_stopped_and_claimed_clean",
            "orphaned_run_can_be_claimed_and_runs_again",
            "the_store_answers_a_scripted_sequence_as_the_memory_store_does",
            "changes_are_published_for_writes_that_landed_and_only_those",
        ]),
        "{report}"
    );
    // Each failure carries what its rule panicked with; the other rules
    // ran and passed.
    for outcome in &report.rules {
        if let RuleOutcome::Failed { message } = &outcome.outcome {
            assert!(!message.is_empty(), "{}", outcome.rule);
        }
    }
    assert_eq!(
        report.passed().count(),
        conformance::rules().len() - failed.len()
    );
    // The one-line assertion fails, naming every broken rule.
    let panic = std::panic::catch_unwind(|| report.assert_passed())
        .expect_err("a store that breaks rules fails the assertion");
    let message = panic
        .downcast_ref::<String>()
        .expect("the assertion's message");
    for rule in &failed {
        assert!(message.contains(rule), "{message}");
    }
    assert!(message.contains("5 failed"), "{message}");
}

/// A place that spoils its store when dropped: a stray run slips in, which
/// the rules that count or list runs see.
struct Spoiling(MemoryStore);

impl Drop for Spoiling {
    fn drop(&mut self) {
        let stray = RunRecord {
            trace_parent: None,
            run_id: "stray".to_owned(),
            flow: serde_json::json!({"name": "stray"}),
            status: RunStatus::Queued,
            owner_id: None,
            fence: 0,
            lease_expires_at_ms: 0,
            reason: None,
            answer: None,
            pause: None,
            created_at_ms: 1_000,
            updated_at_ms: 1_000,
            fork: None,
        };
        // The in-memory store writes when called: the answer is not needed.
        drop(self.0.create_run(stray));
    }
}

/// Stores whose place spoils them once dropped, as a temporary directory
/// removes a store's files.
struct SpoiledOnDrop;

impl StoreFixture for SpoiledOnDrop {
    type Place = Spoiling;

    async fn fresh(&self) -> Result<Spoiling, StoreError> {
        Ok(Spoiling(MemoryStore::new()))
    }

    async fn open(&self, place: &Spoiling) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(place.0.clone()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_place_is_kept_until_the_rule_ends() {
    conformance::check(SpoiledOnDrop).await.assert_passed();
}

/// One rule alone, as a test per rule runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_rule_is_checked_alone_by_its_name() {
    let rule = "orphaned_run_can_be_claimed_and_runs_again";
    conformance::check_rule(InMemory, rule)
        .await
        .assert_passed();
    let report = conformance::check_rule(NeverOrphansFixture, rule).await;
    assert_eq!(report.rules.len(), 1);
    assert_eq!(report.failed().map(|(r, _)| r).collect::<Vec<_>>(), [rule]);
}

impl Store for NeverOrphans {
    fn reconcile_orphans(
        &self,
        _now_ms: u64,
    ) -> BoxFuture<'static, Result<Vec<String>, StoreError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    // Everything else as the in-memory store.

    fn create_run(&self, record: RunRecord) -> BoxFuture<'static, Result<(), StoreError>> {
        self.0.create_run(record)
    }

    fn claim_run(
        &self,
        run_id: &str,
        owner_id: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> BoxFuture<'static, Result<ClaimOutcome, StoreError>> {
        self.0.claim_run(run_id, owner_id, now_ms, ttl_ms)
    }

    fn renew_run(
        &self,
        run_id: &str,
        fence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> BoxFuture<'static, Result<Fenced<()>, StoreError>> {
        self.0.renew_run(run_id, fence, now_ms, ttl_ms)
    }

    fn update_run(
        &self,
        run_id: &str,
        fence: u64,
        update: RunUpdate,
    ) -> BoxFuture<'static, Result<Fenced<()>, StoreError>> {
        self.0.update_run(run_id, fence, update)
    }

    fn save_snapshot(
        &self,
        snapshot: Snapshot,
        fence: u64,
    ) -> BoxFuture<'static, Result<Fenced<()>, StoreError>> {
        self.0.save_snapshot(snapshot, fence)
    }

    fn record_tool_call(
        &self,
        run_id: &str,
        record: ToolCallRecord,
        fence: u64,
    ) -> BoxFuture<'static, Result<Fenced<()>, StoreError>> {
        self.0.record_tool_call(run_id, record, fence)
    }

    fn append_events(
        &self,
        run_id: &str,
        events: Vec<Event>,
        fence: u64,
    ) -> BoxFuture<'static, Result<Fenced<()>, StoreError>> {
        self.0.append_events(run_id, events, fence)
    }

    fn claim_queued(
        &self,
        claim: QueueClaim,
    ) -> BoxFuture<'static, Result<Vec<RunRecord>, StoreError>> {
        self.0.claim_queued(claim)
    }

    fn load_run(&self, run_id: &str) -> BoxFuture<'static, Result<Option<RunRecord>, StoreError>> {
        self.0.load_run(run_id)
    }

    fn list_runs(&self) -> BoxFuture<'static, Result<Vec<RunRecord>, StoreError>> {
        self.0.list_runs()
    }

    fn list_runs_page(&self, query: &RunQuery) -> BoxFuture<'static, Result<RunPage, StoreError>> {
        self.0.list_runs_page(query)
    }

    fn load_snapshots(
        &self,
        run_id: &str,
    ) -> BoxFuture<'static, Result<Vec<Snapshot>, StoreError>> {
        self.0.load_snapshots(run_id)
    }

    fn load_snapshot_history(
        &self,
        run_id: &str,
    ) -> BoxFuture<'static, Result<Vec<Snapshot>, StoreError>> {
        self.0.load_snapshot_history(run_id)
    }

    fn load_tool_calls(
        &self,
        run_id: &str,
    ) -> BoxFuture<'static, Result<Vec<ToolCallRecord>, StoreError>> {
        self.0.load_tool_calls(run_id)
    }

    fn load_events(
        &self,
        run_id: &str,
        after_seq: u64,
    ) -> BoxFuture<'static, Result<Vec<Event>, StoreError>> {
        self.0.load_events(run_id, after_seq)
    }

    fn flush(&self) -> BoxFuture<'static, Result<(), StoreError>> {
        self.0.flush()
    }

    fn changes(&self) -> ChangeFeed {
        self.0.changes()
    }

    fn send_command(
        &self,
        run_id: &str,
        command: RunCommand,
    ) -> BoxFuture<'static, Result<u64, StoreError>> {
        self.0.send_command(run_id, command)
    }

    fn count_commands(&self, run_id: &str) -> BoxFuture<'static, Result<u64, StoreError>> {
        self.0.count_commands(run_id)
    }

    fn take_commands(
        &self,
        owner_id: &str,
    ) -> BoxFuture<'static, Result<Vec<StoredCommand>, StoreError>> {
        self.0.take_commands(owner_id)
    }

    fn take_notices(
        &self,
        take: leasehold_actors::NoticeTake,
    ) -> BoxFuture<'static, Result<Vec<leasehold_actors::Notice>, StoreError>> {
        self.0.take_notices(take)
    }

    fn settle_notice(
        &self,
        id: u64,
        held_until_ms: u64,
        delivery: Option<leasehold_actors::Delivery>,
    ) -> BoxFuture<'static, Result<bool, StoreError>> {
        self.0.settle_notice(id, held_until_ms, delivery)
    }

    fn purge_finished(
        &self,
        rule: PurgeRule,
    ) -> BoxFuture<'static, Result<PurgeReport, StoreError>> {
        self.0.purge_finished(rule)
    }

    fn load_paces(&self) -> BoxFuture<'static, Result<Vec<(String, Pace)>, StoreError>> {
        self.0.load_paces()
    }

    fn save_paces(
        &self,
        paces: Vec<(String, Option<Pace>)>,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        self.0.save_paces(paces)
    }
}
