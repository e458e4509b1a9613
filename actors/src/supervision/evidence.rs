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
//! Evidence has a kind ([`EvidenceKind`]): text, reasoning or tool-call
//! bytes that add to an answer; an MCP progress value that rose toward its
//! total; a worker's completed step; a note; or a keepalive — an SSE
//! comment, a chunk that adds nothing (an empty delta, a role- or
//! usage-only chunk), a progress value that did not advance. A keepalive
//! proves only that the connection is open: it is counted and shown to the
//! evaluator, and it is not an arrival — it neither feeds the accrual
//! history nor makes the evidence fresh, so it earns no renewal. The
//! summary says how many items of each kind arrived, and where a progress
//! value stands and whether it rose since the lease's last judged expiry
//! ([`ProgressSummary::advanced`]), which the default policy renews on
//! without the evidence-streak limit.
//!
//! A worker's steps carry a signature of the tool calls they made
//! ([`Evidence::step`]): steps that repeat the same calls with the same
//! arguments count in the repetition signal like repeated text.
//!
//! While the run is paused the evidence does not age: the lease actor tells
//! the cell when a pause starts and ends, and the pause counts neither in the
//! age of the last item nor in the inter-arrival history phi is computed on.

pub(crate) mod accrual;
mod repetition;

pub use crate::vocabulary::evidence::{
    EvidenceKind, EvidenceKinds, EvidenceSummary, OperationTiming, ProgressSummary, TimedEnd,
};
pub use repetition::{MIN_TRIGRAMS, repetition};

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;

use crate::event::{EventKind, EventLimits, cut_note};
use crate::pace::{CallPace, Pace, Spread};
use crate::ports::EventSink;
use crate::vocabulary::lease::LeaseMeta;
use accrual::{AccrualConfig, ArrivalWindow};

/// The evidence cell of one lease. Cheap to clone; hand a clone to whatever
/// does the work.
#[derive(Clone)]
pub struct Evidence {
    inner: Arc<EvidenceInner>,
}

struct EvidenceInner {
    state: Mutex<EvidenceState>,
    /// Told once when the evidence turns repetitive (text or steps above
    /// the threshold), so that the lease is judged then.
    watch: std::sync::OnceLock<(f64, Waker)>,
    announce: Option<(Arc<LeaseMeta>, Arc<dyn EventSink>)>,
    limits: EventLimits,
    /// Where a model call's streamed text goes for the run's readers.
    text: Option<crate::vocabulary::text::TextWriter>,
}

/// How much of a stream's text the cell keeps: the tail shown to the
/// evaluator and measured for repetition (2 KiB, a few hundred words).
pub const TAIL_BYTES: usize = 2048;

/// How many of a worker's recent steps are kept for the repetition signal.
pub const STEP_WINDOW: usize = 6;

/// Fewer steps with tool calls than this are too few to judge.
pub const MIN_STEPS: usize = 3;

/// What an evidence cell calls to wake its lease.
pub(crate) type Waker = Box<dyn Fn(Wake) + Send + Sync>;

/// Why an evidence cell wakes its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The evidence just turned repetitive: judge it now.
    Repetitive,
    /// The evidence just got a history to judge its silences by (its
    /// first item after a learned pace seeded it, or its
    /// [`MIN_OWN_SAMPLES`]-th item of its own): look for suspicion from
    /// now on, not only at the period's end.
    History,
}

/// How much new text a stream reports between two measures of its
/// repetition (the measure costs a few microseconds on the 2 KiB tail).
pub const REPETITION_CHECK_BYTES: usize = 256;

/// How many items of its own a lease with no learned pace needs before its
/// silence may be suspected before the period ends.
pub const MIN_OWN_SAMPLES: usize = 16;

