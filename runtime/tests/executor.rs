//! Boot and sweep of an executor: orphans are always reconciled, resumed
//! only when `LEASEHOLD_RESUME_ON_BOOT` says so; the sweep finds them while
//! the executor runs.

use std::sync::Arc;
use std::time::Duration;

use leasehold::{
    Clock, Engine, EngineConfig, Flow, MemoryStore, RunStatus,
    executor::{Executor, ExecutorOptions, boot},
    fencing,
    testing::{ManualClock, ScriptedModel, ScriptedTools, ToolAct, Turn},
};

async fn engine(
    owner: &str,
    store: &MemoryStore,
    clock: &ManualClock,
    model: ScriptedModel,
) -> Engine {
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns("hit", Duration::from_secs(30))],
    );
    Engine::builder()
        .config(EngineConfig::default())
        .owner_id(owner)
        .store(Arc::new(store.clone()))
        .clock(Arc::new(clock.clone()))
        .model(Arc::new(model))
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("engine")
}

fn flow() -> Flow {
    serde_json::from_value(serde_json::json!({
        "name": "boot", "task": "t", "max_steps": 3,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}]
    }))
    .expect("flow")
}

#[tokio::test(start_paused = true)]
async fn boot_marks_orphans_and_resumes_them_only_when_told() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let search = || Turn::tools([("search", serde_json::json!({}))]);
    let a = engine(
        "a",
        &store,
        &clock,
        ScriptedModel::new().script("run", [search()]),
    )
    .await;
    let run = a.start(flow()).await.expect("started");
    let run_id = run.run_id().to_owned();
    tokio::time::sleep(Duration::from_secs(1)).await;
    clock.advance(Duration::from_secs(91));

    let b = engine(
        "b",
        &store,
        &clock,
        ScriptedModel::new().script("run", [Turn::answer("resumed")]),
    )
    .await;
    let first = boot(&b, false).await.expect("boot");
    assert_eq!(first.orphaned, vec![run_id.clone()]);
    assert!(first.resumed.is_empty(), "resume on boot is off by default");
    assert_eq!(
        store.run(&run_id).map(|r| r.status),
        Some(RunStatus::Orphaned)
    );

    let mut second = boot(&b, true).await.expect("boot");
    assert_eq!(second.resumed.len(), 1);
    let state = second.resumed[0].wait().await;
    assert_eq!(state.answer.as_deref(), Some("resumed"));
    assert_eq!(
        store.run(&run_id).map(|r| (r.status, r.fence)),
        Some((RunStatus::Completed, 2))
    );
}

/// Wall-clock milliseconds that follow tokio's (paused) time.
struct TokioClock {
    base_ms: u64,
    start: tokio::time::Instant,
}

