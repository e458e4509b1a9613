//! The executor: the one owner of the runs a process runs.
//!
//! An [`Executor`] holds the only registry of the runs live in its process
//! and everything that decides what runs there: its admission (at most
//! `server.max_live_runs`, fewer while it is late: [`admission`]), the
//! runs it starts or queues ([`Executor::post`]), claims from the queue
//! or takes over as orphans ([`Executor::claim`]), and a person's controls
//! routed once to wherever the run is ([`Executor::control`]). Its
//! background tasks — following the controls other executors forward to
//! its runs, the claimer of queued runs, the sweep for orphans, the
//! adaptation of its admission, and whatever the embedder hands it
//! (retention, webhook delivery) — stop with it, in one
//! [`Executor::shutdown`], before the engine stops its runs.
//!
//! `leasehold serve` serves one over HTTP, `leasehold run` runs one run
//! with one, `leasehold runs resume|cancel|reconcile|fork` act through
//! one, and the demo drives one: each in a few lines. The [`Engine`] under
//! it only launches, resumes and forks runs.
//!
//! Orphans: a run whose executor died is found by its expired executor
//! lease and marked `orphaned` with the message `run orphaned: executor
//! lease expired`, at boot ([`boot`]) and then every third of the run-lease
//! TTL (the sweep). With `LEASEHOLD_RESUME_ON_BOOT=true` an executor also
//! claims each orphan (a compare-and-set that raises its fence) and resumes
//! it from its last snapshot; a serving executor does so through its
//! claimer, so that a resumed run counts against its limit like any other
//! (orphans first, then queued runs). `leasehold runs resume ID` does the
//! same for one run, on demand.
//!
//! Resuming on boot is off by default. A process that starts — after a crash
//! loop, a deploy, or on a developer's machine with an old data directory —
//! would otherwise silently pick up runs that may be hours old, spend model
//! calls on them and call tools whose world has moved on; and where several
//! executors share a database, operators usually want to choose which ones
//! resume work. Reconciliation itself (marking orphans) is always on: it only
//! tells the truth about runs nobody owns.
//!
//! The queue: a run posted to any executor that has no room for it is
//! recorded `queued`, and the first executor with room claims it — when one
//! of its runs ends, when it queues one itself, when the store says a run
//! was queued anywhere, and every `executor.claim_interval` otherwise.

pub mod admission;
mod background;
mod claims;
pub mod control;
mod keyed;
mod runs;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_actors::{Engine, EngineError, RunHandle};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use admission::{Admission, DEFAULT_LAG_TARGET};
pub use background::{Boot, boot};
pub use claims::{Forked, Posted};

/// How often a serving executor claims queued runs, unless told otherwise
/// (`LEASEHOLD_EXECUTOR_CLAIM_INTERVAL`).
pub const DEFAULT_CLAIM_INTERVAL: Duration = Duration::from_secs(1);

/// The environment variable that turns resume on boot on.
pub const RESUME_ON_BOOT: &str = "LEASEHOLD_RESUME_ON_BOOT";

/// How an executor admits and claims runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorOptions {
    /// The most runs live here at once (`server.max_live_runs`); past it a
    /// posted run waits queued and resuming one is refused as busy.
    pub max_live_runs: u32,
    /// The most runs the store holds queued, counted over every executor
    /// sharing it (`server.max_queued_runs`); past it a post that would
    /// wait is refused and nothing is stored.
    pub max_queued_runs: u32,
    /// The lag under which runs are admitted (`executor.lag_target`; see
    /// [`admission`]); zero: `max_live_runs` fixed.
    pub lag_target: Duration,
    /// Whether it claims queued runs ([`Executor::serve`]), and how often
    /// besides when it is woken (`executor.claim_interval`).
    pub claim_interval: Option<Duration>,
    /// Whether it also claims and resumes orphaned runs as it claims queued
    /// runs, within the same room, orphans first (`resume_on_boot`), and
    /// the runs left paused on an endpoint by an executor that is gone.
    pub resume_orphans: bool,
    /// The keyed limits (`[limits.NAME]`): a run whose key is at its
    /// limit waits queued, and a claim skips it for the next.
    pub limits: Vec<leasehold_actors::keyed_limits::KeyedLimit>,
    /// The model endpoint its runs call (`model.base_url`), the value of a
    /// key's `endpoint`.
    pub endpoint: String,
}

