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
    pub(crate) fn base(&self, run_id: &str, transcript: &[ChatMessage]) -> Option<SnapshotBase> {
        let prefix = transcript.get(..self.len)?;
        (hash(prefix) == self.hash).then(|| SnapshotBase {
            run_id: run_id.to_owned(),
            seq: self.seq,
            kept: self.len,
        })
    }
}

/// A hash of `messages` as they are stored (their JSON), each one framed
/// by its length so that two lists never hash alike by being cut apart
/// differently.
fn hash(messages: &[ChatMessage]) -> u64 {
    let mut hasher = DefaultHasher::new();
    for message in messages {
        let encoded = serde_json::to_vec(message).unwrap_or_default();
        encoded.len().hash(&mut hasher);
        hasher.write(&encoded);
    }
    hasher.finish()
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
    }
}
