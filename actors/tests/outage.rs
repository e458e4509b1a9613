//! A provider outage is a pause, not a storm of restarts: an endpoint that
//! fails every call is marked down, its runs pause with their clocks
//! stopped, it is probed with backoff, and its runs resume and complete
//! when it answers — on paused time, with a model that refuses every
//! connection while it is "down".

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use leasehold_actors::{
    DownBy, ENDPOINT_SUBJECT, Engine, EngineConfig, EventKind, Flow, ModelClient, ModelError,
    ModelErrorKind, ModelReply, ModelRequest, Outages, PauseRequest, RestartPolicy, RunHandle,
    RunStatus,
    prelude::{BoxFuture, Evidence, FinishReason},
    testing::{MemoryStore, RecordingSink},
};

const ENDPOINT: &str = "model m at http://provider.test/v1/chat/completions";

/// A model that refuses every connection while `down`, and answers
/// `Done.` otherwise; it counts the runs' calls and the probes apart.
#[derive(Clone, Default)]
struct Provider {
    down: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
    probes: Arc<AtomicUsize>,
    /// The runs' calls made since it came back before it answered one.
    first_wave: Arc<AtomicUsize>,
    answered_since_up: Arc<AtomicBool>,
}

impl Provider {
    fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
        self.first_wave.store(0, Ordering::SeqCst);
        self.answered_since_up.store(false, Ordering::SeqCst);
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn probes(&self) -> usize {
        self.probes.load(Ordering::SeqCst)
    }
}

impl ModelClient for Provider {
    fn complete(
        &self,
        request: ModelRequest,
        _evidence: Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        let counter = if request.consumer == "probe" {
            &self.probes
        } else {
            &self.calls
        };
        counter.fetch_add(1, Ordering::SeqCst);
        let down = self.down.load(Ordering::SeqCst);
        let runs_call = request.consumer != "probe";
        if runs_call && !down && !self.answered_since_up.load(Ordering::SeqCst) {
            self.first_wave.fetch_add(1, Ordering::SeqCst);
        }
        let answered = self.answered_since_up.clone();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if !down && runs_call {
                answered.store(true, Ordering::SeqCst);
            }
            if down {
                return Err(ModelError::new(
                    ModelErrorKind::ConnectionRefused,
                    "connection refused (os error 111)",
                    true,
                ));
            }
            Ok(ModelReply {
                content: "Done.".to_owned(),
                finish_reason: Some(FinishReason::Stop),
                ..ModelReply::default()
            })
        })
    }

    fn describe(&self) -> String {
        ENDPOINT.to_owned()
    }
}

struct Rig {
    engine: Engine,
    events: RecordingSink,
    provider: Provider,
}

async fn rig() -> Rig {
    rig_on(Arc::new(MemoryStore::new())).await
}

/// A rig whose engine keeps its runs in `store`.
async fn rig_on(store: Arc<MemoryStore>) -> Rig {
    let config = EngineConfig {
        restart: RestartPolicy {
            jitter: 0.0,
            backoff_initial: Duration::from_secs(1),
            ..RestartPolicy::default()
        },
        outages: Outages {
            failures: 3,
            probe_initial: Duration::from_secs(1),
            probe_max: Duration::from_secs(8),
            resume_wave: 4,
        },
        ..EngineConfig::default()
    };
    let provider = Provider::default();
    let events = RecordingSink::new();
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(provider.clone()))
        .events(Arc::new(events.clone()))
        .store(store)
        .build()
        .await
        .expect("engine builds");
    Rig {
        engine,
        events,
        provider,
    }
}

fn flow() -> Flow {
    Flow::builder("ask", "Say done.").build().expect("a flow")
}

