//! The text a run's model calls stream, as it streams, for readers that
//! show an answer while it is written (an end user's UI).
//!
//! Text is not an event: a run's log keeps what it kept before (chunk
//! counts, the final answer), never a token. Each model call in flight
//! keeps the last [`MAX_KEPT_TEXT`] bytes of what it streamed, so that a
//! reader that joins or reconnects gets the text so far of every call in
//! flight ([`TextFollow::kept`]) and then the deltas that follow, each
//! with its byte `offset` in the call's answer: a reader keeps what it has
//! and drops a delta it already holds. A call's text is forgotten when the
//! call ends; the run's answer is in its `run_completed` event.
//!
//! The text is this process's: a reader of a run another executor runs
//! gets its events through the store and no text.
//!
//! ```
//! use leasehold_actors::{EventBus, TextFollow};
//!
//! let bus = EventBus::new();
//! let follow: TextFollow = bus.texts().follow("r1");
//! assert!(follow.kept().is_empty(), "no call of r1 streams yet");
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::vocabulary::lease::{LeaseId, LeaseKind, LeaseMeta};

/// How much of a call's streamed text is kept for readers that join late
/// or reconnect: its last 64 KiB.
pub const MAX_KEPT_TEXT: usize = 64 * 1024;

/// How many deltas a reader may leave unread before it lags (and is given
/// the kept text again).
const LIVE_CAPACITY: usize = 256;

/// A piece of the text a model call streamed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TextDelta {
    /// The call's lease (as in its `model_call_started` event).
    pub lease_id: LeaseId,
    /// Where in the run's tree the call is (`run` for the root loop).
    pub path: String,
    /// The byte offset of `text` in the call's answer.
    pub offset: u64,
    /// The text.
    pub text: String,
}

impl TextDelta {
    /// The byte offset just past this delta.
    pub fn end(&self) -> u64 {
        self.offset
            .saturating_add(u64::try_from(self.text.len()).unwrap_or(u64::MAX))
    }
}

/// The text of every run's calls in flight, and its readers.
#[derive(Default)]
pub struct Texts {
    runs: Mutex<crate::hash::Map<Arc<str>, Weak<RunTexts>>>,
}

impl std::fmt::Debug for Texts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Texts")
            .field("runs", &self.lock().len())
            .finish()
    }
}

/// One run's calls in flight and its readers.
struct RunTexts {
    calls: Mutex<BTreeMap<LeaseId, Arc<CallState>>>,
    /// Made by the first reader: a run nobody reads pays for no channel.
    live: std::sync::OnceLock<broadcast::Sender<Arc<TextDelta>>>,
}

struct CallState {
    path: String,
    text: Mutex<KeptText>,
}

#[derive(Default)]
struct KeptText {
    /// The offset of `text`'s first byte in the call's answer.
    base: u64,
    /// The answer's last bytes, at most `2 × MAX_KEPT_TEXT` (trimmed to
    /// `MAX_KEPT_TEXT` when it doubles, so appending stays cheap).
    text: String,
}

impl KeptText {
    fn end(&self) -> u64 {
        self.base
            .saturating_add(u64::try_from(self.text.len()).unwrap_or(u64::MAX))
    }

    fn push(&mut self, text: &str) {
        self.text.push_str(text);
        if self.text.len() > 2 * MAX_KEPT_TEXT {
            let mut cut = self.text.len() - MAX_KEPT_TEXT;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
            self.base = self
                .base
                .saturating_add(u64::try_from(cut).unwrap_or(u64::MAX));
        }
    }