impl Default for ExecutorOptions {
    /// A serving executor's defaults.
    fn default() -> Self {
        Self {
            max_live_runs: 64,
            max_queued_runs: 1024,
            lag_target: DEFAULT_LAG_TARGET,
            claim_interval: Some(DEFAULT_CLAIM_INTERVAL),
            resume_orphans: false,
            limits: Vec::new(),
            endpoint: String::new(),
        }
    }
}

impl ExecutorOptions {
    /// A command line's executor: the runs it was asked for, without a
    /// limit, claiming nothing from the queue.
    pub fn command_line() -> Self {
        Self {
            max_live_runs: u32::MAX,
            lag_target: Duration::ZERO,
            claim_interval: None,
            ..Self::default()
        }
    }
}

/// The owner of the runs a process runs: see the [module](self).
pub struct Executor {
    engine: Arc<Engine>,
    options: ExecutorOptions,
    runs: runs::Registry,
    /// The admitted limit of live runs, adapted to the executor's lag.
    admitted: Arc<Admission>,
    /// Held from counting the room for a run to registering the runs
    /// started into it, so that starts at once never exceed the limit.
    admission: tokio::sync::Mutex<()>,
    /// Wakes the claimer of queued runs.
    wake: Arc<Notify>,
    /// Cancelled by [`Executor::shutdown`]: every background task stops.
    stop: CancellationToken,
    /// The background tasks, awaited at shutdown.
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Set once it serves ([`Executor::serve`]).
    serving: std::sync::atomic::AtomicBool,
    /// The runs it started in the last minute, for `per_minute` limits.
    starts: keyed::Starts,
}

impl Executor {
    /// An executor of `engine`'s runs under `options`. It follows the
    /// controls other executors forward to its runs from now on; it claims
    /// queued runs once [served](Executor::serve).
    pub fn new(engine: Arc<Engine>, options: ExecutorOptions) -> Arc<Self> {
        let admitted = Arc::new(Admission::new(
            options.max_live_runs,
            options.lag_target,
            engine.load().cloned(),
        ));
        let executor = Arc::new(Self {
            engine,
            options,
            runs: runs::Registry::default(),
            admitted,
            admission: tokio::sync::Mutex::new(()),
            wake: Arc::new(Notify::new()),
            stop: CancellationToken::new(),
            tasks: Mutex::new(Vec::new()),
            serving: std::sync::atomic::AtomicBool::new(false),
            starts: keyed::Starts::default(),
        });
        let following = control::follow(Arc::clone(&executor));
        executor.keep(following);
        executor
    }

    /// The engine that runs this executor's runs.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Its options.
    pub fn options(&self) -> &ExecutorOptions {
        &self.options
    }

    /// Its admission: the admitted limit and the lag it follows.
    pub fn admission(&self) -> &Admission {
        &self.admitted
    }

