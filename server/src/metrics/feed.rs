//! The event feed: one task reads the engine's bus and counts what each
//! event says, so the counters are the event log's own figures.
//!
//! A call's latency is the span between its `*_started` and `*_finished`
//! events (their `at`, from the engine's clock). A start waits in a map
//! until its end comes; a run that ends drops the starts it left, so the
//! map holds only calls in flight. An end whose start this feed did not see
//! (the call began before the server did) is counted, not timed.

use std::collections::HashMap;
use std::time::Duration;

use leasehold::{
    BUDGET_CONSUMER, BudgetRecord, DecidedBy, EvaluatorUsage, Event, EventKind, EventStream,
    TokenCost, WATCHDOG_CONSUMER,
};
use tokio_util::sync::CancellationToken;

use super::{Counters, Labels, Metrics, outcome_name, verdict_name};

/// Who judged: the evaluator's consumer, who decided, and the evaluator's
/// usage when it was called.
type Judged<'a> = (&'static str, DecidedBy, Option<&'a EvaluatorUsage>);

/// The feed's state: the starts of calls in flight.
pub(super) struct Tally<'a> {
    metrics: &'a Metrics,
    /// `at` of each model call in flight, by run and loop path (a loop
    /// makes one model call at a time).
    model_started: HashMap<(std::sync::Arc<str>, std::sync::Arc<str>), u64>,
    /// `at` of each tool call attempt in flight, by run, idempotency key
    /// and attempt.
    tool_started: HashMap<(std::sync::Arc<str>, String, u32), u64>,
}

impl<'a> Tally<'a> {
    pub(super) fn new(metrics: &'a Metrics) -> Self {
        Self {
            metrics,
            model_started: HashMap::new(),
            tool_started: HashMap::new(),
        }
    }

    /// Counts every event of `events` until `stop` or the bus ends. Events
    /// lost to a lag are counted as missed, never guessed.
    pub(super) async fn run(mut self, mut events: EventStream, stop: CancellationToken) {
        loop {
            let received = tokio::select! {
                received = events.recv() => received,
                () = stop.cancelled() => return,
            };
            match received {
                Some(Ok(event)) => self.record(&event),
                Some(Err(lagged)) => {
                    tracing::warn!(%lagged, "the metrics feed fell behind the event bus");
                    self.metrics.events_missed.inc_by(lagged.missed);
                }
                None => return,
            }
        }
    }

    /// Counts one event.
    pub(super) fn record(&mut self, event: &Event) {
        let m = self.metrics;
        m.events.get_or_create(&[("kind", event.kind.name())]).inc();
        match &event.kind {
            EventKind::Wait { lease_kind, .. } => {
                m.lease_expiries
                    .get_or_create(&[("lease_kind", lease_kind.as_str())])
                    .inc();
            }
            EventKind::Verdict(record) => self.decided(
                &m.verdicts,
                [
                    ("verdict", verdict_name(record.verdict)),
                    ("decided_by", record.decided_by.as_str()),
                    ("lease_kind", record.lease_kind.as_str()),
                ],
                (
                    WATCHDOG_CONSUMER,
                    record.decided_by,
                    record.evaluator.as_ref(),
                ),
            ),
            EventKind::BudgetExtended(record) => self.budget("extended", record),
            EventKind::BudgetExhausted(record) => self.budget("exhausted", record),
            EventKind::ModelCallStarted { .. } => {
                self.model_started
                    .insert((event.run_id.clone(), event.path.clone()), event.at);
            }
            EventKind::ModelCallFinished {
                outcome,
                usage,
                spent,
                ..
            } => {
                self.spent("model", *usage, *spent);
                let outcome = [("outcome", outcome_name(*outcome))];
                m.model_calls.get_or_create(&outcome).inc();
                let key = (event.run_id.clone(), event.path.clone());
                if let Some(started) = self.model_started.remove(&key) {
                    m.model_call_duration
                        .get_or_create(&outcome)
                        .observe(span(started, event.at));
                }
            }
            EventKind::ToolCallStarted {
                idempotency_key,
                attempt,
                ..
            } => {
                let key = (event.run_id.clone(), idempotency_key.clone(), *attempt);
                self.tool_started.insert(key, event.at);
            }
            EventKind::ToolCallFinished {
                idempotency_key,
                attempt,
                outcome,
                ..
            } => {
                let outcome = [("outcome", outcome_name(*outcome))];
                m.tool_calls.get_or_create(&outcome).inc();
                let key = (event.run_id.clone(), idempotency_key.clone(), *attempt);
                if let Some(started) = self.tool_started.remove(&key) {
                    m.tool_call_duration
                        .get_or_create(&outcome)
                        .observe(span(started, event.at));
                }
            }
            EventKind::RunCompleted { .. }
            | EventKind::RunFailed { .. }
            | EventKind::RunCancelled { .. } => {
                self.model_started
                    .retain(|(run, _), _| *run != event.run_id);
                self.tool_started
                    .retain(|(run, _, _), _| *run != event.run_id);
            }
            _ => {}
        }
    }

    fn budget(&self, decision: &'static str, record: &BudgetRecord) {
        self.decided(
            &self.metrics.budget_checkpoints,
            [
                ("decision", decision),
                ("decided_by", record.decided_by.as_str()),
            ],
            (
                BUDGET_CONSUMER,
                record.decided_by,
                record.evaluator.as_ref(),
            ),
        );
    }

