//! The simulated world of one seed: executors on one shared store, the
//! peers they call, the people who answer paused runs and the receivers
//! of their notices; every choice drawn from the seed, every step written
//! to a trace, and the invariants checked after each.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::testing::faults::{Faults, FaultyStore};
use leasehold_actors::{
    Delivery, Engine, EngineConfig, Flow, MemoryStore, NoticeTake, Outbox, ReconcileDecision,
    RestartPolicy, RunHandle, RunStatus, Store,
};
use serde_json::json;

use super::observe::{Journal, Observed, SimClock};
use super::peers::{Peers, SimEvaluator, SimModel, SimTools};

/// The run lease's TTL.
pub const TTL: Duration = Duration::from_secs(90);
const EPOCH_MS: u64 = 1_800_000_000_000;
/// The most runs one seed starts.
const MAX_RUNS: usize = 12;
/// How long one action may take before the trace says it hung.
const ACTION_PATIENCE: Duration = Duration::from_secs(900);

pub struct Executor {
    pub owner: String,
    pub engine: Engine,
    pub faults: Faults,
    pub clock: SimClock,
}

pub struct World {
    pub rng: fastrand::Rng,
    pub base: MemoryStore,
    pub journal: Journal,
    pub executors: Vec<Executor>,
    /// Executors that crashed: kept, so that nothing of theirs is dropped
    /// mid-flight.
    pub dead: Vec<Executor>,
    pub next_owner: u32,
    pub start: tokio::time::Instant,
    pub peers: Peers,
    /// Run ids, in the order started, and their names in the trace.
    pub runs: Vec<String>,
    pub names: BTreeMap<String, String>,
    /// The idempotency keys a person said to call again, and how often.
    pub retries: BTreeMap<String, usize>,
    /// The fence last seen of each run.
    pub fences: BTreeMap<String, u64>,
    /// Each notice delivered: (run, status).
    pub delivered: Vec<(String, RunStatus)>,
    pub trace: String,
    pub violations: Vec<String>,
    /// The breaches already reported.
    pub reported: std::collections::BTreeSet<String>,
}

fn config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_secs(30);
    config.supervision.lease.model_stream = Duration::from_secs(30);
    config.restart = RestartPolicy {
        jitter: 0.0,
        ..RestartPolicy::default()
    };
    config.run_lease_ttl = TTL;
    config
}

impl World {
    pub async fn new(seed: u64) -> Self {
        let rng = fastrand::Rng::with_seed(seed);
        let mut world = Self {
            base: MemoryStore::new(),
            journal: Journal::default(),
            executors: Vec::new(),
            dead: Vec::new(),
            next_owner: 1,
            start: tokio::time::Instant::now(),
            peers: Peers::new(seed),
            runs: Vec::new(),
            names: BTreeMap::new(),
            retries: BTreeMap::new(),
            fences: BTreeMap::new(),
            delivered: Vec::new(),
            trace: String::new(),
            violations: Vec::new(),
            reported: std::collections::BTreeSet::new(),
            rng: fastrand::Rng::with_seed(seed),
        };
        world.rng = rng;
        let count = world.rng.usize(2..=4);
        for _ in 0..count {
            let executor = world.executor().await;
            world.executors.push(executor);
        }
        world.say(format!("seed {seed}: {count} executors"));
        world
    }

    /// A new executor with a new owner id, its own clock skew and faults.
    async fn executor(&mut self) -> Executor {
        let owner = format!("e{}", self.next_owner);
        self.next_owner += 1;
        let skew = self.rng.i64(-2_000..=2_000);
        let clock = SimClock::new(EPOCH_MS, self.start, skew);
        let faults = Faults::none();
        let observed: Arc<dyn Store> = Arc::new(Observed::new(
            self.base.clone(),
            &owner,
            self.journal.clone(),
        ));
        let store: Arc<dyn Store> = Arc::new(FaultyStore::new(observed, faults.clone()));
        let engine = Engine::builder()
            .config(config())
            .owner_id(&owner)
            .store(store)
            .clock(Arc::new(clock.clone()))
            .model(Arc::new(SimModel(self.peers.clone())))
            .tool_server("local", Arc::new(SimTools(self.peers.clone())))
            .evaluator(Arc::new(SimEvaluator(self.peers.clone())))
            .build()
            .await
            .expect("the engine builds");
        Executor {
            owner,
            engine,
            faults,
            clock,
        }
    }

    /// The text with every run id replaced by the run's name: ids differ
    /// from process to process, names do not.
    pub fn named(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (id, name) in &self.names {
            text = text.replace(id.as_str(), name);
        }
        text
    }

