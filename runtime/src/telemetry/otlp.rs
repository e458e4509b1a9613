//! The run's spans, exported over OTLP/HTTP to an OpenTelemetry backend.
//!
//! Configured as every OpenTelemetry SDK is, by environment:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! turns it on, `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_EXPORTER_OTLP_TIMEOUT`
//! are read by the exporter, `OTEL_SERVICE_NAME` names the service
//! (`leasehold` by default), `OTEL_SDK_DISABLED=true` turns it off.
//!
//! Exporting never slows or fails a run: the [`SpanAssembler`] runs on a
//! task that reads the engine's event bus, off the runs' path; a finished
//! span goes into a bounded queue ([`QUEUE`] spans) and is dropped, and
//! counted, when the queue is full; a thread of its own sends batches to
//! the collector, and counts those it refused or could not be reached for.
//! A dead collector costs the queue's memory and the counters, nothing
//! else.
//!
//! # On an engine of your own
//!
//! The `leasehold` command attaches the exporter to its engine itself; an
//! embedder attaches it to theirs: [`OtlpExporter::follow`] the engine's
//! events from before its runs start (a run whose first events it missed
//! has no root span), and [`OtlpExporter::flush`] before the process exits,
//! once the exporter has taken in the last event (the `seq` it reports).
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::prelude::*;
//! use leasehold::telemetry::otlp::OtlpExporter;
//!
//! async fn traced(engine: &Engine, flow: Flow) -> Result<(), Box<dyn std::error::Error>> {
//!     // `None` unless OTEL_EXPORTER_OTLP_ENDPOINT (or …_TRACES_ENDPOINT) is set.
//!     let traces = OtlpExporter::from_env()?.map(|exporter| {
//!         let seen = exporter.follow(engine.events().subscribe());
//!         (exporter, seen)
//!     });
//!     let mut run = engine.start(flow).await?;
//!     run.wait().await;
//!     if let Some((exporter, mut seen)) = traces {
//!         let last = engine.events().last_seq();
//!         let patience = Duration::from_secs(5);
//!         let _ = tokio::time::timeout(patience, seen.wait_for(|seq| *seq >= last)).await;
//!         let flushing = exporter.clone();
//!         // `flush` blocks: off the async runtime's threads.
//!         tokio::task::spawn_blocking(move || flushing.flush(patience)).await?;
//!         let counts = exporter.counts();
//!         println!("{} spans exported, {} failed", counts.exported, counts.failed);
//!     }
//!     Ok(())
//! }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_actors::EventStream;
use opentelemetry::trace::{
    Event as OtelEvent, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use serde_json::Value;

use super::{FinishedSpan, SpanAssembler};

/// The most finished spans waiting to be sent.
pub const QUEUE: usize = 4096;

/// The most spans in one export.
const BATCH: usize = 512;

/// How long a span may wait for a batch to fill.
const LINGER: Duration = Duration::from_millis(500);

/// What the exporter did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportCounts {
    /// Spans the collector took.
    pub exported: u64,
    /// Spans in batches the collector refused or could not be reached for.
    pub failed: u64,
    /// Spans dropped because the queue was full.
    pub dropped: u64,
}

#[derive(Debug, Default)]
struct Counters {
    exported: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
}

enum Message {
    Span(Box<FinishedSpan>),
    Flush(std::sync::mpsc::Sender<()>),
}

/// Sends runs' spans to an OTLP collector.
#[derive(Debug)]
pub struct OtlpExporter {
    queue: SyncSender<Message>,
    counters: Arc<Counters>,
}

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("the OpenTelemetry exporter could not be built: {0}")]
pub struct ExporterError(String);

impl OtlpExporter {
    /// The exporter the environment asks for, if it asks for one.
    pub fn from_env() -> Result<Option<Arc<Self>>, ExporterError> {
        let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
        let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim() == "true");
        if disabled
            || !(set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        {
            return Ok(None);
        }
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .map_err(|e| ExporterError(e.to_string()))?;
        let service = std::env::var("OTEL_SERVICE_NAME")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| "leasehold".to_owned());
        let resource = Resource::builder().with_service_name(service).build();
        exporter.set_resource(&resource);
        let (queue, spans) = sync_channel(QUEUE);
        let counters = Arc::new(Counters::default());
        let sending = counters.clone();
        std::thread::Builder::new()
            .name("leasehold-otlp".to_owned())
            .spawn(move || send_batches(&exporter, &spans, &sending))
            .map_err(|e| ExporterError(e.to_string()))?;
        Ok(Some(Arc::new(Self { queue, counters })))
    }

    /// Queues `span`; drops it, and counts it, if the queue is full.
    pub fn send(&self, span: FinishedSpan) {
        match self.queue.try_send(Message::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Exports the runs' spans as `events` (an engine's bus) tells them,
    /// until the bus ends; the receiver says the `seq` of the last event
    /// taken in, so a command can wait for its runs' last spans.
    pub fn follow(self: &Arc<Self>, mut events: EventStream) -> tokio::sync::watch::Receiver<u64> {
        let exporter = self.clone();
        let (seen, progress) = tokio::sync::watch::channel(0);
        drop(tokio::spawn(async move {
            let mut assembler = SpanAssembler::new();
            while let Some(received) = events.recv().await {
                // Events lost to a lag leave spans open; the run's end
                // closes them.
                if let Ok(event) = received {
                    for span in assembler.feed(&event) {
                        exporter.send(span);
                    }
                    seen.send_replace(event.seq);
                }
            }
        }));
        progress
    }

    /// Waits, at most `patience`, for every span queued so far to be sent
    /// (or to have failed): before a process exits.
    pub fn flush(&self, patience: Duration) {
        let (done, flushed) = std::sync::mpsc::channel();
        if self.queue.try_send(Message::Flush(done)).is_ok() {
            let _ = flushed.recv_timeout(patience);
        }
    }

    /// What it did so far.
    pub fn counts(&self) -> ExportCounts {
        ExportCounts {
            exported: self.counters.exported.load(Ordering::Relaxed),
            failed: self.counters.failed.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
        }
    }
}

