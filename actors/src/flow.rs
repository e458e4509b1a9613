//! Flows: what one run does, as data.
//!
//! A [`Flow`] names the task, the root loop's step limit, the MCP tool
//! servers the run may use, the kinds of worker it may spawn, its milestones,
//! and per-flow overrides of the runtime's lease, supervision, budget and
//! spawn configuration — which may only tighten it: the engine refuses an
//! override looser than its configuration when it plans a run. It is read
//! from TOML or JSON (the `leasehold` crate's `flow_file` module loads
//! files); this module holds the types and the checks.
//!
//! Two guarantees:
//!
//! * **Nothing is silently ignored.** Every table refuses unknown keys, so a
//!   misspelt `tool_cal` is an error, not a lease that quietly keeps the
//!   runtime's length.
//! * **Every refusal names its key.** [`Flow::validate`] and the file loaders
//!   return a [`FlowError`] whose `path` is the offending key, in the form
//!   `leases.tool_call`, `workers.research.max_steps` or `tools[1].command`
//!   (`.` for the document itself).
//!
//! Durations are written the way people say them — `"250ms"`, `"90s"`,
//! `"5m"`, `"1h 30m"` — and serialized back the same way; none may exceed
//! [`MAX_DURATION`](crate::MAX_DURATION) (30 days), and no lease may be
//! shorter than [`MIN_LEASE`](crate::MIN_LEASE) (10 ms). Overrides left out
//! keep the runtime's configuration; [`Flow::lease_config`] and
//! [`Flow::watchdog_config`] apply them.

mod builder;
mod command_arg;
mod overrides;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::supervision::lease::LeaseConfig;
use crate::supervision::watchdog::WatchdogConfig;

pub use builder::{FlowBuilder, IntoPolicyChoice};
pub use command_arg::CommandArg;
pub use overrides::{
    BudgetOverrides, LeaseOverrides, SpawnOverrides, StrategyKind, SupervisionOverrides,
};

/// A flow: what one run does. TOML or JSON, or built in Rust with
/// [`Flow::builder`]; read from a JSON value with [`Flow::from_json`].
///
/// ```
/// use std::time::Duration;
/// use leasehold_actors::Flow;
/// use leasehold_actors::LeaseConfig;
///
/// let flow: Flow = serde_json::from_str(r#"{
///     "name": "triage",
///     "task": "Sort the open issues by urgency.",
///     "max_steps": 20,
///     "leases": { "tool_call": "90s" }
/// }"#)?;
/// flow.validate()?;
/// assert!(flow.stream);
/// let lease = flow.lease_config(LeaseConfig::default());
/// assert_eq!(lease.tool_call, Duration::from_secs(90));
/// assert_eq!(lease.worker_step, LeaseConfig::default().worker_step);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flow {
    /// The flow's name, shown in events and listings.
    pub name: String,
    /// What the run is asked to do: the root loop's first user message.
    pub task: String,
    /// The root loop's system prompt (default empty).
    #[serde(default)]
    pub system_prompt: String,
    /// Steps of the root loop; 0 = unlimited.
    pub max_steps: u32,
    /// Stream model answers (lease kind `model_stream`) or not
    /// (`model_blocking`). Default true.
    #[serde(default = "stream_by_default")]
    pub stream: bool,
    /// The MCP servers the run may use.
    #[serde(default)]
    pub tools: Vec<ToolServer>,
    /// The kinds of worker the run may spawn, by name.
    #[serde(default)]
    pub workers: BTreeMap<String, WorkerKind>,
    /// Milestones the root loop reports as it reaches them.
    #[serde(default)]
    pub milestones: Vec<String>,
    /// Lease overrides.
    #[serde(default)]
    pub leases: LeaseOverrides,
    /// Supervision overrides.
    #[serde(default)]
    pub supervision: SupervisionOverrides,
    /// Budget overrides.
    #[serde(default)]
    pub budget: BudgetOverrides,
    /// Limits on the workers the run spawns, below the runtime's.
    #[serde(default, skip_serializing_if = "SpawnOverrides::is_empty")]
    pub spawn: SpawnOverrides,
    /// How long the run is kept once it has finished, below the runtime's
    /// retention (`executor.retention`): a flow may shorten it, never
    /// lengthen it. Then the run is deleted with everything kept of it.
    #[serde(
        default,
        with = "crate::serde_time::human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub retention: Option<std::time::Duration>,
    /// The webhook receivers, by the name the runtime's configuration
    /// gives them, told when the run pauses for a person or ends, besides
    /// those told of every run. A flow names receivers; it never gives a
    /// URL or a secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<String>,
    /// The most tokens one model answer of this run may hold, sent to the
    /// model as `max_tokens` (each worker kind may set its own). None: the
    /// endpoint's `model.max_tokens`, else the model server's own limit.
    /// An answer cut off there is continued in the next step while the
    /// step budget lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// What this flow asks of the server's keyed limits for its own runs,
    /// by the limit's name: at most that many of its runs among those of
    /// one key value. A flow may only tighten a limit the server has
    /// (checked when it is posted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub keyed_limits: BTreeMap<String, crate::keyed_limits::FlowKeyedLimit>,
}

