//! What an operation's evidence amounts to when its lease is judged: the
//! records the evaluator, the verdict's audit trail and the events carry.
//! Plain data, apart from the cell that gathers it (`evidence.rs`), so that
//! the records that carry it need not know the cell.

use serde::{Deserialize, Serialize};

/// What one item of evidence is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EvidenceKind {
    /// Bytes of an answer's text (or of a whole answer being read).
    Text,
    /// Bytes of a model's reasoning.
    Reasoning,
    /// Bytes of a tool call's name or arguments being streamed.
    ToolCall,
    /// A progress value that rose toward its total.
    Progress,
    /// A worker's completed step.
    Step,
    /// A note from the operation itself (a client waiting out a rate
    /// limit, a scripted report).
    Note,
    /// A sign that the connection is open, and nothing more: an SSE
    /// comment, a chunk that adds nothing, a progress value that did not
    /// advance. Not an arrival: it earns no renewal.
    Keepalive,
}

impl EvidenceKind {
    /// Its name, as in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Reasoning => "reasoning",
            Self::ToolCall => "tool_call",
            Self::Progress => "progress",
            Self::Step => "step",
            Self::Note => "note",
            Self::Keepalive => "keepalive",
        }
    }
}

/// How many items of each kind a lease's evidence holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EvidenceKinds {
    /// Text items.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub text: u64,
    /// Reasoning items.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning: u64,
    /// Tool-call items.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_call: u64,
    /// Progress values that advanced.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub progress: u64,
    /// Worker steps.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub step: u64,
    /// Notes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub note: u64,
    /// Keepalives: not arrivals, not counted in [`EvidenceSummary::count`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub keepalive: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl EvidenceKinds {
    /// Whether no item of any kind arrived.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    pub(crate) fn add(&mut self, kind: EvidenceKind) {
        let slot = match kind {
            EvidenceKind::Text => &mut self.text,
            EvidenceKind::Reasoning => &mut self.reasoning,
            EvidenceKind::ToolCall => &mut self.tool_call,
            EvidenceKind::Progress => &mut self.progress,
            EvidenceKind::Step => &mut self.step,
            EvidenceKind::Note => &mut self.note,
            EvidenceKind::Keepalive => &mut self.keepalive,
        };
        *slot = slot.saturating_add(1);
    }

    /// `kind count` for every kind with items, in a fixed order:
    /// `"text 12, keepalive 40"`; empty when none arrived.
    pub fn describe(&self) -> String {
        [
            (EvidenceKind::Text, self.text),
            (EvidenceKind::Reasoning, self.reasoning),
            (EvidenceKind::ToolCall, self.tool_call),
            (EvidenceKind::Progress, self.progress),
            (EvidenceKind::Step, self.step),
            (EvidenceKind::Note, self.note),
            (EvidenceKind::Keepalive, self.keepalive),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| format!("{} {n}", kind.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// Where an operation's reported progress stands.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProgressSummary {
    /// The highest value reported within its total.
    pub value: f64,
    /// The total the last advancing report gave, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// The value at the lease's last judged expiry; `None` before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<f64>,
    /// Whether the value rose since the lease's last judged expiry (or was
    /// first reported since the lease started): the strongest evidence
    /// there is, renewed on without the evidence-streak limit.
    pub advanced: bool,
}

/// What the watchdog knows of a lease's liveness when it expires.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EvidenceSummary {
    /// Evidence items received since the operation started.
    pub count: u64,
    /// Milliseconds since the last item, time paused excluded; `None` if
    /// there was none.
    pub last_progress_age_ms: Option<u64>,
    /// The accrual detector's suspicion level; with no evidence at all
    /// (silence from the start), the suspicion of that silence against the
    /// learned time to a first item, `None` if none was learned.
    pub phi: Option<f64>,
    /// The last progress note, if the operation gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_note: Option<String>,
    /// The share of repeated word 3-grams in the tail of a stream's text,
    /// from 0 to almost 1 (see [`repetition`](crate::repetition)); `None` when the operation
    /// reported too little text to judge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition: Option<f64>,
    /// How many items of each kind arrived, keepalives included.
    #[serde(default, skip_serializing_if = "EvidenceKinds::is_empty")]
    pub kinds: EvidenceKinds,
    /// Milliseconds since the last keepalive, time paused excluded; `None`
    /// if there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_age_ms: Option<u64>,
    /// Where reported progress stands, if a value was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressSummary>,
}

impl EvidenceSummary {
    /// The evidence in words: the one description the verdict's reason, the
    /// evaluator's prompt and the trace share, so that what the evaluator
    /// is told is what the trace records. With `threshold`, phi is set
    /// against it.
    ///
    /// ```
    /// use leasehold_actors::EvidenceSummary;
    ///
    /// let silent = EvidenceSummary { phi: Some(8.07), ..EvidenceSummary::default() };
    /// assert_eq!(
    ///     silent.describe(None),
    ///     "0 items, none since the operation started, phi 8.07 against the learned time to a first item"
    /// );
    /// ```
    pub fn describe(&self, threshold: Option<f64>) -> String {
        use std::fmt::Write as _;
        let mut text = format!(
            "{} item{}",
            self.count,
            if self.count == 1 { "" } else { "s" }
        );
        let against = |phi: f64| match threshold {
            Some(threshold) if phi < threshold => format!("phi {phi:.2} below {threshold:.1}"),
            Some(threshold) => format!("phi {phi:.2} at or above {threshold:.1}"),
            None => format!("phi {phi:.2}"),
        };
        match (self.last_progress_age_ms, self.phi) {
            (Some(age), Some(phi)) => {
                let _ = write!(text, ", the last {age} ms ago, {}", against(phi));
            }
            (Some(age), None) => {
                let _ = write!(text, ", the last {age} ms ago (phi undefined)");
            }
            (None, Some(phi)) => {
                let _ = write!(
                    text,
                    ", none since the operation started, {} against the learned time to a \
                     first item",
                    against(phi)
                );
            }
            (None, None) => {
                text.push_str(", none since the operation started (phi undefined)");
            }
        }
        let kinds = self.kinds.describe();
        if !kinds.is_empty() {
            let _ = write!(text, "; by kind: {kinds}");
        }
        if let Some(age) = self.keepalive_age_ms {
            let _ = write!(text, "; the last keepalive {age} ms ago");
        }
        if let Some(progress) = &self.progress {
            let _ = write!(text, "; progress {}", progress.value);
            if let Some(total) = progress.total {
                let _ = write!(text, " of {total}");
            }
            let moved = if progress.advanced {
                "rose since the last expiry"
            } else {
                "did not move since the last expiry"
            };
            let _ = write!(text, " ({moved})");
        }
        if let Some(note) = &self.last_note {
            let _ = write!(text, "; last progress note: {note:?}");
        }
        if let Some(share) = self.repetition {
            let _ = write!(text, "; repetition {share:.2}");
        }
        text
    }
}

/// How an operation watched by a lease ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TimedEnd {
    /// It ended by itself: answered, or failed on its own.
    Ended,
    /// It was cut: by a verdict (`INTERVENE`, `ESCALATE`, the renewal cap),
    /// its parent, a pause or the run's end.
    Cut,
}

/// How one operation went, in time: what a run's log keeps of each
/// operation its leases watched (`operation_timed`), so that another
/// strategy can be played on the same timing (`leasehold experiment
/// --from-runs`). Times are milliseconds from the operation's start, time
/// paused excluded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OperationTiming {
    /// From its start to its end.
    pub duration_ms: u64,
    /// Evidence items received (keepalives aside).
    pub items: u64,
    /// When the first item came, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_item_ms: Option<u64>,
    /// When the last item came, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_item_ms: Option<u64>,
    /// The longest silence between two items, or before the first.
    pub longest_silence_ms: u64,
    /// How many items came before that silence.
    pub silence_after: u64,
    /// Keepalives received.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub keepalives: u64,
    /// Its longest silences between two items (at most
    /// [`TIMED_SILENCES`](crate::TIMED_SILENCES)), each as how many items
    /// came before it and its length, in the order they came.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub silences: Vec<(u64, u64)>,
    /// The highest progress value it reported, and the total it was
    /// reported against, if it reported values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<(f64, Option<f64>)>,
    /// How it ended.
    pub ended: TimedEnd,
    /// How often its lease was renewed.
    pub renewals: u32,
}
