//! What the configuration refuses, and what it only warns about: values
//! that each parse but together defeat themselves.

use std::time::Duration;

use leasehold_actors::ConfigError;
use leasehold_actors::lease::LeaseKind;

use super::keys::{KEYS, ValueKind};
use super::{Config, compact, key_of, named};

impl Config {
    /// Refuses combinations that defeat themselves, naming the variables: a
    /// zero duration, free renewals above the renewal cap, a longest backoff
    /// below the first, a run lease too short to heartbeat.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for key in KEYS.iter().filter(|k| k.kind == ValueKind::Duration) {
            let (_, source) = self.value_of(key);
            let zero = match key.file {
                "lease.model_stream" => self.lease_model_stream.value.is_zero(),
                "lease.model_blocking" => self.lease_model_blocking.value.is_zero(),
                "lease.tool_call" => self.lease_tool_call.value.is_zero(),
                "lease.worker_step" => self.lease_worker_step.value.is_zero(),
                "evaluator_timeout" => self.evaluator_timeout.value.is_zero(),
                "run_lease_ttl" => self.run_lease_ttl.value.is_zero(),
                "restart.window" => self.restart_window.value.is_zero(),
                "restart.backoff_initial" => self.restart_backoff_initial.value.is_zero(),
                "restart.backoff_max" => self.restart_backoff_max.value.is_zero(),
                "model.connect_timeout" => self.model_connect_timeout.value.is_zero(),
                "model.idle_timeout" => self.model_idle_timeout.value.is_zero(),
                _ => false,
            };
            if zero {
                return Err(ConfigError::new(
                    named(key),
                    format!("a duration above 0 (from {source})"),
                    "0s",
                ));
            }
        }
        if self.free_renewals.value > self.max_renewals.value {
            return Err(ConfigError::new(
                named(key_of("watchdog.free_renewals")),
                format!(
                    "at most LEASEHOLD_WATCHDOG_MAX_RENEWALS ({}): free renewals above the \
                     renewal cap are never reached",
                    self.max_renewals.value
                ),
                self.free_renewals.value,
            ));
        }
        if self.restart_backoff_max.value < self.restart_backoff_initial.value {
            return Err(ConfigError::new(
                named(key_of("restart.backoff_max")),
                format!(
                    "a duration of at least LEASEHOLD_RESTART_BACKOFF_INITIAL ({})",
                    humantime::format_duration(self.restart_backoff_initial.value)
                ),
                humantime::format_duration(self.restart_backoff_max.value),
            ));
        }
        if self.run_lease_ttl.value < Duration::from_millis(3) {
            return Err(ConfigError::new(
                named(key_of("run_lease_ttl")),
                "a duration of at least 3ms",
                humantime::format_duration(self.run_lease_ttl.value),
            ));
        }
        self.engine_config().validate()
    }

    /// Combinations that are allowed but work against themselves, each as
    /// one sentence naming the variables.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let idle = self.model_idle_timeout.value;
        for (kind, variable) in [
            (LeaseKind::ModelStream, "LEASEHOLD_LEASE_MODEL_STREAM"),
            (LeaseKind::ModelBlocking, "LEASEHOLD_LEASE_MODEL_BLOCKING"),
        ] {
            let cap = self.timing(kind).renewal_cap;
            if idle > cap {
                warnings.push(format!(
                    "LEASEHOLD_MODEL_IDLE_TIMEOUT ({}) is longer than a {kind} call can last under \
                     its renewal cap ({}, from {variable}): the idle timeout never fires, the cap \
                     cuts first",
                    compact(idle),
                    compact(cap),
                ));
            }
        }
        if self.free_renewals.value == self.max_renewals.value {
            warnings.push(format!(
                "LEASEHOLD_WATCHDOG_FREE_RENEWALS equals LEASEHOLD_WATCHDOG_MAX_RENEWALS ({}): the \
                 evaluator is never asked; every lease renews on the ladder until the cap cuts it",
                self.max_renewals.value
            ));
        }
        if self.evaluator_timeout.value
            >= self
                .lease_tool_call
                .value
                .min(self.lease_model_stream.value)
        {
            warnings.push(format!(
                "LEASEHOLD_EVALUATOR_TIMEOUT ({}) is not shorter than the shortest lease ({}): an \
                 evaluation may outlast the lease it judges",
                compact(self.evaluator_timeout.value),
                compact(
                    self.lease_tool_call
                        .value
                        .min(self.lease_model_stream.value)
                ),
            ));
        }
        if !self.server_addr.value.ip().is_loopback() && self.api_token.value.is_none() {
            warnings.push(format!(
                "LEASEHOLD_SERVER_ADDR ({}) is not a loopback address and LEASEHOLD_API_TOKEN is \
                 not set: `leasehold serve` will refuse to start",
                self.server_addr.value
            ));
        }
        warnings
    }
}
