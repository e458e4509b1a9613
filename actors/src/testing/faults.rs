//! A store that fails on purpose: [`FaultyStore`] wraps any store and
//! makes its writes fail as [`Faults`] say — every Nth write, a share of
//! them drawn from a seed, or all of them while the store is switched off
//! — with an error of a chosen kind, before the write reaches the store
//! underneath (so a failed write changed nothing). Reads go through,
//! unless the store is cut off ([`Faults::cut_off`]: a partition between
//! an executor and its store), when they fail too. Writes that go through
//! may be slowed by a latency drawn from a seed ([`Faults::latency`]): the
//! write lands when its delay is over, not when it was made. With no fault
//! set it is the store underneath, and passes the conformance suite as it
//! does.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::event::Event;
use crate::pace::Pace;
use crate::ports::{
    ClaimOutcome, Delivery, Fenced, LayeredStore, Notice, NoticeTake, QueueClaim, RunPage,
    RunQuery, RunRecord, RunUpdate, Snapshot, Store, StoreError, StoreErrorKind, StoreFuture,
    ToolCallRecord,
};

/// Which writes of a [`FaultyStore`] fail, and how; shared by clones, so a
/// test changes them while the store is in use.
#[derive(Clone, Default)]
pub struct Faults {
    state: Arc<Mutex<FaultState>>,
}

#[derive(Default)]
struct FaultState {
    writes: u64,
    injected: u64,
    every_nth: Option<u64>,
    share: Option<f64>,
    /// The seed of the share's draws for the writes of one run.
    share_seed: u64,
    refusing: bool,
    cut_off: bool,
    latency: Option<Duration>,
    latency_seed: u64,
    /// Each run written through the store: its number, in the order first
    /// seen.
    runs: std::collections::HashMap<String, u64>,
    /// How many writes of each kind of each run were drawn for.
    drawn: std::collections::HashMap<(String, String), u64>,
    kind: Option<StoreErrorKind>,
    only: Option<&'static str>,
}

impl Faults {
    /// No write fails (until told otherwise).
    pub fn none() -> Self {
        Self::default()
    }

    /// Every `n`th write fails (the `n`th, the `2n`th, …), counted over
    /// every write through the store, tries again included.
    pub fn every_nth_write(n: u64) -> Self {
        let faults = Self::default();
        faults.state().every_nth = Some(n.max(1));
        faults
    }

    /// Each write fails with probability `share`, drawn from `seed`: the
    /// same seed and the same writes fail the same ones. Each write is
    /// drawn for from its run (numbered in the order the store first saw
    /// it), its kind and its place among that run's writes of that kind,
    /// so that writes made concurrently, in any order, meet the same
    /// faults.
    pub fn seeded(seed: u64, share: f64) -> Self {
        let faults = Self::default();
        faults.fail_share(seed, share);
        faults
    }

    /// The kind of the errors injected (default
    /// [`StoreErrorKind::Unavailable`], which is transient).
    #[must_use]
    pub fn of_kind(self, kind: StoreErrorKind) -> Self {
        self.state().kind = Some(kind);
        self
    }

    /// Only the writes of one kind may fail, named as the errors name them:
    /// `creating a run`, `claiming a run`, `renewing a run's lease`,
    /// `updating a run`, `marking orphans`, `appending events`, `saving a
    /// snapshot`, `recording a tool call`, `claiming queued runs`,
    /// `settling a notice`, `saving paces`. The others go through and are
    /// not counted.
    #[must_use]
    pub fn only(self, what: &'static str) -> Self {
        self.state().only = Some(what);
        self
    }

    /// From now on each write fails with probability `share`, drawn from
    /// `seed` (`0.0`: none fails by chance any more).
    pub fn fail_share(&self, seed: u64, share: f64) {
        let mut state = self.state();
        state.share = (share > 0.0).then(|| share.clamp(0.0, 1.0));
        state.share_seed = seed;
    }

    /// Every write fails while `refusing` is `true`: a store gone away.
    pub fn refuse_writes(&self, refusing: bool) {
        self.state().refusing = refusing;
    }

