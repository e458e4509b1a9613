//! The conformance suite of the [`Store`] port: every rule a store keeps —
//! fencing, claims, orphans, what a store says of itself (shared,
//! exclusive) and the runs of a holder that is gone, tool-call records,
//! terminal writes, the event log, what survives a reopen, listing and
//! summaries, commands, idempotency keys, the change feed, the queue,
//! learned paces, API keys, the
//! outbox, retention, and agreement with [`MemoryStore`](crate::MemoryStore) outcome for
//! outcome — written once against `Arc<dyn Store>`, so that a store of
//! one's own (or a [`LayeredStore`](crate::LayeredStore) over one) is
//! checked with one call ([`check`]). leasehold checks its own stores
//! (memory, sled, PostgreSQL) with the same suite.
//!
//! The rules live in a file for each part of the port, as the stores'
//! implementations do: `runs`, `listing`, `counts`, `events`, `snapshots`, `queue`,
//! `outbox`, `paces`, `changes`, `retention`, and `whole` for the store as
//! a whole.
//!
//! The embedder's part is a [`StoreFixture`]: fresh, empty stores, one per
//! rule, and how to open each again. Each rule is a function of its own,
//! its name is what the [`ConformanceReport`] says, and its doc comment
//! says the rule; [`rules`] lists them in the order [`check`] runs them.
//!
//! Times are Unix milliseconds given to the store: a lease "expires" because
//! a later `now_ms` is passed, never because the suite sleeps, so the rules
//! are quick and the same on every run.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use crate::ports::{BoxFuture, Store, StoreError};

// The rules, a file for each part of the port (and `whole` for the store
// as a whole). Each rule takes a fresh store (or, to open it again or open
// other handles on it, its subject) and panics where the store breaks it.
mod api_keys;
mod changes;
mod counts;
mod events;
mod keys;
mod listing;
mod outbox;
mod paces;
mod queue;
mod retention;
mod runs;
mod snapshots;
mod whole;

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
    /// once every handle on it is dropped by a rule that reopens it. One
    /// rule also calls it while a handle is open, to see whether the store
    /// holds its place alone: a store one process at a time opens (sled)
    /// answers an error then, and says it is exclusive.
    fn open(
        &self,
        place: &Self::Place,
    ) -> impl Future<Output = Result<Arc<dyn Store>, StoreError>> + Send;

    /// Another handle on the data of `place` while `open` (a handle from
    /// [`open`](Self::open)) is open, as a second executor on the same data
    /// has one: a new pool on the same database. The default answers
    /// `open` itself, as a store one process opens at a time must; a store
    /// whose other handles are other stores says it is shared.
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
    ($($kind:ident: $part:ident::$rule:ident),* $(,)?) => {
        const RULES: &[Rule] = &[$(suite!(@rule $kind $part::$rule)),*];
    };
    (@rule store $part:ident::$rule:ident) => {
        Rule {
            name: stringify!($rule),
            reopens: false,
            run: |subject| {
                Box::pin(async move {
                    let Subject { store, place } = subject;
                    $part::$rule(store).await;
                    // Held until the rule ends: dropping a place may
                    // remove the store's data (its directory, its server).
                    drop(place);
                })
            },
        }
    };
    (@rule handles $part:ident::$rule:ident) => {
        Rule {
            name: stringify!($rule),
            reopens: false,
            run: |subject| Box::pin($part::$rule(subject)),
        }
    };
    (@rule reopen $part:ident::$rule:ident) => {
        Rule {
            name: stringify!($rule),
            reopens: true,
            run: |subject| Box::pin($part::$rule(subject)),
        }
    };
}

