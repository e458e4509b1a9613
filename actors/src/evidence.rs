//! Evidence: the liveness signals an operation reports to its lease.
//!
//! A streaming model call reports each chunk, a tool call each MCP progress
//! notification, a worker each completed step. Reporting costs no message:
//! the operation writes into the lease's [`Evidence`] cell (a short,
//! uncontended lock) and the watchdog reads it when the lease expires. The
//! cell keeps the inter-arrival times for the lease's phi accrual detector,
//! so a stream that has emitted tokens for twenty minutes never looks like a
//! mute socket.
//!
//! A stream also reports its text ([`Evidence::observe_text`]): the cell keeps
//! the last [`TAIL_BYTES`] of it, so that the evaluator can be shown what the
//! evidence carried, and the summary reports how much of that tail repeats
//! itself ([`repetition`]) — evidence earns renewals, not immunity.
//!
//! A progress report ([`Evidence::progress`]) is bounded by the engine's
//! [`EventLimits`]: its note is cut to `max_progress_note_bytes`, and an
//! operation publishes at most one `progress` event per `progress_interval`
//! — the reports in between count as evidence all the same, and the next
//! event (or the last, when the operation ends) says how many reports it
//! stands for. A server that floods progress renews its lease as before;
//! it no longer writes the log at its own pace.
//!
//! While the run is paused the evidence does not age: the lease actor tells
//! the cell when a pause starts and ends, and the pause counts neither in the
//! age of the last item nor in the inter-arrival history phi is computed on.

mod repetition;

pub use repetition::{MIN_TRIGRAMS, repetition};

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::event::{EventKind, EventLimits, cut_note};
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
    limits: EventLimits,
}

/// How much of a stream's text the cell keeps: the tail shown to the
/// evaluator and measured for repetition (2 KiB, a few hundred words).
pub const TAIL_BYTES: usize = 2048;

#[derive(Default)]
struct EvidenceState {
    count: u64,
    last: Option<Instant>,
    window: ArrivalWindow,
    note: Option<String>,
    /// The text reported so far, at most `2 × TAIL_BYTES`: trimmed to
    /// `TAIL_BYTES` only when it doubles, so appending stays cheap.
    text: String,
    /// When the current pause started (or, if evidence arrived during it,
    /// when that last item arrived): time from here on does not count.
    paused_since: Option<Instant>,
    /// When the last `progress` event was published.
    published: Option<Instant>,
    /// Progress reports since then that no event has said yet.
    unsaid: u64,
}

/// What the watchdog knows of a lease's liveness when it expires.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EvidenceSummary {
    /// Evidence items received since the operation started.
    pub count: u64,
    /// Milliseconds since the last item, time paused excluded; `None` if
    /// there was none.
    pub last_progress_age_ms: Option<u64>,
    /// The accrual detector's suspicion level; `None` if there was no
    /// evidence at all (silence from the start).
    pub phi: Option<f64>,
    /// The last progress note, if the operation gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_note: Option<String>,
    /// The share of repeated word 3-grams in the tail of a stream's text,
    /// from 0 to almost 1 (see [`repetition`]); `None` when the operation
    /// reported too little text to judge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition: Option<f64>,
}

impl Evidence {
    pub(crate) fn for_lease(
        meta: Arc<LeaseMeta>,
        events: Arc<dyn EventSink>,
        limits: EventLimits,
    ) -> Self {
        Self::build(Some((meta, events)), limits)
    }

    /// A cell attached to no lease, for operations run outside supervision
    /// and for tests.
    pub fn detached() -> Self {
        Self::build(None, EventLimits::default())
    }

