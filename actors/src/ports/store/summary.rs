//! Runs as a listing shows them: a [`RunSummary`] is a run without its
//! flow, with each of its texts cut to its first [`SUMMARY_CHARS`]
//! characters, so that a page of runs costs at most its length times a
//! summary's size however long a run's task, answer or reasons are. The
//! whole run is [`RunStore::load_run`](super::RunStore::load_run)'s.
//!
//! Where a text is cut is `clip`, the one rule every store applies: a
//! store that can cut in its query (PostgreSQL's `left(…)`) reads no more
//! of a text than the summary keeps, plus one character that tells it was
//! cut.

use super::{PauseRecord, RunRecord, RunStatus, listing};

/// How many characters of each text a summary keeps: room for a line of
/// a task in a table, and at most 800 bytes of UTF-8.
pub const SUMMARY_CHARS: usize = 200;

/// A run as a listing shows it ([`RunStore::list_run_summaries`]).
///
/// [`RunStore::list_run_summaries`]: super::RunStore::list_run_summaries
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    /// The run.
    pub run_id: String,
    /// Its flow's name (empty if the flow has none), cut.
    pub flow_name: String,
    /// Its flow's task (empty if the flow has none), cut.
    pub task: String,
    /// Where it is.
    pub status: RunStatus,
    /// The executor that owns it, if any.
    pub owner_id: Option<String>,
    /// Its fencing token.
    pub fence: u64,
    /// When the owner's lease expires (Unix ms).
    pub lease_expires_at_ms: u64,
    /// Why it failed, was cancelled or orphaned, cut.
    pub reason: Option<String>,
    /// Its answer, cut.
    pub answer: Option<String>,
    /// Why it waits for a person: the reason, subject and path, each cut;
    /// never the call in question (its arguments are a model's).
    pub pause: Option<PauseRecord>,
    /// When it was created (Unix ms).
    pub created_at_ms: u64,
    /// When it last changed (Unix ms).
    pub updated_at_ms: u64,
    /// The texts that were cut, by name: `flow_name`, `task`, `reason`,
    /// `answer`, `pause.reason`, `pause.subject`, `pause.path`.
    pub truncated: Vec<&'static str>,
}

/// One page of run summaries, and where the next one starts: as
/// [`RunPage`](super::RunPage), without the flows and the whole texts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SummaryPage {
    /// The runs, in listing order (run id descending: newest first).
    pub runs: Vec<RunSummary>,
    /// The cursor of the next page, or `None` when no run follows.
    pub next: Option<String>,
}

/// Cuts `text` to its first [`SUMMARY_CHARS`] characters (at a character
/// boundary); whether anything was cut.
fn clip(text: &mut String) -> bool {
    match text.char_indices().nth(SUMMARY_CHARS) {
        Some((at, _)) => {
            text.truncate(at);
            true
        }
        None => false,
    }
}

impl RunSummary {
    /// The summary of `record`, each of its texts cut to its first
    /// [`SUMMARY_CHARS`] characters, at a character boundary.
    pub fn of(record: RunRecord) -> Self {
        let text = |key: &str| {
            record
                .flow
                .get(key)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Self {
            flow_name: listing::flow_name(&record).unwrap_or_default().to_owned(),
            task: text("task"),
            run_id: record.run_id,
            status: record.status,
            owner_id: record.owner_id,
            fence: record.fence,
            lease_expires_at_ms: record.lease_expires_at_ms,
            reason: record.reason,
            answer: record.answer,
            pause: record.pause,
            created_at_ms: record.created_at_ms,
            updated_at_ms: record.updated_at_ms,
            truncated: Vec::new(),
        }
        .clipped()
    }

    /// The summary with each of its texts cut to its first
    /// [`SUMMARY_CHARS`] characters and named in `truncated` when it was: what a store that reads texts whole, or a
    /// caller that replaces one (a live run's answer), applies last.
    #[must_use]
    pub fn clipped(mut self) -> Self {
        let mut cut = |name: &'static str, text: &mut String| {
            if clip(text) && !self.truncated.contains(&name) {
                self.truncated.push(name);
            }
        };
        cut("flow_name", &mut self.flow_name);
        cut("task", &mut self.task);
        if let Some(reason) = &mut self.reason {
            cut("reason", reason);
        }
        if let Some(answer) = &mut self.answer {
            cut("answer", answer);
        }
        if let Some(pause) = &mut self.pause {
            pause.call = None;
            cut("pause.reason", &mut pause.reason);
            cut("pause.subject", &mut pause.subject);
            cut("pause.path", &mut pause.path);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_is_cut_at_a_character_boundary_and_says_so() {
        let mut short = "é".repeat(SUMMARY_CHARS);
        assert!(!clip(&mut short));
        assert_eq!(short.chars().count(), SUMMARY_CHARS);
        let mut long = "é".repeat(SUMMARY_CHARS + 1);
        assert!(clip(&mut long));
        assert_eq!(long, "é".repeat(SUMMARY_CHARS));
    }

    #[test]
    fn a_summary_keeps_the_head_of_each_text_and_names_what_it_cut() {
        let long = "x".repeat(10_000);
        let record = RunRecord {
            trace_parent: None,
            tenant: None,
            run_id: "r".to_owned(),
            flow: serde_json::json!({"name": "f", "task": long, "system_prompt": long}),
            status: RunStatus::WaitingHuman,
            owner_id: None,
            fence: 1,
            lease_expires_at_ms: 0,
            reason: Some("short".to_owned()),
            answer: Some(long.clone()),
            pause: Some(PauseRecord {
                reason: long.clone(),
                subject: "tool".to_owned(),
                path: "run".to_owned(),
                call: None,
            }),
            created_at_ms: 1,
            updated_at_ms: 2,
            fork: None,
        };
        let summary = RunSummary::of(record);
        assert_eq!(summary.task.len(), SUMMARY_CHARS);
        assert_eq!(summary.flow_name, "f");
        assert_eq!(summary.reason.as_deref(), Some("short"));
        assert_eq!(summary.truncated, ["task", "answer", "pause.reason"]);
        // Clipping again cuts nothing more and names nothing twice.
        assert_eq!(summary.clone().clipped(), summary);
    }
}
