//! What the benchmarks say about the machine and read from `/proc`: shared
//! by every benchmark of the workspace (`#[path]`-included), so each prints
//! its machine line and measures CPU time the same way.

#![allow(dead_code, reason = "each benchmark uses a part of it")]

use std::time::Duration;

/// A duration in nanoseconds, saturating.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(0, std::num::NonZeroUsize::get)
}

/// The CPU's model name.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown cpu".to_owned())
}

/// The 1-, 5- and 15-minute load averages, to tell a busy machine.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".to_owned(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// CPU time consumed so far by all live threads of this process, in ns
/// (first field of each `/proc/self/task/*/schedstat`).
///
/// The kernel brings a running thread's figure up to date only at a tick or
/// a switch, so the calling thread yields first; the other threads are idle
/// between rounds.
pub fn process_cpu_ns() -> u64 {
    std::thread::yield_now();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|s| {
            s.split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}