/// The most a flow's or a worker kind's `max_tokens` may be.
pub const MAX_ANSWER_TOKENS: u32 = 1_000_000;

/// `max_tokens` at `key`: at least 1, at most [`MAX_ANSWER_TOKENS`].
fn answer_tokens_valid(key: &str, max_tokens: Option<u32>) -> Result<(), FlowError> {
    match max_tokens {
        Some(n) if n == 0 || n > MAX_ANSWER_TOKENS => Err(FlowError::new(
            key,
            format!("expected a number of tokens from 1 to {MAX_ANSWER_TOKENS}, got {n}"),
        )),
        _ => Ok(()),
    }
}

/// The most receivers a flow's `notify` may name.
pub const MAX_NOTIFY: usize = 16;

fn stream_by_default() -> bool {
    true
}

/// An MCP server the run may use: at most one of `command` (stdio child
/// process: program and arguments) or `url` (streamable HTTP). A server
/// with neither is a *reference* to one the runtime provides by name: a
/// server given to the engine in process, or one declared by the
/// configuration's `[[tools]]` (the only kind a flow posted to
/// `leasehold serve` may carry, unless the server allows flow tools).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolServer {
    /// The server's name, unique in the flow; workers name it in `tools`.
    pub name: String,
    /// A stdio server: the program and its arguments; an argument written
    /// `{ secret = "…" }` reaches the process but is shown as `***`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<CommandArg>>,
    /// A streamable-HTTP server: its `http://` or `https://` address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Environment variables of a stdio server's process.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Per-tool idempotency where known: tool name → idempotent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub idempotent: BTreeMap<String, bool>,
}

impl ToolServer {
    /// Whether this is a reference to a server the runtime provides by name
    /// (neither `command` nor `url`).
    pub fn is_reference(&self) -> bool {
        self.command.is_none() && self.url.is_none()
    }

    /// Whether it carries anything that starts a process or opens a
    /// connection: a `command`, a `url` or an `env`.
    pub fn names_a_process_or_address(&self) -> bool {
        !self.is_reference() || !self.env.is_empty()
    }

    /// Checks a list of servers, as a flow's `tools` or a configuration's
    /// `[[tools]]`: names non-empty and unique, each server valid; errors
    /// name `tools[i]`.
    pub fn validate_all(servers: &[ToolServer]) -> Result<(), FlowError> {
        let mut seen = BTreeMap::new();
        for (i, server) in servers.iter().enumerate() {
            let at = format!("tools[{i}]");
            not_blank(&format!("{at}.name"), &server.name)?;
            if let Some(first) = seen.insert(server.name.as_str(), i) {
                return Err(FlowError::new(
                    format!("{at}.name"),
                    format!(
                        "tool server `{}` is already declared at `tools[{first}]`",
                        server.name
                    ),
                ));
            }
            server.validate(&at)?;
        }
        Ok(())
    }

    /// Checks one server found at `at` (e.g. `tools[1]`): at most one of
    /// `command` (non-empty) or `url` (`http://` or `https://`), and `env`
    /// only beside a `command`.
    pub fn validate(&self, at: &str) -> Result<(), FlowError> {
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => {
                return Err(FlowError::new(
                    at.to_owned(),
                    "expected exactly one of `command` or `url`, got both",
                ));
            }
            // A reference: the runtime provides the server by name (an
            // in-process server, or one its configuration declares).
            (None, None) => {
                if !self.env.is_empty() {
                    return Err(FlowError::new(
                        format!("{at}.env"),
                        "expected `env` only beside a `command`, got it on a server with \
                         neither `command` nor `url`",
                    ));
                }
            }
            (Some(command), None) => {
                if command
                    .first()
                    .is_none_or(|program| program.value().trim().is_empty())
                {
                    return Err(FlowError::new(
                        format!("{at}.command"),
                        "expected a program and its arguments, got no program",
                    ));
                }
            }
            (None, Some(url)) => {
                let host = url
                    .strip_prefix("https://")
                    .or_else(|| url.strip_prefix("http://"));
                if host.is_none_or(str::is_empty) {
                    // The value itself is not echoed: a URL may carry a
                    // password, and this message reaches clients and logs.
                    let got = match (host, url.split_once("://")) {
                        (Some(_), _) => "no host".to_owned(),
                        (None, Some((scheme, _))) => format!("the scheme {scheme:?}"),
                        (None, None) => "no `scheme://`".to_owned(),
                    };
                    return Err(FlowError::new(
                        format!("{at}.url"),
                        format!("expected an http:// or https:// address, got {got}"),
                    ));
                }
            }
        }
        if self.url.is_some() && !self.env.is_empty() {
            return Err(FlowError::new(
                format!("{at}.env"),
                "expected `env` only beside a `command`, got it beside a `url`",
            ));
        }
        Ok(())
    }
}

