//! `leasehold runs many ACTION`: one control — pause, resume, cancel, a
//! message — for the runs a filter selects, through the executor's
//! [`control_many`](leasehold::executor::Executor::control_many) (or a
//! server's `POST /runs/actions`), or with `--dry-run` the list of the
//! runs it would be given to. Prints the report as JSON.

use clap::{Args, ValueEnum};
use leasehold::executor::control::by_hand;
use leasehold::executor::control::many::{MAX_MANY, Selection};
use leasehold::run_limits::PersonText;
use leasehold::{InFlight, RunCommand, RunQuery, RunStatus, Steer};
use leasehold_server::{parse_instant, parse_status};

use super::CliError;

/// What to do to the runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ManyAction {
    /// Pause each, as `runs pause` does.
    Pause,
    /// Resume each, as `runs resume` does.
    Resume,
    /// Cancel each.
    Cancel,
    /// Send each a message, as `runs steer` does (not `rollback`).
    Message,
}

impl ManyAction {
    fn name(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Cancel => "cancel",
            Self::Message => "message",
        }
    }
}

/// `runs many`.
#[derive(Debug, Args)]
pub struct ManyArgs {
    /// What to do to each run selected.
    pub(super) action: ManyAction,
    /// Only runs in this status.
    #[arg(long, value_parser = parse_status)]
    pub(super) status: Option<RunStatus>,
    /// Only runs of the flow of this name.
    #[arg(long, value_name = "NAME")]
    pub(super) flow: Option<String>,
    /// Only runs created at or after this time (Unix ms or RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = parse_instant)]
    pub(super) since: Option<u64>,
    /// Only runs created before this time (Unix ms or RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = parse_instant)]
    pub(super) until: Option<u64>,
    /// Only runs waiting on this tool, or on `model`.
    #[arg(long, value_name = "TOOL")]
    pub(super) waiting_on: Option<String>,
    /// At most this many runs (at most 500).
    #[arg(long, default_value_t = MAX_MANY)]
    pub(super) limit: usize,
    /// List the runs it would act on, and do nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// Why (pause, cancel).
    #[arg(long)]
    pub(super) reason: Option<String>,
    /// What the person says (resume).
    #[arg(long)]
    pub(super) guidance: Option<String>,
    /// The message (message).
    #[arg(long)]
    pub(super) text: Option<String>,
    /// How the message reaches each run: enqueue, interrupt or reject.
    #[arg(long, value_parser = super::runs::parse_steer)]
    pub(super) policy: Option<Steer>,
    /// Stop the calls in flight of each run paused (pause).
    #[arg(long)]
    pub(super) cancel_in_flight: bool,
    /// Who asks, as each run's trace will say it.
    #[arg(long)]
    pub(super) by: Option<String>,
}

/// Who asks, when the command line does not say.
const FROM_THE_COMMAND_LINE: &str = "a person at the command line";

impl ManyArgs {
    /// The runs selected; refused without a filter (it would be every run).
    pub(super) fn selection(&self) -> Result<Selection, CliError> {
        if self.status.is_none()
            && self.flow.is_none()
            && self.since.is_none()
            && self.until.is_none()
            && self.waiting_on.is_none()
        {
            return Err(CliError::other(
                "runs many needs a filter (--status, --flow, --since, --until or --waiting-on): \
                 without one it would be every run"
                    .to_owned(),
            ));
        }
        let mut query = RunQuery::first(self.limit.clamp(1, MAX_MANY));
        query.status = self.status;
        query.flow.clone_from(&self.flow);
        query.created_from_ms = self.since;
        query.created_before_ms = self.until;
        Ok(Selection {
            query,
            waiting_on: self.waiting_on.clone(),
        })
    }

    fn who(&self) -> Result<String, CliError> {
        by_hand::who(self.by.as_deref(), FROM_THE_COMMAND_LINE).map_err(CliError::other)
    }

    /// The control for each run, its texts held to their limits.
    pub(super) fn command(
        &self,
        check: impl Fn(PersonText, &str) -> Result<(), CliError>,
    ) -> Result<RunCommand, CliError> {
        let by = self.who()?;
        if let Some(reason) = &self.reason {
            check(PersonText::Reason, reason)?;
        }
        Ok(match self.action {
            ManyAction::Pause => RunCommand::Pause {
                reason: self
                    .reason
                    .clone()
                    .unwrap_or_else(|| "paused with other runs from the command line".to_owned()),
                in_flight: if self.cancel_in_flight {
                    InFlight::Cancel
                } else {
                    InFlight::Finish
                },
                by,
            },
            ManyAction::Resume => {
                if let Some(guidance) = &self.guidance {
                    check(PersonText::Guidance, guidance)?;
                }
                RunCommand::Resume {
                    guidance: self.guidance.clone(),
                }
            }
            ManyAction::Cancel => RunCommand::Cancel {
                reason: self
                    .reason
                    .clone()
                    .unwrap_or_else(|| format!("cancelled with other runs by {by}")),
            },
            ManyAction::Message => {
                let Some(text) = self.text.clone().filter(|t| !t.trim().is_empty()) else {
                    return Err(CliError::other("runs many message needs --text".to_owned()));
                };
                check(PersonText::Guidance, &text)?;
                let policy = self.policy.unwrap_or_default();
                if policy == Steer::Rollback {
                    return Err(CliError::other(
                        "a message to many runs cannot roll them back: send it to each run"
                            .to_owned(),
                    ));
                }
                RunCommand::Message { text, policy, by }
            }
        })
    }

    /// The body of `POST /runs/actions` these flags ask for.
    pub(super) fn body(&self) -> Result<serde_json::Value, CliError> {
        self.selection()?;
        Ok(serde_json::json!({
            "action": self.action.name(),
            "status": self.status,
            "flow": self.flow,
            "since": self.since.map(|ms| ms.to_string()),
            "until": self.until.map(|ms| ms.to_string()),
            "waiting_on": self.waiting_on,
            "limit": self.limit,
            "dry_run": self.dry_run,
            "reason": self.reason,
            "guidance": self.guidance,
            "text": self.text,
            "policy": self.policy,
            "in_flight": if self.cancel_in_flight { InFlight::Cancel } else { InFlight::Finish },
            "by": self.who()?,
        }))
    }
}