impl TokioClock {
    fn at(base_ms: u64) -> Self {
        Self {
            base_ms,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_unix_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.base_ms.saturating_add(elapsed)
    }
}

const BASE_MS: u64 = 1_800_000_000_000;
const TTL: Duration = Duration::from_secs(90);

async fn executor(
    owner: &str,
    store: &MemoryStore,
    clock: Arc<dyn Clock>,
    model: ScriptedModel,
    search: ToolAct,
) -> Arc<Engine> {
    let tools = ScriptedTools::new().tool("search", Some(true), [search]);
    let config = EngineConfig {
        run_lease_ttl: TTL,
        ..EngineConfig::default()
    };
    Arc::new(
        Engine::builder()
            .config(config)
            .owner_id(owner)
            .store(Arc::new(store.clone()))
            .clock(clock)
            .model(Arc::new(model))
            .tool_server("local", Arc::new(tools))
            .build()
            .await
            .expect("engine"),
    )
}

/// Executor A starts a run whose tool call hangs, and its heartbeats stop
/// moving its lease: its wall clock stands still at the start, so every
/// renewal writes the same expiry (as if none landed). Executor B, on a
/// clock that moves, has just booted and found nothing.
async fn stalled_owner_and_sweeper(
    store: &MemoryStore,
) -> (Arc<Engine>, Arc<Engine>, String, tokio::time::Instant) {
    let search = || Turn::tools([("search", serde_json::json!({}))]);
    let a = executor(
        "a",
        store,
        Arc::new(ManualClock::at(BASE_MS)),
        ScriptedModel::new().script("run", [search()]),
        ToolAct::Hang,
    )
    .await;
    let started = tokio::time::Instant::now();
    let run = a.start(flow()).await.expect("started");
    let b = executor(
        "b",
        store,
        Arc::new(TokioClock::at(BASE_MS)),
        ScriptedModel::new().script("run", [Turn::answer("resumed by the sweep")]),
        ToolAct::returns("hit", Duration::from_secs(1)),
    )
    .await;
    let first = boot(&b, true).await.expect("boot");
    assert!(first.orphaned.is_empty() && first.resumed.is_empty());
    (a, b, run.run_id().to_owned(), started)
}

/// Executor B serving, resuming orphans or not.
fn serving(engine: Arc<Engine>, resume_orphans: bool) -> Arc<Executor> {
    Executor::new(
        engine,
        ExecutorOptions {
            resume_orphans,
            ..ExecutorOptions::default()
        },
    )
}

#[tokio::test(start_paused = true)]
async fn the_sweep_marks_a_run_orphaned_within_a_ttl_and_a_third_of_its_owner_stalling() {
    let store = MemoryStore::new();
    let (_a, b, run_id, started) = stalled_owner_and_sweeper(&store).await;
    let b = serving(b, false);
    b.serve().await.expect("serving");

    tokio::time::sleep_until(started + TTL - Duration::from_secs(1)).await;
    assert_eq!(
        store.run(&run_id).map(|r| r.status),
        Some(RunStatus::Running),
        "not before its lease expired"
    );
    tokio::time::sleep_until(started + TTL + TTL / 3).await;
    let record = store.run(&run_id).expect("the run");
    assert_eq!(record.status, RunStatus::Orphaned, "{record:?}");
    assert_eq!(record.reason.as_deref(), Some(fencing::ORPHANED));
    assert_eq!(record.fence, 1, "marked, not claimed: resume is off");
    assert_eq!(b.held_runs(), 0);
    b.shutdown().await.expect("the executor stops");
}

#[tokio::test(start_paused = true)]
async fn the_sweep_resumes_a_run_within_a_ttl_and_a_third_of_its_owner_stalling() {
    let store = MemoryStore::new();
    let (_a, b, run_id, started) = stalled_owner_and_sweeper(&store).await;
    let b = serving(b, true);
    b.serve().await.expect("serving");

    // The sweep marks it, and wakes the claimer, which resumes it.
    let mut handle = loop {
        if let Some(handle) = b.handle(&run_id) {
            break handle;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let found_after = started.elapsed();
    assert!(
        found_after >= TTL && found_after <= TTL + TTL / 3 + Duration::from_millis(100),
        "found {found_after:?} after its owner stalled"
    );
    let state = handle.wait().await;
    assert_eq!(state.answer.as_deref(), Some("resumed by the sweep"));
    let record = store.run(&run_id).expect("the run");
    assert_eq!(
        (record.status, record.fence, record.owner_id.as_deref()),
        (RunStatus::Completed, 2, Some("b"))
    );
    b.shutdown().await.expect("the executor stops");
}

#[tokio::test(start_paused = true)]
async fn a_queued_run_is_started_from_its_flow_by_the_executor_that_claims_it() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let a = engine("a", &store, &clock, ScriptedModel::new()).await;
    let queued = a.queue(flow()).await.expect("queued");
    assert_eq!(
        (queued.status, queued.owner_id.clone(), queued.fence),
        (RunStatus::Queued, None, 0),
        "a queued run is unowned"
    );
    let b = engine(
        "b",
        &store,
        &clock,
        ScriptedModel::new().script("run", [Turn::answer("claimed")]),
    )
    .await;
    let mut started = b.start_from_queue(5).await.expect("claimed");
    assert_eq!(started.len(), 1, "the one queued run");
    let state = started.remove(0).wait().await;
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.answer.as_deref(), Some("claimed"));
    let record = store.run(&queued.run_id).expect("stored");
    assert_eq!((record.owner_id.as_deref(), record.fence), (Some("b"), 1));
    let kinds: Vec<String> = store
        .events(&queued.run_id)
        .iter()
        .map(|e| e.kind.name().to_owned())
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("run_started"));
    assert!(b.start_from_queue(5).await.expect("claimed").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_claimed_run_its_executor_cannot_start_is_recorded_failed_saying_why() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let a = engine("a", &store, &clock, ScriptedModel::new()).await;
    let named: Flow = serde_json::from_value(serde_json::json!({
        "name": "named", "task": "t", "max_steps": 3, "tools": [{"name": "local"}]
    }))
    .expect("flow");
    let queued = a.queue(named).await.expect("queued");
    // An executor without the tool server `local`.
    let b = Engine::builder()
        .owner_id("b")
        .store(Arc::new(store.clone()))
        .clock(Arc::new(clock.clone()))
        .model(Arc::new(ScriptedModel::new()))
        .build()
        .await
        .expect("engine");
    assert!(b.start_from_queue(5).await.expect("claimed").is_empty());
    let record = store.run(&queued.run_id).expect("stored");
    assert_eq!(record.status, RunStatus::Failed);
    let reason = record.reason.unwrap_or_default();
    assert!(
        reason.contains("executor b claimed it from the queue but could not start it")
            && reason.contains("local"),
        "{reason}"
    );
}

/// On sled, opened by one process at a time, a run held by an owner that
/// no engine of this process has was left by a process that died (SIGKILL,
/// a crash): the first boot marks it orphaned at once, whatever its lease
/// says, and it is resumed. A run an engine of this process holds is left
/// to it until that engine is gone, and then taken over at once too.
#[tokio::test(start_paused = true)]
async fn on_sled_a_run_held_by_no_engine_here_is_orphaned_at_once_and_one_a_live_engine_holds_is_not()
 {
    use leasehold::store::{SledConfig, SledStore};
    use leasehold::testing::records::run_record;
    use leasehold::{EngineError, Store};

    let dir = tempfile::tempdir().expect("dir");
    let store: Arc<dyn Store> =
        Arc::new(SledStore::open(SledConfig::new(dir.path()).with_temporary(true)).expect("sled"));
    let clock = ManualClock::at(1_800_000_000_000);
    let an_hour_on = clock.now_unix_ms() + 3_600_000;
    let running = |run_id: &str, owner: &str| {
        let mut record = run_record(run_id, Some(owner), 1, an_hour_on, RunStatus::Running);
        record.flow = serde_json::json!({"name": "left", "task": "t", "max_steps": 3});
        record
    };
    // As a killed process leaves it: running, its lease an hour long.
    store
        .create_run(running("run-left", "gone@host/1/00000000"))
        .await
        .expect("created");
    let engine = |owner: &str, model: ScriptedModel| {
        Engine::builder()
            .config(EngineConfig::default())
            .owner_id(owner)
            .store(Arc::clone(&store))
            .clock(Arc::new(clock.clone()))
            .model(Arc::new(model))
            .build()
    };
    let live = engine("live@host/2/00000000", ScriptedModel::new())
        .await
        .expect("engine");
    store
        .create_run(running("run-held", "live@host/2/00000000"))
        .await
        .expect("created");

    let booted = engine(
        "booted@host/3/00000000",
        ScriptedModel::new().script("run", [Turn::answer("picked up")]),
    )
    .await
    .expect("engine");
    assert!(booted.holder_is_gone("gone@host/1/00000000"));
    assert!(!booted.holder_is_gone("live@host/2/00000000"));
    let found = boot(&booted, false).await.expect("boot");
    assert_eq!(found.orphaned, vec!["run-left".to_owned()]);
    let left = store.load_run("run-left").await.unwrap().expect("run");
    assert_eq!(left.status, RunStatus::Orphaned);
    assert_eq!(left.reason.as_deref(), Some(fencing::ORPHANED_HOLDER_GONE));
    assert_eq!(
        (left.fence, left.owner_id.as_deref()),
        (1, Some("gone@host/1/00000000")),
        "marked as the store's own sweep marks an orphan: owner and fence as they were"
    );
    let mut resumed = booted.resume("run-left").await.expect("resumed at once");
    assert_eq!(resumed.wait().await.status, RunStatus::Completed);
    let left = store.load_run("run-left").await.unwrap().expect("run");
    assert_eq!(left.fence, 2, "the claim raised the fence");

    // The live engine's run is its own, lease and all.
    let held = store.load_run("run-held").await.unwrap().expect("run");
    assert_eq!((held.status, held.fence), (RunStatus::Running, 1));
    let refused = booted.cancel_stored("run-held", "no").await.unwrap_err();
    assert!(matches!(refused, EngineError::Held { .. }), "{refused}");
    // Gone from the process, its holder is dead: the run is taken at once.
    drop(live);
    assert!(booted.holder_is_gone("live@host/2/00000000"));
    booted
        .cancel_stored("run-held", "its engine is gone")
        .await
        .expect("taken over at once");
    let held = store.load_run("run-held").await.unwrap().expect("run");
    assert_eq!(held.status, RunStatus::Cancelled);
}

/// The memory store cannot tell a dead holder from one a test simulates:
/// a run another owner holds is left until its lease ends.
#[tokio::test(start_paused = true)]
async fn on_the_memory_store_a_run_another_owner_holds_waits_for_its_lease() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let engine = engine("here", &store, &clock, ScriptedModel::new()).await;
    assert!(!engine.holder_is_gone("elsewhere"));
}