    /// What is kept, at most its last `MAX_KEPT_TEXT` bytes.
    fn kept(&self) -> (u64, &str) {
        let mut cut = self.text.len().saturating_sub(MAX_KEPT_TEXT);
        while !self.text.is_char_boundary(cut) {
            cut += 1;
        }
        (
            self.base
                .saturating_add(u64::try_from(cut).unwrap_or(u64::MAX)),
            &self.text[cut..],
        )
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Texts {
    fn lock(&self) -> MutexGuard<'_, crate::hash::Map<Arc<str>, Weak<RunTexts>>> {
        lock(&self.runs)
    }

    /// The run's texts, made if it has none.
    fn run(&self, run_id: &str) -> Arc<RunTexts> {
        let mut runs = self.lock();
        if let Some(run) = runs.get(run_id).and_then(Weak::upgrade) {
            return run;
        }
        let run = Arc::new(RunTexts {
            calls: Mutex::new(BTreeMap::new()),
            live: std::sync::OnceLock::new(),
        });
        // Entries of runs nobody holds any more go when the map doubles.
        if runs.len() >= 64 && runs.len().is_power_of_two() {
            runs.retain(|_, run| run.strong_count() > 0);
        }
        runs.insert(Arc::from(run_id), Arc::downgrade(&run));
        run
    }

    /// Where the text of the operation `meta` leases goes: a model call's;
    /// none for another kind of operation.
    pub(crate) fn writer(&self, meta: &LeaseMeta) -> Option<TextWriter> {
        self.writer_of(&meta.run_id, &meta.path, meta.id, meta.kind)
    }

    /// [`Self::writer`] of lease `lease_id` of kind `kind`, at `path` in
    /// run `run_id`.
    fn writer_of(
        &self,
        run_id: &str,
        path: &str,
        lease_id: LeaseId,
        kind: LeaseKind,
    ) -> Option<TextWriter> {
        if !matches!(kind, LeaseKind::ModelStream | LeaseKind::ModelBlocking) {
            return None;
        }
        let run = self.run(run_id);
        let call = Arc::new(CallState {
            path: path.to_owned(),
            text: Mutex::new(KeptText::default()),
        });
        lock(&run.calls).insert(lease_id, Arc::clone(&call));
        Some(TextWriter {
            run,
            lease_id,
            call,
        })
    }

    /// Follows the text of `run_id`'s model calls: what each call in flight
    /// streamed so far, then every delta from now on.
    pub fn follow(&self, run_id: &str) -> TextFollow {
        let run = self.run(run_id);
        let live = run
            .live
            .get_or_init(|| broadcast::channel(LIVE_CAPACITY).0)
            .subscribe();
        let mut follow = TextFollow {
            run,
            live,
            kept: Vec::new(),
            held: BTreeMap::new(),
        };
        follow.take_kept();
        follow
    }

    /// How many runs have text kept or a reader: what a test of per-run
    /// state reads.
    pub fn runs_tracked(&self) -> usize {
        self.lock()
            .values()
            .filter(|run| run.strong_count() > 0)
            .count()
    }
}

/// What a model call streams goes here; dropped when the call ends, which
/// forgets its text.
pub(crate) struct TextWriter {
    run: Arc<RunTexts>,
    lease_id: LeaseId,
    call: Arc<CallState>,
}

impl TextWriter {
    /// Appends `text` to the call's answer and hands it to the run's readers.
    pub(crate) fn push(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut kept = lock(&self.call.text);
        let offset = kept.end();
        kept.push(text);
        // Sent under the call's lock: a reader taking the kept text sees
        // either this delta in it or on its subscription, never neither.
        if let Some(live) = self.run.live.get()
            && live.receiver_count() > 0
        {
            let _ = live.send(Arc::new(TextDelta {
                lease_id: self.lease_id,
                path: self.call.path.clone(),
                offset,
                text: text.to_owned(),
            }));
        }
    }
}

impl Drop for TextWriter {
    fn drop(&mut self) {
        lock(&self.run.calls).remove(&self.lease_id);
    }
}

/// A reader of a run's text ([`Texts::follow`]).
pub struct TextFollow {
    run: Arc<RunTexts>,
    live: broadcast::Receiver<Arc<TextDelta>>,
    /// The text so far, not yet handed out.
    kept: Vec<TextDelta>,
    /// How far this reader has each call's text.
    held: BTreeMap<LeaseId, u64>,
}

impl std::fmt::Debug for TextFollow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextFollow")
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

impl TextFollow {
    /// Copies the text kept of every call in flight into `kept`.
    fn take_kept(&mut self) {
        let calls: Vec<(LeaseId, Arc<CallState>)> = lock(&self.run.calls)
            .iter()
            .map(|(id, call)| (*id, Arc::clone(call)))
            .collect();
        for (lease_id, call) in calls {
            let kept = lock(&call.text);
            let (base, text) = kept.kept();
            let held = self.held.get(&lease_id).copied().unwrap_or(0);
            let end = kept.end();
            if end <= held || text.is_empty() {
                continue;
            }
            // Only what this reader does not hold, cut on a character.
            let skip = usize::try_from(held.saturating_sub(base)).unwrap_or(usize::MAX);
            let mut skip = skip.min(text.len());
            while !text.is_char_boundary(skip) {
                skip += 1;
            }
            self.kept.push(TextDelta {
                lease_id,
                path: call.path.clone(),
                offset: base.saturating_add(u64::try_from(skip).unwrap_or(u64::MAX)),
                text: text[skip..].to_owned(),
            });
            self.held.insert(lease_id, end);
        }
    }