    /// Counts a decision under `labels` in `family`, and the evaluator call
    /// behind it, if any.
    fn decided<const N: usize>(
        &self,
        family: &Counters<N>,
        labels: Labels<N>,
        (consumer, decided_by, usage): Judged<'_>,
    ) {
        family.get_or_create(&labels).inc();
        self.evaluated(consumer, decided_by, usage);
    }

    /// Times an evaluator call, when there was one: `answered` when its
    /// answer decided, `failed` when the breaker did.
    fn evaluated(
        &self,
        consumer: &'static str,
        decided_by: DecidedBy,
        usage: Option<&EvaluatorUsage>,
    ) {
        let Some(usage) = usage else {
            return;
        };
        let role = if consumer == BUDGET_CONSUMER {
            "budget"
        } else {
            "watchdog"
        };
        self.spent(role, usage.cost, usage.spent);
        let outcome = if decided_by == DecidedBy::Evaluator {
            "answered"
        } else {
            "failed"
        };
        self.metrics
            .evaluator_calls
            .get_or_create(&[("consumer", consumer), ("outcome", outcome)])
            .observe(Duration::from_millis(usage.latency_ms).as_secs_f64());
    }
}

impl Tally<'_> {
    /// Counts the tokens and money of one call by `role`.
    fn spent(&self, role: &'static str, usage: TokenCost, spent: Option<f64>) {
        let source = if usage.counted { "counted" } else { "reported" };
        for (direction, tokens) in [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
        ] {
            self.metrics
                .tokens
                .get_or_create(&[("role", role), ("direction", direction), ("source", source)])
                .inc_by(tokens);
        }
        if let Some(spent) = spent {
            self.metrics
                .spent
                .get_or_create(&[("role", role)])
                .inc_by(spent);
        }
    }
}

/// Seconds from `started` to `ended` (Unix ms), never negative.
fn span(started: u64, ended: u64) -> f64 {
    Duration::from_millis(ended.saturating_sub(started)).as_secs_f64()
}

#[cfg(test)]
mod tests {
    use leasehold::{CallOutcome, TokenCost};

    use super::*;

    fn event(run_id: &str, path: &str, at: u64, kind: EventKind) -> Event {
        Event {
            seq: at,
            position: at,
            at,
            run_id: run_id.into(),
            path: path.into(),
            kind,
        }
    }

    fn model_finished(outcome: CallOutcome) -> EventKind {
        EventKind::ModelCallFinished {
            attempt: 1,
            model: None,
            spent: None,
            step: 1,
            outcome,
            tool_calls: 0,
            usage: TokenCost::default(),
            finish_reason: None,
        }
    }

    fn started() -> EventKind {
        EventKind::ModelCallStarted {
            step: 1,
            stream: true,
            attempt: 1,
            lease_id: None,
        }
    }

    /// The scrape's lines.
    fn lines(metrics: &Metrics) -> Vec<String> {
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics.registry)
            .expect("encoded");
        text.lines().map(str::to_owned).collect()
    }

    fn has(metrics: &Metrics, line: &str) -> bool {
        lines(metrics).iter().any(|l| l == line)
    }

    #[test]
    fn a_call_is_timed_from_its_start_event_to_its_end_event() {
        let metrics = Metrics::new();
        let mut tally = Tally::new(&metrics);
        tally.record(&event("a", "run", 1_000, started()));
        tally.record(&event("b", "run", 1_200, started()));
        tally.record(&event("a", "run", 3_500, model_finished(CallOutcome::Ok)));
        for line in [
            r#"leasehold_model_call_duration_seconds_count{outcome="ok"} 1"#,
            r#"leasehold_model_call_duration_seconds_sum{outcome="ok"} 2.5"#,
            r#"leasehold_model_calls_total{outcome="ok"} 1"#,
        ] {
            assert!(has(&metrics, line), "{line}: {:#?}", lines(&metrics));
        }
        assert_eq!(tally.model_started.len(), 1, "b's call is still in flight");
    }

    #[test]
    fn an_end_without_its_start_is_counted_not_timed_and_a_run_end_drops_its_starts() {
        let metrics = Metrics::new();
        let mut tally = Tally::new(&metrics);
        tally.record(&event("a", "run", 5, model_finished(CallOutcome::Error)));
        assert!(has(
            &metrics,
            r#"leasehold_model_calls_total{outcome="error"} 1"#
        ));
        let timed = lines(&metrics)
            .into_iter()
            .filter(|l| l.starts_with("leasehold_model_call_duration_seconds"))
            .count();
        assert_eq!(timed, 0, "{:#?}", lines(&metrics));
        tally.record(&event("a", "run/worker:w:1", 6, started()));
        tally.record(&event("b", "run", 7, started()));
        tally.record(&event(
            "a",
            "run",
            8,
            EventKind::RunCancelled {
                reason: "enough".to_owned(),
            },
        ));
        let left: Vec<_> = tally.model_started.keys().map(|(run, _)| &**run).collect();
        assert_eq!(left, ["b"]);
        assert!(has(
            &metrics,
            r#"leasehold_events_total{kind="model_call_started"} 2"#
        ));
    }
}
