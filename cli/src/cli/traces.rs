//! A command's runs, traced to an OpenTelemetry collector when the
//! environment names one (`OTEL_EXPORTER_OTLP_ENDPOINT`; see
//! [`leasehold::telemetry::otlp`]).

use std::sync::Arc;
use std::time::Duration;

use leasehold::Engine;
use leasehold::telemetry::otlp::OtlpExporter;
use tokio::sync::watch;

/// How long a command waits at its end for its spans to be sent.
const FLUSH: Duration = Duration::from_secs(5);

/// The exporter following an engine's events, if one is configured, and
/// the `seq` of the last event it took in.
#[derive(Debug)]
pub struct Traces(Option<(Arc<OtlpExporter>, watch::Receiver<u64>)>);

impl Traces {
    /// Follows `engine`'s events when the environment asks for traces; an
    /// exporter that cannot be built is said once and left out: tracing
    /// never stops a run.
    pub fn start(engine: &Engine) -> Self {
        match OtlpExporter::from_env() {
            Ok(Some(exporter)) => {
                let seen = exporter.follow(engine.events().subscribe());
                Self(Some((exporter, seen)))
            }
            Ok(None) => Self(None),
            Err(error) => {
                tracing::warn!(%error, "runs are not traced");
                Self(None)
            }
        }
    }

    /// The exporter's counts (spans exported, failed, dropped), read by
    /// `/metrics` at each scrape; none without an exporter.
    pub fn counts(&self) -> Option<leasehold_server::metrics::TraceSource> {
        let (exporter, _) = self.0.as_ref()?;
        let exporter = exporter.clone();
        Some(Box::new(move || {
            let counts = exporter.counts();
            [counts.exported, counts.failed, counts.dropped]
        }))
    }

    /// Once every event `engine` published is taken in, sends what is
    /// queued, waiting at most a few seconds in all, and says what could
    /// not be sent.
    pub async fn finish(&mut self, engine: &Engine) {
        let Some((exporter, seen)) = &mut self.0 else {
            return;
        };
        let last = engine.events().last_seq();
        let _ = tokio::time::timeout(FLUSH, seen.wait_for(|seq| *seq >= last)).await;
        let exporter = exporter.clone();
        let _ = tokio::task::spawn_blocking(move || exporter.flush(FLUSH)).await;
        let Some((exporter, _)) = &self.0 else {
            return;
        };
        let counts = exporter.counts();
        if counts.failed > 0 || counts.dropped > 0 {
            tracing::warn!(
                exported = counts.exported,
                failed = counts.failed,
                dropped = counts.dropped,
                "not every span reached the OpenTelemetry collector"
            );
        }
    }
}
