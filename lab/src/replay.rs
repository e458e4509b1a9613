//! Replay: a stored run played again through the real engine with what it
//! recorded — its model's answers, its tools' results, its evaluator's
//! verdicts, the timing of each operation, the paces its leases were
//! seeded with, the delays its restarts drew, its executors' stops, a
//! person's answers — and no network, no tool server, on paused time;
//! then compared, loop by loop, with what it did (`docs/fork-and-replay.md`
//! says what is compared and what is not replayed).
//!
//! A [`Recording`] is what the store keeps of a run (its flow, each loop's
//! last snapshot, its tool-call records, its events, and for a fork the
//! state it started from), and serializes to JSON: saved beside a test, it
//! is a regression test ([`Recording::replay`],
//! [`ReplayReport::assert_reproduced`]).
//!
//! The recording is read once into a script of what each peer did
//! (`script.rs`); the peers play it (`peers.rs`): the model answers a
//! request with the answer that followed the same conversation, each call
//! attempt by attempt as it went — its items, silences, keepalives, its
//! cut or its failure — the tools the same with their results (a result
//! cut to the engine's cap given back whole in length), the evaluator its
//! answers after their time (the breaker's as failures). The replay's
//! engine is stopped and another resumes the run where the recording's
//! executor changed, a fork is forked again from what it inherited, and
//! each call's lease is seeded as it was (`course.rs` gathers the events,
//! counts each loop's course and seeds the book as each call starts).

mod course;
mod entry;
#[cfg(test)]
mod generated;
mod peers;
mod script;

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};

use leasehold_actors::testing::MemoryStore;
use leasehold_actors::{
    Engine, EngineConfig, Event, EventKind, Flow, ForkOrigin, ForkSpec, ReconcileDecision,
    RunHandle, RunRecord, RunState, RunStatus, Snapshot, Store, StoreError, ToolCallRecord,
    ToolCallState, ToolServer,
};
use serde::{Deserialize, Serialize};

use course::Gathered;
use entry::Counts;
use leasehold::{RunStore, SnapshotStore};
use peers::{Peers, tail};
use script::Script;

/// What the store keeps of one run: what a replay plays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    /// The run.
    pub run_id: String,
    /// Its flow, as stored.
    pub flow: serde_json::Value,
    /// How it ended, or where it is.
    pub status: RunStatus,
    /// Each loop's last snapshot.
    pub snapshots: Vec<Snapshot>,
    /// Its tool-call records.
    pub calls: Vec<ToolCallRecord>,
    /// Its event log.
    pub events: Vec<Event>,
    /// For a fork: where it started. A replay forks again from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<Forked>,
}

/// Where a fork started: its lineage, and the state it inherited from its
/// parent, as its own history keeps it (what the fork copied before it
/// ran). Its parent's calls are among the fork's tool-call records, marked
/// `made_by`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Forked {
    /// Its parent, the loop and step it starts at, its guidance, its
    /// changes, and how far into its parent's history it inherits.
    pub origin: ForkOrigin,
    /// The loops' snapshots it started from, guidance included.
    pub snapshots: Vec<Snapshot>,
}

impl Recording {
    /// The recording of `run_id` in `store`; `None` if there is no such
    /// run.
    pub async fn from_store(store: &dyn Store, run_id: &str) -> Result<Option<Self>, StoreError> {
        let Some(record) = store.load_run(run_id).await? else {
            return Ok(None);
        };
        let fork = match record.fork {
            Some(origin) => {
                let snapshots = store
                    .load_snapshot_history(run_id)
                    .await?
                    .into_iter()
                    .filter(|s| s.seq > 0 && s.seq <= origin.seq)
                    .collect();
                Some(Forked { origin, snapshots })
            }
            None => None,
        };
        Ok(Some(Self {
            run_id: run_id.to_owned(),
            flow: record.flow,
            status: record.status,
            snapshots: store.load_snapshots(run_id).await?,
            calls: store.load_tool_calls(run_id).await?,
            events: store.load_events(run_id, 0).await?,
            fork,
        }))
    }