    fn build(announce: Option<(Arc<LeaseMeta>, Arc<dyn EventSink>)>, limits: EventLimits) -> Self {
        Self {
            inner: Arc::new(EvidenceInner {
                state: Mutex::new(EvidenceState::default()),
                announce,
                limits,
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

    /// Records one chunk of a stream with its text, without an event. The
    /// cell keeps the last [`TAIL_BYTES`] of the text, for the evaluator and
    /// the repetition signal; a chunk with no text is still evidence.
    pub fn observe_text(&self, text: &str) {
        let mut state = self.state();
        state.arrive(Instant::now());
        state.push_text(text);
    }

    /// The last [`TAIL_BYTES`] (or fewer) of the text reported with
    /// [`Evidence::observe_text`], cut on a character boundary; `None` if
    /// no text was reported.
    pub fn tail(&self) -> Option<String> {
        let state = self.state();
        Some(tail_of(&state.text, TAIL_BYTES).to_owned()).filter(|t| !t.is_empty())
    }

    /// The run was paused at `at`: from now on, time does not age the
    /// evidence.
    pub(crate) fn pause(&self, at: Instant) {
        let mut state = self.state();
        if state.paused_since.is_none() {
            state.paused_since = Some(at);
        }
    }

    /// The run resumed at `at`: the last item's arrival moves forward by the
    /// time paused, so the pause counts neither in its age nor in the next
    /// inter-arrival time.
    pub(crate) fn resume(&self, at: Instant) {
        let mut state = self.state();
        if let Some(since) = state.paused_since.take()
            && let Some(last) = state.last
        {
            state.last = Some(last + at.saturating_duration_since(since));
        }
    }

    /// Records one item of evidence with `note` (cut to the engine's
    /// `max_progress_note_bytes`), and publishes a `progress` event unless
    /// one was published less than `progress_interval` ago: for discrete
    /// signals such as an MCP progress notification or a worker's completed
    /// step. A report not published is said by the next event, or by
    /// the last one, published when the operation ends.
    pub fn progress(&self, note: impl Into<String>) {
        let note = cut_note(note.into(), self.inner.limits.max_progress_note_bytes);
        let now = Instant::now();
        let publish = {
            let mut state = self.state();
            let count = state.arrive(now);
            state.note = Some(note);
            state.unsaid += 1;
            let due = state.published.is_none_or(|at| {
                now.saturating_duration_since(at) >= self.inner.limits.progress_interval
            });
            (due && self.inner.announce.is_some()).then(|| state.take_unsaid(now, count))
        };
        if let Some((count, reports, note)) = publish {
            self.publish(count, reports, note);
        }
    }

    /// Publishes the reports no event has said yet, as one `progress`
    /// event: called when the operation ends, so every report is said.
    pub(crate) fn settle(&self) {
        let publish = {
            let mut state = self.state();
            let count = state.count;
            (state.unsaid > 0 && self.inner.announce.is_some())
                .then(|| state.take_unsaid(Instant::now(), count))
        };
        if let Some((count, reports, note)) = publish {
            self.publish(count, reports, note);
        }
    }

    fn publish(&self, count: u64, reports: u64, note: Option<String>) {
        if let Some((meta, events)) = &self.inner.announce {
            events.emit(
                &meta.run_id,
                &meta.path,
                EventKind::Progress {
                    lease_id: meta.id,
                    count,
                    note,
                    reports,
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
        let until = state.paused_since.unwrap_or(now);
        let age = state.last.map(|last| until.saturating_duration_since(last));
        EvidenceSummary {
            count: state.count,
            last_progress_age_ms: age.map(|a| u64::try_from(a.as_millis()).unwrap_or(u64::MAX)),
            phi: age.map(|a| state.window.phi(a, config)),
            last_note: state.note.clone(),
            repetition: repetition(tail_of(&state.text, TAIL_BYTES)),
        }
    }
}

impl EvidenceState {
    fn arrive(&mut self, at: Instant) -> u64 {
        if let Some(last) = self.last {
            // During a pause only the quiet time before it counts.
            let until = self.paused_since.unwrap_or(at);
            self.window.push(until.saturating_duration_since(last));
        }
        self.last = Some(at);
        if self.paused_since.is_some() {
            self.paused_since = Some(at);
        }
        self.count += 1;
        self.count
    }

    /// The figures of a `progress` event saying the unsaid reports, which
    /// it marks said: the count so far, how many reports, the last note.
    fn take_unsaid(&mut self, now: Instant, count: u64) -> (u64, u64, Option<String>) {
        self.published = Some(now);
        let reports = std::mem::take(&mut self.unsaid);
        (count, reports, self.note.clone())
    }

    fn push_text(&mut self, text: &str) {
        self.text.push_str(tail_of(text, TAIL_BYTES));
        if self.text.len() > 2 * TAIL_BYTES {
            let keep = self.text.len() - tail_of(&self.text, TAIL_BYTES).len();
            self.text.drain(..keep);
        }
    }
}

/// The last `max` bytes of `text` or fewer, starting on a character
/// boundary.
fn tail_of(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

impl std::fmt::Debug for Evidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evidence")
            .field("count", &self.count())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::watchdog::AccrualConfig;

    #[tokio::test(start_paused = true)]
    async fn a_pause_counts_neither_in_the_age_nor_in_the_inter_arrival_history() {
        // Two cells see the same arrivals every 500 ms; one of them is
        // paused for an hour after its eighth, and its next item comes 500 ms
        // of running time later. Once the pause is cut out they must agree
        // on everything: count, age and phi.
        let step = Duration::from_millis(500);
        let (paused, steady) = (Evidence::detached(), Evidence::detached());
        for _ in 0..8 {
            tokio::time::advance(step).await;
            paused.observe();
            steady.observe();
        }
        let config = AccrualConfig::PEKKO;
        tokio::time::advance(Duration::from_millis(200)).await;
        paused.pause(Instant::now());
        let frozen = paused.summary(Instant::now(), &config);
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(
            paused.summary(Instant::now(), &config),
            frozen,
            "the evidence aged while paused"
        );
        paused.resume(Instant::now());
        let steady_age = |now: Instant| steady.summary(now - Duration::from_secs(3600), &config);
        assert_eq!(
            paused.summary(Instant::now(), &config),
            steady_age(Instant::now())
        );
        // One more item 300 ms after the resume (500 ms after the last one,
        // pause excepted), then 250 ms of silence.
        tokio::time::advance(Duration::from_millis(300)).await;
        paused.observe();
        tokio::time::advance(Duration::from_millis(250)).await;
        let after = paused.summary(Instant::now(), &config);
        assert_eq!(after.count, 9);
        assert_eq!(after.last_progress_age_ms, Some(250));
        // The steady cell, fed at the same running time, has the same phi:
        // no hour-long interval entered the paused cell's history.
        let twin = Evidence::detached();
        twin.observe();
        for _ in 0..8 {
            tokio::time::advance(step).await;
            twin.observe();
        }
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(twin.summary(Instant::now(), &config).phi, after.phi);
    }

    #[tokio::test(start_paused = true)]
    async fn evidence_that_arrives_during_a_pause_does_not_count_the_pause() {
        let evidence = Evidence::detached();
        evidence.observe();
        tokio::time::advance(Duration::from_millis(400)).await;
        evidence.pause(Instant::now());
        tokio::time::advance(Duration::from_secs(600)).await;
        evidence.observe();
        tokio::time::advance(Duration::from_secs(600)).await;
        let config = AccrualConfig::PEKKO;
        let during = evidence.summary(Instant::now(), &config);
        assert_eq!(during.last_progress_age_ms, Some(0), "aged while paused");
        evidence.resume(Instant::now());
        tokio::time::advance(Duration::from_millis(100)).await;
        let after = evidence.summary(Instant::now(), &config);
        assert_eq!(after.count, 2);
        assert_eq!(after.last_progress_age_ms, Some(100));
    }

    /// A sink that keeps what it is given.
    #[derive(Default)]
    struct Kept(Mutex<Vec<EventKind>>);

    impl EventSink for Kept {
        fn emit(&self, _run_id: &str, _path: &str, kind: EventKind) {
            self.0.lock().expect("not poisoned").push(kind);
        }
    }

    /// `(count, reports, note length)` of each `progress` event kept.
    fn published(sink: &Kept) -> Vec<(u64, u64, usize)> {
        let kept = sink.0.lock().expect("not poisoned");
        kept.iter()
            .map(|kind| match kind {
                EventKind::Progress {
                    count,
                    reports,
                    note,
                    ..
                } => (*count, *reports, note.as_deref().map_or(0, str::len)),
                other => panic!("not progress: {other:?}"),
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn repeated_progress_is_coalesced_into_one_event_per_interval_and_the_rest_said_at_the_end()
     {
        let sink = Arc::new(Kept::default());
        let spec = crate::lease::LeaseSpec::new(
            crate::lease::LeaseKind::ToolCall,
            "flood",
            Duration::from_millis(500),
        )
        .expect("a spec")
        .in_run("run-1", "run/tool_call:1");
        let meta = Arc::new(LeaseMeta::new(crate::lease::LeaseId(1), &spec));
        let limits = EventLimits {
            max_progress_note_bytes: 64,
            progress_interval: Duration::from_secs(1),
            ..EventLimits::default()
        };
        let evidence = Evidence::for_lease(meta, sink.clone(), limits);
        let big = "x".repeat(60_000);
        // The first report is published at once.
        evidence.progress(big.clone());
        // Nine more within the interval: evidence, no event.
        for _ in 0..9 {
            tokio::time::advance(Duration::from_millis(50)).await;
            evidence.progress(big.clone());
        }
        assert_eq!(published(&sink).len(), 1);
        assert_eq!(evidence.count(), 10, "every report is evidence");
        // The first report after the interval says the nine and itself.
        tokio::time::advance(Duration::from_millis(600)).await;
        evidence.progress(big.clone());
        // Three more, then the operation ends: one last event says them.
        for _ in 0..3 {
            evidence.progress(big.clone());
        }
        evidence.settle();
        evidence.settle();
        let events = published(&sink);
        let note = events[0].2;
        assert!(note <= 64 + 48, "a note of {note} bytes was published");
        let figures: Vec<(u64, u64)> = events.iter().map(|(c, r, _)| (*c, *r)).collect();
        assert_eq!(figures, [(1, 1), (11, 10), (14, 3)]);
        assert_eq!(evidence.count(), 14);
        let summary = evidence.summary(Instant::now(), &AccrualConfig::PEKKO);
        let last_note = summary.last_note.expect("a note");
        assert!(last_note.starts_with(&"x".repeat(64)), "{last_note:.80}");
        assert!(
            last_note.len() <= 64 + 48,
            "the watchdog sees {} bytes",
            last_note.len()
        );
    }

    #[test]
    fn the_tail_is_bounded_and_cut_on_a_character_boundary() {
        let evidence = Evidence::detached();
        for n in 0..1000 {
            evidence.observe_text(&format!("é{n} "));
        }
        let tail = evidence.tail().expect("text was reported");
        assert!(tail.len() <= TAIL_BYTES, "tail of {} bytes", tail.len());
        assert!(tail.len() > TAIL_BYTES - 4, "tail of {} bytes", tail.len());
        assert!(tail.ends_with("é999 "), "tail ends {tail:?}");
        assert!(evidence.state().text.len() <= 2 * TAIL_BYTES);
        assert_eq!(evidence.count(), 1000);
        // One chunk larger than the tail keeps only its end.
        let big = Evidence::detached();
        big.observe_text(&"ü".repeat(3 * TAIL_BYTES));
        assert_eq!(big.tail().map(|t| t.len()), Some(TAIL_BYTES));
        assert_eq!(Evidence::detached().tail(), None);
    }
}
