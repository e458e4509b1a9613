//! The configuration handed to the parts it configures: the actors'
//! [`EngineConfig`] and the model client's settings.

use std::time::Duration;

use leasehold_actors::{
    BudgetConfig, ConfigError, EngineConfig, EventLimits, LeaseConfig, LeaseKind, RestartPolicy,
    SpawnLimits, SupervisionConfig, WatchdogConfig,
};

use super::{Config, Setting, key_of, named};

impl Config {
    /// The lease length of `kind`.
    pub fn lease(&self, kind: LeaseKind) -> Duration {
        match kind {
            LeaseKind::ModelStream => self.lease_model_stream.value,
            LeaseKind::ModelBlocking => self.lease_model_blocking.value,
            LeaseKind::ToolCall => self.lease_tool_call.value,
            LeaseKind::WorkerStep => self.lease_worker_step.value,
        }
    }

    /// The actors' configuration: these values over the actors' defaults
    /// for everything leasehold does not expose (accrual parameters, the
    /// budget's least confidence, the backoff multiplier and jitter). The
    /// evaluator timeout serves both the watchdog and the budget checkpoints.
    pub fn engine_config(&self) -> EngineConfig {
        let defaults = EngineConfig::default();
        EngineConfig {
            supervision: SupervisionConfig {
                lease: LeaseConfig {
                    model_stream: self.lease_model_stream.value,
                    model_blocking: self.lease_model_blocking.value,
                    tool_call: self.lease_tool_call.value,
                    worker_step: self.lease_worker_step.value,
                    max_renewals: self.max_renewals.value,
                    min: self.lease_min.value,
                    ceiling: self.lease_ceiling.value,
                },
                watchdog: WatchdogConfig {
                    free_renewals: self.free_renewals.value,
                    evaluator_timeout: self.evaluator_timeout.value,
                    evidence_renewals: self.evidence_renewals.value,
                    repetition_threshold: self.repetition_threshold.value.get(),
                    policy: self.watchdog_policy.value.clone(),
                    ..defaults.supervision.watchdog
                },
            },
            budget: BudgetConfig {
                max_extensions: self.budget_max_extensions.value,
                evaluator_timeout: self.evaluator_timeout.value,
                ..defaults.budget
            },
            restart: RestartPolicy {
                max_restarts: self.restart_max.value,
                window: self.restart_window.value,
                backoff_initial: self.restart_backoff_initial.value,
                backoff_max: self.restart_backoff_max.value,
                on_exhausted: self.restart_on_exhausted.value,
                ..defaults.restart
            },
            run_lease_ttl: self.run_lease_ttl.value,
            max_tool_result_bytes: bytes(self.limits_tool_result.value),
            spawn: SpawnLimits {
                max_per_answer: self.spawn_max_per_answer.value,
                max_per_run: self.spawn_max_per_run.value,
                max_depth: self.spawn_max_depth.value,
            },
            events: EventLimits {
                max_progress_note_bytes: bytes(self.limits_progress_note.value),
                progress_interval: self.limits_progress_interval.value,
                max_run_events: u64::from(self.limits_run_events.value),
            },
            retention: self.executor_retention.value,
            prices: self.prices.clone(),
            load_bound: self.executor_load_bound.value,
            outages: leasehold_actors::Outages {
                failures: self.outage_failures.value,
                probe_initial: self.outage_probe_initial.value,
                probe_max: self.outage_probe_max.value,
                resume_wave: usize::try_from(self.outage_resume_wave.value).unwrap_or(usize::MAX),
            },
            store_writes: leasehold_actors::StoreWrites {
                retry_for: self.store_write_retry_for.value,
                on_failure: self.store_on_write_failure.value,
            },
        }
    }

    /// How a serving executor admits and claims runs: `server.max_live_runs`,
    /// `server.max_queued_runs`, `executor.lag_target`,
    /// `executor.claim_interval`, `resume_on_boot` and the keyed limits.
    pub fn executor_options(&self) -> crate::executor::ExecutorOptions {
        crate::executor::ExecutorOptions {
            max_live_runs: self.server_max_live_runs.value,
            max_queued_runs: self.server_max_queued_runs.value,
            lag_target: self.executor_lag_target.value,
            claim_interval: Some(self.executor_claim_interval.value),
            resume_orphans: self.resume_on_boot.value,
            limits: self.keyed_limits.clone(),
            endpoint: self.model_base_url.value.clone().unwrap_or_default(),
        }
    }

