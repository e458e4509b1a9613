//! The conformance suite of the [`Store`] port: every rule a store keeps —
//! fencing, claims, orphans, tool-call records, terminal writes, the event
//! log, what survives a reopen, listing and summaries, commands, the change
//! feed, the queue, learned paces, retention, and agreement with
//! [`MemoryStore`] outcome for outcome — written once against
//! `Arc<dyn Store>`, so that a store of one's own is checked with one call
//! ([`check`]). leasehold checks its own stores (memory, sled, PostgreSQL)
//! with the same suite.
//!
//! The embedder's part is a [`StoreFixture`]: fresh, empty stores, one per
//! rule, and how to open each again. Each rule is a function of its own,
//! its name is what the [`ConformanceReport`] says, and its doc comment
//! says the rule; [`rules`] lists them in the order [`check`] runs them.
//!
//! Times are Unix milliseconds given to the store: a lease "expires" because
//! a later `now_ms` is passed, never because the suite sleeps, so the rules
//! are quick and the same on every run.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use super::records::*;
use crate::memory::MemoryStore;
use crate::pace::{CallPace, Pace, PaceBook, Spread};
use crate::ports::{
    BoxFuture, ChangeFeed, ClaimOutcome, Delivery, Notice, NoticeTake, PauseRecord, PurgeRule,
    QueueClaim, ReconcileDecision, RunCommand, RunQuery, RunRecord, RunStatus, RunSummary,
    RunUpdate, SUMMARY_CHARS, Snapshot, Store, StoreChange, StoreError, SummaryPage, ToolCallState,
    fencing, listing, seen,
};

/// What the suite needs of a store of one's own: fresh, empty stores, one
/// per rule, and how to open each again.
///
/// A store keeps its data in a *place* — a directory, a database — that
/// the fixture makes ([`fresh`](Self::fresh)) and opens
/// ([`open`](Self::open)). Each rule opens a fresh place once; the rules
/// of what survives a reopen drop every handle and open the place again,
/// and the rules of executors racing ask for
/// [`another_handle`](Self::another_handle) on the same data. A place is
/// dropped when its rule ends (a temporary directory removes itself then).
///
/// The methods may be written as `async fn`; see [`check`] for a whole
/// fixture.
pub trait StoreFixture: Send + Sync + 'static {
    /// Where one store keeps its data: a temporary directory, a database
    /// (and what keeps its server up), or, for a store in memory, the data
    /// itself.
    type Place: Send + Sync + 'static;

    /// A new place: a store opened on it holds no run, command or pace.
    fn fresh(&self) -> impl Future<Output = Result<Self::Place, StoreError>> + Send;

    /// The store on `place`: called once for each fresh place, and again
    /// once every handle on it is dropped by a rule that reopens it.
    fn open(
        &self,
        place: &Self::Place,
    ) -> impl Future<Output = Result<Arc<dyn Store>, StoreError>> + Send;

    /// Another handle on the data of `place` while `open` (a handle from
    /// [`open`](Self::open)) is open, as a second executor on the same data
    /// has one: a new pool on the same database. The default answers
    /// `open` itself, as a store one process opens at a time must.
    fn another_handle(
        &self,
        place: &Self::Place,
        open: &Arc<dyn Store>,
    ) -> impl Future<Output = Result<Arc<dyn Store>, StoreError>> + Send {
        let _ = place;
        let open = Arc::clone(open);
        async move { Ok(open) }
    }

    /// Whether [`open`](Self::open) on a place whose handles were all
    /// dropped answers a store holding what was written before: true (the
    /// default) for a durable store. A store that keeps nothing once its
    /// last handle is dropped answers false, and the rules of what survives
    /// a reopen are skipped, each reported as skipped.
    fn reopens(&self) -> bool {
        true
    }
}

/// How long one rule may take before it is reported failed: a store that
/// hangs fails its rule instead of hanging the suite.
pub const RULE_PATIENCE: Duration = Duration::from_secs(120);