/// A kind of worker the run may spawn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerKind {
    /// The worker's system prompt.
    pub prompt: String,
    /// Steps of the worker's loop; 0 = unlimited.
    pub max_steps: u32,
    /// Names of tool servers it may use; `None` = all of the flow's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Milestones the worker reports as it reaches them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub milestones: Vec<String>,
    /// The most tokens one model answer of this worker may hold; None: the
    /// flow's `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

/// A flow that was refused: names the path of the offending key (e.g.
/// `leases.tool_call`, `workers.research.max_steps`, `tools[1].command`; `.`
/// for the document itself) and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("flow refused at `{path}`: {message}")]
pub struct FlowError {
    /// The offending key's path.
    pub path: String,
    /// What was wrong with it.
    pub message: String,
}

impl FlowError {
    /// A refusal of the key at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl Flow {
    /// Semantic checks after parsing, each naming the path: name and task
    /// non-empty; each tool server has at most one of `command` (non-empty)
    /// or `url` (`http://` or `https://`), and `env` only with a `command`
    /// (a server with neither is a reference); server names unique and non-empty;
    /// a worker's `tools` only names declared servers; worker prompt
    /// non-empty; durations above 0 and at most
    /// [`MAX_DURATION`](crate::MAX_DURATION) (30 days); `free_renewals` ≤ `max_renewals` when
    /// both given; `jitter` in `[0, 1]`; `backoff_max` ≥ `backoff_initial`
    /// when both given; milestone names non-empty and unique;
    /// `budget.max_extensions` at most [`MAX_EXTENSIONS`](crate::MAX_EXTENSIONS)
    /// (3); leases at least [`MIN_LEASE`](crate::MIN_LEASE) (10 ms);
    /// `notify` names at most [`MAX_NOTIFY`] receivers, each once;
    /// `max_tokens` (the flow's and each worker kind's) from 1 to
    /// [`MAX_ANSWER_TOKENS`].
    pub fn validate(&self) -> Result<(), FlowError> {
        not_blank("name", &self.name)?;
        not_blank("task", &self.task)?;
        answer_tokens_valid("max_tokens", self.max_tokens)?;
        self.validate_tools()?;
        milestones_valid("milestones", &self.milestones)?;
        for (name, worker) in &self.workers {
            self.validate_worker(name, worker)?;
        }
        self.leases.validate()?;
        overrides::in_range("retention", self.retention)?;
        self.validate_notify()?;
        self.supervision.validate()?;
        self.budget.validate()
    }

    /// `notify`: at most [`MAX_NOTIFY`] receivers, each named once, by a
    /// name that is not blank.
    fn validate_notify(&self) -> Result<(), FlowError> {
        if self.notify.len() > MAX_NOTIFY {
            return Err(FlowError::new(
                "notify",
                format!("{} receivers; at most {MAX_NOTIFY}", self.notify.len()),
            ));
        }
        for (i, name) in self.notify.iter().enumerate() {
            not_blank(&format!("notify[{i}]"), name)?;
            if self.notify[..i].contains(name) {
                return Err(FlowError::new(
                    format!("notify[{i}]"),
                    format!("{name:?} is named twice"),
                ));
            }
        }
        Ok(())
    }

    fn validate_tools(&self) -> Result<(), FlowError> {
        ToolServer::validate_all(&self.tools)
    }

    fn validate_worker(&self, name: &str, worker: &WorkerKind) -> Result<(), FlowError> {
        if name.trim().is_empty() {
            return Err(FlowError::new(
                "workers",
                "expected worker kind names that are not empty, got an empty one",
            ));
        }
        let at = format!("workers.{name}");
        not_blank(&format!("{at}.prompt"), &worker.prompt)?;
        answer_tokens_valid(&format!("{at}.max_tokens"), worker.max_tokens)?;
        if let Some(tools) = &worker.tools {
            for (j, tool) in tools.iter().enumerate() {
                if !self.tools.iter().any(|server| server.name == *tool) {
                    return Err(FlowError::new(
                        format!("{at}.tools[{j}]"),
                        format!(
                            "expected the name of a tool server declared in `tools`, got {tool:?}"
                        ),
                    ));
                }
            }
        }
        milestones_valid(&format!("{at}.milestones"), &worker.milestones)
    }