    /// Every read and every write fails while `cut` is `true`: the store
    /// cannot be reached (a partition between an executor and its store).
    pub fn cut_off(&self, cut: bool) {
        self.state().cut_off = cut;
    }

    /// Each write that goes through lands after a delay drawn from `seed`,
    /// up to `max` (uniform, in milliseconds); `Duration::ZERO` lands every
    /// write at once again. The delay is tokio's: on paused time it takes
    /// no real time, and writes made meanwhile by others land first.
    pub fn latency(&self, seed: u64, max: Duration) {
        let mut state = self.state();
        state.latency = (!max.is_zero()).then_some(max);
        state.latency_seed = seed;
    }

    /// How many writes went through the store, failed or not.
    pub fn writes(&self) -> u64 {
        self.state().writes
    }

    /// How many writes were made to fail.
    pub fn injected(&self) -> u64 {
        self.state().injected
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The delay of the next write (of `run`, if it is one run's) that
    /// goes through, if any is drawn.
    fn delay(&self, what: &str, run: Option<(&str, &str)>) -> Option<Duration> {
        let mut state = self.state();
        let max_ms = u64::try_from(state.latency?.as_millis()).unwrap_or(u64::MAX);
        let seed = state.latency_seed ^ 0x1a7e_0c1e;
        let (run, kind) = run.unwrap_or(("", what));
        let ms = state.draw(run, kind, seed).u64(0..=max_ms);
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    /// Counts a write of `what`, and answers the error it fails with, if
    /// it does.
    #[cfg(test)]
    fn next(&self, what: &str) -> Option<StoreError> {
        self.next_of(what, None)
    }

    /// Counts a write of `what` (of a run, and drawn for as a write of
    /// `kind` of it, if `run` says so), and answers the error it fails
    /// with, if it does.
    fn next_of(&self, what: &str, run: Option<(&str, &str)>) -> Option<StoreError> {
        let mut state = self.state();
        if state.cut_off {
            state.injected += 1;
            return Some(StoreError::unavailable(format!(
                "{what}: the store cannot be reached (fault injected)"
            )));
        }
        if state.only.is_some_and(|only| only != what) {
            return None;
        }
        state.writes += 1;
        let nth = state
            .every_nth
            .is_some_and(|n| state.writes.is_multiple_of(n));
        let seed = state.share_seed;
        let drawn = match state.share {
            None => false,
            Some(share) => {
                let (run, kind) = run.unwrap_or(("", what));
                state.draw(run, kind, seed).f64() < share
            }
        };
        if !(nth || drawn || state.refusing) {
            return None;
        }
        state.injected += 1;
        let kind = state.kind.unwrap_or(StoreErrorKind::Unavailable);
        Some(StoreError::new(
            kind,
            format!("{what}: fault injected (write {})", state.writes),
        ))
    }
}

impl FaultState {
    /// A generator for the next write of `what` of `run` drawn for with
    /// `seed`: the same for the same run's same write, whatever other runs
    /// — or other kinds of writes of the run — wrote in between.
    fn draw(&mut self, run: &str, what: &str, seed: u64) -> fastrand::Rng {
        let next = u64::try_from(self.runs.len()).unwrap_or(u64::MAX);
        let number = *self.runs.entry(run.to_owned()).or_insert(next);
        let writes = self
            .drawn
            .entry((run.to_owned(), what.to_owned()))
            .or_default();
        let n = *writes;
        *writes += 1;
        let kind = what
            .bytes()
            .fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b));
        let number = number ^ kind.rotate_left(17);
        let mixed = fastrand::Rng::with_seed(seed).u64(..);
        fastrand::Rng::with_seed(
            mixed ^ number.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ n.rotate_left(32),
        )
    }
}

/// A store whose writes fail as its [`Faults`] say.
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    faults: Faults,
}

impl FaultyStore {
    /// `inner`, failing as `faults` say.
    pub fn new(inner: Arc<dyn Store>, faults: Faults) -> Self {
        Self { inner, faults }
    }

    /// Its faults, to change while it is in use.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }
}