    pub fn say(&mut self, line: String) {
        let line = without_write_counts(&self.named(&line));
        let at = self.start.elapsed().as_millis();
        let _ = writeln!(self.trace, "[{:>6}.{:03}s] {line}", at / 1000, at % 1000);
    }

    /// One step: an action drawn from the seed.
    pub async fn step(&mut self) {
        let n = self.executors.len();
        let i = self.rng.usize(0..n);
        let what = self.rng.u32(0..100);
        match what {
            0..30 => {
                let secs = self.rng.u64(1..40);
                self.say(format!("advance {secs}s"));
                tokio::time::sleep(Duration::from_secs(secs)).await;
            }
            30..42 => self.start_run(i).await,
            42..54 => self.sweep(i).await,
            54..58 => {
                let share = [0.0, 0.05, 0.2, 0.5][self.rng.usize(0..4)];
                let latency = [0, 0, 200, 5_000][self.rng.usize(0..4)];
                let seed = self.rng.u64(..);
                let ex = &self.executors[i];
                ex.faults.fail_share(seed, share);
                ex.faults.latency(seed, Duration::from_millis(latency));
                let owner = ex.owner.clone();
                self.say(format!(
                    "{owner}: store writes fail {share}, latency up to {latency}ms"
                ));
            }
            58..61 => {
                let refusing = self.rng.bool();
                let ex = &self.executors[i];
                ex.faults.refuse_writes(refusing);
                let owner = ex.owner.clone();
                self.say(format!("{owner}: the store refuses writes: {refusing}"));
            }
            61..66 => {
                let cut = self.rng.u32(0..3) != 0;
                let ex = &self.executors[i];
                ex.faults.cut_off(cut);
                let owner = ex.owner.clone();
                self.say(format!("{owner}: partitioned from the store: {cut}"));
            }
            66..70 => self.crash(i).await,
            70..75 => {
                let by = if self.rng.u32(0..4) == 0 {
                    -self.rng.i64(1_000..60_000)
                } else {
                    self.rng.i64(30_000..200_000)
                };
                let ex = &self.executors[i];
                ex.clock.jump(by);
                let owner = ex.owner.clone();
                self.say(format!("{owner}: clock jumps {by}ms"));
            }
            75..88 => self.person().await,
            88 => self.cancel_running().await,
            _ => self.deliver(false).await,
        }
    }

    async fn start_run(&mut self, i: usize) {
        if self.runs.len() >= MAX_RUNS {
            return;
        }
        let max_steps = self.rng.u32(3..10);
        let mut flow = json!({
            "name": "sim",
            "task": "Charge the customer and look the order up.",
            "max_steps": max_steps,
            "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}]
        });
        if self.rng.bool() {
            flow["notify"] = json!(["ops"]);
        }
        let flow: Flow = serde_json::from_value(flow).expect("a valid flow");
        let ex = &self.executors[i];
        let owner = ex.owner.clone();
        let started = tokio::time::timeout(ACTION_PATIENCE, ex.engine.start(flow)).await;
        match started {
            Ok(Ok(handle)) => {
                let id = handle.run_id().to_owned();
                self.name_run(&id);
                self.say(format!("{owner}: started {id} ({max_steps} steps)"));
            }
            Ok(Err(error)) => self.say(format!("{owner}: start refused: {error}")),
            Err(_) => self.say(format!("{owner}: start hung")),
        }
        // A run the store took but whose start was refused is still a run.
        self.adopt_unknown_runs();
    }

    /// Names run `id` after the order it was started in, for the trace
    /// and the peers.
    fn name_run(&mut self, id: &str) {
        let number = self.runs.len() + 1;
        self.names.insert(id.to_owned(), format!("r{number}"));
        self.runs.push(id.to_owned());
        self.peers
            .run_started(id, u64::try_from(number).unwrap_or(u64::MAX));
    }

    /// Names runs the store holds that the world did not see start.
    fn adopt_unknown_runs(&mut self) {
        for id in self.base.list_ids() {
            if !self.names.contains_key(&id) {
                self.name_run(&id);
            }
        }
    }

