//! What the configuration refuses, and what it only warns about: values
//! that each parse but together defeat themselves.

use std::time::Duration;

use leasehold_actors::rules::{self, Broken};
use leasehold_actors::{
    ConfigError, LeaseKind, MAX_DURATION, MAX_DURATION_EXPECTED, MIN_LOAD_BOUND, describe_duration,
};

use super::ValueKind;
use super::idle::MODEL_KINDS;
use super::keys::{KEYS, Key};
use super::{Config, Source, compact, key_of, named};

/// A rule between two keys, broken ([`rules`]): refused naming the
/// refused key's variable and file key, and the other key's variable.
fn refused(broken: &Broken) -> ConfigError {
    broken.named(named(key_of(&broken.key)), key_of(broken.against).env)
}

impl Config {
    /// Refuses values that defeat themselves, naming the variables: a zero
    /// duration or one above [`MAX_DURATION`] (30 days), a value outside its
    /// key's bound (the `checks` column of `docs/configuration.md`: more
    /// than 3 budget extensions, a run lease too short to heartbeat, a
    /// claim interval below 100 ms, …), free renewals above the renewal
    /// cap, a longest backoff below the first.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (key, value, source) in self.durations() {
            if value.is_zero() {
                return Err(ConfigError::new(
                    named(key),
                    format!("a duration above 0 (from {source})"),
                    "0s",
                ));
            }
            if value > MAX_DURATION {
                return Err(ConfigError::new(
                    named(key),
                    format!("{MAX_DURATION_EXPECTED} (from {source})"),
                    describe_duration(value),
                ));
            }
        }
        self.validate_bounds()?;
        self.validate_lease_floor()?;
        rules::free_renewals_within_cap(self.free_renewals.value, self.max_renewals.value)
            .map_err(|b| refused(&b))?;
        rules::backoffs_in_order(
            self.restart_backoff_initial.value,
            self.restart_backoff_max.value,
        )
        .map_err(|b| refused(&b))?;
        rules::probes_in_order(self.outage_probe_initial.value, self.outage_probe_max.value)
            .map_err(|b| refused(&b))?;
        self.validate_load()?;
        self.engine_config().validate()
    }

    /// `executor.load_bound` and `executor.lag_target` each off or at least
    /// [`MIN_LOAD_BOUND`] and at most [`MAX_DURATION`], and the target not
    /// above the bound: an executor that admits runs while its leases are
    /// renewed by `load` only makes itself later.
    fn validate_load(&self) -> Result<(), ConfigError> {
        for file in ["executor.load_bound", "executor.lag_target"] {
            let setting = if file == "executor.load_bound" {
                &self.executor_load_bound
            } else {
                &self.executor_lag_target
            };
            let value = setting.value;
            if value > MAX_DURATION || (!value.is_zero() && value < MIN_LOAD_BOUND) {
                return Err(ConfigError::new(
                    named(key_of(file)),
                    format!(
                        "0 (off) or a duration of at least {} and {MAX_DURATION_EXPECTED} \
                         (from {})",
                        humantime::format_duration(MIN_LOAD_BOUND),
                        setting.source
                    ),
                    describe_duration(value),
                ));
            }
        }
        let (bound, target) = (
            self.executor_load_bound.value,
            self.executor_lag_target.value,
        );
        if !bound.is_zero() && target > bound {
            return Err(ConfigError::new(
                named(key_of("executor.lag_target")),
                format!(
                    "at most LEASEHOLD_EXECUTOR_LOAD_BOUND ({}, from {}): an executor that \
                     takes on runs while its leases are renewed by load only makes itself later",
                    humantime::format_duration(bound),
                    self.executor_load_bound.source
                ),
                humantime::format_duration(target),
            ));
        }
        Ok(())
    }

    /// Every key with a [`Bound`](super::keys::Bound) within it: the
    /// bound is the key's row, so a key's bound is stated and checked in
    /// one place.
    fn validate_bounds(&self) -> Result<(), ConfigError> {
        for key in KEYS.iter() {
            let Some(bound) = key.bound else { continue };
            let (text, source) = self.value_of(key);
            let Some(value) = key.measure(&text) else {
                continue;
            };
            let broken = match (bound.min, bound.max) {
                (Some(min), _) if value < min => format!("at least {}", key.written(min)),
                (_, Some(max)) if value > max => format!("at most {}", key.written(max)),
                _ => continue,
            };
            let why = if bound.why.is_empty() {
                String::new()
            } else {
                format!(": {}", bound.why)
            };
            return Err(ConfigError::new(
                named(key),
                format!("{broken} (from {source}){why}"),
                key.written(value),
            ));
        }
        Ok(())
    }

    /// Every `lease.*` at least `lease.min`, naming the variables
    /// (`lease.min`'s own floor is its bound).
    fn validate_lease_floor(&self) -> Result<(), ConfigError> {
        let floor = &self.lease_min;
        for kind in LeaseKind::ALL {
            rules::lease_above_floor(kind, self.lease(kind), floor.value)
                .map_err(|b| refused(&b))?;
        }
        Ok(())
    }

    /// Every duration key (`ValueKind::Duration` in the key table) with its
    /// value and source, read through its row as `leasehold config` prints
    /// it, so a new duration key is checked here as soon as it is in the
    /// table: no list of keys to keep in step.
    fn durations(&self) -> Vec<(&'static Key, Duration, &Source)> {
        KEYS.iter()
            .filter(|k| k.kind == ValueKind::Duration)
            .map(|key| {
                let (text, source) = self.value_of(key);
                // A duration is printed by humantime, which reads it back
                // exactly; only one too long for humantime to read back
                // fails, and it is over the maximum.
                let value = humantime::parse_duration(&text).unwrap_or(Duration::MAX);
                (key, value, source)
            })
            .collect()
    }

    /// Keys given by their old names, then combinations that are allowed
    /// but work against themselves, each as one sentence naming the
    /// variables. Among them: an idle timeout that
    /// cuts a silent model call before the watchdog has judged it (before
    /// [`Config::first_judgment`]), the hidden deadline leases exist to
    /// avoid.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings: Vec<String> = self.renamed.iter().map(ToString::to_string).collect();
        let idle = self.idle_timeout();
        let derived = matches!(idle.source, Source::Derived(_));
        let idle_key = self.named("model.idle_timeout");
        for (kind, lease_key) in MODEL_KINDS {
            let judged = self.first_judgment(kind);
            if idle.value < judged {
                let how = if self.free_renewals.value >= self.max_renewals.value {
                    format!(
                        "its renewal cap under {} and {}, every renewal free",
                        self.named(lease_key),
                        self.named("lease.max_renewals"),
                    )
                } else {
                    format!(
                        "its first evaluation under {} and {}, plus {}",
                        self.named(lease_key),
                        self.named("watchdog.free_renewals"),
                        self.named("evaluator_timeout"),
                    )
                };
                warnings.push(format!(
                    "{idle_key} is {}, shorter than a silent {kind} call takes to be judged ({}: \
                     {how}): the model client cuts the call before the watchdog has judged it; \
                     unset it to derive it, or make it at least {}",
                    compact(idle.value),
                    compact(judged),
                    compact(judged),
                ));
            }
            let cap = self.timing(kind).renewal_cap;
            // A derived value follows the longer model lease, so it may
            // outlast the shorter one's cap; only a value someone chose is
            // pointless there.
            if !derived && idle.value > cap {
                warnings.push(format!(
                    "{idle_key} is {}, longer than a {kind} call can last under its renewal cap \
                     ({}, from {} and {}): the idle timeout never fires, the cap cuts first",
                    compact(idle.value),
                    compact(cap),
                    self.named(lease_key),
                    self.named("lease.max_renewals"),
                ));
            }
        }
        if self.free_renewals.value == self.max_renewals.value {
            warnings.push(format!(
                "{} equals {} ({}): the evaluator is never asked; every lease renews on the \
                 ladder until the cap cuts it",
                self.named("watchdog.free_renewals"),
                self.named("lease.max_renewals"),
                self.max_renewals.value
            ));
        }
        let shortest = self
            .lease_tool_call
            .value
            .min(self.lease_model_stream.value);
        if self.free_renewals.value < self.max_renewals.value
            && self.evaluator_timeout.value >= shortest
        {
            let lease_key = if self.lease_tool_call.value <= self.lease_model_stream.value {
                "lease.tool_call"
            } else {
                "lease.model_stream"
            };
            warnings.push(format!(
                "{} is {}, not shorter than the shortest lease ({}, {}): an evaluation may \
                 outlast the lease it judges",
                self.named("evaluator_timeout"),
                compact(self.evaluator_timeout.value),
                compact(shortest),
                self.named(lease_key),
            ));
        }
        if !self.server_addr.value.ip().is_loopback() && self.api_token.value.is_none() {
            warnings.push(format!(
                "{} is {}, not a loopback address, and {} is not set: `leasehold serve` will \
                 refuse to start",
                self.named("server.addr"),
                self.server_addr.value,
                self.named("api_token"),
            ));
        }
        warnings
    }

    /// The key of the file `file` as a warning names it: the file key, its
    /// variable, and where its value came from — `lease.max_renewals`
    /// (LEASEHOLD_LEASE_MAX_RENEWALS, from flag --set lease.max_renewals).
    fn named(&self, file: &str) -> String {
        match KEYS.iter().find(|key| key.file == file) {
            Some(key) => match self.value_of(key).1 {
                Source::Env(name) if name == key.env => {
                    format!("`{}` ({name}, from the environment)", key.file)
                }
                source => format!("`{}` ({}, {source})", key.file, key.env),
            },
            None => format!("`{file}`"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leasehold_actors::LeaseKind;
    use leasehold_actors::rules;

    use super::KEYS;

    #[test]
    fn every_rule_between_keys_names_keys_of_the_configuration() {
        let second = Duration::from_secs(1);
        for broken in [
            rules::free_renewals_within_cap(1, 0),
            rules::backoffs_in_order(second, Duration::ZERO),
            rules::lease_above_floor(LeaseKind::WorkerStep, Duration::ZERO, second),
        ]
        .map(Result::unwrap_err)
        {
            for name in [broken.key.as_str(), broken.against] {
                assert!(
                    KEYS.iter().any(|k| k.file == name),
                    "{name} is no key of the configuration"
                );
            }
        }
    }
}
