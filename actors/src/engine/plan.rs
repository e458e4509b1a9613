//! Planning: a flow, with the engine's configuration and ports, becomes the
//! [`RunPlan`] the engine launches — in this one place.
//!
//! The flow is validated and held within the engine's configuration (a
//! flow may only tighten it: see `bounds.rs`), then each of its overrides is applied on the
//! engine's configuration (leases, the watchdog's ladder and policy,
//! budgets, the restart strategy) and the result is validated as a whole;
//! a refusal names the flow key that caused it (`leases.max_renewals`,
//! `supervision.backoff_initial`, …), even when the rule it breaks ties it
//! to a value of the engine's configuration. Then the flow's tool servers
//! are matched to the engine's clients, each with the flow's word on its
//! tools' idempotency. Nothing is started and nothing is written: a flow
//! refused here leaves no trace.

use std::sync::Arc;

use crate::agent::plan::RunPlan;
use crate::agent::tools::ServerClient;
use crate::error::ConfigError;
use crate::flow::{Flow, FlowError, StrategyKind};
use crate::ports::ToolClient;
use crate::supervision::SupervisionConfig;
use crate::supervision::budget::BudgetConfig;
use crate::supervision::strategy::{FailFast, RestartOnIntervene, RestartPolicy, StrategyFactory};

use super::bounds::{spawn_limits, within_configuration};
use super::{Engine, EngineError};

impl Engine {
    /// Validates `flow` and works out everything a run of it needs, with
    /// this engine's configuration and ports.
    pub(super) fn plan(&self, flow: Flow) -> Result<RunPlan, EngineError> {
        // A flow read from the store runs with what it kept out of it.
        let flow = match &self.tool_secrets {
            Some(secrets) => secrets.restored(flow),
            None => flow,
        };
        let model = self
            .model
            .clone()
            .map_err(|why| EngineError::NoModel(why.to_string()))?;
        flow.validate()?;
        within_configuration(&flow, &self.config)?;
        let supervision = supervision_of(&flow, &self.config.supervision)?;
        // The terms of the run's leases, per kind, resolved once here: the
        // flow's policy names are checked against the registered policies
        // under the flow's key; the configuration's were at build.
        if let Some(choice) = &flow.leases.policy {
            self.policies
                .check(choice, "leases.policy")
                .map_err(|e| FlowError::new(e.field.clone(), e.expected_got()))?;
        }
        let terms =
            supervision
                .watchdog
                .terms(&supervision.lease, &self.policies, "watchdog.policy")?;
        let budget_config = budget_of(&flow, self.config.budget)?;
        let strategy = match &self.strategy {
            Some(factory) => factory.clone(),
            None => strategy_for(&flow, self.config.restart)?,
        };
        let (tool_servers, owned_tools) = self.tools_of(&flow)?;
        let spawn_limits = spawn_limits(&flow, self.config.spawn);
        Ok(RunPlan {
            flow: Arc::new(flow),
            model_name: model.model_name(),
            model,
            evaluator: self.evaluator.clone(),
            events: self.events.clone(),
            store: self.store.clone(),
            clock: self.clock.clone(),
            owner_id: self.owner_id.clone(),
            log: self.log.clone(),
            lease_config: supervision.lease,
            watchdog_config: supervision.watchdog,
            terms,
            budget_config,
            strategy,
            tool_servers,
            owned_tools,
            max_tool_result_bytes: self.config.max_tool_result_bytes,
            spawn_limits,
            prices: self.config.prices.clone(),
            store_writes: self.config.store_writes,
            store_health: self.store_health.clone(),
            endpoints: self.endpoints.clone(),
        })
    }

    /// The clients of the tool servers `flow` names, and those of them the
    /// run owns (made by the factory for it). Nothing is started: the run
    /// connects them as its first work.
    fn tools_of(&self, flow: &Flow) -> Result<ToolsOfRun, EngineError> {
        let mut servers = Vec::new();
        let mut owned: Vec<Arc<dyn ToolClient>> = Vec::new();
        for server in &flow.tools {
            let client = match (self.tools.get(&server.name), &self.tool_factory) {
                (Some(shared), _) => shared.clone(),
                (None, Some(_)) if server.is_reference() => {
                    return Err(EngineError::UnknownToolServer(server.name.clone()));
                }
                (None, Some(factory)) => {
                    let client = factory(server).map_err(|message| EngineError::ToolClient {
                        server: server.name.clone(),
                        message,
                    })?;
                    owned.push(client.clone());
                    client
                }
                (None, None) => return Err(EngineError::UnknownToolServer(server.name.clone())),
            };
            servers.push(ServerClient {
                server: server.name.clone(),
                client,
                idempotent: server.idempotent.clone(),
            });
        }
        Ok((servers, owned))
    }
}