    async fn sweep(&mut self, i: usize) {
        let ex = &self.executors[i];
        let owner = ex.owner.clone();
        let swept = tokio::time::timeout(ACTION_PATIENCE, async {
            let orphaned = ex.engine.reconcile_orphans().await?;
            let resumed = ex.engine.resume_orphans().await?;
            Ok::<_, leasehold_actors::EngineError>((orphaned, resumed))
        })
        .await;
        match swept {
            Ok(Ok((orphaned, resumed))) => {
                let resumed: Vec<String> = resumed.iter().map(|h| h.run_id().to_owned()).collect();
                self.say(format!(
                    "{owner}: sweep orphaned {orphaned:?} resumed {resumed:?}"
                ));
            }
            Ok(Err(error)) => self.say(format!("{owner}: sweep failed: {error}")),
            Err(_) => self.say(format!("{owner}: sweep hung")),
        }
    }

    /// Executor `i` dies — cut off from the store for good, its runs killed
    /// where they are — and a new one takes its place.
    async fn crash(&mut self, i: usize) {
        let owner = self.executors[i].owner.clone();
        self.executors[i].faults.cut_off(true);
        self.executors[i].engine.crash();
        let fresh = self.executor().await;
        let new_owner = fresh.owner.clone();
        let dead = std::mem::replace(&mut self.executors[i], fresh);
        self.dead.push(dead);
        self.say(format!("{owner}: crashed; {new_owner} starts in its place"));
    }

    /// The live executor holding `run_id` with its current fence, if any.
    fn holder(&self, run_id: &str, fence: u64) -> Option<usize> {
        self.executors
            .iter()
            .position(|ex| ex.engine.held_fence(run_id) == Some(fence))
    }

    /// A handle on `run_id` from its holder, or from an executor that
    /// claims it (a run paused by a dead executor).
    async fn handle_of(&mut self, run_id: &str) -> Option<(String, RunHandle)> {
        let record = self.base.run(run_id)?;
        if let Some(h) = self.holder(run_id, record.fence) {
            let ex = &self.executors[h];
            return ex
                .engine
                .handle(run_id)
                .map(|handle| (ex.owner.clone(), handle));
        }
        let i = self.rng.usize(0..self.executors.len());
        let ex = &self.executors[i];
        let owner = ex.owner.clone();
        match tokio::time::timeout(ACTION_PATIENCE, ex.engine.resume(run_id)).await {
            Ok(Ok(handle)) => {
                self.say(format!("{owner}: claimed {run_id} for a person"));
                Some((owner, handle))
            }
            Ok(Err(error)) => {
                self.say(format!("{owner}: could not claim {run_id}: {error}"));
                None
            }
            Err(_) => {
                self.say(format!("{owner}: claiming {run_id} hung"));
                None
            }
        }
    }

    /// A person answers a paused run.
    async fn person(&mut self) {
        let paused: Vec<String> = self
            .runs
            .iter()
            .filter(|id| self.base.run(id).is_some_and(|r| r.status.is_paused()))
            .cloned()
            .collect();
        if paused.is_empty() {
            return;
        }
        let run_id = paused[self.rng.usize(0..paused.len())].clone();
        let Some((owner, handle)) = self.handle_of(&run_id).await else {
            return;
        };
        let state = handle.state();
        let roll = self.rng.u32(0..100);
        let (what, answered) = match (
            &state.status,
            state.paused.as_ref().and_then(|p| p.call.clone()),
        ) {
            (RunStatus::ReconciliationRequired, Some(call)) => {
                let decision = match roll {
                    0..50 => ReconcileDecision::MarkDone {
                        result: "done, a person checked".into(),
                    },
                    50..80 => ReconcileDecision::Retry,
                    _ => ReconcileDecision::Cancel,
                };
                let what = format!("decides {decision:?} on {}", call.tool);
                let retry = matches!(decision, ReconcileDecision::Retry);
                let key = call.key.clone();
                let answered =
                    tokio::time::timeout(ACTION_PATIENCE, handle.reconcile(call.key, decision))
                        .await;
                if retry && matches!(answered, Ok(Ok(()))) {
                    *self.retries.entry(key).or_default() += 1;
                }
                (what, answered)
            }
            (RunStatus::WaitingHuman, _) if roll < 75 => (
                "resumes".to_owned(),
                tokio::time::timeout(ACTION_PATIENCE, handle.resume(Some("go on".into()))).await,
            ),
            _ => (
                "cancels".to_owned(),
                tokio::time::timeout(ACTION_PATIENCE, handle.cancel("a person stopped it")).await,
            ),
        };
        let outcome = match answered {
            Ok(Ok(())) => "ok".to_owned(),
            Ok(Err(error)) => format!("refused: {error}"),
            Err(_) => "hung".to_owned(),
        };
        self.say(format!("person on {owner} {what} {run_id}: {outcome}"));
    }