    /// What a client may make one run hold: `limits.task`, `limits.flow`
    /// and `limits.guidance`.
    pub fn run_limits(&self) -> crate::run_limits::RunLimits {
        crate::run_limits::RunLimits {
            task: bytes(self.limits_task.value),
            flow: bytes(self.limits_flow.value),
            guidance: bytes(self.limits_guidance.value),
        }
    }

    /// What every new run's flow is held to here ([`FlowCheck`]): the
    /// limits of [`Config::run_limits`] and the receivers of
    /// `webhooks.receivers`.
    ///
    /// [`FlowCheck`]: crate::flow_check::FlowCheck
    pub fn flow_check(&self) -> crate::flow_check::FlowCheck {
        crate::flow_check::FlowCheck {
            limits: self.run_limits(),
            receivers: self.webhook_receivers.clone(),
            keyed_limits: self.keyed_limits.clone(),
        }
    }

    /// The model client's settings, from `model.*` and `fast_model.*` (the
    /// idle timeout as [`Config::idle_timeout`] has it, derived when unset);
    /// refused, naming the variable, when the default endpoint is not set.
    pub fn model_settings(&self) -> Result<crate::model::ModelSettings, ConfigError> {
        use crate::model::{ModelEndpoint, ModelSettings};
        let required = |setting: &Setting<Option<String>>, file: &str, expected: &str| {
            setting.value.clone().ok_or_else(|| {
                ConfigError::new(named(key_of(file)), expected, "nothing (it is not set)")
            })
        };
        let default = ModelEndpoint {
            base_url: required(
                &self.model_base_url,
                "model.base_url",
                "the base URL of an OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1",
            )?,
            model: required(
                &self.model_name,
                "model.name",
                "a model name, e.g. gpt-4o-mini",
            )?,
            api_key: self.model_api_key.value.clone(),
            max_tokens: self.model_max_tokens.value,
        };
        let any_fast = [
            &self.fast_model_base_url,
            &self.fast_model_name,
            &self.fast_model_api_key,
        ]
        .iter()
        .any(|s| s.value.is_some())
            || self.fast_model_max_tokens.value.is_some();
        let mut settings = ModelSettings::new(default.clone());
        if any_fast {
            settings.fast = Some(ModelEndpoint {
                base_url: self
                    .fast_model_base_url
                    .value
                    .clone()
                    .unwrap_or_else(|| default.base_url.clone()),
                model: self
                    .fast_model_name
                    .value
                    .clone()
                    .unwrap_or_else(|| default.model.clone()),
                api_key: self
                    .fast_model_api_key
                    .value
                    .clone()
                    .or_else(|| default.api_key.clone()),
                max_tokens: self.fast_model_max_tokens.value.or(default.max_tokens),
            });
        }
        settings.connect_timeout = self.model_connect_timeout.value;
        settings.idle_timeout = self.idle_timeout().value;
        settings.rate_limit_retries = self.model_rate_limit_retries.value;
        settings.max_answer_bytes = bytes(self.limits_model_answer.value);
        settings.max_body_bytes = bytes(self.limits_model_body.value);
        settings.validate()?;
        Ok(settings)
    }
}

/// A configured size as a count of bytes in memory (sizes are at most
/// [`super::MAX_SIZE`], which fits).
fn bytes(size: u64) -> usize {
    usize::try_from(size).unwrap_or(usize::MAX)
}

#[cfg(feature = "webhooks")]
impl Config {
    /// What the webhooks' delivery needs: the receivers, the links'
    /// address (`webhooks.public_url`, else `http://` and the address the
    /// server listens on, `bound`), and the bounds of `webhooks.*`.
    pub fn webhook_delivery(
        &self,
        bound: std::net::SocketAddr,
    ) -> crate::webhooks::deliver::DeliveryConfig {
        let base = self
            .webhooks_public_url
            .value
            .clone()
            .unwrap_or_else(|| format!("http://{bound}"));
        crate::webhooks::deliver::DeliveryConfig {
            receivers: self.webhook_receivers.clone(),
            links: crate::webhooks::payload::Links::new(&base, self.api_token.value.is_some()),
            timeout: self.webhooks_timeout.value,
            retry_first: self.webhooks_retry_first.value,
            retry_max: self.webhooks_retry_max.value,
            give_up_after: self.webhooks_give_up_after.value,
        }
    }
}
