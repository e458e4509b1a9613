//! What a demo run showed, counted from its events.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use serde::Serialize;

use leasehold::printable::printable;
use leasehold::trace::TraceSummary;
use leasehold::{DecidedBy, Event, EventKind, LeaseKind, RunState, RunStatus, Verdict, counted};

/// Who answered a pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Responder {
    /// The driver, automatically, after a visible pause.
    Auto,
    /// The person at the terminal, on standard input.
    Stdin,
    /// Someone else: the HTTP API, the dashboard, another process.
    External,
}

impl Responder {
    fn describe(self) -> &'static str {
        match self {
            Self::Auto => "automatically",
            Self::Stdin => "by the person at the terminal",
            Self::External => "from outside the driver (HTTP API or dashboard)",
        }
    }
}

/// One pause of the run and how it was answered.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PauseAnswer {
    /// What was being done when the run paused.
    pub subject: String,
    /// Why it paused.
    pub reason: String,
    /// Who answered.
    pub answered_by: Responder,
    /// The guidance given with the answer, if any.
    pub guidance: Option<String>,
    /// How long the run waited, in milliseconds.
    pub waited_ms: u64,
}

/// A tool call that was started more than once.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeyedRetry {
    /// The tool.
    pub tool: String,
    /// The call's path in the run's tree.
    pub path: String,
    /// The idempotency key of each attempt, in attempt order, from the
    /// `tool_call_started` events.
    pub keys: Vec<String>,
    /// Whether a `restarted` event preceded the later attempts.
    pub restarted: bool,
    /// How many calls with this key the tool server saw, once its record
    /// is attached ([`DemoReport::attach_server_record`]).
    pub server_saw: Option<usize>,
}

impl KeyedRetry {
    /// Whether every attempt carried the first attempt's key.
    pub fn same_key(&self) -> bool {
        self.keys.len() >= 2 && self.keys.windows(2).all(|pair| pair[0] == pair[1])
    }
}

/// One budget extension.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Extension {
    /// The loop that was extended.
    pub path: String,
    /// Steps it had used.
    pub steps_used: u32,
    /// Its limit before.
    pub limit: u32,
    /// Its limit after.
    pub new_limit: u32,
    /// Who decided.
    pub decided_by: DecidedBy,
    /// Why.
    pub reason: String,
}

/// How a demo run went: what it showed, counted from its events.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DemoReport {
    /// The run.
    pub run_id: String,
    /// Its final state.
    pub state: RunState,
    /// Wall time from start to end, in milliseconds.
    pub elapsed_ms: u64,
    /// Every decision, counted as `GET /runs/{id}/trace` counts them:
    /// verdicts by who decided and by verdict, evaluator calls, extensions,
    /// wrap-ups, restarts, interventions, escalations, pauses.
    pub trace: TraceSummary,
    /// What the run spent: tokens, and money at the configured prices.
    pub usage: leasehold::UsageReport,
    /// Model-stream leases renewed on the evidence of their chunks.
    pub stream_renewed_by_evidence: usize,
    /// Model-stream verdicts that needed the evaluator (none, when streams
    /// keep sending).
    pub stream_evaluator_calls: usize,
    /// Tool-call leases renewed on the evidence of MCP progress.
    pub tool_renewed_by_progress: usize,
    /// Each budget extension.
    pub budget_extensions: Vec<Extension>,
    /// How each pause was answered.
    pub answers: Vec<PauseAnswer>,
    /// Tool calls started more than once.
    pub retries: Vec<KeyedRetry>,
    /// Whether a tool call was restarted and every attempt carried the same
    /// idempotency key.
    pub same_key_retry: bool,
    /// Events the driver's subscription lost by falling behind (the counts
    /// above miss them).
    pub events_lost: u64,
}

