//! What an operator scrapes: `GET /metrics`, in the Prometheus text format
//! (version 0.0.4), from one [`Metrics`] registry per server.
//!
//! Each figure has one source, chosen so that it is right:
//!
//! - **What runs did** — lease expiries, verdicts by kind, by who decided
//!   and by lease kind, budget checkpoints, evaluator, model and tool calls
//!   and their latency, events by kind — is counted by one task that reads
//!   the engine's bus ([`Metrics::follow`]), the same events the store's log
//!   keeps: the counters say exactly what the event log says, for the runs
//!   this process executes, since the server started. Latencies are the
//!   span between a call's `*_started` and `*_finished` events.
//! - **Runs by status** are read from the store when scraped, so they are
//!   right for every run it holds, those no process runs live included:
//!   from the counts each store keeps as runs change
//!   ([`StatusCounts`](leasehold::StatusCounts), PostgreSQL's `run_counts`),
//!   so that a scrape reads no run and costs the same at 100 runs stored as
//!   at 100 000.
//! - **Live leases** are the engine's own count when scraped
//!   ([`Engine::live_leases`]).
//! - **The executor's lag, its admitted limit and its live runs** are read
//!   from its admission when scraped ([`Metrics::set_admission`]); the
//!   queue is `leasehold_runs{status="queued"}`, counted in the store.
//! - **Event-stream clients** go up when a stream opens and down when it
//!   ends.
//! - **Store write latency** is timed by [`MeteredStore`], a decorator of
//!   the store port the engine is built on.
//!
//! The registry is this server's, not a process-wide global: two servers in
//! one process (as in tests) keep their own figures.

mod feed;
mod store;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use leasehold::{CallOutcome, Engine, EventStream, StoreError, Verdict};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

pub use store::MeteredStore;

/// The `Content-Type` of a scrape: the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// A metric's labels: fixed names, values from a closed set.
type Labels<const N: usize> = [(&'static str, &'static str); N];
type Counters<const N: usize> = Family<Labels<N>, Counter>;
type Histograms<const N: usize> = Family<Labels<N>, Histogram, fn() -> Histogram>;

/// Model calls, tool calls: from a fraction of a second to an hour, the
/// range leases are made for.
const CALL_BUCKETS: [f64; 16] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
    3600.0,
];
/// Evaluator calls: under a flat timeout of seconds.
const EVALUATOR_BUCKETS: [f64; 11] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0];
/// Store writes: from a tenth of a millisecond (in memory) to seconds (a
/// database under load, an fsync).
const STORE_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

fn call_histogram() -> Histogram {
    Histogram::new(CALL_BUCKETS)
}

fn evaluator_histogram() -> Histogram {
    Histogram::new(EVALUATOR_BUCKETS)
}

fn store_histogram() -> Histogram {
    Histogram::new(STORE_BUCKETS)
}

/// A verdict's name as a label value.
fn verdict_name(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Renew => "renew",
        Verdict::Nudge => "nudge",
        Verdict::Intervene => "intervene",
        Verdict::Escalate => "escalate",
    }
}

/// How a call ended, as events write it.
fn outcome_name(outcome: CallOutcome) -> &'static str {
    match outcome {
        CallOutcome::Ok => "ok",
        CallOutcome::Error => "error",
        CallOutcome::Intervened => "intervened",
        CallOutcome::Escalated => "escalated",
        CallOutcome::Cancelled => "cancelled",
        CallOutcome::Panicked => "panicked",
        CallOutcome::Capped => "capped",
        CallOutcome::Unknown => "unknown",
    }
}

/// A scrape that could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The store could not count the runs.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The text could not be written.
    #[error("the metrics could not be encoded: {0}")]
    Encode(#[from] std::fmt::Error),
}

