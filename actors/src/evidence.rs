//! Evidence: the liveness signals an operation reports to its lease.
//!
//! A streaming model call reports each chunk, a tool call each MCP progress
//! notification, a worker each completed step. Reporting costs no message:
//! the operation writes into the lease's [`Evidence`] cell (a short,
//! uncontended lock) and the watchdog reads it when the lease expires. The
//! cell keeps the inter-arrival times for the lease's phi accrual detector,
//! so a stream that has emitted tokens for twenty minutes never looks like a
//! mute socket.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::event::EventKind;
use crate::lease::LeaseMeta;
use crate::ports::EventSink;
use crate::watchdog::accrual::{AccrualConfig, ArrivalWindow};

/// The evidence cell of one lease. Cheap to clone; hand a clone to whatever
/// does the work.
#[derive(Clone)]
pub struct Evidence {
    inner: Arc<EvidenceInner>,
}

struct EvidenceInner {
    state: Mutex<EvidenceState>,
    announce: Option<(Arc<LeaseMeta>, Arc<dyn EventSink>)>,
}

#[derive(Default)]
struct EvidenceState {
    count: u64,
    last: Option<Instant>,
    window: ArrivalWindow,
    note: Option<String>,
}

/// What the watchdog knows of a lease's liveness when it expires.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EvidenceSummary {
    /// Evidence items received since the operation started.
    pub count: u64,
    /// Milliseconds since the last item; `None` if there was none.
    pub last_progress_age_ms: Option<u64>,
    /// The accrual detector's suspicion level; `None` if there was no
    /// evidence at all (silence from the start).
    pub phi: Option<f64>,
    /// The last progress note, if the operation gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_note: Option<String>,
}

impl Evidence {
    pub(crate) fn for_lease(meta: Arc<LeaseMeta>, events: Arc<dyn EventSink>) -> Self {
        Self::build(Some((meta, events)))
    }

    /// A cell attached to no lease, for operations run outside supervision
    /// and for tests.
    pub fn detached() -> Self {
        Self::build(None)
    }

    fn build(announce: Option<(Arc<LeaseMeta>, Arc<dyn EventSink>)>) -> Self {
        Self {
            inner: Arc::new(EvidenceInner {
                state: Mutex::new(EvidenceState::default()),
                announce,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, EvidenceState> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records one item of evidence without an event: for high-rate signals
    /// such as stream chunks.
    pub fn observe(&self) {
        self.record(Instant::now());
    }

    /// Records one item of evidence and publishes a `progress` event with
    /// `note`: for discrete signals such as an MCP progress notification or a
    /// worker's completed step.
    pub fn progress(&self, note: impl Into<String>) {
        let note = note.into();
        let count = {
            let mut state = self.state();
            let count = state.arrive(Instant::now());
            state.note = Some(note.clone());
            count
        };
        if let Some((meta, events)) = &self.inner.announce {
            events.emit(
                &meta.run_id,
                &meta.path,
                EventKind::Progress {
                    lease_id: meta.id,
                    count,
                    note: Some(note),
                },
            );
        }
    }

    fn record(&self, at: Instant) {
        self.state().arrive(at);
    }

    /// Evidence items received so far.
    pub fn count(&self) -> u64 {
        self.state().count
    }

    /// The summary the watchdog judges by, with phi computed under `config`.
    pub fn summary(&self, now: Instant, config: &AccrualConfig) -> EvidenceSummary {
        let state = self.state();
        let age = state.last.map(|last| now.saturating_duration_since(last));
        EvidenceSummary {
            count: state.count,
            last_progress_age_ms: age.map(|a| u64::try_from(a.as_millis()).unwrap_or(u64::MAX)),
            phi: age.map(|a| state.window.phi(a, config)),
            last_note: state.note.clone(),
        }
    }
}

impl EvidenceState {
    fn arrive(&mut self, at: Instant) -> u64 {
        if let Some(last) = self.last {
            self.window.push(at.saturating_duration_since(last));
        }
        self.last = Some(at);
        self.count += 1;
        self.count
    }
}

impl std::fmt::Debug for Evidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evidence")
            .field("count", &self.count())
            .finish_non_exhaustive()
    }
}
