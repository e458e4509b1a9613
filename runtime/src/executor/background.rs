//! An executor's boot and the background tasks of a serving executor: the
//! claimer of queued runs, the sweep for orphans and the adaptation of its
//! admission.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::{Engine, EngineError, RunHandle};

use super::Executor;

/// What a boot did.
#[derive(Debug, Default)]
pub struct Boot {
    /// Runs found orphaned (and so marked).
    pub orphaned: Vec<String>,
    /// Runs this executor claimed and resumed.
    pub resumed: Vec<RunHandle>,
}

/// Marks orphans; with `resume_on_boot`, claims and resumes them.
pub async fn boot(engine: &Engine, resume_on_boot: bool) -> Result<Boot, EngineError> {
    let orphaned = engine.reconcile_orphans().await?;
    let resumed = if resume_on_boot {
        engine.resume_orphans().await?
    } else {
        Vec::new()
    };
    Ok(Boot { orphaned, resumed })
}

impl Executor {
    /// Marks the orphans of the store (runs whose executor died), then
    /// starts what a serving executor does in the background until it shuts
    /// down: a sweep that marks orphans every third of the run-lease TTL,
    /// the claimer of queued runs (and, with
    /// [`resume_orphans`](super::ExecutorOptions::resume_orphans), of
    /// orphans, within its room), and the adaptation of its admission to
    /// its lag. Answers the runs found orphaned at boot; does nothing the
    /// second time.
    pub async fn serve(self: &Arc<Self>) -> Result<Vec<String>, EngineError> {
        if self.serving.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Ok(Vec::new());
        }
        let found = boot(&self.engine, false).await?;
        self.keep(self.sweep());
        if let Some(interval) = self.options.claim_interval {
            self.keep(self.claimer(interval));
        }
        if let Some(adapting) = self.admitted.drive(Arc::clone(&self.wake), self.stopping()) {
            self.keep(adapting);
        }
        Ok(found.orphaned)
    }

    /// Wakes the claimer of queued runs: a run may have been queued, or
    /// room opened.
    pub fn wake_claimer(&self) {
        self.wake.notify_one();
    }

    /// Sweeps for orphans every [`Engine::heartbeat_period`] (a third of
    /// the run-lease TTL) until the executor stops: each sweep marks them
    /// and wakes the claimer, which resumes them if this executor does. A
    /// sweep that fails (the store refused) is logged and the next one
    /// tries again.
    fn sweep(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let engine = Arc::clone(&self.engine);
        let wake = Arc::clone(&self.wake);
        let stop = self.stopping();
        let period = engine.heartbeat_period();
        tokio::spawn(async move {
            let first = leasehold_actors::deadline_after(tokio::time::Instant::now(), period);
            let mut ticks = tokio::time::interval_at(first, period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                match engine.reconcile_orphans().await {
                    Ok(orphaned) if !orphaned.is_empty() => {
                        tracing::warn!(runs = ?orphaned, "orphaned runs found");
                        wake.notify_one();
                    }
                    Ok(_) => {}
                    Err(EngineError::ShutDown) => return,
                    Err(error) => tracing::error!(%error, "the sweep for orphans failed"),
                }
            }
        })
    }

    /// Claims queued runs until the executor stops: at once, then whenever
    /// it is woken and every `interval`. Each pass claims what the executor
    /// has room for; it runs again at once while it fills the room it was
    /// given, since more may wait. A pass that fails (the store refused) is
    /// logged and the next one tries again.
    ///
    /// A wake while a pass runs is kept ([`tokio::sync::Notify::notify_one`]
    /// stores one permit), so a run queued meanwhile is not missed. The
    /// task holds the executor weakly: it stops when the executor is gone.
    fn claimer(self: &Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let interval = leasehold_actors::clamp_duration(interval).max(Duration::from_millis(1));
        let wake = Arc::clone(&self.wake);
        let stop = self.stopping();
        let executor = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = wake.notified() => {}
                    _ = ticks.tick() => {}
                }
                loop {
                    let Some(executor) = executor.upgrade() else {
                        return;
                    };
                    if stop.is_cancelled() {
                        return;
                    }
                    match executor.claim().await {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(EngineError::ShutDown) => return,
                        Err(error) => {
                            tracing::error!(%error, "claiming queued runs failed");
                            break;
                        }
                    }
                }
            }
        })
    }
}