/// A run's tool servers, and the clients of them it owns.
type ToolsOfRun = (Vec<ServerClient>, Vec<Arc<dyn ToolClient>>);

/// The leases and the watchdog's ladder and policy of a run of `flow`: its
/// `leases` overrides applied on `base`, checked together.
fn supervision_of(flow: &Flow, base: &SupervisionConfig) -> Result<SupervisionConfig, FlowError> {
    let supervision = SupervisionConfig {
        lease: flow.lease_config(base.lease),
        watchdog: flow.watchdog_config(&base.watchdog),
    };
    supervision
        .validate()
        .map_err(|refusal| refused(flow, &refusal))?;
    Ok(supervision)
}

/// The budget checkpoints' configuration of a run of `flow`: its `budget`
/// overrides applied on `base`.
fn budget_of(flow: &Flow, base: BudgetConfig) -> Result<BudgetConfig, FlowError> {
    let mut budget = base;
    if let Some(max) = flow.budget.max_extensions {
        budget.max_extensions = max;
    }
    budget
        .validate()
        .map_err(|refusal| refused(flow, &refusal))?;
    Ok(budget)
}

/// The flow's strategy: `restart` (the default) or `fail_fast`, with its
/// overrides applied on `base`.
fn strategy_for(flow: &Flow, base: RestartPolicy) -> Result<StrategyFactory, FlowError> {
    let overrides = &flow.supervision;
    let policy = RestartPolicy {
        max_restarts: overrides.max_restarts.unwrap_or(base.max_restarts),
        window: overrides.window.unwrap_or(base.window),
        backoff_initial: overrides.backoff_initial.unwrap_or(base.backoff_initial),
        backoff_max: overrides.backoff_max.unwrap_or(base.backoff_max),
        jitter: overrides.jitter.unwrap_or(base.jitter),
        on_exhausted: overrides.on_exhausted.unwrap_or(base.on_exhausted),
        ..base
    };
    policy
        .validate()
        .map_err(|refusal| refused(flow, &refusal))?;
    Ok(match overrides.strategy.unwrap_or(StrategyKind::Restart) {
        StrategyKind::Restart => Arc::new(move || Box::new(RestartOnIntervene::new(policy))),
        StrategyKind::FailFast => Arc::new(|| Box::new(FailFast)),
    })
}

/// A refusal of the configuration that `flow`'s overrides made, named at
/// the flow key responsible: the key that overrides the refused field, if
/// the flow gives it, else the flow key the field is checked against (a
/// `leases.max_renewals` below the engine's `free_renewals`, say).
fn refused(flow: &Flow, refusal: &ConfigError) -> FlowError {
    let (own, partner) = flow_keys(&refusal.field);
    // A key left out is not serialized: what the flow gives is what it
    // serializes.
    let written = serde_json::to_value(flow).unwrap_or_default();
    let given = |key: &str| {
        written
            .pointer(&format!("/{}", key.replace('.', "/")))
            .is_some()
    };
    let path = match partner {
        Some(partner) if !given(&own) && given(partner) => partner.to_owned(),
        _ => own,
    };
    FlowError::new(
        path,
        format!("expected an override the runtime's configuration accepts, got: {refusal}"),
    )
}