impl DemoReport {
    /// The report of run `run_id`, ended in `state`, from its `events`.
    pub(crate) fn from_events(
        run_id: String,
        state: RunState,
        events: &[Event],
        answers: Vec<PauseAnswer>,
        elapsed_ms: u64,
        events_lost: u64,
    ) -> Self {
        let (mut stream_by_evidence, mut stream_evaluator, mut tool_by_progress) = (0, 0, 0);
        let mut budget_extensions = Vec::new();
        let mut starts: BTreeMap<&str, Vec<(u32, &str, &str)>> = BTreeMap::new();
        let mut restarted: BTreeSet<&str> = BTreeSet::new();
        for event in events {
            match &event.kind {
                EventKind::Verdict(record) => {
                    let renewed_on_evidence = record.decided_by == DecidedBy::Evidence
                        && record.verdict == Verdict::Renew;
                    match record.lease_kind {
                        LeaseKind::ModelStream => {
                            stream_by_evidence += usize::from(renewed_on_evidence);
                            stream_evaluator +=
                                usize::from(record.decided_by == DecidedBy::Evaluator);
                        }
                        LeaseKind::ToolCall => {
                            tool_by_progress += usize::from(
                                record.verdict == Verdict::Renew
                                    && matches!(
                                        record.decided_by,
                                        DecidedBy::Evidence | DecidedBy::Progress
                                    ),
                            );
                        }
                        LeaseKind::ModelBlocking | LeaseKind::WorkerStep => {}
                    }
                }
                EventKind::BudgetExtended(record) => budget_extensions.push(Extension {
                    path: event.path.to_string(),
                    steps_used: record.figures.steps_used,
                    limit: record.figures.limit,
                    new_limit: record.new_limit,
                    decided_by: record.decided_by,
                    reason: record.reason.clone(),
                }),
                EventKind::ToolCallStarted {
                    tool,
                    idempotency_key,
                    attempt,
                    ..
                } => starts.entry(&*event.path).or_default().push((
                    *attempt,
                    idempotency_key.as_str(),
                    tool.as_str(),
                )),
                EventKind::Restarted { .. } => {
                    restarted.insert(&*event.path);
                }
                _ => {}
            }
        }
        let retries: Vec<KeyedRetry> = starts
            .into_iter()
            .filter(|(_, attempts)| attempts.len() >= 2)
            .map(|(path, mut attempts)| {
                attempts.sort_by_key(|(attempt, _, _)| *attempt);
                KeyedRetry {
                    tool: attempts
                        .first()
                        .map(|(_, _, tool)| (*tool).to_owned())
                        .unwrap_or_default(),
                    path: path.to_owned(),
                    keys: attempts
                        .iter()
                        .map(|(_, key, _)| (*key).to_owned())
                        .collect(),
                    restarted: restarted.contains(path),
                    server_saw: None,
                }
            })
            .collect();
        let same_key_retry = retries.iter().any(|r| r.restarted && r.same_key());
        Self {
            run_id,
            state,
            elapsed_ms,
            trace: TraceSummary::of(events),
            usage: leasehold::UsageReport::of(events),
            stream_renewed_by_evidence: stream_by_evidence,
            stream_evaluator_calls: stream_evaluator,
            tool_renewed_by_progress: tool_by_progress,
            budget_extensions,
            answers,
            retries,
            same_key_retry,
            events_lost,
        }
    }

    /// Adds what the tool server saw — every `(tool, idempotency key)` of
    /// its calls ([`DemoStack::idempotency_keys_seen`](super::DemoStack::idempotency_keys_seen))
    /// — to each retried call, so the report shows that the server got the
    /// same key on every attempt.
    pub fn attach_server_record(&mut self, seen: &[(String, String)]) {
        for retry in &mut self.retries {
            let Some(key) = retry.keys.first() else {
                continue;
            };
            retry.server_saw = Some(seen.iter().filter(|(_, k)| k == key).count());
        }
    }

    /// Whether the demo showed everything it is meant to: the run completed;
    /// a model stream was renewed on the evidence of its chunks with no
    /// evaluator call; a slow tool was renewed on its MCP progress; a hung
    /// tool was intervened and restarted with the same idempotency key (and,
    /// once the server's record is attached, the server saw that key on
    /// every attempt); a budget was extended; the run paused exactly once on
    /// an escalation and was answered.
    pub fn as_expected(&self) -> bool {
        let server_agrees = self
            .retries
            .iter()
            .all(|r| r.server_saw.is_none_or(|seen| seen >= r.keys.len()));
        self.state.status == RunStatus::Completed
            && self.stream_renewed_by_evidence >= 1
            && self.stream_evaluator_calls == 0
            && self.tool_renewed_by_progress >= 1
            && self.trace.intervened >= 1
            && self.trace.restarts >= 1
            && self.same_key_retry
            && server_agrees
            && self.trace.extensions >= 1
            && self.trace.escalated >= 1
            && self.trace.pauses == 1
            && self.answers.len() == 1
    }

