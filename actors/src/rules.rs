//! The rules between settings: pairs of values that each parse but together
//! defeat themselves. Each rule is written here once, and whoever holds the
//! pair asks it — the engine's configuration ([`SupervisionConfig`],
//! [`RestartPolicy`], [`LeaseConfig`]), a flow's own overrides, the run a
//! flow plans, the runtime's configuration as it is loaded, an
//! experiment's strategies — so that no two of them can come to disagree
//! on what the rule is.
//!
//! A broken rule says which setting it refuses and which one it holds it
//! against by their configuration keys ([`Broken::key`],
//! [`Broken::against`]); each caller names them as its reader knows them
//! ([`Broken::named`]): `LEASEHOLD_WATCHDOG_FREE_RENEWALS
//! (watchdog.free_renewals)` for the runtime's configuration,
//! `leases.free_renewals` for a flow, `strategy.free_renewals` for an
//! experiment.
//!
//! [`SupervisionConfig`]: crate::SupervisionConfig
//! [`RestartPolicy`]: crate::RestartPolicy
//! [`LeaseConfig`]: crate::LeaseConfig

use std::fmt::Display;
use std::time::Duration;

use crate::error::ConfigError;

/// A pair of settings that breaks a rule between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken {
    /// The setting refused, by its configuration key
    /// (`watchdog.free_renewals`).
    pub key: String,
    /// The setting it is held against, by its configuration key
    /// (`lease.max_renewals`).
    pub against: &'static str,
    /// What the refused setting must be, before the other's name: `at
    /// most`, `at least`.
    relation: &'static str,
    /// The other setting's value, as written.
    pub bound: String,
    /// Why the rule holds, in a few words.
    pub why: &'static str,
    /// The refused value, as written.
    pub got: String,
}

impl Broken {
    fn new(
        key: impl Into<String>,
        relation: &'static str,
        against: &'static str,
        bound: impl Display,
        why: &'static str,
        got: impl Display,
    ) -> Self {
        Self {
            key: key.into(),
            against,
            relation,
            bound: bound.to_string(),
            why,
            got: got.to_string(),
        }
    }

    /// What the refused setting must be, naming the other one `against`:
    /// `at most LEASEHOLD_LEASE_MAX_RENEWALS (4): free renewals above the
    /// renewal cap are never reached`.
    pub fn expected(&self, against: &str) -> String {
        format!("{} {against} ({}): {}", self.relation, self.bound, self.why)
    }

    /// The refusal, naming the refused setting `key` and the other one
    /// `against`, as the caller's reader knows them.
    pub fn named(&self, key: impl Into<String>, against: &str) -> ConfigError {
        ConfigError::new(key, self.expected(against), &self.got)
    }

    /// The refusal, naming both settings by their configuration keys.
    pub fn refusal(&self) -> ConfigError {
        self.named(self.key.clone(), self.against)
    }
}

impl From<Broken> for ConfigError {
    fn from(broken: Broken) -> Self {
        broken.refusal()
    }
}

/// `watchdog.free_renewals` at most `lease.max_renewals`: renewals the
/// ladder grants without asking the evaluator, past the cap that stops
/// the operation, would never be reached. Equal is allowed: every renewal
/// is then free, and the evaluator is never asked.
pub fn free_renewals_within_cap(free_renewals: u32, max_renewals: u32) -> Result<(), Broken> {
    if free_renewals <= max_renewals {
        return Ok(());
    }
    Err(Broken::new(
        "watchdog.free_renewals",
        "at most",
        "lease.max_renewals",
        max_renewals,
        "free renewals above the renewal cap are never reached",
        free_renewals,
    ))
}

/// `restart.backoff_max` at least `restart.backoff_initial`: the backoff
/// grows from the first to the longest, and a longest below the first would
/// cut the first one short.
pub fn backoffs_in_order(backoff_initial: Duration, backoff_max: Duration) -> Result<(), Broken> {
    if backoff_max >= backoff_initial {
        return Ok(());
    }
    Err(Broken::new(
        "restart.backoff_max",
        "at least",
        "restart.backoff_initial",
        humantime::format_duration(backoff_initial),
        "the backoff grows from the first to the longest",
        humantime::format_duration(backoff_max),
    ))
}

/// An outage's probes wait from `probe_initial` up to `probe_max`
/// ([`Outages`](crate::Outages)): the longest wait is at least the first.
pub fn probes_in_order(probe_initial: Duration, probe_max: Duration) -> Result<(), Broken> {
    if probe_max >= probe_initial {
        return Ok(());
    }
    Err(Broken::new(
        "outage.probe_max",
        "at least",
        "outage.probe_initial",
        humantime::format_duration(probe_initial),
        "the wait between probes grows from the first to the longest",
        humantime::format_duration(probe_max),
    ))
}

/// Every lease at least `lease.min`, the floor an operator sets so that no
/// configuration or flow asks for leases so short that the watchdog spins.
/// `kind` is the lease's kind (a [`LeaseKind`](crate::LeaseKind)), which
/// names it: `lease.tool_call`. (Taken as its name, so that the rules stay a
/// leaf that the lease's own module can ask.)
pub fn lease_above_floor(
    kind: impl Display,
    lease: Duration,
    floor: Duration,
) -> Result<(), Broken> {
    if lease >= floor {
        return Ok(());
    }
    Err(Broken::new(
        format!("lease.{kind}"),
        "at least",
        "lease.min",
        humantime::format_duration(floor),
        "no lease may be shorter",
        crate::describe_duration(lease),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_holds_at_its_edge_and_names_both_settings_past_it() {
        assert_eq!(free_renewals_within_cap(10, 10), Ok(()));
        let broken = free_renewals_within_cap(11, 10).unwrap_err();
        assert_eq!(
            broken.refusal().to_string(),
            "invalid `watchdog.free_renewals`: expected at most lease.max_renewals (10): free \
             renewals above the renewal cap are never reached, got 11"
        );
        let second = Duration::from_secs(1);
        assert_eq!(backoffs_in_order(second, second), Ok(()));
        let broken = backoffs_in_order(second, second / 2).unwrap_err();
        assert_eq!(
            broken
                .named("supervision.backoff_max", "`supervision.backoff_initial`")
                .expected_got(),
            "expected at least `supervision.backoff_initial` (1s): the backoff grows from the \
             first to the longest, got 500ms"
        );
        assert_eq!(lease_above_floor("tool_call", second, second), Ok(()));
        let broken = lease_above_floor("tool_call", Duration::from_millis(1), second).unwrap_err();
        assert_eq!(
            (broken.key.as_str(), broken.against),
            ("lease.tool_call", "lease.min")
        );
    }
}