/// With the store's queue full, a tenant below its share of it — the bound
/// over the tenants holding queued runs, its own counted — still queues,
/// and one that holds its share is refused saying so: one tenant's flood
/// never keeps another from the queue, which holds at most twice its bound.
#[tokio::test]
async fn a_full_queue_still_takes_a_tenant_below_its_share_and_refuses_one_at_it() {
    use leasehold::RunOptions;
    use leasehold::executor::Posted;
    let dir = tempfile::tempdir().expect("a directory");
    for store in [
        Arc::new(MemoryStore::new()) as Arc<dyn leasehold::Store>,
        Arc::new(
            leasehold::store::SledStore::open(leasehold::store::SledConfig::new(dir.path()))
                .expect("sled"),
        ),
    ] {
        let engine = Engine::builder()
            .store(Arc::clone(&store))
            .model(Arc::new(NeverAnswers))
            .build()
            .await
            .expect("engine");
        // Room for one run, which never ends: every later post waits queued.
        let options = ExecutorOptions {
            max_live_runs: 1,
            max_queued_runs: 4,
            lag_target: Duration::ZERO,
            claim_interval: None,
            resume_orphans: false,
            limits: Vec::new(),
            endpoint: String::new(),
        };
        let executor = Executor::new(Arc::new(engine), options);
        let post = |tenant: &'static str| {
            let executor = Arc::clone(&executor);
            async move {
                let flow: Flow = serde_json::from_value(
                    serde_json::json!({"name": "share", "task": "t", "max_steps": 1}),
                )
                .expect("flow");
                executor
                    .post(flow, RunOptions::default().for_tenant(tenant))
                    .await
                    .expect("posted")
            }
        };
        assert!(matches!(
            post("big").await,
            Posted::Recorded(_, RunStatus::Running)
        ));
        for _ in 0..4 {
            assert!(matches!(
                post("big").await,
                Posted::Recorded(_, RunStatus::Queued)
            ));
        }
        // Full, and `big` holds the whole queue, its share alone.
        assert_eq!(
            post("big").await,
            Posted::QueueFull {
                queued: 4,
                tenant_queued: 4,
                share: 4
            }
        );
        // `small` holds none: its share of two tenants is 2.
        for _ in 0..2 {
            assert!(matches!(
                post("small").await,
                Posted::Recorded(_, RunStatus::Queued)
            ));
        }
        assert_eq!(
            post("small").await,
            Posted::QueueFull {
                queued: 6,
                tenant_queued: 2,
                share: 2
            }
        );
        assert_eq!(
            post("big").await,
            Posted::QueueFull {
                queued: 6,
                tenant_queued: 4,
                share: 2
            }
        );
        let counts = store.count_queued_by_tenant().await.expect("counts");
        assert_eq!(counts.get("big"), Some(&4));
        assert_eq!(counts.get("small"), Some(&2));
        executor.engine().shutdown().await;
    }
}

