//! A lease's identity, its kind, the default lengths and the shortest
//! lease: what the lease actor, the evidence cell, the watchdog and the
//! verdict records share. Plain data.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::check_positive_duration;
use crate::error::ConfigError;
use crate::ports::TranscriptMessage;

/// The kind of operation a lease watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LeaseKind {
    /// A streaming model call; each chunk is evidence.
    ModelStream,
    /// A blocking model call.
    ModelBlocking,
    /// A tool call; each MCP progress notification is evidence.
    ToolCall,
    /// One step of a worker; each completed step is evidence.
    WorkerStep,
}

impl LeaseKind {
    /// Every kind, in a fixed order.
    pub const ALL: [Self; 4] = [
        Self::ModelStream,
        Self::ModelBlocking,
        Self::ToolCall,
        Self::WorkerStep,
    ];

    /// The kind's snake_case name, as in events and configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ModelStream => "model_stream",
            Self::ModelBlocking => "model_blocking",
            Self::ToolCall => "tool_call",
            Self::WorkerStep => "worker_step",
        }
    }
}

impl fmt::Display for LeaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A lease's identity, unique within the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct LeaseId(pub u64);

impl LeaseId {
    pub(crate) fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lease:{}", self.0)
    }
}

/// The shortest lease leasehold runs: 10 ms.
///
/// Each expiry costs a verdict, a `wait` event and perhaps an evaluation; a
/// lease of a nanosecond on a hung call would spin the watchdog, writing
/// verdicts as fast as the process can (the renewal cap bounds how many per
/// lease, but a configuration may raise the cap). Ten milliseconds is ten
/// ticks of tokio's timer and far below any lease a person would choose
/// (the defaults are minutes), so no real operation is refused for it.
/// Configuration and flows refuse a shorter lease, naming the key (an
/// operator may raise the floor with `lease.min`); [`LeaseSpec::new`](crate::LeaseSpec::new) lengthens
/// a shorter one to it, so the floor holds for leases made through the Rust
/// API too.
pub const MIN_LEASE: Duration = Duration::from_millis(10);

/// The longest one operation may work, however fresh its evidence, by
/// default (`lease.ceiling`): four hours.
pub const DEFAULT_CEILING: Duration = Duration::from_secs(4 * 60 * 60);

/// The default lease length per kind and the renewal cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Lease of a streaming model call (default 2 min).
    pub model_stream: Duration,
    /// Lease of a blocking model call (default 5 min).
    pub model_blocking: Duration,
    /// Lease of a tool call (default 5 min).
    pub tool_call: Duration,
    /// Lease of a worker step (default 10 min).
    pub worker_step: Duration,
    /// Renewals a lease may have before its next expiry stops the operation
    /// (default 10).
    pub max_renewals: u32,
    /// The shortest lease (`lease.min`; default [`MIN_LEASE`], 10 ms,
    /// which is also the least it may be): each lease above, and every
    /// flow's, is refused below it.
    pub min: Duration,
    /// The longest one operation may work, however fresh its evidence
    /// (`lease.ceiling`; default 4 h): what bounds an operation whose
    /// renewals, earned by strong evidence, the cap does not count.
    pub ceiling: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            model_stream: Duration::from_secs(120),
            model_blocking: Duration::from_secs(300),
            tool_call: Duration::from_secs(300),
            worker_step: Duration::from_secs(600),
            max_renewals: 10,
            min: MIN_LEASE,
            ceiling: DEFAULT_CEILING,
        }
    }
}

impl LeaseConfig {
    /// The lease length for `kind`.
    pub fn duration(&self, kind: LeaseKind) -> Duration {
        match kind {
            LeaseKind::ModelStream => self.model_stream,
            LeaseKind::ModelBlocking => self.model_blocking,
            LeaseKind::ToolCall => self.tool_call,
            LeaseKind::WorkerStep => self.worker_step,
        }
    }

    /// Refuses a lease length below [`MIN_LEASE`] (10 ms) or above
    /// [`MAX_DURATION`](crate::MAX_DURATION), naming the kind's field
    /// (`lease.tool_call`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_positive_duration("lease.min", self.min)?;
        check_positive_duration("lease.ceiling", self.ceiling)?;
        if self.min < MIN_LEASE {
            return Err(ConfigError::new(
                "lease.min",
                min_lease_expected(MIN_LEASE, ""),
                crate::describe_duration(self.min),
            ));
        }
        let floor_key = if self.min > MIN_LEASE {
            "lease.min"
        } else {
            ""
        };
        self.validate_floor(self.min, floor_key)
    }

    /// [`LeaseConfig::validate`] against a floor of `floor` (at least
    /// [`MIN_LEASE`]); `floor_key` names the key that set it, for the
    /// message (empty for the built-in floor).
    pub(crate) fn validate_floor(
        &self,
        floor: Duration,
        floor_key: &str,
    ) -> Result<(), ConfigError> {
        let floor = floor.max(MIN_LEASE);
        for kind in LeaseKind::ALL {
            let field = format!("lease.{kind}");
            let duration = self.duration(kind);
            check_positive_duration(field.clone(), duration)?;
            crate::rules::lease_above_floor(kind, duration, floor).map_err(|broken| {
                ConfigError::new(field, min_lease_expected(floor, floor_key), broken.got)
            })?;
        }
        Ok(())
    }
}

/// What a lease shorter than `floor` is refused with: `at least 10ms`,
/// naming the key that set the floor when one did.
pub(crate) fn min_lease_expected(floor: Duration, floor_key: &str) -> String {
    let floor = humantime::format_duration(floor);
    if floor_key.is_empty() {
        format!("a lease of at least {floor} (the shortest lease leasehold runs)")
    } else {
        format!("a lease of at least {floor} (the configuration's `{floor_key}`)")
    }
}

/// A lease's identity and settings, shared by the lease actor, the evidence
/// cell and the watchdog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeaseMeta {
    /// The lease.
    pub id: LeaseId,
    /// The run it belongs to.
    pub run_id: String,
    /// Where in the run's tree.
    pub path: String,
    /// What kind of operation it watches.
    pub kind: LeaseKind,
    /// What the operation is doing.
    pub subject: String,
    /// One lease period.
    #[serde(with = "crate::serde_time::millis")]
    pub duration: Duration,
    /// The renewal cap, from its terms.
    pub max_renewals: u32,
    /// What the operation calls, for its learned pace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pace_key: Option<String>,
    /// The endpoint it calls, for the calls in flight there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// What the lease does with its key's learned pace.
    pub pace_mode: crate::pace::PaceMode,
    /// The last messages of the loop's transcript.
    pub transcript_tail: Arc<[TranscriptMessage]>,
}
