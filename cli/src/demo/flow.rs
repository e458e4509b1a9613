//! The demo's flow, its prompts and its short timings.
//!
//! Every kind of agent in the flow has a system prompt of its own, and the
//! scripted model recognises who is asking by it: the root by the flow's
//! `system_prompt`, each worker by its kind's `prompt`.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::config::{Config, Setting, Source};
use leasehold::model::ModelRole;
use leasehold::{Flow, LeaseOverrides, SupervisionOverrides, ToolServer, WorkerKind};

/// The name of the flow's tool server.
pub(crate) const TOOL_SERVER: &str = "ops";

/// The task of the root loop.
pub(crate) const TASK: &str = "Checkout latency doubled at 14:00. Find out why and what to do.";

/// The root's system prompt.
pub(crate) const ROOT_PROMPT: &str = "You coordinate an incident review. Spawn one logs, one \
     metrics and one deploys worker, then merge their findings into one answer.";

/// The logs worker's system prompt.
pub(crate) const LOGS_PROMPT: &str = "You read logs. Search them until you know when the errors \
     started and what changed just before; close each milestone as you reach it.";

/// The metrics worker's system prompt.
pub(crate) const METRICS_PROMPT: &str =
    "You read metrics. Fetch the series you are asked about and report how it changed.";

/// The deploys worker's system prompt.
pub(crate) const DEPLOYS_PROMPT: &str = "You handle deploys. Read the deploy history, decide \
     whether a deploy must be rolled back, and act.";

/// The demo's tools, as the flow declares their idempotency.
pub(crate) const SEARCH_LOGS: &str = "search_logs";
/// The metrics tool that hangs on its first call.
pub(crate) const FETCH_METRICS: &str = "fetch_metrics";
/// The production rollback that goes silent.
pub(crate) const ROLLBACK_DEPLOY: &str = "rollback_deploy";

/// The logs worker's milestones.
pub(crate) const ERRORS_FOUND: &str = "errors_found";
/// The logs worker's second milestone.
pub(crate) const CAUSE_FOUND: &str = "cause_found";

/// The demo's timings.
pub(crate) struct Timings {
    pub(crate) model_stream: Duration,
    pub(crate) tool_call: Duration,
    pub(crate) worker_step: Duration,
    pub(crate) free_renewals: u32,
    pub(crate) max_renewals: u32,
    pub(crate) evaluator_timeout: Duration,
    pub(crate) backoff_initial: Duration,
    pub(crate) backoff_max: Duration,
}

/// Short leases, so that every rule shows within seconds: a tool call is
/// judged after 0.3 s, a model stream after 1 s, a worker step after 6 s (long
/// enough that no worker is ever judged on its steps in this demo), two
/// renewals are free, a restart waits 0.2 s.
pub(crate) const TIMINGS: Timings = Timings {
    model_stream: Duration::from_secs(1),
    tool_call: Duration::from_millis(300),
    worker_step: Duration::from_secs(6),
    free_renewals: 2,
    max_renewals: 10,
    evaluator_timeout: Duration::from_secs(2),
    backoff_initial: Duration::from_millis(200),
    backoff_max: Duration::from_secs(2),
};

/// How long connecting to the scripted model may take.
const MODEL_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the scripted model may stay silent mid-answer.
const MODEL_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long starting a session with the demo's tool server may take.
const MCP_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The demo's configuration: [`TIMINGS`] over the defaults, and the scripted
/// model at `model_base_url` — the loops' model and, on the `fast` role,
/// the judge — with short transport timeouts. Every value keeps the source
/// `default`, as a configuration built in code has no file or variable
/// behind it.
pub(crate) fn config(model_base_url: &str) -> Config {
    fn set<T>(value: T) -> Setting<T> {
        Setting {
            value,
            source: Source::Default,
        }
    }
    let text = |value: &str| set(Some(value.to_owned()));
    Config {
        lease_model_stream: set(TIMINGS.model_stream),
        lease_tool_call: set(TIMINGS.tool_call),
        lease_worker_step: set(TIMINGS.worker_step),
        free_renewals: set(TIMINGS.free_renewals),
        max_renewals: set(TIMINGS.max_renewals),
        evaluator_timeout: set(TIMINGS.evaluator_timeout),
        restart_backoff_initial: set(TIMINGS.backoff_initial),
        restart_backoff_max: set(TIMINGS.backoff_max),
        model_base_url: text(model_base_url),
        model_name: text(super::MODEL_NAME),
        fast_model_base_url: text(model_base_url),
        fast_model_name: text(super::JUDGE_NAME),
        model_connect_timeout: set(MODEL_CONNECT_TIMEOUT),
        model_idle_timeout: set(Some(MODEL_IDLE_TIMEOUT)),
        mcp_handshake_timeout: set(MCP_HANDSHAKE_TIMEOUT),
        watchdog_role: set(ModelRole::Fast),
        ..Config::default()
    }
}