/// A keyed limit on tenants: a tenant at its `live` limit has its next
/// runs wait queued while another tenant's run starts at once, past them;
/// a claim skips its runs for the others' until one of its runs ends; and
/// at its `queued` limit a post is refused saying which limit, nothing
/// stored.
#[tokio::test]
async fn a_tenant_at_its_keyed_limit_waits_queued_and_holds_no_other_tenant_back() {
    use leasehold::RunOptions;
    use leasehold::executor::Posted;
    use leasehold::keyed_limits::KeyedLimit;
    let dir = tempfile::tempdir().expect("a directory");
    for store in [
        Arc::new(MemoryStore::new()) as Arc<dyn leasehold::Store>,
        Arc::new(
            leasehold::store::SledStore::open(leasehold::store::SledConfig::new(dir.path()))
                .expect("sled"),
        ),
    ] {
        let engine = Engine::builder()
            .store(Arc::clone(&store))
            .model(Arc::new(NeverAnswers))
            .build()
            .await
            .expect("engine");
        let options = ExecutorOptions {
            max_live_runs: 10,
            max_queued_runs: 100,
            lag_target: Duration::ZERO,
            claim_interval: None,
            resume_orphans: false,
            limits: vec![KeyedLimit {
                name: "tenants".to_owned(),
                key: "tenant".parse().expect("key"),
                live: Some(2),
                per_minute: None,
                queued: Some(2),
            }],
            endpoint: "http://models".to_owned(),
        };
        let executor = Executor::new(Arc::new(engine), options);
        let post = |tenant: &'static str| {
            let executor = Arc::clone(&executor);
            async move {
                let flow: Flow = serde_json::from_value(
                    serde_json::json!({"name": "keyed", "task": "t", "max_steps": 1}),
                )
                .expect("flow");
                executor
                    .post(flow, RunOptions::default().for_tenant(tenant))
                    .await
                    .expect("posted")
            }
        };
        let status = |posted: Posted| match posted {
            Posted::Recorded(run_id, status) => (run_id, status),
            other => panic!("{other:?}"),
        };
        let (first, running) = status(post("big").await);
        assert_eq!(running, RunStatus::Running);
        assert_eq!(status(post("big").await).1, RunStatus::Running);
        // `big` is at its two live runs: the executor's room is not asked.
        let (waiting, queued) = status(post("big").await);
        assert_eq!(queued, RunStatus::Queued);
        assert_eq!(status(post("big").await).1, RunStatus::Queued);
        assert_eq!(
            post("big").await,
            Posted::TenantQueueFull {
                limit: "tenants".to_owned(),
                tenant: "big".to_owned(),
                queued: 2,
                max: 2
            }
        );
        // `small` starts at once, past `big`'s queued runs.
        assert_eq!(status(post("small").await).1, RunStatus::Running);
        // A claim takes none of `big`'s while it holds two live runs.
        executor.claim().await.expect("claimed");
        assert_eq!(
            store
                .count_queued_by_tenant()
                .await
                .expect("counts")
                .get("big"),
            Some(&2)
        );
        // One of them ends: the next claim takes `big`'s oldest queued run.
        let mut ended = executor.handle(&first).expect("live");
        ended.cancel("done with it").await.expect("cancelled");
        ended.wait().await;
        while executor.live_runs() > 2 {
            tokio::task::yield_now().await;
        }
        executor.claim().await.expect("claimed");
        let claimed = store.load_run(&waiting).await.expect("read").expect("run");
        assert_eq!(claimed.status, RunStatus::Running);
        assert_eq!(
            store
                .count_queued_by_tenant()
                .await
                .expect("counts")
                .get("big"),
            Some(&1)
        );
        executor.engine().shutdown().await;
    }
}