    /// The text so far of each call in flight when the reader began (or
    /// last lagged), one delta a call, not yet handed out by
    /// [`Self::recv`].
    pub fn kept(&self) -> &[TextDelta] {
        &self.kept
    }

    /// The next piece of text this reader does not hold: first the kept
    /// text, then each delta as it streams. A reader that falls more than
    /// 256 deltas behind is given each call's kept text again from where
    /// it was. `None` once nothing can stream any more (never while the
    /// reader is held and the process runs).
    pub async fn recv(&mut self) -> Option<TextDelta> {
        loop {
            if !self.kept.is_empty() {
                return Some(self.kept.remove(0));
            }
            match self.live.recv().await {
                Ok(delta) => {
                    let held = self.held.entry(delta.lease_id).or_insert(0);
                    if delta.end() <= *held {
                        continue;
                    }
                    let mut delta = TextDelta::clone(&delta);
                    if delta.offset < *held {
                        // Part of it was in the kept text.
                        let mut skip = usize::try_from(*held - delta.offset)
                            .unwrap_or(usize::MAX)
                            .min(delta.text.len());
                        while !delta.text.is_char_boundary(skip) {
                            skip += 1;
                        }
                        delta.text.drain(..skip);
                        delta.offset = *held;
                    }
                    *held = delta.end();
                    return Some(delta);
                }
                Err(broadcast::error::RecvError::Lagged(_)) => self.take_kept(),
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(texts: &Texts, run_id: &str, kind: LeaseKind) -> Option<TextWriter> {
        texts.writer_of(run_id, "run", LeaseId::next(), kind)
    }

    #[tokio::test]
    async fn a_reader_gets_the_text_so_far_then_each_delta_and_a_call_that_ends_is_forgotten() {
        let texts = Texts::default();
        let call = writer(&texts, "r1", LeaseKind::ModelStream).unwrap();
        call.push("Hello");
        call.push(", ");
        let mut follow = texts.follow("r1");
        assert_eq!(follow.kept().len(), 1);
        call.push("world");
        let first = follow.recv().await.unwrap();
        assert_eq!((first.offset, first.text.as_str()), (0, "Hello, "));
        let next = follow.recv().await.unwrap();
        assert_eq!((next.offset, next.text.as_str()), (7, "world"));
        drop(call);
        assert!(
            texts.follow("r1").kept().is_empty(),
            "an ended call's text is gone"
        );
        assert!(
            writer(&texts, "r1", LeaseKind::ToolCall).is_none(),
            "a tool call streams no answer"
        );
    }

    #[tokio::test]
    async fn a_delta_sent_while_the_kept_text_was_taken_is_not_handed_twice() {
        let texts = Texts::default();
        let call = writer(&texts, "r1", LeaseKind::ModelStream).unwrap();
        let mut early = texts.follow("r1");
        call.push("abc");
        // A second reader joins after "abc": kept holds it, and its
        // subscription does not.
        let mut late = texts.follow("r1");
        call.push("def");
        let mut got = String::new();
        for _ in 0..2 {
            got.push_str(&late.recv().await.unwrap().text);
        }
        assert_eq!(got, "abcdef");
        assert_eq!(early.recv().await.unwrap().text, "abc");
        assert_eq!(early.recv().await.unwrap().text, "def");
    }

    #[tokio::test]
    async fn a_long_answer_keeps_its_last_bytes_with_their_offset_and_a_lagging_reader_catches_up()
    {
        let texts = Texts::default();
        let call = writer(&texts, "r1", LeaseKind::ModelStream).unwrap();
        let mut follow = texts.follow("r1");
        let piece = "é".repeat(500); // 1000 bytes, two a character
        for _ in 0..300 {
            call.push(&piece);
        }
        // Far more than 256 deltas behind: handed the kept text.
        let delta = follow.recv().await.unwrap();
        let written = 300_000;
        assert_eq!(delta.end(), written);
        assert!(delta.text.len() <= MAX_KEPT_TEXT);
        assert!(delta.text.starts_with('é'), "cut on a character");
        assert!(texts.follow("r1").kept()[0].offset > 0);
    }

    #[test]
    fn a_run_nobody_holds_is_not_tracked() {
        let texts = Texts::default();
        let call = writer(&texts, "r1", LeaseKind::ModelBlocking).unwrap();
        assert_eq!(texts.runs_tracked(), 1);
        drop(call);
        assert_eq!(texts.runs_tracked(), 0);
    }
}