    /// The lease configuration with this flow's overrides applied on `base`.
    pub fn lease_config(&self, base: LeaseConfig) -> LeaseConfig {
        let o = &self.leases;
        LeaseConfig {
            model_stream: o.model_stream.unwrap_or(base.model_stream),
            model_blocking: o.model_blocking.unwrap_or(base.model_blocking),
            tool_call: o.tool_call.unwrap_or(base.tool_call),
            worker_step: o.worker_step.unwrap_or(base.worker_step),
            max_renewals: o.max_renewals.unwrap_or(base.max_renewals),
            min: base.min,
            ceiling: base.ceiling,
        }
    }

    /// The watchdog configuration with `free_renewals` and
    /// `evidence_renewals` overridden.
    pub fn watchdog_config(&self, base: &WatchdogConfig) -> WatchdogConfig {
        WatchdogConfig {
            free_renewals: self.leases.free_renewals.unwrap_or(base.free_renewals),
            evidence_renewals: self
                .leases
                .evidence_renewals
                .unwrap_or(base.evidence_renewals),
            policy: match &self.leases.policy {
                Some(choice) => choice.over(&base.policy),
                None => base.policy.clone(),
            },
            pace: self.leases.pace.unwrap_or(base.pace),
            ..base.clone()
        }
    }

    /// Whether tool `tool` of server `server` is known idempotent (`None` =
    /// unknown).
    pub fn tool_idempotency(&self, server: &str, tool: &str) -> Option<bool> {
        self.tools
            .iter()
            .find(|s| s.name == server)
            .and_then(|s| s.idempotent.get(tool).copied())
    }
}

fn not_blank(path: &str, value: &str) -> Result<(), FlowError> {
    if value.trim().is_empty() {
        return Err(FlowError::new(
            path,
            "expected a non-empty string, got an empty one",
        ));
    }
    Ok(())
}

fn milestones_valid(path: &str, milestones: &[String]) -> Result<(), FlowError> {
    let mut seen = BTreeSet::new();
    for (i, milestone) in milestones.iter().enumerate() {
        let at = format!("{path}[{i}]");
        not_blank(&at, milestone)?;
        if !seen.insert(milestone.as_str()) {
            return Err(FlowError::new(
                at,
                format!("expected unique milestone names, got {milestone:?} twice"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn minimal() -> Flow {
        serde_json::from_str(r#"{"name": "n", "task": "t", "max_steps": 0}"#).unwrap()
    }

    #[test]
    fn durations_round_trip_as_humantime_strings() {
        let mut flow = minimal();
        flow.leases.tool_call = Some(Duration::from_secs(30));
        flow.supervision.backoff_initial = Some(Duration::from_millis(250));
        let json = serde_json::to_value(&flow).unwrap();
        assert_eq!(json["leases"]["tool_call"], "30s");
        assert_eq!(json["supervision"]["backoff_initial"], "250ms");
        assert_eq!(serde_json::from_value::<Flow>(json).unwrap(), flow);
    }

    #[test]
    fn a_bad_duration_string_fails_deserialization() {
        let err = serde_json::from_str::<LeaseOverrides>(r#"{"tool_call": "fast"}"#).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(r#"expected a duration such as "250ms", "90s" or "5m", got "fast""#),
            "{err}"
        );
    }

    #[test]
    fn defaults_stream_and_keep_the_base_configuration() {
        let flow = minimal();
        assert!(flow.stream);
        flow.validate().unwrap();
        assert_eq!(
            flow.lease_config(LeaseConfig::default()),
            LeaseConfig::default()
        );
        assert_eq!(
            flow.watchdog_config(&WatchdogConfig::default()),
            WatchdogConfig::default()
        );
    }

    #[test]
    fn zero_durations_and_bad_jitter_are_refused_by_path() {
        let mut flow = minimal();
        flow.supervision.window = Some(Duration::ZERO);
        assert_eq!(flow.validate().unwrap_err().path, "supervision.window");
        flow.supervision.window = None;
        flow.supervision.jitter = Some(f64::NAN);
        assert_eq!(flow.validate().unwrap_err().path, "supervision.jitter");
        flow.supervision.jitter = Some(1.0);
        flow.supervision.backoff_initial = Some(Duration::from_secs(2));
        flow.supervision.backoff_max = Some(Duration::from_secs(1));
        assert_eq!(flow.validate().unwrap_err().path, "supervision.backoff_max");
    }

    #[test]
    fn milestones_must_be_unique_and_named() {
        let mut flow = minimal();
        flow.milestones = vec!["a".into(), "a".into()];
        assert_eq!(flow.validate().unwrap_err().path, "milestones[1]");
        flow.milestones = vec![" ".into()];
        assert_eq!(flow.validate().unwrap_err().path, "milestones[0]");
    }
}
