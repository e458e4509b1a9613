//! An executor's boot and its sweep: reconcile orphans, and resume them if
//! told to.
//!
//! A run whose executor died is found by its expired executor lease and
//! marked `orphaned` with the message `run orphaned: executor lease expired`.
//! With `LEASEHOLD_RESUME_ON_BOOT=true` an executor also claims each orphan
//! (a compare-and-set that raises its fence) and resumes it from its last
//! snapshot; `leasehold runs resume ID` does the same for one run, on
//! demand.
//!
//! Orphans are looked for at boot and then, while the executor runs
//! ([`sweep`], started by `leasehold serve`), every third of the run-lease
//! TTL: an executor restarted before its dead predecessor's leases expired
//! picks those runs up once they do. (The key keeps its name: it is the
//! same switch, "this executor resumes orphans", at boot and after.)
//!
//! Resuming on boot is off by default. A process that starts — after a crash
//! loop, a deploy, or on a developer's machine with an old data directory —
//! would otherwise silently pick up runs that may be hours old, spend model
//! calls on them and call tools whose world has moved on; and where several
//! executors share a database, operators usually want to choose which ones
//! resume work. Reconciliation itself (marking orphans) is always on: it only
//! tells the truth about runs nobody owns.
//!
//! `leasehold serve` resumes orphans through its claimer rather than its
//! boot and sweep, so that a resumed run counts against its limit of live
//! runs like any other: the boot and the sweep mark orphans, the claimer
//! resumes them (orphans first, then queued runs) while it has room.
//!
//! A serving executor also takes runs from the queue ([`claim_queued`]):
//! a run posted to any executor that has no room for it is recorded
//! `queued`, and the first executor with room claims it — when one of its
//! runs ends, when it queues one itself, and every
//! `executor.claim_interval` otherwise. Every reason to look is one
//! [`Notify`]: whatever learns of a queued run (a run that ended here, a
//! change feed from the store) wakes the claimer through it.
//!
//! How many runs it holds at once is its [`Admission`]: at most
//! `server.max_live_runs`, fewer while the executor is late (see
//! [`admission`]).

pub mod admission;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::{Engine, EngineError, RunHandle};

pub mod control;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use admission::{Admission, DEFAULT_LAG_TARGET};

/// How often a serving executor claims queued runs, unless told otherwise
/// (`LEASEHOLD_EXECUTOR_CLAIM_INTERVAL`).
pub const DEFAULT_CLAIM_INTERVAL: Duration = Duration::from_secs(1);

/// The environment variable that turns resume on boot on.
pub const RESUME_ON_BOOT: &str = "LEASEHOLD_RESUME_ON_BOOT";

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

/// This executor's identity, unique to this process: `leasehold@HOST`, the
/// process id and a random part (`leasehold@box/4242/9f3a61c2`), so that
/// executors sharing a store never mistake one another's runs for their
/// own. A run a process stopped cleanly (a paused `leasehold run`, a
/// stopped `serve`) has its lease released, so the next process may claim
/// it at once; a run whose process died is claimed once its lease expires.
pub fn owner_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!(
        "leasehold@{host}/{}/{:08x}",
        std::process::id(),
        fastrand::u32(..)
    )
}

/// The identity of an executor that serves the HTTP API at `url`:
/// [`owner_id`] and where it serves (`leasehold@box/4242/9f3a61c2 at
/// http://10.0.0.5:7878`), so that whoever finds a run held by it — in a
/// refusal, a forwarded control, a listing — knows which `--server` to
/// ask ([`serving_url`](crate::serving_url) reads it back).
pub fn serving_owner_id(url: &str) -> String {
    format!("{} at {url}", owner_id())
}

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

/// Sweeps for orphans every [`Engine::heartbeat_period`] (a third of the
/// run-lease TTL) until `stop` is cancelled or the engine shuts down: each
/// sweep is a [`boot`] — orphans marked, and with `resume` claimed and
/// resumed, each resumed run handed to `adopt`. A sweep that fails (the
/// store refused) is logged and the next one tries again.
///
/// The first sweep is one period after the call: call [`boot`] first.
pub fn sweep(
    engine: Arc<Engine>,
    resume: bool,
    stop: CancellationToken,
    adopt: impl Fn(RunHandle) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
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
            match boot(&engine, resume).await {
                Ok(found) => {
                    if !found.orphaned.is_empty() {
                        tracing::warn!(runs = ?found.orphaned, "orphaned runs found");
                    }
                    for handle in found.resumed {
                        tracing::info!(run_id = handle.run_id(), "orphan resumed");
                        adopt(handle);
                    }
                }
                Err(EngineError::ShutDown) => return,
                Err(error) => tracing::error!(%error, "the sweep for orphans failed"),
            }
        }
    })
}

/// Claims queued runs until `stop` is cancelled: at once, then whenever
/// `wake` is notified and every `interval`. Each time, `pass` claims what
/// the executor has room for and answers how many it started; it runs
/// again at once while it fills the room it was given (`true`), since
/// more may wait. A pass that fails (the store refused) is logged and the
/// next one tries again.
///
/// A notification while a pass runs is kept ([`Notify::notify_one`] stores
/// one permit), so a run queued meanwhile is not missed.
pub fn claim_queued<F, P>(
    wake: Arc<Notify>,
    interval: Duration,
    stop: CancellationToken,
    pass: P,
) -> tokio::task::JoinHandle<()>
where
    P: Fn() -> F + Send + 'static,
    F: Future<Output = Result<bool, EngineError>> + Send,
{
    let interval = leasehold_actors::clamp_duration(interval).max(Duration::from_millis(1));
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
                if stop.is_cancelled() {
                    return;
                }
                match pass().await {
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