impl FaultyStore {
    /// Fails the write of `what` (of `run`, if it is one run's) with the
    /// injected error, or makes it on the store underneath — after its
    /// latency, if one is drawn.
    fn write<T: Send + 'static>(
        &self,
        what: &str,
        run: Option<&str>,
        write: impl FnOnce(&dyn Store) -> StoreFuture<T> + Send + 'static,
    ) -> StoreFuture<T> {
        self.write_drawn(what, run.map(|run| (run, what)), write)
    }

    /// [`Self::write`], its faults drawn for as a write of `kind` of
    /// `run`, if `drawn` says so.
    fn write_drawn<T: Send + 'static>(
        &self,
        what: &str,
        drawn: Option<(&str, &str)>,
        write: impl FnOnce(&dyn Store) -> StoreFuture<T> + Send + 'static,
    ) -> StoreFuture<T> {
        if let Some(error) = self.faults.next_of(what, drawn) {
            return Box::pin(std::future::ready(Err(error)));
        }
        match self.faults.delay(what, drawn) {
            None => write(self.inner.as_ref()),
            Some(delay) => {
                let inner = self.inner.clone();
                Box::pin(async move {
                    tokio::time::sleep(delay).await;
                    write(inner.as_ref()).await
                })
            }
        }
    }

    /// Fails a read while the store is cut off, or makes it.
    fn read<T: Send + 'static>(
        &self,
        what: &str,
        read: impl FnOnce(&dyn Store) -> StoreFuture<T>,
    ) -> StoreFuture<T> {
        if self.faults.state().cut_off {
            let error = StoreError::unavailable(format!(
                "{what}: the store cannot be reached (fault injected)"
            ));
            return Box::pin(std::future::ready(Err(error)));
        }
        read(self.inner.as_ref())
    }
}

impl LayeredStore for FaultyStore {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    fn create_run(&self, record: RunRecord) -> StoreFuture<()> {
        let run = record.run_id.clone();
        self.write("creating a run", Some(&run), move |store| {
            store.create_run(record)
        })
    }