fn of_run<'a>(events: &'a [leasehold_actors::Event], run: &RunHandle) -> Vec<&'a EventKind> {
    events
        .iter()
        .filter(|e| *e.run_id == *run.run_id())
        .map(|e| &e.kind)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_endpoint_that_fails_every_call_pauses_its_runs_probes_with_backoff_and_resumes_them_all()
 {
    let Rig {
        engine,
        events,
        provider,
    } = rig().await;
    provider.set_down(true);
    let mut runs = Vec::new();
    for _ in 0..20 {
        runs.push(engine.start(flow()).await.expect("starts"));
    }
    for run in &mut runs {
        let state = run.paused().await;
        assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
        let pause = state.paused.expect("a pause");
        assert_eq!(pause.subject, ENDPOINT_SUBJECT, "{pause:?}");
        assert!(pause.reason.contains(ENDPOINT), "{pause:?}");
        assert!(pause.reason.contains("connection refused"), "{pause:?}");
    }
    let endpoints = engine.endpoints().list();
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    assert!(!endpoints[0].up, "{endpoints:?}");
    assert_eq!(endpoints[0].down_by, Some(DownBy::Failures));
    assert_eq!(endpoints[0].runs_waiting.len(), 20, "{endpoints:?}");
    // A minute down: the runs wait, the endpoint is probed with a backoff
    // that doubles to its bound, and nothing else is called.
    let calls_paused = provider.calls();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        provider.calls(),
        calls_paused,
        "no run called it while paused"
    );
    let probes = provider.probes();
    // 1 + 2 + 4 + 8 + 8 + … seconds: about ten in a minute, not one a run.
    assert!((6..=12).contains(&probes), "{probes} probes in a minute");
    for run in &runs {
        assert_eq!(run.state().status, RunStatus::WaitingHuman);
    }
    // Back: the next probe finds it, and every run resumes and completes.
    provider.set_down(false);
    for run in &mut runs {
        let state = run.wait().await;
        assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    }
    assert!(engine.endpoints().list()[0].up);
    // Not all at once: a wave of four, then two more for each answer.
    assert_eq!(provider.first_wave.load(Ordering::SeqCst), 4);
    let all = events.events();
    for run in &runs {
        let kinds = of_run(&all, run);
        assert!(
            !kinds.iter().any(|k| matches!(k, EventKind::GaveUp { .. })),
            "no run spent its restarts: {kinds:?}"
        );
        let restarts = kinds
            .iter()
            .filter(|k| matches!(k, EventKind::Restarted { .. }))
            .count();
        assert!(restarts <= 1, "{restarts} restarts: {kinds:?}");
        assert!(
            kinds.iter().any(|k| matches!(
                k,
                EventKind::Resumed { by: Some(by), .. } if by.contains("answered again")
            )),
            "{kinds:?}"
        );
    }
    // Each run failed once or twice before the endpoint was down, and
    // called it once after.
    assert!(
        provider.calls() <= 20 + 2 + 20,
        "{} calls",
        provider.calls()
    );
}

