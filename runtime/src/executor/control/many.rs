//! One control for many runs: the runs a selection picks — by status,
//! flow, age and what each waits on — each given the same control through
//! [`Executor::control`], with its rules, or, in a dry run, only listed.
//! Bounded: one page of at most [`MAX_MANY`] runs, the report saying
//! whether more matched.

use std::sync::Arc;

use leasehold_actors::{Event, EventKind, RunCommand, RunQuery, RunStatus, StoreError};
use serde::Serialize;

use super::{Controlled, Executor};

/// The most runs one control for many acts on: more is a page after this
/// one (the report's `more`).
pub const MAX_MANY: usize = 500;

/// Which runs: a page of the store's listing, and what each waits on.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// The runs' status, flow and creation window, and how many at most
    /// (cut to [`MAX_MANY`]).
    pub query: RunQuery,
    /// Only runs waiting on this: a tool's name, or `model` for a model
    /// call in flight.
    pub waiting_on: Option<String>,
}

/// What one control for many did, run by run.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ManyReport {
    /// Whether nothing was done: the runs that would be are listed.
    pub dry_run: bool,
    /// The control, as the API names it.
    pub control: &'static str,
    /// Each run selected, in listing order (newest first).
    pub runs: Vec<ManyOutcome>,
    /// Whether more runs matched than were acted on (the page's limit).
    pub more: bool,
}

/// One run of a control for many.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ManyOutcome {
    /// The run.
    pub run_id: String,
    /// Its status when it was selected.
    pub status: RunStatus,
    /// What waits, when it waits on a call: the tool's name, or `model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_on: Option<String>,
    /// What the control did to it.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What a control did to one run of many.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// A dry run: it would be given the control.
    Selected,
    /// Applied here.
    Applied {
        /// Its status after.
        now: RunStatus,
    },
    /// Stored for the executor that holds it.
    Forwarded {
        /// That executor.
        owner_id: String,
    },
    /// Refused, with the rule's reason.
    Refused {
        /// Why.
        reason: String,
    },
}

impl ManyReport {
    /// How many runs the control was applied to, here or forwarded.
    pub fn done(&self) -> usize {
        self.runs
            .iter()
            .filter(|r| {
                matches!(
                    r.outcome,
                    Outcome::Applied { .. } | Outcome::Forwarded { .. }
                )
            })
            .count()
    }
}

impl Executor {
    /// Gives `command` to each run `selection` picks, as
    /// [`Executor::control`] gives it to one, in listing order; with
    /// `dry_run`, only lists them.
    pub async fn control_many(
        self: &Arc<Self>,
        selection: &Selection,
        command: &RunCommand,
        dry_run: bool,
    ) -> Result<ManyReport, StoreError> {
        let store = self.engine().store();
        let mut query = selection.query.clone();
        query.limit = query.limit.clamp(1, MAX_MANY);
        let page = store.list_run_summaries(&query).await?;
        let mut runs = Vec::with_capacity(page.runs.len());
        for summary in page.runs {
            let waiting_on = if summary.status.is_terminal() {
                None
            } else {
                waits_on(&store.load_events(&summary.run_id, 0).await?)
            };
            if let Some(wanted) = &selection.waiting_on
                && waiting_on.as_ref() != Some(wanted)
            {
                continue;
            }
            let outcome = if dry_run {
                Outcome::Selected
            } else {
                match self.control(&summary.run_id, command.clone()).await {
                    Ok(Controlled::Applied { status, .. }) => Outcome::Applied { now: status },
                    Ok(Controlled::Forwarded { owner_id, .. }) => Outcome::Forwarded { owner_id },
                    Err(refused) => Outcome::Refused {
                        reason: refused.to_string(),
                    },
                }
            };
            runs.push(ManyOutcome {
                run_id: summary.run_id,
                status: summary.status,
                waiting_on,
                outcome,
            });
        }
        Ok(ManyReport {
            dry_run,
            control: super::name(command),
            runs,
            more: page.next.is_some(),
        })
    }
}

/// What a run's log says it waits on: the tool of a call started and not
/// finished, or `model` for such a model call; the latest such.
pub fn waits_on(events: &[Event]) -> Option<String> {
    let mut open: Vec<(&str, String)> = Vec::new();
    for event in events {
        let path = &*event.path;
        match &event.kind {
            EventKind::ModelCallStarted { .. } => open.push((path, "model".to_owned())),
            EventKind::ToolCallStarted { tool, .. } => open.push((path, tool.clone())),
            EventKind::ModelCallFinished { .. } | EventKind::ToolCallFinished { .. } => {
                open.retain(|(at, _)| *at != path);
            }
            _ => {}
        }
    }
    open.pop().map(|(_, what)| what)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(path: &str, kind: EventKind) -> Event {
        Event {
            seq: 0,
            position: 0,
            at: 0,
            run_id: "r".into(),
            path: path.into(),
            kind,
        }
    }

    fn tool(tool: &str, finished: bool) -> EventKind {
        if finished {
            EventKind::ToolCallFinished {
                tool: tool.to_owned(),
                idempotency_key: "k".to_owned(),
                attempt: 1,
                outcome: leasehold_actors::CallOutcome::Ok,
            }
        } else {
            EventKind::ToolCallStarted {
                tool: tool.to_owned(),
                idempotency_key: "k".to_owned(),
                attempt: 1,
                lease_id: None,
            }
        }
    }

    #[test]
    fn a_run_waits_on_its_latest_call_started_and_not_finished() {
        let search = "run/tool_call:1.0";
        let deploy = "run/worker:ops:1/tool_call:1.0";
        assert_eq!(waits_on(&[]), None);
        let events = [
            event(search, tool("search", false)),
            event(deploy, tool("deploy", false)),
        ];
        assert_eq!(waits_on(&events).as_deref(), Some("deploy"));
        let events = [
            event(search, tool("search", false)),
            event(deploy, tool("deploy", false)),
            event(deploy, tool("deploy", true)),
        ];
        assert_eq!(waits_on(&events).as_deref(), Some("search"));
        let events = [
            event(search, tool("search", false)),
            event(search, tool("search", true)),
        ];
        assert_eq!(waits_on(&events), None);
    }
}