    /// A person cancels a running run.
    async fn cancel_running(&mut self) {
        let running: Vec<String> = self
            .runs
            .iter()
            .filter(|id| {
                self.base
                    .run(id)
                    .is_some_and(|r| r.status == RunStatus::Running)
            })
            .cloned()
            .collect();
        if running.is_empty() {
            return;
        }
        let run_id = running[self.rng.usize(0..running.len())].clone();
        let Some(record) = self.base.run(&run_id) else {
            return;
        };
        let Some(h) = self.holder(&run_id, record.fence) else {
            return;
        };
        let ex = &self.executors[h];
        let owner = ex.owner.clone();
        let Some(handle) = ex.engine.handle(&run_id) else {
            return;
        };
        let outcome =
            match tokio::time::timeout(ACTION_PATIENCE, handle.cancel("a person stopped it")).await
            {
                Ok(Ok(())) => "ok".to_owned(),
                Ok(Err(error)) => format!("refused: {error}"),
                Err(_) => "hung".to_owned(),
            };
        self.say(format!("person on {owner} cancels {run_id}: {outcome}"));
    }

    /// The receivers take due notices and deliver them — or fail, or hang
    /// (the notice stays held until its hold ends) — unless `reliable`.
    pub async fn deliver(&mut self, reliable: bool) {
        let now_ms = EPOCH_MS + u64::try_from(self.start.elapsed().as_millis()).unwrap_or(0);
        let take = NoticeTake {
            now_ms,
            hold_ms: 60_000,
            max: 5,
        };
        let notices = self.base.take_notices(take).await.expect("notices taken");
        for notice in notices {
            let roll = if reliable { 0 } else { self.rng.u32(0..100) };
            let held = notice.delivery.due_at_ms;
            let outcome = match roll {
                0..60 => {
                    self.base
                        .settle_notice(notice.id, held, None)
                        .await
                        .expect("settled");
                    self.delivered.push((notice.run_id.clone(), notice.status));
                    "delivered"
                }
                60..80 => {
                    let delivery = Delivery {
                        due_at_ms: now_ms + 30_000,
                        attempts: notice.delivery.attempts + 1,
                        delivered: Vec::new(),
                        last_error: Some("the receiver answered 500".into()),
                    };
                    self.base
                        .settle_notice(notice.id, held, Some(delivery))
                        .await
                        .expect("settled");
                    "failed"
                }
                _ => "receiver hangs",
            };
            self.say(format!(
                "notice {} of {} ({}): {outcome}",
                notice.id,
                notice.run_id,
                notice.status.name()
            ));
        }
    }

    /// Faults off, peers healthy, receivers reliable: time passes and
    /// every executor sweeps until nothing runs any more.
    pub async fn settle(&mut self) {
        self.say("faults off, peers healthy".to_owned());
        for ex in &self.executors {
            ex.faults.cut_off(false);
            ex.faults.refuse_writes(false);
            ex.faults.fail_share(0, 0.0);
            ex.faults.latency(0, Duration::ZERO);
        }
        self.peers.heal();
        for round in 0..60 {
            tokio::time::sleep(Duration::from_secs(120)).await;
            for i in 0..self.executors.len() {
                self.sweep(i).await;
            }
            self.deliver(true).await;
            self.check(&format!("settling {round}"));
            if self.quiet() {
                break;
            }
        }
        self.deliver(true).await;
        self.check_end();
    }

    /// Whether every run has ended or waits for a person, and no notice
    /// waits to be told.
    fn quiet(&self) -> bool {
        let settled = self.runs.iter().all(|id| {
            self.base
                .run(id)
                .is_some_and(|r| r.status.is_terminal() || r.status.is_paused())
        });
        let told = self.delivered.len() >= self.journal.lock().told.len();
        settled && told
    }

    /// The statuses of every run, in one line.
    pub fn summary(&self) -> String {
        let mut line = String::new();
        for id in &self.runs {
            if let Some(record) = self.base.run(id) {
                let owner = record.owner_id.as_deref().unwrap_or("-");
                let _ = write!(
                    line,
                    "{}={}@{}/{} ",
                    self.names[id],
                    record.status.name(),
                    owner,
                    record.fence
                );
            }
        }
        line
    }
}

/// `line` without the fault layer's count of writes in its errors
/// (`fault injected (write 118)`): how many writes an executor made — how
/// its event log batched its runs' events — is not the same from one
/// process to the next, and says nothing of what happened.
fn without_write_counts(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("(write ") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + "(write ".len()..];
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && tail[digits..].starts_with(')') {
            out.push_str("(write)");
            rest = &tail[digits + 1..];
        } else {
            out.push_str("(write ");
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}