/// Runs every rule of the store port on a fresh store of `fixture` each,
/// one after another, and reports which passed, which failed (with what
/// the rule panicked with) and which were skipped.
///
/// A rule that panics, or that takes longer than [`RULE_PATIENCE`], fails
/// alone: the suite goes on with the next rule. Run it on a multi-threaded
/// tokio runtime whose time is not paused, so that the rules of executors
/// racing race for real (`#[tokio::test(flavor = "multi_thread")]`).
///
/// A store of one's own checked with one call — here the in-memory store,
/// "reopened" as another handle on the same data:
///
/// ```
/// use std::sync::Arc;
///
/// use leasehold_actors::testing::conformance::{self, StoreFixture};
/// use leasehold_actors::{MemoryStore, Store, StoreError};
///
/// /// Fresh stores for the suite: each a new `MemoryStore`.
/// struct InMemory;
///
/// impl StoreFixture for InMemory {
///     // Clones of a `MemoryStore` share its data: the place is the store.
///     type Place = MemoryStore;
///
///     async fn fresh(&self) -> Result<MemoryStore, StoreError> {
///         Ok(MemoryStore::new())
///     }
///
///     async fn open(&self, place: &MemoryStore) -> Result<Arc<dyn Store>, StoreError> {
///         Ok(Arc::new(place.clone()))
///     }
/// }
///
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() {
/// conformance::check(InMemory).await.assert_passed();
/// # }
/// ```
pub async fn check<F: StoreFixture>(fixture: F) -> ConformanceReport {
    let fixture = Arc::new(fixture);
    let mut rules = Vec::with_capacity(RULES.len());
    for rule in RULES {
        rules.push(RuleReport {
            rule: rule.name,
            outcome: run_rule(&fixture, rule).await,
        });
    }
    ConformanceReport { rules }
}

/// Runs the one rule named `rule` on a fresh store of `fixture`, as
/// [`check`] runs each: for a test per rule, so that a failure names its
/// rule in the test's name.
///
/// # Panics
///
/// If no rule is named `rule` ([`rules`] lists them).
pub async fn check_rule<F: StoreFixture>(fixture: F, rule: &str) -> ConformanceReport {
    let found = RULES
        .iter()
        .find(|r| r.name == rule)
        .unwrap_or_else(|| panic!("no rule of the store port is named `{rule}`"));
    let outcome = run_rule(&Arc::new(fixture), found).await;
    ConformanceReport {
        rules: vec![RuleReport {
            rule: found.name,
            outcome,
        }],
    }
}

/// The name of every rule of the suite, in the order [`check`] runs them.
pub fn rules() -> impl ExactSizeIterator<Item = &'static str> {
    RULES.iter().map(|rule| rule.name)
}

/// What [`check`] found: each rule's outcome, in the order they ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConformanceReport {
    /// Each rule run, with its outcome.
    pub rules: Vec<RuleReport>,
}

/// One rule's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleReport {
    /// The rule: the name of its function in this module.
    pub rule: &'static str,
    /// Whether it held.
    pub outcome: RuleOutcome,
}

/// Whether a rule held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleOutcome {
    /// The store kept the rule.
    Passed,
    /// The store broke the rule, its fixture failed, or the rule did not
    /// finish within [`RULE_PATIENCE`].
    Failed {
        /// What the rule panicked with (an assertion's message), or why it
        /// did not finish.
        message: String,
    },
    /// Not run.
    Skipped {
        /// Why (a store that cannot be reopened).
        reason: String,
    },
}

impl ConformanceReport {
    /// The rules that passed.
    pub fn passed(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.rules
            .iter()
            .filter(|r| r.outcome == RuleOutcome::Passed)
            .map(|r| r.rule)
    }

    /// The rules that failed, each with its message.
    pub fn failed(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        self.rules.iter().filter_map(|r| match &r.outcome {
            RuleOutcome::Failed { message } => Some((r.rule, message.as_str())),
            _ => None,
        })
    }

    /// The rules that were skipped, each with why.
    pub fn skipped(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        self.rules.iter().filter_map(|r| match &r.outcome {
            RuleOutcome::Skipped { reason } => Some((r.rule, reason.as_str())),
            _ => None,
        })
    }

    /// Whether no rule failed (skipped rules do not fail the store).
    pub fn is_passed(&self) -> bool {
        self.failed().next().is_none()
    }

    /// Panics, listing every failed rule with its message, unless no rule
    /// failed.
    #[track_caller]
    pub fn assert_passed(&self) {
        assert!(
            self.is_passed(),
            "the store breaks rules of the port: {self}"
        );
    }
}

/// A count of each outcome, then every failed rule with its message and
/// every skipped rule with why.
impl fmt::Display for ConformanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rules: {} passed, {} failed, {} skipped",
            self.rules.len(),
            self.passed().count(),
            self.failed().count(),
            self.skipped().count()
        )?;
        for (rule, message) in self.failed() {
            // Indented, so that a message of many lines stays under its rule.
            write!(
                f,
                "\nfailed: {rule}\n    {}",
                message.replace('\n', "\n    ")
            )?;
        }
        for (rule, reason) in self.skipped() {
            write!(f, "\nskipped: {rule}: {reason}")?;
        }
        Ok(())
    }
}

/// One rule of the suite.
struct Rule {
    /// The rule's function.
    name: &'static str,
    /// Whether it reopens its store (skipped when the fixture's cannot be).
    reopens: bool,
    /// The rule, on a fresh store.
    run: fn(Subject) -> BoxFuture<'static, ()>,
}