#[derive(Default)]
struct EvidenceState {
    /// When the cell was made: the operation's start.
    started: Option<Instant>,
    /// The operation's start, never moved by a pause: its working time is
    /// from here, less [`Self::paused_total`].
    origin: Option<Instant>,
    /// The learned time to a first item, if the lease's pace key had one.
    first_item: Option<Spread>,
    /// The silence (its start: the last arrival, or the operation's start)
    /// an early expiry was already asked for.
    suspected: Option<Instant>,
    count: u64,
    kinds: EvidenceKinds,
    last: Option<Instant>,
    /// When the first item arrived.
    first_arrival: Option<Instant>,
    last_keepalive: Option<Instant>,
    /// The highest progress value within its total, and that total.
    progress: Option<(f64, Option<f64>)>,
    /// The progress value at the last judged expiry.
    judged_progress: Option<f64>,
    /// The signatures of the last [`STEP_WINDOW`] steps that made tool
    /// calls.
    steps: VecDeque<u64>,
    /// Text reported since repetition was last measured.
    unmeasured: usize,
    /// Whether the lease was told the evidence is repetitive (and it has
    /// not stopped being so since).
    told_repetitive: bool,
    /// Whether the lease was told the evidence has a history.
    told_history: bool,
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
    /// The longest silence between two items (or before the first), pauses
    /// excluded, and how many items came before it.
    longest_silence: (std::time::Duration, u64),
    /// The [`TIMED_SILENCES`] longest silences between two items, each with
    /// how many items came before it.
    silences: Vec<(u64, std::time::Duration)>,
    /// The shortest of `silences` once they are [`TIMED_SILENCES`]: a gap
    /// no longer than it is not kept, without a look at the others (the
    /// common case: a stream's gaps are alike).
    shortest_kept: std::time::Duration,
    /// Time paused in all, so that the operation's recorded length is its
    /// working time.
    paused_total: std::time::Duration,
}

impl Evidence {
    pub(crate) fn for_lease(
        meta: Arc<LeaseMeta>,
        events: Arc<dyn EventSink>,
        limits: EventLimits,
    ) -> Self {
        let text = events.texts().and_then(|texts| texts.writer(&meta));
        Self::build(Some((meta, events)), limits, text)
    }

    /// A cell attached to no lease, for operations run outside supervision
    /// and for tests.
    pub fn detached() -> Self {
        Self::build(None, EventLimits::default(), None)
    }