    /// Writes the summary: the outcome, the verdicts and who decided them,
    /// and the evidence of each scenario.
    pub fn write_summary(&self, out: &mut impl Write) -> io::Result<()> {
        let status = serde_json::to_value(self.state.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("{:?}", self.state.status));
        writeln!(out)?;
        writeln!(out, "summary of run {}", self.run_id)?;
        writeln!(out, "  status        {status}")?;
        // The model's words and the peers' errors are printed as text.
        if let Some(answer) = &self.state.answer {
            writeln!(out, "  answer        {}", printable(answer))?;
        }
        if let Some(reason) = &self.state.reason {
            writeln!(out, "  reason        {}", printable(reason))?;
        }
        writeln!(
            out,
            "  took          {}.{} s",
            self.elapsed_ms / 1000,
            (self.elapsed_ms % 1000) / 100
        )?;
        writeln!(
            out,
            "  verdicts      {} in all; by who decided: {}; by verdict: {}; {} for verdicts and budgets",
            self.trace.verdicts,
            tally(&self.trace.verdicts_by_decider),
            tally(&self.trace.verdicts_by_verdict),
            counted(self.trace.evaluator_calls, "evaluator call")
        )?;
        writeln!(out, "  spent         {}", spent(&self.usage))?;
        writeln!(
            out,
            "  model stream  renewed {} on the evidence of its chunks, {}",
            counted(self.stream_renewed_by_evidence, "time"),
            counted(self.stream_evaluator_calls, "evaluator call")
        )?;
        writeln!(
            out,
            "  slow tool     renewed {} on the evidence of its MCP progress",
            counted(self.tool_renewed_by_progress, "time")
        )?;
        if self.retries.is_empty() {
            writeln!(out, "  retried tool  none")?;
        }
        for retry in &self.retries {
            let keys = if retry.same_key() {
                format!(
                    "all {} attempts carried the key {}",
                    retry.keys.len(),
                    retry.keys.first().map_or("", String::as_str)
                )
            } else {
                format!("the attempts carried different keys: {:?}", retry.keys)
            };
            let server = match retry.server_saw {
                Some(seen) => format!("; the tool server saw that key {}", counted(seen, "time")),
                None => String::new(),
            };
            writeln!(
                out,
                "  retried tool  {} ({}) {}: {keys}{server}",
                retry.tool,
                retry.path,
                if retry.restarted {
                    "restarted by its supervisor"
                } else {
                    "started again"
                }
            )?;
        }
        if self.budget_extensions.is_empty() {
            writeln!(out, "  budget        no extension")?;
        }
        for extension in &self.budget_extensions {
            writeln!(
                out,
                "  budget        {} extended from {} to {} steps after {} (by {}: {})",
                extension.path,
                extension.limit,
                extension.new_limit,
                extension.steps_used,
                extension.decided_by,
                extension.reason
            )?;
        }
        if self.answers.is_empty() {
            writeln!(out, "  pause         none answered")?;
        }
        for answer in &self.answers {
            let guidance = answer.guidance.as_deref().map_or_else(
                || "without guidance".to_owned(),
                |g| format!("with \"{g}\""),
            );
            writeln!(
                out,
                "  pause         `{}` escalated ({}); the run waited {}.{} s and was answered {} {guidance}",
                answer.subject,
                answer.reason,
                answer.waited_ms / 1000,
                (answer.waited_ms % 1000) / 100,
                answer.answered_by.describe()
            )?;
        }
        writeln!(
            out,
            "  counts        {}, {}, {}, {}, {} intervened, {} escalated",
            counted(self.trace.extensions, "extension"),
            counted(self.trace.wrap_ups, "wrap-up"),
            counted(self.trace.restarts, "restart"),
            counted(self.trace.pauses, "pause"),
            self.trace.intervened,
            self.trace.escalated
        )?;
        if self.events_lost > 0 {
            writeln!(
                out,
                "  events lost   {} (the driver fell behind; the counts above miss them)",
                self.events_lost
            )?;
        }
        writeln!(
            out,
            "  as expected   {}",
            if self.as_expected() { "yes" } else { "NO" }
        )
    }
}

/// `a 3, b 1`, or `none`.
fn tally(counts: &BTreeMap<String, usize>) -> String {
    if counts.is_empty() {
        return "none".to_owned();
    }
    counts
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a run spent, in a line: its tokens, the evaluator's apart, and
/// their price when its calls had one.
fn spent(usage: &leasehold::UsageReport) -> String {
    let total = &usage.total;
    let mut parts = vec![format!(
        "{} tokens ({} in, {} out) over {}, the evaluator's {} of them",
        total.tokens(),
        total.input_tokens,
        total.output_tokens,
        counted(total.calls, "call"),
        usage.watchdog.tokens() + usage.budget.tokens()
    )];
    if total.counted_calls > 0 {
        parts.push(format!(
            "{} counted here, their server reported no usage",
            counted(total.counted_calls, "call")
        ));
    }
    parts.push(match total.unpriced_calls {
        0 if total.calls > 0 => format!("cost {:.6} at the configured prices", total.spent),
        n if n < total.calls => format!(
            "cost {:.6} at the configured prices, {} of a model without one",
            total.spent,
            counted(n, "call")
        ),
        _ => "no [prices] configured for its models".to_owned(),
    });
    parts.join("; ")
}