/// The rule table, in the order [`check`] runs it: `store:` rules take the
/// store; `handles:` rules also open other handles on its data, and
/// `reopen:` rules open it again.
macro_rules! suite {
    ($($kind:ident: $rule:ident),* $(,)?) => {
        const RULES: &[Rule] = &[$(suite!(@rule $kind $rule)),*];
    };
    (@rule store $rule:ident) => {
        Rule {
            name: stringify!($rule),
            reopens: false,
            run: |subject| {
                Box::pin(async move {
                    let Subject { store, place } = subject;
                    $rule(store).await;
                    // Held until the rule ends: dropping a place may
                    // remove the store's data (its directory, its server).
                    drop(place);
                })
            },
        }
    };
    (@rule handles $rule:ident) => {
        Rule {
            name: stringify!($rule),
            reopens: false,
            run: |subject| Box::pin($rule(subject)),
        }
    };
    (@rule reopen $rule:ident) => {
        Rule {
            name: stringify!($rule),
            reopens: true,
            run: |subject| Box::pin($rule(subject)),
        }
    };
}

suite! {
    // Fencing and claims.
    store: stale_fence_writes_are_refused_and_land_nothing,
    store: a_write_racing_a_claim_lands_before_it_or_not_at_all,
    store: claim_is_refused_while_another_lease_is_live,
    store: claim_of_a_finished_run_is_refused,
    store: concurrent_claims_yield_exactly_one_owner,
    // Orphans.
    store: reconcile_marks_expired_running_runs_orphaned_with_the_message,
    store: a_run_stopped_in_place_is_orphaned_as_stopped_and_claimed_clean,
    store: orphaned_run_can_be_claimed_and_runs_again,
    // Tool-call records and the event log.
    store: tool_calls_keep_one_record_per_idempotency_key,
    store: events_resume_after_an_event_id,
    // What a fork starts from.
    store: snapshot_history_and_a_forks_lineage_are_kept_as_written,
    // Terminal writes, and what survives a reopen.
    reopen: a_terminal_write_and_everything_before_it_survive_a_reopen,
    // Outcome for outcome, as the in-memory store.
    store: the_store_answers_a_scripted_sequence_as_the_memory_store_does,
    // Listing, summaries and counts.
    store: pages_list_what_the_listing_rule_selects_newest_first_by_byte_order,
    store: summaries_cut_each_text_to_its_first_characters_as_the_rule_does,
    store: runs_are_counted_by_status_as_they_are_recorded,
    store: a_listing_as_seen_lists_a_run_nobody_runs_as_orphaned,
    // Commands and the change feed.
    store: a_command_is_taken_once_and_by_the_runs_owner_only,
    store: changes_are_published_for_writes_that_landed_and_only_those,
    // The queue.
    store: queued_runs_are_claimed_oldest_first_at_most_max,
    handles: claimers_racing_claim_each_queued_run_exactly_once,
    // Learned paces.
    reopen: learned_paces_are_kept_replaced_reset_and_survive_a_reopen,
    // The outbox.
    store: a_pause_or_an_end_keeps_one_notice_held_by_its_taker_until_settled,
    reopen: an_undelivered_notice_and_its_progress_survive_a_reopen,
    // Retention.
    store: finished_runs_past_their_retention_go_with_everything_kept_of_them,
    store: a_flows_retention_shortens_the_servers,
}

/// Runs `rule` on a fresh store of `fixture`: its outcome.
async fn run_rule<F: StoreFixture>(fixture: &Arc<F>, rule: &Rule) -> RuleOutcome {
    if rule.reopens && !fixture.reopens() {
        return RuleOutcome::Skipped {
            reason: "the fixture's store cannot be reopened".to_owned(),
        };
    }
    let fixture = Arc::clone(fixture);
    let run = rule.run;
    // The fixture's own work is in the attempt: a fixture that fails or
    // panics fails this rule alone.
    let attempt = async move {
        let place = fixture
            .fresh()
            .await
            .unwrap_or_else(|e| panic!("the fixture made no fresh store: {e}"));
        let store = fixture
            .open(&place)
            .await
            .unwrap_or_else(|e| panic!("the fixture did not open its fresh store: {e}"));
        run(Subject {
            store,
            place: Box::new(Placed { fixture, place }),
        })
        .await;
    };
    match tokio::time::timeout(RULE_PATIENCE, AssertUnwindSafe(attempt).catch_unwind()).await {
        Ok(Ok(())) => RuleOutcome::Passed,
        Ok(Err(panic)) => RuleOutcome::Failed {
            message: panic_message(panic.as_ref()),
        },
        Err(_) => RuleOutcome::Failed {
            message: format!("did not finish within {} s", RULE_PATIENCE.as_secs()),
        },
    }
}

/// What a panic said: its message, when it has one.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|message| (*message).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".to_owned())
}

/// One rule's store: the handle it works with, and its place, to open
/// other handles on it or open it again.
struct Subject {
    store: Arc<dyn Store>,
    place: Box<dyn Reopen>,
}

impl Subject {
    /// Another handle on the same data, as another executor would have.
    async fn another_handle(&self) -> Arc<dyn Store> {
        self.place
            .another_handle(&self.store)
            .await
            .unwrap_or_else(|e| panic!("the fixture opened no other handle: {e}"))
    }

