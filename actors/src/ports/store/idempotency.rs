//! Idempotency keys: a client that posts a run again with the same key — a
//! retry after a timeout — gets the run its first post started, not a
//! second one, on every store and across executors sharing one.
//!
//! A key is kept with the run it started and the fingerprint of what was
//! posted, for a retention period; a store answers a keyed creation in one
//! step ([`RunStore::create_run_keyed`](super::RunStore::create_run_keyed)):
//! either the key was free (or its retention over) and the run is created
//! with the key now its, or the key holds and the run it names is
//! answered, with its fingerprint, and nothing is created.

use serde::{Deserialize, Serialize};

/// A key a client gave to a run's creation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyKey {
    /// The client's key.
    pub key: String,
    /// What was posted under it, as a digest: a key reused for something
    /// else is told apart from a retry.
    pub fingerprint: String,
    /// When it was given (Unix ms).
    pub at_ms: u64,
    /// How long it holds from then, in milliseconds.
    pub retention_ms: u64,
}

impl IdempotencyKey {
    /// Whether a key given at `at_ms` with `retention_ms` still holds when
    /// this one is given.
    pub fn holds_against(&self, at_ms: u64, retention_ms: u64) -> bool {
        at_ms.saturating_add(retention_ms) > self.at_ms
    }
}

/// The fingerprint of what a run was created with — its flow, as the
/// store keeps it — by which a retry is told from a key reused for
/// another request: SHA-256 of the flow's JSON, in hex.
pub fn fingerprint(flow: &serde_json::Value) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(flow.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a keyed creation did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyedCreation {
    /// The key was free: the run was created, and the key is now its.
    Created,
    /// The key holds: nothing was created.
    Existing {
        /// The run the key started.
        run_id: String,
        /// The fingerprint it was given with.
        fingerprint: String,
    },
}

/// A key as a store keeps it: the run it started, with what and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptKey {
    /// The run the key started.
    pub run_id: String,
    /// What was posted under it.
    pub fingerprint: String,
    /// When it was given (Unix ms).
    pub at_ms: u64,
    /// How long it holds from then.
    pub retention_ms: u64,
}

impl KeptKey {
    /// The key kept for `run_id`, created under `key`.
    pub fn of(run_id: &str, key: &IdempotencyKey) -> Self {
        Self {
            run_id: run_id.to_owned(),
            fingerprint: key.fingerprint.clone(),
            at_ms: key.at_ms,
            retention_ms: key.retention_ms,
        }
    }

    /// Whether it still holds when `key` is given.
    pub fn holds_for(&self, key: &IdempotencyKey) -> bool {
        key.holds_against(self.at_ms, self.retention_ms)
    }

    /// The answer to a creation it holds against.
    pub fn existing(&self) -> KeyedCreation {
        KeyedCreation::Existing {
            run_id: self.run_id.clone(),
            fingerprint: self.fingerprint.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_for_its_retention_and_not_after() {
        let kept = KeptKey {
            run_id: "r".into(),
            fingerprint: "f".into(),
            at_ms: 1_000,
            retention_ms: 500,
        };
        let at = |at_ms| IdempotencyKey {
            key: "k".into(),
            fingerprint: "f".into(),
            at_ms,
            retention_ms: 500,
        };
        assert!(kept.holds_for(&at(1_000)));
        assert!(kept.holds_for(&at(1_499)));
        assert!(!kept.holds_for(&at(1_500)));
    }
}
