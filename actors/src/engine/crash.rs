//! An executor that dies, for simulations (feature `test-util`): its runs
//! stop where they are with nothing written on their way out — no
//! release, no pause, no end — as when its process is killed; and what an
//! executor holds, read from outside, to check that a run is held by one
//! executor at a time.

use std::sync::atomic::Ordering;

use ractor::ActorStatus;

use super::Engine;

impl Engine {
    /// Stops this executor as a crash would: every run actor it holds is
    /// killed (no `post_stop`, so nothing is released or recorded) and so
    /// is its watchdog; afterwards it refuses to start or resume runs. Its
    /// runs stay as the store has them, held until their leases run out.
    ///
    /// Work already on its way may still reach the store — a write in
    /// flight, a heartbeat's next tick, the event log's next batch: cut
    /// the engine's store off first
    /// ([`Faults::cut_off`](crate::testing::faults::Faults::cut_off)) for
    /// a crash that writes nothing more.
    pub fn crash(&self) {
        self.shut_down.store(true, Ordering::SeqCst);
        let mut runs: Vec<_> = self.lock_live().drain().collect();
        runs.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, run) in runs {
            run.actor.kill();
        }
        for leases in &self.lease_actors {
            leases.kill();
        }
        self.watchdog.kill();
    }

    /// The fence this engine holds `run_id` with, while it runs it: its
    /// actor lives and has not learned that another executor took it.
    pub fn held_fence(&self, run_id: &str) -> Option<u64> {
        let live = self.lock_live();
        let run = live.get(run_id)?;
        let running =
            run.actor.get_status() != ActorStatus::Stopped && run.state.borrow().lost.is_none();
        running.then(|| run.fence.load(Ordering::Acquire))
    }
}
