//! The clock port: wall-clock timestamps for events and persisted records.

use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock that stamps events and persisted records.
///
/// Actor logic measures time with tokio only (so tests run on paused time);
/// this port is only for the timestamps people read.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_unix_ms(&self) -> u64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that starts at a fixed instant and follows tokio's clock, so that
/// timestamps are deterministic on paused time.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin_unix_ms: u64,
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading `origin_unix_ms` now.
    pub fn starting_at(origin_unix_ms: u64) -> Self {
        Self {
            origin_unix_ms,
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_unix_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.origin_unix_ms.saturating_add(elapsed)
    }
}