    /// Cancelled when the executor begins to shut down.
    pub fn stopping(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Keeps `task` as one of this executor's background tasks: it must
    /// end once [`stopping`](Self::stopping) is cancelled, and is awaited
    /// at [`shutdown`](Self::shutdown).
    pub fn keep(&self, task: tokio::task::JoinHandle<()>) {
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
    }

    /// Shuts the executor down, once for all its parts: its background
    /// tasks stop (no claim, sweep or forwarded control starts a run any
    /// more), then the engine stops its runs in place and releases them
    /// ([`Engine::shutdown`]), then the store is flushed. Nothing is
    /// cancelled or failed: the runs stay in the store, resumable.
    pub async fn shutdown(&self) -> Result<(), EngineError> {
        self.stop.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        for task in tasks {
            let _ = task.await;
        }
        self.engine.shutdown().await;
        self.engine.store().flush().await?;
        Ok(())
    }

    /// The handle of `run_id`, if it runs in this process: one this
    /// executor started or took on, or one started on its engine directly
    /// (which it holds from now on).
    pub fn handle(self: &Arc<Self>, run_id: &str) -> Option<RunHandle> {
        if let Some(handle) = self.runs.get(run_id) {
            return Some(handle);
        }
        let handle = self.engine.handle(run_id)?;
        self.register(handle.clone());
        Some(handle)
    }

    /// How many run handles the executor holds: its live runs, and for a
    /// moment a run that just ended. Back to 0 once every run has ended.
    pub fn held_runs(&self) -> usize {
        self.runs.len()
    }

    /// How many runs go on in this process (not ended, not lost).
    pub fn live_runs(&self) -> usize {
        self.runs.live()
    }

    /// How many more runs this executor may hold under its admitted limit
    /// (at most `server.max_live_runs`, fewer while it is late).
    fn room(&self) -> usize {
        self.admitted.room(self.live_runs())
    }

    /// The room a run of each key has under the keyed limits now.
    fn keyed_room(&self) -> leasehold_actors::keyed_limits::ClaimRoom {
        keyed::room(
            &self.options.limits,
            &self.options.endpoint,
            &self.runs.live_labels(),
            &self.starts,
        )
    }

    /// Records the start of the runs of `started` under the `per_minute`
    /// limits.
    fn count_starts<'a>(&self, started: impl IntoIterator<Item = &'a RunHandle>) {
        if self
            .options
            .limits
            .iter()
            .any(|limit| limit.per_minute.is_some())
        {
            self.starts
                .record(started.into_iter().map(RunHandle::labels));
        }
    }

    /// Holds `handle` while its run goes on in this process, so that the
    /// executor's controls reach it; lets go of it when the run ends or is
    /// lost, and wakes the claimer: its room is free.
    fn register(self: &Arc<Self>, handle: RunHandle) {
        let run_id = handle.run_id().to_owned();
        self.runs.insert(run_id.clone(), handle.clone());
        let executor = Arc::downgrade(self);
        let mut watched = handle;
        tokio::spawn(async move {
            watched.wait().await;
            if let Some(executor) = executor.upgrade() {
                executor.runs.remove_if_over(&run_id);
                executor.wake.notify_one();
            }
        });
    }
}

/// A value of `LEASEHOLD_RESUME_ON_BOOT` that is not a boolean.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{RESUME_ON_BOOT}: expected true or false (or 1, 0, yes, no), got {0:?}")]
pub struct BadFlag(pub String);

/// Reads `LEASEHOLD_RESUME_ON_BOOT` (default false).
pub fn resume_on_boot_from_env() -> Result<bool, BadFlag> {
    match std::env::var(RESUME_ON_BOOT) {
        Err(_) => Ok(false),
        Ok(value) => parse_flag(&value),
    }
}

/// Parses a boolean flag the way every `LEASEHOLD_*` flag is parsed.
pub fn parse_flag(value: &str) -> Result<bool, BadFlag> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" | "" => Ok(false),
        _ => Err(BadFlag(value.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_on_boot_flag_parses_and_refuses_nonsense() {
        assert_eq!(parse_flag("true"), Ok(true));
        assert_eq!(parse_flag(" YES "), Ok(true));
        assert_eq!(parse_flag("0"), Ok(false));
        assert_eq!(parse_flag(""), Ok(false));
        let error = parse_flag("sometimes").expect_err("refused");
        assert!(
            error.to_string().contains("LEASEHOLD_RESUME_ON_BOOT"),
            "{error}"
        );
        assert!(error.to_string().contains("sometimes"), "{error}");
    }
}