/// A flow that tightens a server's keyed limit has its own runs held to
/// its number while other flows' runs take the rest of the server's room.
#[tokio::test]
async fn a_flow_that_tightens_a_keyed_limit_waits_at_its_number_while_others_take_the_rest() {
    use leasehold::RunOptions;
    use leasehold::executor::Posted;
    use leasehold::keyed_limits::KeyedLimit;
    let engine = Engine::builder()
        .model(Arc::new(NeverAnswers))
        .build()
        .await
        .expect("engine");
    let options = ExecutorOptions {
        max_live_runs: 10,
        lag_target: Duration::ZERO,
        claim_interval: None,
        limits: vec![KeyedLimit {
            name: "provider".to_owned(),
            key: "endpoint".parse().expect("key"),
            live: Some(3),
            per_minute: None,
            queued: None,
        }],
        endpoint: "http://models".to_owned(),
        ..ExecutorOptions::default()
    };
    let executor = Executor::new(Arc::new(engine), options);
    let post = |flow: serde_json::Value| {
        let executor = Arc::clone(&executor);
        async move {
            let flow: Flow = serde_json::from_value(flow).expect("flow");
            match executor
                .post(flow, RunOptions::default())
                .await
                .expect("posted")
            {
                Posted::Recorded(_, status) => status,
                other => panic!("{other:?}"),
            }
        }
    };
    let digest = serde_json::json!({
        "name": "digest", "task": "t", "max_steps": 1,
        "keyed_limits": {"provider": {"live": 1}}
    });
    let triage = serde_json::json!({"name": "triage", "task": "t", "max_steps": 1});
    assert_eq!(post(digest.clone()).await, RunStatus::Running);
    assert_eq!(post(digest.clone()).await, RunStatus::Queued);
    assert_eq!(post(triage.clone()).await, RunStatus::Running);
    assert_eq!(post(triage.clone()).await, RunStatus::Running);
    // The provider's three are live: any flow waits now.
    assert_eq!(post(triage).await, RunStatus::Queued);
    assert_eq!(executor.live_runs(), 3);
    executor.engine().shutdown().await;
}

