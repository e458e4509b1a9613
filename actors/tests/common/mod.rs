//! Shared set-up of the actor tests: a watchdog and lease actor on paused
//! time, a scripted evaluator and a recording sink.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use leasehold_actors::{
    prelude::*,
    testing::{RecordingSink, ScriptedEvaluator},
};

pub const RUN: &str = "run-1";
pub const PATH: &str = "run/tool_call:1";

pub struct Rig {
    pub supervision: Supervision,
    pub events: RecordingSink,
    pub evaluator: ScriptedEvaluator,
}

impl Rig {
    pub fn leases(&self) -> &Leases {
        &self.supervision.leases
    }
}

/// A configuration with the given ladder and cap, other values default.
pub fn config(free_renewals: u32, max_renewals: u32) -> SupervisionConfig {
    let mut config = SupervisionConfig::default();
    config.watchdog.free_renewals = free_renewals;
    config.lease.max_renewals = max_renewals;
    config
}

/// Starts a watchdog with `evaluator` (none if `None`) and a lease actor.
pub async fn rig(config: SupervisionConfig, evaluator: Option<ScriptedEvaluator>) -> Rig {
    let events = RecordingSink::new();
    let script = evaluator.clone().unwrap_or_default();
    let evaluator: Option<Arc<dyn Evaluator>> =
        evaluator.map(|e| Arc::new(e) as Arc<dyn Evaluator>);
    let supervision = Supervision::start(config, evaluator, Arc::new(events.clone()))
        .await
        .expect("supervision starts");
    Rig {
        supervision,
        events,
        evaluator: script,
    }
}

/// A tool-call lease of `lease` with `max_renewals`, in run `RUN` at `PATH`.
pub fn spec(lease: Duration, max_renewals: u32) -> LeaseSpec {
    LeaseSpec::new(LeaseKind::ToolCall, "search", lease)
        .expect("valid spec")
        .with_max_renewals(max_renewals)
        .in_run(RUN, PATH)
}

/// A flag set when it is dropped: tells whether an operation's future was
/// dropped (aborted) rather than left running.
#[derive(Clone, Default)]
pub struct DropFlag(Arc<AtomicBool>);

impl DropFlag {
    pub fn arm(&self) -> DropGuard {
        DropGuard(self.0.clone())
    }
    pub fn dropped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

pub struct DropGuard(Arc<AtomicBool>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Counts how many times an operation started.
#[derive(Clone, Default)]
pub struct Starts(Arc<AtomicUsize>);

impl Starts {
    pub fn start(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Lets every ready task and actor run, without letting time pass.
pub async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

pub fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
