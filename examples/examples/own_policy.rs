//! A verdict policy of your own, from scratch: registered with the engine,
//! named by a flow, judging a real run's leases; then compared with the
//! built-in policies in an experiment, on one seeded workload.
//!
//! The policy, `steady`, renews a lease while its operation spoke within
//! the last half lease, cuts one that went quiet after speaking, and leaves
//! one that never spoke to the evaluator. The run's model is a client
//! written here too: it thinks for twelve seconds, saying something every
//! second, then answers — under a five-second lease.
//!
//! `cargo run -p leasehold-examples --example own_policy`

use std::sync::Arc;
use std::time::Duration;

use leasehold::prelude::*;
use leasehold_lab::{Workload, run_strategies};

/// Renews while the operation spoke within the last half lease; cuts it
/// once it went quiet after speaking; asks the evaluator about one that
/// never spoke.
#[derive(Debug)]
struct Steady;

impl VerdictPolicy for Steady {
    fn name(&self) -> &str {
        "steady"
    }

    fn judge(&self, expiry: &Expiry<'_>) -> Judgement {
        if let Some(capped) = renewal_cap(expiry) {
            return capped;
        }
        let half = expiry.lease / 2;
        let evidence = expiry.evidence;
        match evidence.last_progress_age_ms.map(Duration::from_millis) {
            Some(age) if age < half => Judgement::Decided(Decision::renew(
                DecidedBy::Policy,
                format!("steady: spoke {} ms ago", age.as_millis()),
            )),
            Some(age) => Judgement::Decided(Decision {
                verdict: Verdict::Intervene,
                reason: format!("steady: quiet for {} ms after speaking", age.as_millis()),
                nudge: None,
                decided_by: DecidedBy::Policy,
            }),
            None => Judgement::AskEvaluator,
        }
    }
}

/// A model client written from scratch: it thinks for `thinking`, saying
/// something every second (each word is evidence for its lease), then
/// answers.
struct Thinker {
    thinking: Duration,
}

impl ModelClient for Thinker {
    fn complete(
        &self,
        _request: ModelRequest,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        let thinking = self.thinking;
        Box::pin(async move {
            let started = tokio::time::Instant::now();
            while started.elapsed() < thinking {
                tokio::time::sleep(Duration::from_secs(1)).await;
                evidence.observe();
            }
            Ok(ModelReply {
                content: "The order shipped yesterday.".to_owned(),
                tool_calls: Vec::new(),
                usage: TokenCost::default(),
                finish_reason: Some(FinishReason::Stop),
            })
        })
    }

    fn describe(&self) -> String {
        "a model that thinks aloud".to_owned()
    }
}

/// Runs the flow under `steady`: its verdicts, by whom, and the answer.
async fn run_under_steady() -> Result<(Vec<VerdictRecord>, RunState), Box<dyn std::error::Error>> {
    let engine = Engine::builder()
        .model(Arc::new(Thinker {
            thinking: Duration::from_secs(12),
        }))
        .policy(Arc::new(Steady))
        .build()
        .await?;
    // Named as the built-ins are, as a flow file's `leases.policy` names it.
    let flow = Flow::builder("support", "Where is order 1042?")
        .max_steps(2)
        .lease(LeaseKind::ModelStream, Duration::from_secs(5))
        .lease(LeaseKind::ModelBlocking, Duration::from_secs(5))
        .policy("steady")
        .build()?;
    let mut events = engine.events().subscribe();
    let mut run = engine.start(flow).await?;
    let state = run.wait().await;
    let mut verdicts = Vec::new();
    while let Ok(Some(Ok(event))) =
        tokio::time::timeout(Duration::from_millis(10), events.recv()).await
    {
        if let EventKind::Verdict(record) = &event.kind {
            verdicts.push(VerdictRecord::clone(record));
        }
    }
    engine.shutdown().await;
    Ok((verdicts, state))
}

/// A seeded workload: tool calls of 20 s reporting progress every 2 s, a
/// third of them hanging after their first report.
const WORKLOAD: &str = r#"
seed = 7

[tool_calls]
count = 12
duration = { dist = "fixed", value = "20s" }
progress_interval = "2s"
hang_probability = 0.33

[strategy]
lease = "5s"
"#;

/// Runs the flow under `steady`, then the experiment, checking each.
///
/// On paused tokio time, so that its minutes of leases pass at once: that
/// needs tokio's `test-util` feature, which this crate's tests turn on. In
/// a program of your own, leave `start_paused` out and the leases run on
/// the wall clock.
#[tokio::main(flavor = "current_thread", start_paused = true)]
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (verdicts, state) = run_under_steady().await?;
    for verdict in &verdicts {
        println!(
            "verdict {:?} by {:?}: {}",
            verdict.verdict, verdict.decided_by, verdict.reason
        );
    }
    println!(
        "{:?}: {}",
        state.status,
        state.answer.clone().unwrap_or_default()
    );
    assert_eq!(state.status, RunStatus::Completed);
    assert!(
        !verdicts.is_empty(),
        "five-second leases over twelve seconds expire"
    );
    assert!(verdicts.iter().all(|v| v.decided_by == DecidedBy::Policy));

    // The same policy beside the built-ins, on one seeded workload. The
    // experiment blocks on a runtime of its own: run it off this one.
    let report = tokio::task::spawn_blocking(|| {
        let workload = Workload::parse(WORKLOAD)?;
        let strategies = [
            workload.resolve("leasehold")?,
            workload.resolve("deadline")?,
            workload.resolve("idle_kill")?,
            workload
                .resolve("leasehold")?
                .judged_by("steady", Arc::new(Steady)),
        ];
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(run_strategies(
            &workload,
            &strategies,
            None,
        )?)
    })
    .await?
    .map_err(|e| e.to_string())?;
    for strategy in &report.strategies {
        println!(
            "{:>10} ({}): {} cuts, {} slow but alive operations cut",
            strategy.name, strategy.policy, strategy.kills, strategy.slow_alive_killed
        );
    }
    let steady = report
        .strategies
        .iter()
        .find(|s| s.name == "steady")
        .ok_or("no steady")?;
    assert_eq!(steady.policy, "steady");
    Ok(())
}