/// The exporter's thread: batches of at most [`BATCH`] spans, sent when
/// full, after [`LINGER`], or on a flush.
fn send_batches(
    exporter: &opentelemetry_otlp::SpanExporter,
    spans: &Receiver<Message>,
    counters: &Counters,
) {
    let scope = InstrumentationScope::builder("leasehold")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let mut batch: Vec<SpanData> = Vec::new();
    // When the batch's first span came: it waits at most LINGER.
    let mut since = std::time::Instant::now();
    loop {
        let mut flushed = None;
        match spans.recv_timeout(LINGER) {
            Ok(Message::Span(span)) => {
                if batch.is_empty() {
                    since = std::time::Instant::now();
                }
                batch.push(span_data(*span, &scope));
            }
            Ok(Message::Flush(done)) => flushed = Some(done),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                export(exporter, &mut batch, counters);
                return;
            }
        }
        let due = batch.len() >= BATCH || flushed.is_some() || since.elapsed() >= LINGER;
        if due && !batch.is_empty() {
            export(exporter, &mut batch, counters);
        }
        if let Some(done) = flushed {
            let _ = done.send(());
        }
    }
}

fn export(
    exporter: &opentelemetry_otlp::SpanExporter,
    batch: &mut Vec<SpanData>,
    counters: &Counters,
) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::take(batch);
    let n = spans.len() as u64;
    match futures_executor::block_on(exporter.export(spans)) {
        Ok(()) => counters.exported.fetch_add(n, Ordering::Relaxed),
        Err(error) => {
            tracing::debug!(%error, spans = n, "spans not exported");
            counters.failed.fetch_add(n, Ordering::Relaxed)
        }
    };
}

fn trace_id(hex: &str) -> TraceId {
    u128::from_str_radix(hex, 16).map_or(TraceId::INVALID, |n| TraceId::from_bytes(n.to_be_bytes()))
}

fn span_id(hex: &str) -> SpanId {
    u64::from_str_radix(hex, 16).map_or(SpanId::INVALID, |n| SpanId::from_bytes(n.to_be_bytes()))
}

fn time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn key_value((key, value): (&'static str, Value)) -> KeyValue {
    match value {
        Value::Bool(b) => KeyValue::new(key, b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => KeyValue::new(key, i),
            (None, Some(f)) => KeyValue::new(key, f),
            _ => KeyValue::new(key, n.to_string()),
        },
        Value::String(s) => KeyValue::new(key, s),
        other => KeyValue::new(key, other.to_string()),
    }
}

fn span_data(span: FinishedSpan, scope: &InstrumentationScope) -> SpanData {
    let context = SpanContext::new(
        trace_id(&span.trace_id),
        span_id(&span.span_id),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    );
    let kind = if span.parent_span_id.is_none() {
        SpanKind::Server
    } else if span.name.starts_with("chat") || span.name.starts_with("execute_tool") {
        SpanKind::Client
    } else {
        SpanKind::Internal
    };
    SpanData {
        span_context: context,
        parent_span_id: span
            .parent_span_id
            .as_deref()
            .map_or(SpanId::INVALID, span_id),
        parent_span_is_remote: false,
        span_kind: kind,
        name: span.name.into(),
        start_time: time(span.start_ms),
        end_time: time(span.end_ms),
        attributes: span.attributes.into_iter().map(key_value).collect(),
        dropped_attributes_count: 0,
        events: {
            let mut events = SpanEvents::default();
            events.events = span
                .events
                .into_iter()
                .map(|e| {
                    OtelEvent::new(
                        e.name,
                        time(e.at_ms),
                        e.attributes.into_iter().map(key_value).collect(),
                        0,
                    )
                })
                .collect();
            events
        },
        links: SpanLinks::default(),
        status: span.error.map_or(Status::Ok, Status::error),
        instrumentation_scope: scope.clone(),
    }
}