    fn build(
        announce: Option<(Arc<LeaseMeta>, Arc<dyn EventSink>)>,
        limits: EventLimits,
        text: Option<crate::vocabulary::text::TextWriter>,
    ) -> Self {
        Self {
            inner: Arc::new(EvidenceInner {
                state: Mutex::new(EvidenceState {
                    started: Some(Instant::now()),
                    origin: Some(Instant::now()),
                    ..EvidenceState::default()
                }),
                announce,
                limits,
                text,
                watch: std::sync::OnceLock::new(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, EvidenceState> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records one item of evidence of kind `kind` without an event: for
    /// high-rate signals such as stream chunks. A [`EvidenceKind::Keepalive`]
    /// is counted, and is no arrival.
    pub fn observe_kind(&self, kind: EvidenceKind) {
        let now = Instant::now();
        let mut state = self.state();
        if kind == EvidenceKind::Keepalive {
            state.keepalive(now);
        } else {
            state.arrive(now, kind);
            self.watch_history(state);
        }
    }

    /// Tells the lease once that the evidence has a history to judge its
    /// silences by; the lock is released first.
    fn watch_history(&self, mut state: MutexGuard<'_, EvidenceState>) {
        let reached = !state.told_history
            && (state.window.is_seeded() || state.window.len() >= MIN_OWN_SAMPLES);
        if !reached {
            return;
        }
        state.told_history = true;
        drop(state);
        if let Some((_, wake)) = self.inner.watch.get() {
            wake(Wake::History);
        }
    }

    /// Records one item of an answer's bytes (a blocking answer being
    /// read): [`EvidenceKind::Text`].
    pub fn observe(&self) {
        self.observe_kind(EvidenceKind::Text);
    }

    /// Records a sign that the connection is open and nothing more.
    pub fn keepalive(&self) {
        self.observe_kind(EvidenceKind::Keepalive);
    }

    /// Records one chunk of a stream with its text, without an event. The
    /// cell keeps the last [`TAIL_BYTES`] of the text, for the evaluator and
    /// the repetition signal; a chunk with no text adds nothing to the
    /// answer and is a keepalive.
    pub fn observe_text(&self, text: &str) {
        self.observe_delta(text, 0, 0);
    }

    /// Records what one read of a stream added to the answer: `text`,
    /// `reasoning` bytes and `tool_call` bytes (name and arguments). One
    /// arrival, of the kind that added most after text; a read that added
    /// nothing is a keepalive.
    pub fn observe_delta(&self, text: &str, reasoning: usize, tool_call: usize) {
        if let Some(writer) = &self.inner.text {
            writer.push(text);
        }
        let now = Instant::now();
        let mut state = self.state();
        let kind = if !text.is_empty() {
            EvidenceKind::Text
        } else if tool_call > 0 && tool_call >= reasoning {
            EvidenceKind::ToolCall
        } else if reasoning > 0 {
            EvidenceKind::Reasoning
        } else {
            state.keepalive(now);
            return;
        };
        state.arrive(now, kind);
        state.push_text(text);
        state.unmeasured = state.unmeasured.saturating_add(text.len());
        if state.unmeasured >= REPETITION_CHECK_BYTES {
            state.unmeasured = 0;
            self.watch_repetition(state);
        } else {
            self.watch_history(state);
        }
    }

    /// Asks the lease to be judged now if the evidence just turned
    /// repetitive (and a watch is set); the lock is released first.
    fn watch_repetition(&self, mut state: MutexGuard<'_, EvidenceState>) {
        let Some((threshold, wake)) = self.inner.watch.get() else {
            return;
        };
        let repetitive = state.repetition().is_some_and(|share| share > *threshold);
        let tell = repetitive && !state.told_repetitive;
        state.told_repetitive = repetitive;
        if tell {
            drop(state);
            wake(Wake::Repetitive);
        } else {
            self.watch_history(state);
        }
    }

    /// Wakes the lease with `wake` whenever the evidence turns repetitive
    /// (its text's or its steps' repetition above `threshold`), and once
    /// when it gets a history to judge its silences by.
    pub(crate) fn on_suspicion(&self, threshold: f64, wake: Waker) {
        let _ = self.inner.watch.set((threshold, wake));
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
        if let Some(since) = state.paused_since.take() {
            let paused = at.saturating_duration_since(since);
            state.paused_total += paused;
            if let Some(last) = state.last {
                state.last = Some(last + paused);
            } else if let Some(started) = state.started {
                // Silent from the start: the pause is no part of the wait.
                state.started = Some(started + paused);
            }
            // A keepalive during the pause is as fresh as the resume.
            if let Some(keepalive) = state.last_keepalive {
                state.last_keepalive = Some((keepalive + paused).min(at));
            }
        }
    }

    /// Records one item of evidence with `note` (cut to the engine's
    /// `max_progress_note_bytes`), and publishes a `progress` event unless
    /// one was published less than `progress_interval` ago: for discrete
    /// signals such as an MCP progress notification or a worker's completed
    /// step. A report not published is said by the next event, or by
    /// the last one, published when the operation ends.
    pub fn progress(&self, note: impl Into<String>) {
        self.report(EvidenceKind::Note, note.into(), |_| true);
    }

    /// Records a progress value reported by the operation (an MCP progress
    /// notification), with its `total` if it gave one, and publishes it as
    /// [`Evidence::progress`] does. A value that rose above every earlier
    /// one, and is within its total, is [`EvidenceKind::Progress`]; one that
    /// did not advance (or is not a finite number, or is past its total) is
    /// a keepalive: it is kept as the note and earns nothing.
    pub fn progress_value(&self, value: f64, total: Option<f64>, note: impl Into<String>) {
        let advances = |state: &mut EvidenceState| {
            let within =
                value.is_finite() && total.is_none_or(|total| !total.is_finite() || value <= total);
            let rose = state.progress.is_none_or(|(last, _)| value > last);
            let advances = within && rose;
            if advances {
                state.progress = Some((value, total.filter(|t| t.is_finite())));
            }
            advances
        };
        self.report(EvidenceKind::Progress, note.into(), advances);
    }

    /// Records a worker's completed step, as [`Evidence::progress`] does,
    /// with the `signature` of the tool calls it made (`None` when it made
    /// none): steps that repeat the same calls count in the repetition
    /// signal.
    pub fn step(&self, note: impl Into<String>, signature: Option<u64>) {
        self.report(EvidenceKind::Step, note.into(), |state| {
            if let Some(signature) = signature {
                if state.steps.len() == STEP_WINDOW {
                    state.steps.pop_front();
                }
                state.steps.push_back(signature);
            }
            true
        });
        self.watch_repetition(self.state());
    }

    /// Records a discrete report of `kind` with `note`, an arrival if
    /// `advances` says so (a keepalive otherwise), and publishes a
    /// `progress` event unless one was published less than
    /// `progress_interval` ago.
    fn report(
        &self,
        kind: EvidenceKind,
        note: String,
        advances: impl FnOnce(&mut EvidenceState) -> bool,
    ) {
        let note = cut_note(note, self.inner.limits.max_progress_note_bytes);
        let now = Instant::now();
        let publish = {
            let mut state = self.state();
            let count = if advances(&mut state) {
                state.arrive(now, kind)
            } else {
                state.keepalive(now);
                state.count
            };
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
        self.watch_history(self.state());
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

    /// Seeds the detector with what earlier calls of the same pace key
    /// showed: their intervals, and their time to a first item — unless
    /// the call is `queued` behind another at its endpoint, whose first item
    /// waits for the queue.
    pub(crate) fn seed(&self, pace: &Pace, queued: bool) {
        let mut state = self.state();
        if let Some(interval) = pace.interval {
            state.window.seed(interval);
        }
        if !queued {
            state.first_item = pace.first_item;
        }
    }

    /// When the current silence will be suspicious — phi at the threshold
    /// — if nothing arrives: after the last item, judged against the
    /// intervals (learned, or this call's own once it has
    /// [`MIN_OWN_SAMPLES`]); before the first, against the learned time to
    /// a first item. `None` with no history to judge by, while paused, or
    /// once an early expiry was asked for this silence.
    pub(crate) fn suspicion_at(&self, config: &AccrualConfig) -> Option<Instant> {
        let state = self.state();
        if state.paused_since.is_some() {
            return None;
        }
        let (from, after) = match state.last {
            Some(last) if state.window.is_seeded() || state.window.len() >= MIN_OWN_SAMPLES => {
                (last, state.window.crossing(config))
            }
            Some(_) => return None,
            None => {
                let first = state.first_item?;
                (
                    state.started?,
                    config.crossing(millis_to(first.mean_ms), millis_to(first.std_ms)),
                )
            }
        };
        if state.suspected == Some(from) {
            return None;
        }
        Some(
            from.checked_add(after)
                .unwrap_or(from + crate::MAX_DURATION),
        )
    }

    /// Forgets the learned time to a first item: the call waits behind
    /// others at its endpoint, and its silence before a first item is
    /// judged by its period alone.
    pub(crate) fn forget_first_item(&self) {
        self.state().first_item = None;
    }

    /// When the operation will have worked `ceiling`, pauses excluded, if
    /// it goes on; `None` while paused (no clock runs), past the timer's
    /// range, or for a ceiling of [`MAX_DURATION`](crate::MAX_DURATION) or
    /// more, which is none.
    pub(crate) fn working_until(&self, ceiling: std::time::Duration) -> Option<Instant> {
        let state = self.state();
        if state.paused_since.is_some() || ceiling >= crate::MAX_DURATION {
            return None;
        }
        state
            .origin?
            .checked_add(state.paused_total)?
            .checked_add(ceiling)
    }

    /// Marks the current silence as asked about: no second early expiry
    /// for it.
    pub(crate) fn suspect(&self) {
        let mut state = self.state();
        state.suspected = state.last.or(state.started);
    }

    /// What this call showed of its pace: its time to a first item and its
    /// own inter-arrival samples.
    pub(crate) fn call_pace(&self) -> CallPace {
        let state = self.state();
        CallPace {
            first_item_ms: state
                .first_arrival
                .zip(state.started)
                .map(|(first, started)| {
                    first.saturating_duration_since(started).as_secs_f64() * 1e3
                }),
            intervals: state.window.own(),
        }
    }

    /// How the operation went, from its start to `now`: its working time
    /// (pauses excluded), its items and their silences; `ended` says how it
    /// ended and `renewals` how often its lease was renewed.
    pub(crate) fn timing(&self, now: Instant, ended: TimedEnd, renewals: u32) -> OperationTiming {
        let state = self.state();
        let started = state.started.unwrap_or(now);
        let since = |at: Instant| ms(at.saturating_duration_since(started));
        let working = now
            .saturating_duration_since(started)
            .saturating_sub(state.paused_total);
        OperationTiming {
            duration_ms: ms(working),
            items: state.count,
            first_item_ms: state.first_arrival.map(since),
            last_item_ms: state.last.map(since),
            longest_silence_ms: ms(state.longest_silence.0),
            silence_after: state.longest_silence.1,
            keepalives: state.kinds.keepalive,
            silences: {
                let mut silences: Vec<(u64, u64)> = state
                    .silences
                    .iter()
                    .map(|(after, gap)| (*after, ms(*gap)))
                    .collect();
                silences.sort_unstable();
                silences
            },
            progress: state.progress,
            ended,
            renewals,
        }
    }

    /// The lease's expiry was judged and renewed: the progress value now is
    /// what the next expiry's must rise above.
    pub(crate) fn judged(&self) {
        let mut state = self.state();
        state.judged_progress = state.progress.map(|(value, _)| value);
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
        let millis = |a: std::time::Duration| u64::try_from(a.as_millis()).unwrap_or(u64::MAX);
        EvidenceSummary {
            count: state.count,
            last_progress_age_ms: age.map(millis),
            phi: match age {
                Some(age) => Some(state.window.phi(age, config)),
                // Silent from the start: judged against the learned time to
                // a first item, if there is one.
                None => state.first_item.zip(state.started).map(|(first, started)| {
                    config.phi(
                        until.saturating_duration_since(started),
                        millis_to(first.mean_ms),
                        millis_to(first.std_ms),
                    )
                }),
            },
            last_note: state.note.clone(),
            repetition: state.repetition(),
            kinds: state.kinds,
            keepalive_age_ms: state
                .last_keepalive
                .map(|at| millis(until.saturating_duration_since(at))),
            progress: state.progress.map(|(value, total)| ProgressSummary {
                value,
                total,
                previous: state.judged_progress,
                advanced: state.judged_progress.is_none_or(|before| value > before),
            }),
        }
    }
}

/// A duration of `ms` milliseconds (0 for nonsense, at most
/// [`MAX_DURATION`](crate::MAX_DURATION)).
/// How many of an operation's longest silences its timing keeps: enough
/// for a replay to place every stall that mattered, bounded whatever the
/// operation streams.
pub const TIMED_SILENCES: usize = 8;

/// Keeps `gap` among `kept` if it is one of the [`TIMED_SILENCES`] longest;
/// `shortest` is the shortest kept once `kept` is full.
fn keep_longest(
    kept: &mut Vec<(u64, std::time::Duration)>,
    shortest: &mut std::time::Duration,
    gap: (u64, std::time::Duration),
) {
    if kept.len() < TIMED_SILENCES {
        kept.push(gap);
        if kept.len() == TIMED_SILENCES {
            *shortest = kept
                .iter()
                .map(|(_, length)| *length)
                .min()
                .unwrap_or_default();
        }
        return;
    }
    if gap.1 <= *shortest {
        return;
    }
    if let Some(replaced) = kept.iter_mut().min_by_key(|(_, length)| *length) {
        *replaced = gap;
    }
    *shortest = kept
        .iter()
        .map(|(_, length)| *length)
        .min()
        .unwrap_or_default();
}

/// `duration` in whole milliseconds.
fn ms(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn millis_to(ms: f64) -> std::time::Duration {
    std::time::Duration::try_from_secs_f64(ms.max(0.0) / 1e3)
        .unwrap_or(crate::MAX_DURATION)
        .min(crate::MAX_DURATION)
}

/// The share of a worker's recent steps that repeat the tool calls of an
/// earlier one in the window (`1 − distinct / total`, as for text); `None`
/// with fewer than [`MIN_STEPS`] steps that made calls.
fn step_repetition(steps: &VecDeque<u64>) -> Option<f64> {
    if steps.len() < MIN_STEPS {
        return None;
    }
    let distinct: std::collections::HashSet<&u64> = steps.iter().collect();
    let total = steps.len();
    #[allow(clippy::cast_precision_loss)] // at most STEP_WINDOW
    Some((total - distinct.len()) as f64 / total as f64)
}

impl EvidenceState {
    /// The larger of the text's and the steps' repetition, where either
    /// has enough to judge.
    fn repetition(&self) -> Option<f64> {
        let text = repetition(tail_of(&self.text, TAIL_BYTES));
        let steps = step_repetition(&self.steps);
        match (text, steps) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    fn keepalive(&mut self, at: Instant) {
        self.kinds.add(EvidenceKind::Keepalive);
        self.last_keepalive = Some(at);
    }

    fn arrive(&mut self, at: Instant, kind: EvidenceKind) -> u64 {
        self.kinds.add(kind);
        self.first_arrival.get_or_insert(at);
        // During a pause only the quiet time before it counts.
        let until = self.paused_since.unwrap_or(at);
        if let Some(last) = self.last {
            let gap = until.saturating_duration_since(last);
            self.window.push(gap);
            if gap > self.longest_silence.0 {
                self.longest_silence = (gap, self.count);
            }
            keep_longest(
                &mut self.silences,
                &mut self.shortest_kept,
                (self.count, gap),
            );
        } else if let Some(started) = self.started {
            let wait = until.saturating_duration_since(started);
            if wait > self.longest_silence.0 {
                self.longest_silence = (wait, 0);
            }
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
    use crate::supervision::watchdog::AccrualConfig;

    proptest::proptest! {
        /// The kept silences are always the [`TIMED_SILENCES`] longest of
        /// those seen (the first seen of equal ones kept), whatever their
        /// order: the shortest kept, remembered, rejects no gap it should
        /// keep.
        #[test]
        fn the_kept_silences_are_the_longest_seen(gaps in proptest::collection::vec(0u64..50, 0..64)) {
            let (mut kept, mut shortest) = (Vec::new(), Duration::ZERO);
            let mut naive: Vec<(u64, Duration)> = Vec::new();
            for (n, gap) in gaps.iter().enumerate() {
                let gap = (n as u64, Duration::from_millis(*gap));
                keep_longest(&mut kept, &mut shortest, gap);
                if naive.len() < TIMED_SILENCES {
                    naive.push(gap);
                } else if let Some(min) = naive.iter_mut().min_by_key(|(_, length)| *length)
                    && min.1 < gap.1
                {
                    *min = gap;
                }
                proptest::prop_assert_eq!(&kept, &naive);
            }
        }
    }

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
        let spec = crate::supervision::lease::LeaseSpec::new(
            crate::supervision::lease::LeaseKind::ToolCall,
            "flood",
            Duration::from_millis(500),
        )
        .expect("a spec")
        .in_run("run-1", "run/tool_call:1");
        let terms = crate::supervision::lease::terms::LeaseTerms::new(spec.kind);
        let meta = Arc::new(LeaseMeta::new(
            crate::supervision::lease::LeaseId(1),
            &spec,
            &terms,
        ));
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

    #[tokio::test(start_paused = true)]
    async fn keepalives_are_counted_but_are_no_arrival() {
        let config = AccrualConfig::PEKKO;
        let evidence = Evidence::detached();
        for _ in 0..50 {
            tokio::time::advance(Duration::from_millis(100)).await;
            evidence.keepalive();
            evidence.observe_delta("", 0, 0);
            evidence.observe_text("");
        }
        let summary = evidence.summary(Instant::now(), &config);
        assert_eq!(summary.count, 0, "a keepalive counted as evidence");
        assert_eq!(summary.phi, None);
        assert_eq!(summary.last_progress_age_ms, None);
        assert_eq!(summary.kinds.keepalive, 150);
        assert_eq!(summary.keepalive_age_ms, Some(0));
        assert_eq!(summary.kinds.describe(), "keepalive 150");
        // One token makes it evidence; reasoning and tool-call bytes too.
        evidence.observe_delta("Hel", 0, 0);
        evidence.observe_delta("", 12, 0);
        evidence.observe_delta("", 0, 30);
        let summary = evidence.summary(Instant::now(), &config);
        assert_eq!(summary.count, 3);
        assert_eq!(
            (
                summary.kinds.text,
                summary.kinds.reasoning,
                summary.kinds.tool_call
            ),
            (1, 1, 1)
        );
        assert_eq!(summary.last_progress_age_ms, Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_progress_value_advances_only_upward_within_its_total_and_since_the_last_expiry() {
        let config = AccrualConfig::PEKKO;
        let evidence = Evidence::detached();
        evidence.progress_value(1.0, Some(3.0), "1/3");
        let first = evidence.summary(Instant::now(), &config);
        let progress = first.progress.expect("a value");
        assert!(progress.advanced && progress.previous.is_none());
        evidence.judged();
        // The same value again, a lower one, one past the total, NaN: no
        // arrival, each a keepalive.
        evidence.progress_value(1.0, Some(3.0), "1/3");
        evidence.progress_value(0.5, Some(3.0), "back");
        evidence.progress_value(4.0, Some(3.0), "past");
        evidence.progress_value(f64::NAN, None, "nan");
        let stood = evidence.summary(Instant::now(), &config);
        assert_eq!(stood.count, 1);
        assert_eq!(stood.kinds.keepalive, 4);
        assert_eq!(stood.last_note.as_deref(), Some("nan"), "the note is kept");
        let progress = stood.progress.expect("a value");
        assert!(!progress.advanced, "{progress:?}");
        assert_eq!((progress.value, progress.previous), (1.0, Some(1.0)));
        evidence.progress_value(2.0, Some(3.0), "2/3");
        let rose = evidence.summary(Instant::now(), &config);
        assert!(rose.progress.expect("a value").advanced);
        assert_eq!(rose.kinds.progress, 2);
    }

    #[test]
    fn steps_that_repeat_the_same_calls_are_repetition() {
        let config = AccrualConfig::PEKKO;
        let now = Instant::now();
        let looping = Evidence::detached();
        for n in 0..4 {
            looping.step(format!("step {n} done"), Some(42));
        }
        let share = looping.summary(now, &config).repetition.expect("a share");
        assert!(share > 0.5, "{share}");
        let varied = Evidence::detached();
        for n in 0..4 {
            varied.step(format!("step {n} done"), Some(n));
        }
        assert_eq!(varied.summary(now, &config).repetition, Some(0.0));
        let few = Evidence::detached();
        few.step("step 1 done", Some(1));
        few.step("step 2 done", None);
        few.step("step 3 done", Some(1));
        assert_eq!(
            few.summary(now, &config).repetition,
            None,
            "too few to judge"
        );
        assert_eq!(few.summary(now, &config).kinds.step, 3);
    }
}
