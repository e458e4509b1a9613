//! The invariants, checked against the store, the executors and the peers
//! after every step of the simulation, and at its end. Each broken one is
//! a line of the trace naming the invariant, and fails the seed.

use std::cell::Cell;
use std::collections::BTreeMap;

use leasehold_actors::{EventKind, Verdict};

use super::peers::EFFECT_TOOL;
use super::world::World;

thread_local! {
    /// Panics on this thread (the simulation's runtime is current-thread:
    /// its tasks, the actors included, run here).
    pub static PANICS: Cell<u64> = const { Cell::new(0) };
}

/// Counts every panic of the thread it happens on, then reports it as
/// the default hook does.
pub fn count_panics() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.with(|panics| panics.set(panics.get() + 1));
            default(info);
        }));
    });
}

impl World {
    fn broken(&mut self, label: &str, invariant: &str, what: String) {
        // Each breach once, at the step it was first seen.
        if !self.reported.insert(format!("{invariant}: {what}")) {
            return;
        }
        let line = self.named(&format!("VIOLATION {invariant} after {label}: {what}"));
        self.violations.push(line.clone());
        self.say(line);
    }

    /// Checks every invariant that holds at any time.
    pub fn check(&mut self, label: &str) {
        let panics = PANICS.with(Cell::get);
        if panics > 0 {
            self.broken(label, "no panic", format!("{panics} panics"));
            PANICS.with(|p| p.set(0));
        }
        let seen: Vec<String> = std::mem::take(&mut self.journal.lock().violations);
        for violation in seen {
            self.broken(label, "single holder", violation);
        }
        self.check_holders(label);
        self.check_tool_calls(label);
        self.check_logs(label);
    }

    /// A run is held by at most one live executor, with its current fence,
    /// and its fence only rises.
    fn check_holders(&mut self, label: &str) {
        for run_id in self.runs.clone() {
            let Some(record) = self.base.run(&run_id) else {
                continue;
            };
            let last = self.fences.insert(run_id.clone(), record.fence);
            if let Some(last) = last
                && last > record.fence
            {
                self.broken(
                    label,
                    "fence rises",
                    format!("{run_id}: fence {} after {last}", record.fence),
                );
            }
            let held: Vec<(String, u64)> = self
                .executors
                .iter()
                .filter_map(|ex| {
                    ex.engine
                        .held_fence(&run_id)
                        .map(|fence| (ex.owner.clone(), fence))
                })
                .collect();
            let current: Vec<&String> = held
                .iter()
                .filter(|(_, fence)| *fence == record.fence)
                .map(|(owner, _)| owner)
                .collect();
            if current.len() > 1 {
                self.broken(
                    label,
                    "single holder",
                    format!(
                        "{run_id} is held with fence {} by {current:?}",
                        record.fence
                    ),
                );
            }
            if let Some((owner, fence)) = held.iter().find(|(_, fence)| *fence > record.fence) {
                self.broken(
                    label,
                    "single holder",
                    format!(
                        "{owner} holds {run_id} with fence {fence} above the store's {}",
                        record.fence
                    ),
                );
            }
            if let [holder] = current.as_slice()
                && record.owner_id.as_deref() != Some(holder.as_str())
            {
                let what = format!(
                    "{holder} holds {run_id} with its current fence, the store says {:?}",
                    record.owner_id
                );
                self.broken(label, "single holder", what);
            }
        }
    }

    /// No call of the tool that is not idempotent is sent twice, unless a
    /// person said to.
    fn check_tool_calls(&mut self, label: &str) {
        let mut sent: BTreeMap<String, usize> = BTreeMap::new();
        for (tool, key) in self.peers.sent() {
            if tool == EFFECT_TOOL {
                *sent.entry(key).or_default() += 1;
            }
        }
        for (key, times) in sent {
            let allowed = 1 + self.retries.get(&key).copied().unwrap_or(0);
            if times > allowed {
                self.broken(
                    label,
                    "no effect twice",
                    format!("`{EFFECT_TOOL}` call {key} sent {times} times, {allowed} allowed"),
                );
            }
        }
    }

    /// Every run's log runs from position 1 with no gap, holds nothing
    /// after its end, and each verdict comes before what it caused.
    fn check_logs(&mut self, label: &str) {
        for run_id in self.runs.clone() {
            let events = self.base.events(&run_id);
            for (n, event) in events.iter().enumerate() {
                if event.position != u64::try_from(n + 1).unwrap_or(u64::MAX) {
                    self.broken(
                        label,
                        "gap-free log",
                        format!(
                            "{run_id}: event {} ({}) at position {}",
                            n + 1,
                            event.kind.name(),
                            event.position
                        ),
                    );
                    break;
                }
            }
            let end = events.iter().position(|e| {
                matches!(
                    e.kind,
                    EventKind::RunCompleted { .. }
                        | EventKind::RunFailed { .. }
                        | EventKind::RunCancelled { .. }
                )
            });
            if let Some(end) = end
                && end + 1 < events.len()
            {
                let after: Vec<&str> = events[end + 1..].iter().map(|e| e.kind.name()).collect();
                let what = format!(
                    "{run_id}: {} logged after its {} (position {})",
                    after.join(", "),
                    events[end].kind.name(),
                    events[end].position
                );
                self.broken(label, "end is last", what);
            }
            let mut verdicts = Vec::new();
            for event in &events {
                let caused = match &event.kind {
                    EventKind::Verdict(record) => {
                        verdicts.push((record.lease_id, record.verdict));
                        continue;
                    }
                    EventKind::Intervened { lease_id, .. } => (*lease_id, Verdict::Intervene),
                    EventKind::Escalated { lease_id, .. } => (*lease_id, Verdict::Escalate),
                    EventKind::NudgeQueued { lease_id, .. } => (*lease_id, Verdict::Nudge),
                    _ => continue,
                };
                if !verdicts.contains(&caused) {
                    self.broken(
                        label,
                        "verdict first",
                        format!(
                            "{run_id}: {} at position {} with no {:?} verdict before it",
                            event.kind.name(),
                            event.position,
                            caused.1
                        ),
                    );
                }
            }
        }
    }

    /// At the end: every run has ended or waits for a person, and every
    /// pause and end was told.
    pub fn check_end(&mut self) {
        self.check("the end");
        for run_id in self.runs.clone() {
            let status = self.base.run(&run_id).map(|r| r.status);
            if !status.is_some_and(|s| s.is_terminal() || s.is_paused()) {
                self.broken(
                    "the end",
                    "ends or waits",
                    format!("{run_id} is {:?}", status.map(|s| s.name())),
                );
            }
        }
        let told = self.journal.lock().told.clone();
        let mut owed: BTreeMap<(String, &'static str), i64> = BTreeMap::new();
        for (run_id, status) in &told {
            *owed.entry((run_id.clone(), status.name())).or_default() += 1;
        }
        for (run_id, status) in &self.delivered {
            *owed.entry((run_id.clone(), status.name())).or_default() -= 1;
        }
        for ((run_id, status), left) in owed {
            if left > 0 {
                self.broken(
                    "the end",
                    "told at least once",
                    format!("{run_id} took {status} {left} more times than it was told"),
                );
            }
        }
    }
}
