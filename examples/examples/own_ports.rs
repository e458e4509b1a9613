//! Every port of the engine written from scratch, against the prelude
//! alone: a model client, a tool client and an evaluator. The model asks
//! for a slow tool; the tool reports its progress as it works, so its lease
//! is renewed on evidence; a second call of the tool hangs, and the
//! evaluator, shown the silent lease, has it intervened, and the call is
//! made again (the same idempotency key) and answers; the model answers
//! with both.
//!
//! `cargo run -p leasehold-examples --example own_ports`

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use leasehold::prelude::*;

/// A model client: asks for `lookup` twice, then answers with what the
/// tool said. A real one would speak to a model server; this one reads the
/// conversation.
struct Planner;

impl ModelClient for Planner {
    fn complete(
        &self,
        request: ModelRequest,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            evidence.observe_text("thinking");
            let results: Vec<&ChatMessage> = request
                .messages
                .iter()
                .filter(|m| m.role == ChatRole::Tool)
                .collect();
            if results.len() < 2 {
                let order = 1042 + u64::try_from(results.len()).unwrap_or_default();
                return Ok(ModelReply {
                    content: String::new(),
                    tool_calls: vec![ToolCallRequest {
                        id: format!("call-{order}"),
                        name: "lookup".to_owned(),
                        arguments: serde_json::json!({ "order": order }),
                    }],
                    usage: TokenCost::default(),
                    finish_reason: Some(FinishReason::ToolCalls),
                });
            }
            let said: Vec<&str> = results.iter().map(|m| m.content.as_str()).collect();
            Ok(ModelReply {
                content: format!("What the orders say: {}", said.join("; ")),
                tool_calls: Vec::new(),
                usage: TokenCost::default(),
                finish_reason: Some(FinishReason::Stop),
            })
        })
    }
}

/// A tool client: one tool, `lookup`, that works for 20 s reporting its
/// progress every 2 s — and hangs, silent, on its second call.
#[derive(Default)]
struct Orders {
    calls: AtomicU32,
}

impl ToolClient for Orders {
    fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>> {
        Box::pin(async {
            Ok(vec![ToolDefinition {
                name: "lookup".to_owned(),
                description: "Where an order is.".to_owned(),
                input_schema: serde_json::json!({
                    "type": "object",
                    "properties": { "order": { "type": "integer" } }
                }),
                idempotent: Some(true),
            }])
        })
    }

    fn call(
        &self,
        invocation: ToolInvocation,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        Box::pin(async move {
            if call == 2 {
                // Hung: never answers, says nothing.
                std::future::pending::<()>().await;
            }
            for page in 1..=10 {
                tokio::time::sleep(Duration::from_secs(2)).await;
                evidence.progress_value(f64::from(page), Some(10.0), format!("page {page}"));
            }
            Ok(ToolOutput {
                content: format!("order {}: shipped", invocation.arguments["order"]),
                is_error: false,
            })
        })
    }
}

/// An evaluator: intervenes on a lease whose operation has said nothing
/// for a whole lease, renews otherwise. It answers the strict JSON the
/// watchdog reads.
struct Judge;

impl Evaluator for Judge {
    fn evaluate(
        &self,
        request: EvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        Box::pin(async move {
            let lease_ms = u64::try_from(request.lease.as_millis()).unwrap_or(u64::MAX);
            let silent = request
                .evidence
                .last_progress_age_ms
                .is_none_or(|age| age >= lease_ms);
            let (verdict, reason) = if silent {
                ("INTERVENE", "silent for a whole lease")
            } else {
                ("RENEW", "it is still reporting")
            };
            Ok(EvaluatorAnswer {
                text: serde_json::json!({
                    "verdict": verdict,
                    "reason": reason,
                    "nudge": null
                })
                .to_string(),
                cost: TokenCost::default(),
            })
        })
    }
}

/// Runs the flow on the three ports and checks what happened.
///
/// On paused tokio time, so that its minutes of leases pass at once: that
/// needs tokio's `test-util` feature, which this crate's tests turn on. In
/// a program of your own, leave `start_paused` out and the leases run on
/// the wall clock.
#[tokio::main(flavor = "current_thread", start_paused = true)]
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::builder()
        .model(Arc::new(Planner))
        .tool_server("orders", Arc::new(Orders::default()))
        .evaluator(Arc::new(Judge))
        .build()
        .await?;
    let flow = Flow::builder("support", "Where are orders 1042 and 1043?")
        .max_steps(6)
        .tool_server(ToolServer::named("orders"))
        .lease(LeaseKind::ToolCall, Duration::from_secs(5))
        .free_renewals(0)
        .build()?;
    let mut events = engine.events().subscribe();
    let mut run = engine.start(flow).await?;
    let state = run.wait().await;
    let mut decided = Vec::new();
    while let Ok(Some(Ok(event))) =
        tokio::time::timeout(Duration::from_millis(10), events.recv()).await
    {
        if let EventKind::Verdict(record) = &event.kind {
            println!(
                "{:>10} by {:?}: {}",
                format!("{:?}", record.verdict),
                record.decided_by,
                record.reason
            );
            decided.push((record.verdict, record.decided_by));
        }
    }
    println!(
        "{:?}: {}",
        state.status,
        state.answer.clone().unwrap_or_default()
    );
    engine.shutdown().await;

    assert_eq!(state.status, RunStatus::Completed);
    // The working call's progress renewed its lease without the evaluator.
    assert!(decided.contains(&(Verdict::Renew, DecidedBy::Progress)));
    // The hung call was put to the evaluator, which had it intervened.
    assert!(decided.contains(&(Verdict::Intervene, DecidedBy::Evaluator)));
    Ok(())
}