    /// The same store, closed (every handle the rule held is dropped by
    /// then) and opened again.
    async fn reopened(self) -> Self {
        let Self { store, place } = self;
        drop(store);
        let store = place
            .open()
            .await
            .unwrap_or_else(|e| panic!("the fixture did not open the store again: {e}"));
        Self { store, place }
    }
}

/// A fixture's place, its type erased: the rules are written once, not
/// once per fixture.
trait Reopen: Send + Sync {
    /// [`StoreFixture::open`] on the place.
    fn open(&self) -> BoxFuture<'_, Result<Arc<dyn Store>, StoreError>>;
    /// [`StoreFixture::another_handle`] on the place.
    fn another_handle<'a>(
        &'a self,
        open: &'a Arc<dyn Store>,
    ) -> BoxFuture<'a, Result<Arc<dyn Store>, StoreError>>;
}

/// A place and the fixture that made it.
struct Placed<F: StoreFixture> {
    fixture: Arc<F>,
    place: F::Place,
}

impl<F: StoreFixture> Reopen for Placed<F> {
    fn open(&self) -> BoxFuture<'_, Result<Arc<dyn Store>, StoreError>> {
        Box::pin(self.fixture.open(&self.place))
    }

    fn another_handle<'a>(
        &'a self,
        open: &'a Arc<dyn Store>,
    ) -> BoxFuture<'a, Result<Arc<dyn Store>, StoreError>> {
        Box::pin(self.fixture.another_handle(&self.place, open))
    }
}

// The rules. Each takes a fresh store (or, to open it again or open other
// handles on it, its subject) and panics where the store breaks it.

/// Two executors on one store: once the second claims the run, every write
/// of the first (snapshot, tool call, events, status, heartbeat) is refused
/// as stale and none of it is readable, while the second's writes land.
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

