//! The store port's conformance suite as an embedder runs it on a store of
//! their own, through the public API alone: one call checks every rule; a
//! store that cannot be reopened has the rules of what survives a reopen
//! skipped; a store that breaks a rule is reported by the rule's name.

use std::collections::BTreeSet;
use std::sync::Arc;

use leasehold_actors::testing::conformance::{self, RuleOutcome, StoreFixture};
use leasehold_actors::{
    LayeredStore, MemoryStore, RunRecord, RunStatus, RunStore, Store, StoreError, StoreFuture,
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

/// The memory store under a layer that overrides nothing: what a wrapper
/// (metrics, fault injection, encryption) starts from, a few lines long.
struct Layered(MemoryStore);

impl LayeredStore for Layered {
    fn inner(&self) -> &dyn Store {
        &self.0
    }
}

struct LayeredFixture;

impl StoreFixture for LayeredFixture {
    type Place = MemoryStore;

    async fn fresh(&self) -> Result<MemoryStore, StoreError> {
        Ok(MemoryStore::new())
    }

    async fn open(&self, place: &MemoryStore) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(Layered(place.clone())))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_over_the_memory_store_keeps_every_rule_of_the_port() {
    let report = conformance::check(LayeredFixture).await;
    report.assert_passed();
    assert_eq!(report.passed().count(), conformance::rules().len());
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
            "counts_by_status_stay_exact_through_every_change_and_a_reopen",
            "learned_paces_are_kept_replaced_reset_and_survive_a_reopen",
            "api_keys_are_kept_once_listed_by_tenant_revoked_once_and_survive_a_reopen",
            "an_undelivered_notice_and_its_progress_survive_a_reopen",
        ]
    );
    assert!(report.to_string().contains("5 skipped"), "{report}");
    assert!(
        report.to_string().contains("cannot be reopened"),
        "{report}"
    );
}

/// A store that never finds an orphan: every write as the in-memory
/// store's (a layer over it), but `reconcile_orphans` marks nothing.
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
            // Its orphan goes uncounted as orphaned, as it goes unmarked.
            "counts_by_status_stay_exact_through_every_change_and_a_reopen",
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
    assert!(message.contains("6 failed"), "{message}");
}

/// A place that spoils its store when dropped: a stray run slips in, which
/// the rules that count or list runs see.
struct Spoiling(MemoryStore);

impl Drop for Spoiling {
    fn drop(&mut self) {
        let stray = RunRecord {
            trace_parent: None,
            tenant: None,
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

impl LayeredStore for NeverOrphans {
    fn inner(&self) -> &dyn Store {
        &self.0
    }

    fn reconcile_orphans(&self, _now_ms: u64) -> StoreFuture<Vec<String>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}
