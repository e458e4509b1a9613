//! What a loop knows of its last snapshot in the store, so that the next
//! one names it as its base and the store keeps only the messages since
//! ([`history`](crate::ports::history)).
//!
//! Only a snapshot known to be stored becomes the tail: one whose write
//! landed, or the one the loop was restored from. A snapshot whose
//! transcript no longer begins with the tail's — cut back by a restart,
//! shortened to fit the model's context — names no base and is stored
//! whole. The tail keeps a hash of the transcript it saw, never the
//! transcript: checking costs a pass over the messages, not a copy.

use std::hash::{DefaultHasher, Hash, Hasher};

use crate::ports::{ChatMessage, SnapshotBase};

/// The loop's last stored snapshot: its place, how many messages its
/// transcript had, and their hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HistoryTail {
    seq: u64,
    len: usize,
    hash: u64,
}

impl HistoryTail {
    /// The tail of a stored snapshot at `seq` whose transcript is
    /// `transcript`.
    pub(crate) fn of(seq: u64, transcript: &[ChatMessage]) -> Self {
        Self {
            seq,
            len: transcript.len(),
            hash: hash(transcript),
        }
    }

    /// The base a snapshot of `run_id` with `transcript` names: this tail,
    /// if the transcript still begins with the tail's messages.
    #[cfg(test)]
    pub(crate) fn base(&self, run_id: &str, transcript: &[ChatMessage]) -> Option<SnapshotBase> {
        Self::next(Some(self), 0, run_id, transcript).0
    }

    /// The base a snapshot of `run_id` at `seq` with `transcript` names
    /// after `tail` (none without one, or where the transcript no longer
    /// begins with the tail's messages), and the tail it leaves once
    /// stored: one pass over the messages for both.
    pub(crate) fn next(
        tail: Option<&Self>,
        seq: u64,
        run_id: &str,
        transcript: &[ChatMessage],
    ) -> (Option<SnapshotBase>, Self) {
        let mut hasher = DefaultHasher::new();
        let mut prefix = None;
        for (n, message) in transcript.iter().enumerate() {
            if tail.is_some_and(|tail| tail.len == n) {
                prefix = Some(hasher.finish());
            }
            add(&mut hasher, message);
        }
        let whole = hasher.finish();
        if tail.is_some_and(|tail| tail.len == transcript.len()) {
            prefix = Some(whole);
        }
        let base = tail
            .filter(|tail| prefix == Some(tail.hash))
            .map(|tail| SnapshotBase {
                run_id: run_id.to_owned(),
                seq: tail.seq,
                kept: tail.len,
            });
        let next = Self {
            seq,
            len: transcript.len(),
            hash: whole,
        };
        (base, next)
    }
}

/// A hash of `messages` as they are stored (their JSON), each one framed
/// by its length so that two lists never hash alike by being cut apart
/// differently.
fn hash(messages: &[ChatMessage]) -> u64 {
    let mut hasher = DefaultHasher::new();
    for message in messages {
        add(&mut hasher, message);
    }
    hasher.finish()
}

/// `message` added to a hash of messages, as [`hash`] adds each.
fn add(hasher: &mut DefaultHasher, message: &ChatMessage) {
    let encoded = serde_json::to_vec(message).unwrap_or_default();
    encoded.len().hash(hasher);
    hasher.write(&encoded);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_appended_to_continues_its_tail_and_one_cut_back_does_not() {
        let before = [
            ChatMessage::user("task"),
            ChatMessage::assistant("a", Vec::new()),
        ];
        let tail = HistoryTail::of(4, &before);
        let appended = [before[0].clone(), before[1].clone(), ChatMessage::user("b")];
        assert_eq!(
            tail.base("r", &appended),
            Some(SnapshotBase {
                run_id: "r".to_owned(),
                seq: 4,
                kept: 2
            })
        );
        let cut_back = [before[0].clone()];
        assert_eq!(tail.base("r", &cut_back), None);
        let rewritten = [
            before[0].clone(),
            ChatMessage::assistant("other", Vec::new()),
            ChatMessage::user("b"),
        ];
        assert_eq!(tail.base("r", &rewritten), None);
        // The tail a save leaves is the one its transcript makes.
        let (_, next) = HistoryTail::next(Some(&tail), 7, "r", &appended);
        assert_eq!(next, HistoryTail::of(7, &appended));
        let (base, next) = HistoryTail::next(None, 8, "r", &before);
        assert_eq!((base, next), (None, HistoryTail::of(8, &before)));
        let (base, _) = HistoryTail::next(Some(&tail), 9, "r", &before);
        assert_eq!(
            base.map(|b| b.kept),
            Some(2),
            "a transcript as long as its tail"
        );
    }
}