    /// Plays it again with `config` on a current-thread runtime of its own
    /// whose time is paused, and compares. Blocks: call it outside any
    /// runtime (or from `spawn_blocking`).
    pub fn replay(&self, config: EngineConfig) -> Result<ReplayReport, ReplayError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .map_err(|e| ReplayError(format!("cannot start the replay's runtime: {e}")))?;
        runtime.block_on(self.play(config))
    }

    /// The run's flow, as stored.
    fn stored_flow(&self) -> Result<Flow, ReplayError> {
        serde_json::from_value(self.flow.clone())
            .map_err(|e| ReplayError(format!("the run's flow cannot be read: {e}")))
    }

    async fn play(&self, config: EngineConfig) -> Result<ReplayReport, ReplayError> {
        let mut flow = self.stored_flow()?;
        let names: Vec<String> = flow.tools.iter().map(|t| t.name.clone()).collect();
        let script = Script::read(&self.events);
        let mut stops = script.stops.clone().into_iter();
        let peers = Peers::new(
            script,
            &self.snapshots,
            &self.calls,
            &names,
            config.max_tool_result_bytes,
        );
        if names.len() > 1 {
            // Which server served a tool no seeded lease named is not
            // recorded: a worker sees every tool.
            for worker in flow.workers.values_mut() {
                worker.tools = None;
            }
        }
        if names.is_empty() && !self.calls.is_empty() {
            flow.tools = vec![ToolServer {
                name: peers::SERVER.to_owned(),
                command: None,
                url: None,
                env: BTreeMap::new(),
                idempotent: BTreeMap::new(),
            }];
        }
        let world = World {
            strategy: peers::strategy(&flow, config.restart, peers.delays.clone()),
            config,
            gathered: Gathered::new(peers.invocations.clone(), peers.model.started.clone()),
            peers,
            store: MemoryStore::new(),
        };
        let mut engine = world.engine().await?;
        let mut run = match &self.fork {
            Some(fork) => self.fork_again(&world, &engine, &flow, fork).await?,
            None => engine
                .start(flow)
                .await
                .map_err(|e| ReplayError(format!("the replay cannot start: {e}")))?,
        };
        let run_id = run.run_id().to_owned();
        let mut guidance = self.events.iter().filter_map(|e| match &e.kind {
            EventKind::Resumed { guidance, by: None } => Some(guidance.clone()),
            _ => None,
        });
        let mut stop = stops.next();
        let cancel = self.cancelled();
        let none = Counts::new();
        let state = loop {
            // An executor of the recording stopped here: this one stops
            // where the course stood then, and another takes the run on,
            // as `runs resume` did. A person cancelled it here: so here.
            let stopping = stop.as_ref();
            let cancelling = cancel.as_ref().filter(|_| stopping.is_none());
            let next = tokio::select! {
                biased;
                () = world.gathered.until(stopping.unwrap_or(&none)), if stopping.is_some() => {
                    Next::Stop
                }
                () = world.gathered.until(cancelling.map_or(&none, |(at, _)| at)),
                    if cancelling.is_some() => Next::Cancel,
                state = settled(&mut run) => {
                    if stopping.is_some_and(|at| world.gathered.reached(at)) {
                        Next::Stop
                    } else if cancelling.is_some_and(|(at, _)| world.gathered.reached(at)) {
                        Next::Cancel
                    } else {
                        Next::Settled(Box::new(state))
                    }
                }
            };
            let state = match next {
                Next::Stop => {
                    engine.shutdown().await;
                    engine = world.engine().await?;
                    run = engine.resume(&run_id).await.map_err(|e| {
                        ReplayError(format!("the replay cannot resume its run: {e}"))
                    })?;
                    stop = stops.next();
                    continue;
                }
                Next::Cancel => {
                    let reason = cancel.as_ref().map(|(_, r)| r.clone()).unwrap_or_default();
                    let _ = run.cancel(reason).await;
                    break run.wait().await;
                }
                Next::Settled(state) => *state,
            };
            match state.status {
                // Answered as a person answered it, while the recording
                // says they did.
                RunStatus::WaitingHuman => {
                    let Some(answer) = guidance.next() else {
                        break state;
                    };
                    if run.resume(answer).await.is_err() {
                        break state;
                    }
                    run.wait_until(|s| s.status != RunStatus::WaitingHuman)
                        .await;
                }
                RunStatus::ReconciliationRequired => {
                    let Some(call) = state.paused.as_ref().and_then(|p| p.call.clone()) else {
                        break state;
                    };
                    let Some(decision) = self.decision_on(&call.key) else {
                        break state;
                    };
                    if run.reconcile(call.key, decision).await.is_err() {
                        break state;
                    }
                    run.wait_until(|s| s.status != RunStatus::ReconciliationRequired)
                        .await;
                }
                _ => break state,
            }
        };
        engine.shutdown().await;
        let replayed = world.gathered.events_of(&run_id);
        let mut report = course::compare(self, state.status, &replayed);
        report.unanswered = world
            .peers
            .model
            .unanswered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Ok(report)
    }

    /// Where the course stood when a person cancelled the run, if one
    /// did, and why.
    fn cancelled(&self) -> Option<(Counts, String)> {
        let at = self
            .events
            .iter()
            .position(|e| matches!(e.kind, EventKind::RunCancelled { .. }))?;
        let EventKind::RunCancelled { reason } = &self.events[at].kind else {
            return None;
        };
        Some((entry::counts(&self.events[..at]), reason.clone()))
    }

    /// What a person decided about the call of key `key`, as its record
    /// says: the result they gave, or a second call (its result the
    /// tool's).
    fn decision_on(&self, key: &str) -> Option<ReconcileDecision> {
        let recorded = self.calls.iter().find(|c| tail(&c.key) == tail(key))?;
        match (&recorded.state, &recorded.result) {
            (ToolCallState::Done, Some(result)) if recorded.by_person => {
                Some(ReconcileDecision::MarkDone {
                    result: result.clone(),
                })
            }
            (ToolCallState::Done, Some(_)) => Some(ReconcileDecision::Retry),
            _ => None,
        }
    }

    /// Forks again from where the recorded fork started: its parent, as
    /// much of it as the fork inherited, is written into the replay's
    /// store, and the replay's engine forks it as the recording's did.
    async fn fork_again(
        &self,
        world: &World,
        engine: &Engine,
        flow: &Flow,
        fork: &Forked,
    ) -> Result<RunHandle, ReplayError> {
        let origin = &fork.origin;
        let parent = origin.parent.as_str();
        let failed =
            |e: StoreError| ReplayError(format!("the fork's parent cannot be written: {e}"));
        let store = &world.store;
        let applied = |applied: bool| {
            applied
                .then_some(())
                .ok_or_else(|| ReplayError("the fork's parent was refused by the store".to_owned()))
        };
        store
            .create_run(RunRecord {
                run_id: parent.to_owned(),
                flow: serde_json::to_value(flow)
                    .map_err(|e| ReplayError(format!("the flow cannot be written: {e}")))?,
                status: RunStatus::Completed,
                owner_id: None,
                fence: 1,
                lease_expires_at_ms: 0,
                reason: None,
                answer: None,
                pause: None,
                created_at_ms: 0,
                updated_at_ms: 0,
                fork: None,
                trace_parent: None,
                tenant: None,
            })
            .await
            .map_err(failed)?;
        let mut snapshots = fork.snapshots.clone();
        snapshots.sort_by_key(|s| s.seq);
        for mut snapshot in snapshots {
            snapshot.run_id = parent.to_owned();
            if snapshot.path == origin.path
                && let Some(guidance) = &origin.guidance
            {
                // The fork adds its guidance to what it inherits.
                unqueue(&mut snapshot.state, guidance);
            }
            let written = store.save_snapshot(snapshot, 1).await.map_err(failed)?;
            applied(written.is_applied())?;
        }
        for call in self
            .calls
            .iter()
            .filter(|c| c.made_by.is_some() && c.seq <= origin.seq)
        {
            let mut own = call.clone();
            if own.made_by.as_deref() == Some(parent) {
                own.made_by = None;
            }
            let written = store
                .record_tool_call(parent, own, 1)
                .await
                .map_err(failed)?;
            applied(written.is_applied())?;
        }
        let spec = ForkSpec {
            path: origin.path.clone(),
            step: origin.step,
            guidance: origin.guidance.clone(),
            set: Vec::new(),
        };
        engine
            .fork(parent, spec)
            .await
            .map_err(|e| ReplayError(format!("the replay cannot fork again: {e}")))
    }
}

