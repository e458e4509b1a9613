//! A model server that stops answering and comes back: the run is not
//! thrown away. A real llmock is frozen with SIGSTOP; every attempt of the
//! model call is cut by its lease's renewal cap, the restarts run out, and
//! the run pauses `waiting_human` with a reason naming the endpoint. Once
//! the server is continued, `resume` calls the model again and the run
//! completes.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use leasehold::{
    Engine, EngineConfig, EventKind, Flow, HandedTo, RestartPolicy, RunStatus,
    model::{ModelEndpoint, ModelSettings, OpenAiClient},
    testing::RecordingSink,
};
use leasehold_tests::llmock::{Llmock, LlmockOptions};

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{name} {pid} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_server_that_stops_answering_pauses_the_run_and_resume_completes_it_once_back() {
    let server = Llmock::start_with(LlmockOptions {
        tool_mode: Some("off".into()),
        ..LlmockOptions::default()
    })
    .await;
    let mut settings = ModelSettings::new(ModelEndpoint::new(server.base_url(), "gpt-4o-mini"));
    // The watchdog judges, not the transport.
    settings.idle_timeout = Duration::from_secs(120);
    let model = OpenAiClient::new(settings).expect("the model client builds");
    let mut config = EngineConfig::default();
    let lease = Duration::from_millis(300);
    config.supervision.lease.model_stream = lease;
    config.supervision.lease.model_blocking = lease;
    config.supervision.lease.max_renewals = 1;
    config.supervision.watchdog.free_renewals = 1;
    config.restart = RestartPolicy {
        max_restarts: 1,
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_millis(100),
        jitter: 0.0,
        ..RestartPolicy::default()
    };
    let events = RecordingSink::new();
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(model))
        .events(Arc::new(events.clone()))
        .build()
        .await
        .expect("the engine builds");
    let flow: Flow = serde_json::from_value(serde_json::json!({
        "name": "comes-back",
        "task": "Say hello.",
        "max_steps": 3
    }))
    .expect("a valid flow");

    signal(server.pid(), "STOP");
    let mut run = engine.start(flow).await.expect("the run starts");
    let state = tokio::time::timeout(Duration::from_secs(60), run.paused())
        .await
        .expect("the run pauses within a minute");
    assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
    let reason = state.paused.map(|p| p.reason).unwrap_or_default();
    assert!(
        reason.contains("model call: failed on each of its 2 attempts")
            && reason.contains(&format!("{}/chat/completions", server.base_url())),
        "{reason}"
    );
    let handed: Vec<HandedTo> = events
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::GaveUp { handed_to, .. } => Some(handed_to),
            _ => None,
        })
        .collect();
    assert_eq!(handed, [HandedTo::Person]);
    assert_eq!(events.count("renewal_cap_reached"), 2);

    signal(server.pid(), "CONT");
    run.resume(Some("the endpoint is back".into()))
        .await
        .expect("resumes");
    let state = tokio::time::timeout(Duration::from_secs(60), run.wait())
        .await
        .expect("the run ends within a minute");
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert!(state.answer.is_some_and(|a| !a.is_empty()));
}