/// The demo's flow, its tool server at `tools_url`.
///
/// It carries the demo's lease and restart timings as its own overrides, so
/// that it shows the same thing on an engine configured otherwise.
pub(crate) fn flow(tools_url: &str) -> Flow {
    let worker = |prompt: &str, max_steps: u32, milestones: &[&str]| WorkerKind {
        max_tokens: None,
        prompt: prompt.to_owned(),
        max_steps,
        tools: Some(vec![TOOL_SERVER.to_owned()]),
        milestones: milestones.iter().map(|m| (*m).to_owned()).collect(),
    };
    Flow {
        max_tokens: None,
        keyed_limits: BTreeMap::new(),
        notify: Vec::new(),
        name: "incident-review".to_owned(),
        task: TASK.to_owned(),
        system_prompt: ROOT_PROMPT.to_owned(),
        max_steps: 3,
        stream: true,
        tools: vec![ToolServer {
            name: TOOL_SERVER.to_owned(),
            command: None,
            url: Some(tools_url.to_owned()),
            env: BTreeMap::new(),
            idempotent: BTreeMap::from([
                (SEARCH_LOGS.to_owned(), true),
                (FETCH_METRICS.to_owned(), true),
                (ROLLBACK_DEPLOY.to_owned(), false),
            ]),
        }],
        workers: BTreeMap::from([
            (
                "logs".to_owned(),
                worker(LOGS_PROMPT, 2, &[ERRORS_FOUND, CAUSE_FOUND]),
            ),
            ("metrics".to_owned(), worker(METRICS_PROMPT, 3, &[])),
            ("deploys".to_owned(), worker(DEPLOYS_PROMPT, 3, &[])),
        ]),
        milestones: Vec::new(),
        leases: LeaseOverrides {
            model_stream: Some(TIMINGS.model_stream),
            model_blocking: None,
            tool_call: Some(TIMINGS.tool_call),
            worker_step: Some(TIMINGS.worker_step),
            max_renewals: Some(TIMINGS.max_renewals),
            free_renewals: Some(TIMINGS.free_renewals),
            evidence_renewals: None,
            policy: None,
            // The demo shows the same thing each time it runs on the same
            // data directory: no pace learned by an earlier demo.
            pace: Some(leasehold::PaceMode::Off),
        },
        supervision: SupervisionOverrides {
            backoff_initial: Some(TIMINGS.backoff_initial),
            backoff_max: Some(TIMINGS.backoff_max),
            ..SupervisionOverrides::default()
        },
        budget: leasehold::BudgetOverrides::default(),
        spawn: leasehold::SpawnOverrides::default(),
        retention: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flow_and_the_configuration_are_valid() {
        let flow = flow("http://127.0.0.1:1/mcp");
        assert_eq!(flow.validate(), Ok(()));
        let config = config("http://127.0.0.1:1/v1");
        assert_eq!(config.validate(), Ok(()));
        let settings = config
            .model_settings()
            .expect("the scripted model's settings");
        assert_eq!(settings.default.model, super::super::MODEL_NAME);
        assert_eq!(
            settings.endpoint(ModelRole::Fast).model,
            super::super::JUDGE_NAME
        );
        assert_eq!(settings.idle_timeout, MODEL_IDLE_TIMEOUT);
        let engine = config.engine_config();
        assert_eq!(
            flow.lease_config(engine.supervision.lease),
            engine.supervision.lease
        );
    }
}
