//! The nudge queue: corrective messages for the *next* step of a loop.
//!
//! A `NUDGE` verdict cannot change a call already in flight, so its message
//! is queued here and the loop drains the queue when it builds its next
//! step. Draining empties it: a nudge is seen by exactly one step.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// What a loop is told when a person answers its pause, before their
/// words: how a person's answer is found in a transcript (a fork says what
/// it inherits of them).
pub(crate) const PERSON_ANSWERED: &str = "A person reviewed the escalation";

/// How a person's message to a run begins, as its root loop's next model
/// call reads it: what tells it from the watchdog's nudges.
pub(crate) const PERSON_MESSAGE: &str = "A message from ";

/// A loop's queue of pending nudges. Cheap to clone; clones share the queue.
#[derive(Clone, Debug, Default)]
pub struct NudgeQueue {
    inner: Arc<Mutex<VecDeque<String>>>,
}

impl NudgeQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `nudge` for the next step.
    pub fn push(&self, nudge: impl Into<String>) {
        self.lock().push_back(nudge.into());
    }

    /// Takes every pending nudge, oldest first: the next step's share.
    pub fn drain(&self) -> Vec<String> {
        self.lock().drain(..).collect()
    }

    /// The pending nudges, oldest first, left in the queue.
    pub fn peek(&self) -> Vec<String> {
        self.lock().iter().cloned().collect()
    }

    /// Whether a person's message is pending ([`PERSON_MESSAGE`]).
    pub(crate) fn holds_person_message(&self) -> bool {
        self.lock().iter().any(|n| n.starts_with(PERSON_MESSAGE))
    }

    /// How many nudges are pending.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no nudge is pending.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