/// Takes `guidance` off the end of the nudges queued in a loop's `state`.
fn unqueue(state: &mut serde_json::Value, guidance: &str) {
    if let Some(nudges) = state
        .get_mut("nudges")
        .and_then(serde_json::Value::as_array_mut)
        && nudges.last().and_then(serde_json::Value::as_str) == Some(guidance)
    {
        nudges.pop();
    }
}

/// What the replay does next.
enum Next {
    /// Stops its executor, as the recording's stopped, and resumes the
    /// run on another.
    Stop,
    /// Cancels the run, as a person did.
    Cancel,
    /// Goes on from this state: ended, or paused.
    Settled(Box<RunState>),
}

/// The run's state once it has ended or paused.
async fn settled(run: &mut RunHandle) -> RunState {
    run.wait_until(|s| s.status.is_terminal() || s.status.is_paused())
        .await
}

/// What each of a replay's executors is made of: its configuration, the
/// peers, the sink that gathers its events, and the store they share.
struct World {
    config: EngineConfig,
    peers: Peers,
    strategy: leasehold_actors::StrategyFactory,
    gathered: Gathered,
    store: MemoryStore,
}

impl World {
    /// An executor of the replay.
    async fn engine(&self) -> Result<Engine, ReplayError> {
        let mut builder = Engine::builder()
            .config(self.config.clone())
            .model(Arc::new(self.peers.model.clone()))
            .evaluator(Arc::new(self.peers.evaluator.clone()))
            .events(Arc::new(self.gathered.clone()))
            .store(Arc::new(self.store.clone()))
            .strategy(self.strategy.clone());
        for (name, tools) in &self.peers.servers {
            builder = builder.tool_server(name.clone(), Arc::new(tools.clone()));
        }
        let engine = builder
            .build()
            .await
            .map_err(|e| ReplayError(format!("the replay's engine cannot be built: {e}")))?;
        self.gathered.seed_into(engine.paces().clone());
        Ok(engine)
    }
}

