//! How much of what a peer reports reaches a run's log.
//!
//! A tool server may send progress notifications as fast and as large as it
//! likes; each one is evidence for its call's lease, and must stay so. What
//! is bounded is what they cost: the note an operation gives with its
//! progress is cut to [`EventLimits::max_progress_note_bytes`] (in the
//! evidence the watchdog and the evaluator see as in the stored event);
//! repeated progress of one operation is coalesced into at most one
//! `progress` event per [`EventLimits::progress_interval`], which says how
//! many reports it stands for; and once a run's log holds
//! [`EventLimits::max_run_events`] events, progress events are counted
//! instead of stored, and an `events_dropped` event says how many. Events
//! the run's state, its resumption, its trace and its verdicts depend on are
//! never dropped: only [`EventKind::is_droppable`] kinds are.
//!
//! [`EventKind::is_droppable`]: crate::EventKind::is_droppable

use std::time::Duration;

use crate::error::ConfigError;
use crate::vocabulary::event::EventKind;

/// The default cap on one progress note: 1 KiB.
pub const DEFAULT_MAX_PROGRESS_NOTE_BYTES: usize = 1024;

/// The default interval of stored progress per operation: 1 s.
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// The default number of events a run's log holds before progress events
/// are counted instead of stored.
pub const DEFAULT_MAX_RUN_EVENTS: u64 = 10_000;

/// The least a progress note may be cut to: room for the start of a message
/// and the marker that says it was cut.
pub const MIN_PROGRESS_NOTE_BYTES: usize = 64;

/// Bounds on what an operation's progress costs the log. See the module
/// documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventLimits {
    /// The most of one progress note kept, in bytes (default 1 KiB, at
    /// least [`MIN_PROGRESS_NOTE_BYTES`]): a longer note is cut at a
    /// character boundary and a marker says how much was cut.
    pub max_progress_note_bytes: usize,
    /// At most one `progress` event per operation per interval (default
    /// 1 s); the reports in between are evidence all the same, and the next
    /// event says how many it stands for. Zero stores every report.
    pub progress_interval: Duration,
    /// How many events a run's log holds before its progress events are
    /// counted instead of stored (default 10 000, at least 1). Lifecycle
    /// events are stored past it.
    pub max_run_events: u64,
}

impl Default for EventLimits {
    fn default() -> Self {
        Self {
            max_progress_note_bytes: DEFAULT_MAX_PROGRESS_NOTE_BYTES,
            progress_interval: DEFAULT_PROGRESS_INTERVAL,
            max_run_events: DEFAULT_MAX_RUN_EVENTS,
        }
    }
}

impl EventLimits {
    /// Refuses a note cap below [`MIN_PROGRESS_NOTE_BYTES`], an interval past
    /// [`MAX_DURATION`](crate::MAX_DURATION) and a zero event cap, naming
    /// the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_progress_note_bytes < MIN_PROGRESS_NOTE_BYTES {
            return Err(ConfigError::new(
                "max_progress_note_bytes",
                format!("a size of at least {MIN_PROGRESS_NOTE_BYTES} bytes"),
                format!("{} bytes", self.max_progress_note_bytes),
            ));
        }
        crate::check_duration("progress_interval", self.progress_interval)?;
        if self.max_run_events == 0 {
            return Err(ConfigError::new(
                "max_run_events",
                "a count of at least 1",
                "0",
            ));
        }
        Ok(())
    }
}

/// `note` cut to at most `max_bytes` at a character boundary, with a marker
/// saying how much was cut; unchanged if it fits.
pub fn cut_note(mut note: String, max_bytes: usize) -> String {
    let original = note.len();
    if let Some(kept) = cut_at_boundary(&mut note, max_bytes) {
        note.push_str(&format!(
            " [leasehold: note cut: {} of its {original} bytes]",
            original - kept
        ));
    }
    note
}

/// Cuts `text` to at most `max_bytes` at the last character boundary at or
/// before the cap (at most three steps back: a UTF-8 character is at most
/// four bytes) and gives its memory back; how many bytes were kept, or
/// `None` when it fits and is left as it is.
pub(crate) fn cut_at_boundary(text: &mut String, max_bytes: usize) -> Option<usize> {
    if text.len() <= max_bytes {
        return None;
    }
    let kept = (0..=max_bytes)
        .rev()
        .find(|at| text.is_char_boundary(*at))
        .unwrap_or(0);
    text.truncate(kept);
    text.shrink_to_fit();
    Some(kept)
}

impl EventKind {
    /// Whether an event of this kind may be counted instead of stored once
    /// its run's log is full: only what a peer reports at its own pace
    /// (`progress`). Everything a run's state, its resumption, its trace
    /// or its verdicts are read from is always stored.
    pub fn is_droppable(&self) -> bool {
        matches!(self, Self::Progress { .. })
    }

    /// Whether the run stops here after this event (it ended, or waits for
    /// a person): what was dropped is said before it.
    pub(crate) fn stops_the_run(&self) -> bool {
        matches!(
            self,
            Self::RunCompleted { .. }
                | Self::RunFailed { .. }
                | Self::RunCancelled { .. }
                | Self::Paused { .. }
                | Self::ReconciliationRequired { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_note_is_cut_at_a_character_boundary_with_a_marker() {
        assert_eq!(cut_note("short".to_owned(), 64), "short");
        let cut = cut_note("é".repeat(100), 65);
        assert!(cut.starts_with(&"é".repeat(32)), "{cut}");
        assert!(!cut.starts_with(&"é".repeat(33)), "{cut}");
        assert!(
            cut.ends_with(" [leasehold: note cut: 136 of its 200 bytes]"),
            "{cut}"
        );
    }

    #[test]
    fn nonsense_limits_are_refused_naming_the_field() {
        let small = EventLimits {
            max_progress_note_bytes: 10,
            ..EventLimits::default()
        };
        let error = small.validate().expect_err("a cap below the minimum");
        assert!(
            error.to_string().contains("max_progress_note_bytes"),
            "{error}"
        );
        let none = EventLimits {
            max_run_events: 0,
            ..EventLimits::default()
        };
        let error = none.validate().expect_err("a zero event cap");
        assert!(error.to_string().contains("max_run_events"), "{error}");
        assert_eq!(EventLimits::default().validate(), Ok(()));
    }
}