/// A write racing a claim lands before it or not at all: once refused, the
/// old owner is refused for good, and the new owner reads its last write
/// that landed.
async fn a_write_racing_a_claim_lands_before_it_or_not_at_all(store: Arc<dyn Store>) {
    store.create_run(unowned("r")).await.unwrap();
    claimed(store.claim_run("r", "exec-a", 0, 10).await.unwrap());

    let a = store.clone();
    let writer = tokio::spawn(async move {
        // Writes until well after the claim: twenty refusals.
        let mut outcomes = Vec::new();
        let mut refused = 0;
        for step in 1..=1_000_000 {
            let outcome = a
                .save_snapshot(snapshot("r", "run", step, "a"), 1)
                .await
                .unwrap();
            outcomes.push(outcome.is_applied());
            refused += usize::from(!outcome.is_applied());
            if refused == 20 {
                break;
            }
            // A store whose writes never wait (in memory) would otherwise
            // keep a runtime of one thread from ever running the claim.
            tokio::task::yield_now().await;
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

/// A claim is refused while another executor's lease is live and changes
/// nothing; the owner may claim again (the fence still goes up), and at its
/// expiry instant a lease is no longer live.
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

/// A terminal status releases the run's lease, and a finished run cannot be
/// claimed.
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

/// Many executors claiming one run at once yield exactly one owner, and
/// every other is told who it is.
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

/// Reconciliation marks the running runs whose lease expired `orphaned` with
/// `fencing::ORPHANED`, leaves live, paused and finished runs alone, and
/// changes nothing done twice.
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

/// An orphaned run is claimed by another executor with its snapshots kept,
/// and runs again to its end.
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

/// A tool call keeps one record per idempotency key, the latest, read in key
/// order.
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

/// Every snapshot saved is kept in its run's history, in the order of its
/// place ([`Snapshot::seq`]), beside the latest of each loop; a fork's
/// lineage, and a tool call's place, maker and whether a person gave its
/// result, read back as written; runs' histories do not mix.
async fn snapshot_history_and_a_forks_lineage_are_kept_as_written(store: Arc<dyn Store>) {
    let mut record = unowned("fork");
    record.fork = Some(crate::ports::ForkOrigin {
        parent: "parent".to_owned(),
        path: "run/worker:research:1".to_owned(),
        step: 2,
        seq: 7,
        guidance: Some("cite the sources".to_owned()),
        changes: vec!["leases.tool_call=30s".to_owned()],
        person_answers: vec!["A person reviewed the escalation and answered: go".to_owned()],
    });
    // Started within a caller's trace, too: kept as written.
    record.trace_parent = Some(
        crate::TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid"),
    );
    store.create_run(record.clone()).await.unwrap();
    store.create_run(unowned("other")).await.unwrap();
    let run = claimed(store.claim_run("fork", "exec-a", 1_000, TTL).await.unwrap());
    assert_eq!(run.fork, record.fork, "the lineage, read back from a claim");
    assert_eq!(run.trace_parent, record.trace_parent, "the caller's trace");
    let other = store.load_run("other").await.unwrap().unwrap();
    assert_eq!(other.trace_parent, None);
    let other = claimed(
        store
            .claim_run("other", "exec-a", 1_000, TTL)
            .await
            .unwrap(),
    );
    let saves = [
        ("run", 1, 3),
        ("run/worker:research:1", 1, 4),
        ("run", 2, 9),
    ];
    // Written out of their order: the history is read in it.
    for (path, step, seq) in saves.iter().rev() {
        let mut saved = snapshot("fork", path, *step, &format!("{path} at {step}"));
        saved.seq = *seq;
        assert!(
            store
                .save_snapshot(saved, run.fence)
                .await
                .unwrap()
                .is_applied()
        );
    }
    assert!(
        store
            .save_snapshot(snapshot("other", "run", 1, "elsewhere"), other.fence)
            .await
            .unwrap()
            .is_applied()
    );
    let history = store.load_snapshot_history("fork").await.unwrap();
    let read: Vec<(&str, u32, u64)> = history
        .iter()
        .map(|s| (s.path.as_str(), s.step, s.seq))
        .collect();
    assert_eq!(read, saves, "every snapshot, in the order of its place");
    assert_eq!(history[2].state["transcript"][0]["content"], "run at 2");
    assert_eq!(
        store.load_snapshots("fork").await.unwrap().len(),
        2,
        "the latest of each loop"
    );
    assert_eq!(store.load_snapshot_history("other").await.unwrap().len(), 1);
    let mut call = tool_call("parent/run/1/0", 1, ToolCallState::Done);
    call.seq = 2;
    call.by_person = true;
    call.made_by = Some("parent".to_owned());
    assert!(
        store
            .record_tool_call("fork", call.clone(), run.fence)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(store.load_tool_calls("fork").await.unwrap(), vec![call]);
    assert_eq!(
        store.load_run("fork").await.unwrap().unwrap().fork,
        record.fork
    );
}

/// The event log is read after any event id in `seq` order (numeric, not
/// textual), its last event alone is the numerically last, and runs' logs
/// do not mix.
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
    // The last event is read alone, numerically last.
    assert_eq!(
        store.last_event("run-1").await.unwrap(),
        events("run-1", [65_536]).pop()
    );
    assert_eq!(
        store.last_event("run-10").await.unwrap(),
        events("run-10", [4]).pop()
    );
    assert_eq!(store.last_event("run-2").await.unwrap(), None);
}

/// A terminal write and everything written before it survive closing and
/// reopening the store, and the ended run cannot be claimed.
async fn a_terminal_write_and_everything_before_it_survive_a_reopen(subject: Subject) {
    let store = Arc::clone(&subject.store);
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

    let subject = subject.reopened().await;
    let store = &subject.store;
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

/// The store answers a scripted sequence of operations outcome for outcome
/// as `MemoryStore` does.
async fn the_store_answers_a_scripted_sequence_as_the_memory_store_does(store: Arc<dyn Store>) {
    let memory = script(&MemoryStore::new()).await;
    let got = script(&*store).await;
    for (expected, got) in memory.iter().zip(&got) {
        assert_eq!(got, expected, "the stores disagree");
    }
    assert_eq!(got.len(), memory.len());
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

/// Pages list the runs `listing::matches` selects, newest first in the byte
/// order of their ids (not a locale's collation), followed to the end by
/// their cursors, and pages of summaries are cut the same.
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
async fn a_listing_as_seen_lists_a_run_nobody_runs_as_orphaned(store: Arc<dyn Store>) {
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

/// Runs are counted by status as they are recorded, every status of
/// `RunStatus::ALL` once and in that order, and the count of one status
/// agrees.
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

/// A command stored for a run is taken once, in id order, and only by the
/// executor that holds the run when it is taken; each run's waiting commands
/// are counted, and a command for no run is refused.
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

/// A change is published for each write that landed — a run's record, new
/// events, a stored command, an orphan — and none for a write a stale
/// fence refused or for a heartbeat.
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

/// Queued runs are claimed oldest first, at most `max` at a time, each as
/// `fencing::claim_queued` makes it, and no run in another status is claimed
/// from the queue.
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

/// A claim of at most `max` queued runs by `owner_id` at `now_ms`.
fn claim(owner_id: &str, now_ms: u64, max: usize) -> QueueClaim {
    QueueClaim {
        owner_id: owner_id.to_owned(),
        now_ms,
        ttl_ms: TTL,
        max,
    }
}

/// A queued run, unowned.
fn queued(run_id: &str) -> RunRecord {
    run_record(run_id, None, 0, 0, RunStatus::Queued)
}

/// The ids of the queued runs, newest first.
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

/// Claimers racing on separate handles over 50 queued runs claim each
/// exactly once, and a claimed run is no longer queued.
async fn claimers_racing_claim_each_queued_run_exactly_once(subject: Subject) {
    const RUNS: usize = 50;
    const CLAIMERS: usize = 5;
    for n in 0..RUNS {
        subject
            .store
            .create_run(queued(&format!("q{n:03}")))
            .await
            .unwrap();
    }
    let start = Arc::new(tokio::sync::Barrier::new(CLAIMERS));
    let mut claimers = Vec::new();
    for i in 0..CLAIMERS {
        let (store, start) = (subject.another_handle().await, Arc::clone(&start));
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
    let mut owners = BTreeMap::new();
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
        let stored = subject.store.load_run(run_id).await.unwrap().unwrap();
        assert_eq!(stored.owner_id, Some(format!("exec-{i}")), "{run_id}");
        assert_eq!(stored.status, RunStatus::Running);
    }
    assert!(queued_ids(subject.store.as_ref()).await.is_empty());
}

/// Learned paces are kept, replaced when learned again, deleted by a reset,
/// and survive a reopen.
async fn learned_paces_are_kept_replaced_reset_and_survive_a_reopen(subject: Subject) {
    let book = PaceBook::new();
    let call = |first: f64, interval: f64| CallPace {
        first_item_ms: Some(first),
        intervals: Some((
            10,
            Spread {
                mean_ms: interval,
                std_ms: interval / 10.0,
            },
        )),
    };
    book.learn(
        "model_stream:model a at http://127.0.0.1:1/v1",
        1,
        &call(300.0, 50.0),
    );
    book.learn("tool_call:search", 1, &call(2_000.0, 1_000.0));
    book.learn("worker_step:worker:w", 1, &call(10_000.0, 10_000.0));
    let store = Arc::clone(&subject.store);
    store.save_paces(book.take_changed()).await.unwrap();
    // Learned again: replaced, not added. Reset: gone.
    book.learn("tool_call:search", 2, &call(1_000.0, 500.0));
    book.reset("worker_step:worker:w");
    store.save_paces(book.take_changed()).await.unwrap();
    store.flush().await.unwrap();
    drop(store);
    let subject = subject.reopened().await;
    let kept: Vec<(String, Pace)> = subject.store.load_paces().await.unwrap();
    let expected: Vec<(String, Pace)> = book.all().into_iter().collect();
    assert_eq!(kept, expected);
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(kept[1].1.calls, 2, "{kept:?}");
}

fn purge_rule(now_ms: u64, retention_ms: Option<u64>, limit: usize) -> PurgeRule {
    PurgeRule {
        now_ms,
        retention_ms,
        limit,
    }
}

/// Whether nothing is kept of `run_id`.
async fn gone(store: &dyn Store, run_id: &str) -> bool {
    store.load_run(run_id).await.unwrap().is_none()
        && store.load_snapshots(run_id).await.unwrap().is_empty()
        && store
            .load_snapshot_history(run_id)
            .await
            .is_ok_and(|history| history.is_empty())
        && store.load_tool_calls(run_id).await.unwrap().is_empty()
        && store.load_events(run_id, 0).await.unwrap().is_empty()
}

/// Whether all of `run_id` is kept: both loops' snapshots, its call, its
/// events and its command.
async fn whole(store: &dyn Store, run_id: &str) -> bool {
    store.load_run(run_id).await.unwrap().is_some()
        && store.load_snapshots(run_id).await.unwrap().len() == LOOPS.len()
        && store.load_tool_calls(run_id).await.unwrap().len() == 1
        && store.load_events(run_id, 0).await.unwrap().len() == 3
        && store.count_commands(run_id).await.unwrap() == 1
}

/// Every id a listing shows, newest first.
async fn listed(store: &dyn Store) -> Vec<String> {
    let page = store.list_runs_page(&RunQuery::first(100)).await.unwrap();
    page.runs.into_iter().map(|r| r.run_id).collect()
}

/// Finished runs past their retention are deleted in batches of at most the
/// limit, each with everything kept of it, and a run that lives, waits for a
/// person or ended recently is left whole.
async fn finished_runs_past_their_retention_go_with_everything_kept_of_them(store: Arc<dyn Store>) {
    let store = store.as_ref();
    for (run_id, status) in [
        ("r1-completed", RunStatus::Completed),
        ("r2-failed", RunStatus::Failed),
        ("r3-cancelled", RunStatus::Cancelled),
    ] {
        record_run(store, run_id, status, 1_000, None).await;
    }
    // Of the same age, or older: never deleted.
    record_run(store, "r4-waiting", RunStatus::WaitingHuman, 500, None).await;
    let reconcile = RunStatus::ReconciliationRequired;
    record_run(store, "r5-reconcile", reconcile, 500, None).await;
    record_run(store, "r6-running", RunStatus::Running, 500, None).await;
    record_run(store, "r7-orphaned", RunStatus::Orphaned, 500, None).await;
    record_run(store, "r8-recent", RunStatus::Completed, 9_500, None).await;

    // Not yet due: nothing goes.
    let early = store
        .purge_finished(purge_rule(5_999, Some(5_000), 10))
        .await;
    assert_eq!(early.unwrap().purged, Vec::<String>::new());
    // Two at most a batch: the first says there is more.
    let first = store
        .purge_finished(purge_rule(10_000, Some(5_000), 2))
        .await;
    let first = first.unwrap();
    assert_eq!(first.purged.len(), 2, "{first:?}");
    assert!(first.more);
    let second = store
        .purge_finished(purge_rule(10_000, Some(5_000), 2))
        .await;
    let second = second.unwrap();
    assert_eq!(second.purged.len(), 1, "{second:?}");
    assert!(!second.more);
    let mut purged = [first.purged, second.purged].concat();
    purged.sort();
    assert_eq!(purged, ["r1-completed", "r2-failed", "r3-cancelled"]);
    for run_id in &purged {
        assert!(gone(store, run_id).await, "{run_id} left something");
        assert_eq!(store.count_commands(run_id).await.unwrap(), 0);
    }
    // Their undelivered notices went with them; the paused runs' stay.
    let mut noticed: Vec<String> = every_notice(store, 1 << 50)
        .await
        .into_iter()
        .map(|notice| notice.run_id)
        .collect();
    noticed.sort();
    assert_eq!(noticed, ["r4-waiting", "r5-reconcile", "r8-recent"]);
    for run_id in [
        "r4-waiting",
        "r5-reconcile",
        "r6-running",
        "r7-orphaned",
        "r8-recent",
    ] {
        assert!(whole(store, run_id).await, "{run_id} was touched");
    }
    assert_eq!(
        listed(store).await,
        [
            "r8-recent",
            "r7-orphaned",
            "r6-running",
            "r5-reconcile",
            "r4-waiting"
        ]
    );
    let finished = store.count_runs(RunStatus::Completed).await.unwrap();
    assert_eq!(finished, 1, "the status index forgot the deleted runs");
    // A run deleted answers as one that never was.
    let another = store
        .purge_finished(purge_rule(10_000, Some(5_000), 2))
        .await;
    assert!(another.unwrap().purged.is_empty());
}

/// A flow's retention shortens the server's for its runs, also when the
/// server keeps runs for ever, and the server's retention caps a flow's
/// longer one.
async fn a_flows_retention_shortens_the_servers(store: Arc<dyn Store>) {
    let store = store.as_ref();
    record_run(store, "f1-short", RunStatus::Completed, 1_000, Some("1s")).await;
    record_run(store, "f2-long", RunStatus::Completed, 1_000, Some("1h")).await;
    record_run(store, "f3-plain", RunStatus::Failed, 1_000, None).await;
    // Kept for ever by the server, but not by its flow.
    let report = store
        .purge_finished(purge_rule(2_000, None, 10))
        .await
        .unwrap();
    assert_eq!(report.purged, ["f1-short"]);
    assert!(gone(store, "f1-short").await);
    // The server's retention holds a longer flow's to it.
    let report = store
        .purge_finished(purge_rule(61_000, Some(60_000), 10))
        .await;
    let mut purged = report.unwrap().purged;
    purged.sort();
    assert_eq!(purged, ["f2-long", "f3-plain"]);
    assert!(listed(store).await.is_empty());
}

/// Every notice due at `now_ms`, taken (and so held) at once.
async fn every_notice(store: &dyn Store, now_ms: u64) -> Vec<Notice> {
    let take = NoticeTake {
        now_ms,
        hold_ms: 1,
        max: usize::MAX,
    };
    store.take_notices(take).await.unwrap()
}

/// A take at `now_ms` holding for 1 000 ms, at most `max`.
fn notice_take(now_ms: u64, max: usize) -> NoticeTake {
    NoticeTake {
        now_ms,
        hold_ms: 1_000,
        max,
    }
}

/// A pause and an end each keep one notice, with the change that made it
/// ([`outbox::notice_of`](crate::outbox::notice_of)); a resume, a
/// heartbeat and a refused write keep none. A take answers due notices
/// oldest first, at most its `max`, and holds them: taken again only once
/// the hold passed. Only the latest taker settles: removing it, or keeping
/// its progress until its next due time.
async fn a_pause_or_an_end_keeps_one_notice_held_by_its_taker_until_settled(store: Arc<dyn Store>) {
    let mut record = unowned("r");
    record.flow = serde_json::json!({"name": "research", "notify": ["ops"]});
    store.create_run(record).await.unwrap();
    let run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    assert!(every_notice(store.as_ref(), 1 << 50).await.is_empty());

    let pause = RunUpdate {
        pause: Some(PauseRecord {
            reason: "asked a person".to_owned(),
            subject: "search".to_owned(),
            path: "run".to_owned(),
            call: None,
        }),
        ..update(RunStatus::WaitingHuman, 1_100)
    };
    assert!(
        store
            .update_run("r", run.fence, pause)
            .await
            .unwrap()
            .is_applied()
    );
    // Refused: a stale fence keeps no notice.
    let stale_end = store.update_run("r", run.fence + 9, update(RunStatus::Failed, 1_150));
    assert!(!stale_end.await.unwrap().is_applied());
    assert!(
        store
            .renew_run("r", run.fence, 1_160, TTL)
            .await
            .unwrap()
            .is_applied()
    );
    // Resumed, then ended.
    let resumed = store.update_run("r", run.fence, update(RunStatus::Running, 1_200));
    assert!(resumed.await.unwrap().is_applied());
    let mut done = update(RunStatus::Completed, 1_300);
    done.answer = Some("42".to_owned());
    assert!(
        store
            .update_run("r", run.fence, done)
            .await
            .unwrap()
            .is_applied()
    );

    // Not due before the change.
    assert!(
        store
            .take_notices(notice_take(1_099, 10))
            .await
            .unwrap()
            .is_empty()
    );
    // At most `max`, oldest first, held from now.
    let first = store.take_notices(notice_take(2_000, 1)).await.unwrap();
    assert_eq!(first.len(), 1, "{first:?}");
    let paused = &first[0];
    assert_eq!(
        (
            paused.run_id.as_str(),
            paused.status,
            paused.at_ms,
            paused.flow.as_deref(),
            paused.notify.clone(),
            paused.pause.as_ref().map(|p| p.reason.as_str()),
            paused.delivery.due_at_ms,
            paused.delivery.attempts,
        ),
        (
            "r",
            RunStatus::WaitingHuman,
            1_100,
            Some("research"),
            vec!["ops".to_owned()],
            Some("asked a person"),
            3_000,
            0
        )
    );
    let rest = store.take_notices(notice_take(2_000, 10)).await.unwrap();
    assert_eq!(rest.len(), 1, "{rest:?}");
    let ended = &rest[0];
    assert!(
        paused.id < ended.id,
        "ids go up: {} then {}",
        paused.id,
        ended.id
    );
    assert_eq!(
        (ended.status, ended.answer.as_deref()),
        (RunStatus::Completed, Some("42"))
    );
    // Held: nothing is due until the hold passed.
    assert!(
        store
            .take_notices(notice_take(2_999, 10))
            .await
            .unwrap()
            .is_empty()
    );

    // The hold passed: another taker holds them; the first taker's
    // settlement no longer counts.
    let again = store.take_notices(notice_take(3_000, 10)).await.unwrap();
    let ids = |notices: &[Notice]| notices.iter().map(|n| n.id).collect::<Vec<_>>();
    assert_eq!(ids(&again), [paused.id, ended.id]);
    assert!(!store.settle_notice(paused.id, 3_000, None).await.unwrap());
    // The latest taker keeps its progress, due again at 9 000.
    let progress = Delivery {
        due_at_ms: 9_000,
        attempts: 1,
        delivered: vec!["audit".to_owned()],
        last_error: Some("ops: connection refused".to_owned()),
    };
    assert!(
        store
            .settle_notice(paused.id, 4_000, Some(progress.clone()))
            .await
            .unwrap()
    );
    assert!(store.settle_notice(ended.id, 4_000, None).await.unwrap());
    assert!(
        !store.settle_notice(ended.id, 4_000, None).await.unwrap(),
        "settled once"
    );
    assert!(
        store
            .take_notices(notice_take(8_999, 10))
            .await
            .unwrap()
            .is_empty()
    );
    let later = store.take_notices(notice_take(9_000, 10)).await.unwrap();
    assert_eq!(ids(&later), [paused.id]);
    assert_eq!(
        later[0].delivery,
        Delivery {
            due_at_ms: 10_000,
            ..progress
        }
    );
    assert!(store.settle_notice(paused.id, 10_000, None).await.unwrap());
    assert!(every_notice(store.as_ref(), 1 << 50).await.is_empty());
}

/// A notice not yet delivered, and the progress of its delivery, survive
/// a reopen.
async fn an_undelivered_notice_and_its_progress_survive_a_reopen(subject: Subject) {
    let store = Arc::clone(&subject.store);
    store.create_run(unowned("r")).await.unwrap();
    let run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    let failed = store.update_run("r", run.fence, update(RunStatus::Failed, 1_100));
    assert!(failed.await.unwrap().is_applied());
    let taken = store.take_notices(notice_take(1_100, 10)).await.unwrap();
    assert_eq!(taken.len(), 1);
    let progress = Delivery {
        due_at_ms: 5_000,
        attempts: 2,
        delivered: vec!["ops".to_owned()],
        last_error: None,
    };
    let settled = store.settle_notice(taken[0].id, 2_100, Some(progress.clone()));
    assert!(settled.await.unwrap());
    store.flush().await.unwrap();
    drop(store);

    let subject = subject.reopened().await;
    let again = subject
        .store
        .take_notices(notice_take(5_000, 10))
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(
        (again[0].id, again[0].status, &again[0].delivery),
        (
            taken[0].id,
            RunStatus::Failed,
            &Delivery {
                due_at_ms: 6_000,
                ..progress
            }
        )
    );
}
