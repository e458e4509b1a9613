//! Reading a run's log while it is appended to: [`LogTail`].
//!
//! A run numbers its events 1, 2, 3, … with no gap (their `position`), and
//! a log being appended to may be read with a later event already there
//! and an earlier one not yet (sled lands a batch one event at a time; two
//! PostgreSQL transactions commit out of order). A reader that handed on
//! what it read as it came would skip the late event for good: a tail hands
//! on the events up to such a gap and has the rest read again a moment
//! later. A gap that lasts — an event whose write failed — is waited for
//! [`LogTail::GAP_READS`] reads of [`LogTail::GAP_PATIENCE`], then
//! passed.

use std::time::Duration;

use super::Event;

/// Where a reader of a run's log is: the last event it handed on, and how
/// long it has waited on a gap.
#[derive(Clone, Debug)]
pub struct LogTail {
    /// The seq of the last event handed on.
    seen: u64,
    /// Its position, where it is known: not for a reader that starts after
    /// an event it did not hand on itself.
    last_position: Option<u64>,
    /// Reads that found the same gap.
    gap_reads: u32,
}

/// What a read of the log gives a [`LogTail`].
#[derive(Debug, PartialEq)]
pub struct TailRead<'a> {
    /// The events to hand on now, in order.
    pub events: &'a [Event],
    /// Whether the read stopped at a gap: read again after
    /// [`LogTail::GAP_PATIENCE`].
    pub gap: bool,
    /// The seq of an event handed on past a gap that lasted
    /// [`LogTail::GAP_READS`] reads (its predecessor's write failed), if any.
    pub passed_gap: Option<u64>,
}

impl LogTail {
    /// How long a reader waits before reading a log with a gap again: its
    /// writer lands the missing events within milliseconds.
    pub const GAP_PATIENCE: Duration = Duration::from_millis(5);

    /// How many reads a gap is waited for before the events after it are
    /// handed on without it (about two seconds of
    /// [`GAP_PATIENCE`](Self::GAP_PATIENCE)).
    pub const GAP_READS: u32 = 400;

    /// A tail that hands on the events after seq `after`; from `0`, the
    /// first it hands on is the run's first.
    pub fn after(after: u64) -> Self {
        Self {
            seen: after,
            last_position: (after == 0).then_some(0),
            gap_reads: 0,
        }
    }

    /// The seq of the last event handed on: where the next read starts.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Of `logged`, a read of the log after [`LogTail::seen`], the events
    /// to hand on now: up to a gap, unless it has lasted
    /// [`LogTail::GAP_READS`] reads. Hand each on, then tell [`LogTail::handed`].
    pub fn ready<'a>(&mut self, logged: &'a [Event]) -> TailRead<'a> {
        let mut last = self.last_position;
        let mut passed_gap = None;
        for (at, event) in logged.iter().enumerate() {
            if !follows(last, event) {
                if self.gap_reads < Self::GAP_READS {
                    self.gap_reads += 1;
                    return TailRead {
                        events: &logged[..at],
                        gap: true,
                        passed_gap,
                    };
                }
                passed_gap.get_or_insert(event.seq);
            }
            last = Some(event.position);
        }
        self.gap_reads = 0;
        TailRead {
            events: logged,
            gap: false,
            passed_gap,
        }
    }

    /// Whether `event` comes right after the last one handed on, as a
    /// live event must to be handed on at once (the log has, or soon will
    /// have, those between): always for the first of a tail that starts
    /// after an event it did not hand on, and for logs kept before
    /// positions were counted (position 0).
    pub fn follows(&self, event: &Event) -> bool {
        follows(self.last_position, event)
    }

    /// `event` was handed on.
    pub fn handed(&mut self, event: &Event) {
        self.seen = event.seq;
        self.last_position = Some(event.position);
    }
}

/// Whether `event` comes right after the event at `last` (a position,
/// where it is known); logs kept before positions were counted have 0.
fn follows(last: Option<u64>, event: &Event) -> bool {
    match last {
        Some(last) if event.position > 0 => event.position == last + 1,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;

    fn event(seq: u64, position: u64) -> Event {
        Event {
            seq,
            position,
            at: seq,
            run_id: "run-1".into(),
            path: "/".into(),
            kind: EventKind::StepStarted {
                step: 1,
                limit: 0,
                nudges: 0,
            },
        }
    }

    #[test]
    fn events_are_handed_on_up_to_a_gap_until_it_has_lasted_its_reads() {
        let mut tail = LogTail::after(0);
        let read = [event(1, 1), event(2, 2), event(4, 4)];
        for _ in 0..LogTail::GAP_READS {
            let ready = tail.ready(&read);
            assert_eq!(ready.events.len(), 2);
            assert!(ready.gap);
        }
        let ready = tail.ready(&read);
        assert_eq!((ready.events.len(), ready.gap), (3, false));
        assert_eq!(ready.passed_gap, Some(4));
        for handed in ready.events {
            tail.handed(handed);
        }
        assert_eq!(tail.seen(), 4);
        // The count starts again at the next gap.
        let later = [event(6, 6)];
        let ready = tail.ready(&later);
        assert!(ready.gap && ready.events.is_empty());
    }

    #[test]
    fn a_tail_after_an_event_it_did_not_hand_on_takes_the_next_as_it_comes() {
        let mut tail = LogTail::after(7);
        let read = [event(9, 9), event(10, 10)];
        let ready = tail.ready(&read);
        assert_eq!((ready.events.len(), ready.gap), (2, false));
        let mut old = LogTail::after(0);
        let unnumbered = [event(1, 0), event(5, 0)];
        assert_eq!(old.ready(&unnumbered).events.len(), 2);
    }
}