/// The flow key that overrides the configuration key `field`, and the flow
/// key it is checked against, if any. A setting has one name in both: the
/// flow's tables are the configuration's, the configuration's `lease.*` and
/// `watchdog.*` being the flow's `leases.*` (a flow's leases override all of
/// its run's leases) and its `restart.*` the flow's `supervision.*`.
fn flow_keys(field: &str) -> (String, Option<&'static str>) {
    let own = match field.split_once('.') {
        Some(("lease" | "watchdog", key)) => format!("leases.{key}"),
        Some(("restart", key)) => format!("supervision.{key}"),
        _ => field.to_owned(),
    };
    let partner = match field {
        "watchdog.free_renewals" => Some("leases.max_renewals"),
        "restart.backoff_max" => Some("supervision.backoff_initial"),
        _ => None,
    };
    (own, partner)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::supervision::lease::LeaseKind;
    use crate::testing::{ScriptedModel, ScriptedTools};

    use super::*;

    async fn engine() -> Engine {
        Engine::builder()
            .model(Arc::new(ScriptedModel::new()))
            .tool_server("fs", Arc::new(ScriptedTools::new()))
            .build()
            .await
            .expect("the default configuration is valid")
    }

    fn flow(json: serde_json::Value) -> Flow {
        let mut flow = serde_json::json!({"name": "n", "task": "t", "max_steps": 3});
        if let (Some(flow), Some(extra)) = (flow.as_object_mut(), json.as_object()) {
            flow.extend(extra.clone());
        }
        serde_json::from_value(flow).expect("a flow")
    }

    fn refusal(result: Result<RunPlan, EngineError>) -> FlowError {
        match result {
            Err(EngineError::Flow(error)) => error,
            Err(other) => panic!("expected a flow refusal, got {other}"),
            Ok(_) => panic!("expected a flow refusal, got a plan"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_flow_names_registered_policies_only_per_kind_and_is_refused_naming_the_key() {
        #[derive(Debug)]
        struct Mine;
        impl crate::supervision::policy::VerdictPolicy for Mine {
            fn name(&self) -> &str {
                "mine"
            }
            fn judge(
                &self,
                _: &crate::supervision::policy::Expiry<'_>,
            ) -> crate::supervision::policy::Judgement {
                crate::supervision::policy::Judgement::AskEvaluator
            }
        }
        let engine = Engine::builder()
            .model(Arc::new(ScriptedModel::new()))
            .policy(Arc::new(Mine))
            .build()
            .await
            .expect("built");
        let plan = engine
            .plan(flow(
                serde_json::json!({"leases": {"policy": "deadline, tool_call = mine"}}),
            ))
            .expect("planned");
        assert_eq!(plan.terms.get(LeaseKind::ToolCall).policy.name(), "mine");
        assert_eq!(
            plan.terms.get(LeaseKind::ModelStream).policy.name(),
            "deadline"
        );
        let table = engine
            .plan(flow(
                serde_json::json!({"leases": {"policy": {"worker_step": "mine"}}}),
            ))
            .expect("planned");
        assert_eq!(table.terms.get(LeaseKind::WorkerStep).policy.name(), "mine");
        assert_eq!(
            table.terms.get(LeaseKind::ToolCall).policy.name(),
            "leasehold"
        );

        let refused = refusal(engine.plan(flow(
            serde_json::json!({"leases": {"policy": "leasehold, tool_call = yours"}}),
        )));
        assert_eq!(refused.path, "leases.policy.tool_call");
        assert!(refused.message.contains("mine"), "{refused}");
        // A policy under a taken name is refused when the engine is built.
        let taken = Engine::builder()
            .model(Arc::new(ScriptedModel::new()))
            .policy(Arc::new(Mine))
            .policy(Arc::new(Mine))
            .build()
            .await
            .err()
            .expect("refused");
        assert!(taken.to_string().contains("already registered"), "{taken}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_flows_overrides_reach_its_plan() {
        let engine = engine().await;
        let plan = engine
            .plan(flow(serde_json::json!({
                "tools": [{"name": "fs", "idempotent": {"read": true, "write": false}}],
                "leases": {"tool_call": "90s", "max_renewals": 4, "free_renewals": 1,
                           "evidence_renewals": 2, "policy": "deadline", "pace": "reset"},
                "budget": {"max_extensions": 1},
            })))
            .expect("a valid flow is planned");
        let base = engine.config();
        assert_eq!(plan.lease_config.tool_call, Duration::from_secs(90));
        assert_eq!(plan.lease_config.max_renewals, 4);
        assert_eq!(
            plan.lease_config.model_stream,
            base.supervision.lease.model_stream
        );
        assert_eq!(plan.watchdog_config.free_renewals, 1);
        assert_eq!(plan.watchdog_config.evidence_renewals, 2);
        // The terms of the run's leases are resolved once, here.
        for kind in LeaseKind::ALL {
            let terms = plan.terms.get(kind);
            assert_eq!(terms.policy.name(), "deadline");
            assert_eq!(terms.max_renewals, 4);
            assert_eq!(terms.free_renewals, 1);
            assert_eq!(terms.evidence_renewals, 2);
        }
        assert_eq!(plan.watchdog_config.pace, crate::pace::PaceMode::Reset);
        assert_eq!(
            plan.watchdog_config.evaluator_timeout,
            base.supervision.watchdog.evaluator_timeout
        );
        assert_eq!(plan.budget_config.max_extensions, 1);
        assert_eq!(plan.max_tool_result_bytes, base.max_tool_result_bytes);
        assert_eq!(plan.owner_id, engine.owner_id());
        let [server] = plan.tool_servers.as_slice() else {
            panic!("expected one tool server, got {}", plan.tool_servers.len());
        };
        assert_eq!(server.server, "fs");
        assert_eq!(server.idempotent.get("read"), Some(&true));
        assert_eq!(server.idempotent.get("write"), Some(&false));
        assert!(plan.owned_tools.is_empty(), "a shared server is not owned");
    }

    #[tokio::test(start_paused = true)]
    async fn a_flow_without_overrides_keeps_the_engines_configuration() {
        let engine = engine().await;
        let plan = engine
            .plan(flow(serde_json::json!({})))
            .expect("a plain flow is planned");
        let base = engine.config();
        assert_eq!(plan.lease_config, base.supervision.lease);
        assert_eq!(plan.watchdog_config, base.supervision.watchdog);
        assert_eq!(plan.budget_config, base.budget);
        assert!(plan.tool_servers.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_override_the_configuration_refuses_is_named_at_its_flow_key() {
        let engine = engine().await;
        let base = engine.config().supervision.clone();
        // Above the engine's renewal cap: the flow's own key.
        let above = base.lease.max_renewals + 1;
        let error = refusal(engine.plan(flow(
            serde_json::json!({"leases": {"free_renewals": above}}),
        )));
        assert_eq!(error.path, "leases.free_renewals", "{error}");
        // A cap below the engine's free renewals: the key that lowered it.
        let below = base.watchdog.free_renewals - 1;
        let error =
            refusal(engine.plan(flow(serde_json::json!({"leases": {"max_renewals": below}}))));
        assert_eq!(error.path, "leases.max_renewals", "{error}");
        assert!(
            error.message.contains("watchdog.free_renewals"),
            "the message says which rule: {error}"
        );
        // A first backoff above the engine's cap of the backoff.
        let error = refusal(engine.plan(flow(
            serde_json::json!({"supervision": {"backoff_initial": "1h"}}),
        )));
        assert_eq!(error.path, "supervision.backoff_initial", "{error}");
        // The flow's own checks come first, naming their key too.
        let error =
            refusal(engine.plan(flow(serde_json::json!({"budget": {"max_extensions": 4}}))));
        assert_eq!(error.path, "budget.max_extensions", "{error}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_tool_server_the_engine_lacks_is_refused_by_name() {
        let engine = engine().await;
        let result = engine.plan(flow(serde_json::json!({"tools": [{"name": "web"}]})));
        assert!(
            matches!(result, Err(EngineError::UnknownToolServer(ref name)) if name == "web"),
            "expected the server to be refused by name"
        );
    }

    #[test]
    fn each_configuration_field_maps_to_its_flow_key() {
        assert_eq!(
            flow_keys("lease.tool_call"),
            ("leases.tool_call".into(), None)
        );
        assert_eq!(
            flow_keys("watchdog.free_renewals"),
            ("leases.free_renewals".into(), Some("leases.max_renewals"))
        );
        assert_eq!(
            flow_keys("restart.window"),
            ("supervision.window".into(), None)
        );
        assert_eq!(
            flow_keys("restart.backoff_max"),
            (
                "supervision.backoff_max".into(),
                Some("supervision.backoff_initial")
            )
        );
        assert_eq!(
            flow_keys("budget.max_extensions"),
            ("budget.max_extensions".into(), None)
        );
    }
}
