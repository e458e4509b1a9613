//! The usage ledger: tokens spent, per consumer.
//!
//! Every completed model call adds the usage the server reported to the
//! entry of its [`ModelRequest::consumer`](leasehold_actors::ModelRequest) —
//! `run`, `worker:NAME`, `engine.watchdog`, `engine.budget` — so a user can
//! read what each part of a run cost. The ledger is shared: clones see the
//! same entries. Additions saturate; they never wrap or panic.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use leasehold_actors::TokenCost;

/// Tokens spent per consumer. Cheap to clone; clones share the entries.
#[derive(Clone, Debug, Default)]
pub struct UsageLedger {
    entries: Arc<Mutex<BTreeMap<String, TokenCost>>>,
}

impl UsageLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, TokenCost>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `cost` to `consumer`'s entry.
    pub fn record(&self, consumer: &str, cost: TokenCost) {
        let mut entries = self.lock();
        let entry = entries.entry(consumer.to_owned()).or_default();
        entry.input_tokens = entry.input_tokens.saturating_add(cost.input_tokens);
        entry.output_tokens = entry.output_tokens.saturating_add(cost.output_tokens);
    }

    /// Every consumer's total so far.
    pub fn snapshot(&self) -> BTreeMap<String, TokenCost> {
        self.lock().clone()
    }

    /// `consumer`'s total so far (zero if it spent nothing).
    pub fn of(&self, consumer: &str) -> TokenCost {
        self.lock().get(consumer).copied().unwrap_or_default()
    }

    /// The total over every consumer.
    pub fn total(&self) -> TokenCost {
        self.lock()
            .values()
            .fold(TokenCost::default(), |sum, cost| TokenCost {
                counted: false,
                input_tokens: sum.input_tokens.saturating_add(cost.input_tokens),
                output_tokens: sum.output_tokens.saturating_add(cost.output_tokens),
            })
    }
}