suite! {
    // Fencing and claims.
    store: runs::stale_fence_writes_are_refused_and_land_nothing,
    store: runs::a_write_racing_a_claim_lands_before_it_or_not_at_all,
    store: runs::claim_is_refused_while_another_lease_is_live,
    store: runs::claim_of_a_finished_run_is_refused,
    store: runs::concurrent_claims_yield_exactly_one_owner,
    // Orphans.
    store: runs::reconcile_marks_expired_running_runs_orphaned_with_the_message,
    store: runs::a_run_stopped_in_place_is_orphaned_as_stopped_and_claimed_clean,
    store: runs::orphaned_run_can_be_claimed_and_runs_again,
    // What a store says of itself, and the runs of a holder that is gone.
    handles: runs::a_store_is_shared_exactly_when_another_executors_handle_is_another_store,
    handles: runs::a_store_that_holds_its_place_alone_says_it_is_exclusive,
    store: runs::runs_of_a_gone_holder_are_orphaned_only_on_an_exclusive_store,
    // Tool-call records and the event log.
    store: snapshots::tool_calls_keep_one_record_per_idempotency_key,
    store: events::events_resume_after_an_event_id,
    store: events::events_appended_out_of_order_are_read_in_seq_order_each_once,
    // What a fork starts from.
    store: snapshots::snapshot_history_and_a_forks_lineage_are_kept_as_written,
    // A history that grows with the steps, and a fork that shares it.
    store: snapshots::a_loops_history_grows_with_its_steps_not_their_square,
    store: snapshots::a_fork_shares_its_parents_history_and_stores_only_its_own_steps,
    // Terminal writes, and what survives a reopen.
    reopen: whole::a_terminal_write_and_everything_before_it_survive_a_reopen,
    // Outcome for outcome, as the in-memory store.
    store: whole::the_store_answers_a_scripted_sequence_as_the_memory_store_does,
    // Listing, summaries and counts.
    store: listing::pages_list_what_the_listing_rule_selects_newest_first_by_byte_order,
    store: listing::summaries_cut_each_text_to_its_first_characters_as_the_rule_does,
    store: listing::runs_are_counted_by_status_as_they_are_recorded,
    reopen: counts::counts_by_status_stay_exact_through_every_change_and_a_reopen,
    store: listing::a_listing_as_seen_lists_a_run_nobody_runs_as_orphaned,
    // Commands and the change feed.
    store: queue::a_command_is_taken_once_and_by_the_runs_owner_only,
    store: changes::changes_are_published_for_writes_that_landed_and_only_those,
    // Idempotency keys.
    store: keys::a_key_creates_one_run_and_answers_it_while_it_holds,
    handles: keys::creations_racing_under_one_key_create_one_run,
    // The queue.
    store: queue::queued_runs_are_claimed_oldest_first_at_most_max,
    store: queue::queued_runs_are_claimed_in_fair_turns_across_tenants,
    store: queue::queued_runs_are_claimed_within_the_room_of_each_key,
    handles: queue::claimers_racing_claim_each_queued_run_exactly_once,
    // Learned paces.
    reopen: paces::learned_paces_are_kept_replaced_reset_and_survive_a_reopen,
    // API keys.
    reopen: api_keys::api_keys_are_kept_once_listed_by_tenant_revoked_once_and_survive_a_reopen,
    // The outbox.
    store: outbox::a_pause_or_an_end_keeps_one_notice_held_by_its_taker_until_settled,
    reopen: outbox::an_undelivered_notice_and_its_progress_survive_a_reopen,
    // Retention.
    store: retention::finished_runs_past_their_retention_go_with_everything_kept_of_them,
    store: retention::a_flows_retention_shortens_the_servers,
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
            message: crate::error::panic_message(panic.as_ref()),
        },
        Err(_) => RuleOutcome::Failed {
            message: format!("did not finish within {} s", RULE_PATIENCE.as_secs()),
        },
    }
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

    /// The store opened a second time while this handle is open, as a
    /// second process would open it: refused by a store one process at a
    /// time holds.
    async fn open_while_open(&self) -> Result<Arc<dyn Store>, StoreError> {
        self.place.open().await
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