#[tokio::test(start_paused = true)]
async fn an_endpoint_marked_down_by_hand_holds_calls_unmade_and_marked_up_resumes_its_runs() {
    let Rig {
        engine, provider, ..
    } = rig().await;
    engine.endpoints().mark_down(ENDPOINT, "ana");
    let mut run = engine.start(flow()).await.expect("starts");
    let state = run.paused().await;
    let pause = state.paused.expect("a pause");
    assert_eq!(pause.subject, ENDPOINT_SUBJECT);
    assert!(pause.reason.contains("ana marked"), "{pause:?}");
    assert_eq!(provider.calls(), 0, "the call waits, unmade");
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(
        provider.probes(),
        0,
        "an endpoint marked down by hand is not probed"
    );
    let listed = engine.endpoints().list();
    assert_eq!(listed[0].down_by, Some(DownBy::Person("ana".to_owned())));
    assert_eq!(engine.endpoints().mark_up(ENDPOINT), 1);
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(provider.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_person_may_resume_a_run_waiting_on_a_down_endpoint_and_its_call_is_tried_once_more() {
    let Rig {
        engine, provider, ..
    } = rig().await;
    provider.set_down(true);
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(engine.start(flow()).await.expect("starts"));
    }
    for run in &mut runs {
        run.paused().await;
    }
    let before = provider.calls();
    runs[0].resume(None).await.expect("a person resumes it");
    let state = runs[0]
        .wait_until(|s| s.status == RunStatus::WaitingHuman)
        .await;
    assert_eq!(
        state.paused.expect("paused again").subject,
        ENDPOINT_SUBJECT
    );
    assert_eq!(
        provider.calls(),
        before + 1,
        "tried once more, then paused again"
    );
    provider.set_down(false);
    for run in &mut runs {
        assert_eq!(run.wait().await.status, RunStatus::Completed);
    }
}

#[tokio::test(start_paused = true)]
async fn runs_left_waiting_on_an_endpoint_by_an_executor_gone_are_taken_over_and_complete_and_a_persons_pause_is_not()
 {
    let store = Arc::new(MemoryStore::new());
    let first = rig_on(store.clone()).await;
    first.provider.set_down(true);
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(first.engine.start(flow()).await.expect("starts"));
    }
    for run in &mut runs {
        let state = run.paused().await;
        assert_eq!(state.paused.expect("a pause").subject, ENDPOINT_SUBJECT);
    }
    // A fourth run, paused by a person, waits for that person.
    first.provider.set_down(false);
    let mut held = first.engine.start(flow()).await.expect("starts");
    first.provider.set_down(true);
    held.pause(PauseRequest::new("checking it").by("ana"))
        .await
        .expect("paused by a person");
    held.paused().await;
    // The executor goes away with the runs paused, as a process that
    // stops does: they stay paused in the store.
    first.engine.shutdown().await;
    let ids: Vec<String> = runs.iter().map(|r| r.run_id().to_owned()).collect();
    // The next executor, with the endpoint answering, takes over the three
    // waiting on it, and they complete; the person's pause stays.
    let next = rig_on(store.clone()).await;
    // One is taken on for a person's control, as `resume` over the API
    // does: it is restored held for that person, and their resume applies.
    let mut by_hand = next.engine.resume(&ids[0]).await.expect("claimed");
    let state = by_hand.paused().await;
    assert_eq!(state.status, RunStatus::WaitingHuman);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        by_hand.state().status,
        RunStatus::WaitingHuman,
        "held for the person"
    );
    by_hand
        .resume(Some("go on".to_owned()))
        .await
        .expect("the person's resume applies");
    assert_eq!(by_hand.wait().await.status, RunStatus::Completed);
    let ids = ids[1..].to_vec();
    let mut taken = next
        .engine
        .take_over_endpoint_waits_up_to(10)
        .await
        .expect("the store answers");
    let mut taken_ids: Vec<String> = taken.iter().map(|r| r.run_id().to_owned()).collect();
    taken_ids.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(taken_ids, expected, "the runs waiting on the endpoint");
    for run in &mut taken {
        let state = run.wait().await;
        assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    }
    let all = next.events.events();
    for run in &taken {
        let kinds = of_run(&all, run);
        assert!(
            kinds.iter().any(|k| matches!(
                k,
                EventKind::Resumed { by: Some(by), .. }
                    if by.contains("taken over from an executor that is gone")
            )),
            "{kinds:?}"
        );
    }
    let left = stored(&store, held.run_id()).await;
    assert_eq!(left.status, RunStatus::WaitingHuman);
    assert_ne!(
        left.pause.expect("a pause").subject,
        ENDPOINT_SUBJECT,
        "a person's pause is theirs"
    );
    // Searched once a heartbeat period: a second call at once reads
    // nothing, and nothing is left to take over after it.
    for wait in [Duration::ZERO, next.engine.heartbeat_period()] {
        tokio::time::sleep(wait).await;
        let taken = next.engine.take_over_endpoint_waits_up_to(10).await;
        assert!(taken.expect("answers").is_empty());
    }
}

async fn stored(store: &Arc<MemoryStore>, run_id: &str) -> leasehold_actors::RunRecord {
    use leasehold_actors::RunStore;
    store
        .load_run(run_id)
        .await
        .expect("the store answers")
        .expect("the run is stored")
}