/// A `per_minute` keyed limit: the runs of a key started in the last
/// minute count against it whether they still run or not, and a run past
/// it waits queued until the minute has passed.
#[tokio::test(start_paused = true)]
async fn a_key_past_its_starts_per_minute_waits_for_the_minute_to_pass() {
    use leasehold::RunOptions;
    use leasehold::executor::Posted;
    use leasehold::keyed_limits::KeyedLimit;
    let store = MemoryStore::new();
    let answers = (0..3).map(|_| Turn::answer("done"));
    let engine = Engine::builder()
        .store(Arc::new(store.clone()))
        .model(Arc::new(ScriptedModel::new().script("run", answers)))
        .build()
        .await
        .expect("engine");
    let options = ExecutorOptions {
        max_live_runs: 10,
        max_queued_runs: 100,
        lag_target: Duration::ZERO,
        claim_interval: None,
        resume_orphans: false,
        limits: vec![KeyedLimit {
            name: "bursts".to_owned(),
            key: "flow".parse().expect("key"),
            live: None,
            per_minute: Some(2),
            queued: None,
        }],
        endpoint: String::new(),
    };
    let executor = Executor::new(Arc::new(engine), options);
    let flow = |name: &str| -> Flow {
        serde_json::from_value(serde_json::json!({"name": name, "task": "t", "max_steps": 1}))
            .expect("flow")
    };
    let mut started = Vec::new();
    for _ in 0..3 {
        match executor
            .post(flow("burst"), RunOptions::default())
            .await
            .expect("posted")
        {
            Posted::Recorded(run_id, status) => started.push((run_id, status)),
            other => panic!("{other:?}"),
        }
    }
    let statuses: Vec<RunStatus> = started.iter().map(|(_, s)| *s).collect();
    assert_eq!(
        statuses,
        [RunStatus::Running, RunStatus::Running, RunStatus::Queued]
    );
    // The two finish; their starts still count this minute.
    for (run_id, _) in &started[..2] {
        // Paused time: each wait lets the runs go on, a millisecond at a
        // time.
        while !store.run(run_id).is_some_and(|r| r.status.is_terminal()) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    executor.claim().await.expect("claimed");
    let third = &started[2].0;
    assert_eq!(store.run(third).map(|r| r.status), Some(RunStatus::Queued));
    tokio::time::advance(Duration::from_secs(60)).await;
    executor.claim().await.expect("claimed");
    assert_ne!(store.run(third).map(|r| r.status), Some(RunStatus::Queued));
    executor.engine().shutdown().await;
}

/// A model whose answer never comes.
struct NeverAnswers;

impl leasehold::ModelClient for NeverAnswers {
    fn complete(
        &self,
        _request: leasehold::ModelRequest,
        _evidence: leasehold::Evidence,
    ) -> leasehold::BoxFuture<'static, Result<leasehold::ModelReply, leasehold::ModelError>> {
        Box::pin(std::future::pending())
    }
}