/// One server's metrics: the registry `/metrics` encodes and the families
/// the event feed, the store decorator and the stream handler update.
pub struct Metrics {
    registry: Registry,
    runs: Family<Labels<1>, Gauge>,
    leases_live: Gauge,
    executor_lag: Gauge<f64, AtomicU64>,
    admitted_limit: Gauge,
    live_runs: Gauge,
    event_streams: Gauge,
    events: Counters<1>,
    events_missed: Counter,
    runs_purged: Counter,
    lease_expiries: Counters<1>,
    verdicts: Counters<3>,
    budget_checkpoints: Counters<2>,
    evaluator_calls: Histograms<2>,
    model_calls: Counters<1>,
    model_call_duration: Histograms<1>,
    tool_calls: Counters<1>,
    tool_call_duration: Histograms<1>,
    store_writes: Histograms<1>,
    tokens: Counters<3>,
    spent: Family<Labels<1>, Counter<f64, AtomicU64>>,
    /// Spans exported, failed, dropped: the trace exporter's counts.
    trace_spans: Sourced,
    /// Webhooks delivered, failed, given up: the deliverer's counts.
    webhooks: Sourced,
    /// Store errors the engine's writes met, by kind (transient,
    /// permanent).
    store_errors: Counters<1>,
    store_retries: Counter,
    store_given_up: Counter,
    store_up: Gauge,
    /// By endpoint (a name the runs' clients give, not a closed set).
    endpoint_up: Family<Vec<(&'static str, String)>, Gauge>,
    endpoint_runs_waiting: Family<Vec<(&'static str, String)>, Gauge>,
}

/// Reads three counts kept by a part of its own, in the order of its
/// outcomes.
pub type CountSource = Box<dyn Fn() -> [u64; 3] + Send + Sync>;

/// Reads a trace exporter's counts: spans exported, failed and dropped.
pub type TraceSource = CountSource;

/// Reads a webhook deliverer's counts: delivered, failed and given up.
pub type WebhookSource = CountSource;

/// Counters by outcome kept by a part of its own, read from it at each
/// scrape.
struct Sourced {
    counters: Counters<1>,
    outcomes: [&'static str; 3],
    source: std::sync::Mutex<Option<CountSource>>,
}

impl Sourced {
    fn new(outcomes: [&'static str; 3]) -> Self {
        Self {
            counters: Family::default(),
            outcomes,
            source: std::sync::Mutex::new(None),
        }
    }

    fn set(&self, source: CountSource) {
        *self
            .source
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(source);
    }

    /// Brings the counters up to the source's counts.
    fn read(&self) {
        let source = self
            .source
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(source) = source.as_ref() else {
            return;
        };
        for (outcome, count) in self.outcomes.into_iter().zip(source()) {
            let counter = self.counters.get_or_create(&[("outcome", outcome)]);
            counter.inc_by(count.saturating_sub(counter.get()));
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Counts `runs` finished runs deleted past their retention.
    pub fn purged(&self, runs: usize) {
        self.runs_purged
            .inc_by(u64::try_from(runs).unwrap_or(u64::MAX));
    }

    /// A registry of every metric, all at zero, named `leasehold_…`.
    pub fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("leasehold"),
            runs: Family::default(),
            leases_live: Gauge::default(),
            executor_lag: Gauge::default(),
            admitted_limit: Gauge::default(),
            live_runs: Gauge::default(),
            event_streams: Gauge::default(),
            events: Family::default(),
            events_missed: Counter::default(),
            runs_purged: Counter::default(),
            lease_expiries: Family::default(),
            verdicts: Family::default(),
            budget_checkpoints: Family::default(),
            evaluator_calls: Family::new_with_constructor(evaluator_histogram as fn() -> Histogram),
            model_calls: Family::default(),
            model_call_duration: Family::new_with_constructor(call_histogram as fn() -> Histogram),
            tool_calls: Family::default(),
            tool_call_duration: Family::new_with_constructor(call_histogram as fn() -> Histogram),
            store_writes: Family::new_with_constructor(store_histogram as fn() -> Histogram),
            tokens: Family::default(),
            spent: Family::default(),
            trace_spans: Sourced::new(["exported", "failed", "dropped"]),
            webhooks: Sourced::new(["delivered", "failed", "given_up"]),
            store_errors: Family::default(),
            store_retries: Counter::default(),
            store_given_up: Counter::default(),
            store_up: Gauge::default(),
            endpoint_up: Family::default(),
            endpoint_runs_waiting: Family::default(),
        };
        metrics.registry.register(
            "runs",
            "Runs in the store by status, counted when scraped",
            metrics.runs.clone(),
        );
        metrics.registry.register(
            "leases_live",
            "Leases held now: model calls, tool calls and worker steps in flight",
            metrics.leases_live.clone(),
        );
        metrics.registry.register(
            "executor_lag_seconds",
            "How late this executor wakes its timers now (its probe's decaying maximum; 0 \
             without a probe): above executor.load_bound, expiring leases renew by load",
            metrics.executor_lag.clone(),
        );
        metrics.registry.register(
            "admitted_runs_limit",
            "Runs this executor admits at once now: server.max_live_runs, cut while its lag \
             is over executor.lag_target",
            metrics.admitted_limit.clone(),
        );
        metrics.registry.register(
            "live_runs",
            "Runs this executor runs now",
            metrics.live_runs.clone(),
        );
        metrics.registry.register(
            "event_streams_open",
            "Event-stream clients connected (GET /runs/{id}/events)",
            metrics.event_streams.clone(),
        );
        metrics.registry.register(
            "events",
            "Events published by this server's engine, by kind",
            metrics.events.clone(),
        );
        metrics.registry.register(
            "events_missed",
            "Events the metrics feed fell too far behind the bus to count",
            metrics.events_missed.clone(),
        );
        metrics.registry.register(
            "runs_purged",
            "Finished runs this executor deleted past their retention (executor.retention)",
            metrics.runs_purged.clone(),
        );
        metrics.registry.register(
            "lease_expiries",
            "Lease expiries (wait events), by lease kind",
            metrics.lease_expiries.clone(),
        );
        metrics.registry.register(
            "verdicts",
            "Verdicts on expired leases, by verdict, by who decided and by lease kind",
            metrics.verdicts.clone(),
        );
        metrics.registry.register(
            "budget_checkpoints",
            "Budget checkpoints, by decision (extended, exhausted) and by who decided",
            metrics.budget_checkpoints.clone(),
        );
        metrics.registry.register(
            "evaluator_call_duration_seconds",
            "Evaluator calls and their latency, by consumer and outcome (answered, failed)",
            metrics.evaluator_calls.clone(),
        );
        metrics.registry.register(
            "trace_spans",
            "Spans of the runs' traces by outcome: exported to the OpenTelemetry collector, \
             failed (refused, or the collector unreachable) or dropped (the exporter's queue \
             full); none without OTEL_EXPORTER_OTLP_ENDPOINT",
            metrics.trace_spans.counters.clone(),
        );
        metrics.registry.register(
            "webhooks",
            "Webhook deliveries by outcome: delivered (a receiver answered 2xx), failed (an \
             attempt refused or unanswered, retried) or given_up (a notice older than \
             webhooks.give_up_after, dropped); none without [webhooks.receivers]",
            metrics.webhooks.counters.clone(),
        );
        metrics.registry.register(
            "tokens",
            "Tokens spent, by role (model: the loops' own calls; watchdog and budget: \
             evaluator calls), direction (input, output) and source (reported by the server, \
             or counted here when it reported none)",
            metrics.tokens.clone(),
        );
        metrics.registry.register(
            "spent",
            "What model and evaluator calls cost at the configured [prices], in their \
             currency, by role (model, watchdog, budget); calls of a model without a price \
             add nothing",
            metrics.spent.clone(),
        );
        metrics.registry.register(
            "model_calls",
            "Model calls ended, by outcome",
            metrics.model_calls.clone(),
        );
        metrics.registry.register(
            "model_call_duration_seconds",
            "Model call latency from start to end, by outcome",
            metrics.model_call_duration.clone(),
        );
        metrics.registry.register(
            "tool_calls",
            "Tool calls ended, by outcome",
            metrics.tool_calls.clone(),
        );
        metrics.registry.register(
            "tool_call_duration_seconds",
            "Tool call latency from start to end, by outcome",
            metrics.tool_call_duration.clone(),
        );
        metrics.registry.register(
            "store_errors",
            "Store writes of this executor's runs that failed, by kind: transient (tried \
             again, for store.write_retry_for) or permanent",
            metrics.store_errors.clone(),
        );
        metrics.registry.register(
            "store_write_retries",
            "Store writes tried again after an error",
            metrics.store_retries.clone(),
        );
        metrics.registry.register(
            "store_writes_given_up",
            "Store writes given up: each paused (store.on_write_failure), failed or let go \
             of a run",
            metrics.store_given_up.clone(),
        );
        metrics.registry.register(
            "endpoint_up",
            "Whether an endpoint the runs call is up (1) or down (0): down after calls in a \
             row could not reach it, or marked down by hand; its runs wait paused",
            metrics.endpoint_up.clone(),
        );
        metrics.registry.register(
            "endpoint_runs_waiting",
            "The runs paused until an endpoint answers again",
            metrics.endpoint_runs_waiting.clone(),
        );
        metrics.registry.register(
            "store_up",
            "Whether the store answers (1) or is away (0): read when scraped, and 0 while \
             the last write of this executor's runs failed",
            metrics.store_up.clone(),
        );
        metrics.registry.register(
            "store_write_duration_seconds",
            "Store write latency, by operation",
            metrics.store_writes.clone(),
        );
        metrics
    }

    /// Counts, in a task of its own, every event read from `events` (a
    /// subscription to the engine's bus), until `stop` is cancelled or the
    /// bus is gone.
    pub fn follow(self: &Arc<Self>, events: EventStream, stop: CancellationToken) {
        let metrics = Arc::clone(self);
        tokio::spawn(async move { feed::Tally::new(&metrics).run(events, stop).await });
    }

    /// The executor's figures for the next scrape: its lag (none without a
    /// probe), its admitted limit and its live runs.
    pub fn set_admission(&self, lag: Option<Duration>, admitted_limit: usize, live_runs: usize) {
        self.executor_lag
            .set(lag.unwrap_or(Duration::ZERO).as_secs_f64());
        self.admitted_limit
            .set(i64::try_from(admitted_limit).unwrap_or(i64::MAX));
        self.live_runs
            .set(i64::try_from(live_runs).unwrap_or(i64::MAX));
    }

    /// Reads the trace exporter's counts from `source` at each scrape.
    pub fn trace_source(&self, source: TraceSource) {
        self.trace_spans.set(source);
    }

    /// Reads the webhook deliverer's counts from `source` at each scrape.
    pub fn webhook_source(&self, source: WebhookSource) {
        self.webhooks.set(source);
    }

    fn read_sources(&self) {
        self.trace_spans.read();
        self.webhooks.read();
    }

    /// Counts an event stream opened until the guard returned is dropped.
    pub(crate) fn event_stream_opened(&self) -> OpenStream {
        self.event_streams.inc();
        OpenStream(self.event_streams.clone())
    }

    /// The figures now, as Prometheus text: the runs in `engine`'s store
    /// counted by status and its live leases read first.
    ///
    /// A store that does not answer within `patience` (or fails) leaves
    /// the run counts as they were and says so with `leasehold_store_up 0`:
    /// the scrape itself is answered.
    pub async fn scrape(&self, engine: &Engine, patience: Duration) -> Result<String, ScrapeError> {
        let counted = tokio::time::timeout(patience, engine.store().count_runs_by_status()).await;
        let answered = matches!(counted, Ok(Ok(_)));
        if let Ok(Ok(counts)) = counted {
            for (status, count) in counts {
                self.runs
                    .get_or_create(&[("status", status.name())])
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
        }
        let health = engine.store_health();
        self.store_up.set(i64::from(answered && !health.failing));
        for (kind, count) in [
            ("transient", health.transient_errors),
            ("permanent", health.permanent_errors),
        ] {
            let counter = self.store_errors.get_or_create(&[("kind", kind)]);
            counter.inc_by(count.saturating_sub(counter.get()));
        }
        self.store_retries
            .inc_by(health.retries.saturating_sub(self.store_retries.get()));
        self.store_given_up
            .inc_by(health.given_up.saturating_sub(self.store_given_up.get()));
        self.leases_live
            .set(i64::try_from(engine.live_leases()).unwrap_or(i64::MAX));
        for endpoint in engine.endpoints().list() {
            let labels = vec![("endpoint", endpoint.endpoint.clone())];
            self.endpoint_up
                .get_or_create(&labels)
                .set(i64::from(endpoint.up));
            self.endpoint_runs_waiting
                .get_or_create(&labels)
                .set(i64::try_from(endpoint.runs_waiting.len()).unwrap_or(i64::MAX));
        }
        self.read_sources();
        let mut text = String::new();
        prometheus_text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// An open event stream, counted while it lives.
pub(crate) struct OpenStream(Gauge);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_exporters_counts_are_counters_read_at_each_scrape() {
        let metrics = Metrics::new();
        let counts = std::sync::Arc::new(std::sync::Mutex::new([0u64; 3]));
        let read = counts.clone();
        metrics.trace_source(Box::new(move || *read.lock().unwrap()));
        *counts.lock().unwrap() = [5, 2, 1];
        metrics.read_sources();
        *counts.lock().unwrap() = [7, 2, 4];
        metrics.read_sources();
        let get = |outcome| {
            metrics
                .trace_spans
                .counters
                .get_or_create(&[("outcome", outcome)])
                .get()
        };
        assert_eq!((get("exported"), get("failed"), get("dropped")), (7, 2, 4));
    }

    #[test]
    fn the_text_has_the_plain_metrics_at_once_and_a_family_once_it_has_a_member() {
        let metrics = Metrics::new();
        metrics.leases_live.set(2);
        let encode = |metrics: &Metrics| {
            let mut text = String::new();
            prometheus_text::encode(&mut text, &metrics.registry).expect("encoded");
            text
        };
        let text = encode(&metrics);
        for name in [
            "leasehold_leases_live",
            "leasehold_event_streams_open",
            "leasehold_events_missed_total",
        ] {
            assert!(text.contains(&format!("# HELP {name} ")), "{name}:\n{text}");
        }
        assert!(!text.contains("leasehold_verdicts_total"), "{text}");
        metrics
            .verdicts
            .get_or_create(&[
                ("verdict", "renew"),
                ("decided_by", "ladder"),
                ("lease_kind", "tool_call"),
            ])
            .inc();
        let text = encode(&metrics);
        assert!(
            text.contains("# HELP leasehold_verdicts_total Verdicts on expired leases")
                && text.contains(
                    "leasehold_verdicts_total{verdict=\"renew\",decided_by=\"ladder\",\
                     lease_kind=\"tool_call\"} 1\n"
                ),
            "{text}"
        );
        assert!(text.contains("\nleasehold_leases_live 2\n"), "{text}");
        let streams = metrics.event_stream_opened();
        let opened = metrics.event_streams.get();
        drop(streams);
        assert_eq!((opened, metrics.event_streams.get()), (1, 0));
    }
}