    fn claim_run(
        &self,
        run_id: &str,
        owner_id: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<ClaimOutcome> {
        let (run_id, owner_id) = (run_id.to_owned(), owner_id.to_owned());
        self.write("claiming a run", Some(&run_id.clone()), move |store| {
            store.claim_run(&run_id, &owner_id, now_ms, ttl_ms)
        })
    }

    fn renew_run(
        &self,
        run_id: &str,
        fence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<Fenced<()>> {
        let run_id = run_id.to_owned();
        self.write(
            "renewing a run's lease",
            Some(&run_id.clone()),
            move |store| store.renew_run(&run_id, fence, now_ms, ttl_ms),
        )
    }

    fn update_run(&self, run_id: &str, fence: u64, update: RunUpdate) -> StoreFuture<Fenced<()>> {
        let run_id = run_id.to_owned();
        self.write("updating a run", Some(&run_id.clone()), move |store| {
            store.update_run(&run_id, fence, update)
        })
    }

    fn reconcile_orphans(&self, now_ms: u64) -> StoreFuture<Vec<String>> {
        self.write("marking orphans", None, move |store| {
            store.reconcile_orphans(now_ms)
        })
    }

    fn append_events(
        &self,
        run_id: &str,
        events: Vec<std::sync::Arc<Event>>,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        // Drawn for by the batch's first position, not by how many batches
        // came before it: how an executor batches a run's events depends
        // on what else was pending.
        let kind = format!(
            "appending events from {}",
            events.first().map_or(0, |e| e.position)
        );
        let run = run_id.to_owned();
        self.write_drawn("appending events", Some((run_id, &kind)), move |store| {
            store.append_events(&run, events, fence)
        })
    }

    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>> {
        let run = snapshot.run_id.clone();
        self.write("saving a snapshot", Some(&run), move |store| {
            store.save_snapshot(snapshot, fence)
        })
    }

    fn record_tool_call(
        &self,
        run_id: &str,
        record: ToolCallRecord,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        let run_id = run_id.to_owned();
        self.write(
            "recording a tool call",
            Some(&run_id.clone()),
            move |store| store.record_tool_call(&run_id, record, fence),
        )
    }

    fn claim_queued(&self, claim: QueueClaim) -> StoreFuture<Vec<RunRecord>> {
        self.write("claiming queued runs", None, move |store| {
            store.claim_queued(claim)
        })
    }

    fn settle_notice(
        &self,
        id: u64,
        held_until_ms: u64,
        delivery: Option<Delivery>,
    ) -> StoreFuture<bool> {
        self.write("settling a notice", None, move |store| {
            store.settle_notice(id, held_until_ms, delivery)
        })
    }

    fn save_paces(&self, paces: Vec<(String, Option<Pace>)>) -> StoreFuture<()> {
        self.write("saving paces", None, move |store| store.save_paces(paces))
    }

    fn load_run(&self, run_id: &str) -> StoreFuture<Option<RunRecord>> {
        self.read("loading a run", |store| store.load_run(run_id))
    }

    fn list_runs(&self) -> StoreFuture<Vec<RunRecord>> {
        self.read("listing runs", |store| store.list_runs())
    }

    fn list_runs_page(&self, query: &RunQuery) -> StoreFuture<RunPage> {
        self.read("listing runs", |store| store.list_runs_page(query))
    }

    fn load_events(&self, run_id: &str, after_seq: u64) -> StoreFuture<Vec<Event>> {
        self.read("loading events", |store| {
            store.load_events(run_id, after_seq)
        })
    }

    fn last_event(&self, run_id: &str) -> StoreFuture<Option<Event>> {
        self.read("loading events", |store| store.last_event(run_id))
    }

    fn load_snapshots(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>> {
        self.read("loading snapshots", |store| store.load_snapshots(run_id))
    }

    fn load_tool_calls(&self, run_id: &str) -> StoreFuture<Vec<ToolCallRecord>> {
        self.read("loading tool calls", |store| store.load_tool_calls(run_id))
    }

    fn take_notices(&self, take: NoticeTake) -> StoreFuture<Vec<Notice>> {
        self.read("taking notices", |store| store.take_notices(take))
    }
}

/// What one run met on a store whose every `n`th write failed
/// ([`run_with_every_nth_write_failing`]).
#[derive(Debug)]
pub struct NthWriteRun {
    /// Which writes failed: every `n`th.
    pub n: u64,
    /// Why the run did not start, if it did not.
    pub refused: Option<String>,
    /// What the run's handle saw at its end.
    pub state: Option<crate::RunState>,
    /// The run as the store keeps it.
    pub record: Option<RunRecord>,
    /// The positions of the run's stored events, in order.
    pub positions: Vec<u64>,
    /// The kind of its last stored event.
    pub last_event: Option<String>,
    /// How many writes were made to fail.
    pub injected: u64,
    /// What the engine counted.
    pub health: crate::StoreHealthReport,
}

impl NthWriteRun {
    /// Panics unless the rule holds: a run that started completed, its
    /// record says so, and its log runs from position 1 with no gap to its
    /// `run_completed`; a run that did not start left nothing stored. A
    /// store whose every write fails (`n` = 1) starts nothing.
    pub fn assert_holds(&self) {
        let n = self.n;
        let Some(state) = &self.state else {
            let refused = self.refused.as_deref().unwrap_or("");
            assert!(
                refused.contains("fault injected"),
                "every {n}th write failing: the run neither started nor was refused by the store: {self:?}"
            );
            assert!(
                self.record.is_none(),
                "a refused run left a record: {self:?}"
            );
            return;
        };
        assert_eq!(
            state.status,
            crate::RunStatus::Completed,
            "every {n}th write failing: the run did not complete: {self:?}"
        );
        let record = self.record.as_ref().expect("the run's record");
        assert_eq!(record.status, crate::RunStatus::Completed, "{self:?}");
        let expected: Vec<u64> = (1..=self.positions.len() as u64).collect();
        assert_eq!(
            self.positions, expected,
            "every {n}th write failing: the stored log has a gap"
        );
        assert_eq!(
            self.last_event.as_deref(),
            Some("run_completed"),
            "every {n}th write failing: the log does not end with the run's end"
        );
        if n > 1 {
            assert!(self.injected > 0, "no fault was injected: {self:?}");
            assert!(
                self.health.transient_errors > 0,
                "the engine counted no store error: {self:?}"
            );
        }
    }
}

/// Runs one run — a model call asking for a tool, the tool call, a model
/// call answering — on an engine over `inner` wrapped so that every `n`th
/// write fails (transiently), and reports what it met. The engine's clock
/// is tokio's: on paused time the run takes no real time.
pub async fn run_with_every_nth_write_failing(n: u64, inner: Arc<dyn Store>) -> NthWriteRun {
    use crate::Engine;
    use crate::testing::{ScriptedModel, ScriptedTools, ToolAct, Turn};

    let faults = Faults::every_nth_write(n);
    let store: Arc<dyn Store> = Arc::new(FaultyStore::new(inner.clone(), faults.clone()));
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("lookup", serde_json::json!({"q": "status"}))]),
            Turn::answer("all good"),
        ],
    );
    let tools = ScriptedTools::new().tool(
        "lookup",
        Some(true),
        [ToolAct::returns(
            "found",
            std::time::Duration::from_millis(5),
        )],
    );
    let engine = Engine::builder()
        .store(store)
        .model(Arc::new(model))
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("the engine builds");
    let flow: crate::Flow = serde_json::from_value(serde_json::json!({
        "name": "faulty",
        "task": "Look the status up.",
        "max_steps": 4,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}]
    }))
    .expect("a valid flow");
    let started = engine.start(flow).await;
    let (refused, state, run_id) = match started {
        Err(error) => (Some(error.to_string()), None, None),
        Ok(mut handle) => {
            let run_id = handle.run_id().to_owned();
            let state = tokio::time::timeout(std::time::Duration::from_secs(600), handle.wait())
                .await
                .unwrap_or_else(|_| panic!("every {n}th write failing: the run never ended"));
            (None, Some(state), Some(run_id))
        }
    };
    let injected = faults.injected();
    let health = engine.store_health();
    engine.shutdown().await;
    let (record, events) = match &run_id {
        Some(run_id) => (
            inner.load_run(run_id).await.expect("the run reads back"),
            inner
                .load_events(run_id, 0)
                .await
                .expect("the log reads back"),
        ),
        None => {
            let runs = inner.list_runs().await.expect("the runs read back");
            (runs.into_iter().next(), Vec::new())
        }
    };
    NthWriteRun {
        n,
        refused,
        state,
        record,
        positions: events.iter().map(|e| e.position).collect(),
        last_event: events.last().map(|e| e.kind.name().to_owned()),
        injected,
        health,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    /// Fresh faulty stores without faults over fresh memory stores.
    struct Faultless;

    impl crate::testing::conformance::StoreFixture for Faultless {
        type Place = MemoryStore;

        async fn fresh(&self) -> Result<MemoryStore, StoreError> {
            Ok(MemoryStore::new())
        }

        async fn open(&self, place: &MemoryStore) -> Result<Arc<dyn Store>, StoreError> {
            Ok(Arc::new(FaultyStore::new(
                Arc::new(place.clone()),
                Faults::none(),
            )))
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_faulty_store_without_faults_passes_the_conformance_suite() {
        crate::testing::conformance::check(Faultless)
            .await
            .assert_passed();
    }

    #[test]
    fn every_nth_write_fails_and_a_seed_draws_the_same_faults() {
        let faults = Faults::every_nth_write(3);
        let failed: Vec<bool> = (0..9).map(|_| faults.next("w").is_some()).collect();
        assert_eq!(
            failed,
            [false, false, true, false, false, true, false, false, true]
        );
        assert_eq!((faults.writes(), faults.injected()), (9, 3));
        let draw = |seed| {
            let faults = Faults::seeded(seed, 0.3);
            (0..64)
                .map(|_| faults.next("w").is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let off = Faults::none();
        off.refuse_writes(true);
        let error = off.next("w").expect("refused");
        assert!(error.is_transient());
    }
}