/// A replay that could not be played.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("replay failed: {0}")]
pub struct ReplayError(pub String);

/// Where a replay first did otherwise than its recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The loop (`run`, `run/worker:research:1`).
    pub path: String,
    /// Its step, where one had started.
    pub step: u32,
    /// What the recording did there (`step 3`, `tool search: Ok`,
    /// `verdict RENEW by ladder on tool_call`, …), or `nothing`.
    pub recorded: String,
    /// What the replay did there, or `nothing`.
    pub replayed: String,
}

/// How a replay compares with its recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The run replayed.
    pub run_id: String,
    /// How the recording ended, and the replay.
    pub recorded_status: RunStatus,
    /// How the replay ended (or paused).
    pub replayed_status: RunStatus,
    /// Steps compared, over every loop.
    pub steps: usize,
    /// Verdicts compared.
    pub verdicts: usize,
    /// Where it first diverged, if it did: loop by loop, in the order of
    /// each loop's steps, calls and verdicts.
    pub divergence: Option<Divergence>,
    /// Requests the replay's model could not answer from the recording,
    /// what the requests said: the conversation changed.
    pub unanswered: Vec<String>,
}

impl ReplayReport {
    /// Whether the replay did what the recording did.
    pub fn reproduced(&self) -> bool {
        self.divergence.is_none()
            && self.recorded_status == self.replayed_status
            && self.unanswered.is_empty()
    }

    /// Panics, saying where and how, unless the replay reproduced the
    /// recording: a stored run as a regression test.
    #[track_caller]
    pub fn assert_reproduced(&self) {
        assert!(self.reproduced(), "{}", self.describe());
    }

    /// One paragraph for people.
    pub fn describe(&self) -> String {
        let mut text = match &self.divergence {
            None if self.reproduced() => format!(
                "replay of run {} reproduced it: {} steps and {} verdicts, {}",
                self.run_id,
                self.steps,
                self.verdicts,
                self.replayed_status.name()
            ),
            None => format!(
                "replay of run {} ended {}, the recording {}",
                self.run_id,
                self.replayed_status.name(),
                self.recorded_status.name()
            ),
            Some(d) => format!(
                "replay of run {} diverged at {} step {}: the recording did `{}`, the replay `{}`",
                self.run_id, d.path, d.step, d.recorded, d.replayed
            ),
        };
        for request in &self.unanswered {
            text.push_str(&format!("\nno recorded answer to: {request}"));
        }
        text
    }
}
