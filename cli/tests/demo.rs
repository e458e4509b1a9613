//! The embedded demo, end to end, through the real clients: the scripted
//! OpenAI-compatible server read by the real `OpenAiClient`, the MCP tool
//! server read by the real `McpToolClient`, and the whole run with every
//! scenario it is meant to show.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold::{
    ChatMessage, DecidedBy, EventKind, Evidence, LeaseKind, ModelClient, ModelRequest, RunHandle,
    RunStatus, ToolClient, ToolDefinition, ToolInvocation, Verdict,
    model::{ModelEndpoint, ModelSettings, OpenAiClient},
    testing::RecordingSink,
    tools::McpToolClient,
};
use leasehold_cli::demo::{Answer, DemoStack, Responder};

const GUIDANCE: &str = "Do not roll back: v413 is deploying.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_shows_every_scenario_and_completes_within_a_minute() {
    let mut log = Vec::new();
    let answer = Answer::Auto {
        after: Duration::from_millis(1200),
        guidance: GUIDANCE.to_owned(),
    };
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        leasehold_cli::demo::run(answer, &mut log),
    )
    .await
    .expect("the demo ends within a minute")
    .expect("the demo runs");
    let log = String::from_utf8(log).expect("the log is text");
    println!("{log}");

    assert_eq!(report.state.status, RunStatus::Completed, "{log}");
    assert!(report.as_expected(), "{report:#?}\n{log}");
    assert!(report.elapsed_ms < 60_000);

    // The slow stream: renewed on the evidence of its chunks, never judged
    // by the evaluator.
    assert!(report.stream_renewed_by_evidence >= 1, "{log}");
    assert_eq!(report.stream_evaluator_calls, 0, "{log}");
    // The slow searches: renewed on MCP progress.
    assert!(report.tool_renewed_by_progress >= 1, "{log}");
    // The hung tool: restarted with the same key, which the server saw on
    // both attempts.
    let retry = report
        .retries
        .iter()
        .find(|r| r.tool == "fetch_metrics")
        .expect("fetch_metrics was retried");
    assert!(retry.restarted && retry.same_key(), "{retry:?}");
    assert_eq!(retry.keys.len(), 2, "{retry:?}");
    assert_eq!(retry.server_saw, Some(2), "{retry:?}");
    // The budget: the logs worker extended by the evaluator.
    assert!(
        report
            .budget_extensions
            .iter()
            .any(|e| e.path.contains("worker:logs") && e.decided_by == DecidedBy::Evaluator),
        "{:?}",
        report.budget_extensions
    );
    // One pause, on the rollback, answered with the guidance.
    assert_eq!(report.trace.pauses, 1, "{log}");
    let pause = &report.answers[0];
    assert_eq!(pause.subject, "rollback_deploy");
    assert_eq!(pause.answered_by, Responder::Auto);
    assert_eq!(pause.guidance.as_deref(), Some(GUIDANCE));
    assert!(pause.waited_ms >= 1_000, "{pause:?}");
    // Who decided what.
    for decider in ["ladder", "evidence", "evaluator"] {
        assert!(
            report
                .trace
                .verdicts_by_decider
                .get(decider)
                .is_some_and(|n| *n > 0),
            "no verdict by {decider}: {:?}",
            report.trace.verdicts_by_decider
        );
    }
    for verdict in ["RENEW", "INTERVENE", "ESCALATE"] {
        assert!(
            report
                .trace
                .verdicts_by_verdict
                .get(verdict)
                .is_some_and(|n| *n > 0),
            "no {verdict}: {:?}",
            report.trace.verdicts_by_verdict
        );
    }
    // The guidance reached the run's answer, through the deploys worker.
    let answer = report.state.answer.as_deref().unwrap_or_default();
    assert!(answer.contains(GUIDANCE), "{answer}");
    // The log says when the run paused and how it was answered, and ends
    // with the summary.
    assert!(log.contains("PAUSED (waiting_human)"), "{log}");
    assert!(log.contains("answering automatically"), "{log}");
    assert!(log.contains("as expected   yes"), "{log}");
    // Counts agree with their nouns: one pause, one restart, never `(s)`.
    assert!(log.contains("1 restart, 1 pause,"), "{log}");
    assert!(!log.contains("(s)"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_carry_each_scenario_when_the_pause_is_answered_from_outside() {
    let stack = DemoStack::start().await.expect("the servers start");
    let events = RecordingSink::new();
    let engine = stack
        .engine_builder()
        .expect("the engine builder")
        .events(Arc::new(events.clone()))
        .build()
        .await
        .expect("the engine builds");
    let executor = leasehold::executor::Executor::new(
        Arc::new(engine),
        leasehold::executor::ExecutorOptions::command_line(),
    );
    // Someone outside the driver — here a task holding the run's handle, as
    // the HTTP server would — answers the pause.
    let (handle_tx, handle_rx) = tokio::sync::oneshot::channel::<RunHandle>();
    let person = tokio::spawn(async move {
        let mut run = handle_rx.await.expect("the driver hands the handle over");
        let state = run.paused().await;
        assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        run.resume(Some(GUIDANCE.to_owned()))
            .await
            .expect("the run resumes");
    });
    let mut sink = std::io::sink();
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        leasehold_cli::demo::drive_with(
            &executor,
            stack.flow(),
            Answer::External,
            &mut sink,
            move |run| {
                let _ = handle_tx.send(run.clone());
            },
        ),
    )
    .await
    .expect("the demo ends within a minute")
    .expect("the demo runs");
    person.await.expect("the person answered");
    assert_eq!(report.answers.len(), 1, "{:?}", report.answers);
    assert_eq!(report.answers[0].answered_by, Responder::External);
    assert_eq!(report.answers[0].guidance.as_deref(), Some(GUIDANCE));
    let events = events.events();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.name()).collect();

    // Completed, after exactly one pause and its resume.
    assert_eq!(report.state.status, RunStatus::Completed);
    assert_eq!(kinds.iter().filter(|k| **k == "paused").count(), 1);
    assert_eq!(kinds.iter().filter(|k| **k == "resumed").count(), 1);
    assert_eq!(kinds.last(), Some(&"run_completed"), "{kinds:?}");
    // A model-stream verdict decided by evidence.
    assert!(events.iter().any(|e| matches!(
        &e.kind,
        EventKind::Verdict(r) if r.lease_kind == LeaseKind::ModelStream
            && r.decided_by == DecidedBy::Evidence
            && r.verdict == Verdict::Renew
    )));
    // A budget extension.
    assert!(kinds.contains(&"budget_extended"));
    // fetch_metrics started twice with one key, which the server saw twice.
    let keys: Vec<(u32, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallStarted {
                tool,
                idempotency_key,
                attempt,
                ..
            } if tool == "fetch_metrics" => Some((*attempt, idempotency_key.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!((keys[0].0, keys[1].0), (1, 2));
    assert_eq!(keys[0].1, keys[1].1);
    let seen: Vec<(String, String)> = stack
        .idempotency_keys_seen()
        .into_iter()
        .filter(|(tool, _)| tool == "fetch_metrics")
        .collect();
    assert_eq!(
        seen,
        vec![
            ("fetch_metrics".to_owned(), keys[0].1.clone()),
            ("fetch_metrics".to_owned(), keys[0].1.clone())
        ]
    );
    stack.shutdown().await;
}

fn client(stack: &DemoStack) -> OpenAiClient {
    OpenAiClient::new(ModelSettings::new(ModelEndpoint::new(
        stack.model_base_url(),
        "leasehold-demo",
    )))
    .expect("the client builds")
}

fn worker_prompt(stack: &DemoStack, kind: &str) -> String {
    stack.flow().workers[kind].prompt.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_tool_call_of_the_scripted_model_is_read_by_the_real_client() {
    let stack = DemoStack::start().await.expect("the servers start");
    let client = client(&stack);
    let search = ToolDefinition {
        name: "search_logs".into(),
        description: "Search the logs.".into(),
        input_schema: serde_json::json!({"type": "object"}),
        idempotent: Some(true),
    };
    let request = ModelRequest {
        max_tokens: None,
        traceparent: None,
        messages: vec![
            ChatMessage::system(worker_prompt(&stack, "logs")),
            ChatMessage::user("Search the checkout logs."),
        ],
        tools: vec![search],
        stream: true,
        consumer: "worker:logs".into(),
    };
    let evidence = Evidence::detached();
    let reply = client
        .complete(request, evidence.clone())
        .await
        .expect("the stream is read");
    assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
    assert_eq!(reply.tool_calls[0].name, "search_logs");
    assert_eq!(
        reply.tool_calls[0].arguments,
        serde_json::json!({"query": "checkout 14:00"})
    );
    assert!(!reply.tool_calls[0].id.is_empty());
    assert!(reply.usage.input_tokens > 0 && reply.usage.output_tokens > 0);
    assert!(evidence.count() >= 3, "every chunk is evidence");
    assert!(client.ledger().of("worker:logs").output_tokens > 0);

    // The same request, blocking, gets the same answer as one JSON object.
    let blocking = ModelRequest {
        max_tokens: None,
        traceparent: None,
        messages: vec![
            ChatMessage::system(worker_prompt(&stack, "metrics")),
            ChatMessage::user("Read the metrics."),
        ],
        tools: vec![ToolDefinition {
            name: "fetch_metrics".into(),
            description: "Fetch.".into(),
            input_schema: serde_json::json!({"type": "object"}),
            idempotent: Some(true),
        }],
        stream: false,
        consumer: "worker:metrics".into(),
    };
    let reply = client
        .complete(blocking, Evidence::detached())
        .await
        .expect("the answer is read");
    assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
    assert_eq!(reply.tool_calls[0].name, "fetch_metrics");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripted_model_answers_the_evaluators_strict_json() {
    let stack = DemoStack::start().await.expect("the servers start");
    let engine_client = client(&stack);
    let evaluator = leasehold::model::ModelEvaluator::new(&engine_client);
    let request = leasehold::EvaluationRequest {
        lease_id: leasehold::LeaseId(1),
        run_id: "run-x".into(),
        path: "run/worker:deploys:3/tool_call:2.0".into(),
        kind: LeaseKind::ToolCall,
        subject: "rollback_deploy".into(),
        renewals: 2,
        max_renewals: 10,
        lease: Duration::from_millis(300),
        evidence: leasehold::EvidenceSummary::default(),
        evidence_renewals: 0,
        stream_tail: None,
        transcript_tail: Arc::new([]),
    };
    let answer = leasehold::Evaluator::evaluate(&evaluator, request)
        .await
        .expect("the evaluator answers");
    let parsed = leasehold::parse_verdict(&answer.text).expect("strict JSON");
    assert_eq!(parsed.verdict, Verdict::Escalate, "{}", answer.text);
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_request_gets_a_400_json_error_naming_what_was_wrong() {
    let stack = DemoStack::start().await.expect("the servers start");
    let url = format!("{}/chat/completions", stack.model_base_url());
    let http = reqwest::Client::new();
    let cases: [(&str, &str); 3] = [
        ("{\"messages\": ", "not valid JSON"),
        (r#"{"model": "m"}"#, "missing field `messages`"),
        (
            r#"{"model": "m", "messages": [{"role": "robot", "content": "hi"}]}"#,
            "messages[0].role",
        ),
    ];
    for (body, named) in cases {
        let response = http
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("the server answers");
        assert_eq!(response.status().as_u16(), 400, "{body}");
        let error: serde_json::Value = response.json().await.expect("a JSON error");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(named), "{body}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request_error");
    }
    // The real client reports it as a client error, not retryable.
    let error = client(&stack)
        .complete(
            ModelRequest {
                max_tokens: None,
                traceparent: None,
                messages: Vec::new(),
                tools: Vec::new(),
                stream: true,
                consumer: "run".into(),
            },
            Evidence::detached(),
        )
        .await
        .expect_err("an empty conversation is refused");
    assert!(!error.retryable, "{error:?}");
    assert!(error.message.contains("`messages` is empty"), "{error:?}");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_server_lists_its_tools_to_the_real_client_and_records_keys() {
    let stack = DemoStack::start().await.expect("the servers start");
    let flow = stack.flow();
    let server = &flow.tools[0];
    assert_eq!(server.url.as_deref(), Some(stack.tools_url().as_str()));
    let mcp = McpToolClient::for_server(server).expect("a valid server entry");
    let tools: BTreeMap<String, ToolDefinition> = mcp
        .list_tools()
        .await
        .expect("the server lists its tools")
        .into_iter()
        .map(|d| (d.name.clone(), d))
        .collect();
    assert_eq!(
        tools.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["fetch_metrics", "rollback_deploy", "search_logs"]
    );
    assert_eq!(tools["search_logs"].idempotent, Some(true));
    assert_eq!(tools["rollback_deploy"].idempotent, Some(false));
    assert!(tools["search_logs"].input_schema["properties"]["query"].is_object());

    // A search reports progress, which the client turns into evidence.
    let evidence = Evidence::detached();
    let output = mcp
        .call(
            ToolInvocation {
                traceparent: None,
                name: "search_logs".into(),
                arguments: serde_json::json!({"query": "db pool exhausted"}),
                idempotency_key: "run-t/run/1/0".into(),
            },
            evidence.clone(),
        )
        .await
        .expect("the search answers");
    assert!(output.content.contains("db pool exhausted"), "{output:?}");
    assert!(
        evidence.count() >= 10,
        "{} progress items",
        evidence.count()
    );

    // The first metrics call for a key hangs; a retry with the key answers.
    let call = |key: &str| {
        mcp.call(
            ToolInvocation {
                traceparent: None,
                name: "fetch_metrics".into(),
                arguments: serde_json::json!({"series": "checkout.p99"}),
                idempotency_key: key.into(),
            },
            Evidence::detached(),
        )
    };
    let first = tokio::time::timeout(Duration::from_millis(800), call("run-t/run/2/0")).await;
    assert!(first.is_err(), "the first call hangs: {first:?}");
    let second = tokio::time::timeout(Duration::from_secs(10), call("run-t/run/2/0"))
        .await
        .expect("the retry answers")
        .expect("the retry succeeds");
    assert!(second.content.contains("checkout.p99"), "{second:?}");
    assert_eq!(
        stack.idempotency_keys_seen(),
        vec![
            ("search_logs".to_owned(), "run-t/run/1/0".to_owned()),
            ("fetch_metrics".to_owned(), "run-t/run/2/0".to_owned()),
            ("fetch_metrics".to_owned(), "run-t/run/2/0".to_owned()),
        ]
    );
    ToolClient::shutdown(&mcp).await;
    stack.shutdown().await;
}
