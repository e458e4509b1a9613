//! Examples of embedding leasehold, and the demo run by `cargo run -p
//! leasehold-examples --example demo`.
//!
//! The demo supervises three tool calls under half-second leases, on the
//! real clock, in about three seconds:
//!
//! - `crawl site` is slow but alive: it reports progress every 100 ms for
//!   2.8 s. After its two free renewals, fresh evidence keeps renewing it
//!   without a single evaluator call, and its whole result comes back.
//! - `fetch quotes` hangs silently. After two free renewals the evaluator is
//!   asked, sees no evidence, and answers `INTERVENE`.
//! - `charge customer card` also goes silent, but it has side effects: the
//!   evaluator answers `ESCALATE`, for a person to decide.
//!
//! The evaluator here is [`RuleEvaluator`], an in-process judge that answers
//! the same strict JSON a model of role `fast` must answer, by rule, so the
//! demo needs no network and no API key.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::event::{Event, EventBus};
use leasehold::ports::BoxFuture;
use leasehold::prelude::*;
use tokio::time::Instant;

/// An evaluator that judges by rule: evidence that is fresh renews, a silent
/// operation whose subject touches money escalates, any other silent one is
/// intervened. It answers strict JSON, like a model must.
#[derive(Clone, Debug, Default)]
pub struct RuleEvaluator {
    asked: Arc<Mutex<Vec<String>>>,
}

impl RuleEvaluator {
    /// The subjects it was asked about, in order.
    pub fn asked(&self) -> Vec<String> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn judge(request: &EvaluationRequest) -> (Verdict, String) {
        let silent = request.evidence.phi.is_none_or(|phi| phi >= 8.0);
        let touches_money = ["charge", "payment", "card", "transfer"]
            .iter()
            .any(|word| request.subject.contains(word));
        match (silent, touches_money) {
            (false, _) => (Verdict::Renew, "evidence is flowing".to_owned()),
            (true, true) => (
                Verdict::Escalate,
                format!(
                    "`{}` is silent after {} renewals and has side effects: a person must decide",
                    request.subject, request.renewals
                ),
            ),
            (true, false) => (
                Verdict::Intervene,
                format!(
                    "`{}` has sent no evidence in {} renewals: restart it",
                    request.subject, request.renewals
                ),
            ),
        }
    }
}

impl Evaluator for RuleEvaluator {
    fn evaluate(
        &self,
        request: EvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.subject.clone());
        let (verdict, reason) = RuleEvaluator::judge(&request);
        let text =
            serde_json::json!({"verdict": verdict, "reason": reason, "nudge": null}).to_string();
        Box::pin(async move {
            Ok(EvaluatorAnswer {
                text,
                cost: TokenCost::default(),
            })
        })
    }
}

/// How each of the demo's operations ended.
#[derive(Debug, PartialEq, Eq)]
pub struct DemoReport {
    /// The slow-but-alive crawl.
    pub slow: Result<String, LeaseError>,
    /// The silent fetch.
    pub hung: Result<String, LeaseError>,
    /// The silent payment.
    pub payment: Result<String, LeaseError>,
    /// How many times the evaluator was asked about the slow crawl.
    pub evaluator_calls_on_slow: usize,
    /// Evaluator calls in all.
    pub evaluator_calls: usize,
}

impl DemoReport {
    /// Whether the demo showed what it is meant to show.
    pub fn as_expected(&self) -> bool {
        self.slow.is_ok()
            && self.evaluator_calls_on_slow == 0
            && matches!(self.hung, Err(LeaseError::Intervened { .. }))
            && matches!(self.payment, Err(LeaseError::Escalated { .. }))
    }
}

/// The demo's configuration: half-second tool leases, two free renewals.
pub fn demo_config() -> SupervisionConfig {
    let mut config = SupervisionConfig::default();
    config.lease.tool_call = Duration::from_millis(500);
    config.watchdog.evaluator_timeout = Duration::from_secs(2);
    config
}

/// Runs the demo, writing a readable log of its events to `out`.
pub async fn run_demo(
    out: &mut (impl Write + Send),
) -> Result<DemoReport, Box<dyn std::error::Error>> {
    let config = demo_config();
    let bus = EventBus::new();
    let mut stream = bus.subscribe();
    let evaluator = RuleEvaluator::default();
    let supervision = Supervision::start(
        config,
        Some(Arc::new(evaluator.clone()) as Arc<dyn Evaluator>),
        Arc::new(bus.clone()),
    )
    .await?;
    let leases = &supervision.leases;
    let spec = |subject: &str, n: u32| {
        config
            .spec(LeaseKind::ToolCall, subject)
            .map(|s| s.in_run("demo", format!("run/tool_call:{n}")))
    };

    writeln!(
        out,
        "leasehold demo: three tool calls under 500 ms leases, 2 free renewals\n"
    )?;
    let begun = Instant::now();
    let slow = leases.supervise(spec("crawl site", 1)?, |evidence| async move {
        for page in 1..=28 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if page % 7 == 0 {
                evidence.progress(format!("{page} pages"));
            } else {
                evidence.observe();
            }
        }
        "28 pages crawled".to_owned()
    })?;
    let hung = leases.supervise(spec("fetch quotes", 2)?, |_| async {
        std::future::pending::<String>().await
    })?;
    let payment = leases.supervise(spec("charge customer card", 3)?, |_| async {
        std::future::pending::<String>().await
    })?;

    let outcomes = async {
        let hung = hung.outcome().await;
        let payment = payment.outcome().await;
        let slow = slow.outcome().await;
        (slow, hung, payment)
    };
    tokio::pin!(outcomes);
    let (slow, hung, payment) = loop {
        tokio::select! {
            done = &mut outcomes => break done,
            Some(Ok(event)) = stream.recv() => writeln!(out, "{}", describe(&event, begun))?,
        }
    };
    while let Some(Ok(event)) = stream.try_recv() {
        writeln!(out, "{}", describe(&event, begun))?;
    }

    let asked = evaluator.asked();
    let report = DemoReport {
        slow,
        hung,
        payment,
        evaluator_calls_on_slow: asked.iter().filter(|s| *s == "crawl site").count(),
        evaluator_calls: asked.len(),
    };
    writeln!(out)?;
    writeln!(
        out,
        "crawl site            → {:?}  (evaluator calls: {})",
        report.slow, report.evaluator_calls_on_slow
    )?;
    writeln!(out, "fetch quotes          → {:?}", report.hung)?;
    writeln!(out, "charge customer card  → {:?}", report.payment)?;
    writeln!(out, "took {:.1} s", begun.elapsed().as_secs_f64())?;
    supervision.stop();
    Ok(report)
}

/// One line of the demo's log for `event`.
pub fn describe(event: &Event, begun: Instant) -> String {
    let when = begun.elapsed().as_secs_f64();
    format!(
        "{when:>5.2}s  {:<26} {:<20} {}",
        event.path,
        event.kind.name(),
        event.kind.describe()
    )
}
