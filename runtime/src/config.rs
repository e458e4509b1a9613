//! leasehold's configuration: every duration and cap in one [`Config`], read
//! from defaults, then a TOML file, then `LEASEHOLD_*` environment variables,
//! each value remembering where it came from.
//!
//! Every key has a file key (`lease.tool_call`) and an environment variable
//! named after it (`LEASEHOLD_LEASE_TOOL_CALL`); [`Config::keys`] lists them
//! all, each with the field it sets, and `docs/configuration.md` holds the
//! table [`Config::keys_table`] writes from them. Durations are written
//! in human form (`250ms`, `90s`, `5m`). Every refusal names the variable or
//! the file key and what it expected; the file refuses unknown keys, so a
//! misspelt key is an error rather than a silently ignored default.
//!
//! [`Config::timing`] writes down the arithmetic of a lease kind — when the
//! first evaluation happens, when the renewal cap cuts, how many attempts the
//! restart strategy allows and the worst-case wall time — so that nobody has
//! to work it out from the defaults by hand.
//!
//! ```
//! use leasehold::config::{Config, Source};
//! use leasehold::LeaseKind;
//!
//! let env = |name: &str| (name == "LEASEHOLD_LEASE_TOOL_CALL").then(|| "90s".to_owned());
//! let config = Config::load(None, env)?;
//! assert_eq!(config.lease_tool_call.value.as_secs(), 90);
//! assert_eq!(config.lease_tool_call.source, Source::Env("LEASEHOLD_LEASE_TOOL_CALL".into()));
//! println!("{}", config.timing(LeaseKind::ToolCall));
//! # Ok::<(), leasehold::config::LoadError>(())
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold_actors::{ConfigError, EngineConfig, OnExhausted, PolicyChoice, ToolServer};

use crate::model::{JUDGE_MAX_IN_FLIGHT, JUDGE_MAX_TOKENS, ModelRole};
use crate::store::Durability;

mod checks;
mod engine;
mod fields;
mod idle;
mod keyed;
mod keys;
pub(crate) mod tables;
mod text;
mod timing;
mod wiring;

pub use fields::ValueKind;
use keys::KEYS;
pub use keys::{Bound, KEYS_TABLE_END, KEYS_TABLE_START, Key, OldName};

pub use crate::server_limits::ServerLimits;
pub use engine::EngineSetupError;
pub use idle::IDLE_TIMEOUT_FORMULA;
pub use keyed::MAX_KEYED_LIMITS;
pub use timing::{Timing, WORST_CASE_FORMULA, compact};

/// The variable naming the configuration file, when none is given.
pub const ENV_CONFIG: &str = "LEASEHOLD_CONFIG";

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// The configuration file at this path.
    File(PathBuf),
    /// The environment variable of this name.
    Env(String),
    /// The command-line flag, as given (`--data-dir`, `--set lease.tool_call`).
    Flag(String),
    /// Worked out from other values, by this formula (a key left unset whose
    /// default depends on others: `model.idle_timeout`).
    Derived(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::File(path) => write!(f, "file {}", path.display()),
            Self::Env(name) => write!(f, "env {name}"),
            Self::Flag(flag) => write!(f, "flag {flag}"),
            Self::Derived(formula) => write!(f, "derived: {formula}"),
        }
    }
}

/// A key given by its old name ([`Key::old`]): read all the same, and
/// warned about by [`Config::warnings`], naming the new name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renamed {
    /// The old name as it was given: a variable, or a file key (in the file
    /// or after `--set`).
    pub old: &'static str,
    /// The new name, of the same sort.
    pub new: &'static str,
    /// Where the old name was given.
    pub source: Source,
    /// Whether the new name was given there too: then the old one is
    /// ignored.
    pub ignored: bool,
}

impl fmt::Display for Renamed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (old, new) = (self.old, self.new);
        if self.ignored {
            write!(
                f,
                "{old} ({}) is the old name of {new}, which is given there too: {old} is \
                 ignored; remove it",
                self.source
            )
        } else {
            write!(
                f,
                "{old} ({}) is the old name of {new}: it is read as {new}, but write {new}",
                self.source
            )
        }
    }
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting<T> {
    /// The effective value.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

impl<T> Setting<T> {
    fn default(value: T) -> Self {
        Self {
            value,
            source: Source::Default,
        }
    }
}

/// The effective configuration: every duration and cap, each with where it
/// came from.
///
/// Each field is set and read through its key's row in the key table
/// ([`Config::keys`]), which names the field once: a new key is a field
/// here, its default in [`Default`], and one row there.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Lease of a streaming model call (`LEASEHOLD_LEASE_MODEL_STREAM`).
    pub lease_model_stream: Setting<Duration>,
    /// Lease of a blocking model call (`LEASEHOLD_LEASE_MODEL_BLOCKING`).
    pub lease_model_blocking: Setting<Duration>,
    /// Lease of a tool call (`LEASEHOLD_LEASE_TOOL_CALL`).
    pub lease_tool_call: Setting<Duration>,
    /// Lease of a worker step (`LEASEHOLD_LEASE_WORKER_STEP`).
    pub lease_worker_step: Setting<Duration>,
    /// The shortest lease, of this configuration or a flow
    /// (`LEASEHOLD_LEASE_MIN`).
    pub lease_min: Setting<Duration>,
    /// The longest one operation may work, however fresh its evidence
    /// (`LEASEHOLD_LEASE_CEILING`).
    pub lease_ceiling: Setting<Duration>,
    /// Expiries renewed on the ladder, whatever the evidence and without
    /// the evaluator (`LEASEHOLD_WATCHDOG_FREE_RENEWALS`).
    pub free_renewals: Setting<u32>,
    /// The renewal cap (`LEASEHOLD_LEASE_MAX_RENEWALS`).
    pub max_renewals: Setting<u32>,
    /// Consecutive renewals on evidence alone before the evaluator is asked
    /// anyway (`LEASEHOLD_WATCHDOG_EVIDENCE_RENEWALS`).
    pub evidence_renewals: Setting<u32>,
    /// The verdict policy (`LEASEHOLD_WATCHDOG_POLICY`).
    pub watchdog_policy: Setting<PolicyChoice>,
    /// The share of repeated 3-grams above which a stream's evidence is
    /// suspicious (`LEASEHOLD_WATCHDOG_REPETITION_THRESHOLD`).
    pub repetition_threshold: Setting<Share>,
    /// The model role the watchdog asks (`LEASEHOLD_WATCHDOG_ROLE`).
    pub watchdog_role: Setting<ModelRole>,
    /// Timeout of one evaluation (`LEASEHOLD_EVALUATOR_TIMEOUT`).
    pub evaluator_timeout: Setting<Duration>,
    /// Budget extensions per loop (`LEASEHOLD_BUDGET_MAX_EXTENSIONS`).
    pub budget_max_extensions: Setting<u32>,
    /// `max_tokens` of a lease verdict (`LEASEHOLD_WATCHDOG_MAX_TOKENS`).
    pub watchdog_max_tokens: Setting<Option<u32>>,
    /// `max_tokens` of a budget checkpoint's decision
    /// (`LEASEHOLD_BUDGET_CHECKPOINT_MAX_TOKENS`).
    pub budget_checkpoint_max_tokens: Setting<Option<u32>>,
    /// Judge calls in flight at once on the evaluator's endpoint
    /// (`LEASEHOLD_WATCHDOG_MAX_CONCURRENT_CALLS`).
    pub watchdog_max_concurrent_calls: Setting<u32>,
    /// Workers one model answer may spawn (`LEASEHOLD_SPAWN_MAX_PER_ANSWER`).
    pub spawn_max_per_answer: Setting<u32>,
    /// Workers one run may start (`LEASEHOLD_SPAWN_MAX_PER_RUN`).
    pub spawn_max_per_run: Setting<u32>,
    /// How deep workers may nest (`LEASEHOLD_SPAWN_MAX_DEPTH`).
    pub spawn_max_depth: Setting<u32>,
    /// An executor's ownership of a run (`LEASEHOLD_RUN_LEASE_TTL`).
    pub run_lease_ttl: Setting<Duration>,
    /// Resume orphaned runs at boot (`LEASEHOLD_RESUME_ON_BOOT`).
    pub resume_on_boot: Setting<bool>,
    /// How often a serving executor claims queued runs
    /// (`LEASEHOLD_EXECUTOR_CLAIM_INTERVAL`).
    pub executor_claim_interval: Setting<Duration>,
    /// How long a finished run is kept, `None` for ever
    /// (`LEASEHOLD_EXECUTOR_RETENTION`).
    pub executor_retention: Setting<Option<Duration>>,
    /// The lag above which an expiring lease renews by `load`; zero: off
    /// (`LEASEHOLD_EXECUTOR_LOAD_BOUND`).
    pub executor_load_bound: Setting<Duration>,
    /// The lag under which a serving executor admits runs; zero: a fixed
    /// limit (`LEASEHOLD_EXECUTOR_LAG_TARGET`).
    pub executor_lag_target: Setting<Duration>,
    /// When a store write counts as done (`LEASEHOLD_DURABILITY`).
    pub durability: Setting<Durability>,
    /// The run store's directory (`LEASEHOLD_DATA_DIR`).
    pub data_dir: Setting<PathBuf>,
    /// The PostgreSQL run store, instead of sled at `data_dir`
    /// (`LEASEHOLD_STORE`).
    pub store_url: Setting<Option<String>>,
    /// The sled store's page cache, in bytes
    /// (`LEASEHOLD_SLED_CACHE_CAPACITY`).
    pub sled_cache_capacity: Setting<u64>,
    /// How long a run's store write that fails transiently is tried again
    /// (`LEASEHOLD_STORE_WRITE_RETRY_FOR`).
    pub store_write_retry_for: Setting<Duration>,
    /// What a run whose store write was given up does
    /// (`LEASEHOLD_STORE_ON_WRITE_FAILURE`).
    pub store_on_write_failure: Setting<leasehold_actors::OnStoreFailure>,
    /// Restarts allowed within the window, and of any one call
    /// (`LEASEHOLD_RESTART_MAX_RESTARTS`).
    pub restart_max: Setting<u32>,
    /// The restart intensity's window (`LEASEHOLD_RESTART_WINDOW`).
    pub restart_window: Setting<Duration>,
    /// The first backoff (`LEASEHOLD_RESTART_BACKOFF_INITIAL`).
    pub restart_backoff_initial: Setting<Duration>,
    /// The longest backoff (`LEASEHOLD_RESTART_BACKOFF_MAX`).
    pub restart_backoff_max: Setting<Duration>,
    /// What a failure at the top of the tree does
    /// (`LEASEHOLD_RESTART_ON_EXHAUSTED`).
    pub restart_on_exhausted: Setting<OnExhausted>,
    /// Calls in a row that cannot reach an endpoint before it is down
    /// (`LEASEHOLD_OUTAGE_FAILURES`).
    pub outage_failures: Setting<u32>,
    /// The first wait before a down endpoint is probed
    /// (`LEASEHOLD_OUTAGE_PROBE_INITIAL`).
    pub outage_probe_initial: Setting<Duration>,
    /// The longest wait between probes (`LEASEHOLD_OUTAGE_PROBE_MAX`).
    pub outage_probe_max: Setting<Duration>,
    /// Runs resumed at once when a down endpoint answers again
    /// (`LEASEHOLD_OUTAGE_RESUME_WAVE`).
    pub outage_resume_wave: Setting<u32>,
    /// The base URL of role `default` (`LEASEHOLD_MODEL_BASE_URL`).
    pub model_base_url: Setting<Option<String>>,
    /// The model of role `default` (`LEASEHOLD_MODEL_NAME`).
    pub model_name: Setting<Option<String>>,
    /// Its API key (`LEASEHOLD_MODEL_API_KEY`).
    pub model_api_key: Setting<Option<String>>,
    /// The base URL of role `fast` (`LEASEHOLD_FAST_MODEL_BASE_URL`).
    pub fast_model_base_url: Setting<Option<String>>,
    /// The model of role `fast` (`LEASEHOLD_FAST_MODEL_NAME`).
    pub fast_model_name: Setting<Option<String>>,
    /// Its API key (`LEASEHOLD_FAST_MODEL_API_KEY`).
    pub fast_model_api_key: Setting<Option<String>>,
    /// The most tokens of an answer of role `default`
    /// (`LEASEHOLD_MODEL_MAX_TOKENS`); none: the server's own limit.
    pub model_max_tokens: Setting<Option<u32>>,
    /// The same for role `fast` (`LEASEHOLD_FAST_MODEL_MAX_TOKENS`);
    /// none: the default role's.
    pub fast_model_max_tokens: Setting<Option<u32>>,
    /// Connecting to a model endpoint (`LEASEHOLD_MODEL_CONNECT_TIMEOUT`).
    pub model_connect_timeout: Setting<Duration>,
    /// Starting an MCP tool server and listing its tools, each
    /// (`LEASEHOLD_MCP_HANDSHAKE_TIMEOUT`).
    pub mcp_handshake_timeout: Setting<Duration>,
    /// Silence of a model endpoint mid-answer (`LEASEHOLD_MODEL_IDLE_TIMEOUT`)
    /// as set; `None` when it is not, and [`Config::idle_timeout`] derives it
    /// so that the watchdog judges a silent call first.
    pub model_idle_timeout: Setting<Option<Duration>>,
    /// Retries of a 429 (`LEASEHOLD_MODEL_RATE_LIMIT_RETRIES`).
    pub model_rate_limit_retries: Setting<u32>,
    /// Where `leasehold serve` listens (`LEASEHOLD_SERVER_ADDR`).
    pub server_addr: Setting<SocketAddr>,
    /// The HTTP API's bearer token (`LEASEHOLD_API_TOKEN`).
    pub api_token: Setting<Option<String>>,
    /// `Host` values accepted without a token besides the bound address
    /// (`LEASEHOLD_SERVER_ALLOWED_HOSTS`).
    pub server_allowed_hosts: Setting<Vec<String>>,
    /// Origins a browser request may come from besides the server's own
    /// (`LEASEHOLD_SERVER_ALLOWED_ORIGINS`).
    pub server_allowed_origins: Setting<Vec<String>>,
    /// Whether posted flows may carry tool servers' commands and addresses
    /// (`LEASEHOLD_SERVER_ALLOW_FLOW_TOOLS`).
    pub server_allow_flow_tools: Setting<bool>,
    /// Sending a request's headers (`LEASEHOLD_SERVER_HEADER_TIMEOUT`).
    pub server_header_timeout: Setting<Duration>,
    /// Sending a request's body (`LEASEHOLD_SERVER_BODY_TIMEOUT`).
    pub server_body_timeout: Setting<Duration>,
    /// Open connections (`LEASEHOLD_SERVER_MAX_CONNECTIONS`).
    pub server_max_connections: Setting<u32>,
    /// Open event streams (`LEASEHOLD_SERVER_MAX_EVENT_STREAMS`).
    pub server_max_event_streams: Setting<u32>,
    /// Live runs of this executor (`LEASEHOLD_SERVER_MAX_LIVE_RUNS`).
    pub server_max_live_runs: Setting<u32>,
    /// Queued runs in the store (`LEASEHOLD_SERVER_MAX_QUEUED_RUNS`).
    pub server_max_queued_runs: Setting<u32>,
    /// Shutdown's grace for requests (`LEASEHOLD_SERVER_SHUTDOWN_GRACE`).
    pub server_shutdown_grace: Setting<Duration>,
    /// One model answer, in bytes (`LEASEHOLD_LIMITS_MODEL_ANSWER`).
    pub limits_model_answer: Setting<u64>,
    /// One non-streamed model body, in bytes (`LEASEHOLD_LIMITS_MODEL_BODY`).
    pub limits_model_body: Setting<u64>,
    /// One tool result, in bytes (`LEASEHOLD_LIMITS_TOOL_RESULT`).
    pub limits_tool_result: Setting<u64>,
    /// One progress note, in bytes (`LEASEHOLD_LIMITS_PROGRESS_NOTE`).
    pub limits_progress_note: Setting<u64>,
    /// Stored progress per operation, at most one per this interval
    /// (`LEASEHOLD_LIMITS_PROGRESS_INTERVAL`).
    pub limits_progress_interval: Setting<Duration>,
    /// Events a run's log holds before progress is counted instead of
    /// stored (`LEASEHOLD_LIMITS_RUN_EVENTS`).
    pub limits_run_events: Setting<u32>,
    /// A flow's task, in bytes (`LEASEHOLD_LIMITS_TASK`).
    pub limits_task: Setting<u64>,
    /// A whole flow, in bytes (`LEASEHOLD_LIMITS_FLOW`).
    pub limits_flow: Setting<u64>,
    /// A person's text, in bytes (`LEASEHOLD_LIMITS_GUIDANCE`).
    pub limits_guidance: Setting<u64>,
    /// The tool servers flows may name, from the file's `[[tools]]`: the
    /// only ones a flow posted to `leasehold serve` may use (unless
    /// `server.allow_flow_tools`).
    pub tools: Vec<ToolServer>,
    /// What each model's tokens cost, from the file's `[prices."MODEL"]`
    /// tables (`input` and `output`, per million tokens): every model call
    /// and evaluator call is priced by its model's name.
    pub prices: leasehold_actors::Prices,
    /// The webhook receivers, from the file's `[webhooks.receivers.NAME]`
    /// tables (`url`, `secret`, `events`, `runs`): told by a serving
    /// executor when a run pauses for a person or ends.
    pub webhook_receivers: Vec<crate::webhooks::Receiver>,
    /// The limits on runs that share a key, from the file's
    /// `[keyed_limits.NAME]` tables (see [`KeyedLimit`](leasehold_actors::keyed_limits::KeyedLimit)).
    pub keyed_limits: Vec<leasehold_actors::keyed_limits::KeyedLimit>,
    /// Where webhooks' links point (`LEASEHOLD_WEBHOOKS_PUBLIC_URL`).
    pub webhooks_public_url: Setting<Option<String>>,
    /// One webhook request (`LEASEHOLD_WEBHOOKS_TIMEOUT`).
    pub webhooks_timeout: Setting<Duration>,
    /// The first wait before a webhook is retried
    /// (`LEASEHOLD_WEBHOOKS_RETRY_FIRST`).
    pub webhooks_retry_first: Setting<Duration>,
    /// The longest wait between retries (`LEASEHOLD_WEBHOOKS_RETRY_MAX`).
    pub webhooks_retry_max: Setting<Duration>,
    /// How old an undelivered notice may grow
    /// (`LEASEHOLD_WEBHOOKS_GIVE_UP_AFTER`).
    pub webhooks_give_up_after: Setting<Duration>,
    /// The file that was read, if any (`LEASEHOLD_CONFIG`).
    pub file: Option<PathBuf>,
    /// The keys given by an old name, each warned about.
    pub renamed: Vec<Renamed>,
}

/// A share from 0 to 1, such as `watchdog.repetition_threshold`. Never NaN,
/// so its equality is total.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Share(f64);

impl Eq for Share {}

impl Share {
    /// One half.
    pub const HALF: Self = Self(0.5);

    /// `value` if it is from 0 to 1.
    pub fn new(value: f64) -> Option<Self> {
        (0.0..=1.0).contains(&value).then_some(Self(value))
    }

    /// A share as written: `0.5`, `1`, `0`.
    pub fn parse(text: &str) -> Option<Self> {
        text.trim().parse::<f64>().ok().and_then(Self::new)
    }

    /// The value, from 0 to 1.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The largest size any size key accepts (1 GiB).
pub const MAX_SIZE: u64 = 1 << 30;

/// A value given on the command line: the file key it sets, the value, and
/// the flag as given (for [`Source::Flag`] and error messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flag {
    /// The file key, e.g. `lease.tool_call`.
    pub key: String,
    /// The value, as written.
    pub value: String,
    /// The flag, e.g. `--set lease.tool_call` or `--data-dir`.
    pub given_as: String,
}

impl Flag {
    /// Parses `KEY=VALUE`, the argument of `--set`.
    pub fn parse_set(text: &str) -> Result<Self, String> {
        let (key, value) = text
            .split_once('=')
            .ok_or_else(|| format!("--set {text}: expected KEY=VALUE, e.g. lease.tool_call=90s"))?;
        Ok(Self {
            key: key.trim().to_owned(),
            value: value.to_owned(),
            given_as: format!("--set {}", key.trim()),
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        let engine = EngineConfig::default();
        let lease = engine.supervision.lease;
        let restart = engine.restart;
        let model = crate::model::ModelSettings::new(crate::model::ModelEndpoint::new("", ""));
        let server = crate::server_limits::ServerLimits::default();
        let executor = crate::executor::ExecutorOptions::default();
        let run = crate::run_limits::RunLimits::default();
        Self {
            lease_model_stream: Setting::default(lease.model_stream),
            lease_model_blocking: Setting::default(lease.model_blocking),
            lease_tool_call: Setting::default(lease.tool_call),
            lease_worker_step: Setting::default(lease.worker_step),
            lease_min: Setting::default(engine.supervision.lease.min),
            lease_ceiling: Setting::default(engine.supervision.lease.ceiling),
            free_renewals: Setting::default(engine.supervision.watchdog.free_renewals),
            max_renewals: Setting::default(lease.max_renewals),
            evidence_renewals: Setting::default(engine.supervision.watchdog.evidence_renewals),
            watchdog_policy: Setting::default(engine.supervision.watchdog.policy.clone()),
            repetition_threshold: Setting::default(
                Share::new(engine.supervision.watchdog.repetition_threshold).unwrap_or(Share::HALF),
            ),
            watchdog_role: Setting::default(ModelRole::Fast),
            evaluator_timeout: Setting::default(engine.supervision.watchdog.evaluator_timeout),
            budget_max_extensions: Setting::default(engine.budget.max_extensions),
            watchdog_max_tokens: Setting::default(Some(JUDGE_MAX_TOKENS)),
            budget_checkpoint_max_tokens: Setting::default(Some(JUDGE_MAX_TOKENS)),
            watchdog_max_concurrent_calls: Setting::default(JUDGE_MAX_IN_FLIGHT),
            spawn_max_per_answer: Setting::default(engine.spawn.max_per_answer),
            spawn_max_per_run: Setting::default(engine.spawn.max_per_run),
            spawn_max_depth: Setting::default(engine.spawn.max_depth),
            run_lease_ttl: Setting::default(engine.run_lease_ttl),
            resume_on_boot: Setting::default(false),
            executor_claim_interval: Setting::default(crate::executor::DEFAULT_CLAIM_INTERVAL),
            executor_retention: Setting::default(engine.retention),
            executor_load_bound: Setting::default(engine.load_bound),
            executor_lag_target: Setting::default(crate::executor::DEFAULT_LAG_TARGET),
            durability: Setting::default(Durability::default()),
            data_dir: Setting::default(PathBuf::from(".leasehold")),
            store_url: Setting::default(None),
            sled_cache_capacity: Setting::default(crate::store::DEFAULT_CACHE_CAPACITY),
            store_write_retry_for: Setting::default(engine.store_writes.retry_for),
            store_on_write_failure: Setting::default(engine.store_writes.on_failure),
            restart_max: Setting::default(restart.max_restarts),
            restart_window: Setting::default(restart.window),
            restart_backoff_initial: Setting::default(restart.backoff_initial),
            restart_backoff_max: Setting::default(restart.backoff_max),
            restart_on_exhausted: Setting::default(restart.on_exhausted),
            outage_failures: Setting::default(engine.outages.failures),
            outage_probe_initial: Setting::default(engine.outages.probe_initial),
            outage_probe_max: Setting::default(engine.outages.probe_max),
            outage_resume_wave: Setting::default(
                u32::try_from(engine.outages.resume_wave).unwrap_or(u32::MAX),
            ),
            model_base_url: Setting::default(None),
            model_name: Setting::default(None),
            model_api_key: Setting::default(None),
            fast_model_base_url: Setting::default(None),
            fast_model_name: Setting::default(None),
            fast_model_api_key: Setting::default(None),
            model_max_tokens: Setting::default(None),
            fast_model_max_tokens: Setting::default(None),
            model_connect_timeout: Setting::default(model.connect_timeout),
            mcp_handshake_timeout: Setting::default(crate::tools::DEFAULT_HANDSHAKE_TIMEOUT),
            model_idle_timeout: Setting::default(None),
            model_rate_limit_retries: Setting::default(model.rate_limit_retries),
            server_addr: Setting::default(SocketAddr::from(([127, 0, 0, 1], 7878))),
            api_token: Setting::default(None),
            server_allowed_hosts: Setting::default(Vec::new()),
            server_allowed_origins: Setting::default(Vec::new()),
            server_allow_flow_tools: Setting::default(false),
            server_header_timeout: Setting::default(server.header_timeout),
            server_body_timeout: Setting::default(server.body_timeout),
            server_max_connections: Setting::default(server.max_connections),
            server_max_event_streams: Setting::default(server.max_event_streams),
            server_max_live_runs: Setting::default(executor.max_live_runs),
            server_max_queued_runs: Setting::default(executor.max_queued_runs),
            server_shutdown_grace: Setting::default(server.shutdown_grace),
            limits_model_answer: Setting::default(size(model.max_answer_bytes)),
            limits_model_body: Setting::default(size(model.max_body_bytes)),
            limits_tool_result: Setting::default(size(engine.max_tool_result_bytes)),
            limits_progress_note: Setting::default(size(engine.events.max_progress_note_bytes)),
            limits_progress_interval: Setting::default(engine.events.progress_interval),
            limits_run_events: Setting::default(
                u32::try_from(engine.events.max_run_events).unwrap_or(u32::MAX),
            ),
            limits_task: Setting::default(size(run.task)),
            limits_flow: Setting::default(size(run.flow)),
            limits_guidance: Setting::default(size(run.guidance)),
            tools: Vec::new(),
            prices: leasehold_actors::Prices::default(),
            webhook_receivers: Vec::new(),
            keyed_limits: Vec::new(),
            webhooks_public_url: Setting::default(None),
            webhooks_timeout: Setting::default(Duration::from_secs(10)),
            webhooks_retry_first: Setting::default(Duration::from_secs(5)),
            webhooks_retry_max: Setting::default(Duration::from_secs(3600)),
            webhooks_give_up_after: Setting::default(Duration::from_secs(3 * 24 * 3600)),
            file: None,
            renamed: Vec::new(),
        }
    }
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read the configuration file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not TOML.
    #[error("configuration file {}: not valid TOML: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// The file has a key leasehold does not know.
    #[error(
        "configuration file {}: unknown key `{key}` (see docs/configuration.md for the keys)",
        path.display()
    )]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The key's full path, e.g. `lease.tool_cal`.
        key: String,
    },
    /// A value that is not what its key expects.
    #[error("{origin}: expected {expected}, got {got}")]
    BadValue {
        /// The variable (`LEASEHOLD_LEASE_TOOL_CALL`) or the file and key
        /// (`leasehold.toml: lease.tool_call`).
        origin: String,
        /// What was expected.
        expected: &'static str,
        /// What was given.
        got: String,
    },
    /// A command-line flag names a key leasehold does not know.
    #[error(
        "{given_as}: unknown configuration key `{key}` (see docs/configuration.md for the keys)"
    )]
    UnknownFlagKey {
        /// The flag as given.
        given_as: String,
        /// The key.
        key: String,
    },
    /// A `[[tools]]` declaration that is not a tool server.
    #[error("configuration file {}: {path}: {message}", file.display())]
    BadToolServer {
        /// The file.
        file: PathBuf,
        /// Where in it, e.g. `tools[1].command`.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// A `[prices]` entry that is not a price.
    #[error("configuration file {}: {path}: {message}", file.display())]
    BadPrice {
        /// The file.
        file: PathBuf,
        /// Where in it, e.g. `prices."gpt-4o".input`.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// A `[webhooks.receivers]` entry that is not a receiver.
    #[error("configuration file {}: {path}: {message}", file.display())]
    BadWebhook {
        /// The file.
        file: PathBuf,
        /// Where in it, e.g. `webhooks.receivers."ops".secret`.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// A `[keyed_limits]` entry that is not a limit.
    #[error("configuration file {}: {path}: {message}", file.display())]
    BadKeyedLimit {
        /// The file.
        file: PathBuf,
        /// Where in it, e.g. `keyed_limits."provider".live`.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// Values that each parse but together defeat themselves.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

impl Config {
    /// Every key, with its variable, file key, default and meaning; the
    /// last is `LEASEHOLD_CONFIG`, which has no file key.
    pub fn keys() -> &'static [Key] {
        &KEYS
    }

    /// Every key as the Markdown table `docs/configuration.md` holds
    /// between [`KEYS_TABLE_START`] and [`KEYS_TABLE_END`]: the doc's table
    /// is this output, and a test fails when the two differ.
    pub fn keys_table() -> String {
        keys::markdown_table()
    }

    /// Loads defaults, then the TOML `file` (or, without one, the file named
    /// by `LEASEHOLD_CONFIG`), then the environment as seen through `env`,
    /// and validates the result.
    pub fn load(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, LoadError> {
        Self::load_layers(file, env, &[])
    }

    /// Loads defaults, then the TOML `file` (or the one `LEASEHOLD_CONFIG`
    /// names), then the environment, then `flags` from the command line, and
    /// validates the result.
    pub fn load_layers(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
        flags: &[Flag],
    ) -> Result<Self, LoadError> {
        let mut config = Self::default();
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| env(ENV_CONFIG).filter(|p| !p.is_empty()).map(PathBuf::from));
        if let Some(path) = file {
            let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Read {
                path: path.clone(),
                source,
            })?;
            config.apply_toml(&text, &path)?;
            config.file = Some(path);
        }
        for key in KEYS.iter().filter(|k| !k.file.is_empty()) {
            let value = env(key.env);
            if let Some(old) = key.old
                && let Some(old_value) = env(old.env)
            {
                let source = Source::Env(old.env.to_owned());
                config.renamed.push(Renamed {
                    old: old.env,
                    new: key.env,
                    source: source.clone(),
                    ignored: value.is_some(),
                });
                if value.is_none() {
                    config.set(key, &old_value, source, old.env)?;
                }
            }
            if let Some(value) = value {
                config.set(key, &value, Source::Env(key.env.to_owned()), key.env)?;
            }
        }
        for flag in flags {
            let Some((key, by_old_name)) = keys::by_file_key(&flag.key) else {
                return Err(LoadError::UnknownFlagKey {
                    given_as: flag.given_as.clone(),
                    key: flag.key.clone(),
                });
            };
            let source = Source::Flag(flag.given_as.clone());
            if by_old_name && let Some(old) = key.old {
                config.renamed.push(Renamed {
                    old: old.file,
                    new: key.file,
                    source: source.clone(),
                    ignored: false,
                });
            }
            config.set(key, &flag.value, source, &flag.given_as)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// [`Config::load`] with the process's environment.
    pub fn from_process_env(file: Option<&Path>) -> Result<Self, LoadError> {
        Self::load(file, |name| std::env::var(name).ok())
    }

    /// Applies the TOML `text` of the file at `path` over this
    /// configuration, refusing unknown keys.
    fn apply_toml(&mut self, text: &str, path: &Path) -> Result<(), LoadError> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| LoadError::Syntax {
                path: path.to_path_buf(),
                message: e.message().to_owned(),
            })?;
        let mut table = table;
        if let Some(tools) = table.remove("tools") {
            self.tools = tool_servers(tools, path)?;
        }
        if let Some(prices) = table.remove("prices") {
            self.prices = prices_of(prices, path)?;
        }
        if let Some(limits) = table.remove("keyed_limits") {
            self.keyed_limits = keyed::keyed_limits_of(limits).map_err(|(at, message)| {
                LoadError::BadKeyedLimit {
                    file: path.to_path_buf(),
                    path: at,
                    message,
                }
            })?;
        }
        if let Some(toml::Value::Table(webhooks)) = table.get_mut("webhooks")
            && let Some(receivers) = webhooks.remove("receivers")
        {
            self.webhook_receivers =
                crate::webhooks::receivers_of(receivers).map_err(|(at, message)| {
                    LoadError::BadWebhook {
                        file: path.to_path_buf(),
                        path: at,
                        message,
                    }
                })?;
        }
        let mut leaves = Vec::new();
        flatten("", &table, &mut leaves);
        let source = Source::File(path.to_path_buf());
        for (name, value) in &leaves {
            let Some((key, by_old_name)) = keys::by_file_key(name) else {
                return Err(LoadError::UnknownKey {
                    path: path.to_path_buf(),
                    key: name.clone(),
                });
            };
            if by_old_name && let Some(old) = key.old {
                let ignored = leaves.iter().any(|(other, _)| other == key.file);
                self.renamed.push(Renamed {
                    old: old.file,
                    new: key.file,
                    source: source.clone(),
                    ignored,
                });
                if ignored {
                    continue;
                }
            }
            let origin = format!("{}: {name}", path.display());
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) if key.kind == ValueKind::Share => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => {
                    return Err(LoadError::BadValue {
                        origin,
                        expected: key.kind.expected(),
                        got: other.to_string(),
                    });
                }
            };
            self.set(key, &text, source.clone(), &origin)?;
        }
        Ok(())
    }

    /// Parses `text` as `key`'s value and stores it with `source`, in the
    /// field its row names; a bad value is refused naming `origin`.
    fn set(
        &mut self,
        key: &Key,
        text: &str,
        source: Source,
        origin: &str,
    ) -> Result<(), LoadError> {
        key.slot
            .set(self, text, source)
            .map_err(|got| LoadError::BadValue {
                origin: origin.to_owned(),
                expected: key.kind.expected(),
                got,
            })
    }

    /// Every key (but `LEASEHOLD_CONFIG`) with its effective value, written
    /// as it would be configured, and where it came from.
    pub fn entries(&self) -> Vec<(Key, String, Source)> {
        KEYS.iter()
            .filter(|k| !k.file.is_empty())
            .map(|key| {
                let (value, source) = self.value_of(key);
                (*key, value, source.clone())
            })
            .collect()
    }

    /// `key`'s value as it would be configured, read from the field its
    /// row names (unset: its default text), and where it came from.
    fn value_of(&self, key: &Key) -> (String, &Source) {
        let (shown, source) = key.slot.show(self);
        (shown.unwrap_or_else(|| key.default.to_owned()), source)
    }
}

/// A size in memory as configured.
fn size(bytes: usize) -> u64 {
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// A comma-separated list, blanks dropped.
fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A size from 1 byte to [`MAX_SIZE`]: `65536`, `512KiB`, `4 MiB`.
pub fn parse_size(text: &str) -> Option<u64> {
    let bytes = text.trim().parse::<bytesize::ByteSize>().ok()?.as_u64();
    (1..=MAX_SIZE).contains(&bytes).then_some(bytes)
}

/// A size as it would be configured: `4MiB`, `512KiB`, or bytes.
pub fn format_size(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    match bytes {
        0 => "0".to_owned(),
        b if b % GIB == 0 => format!("{}GiB", b / GIB),
        b if b % MIB == 0 => format!("{}MiB", b / MIB),
        b if b % KIB == 0 => format!("{}KiB", b / KIB),
        b => b.to_string(),
    }
}

/// The file's `[[tools]]`: each a full tool server (a `command` or a
/// `url`), checked as a flow's `tools` are; errors name the entry and
/// field.
fn tool_servers(value: toml::Value, file: &Path) -> Result<Vec<ToolServer>, LoadError> {
    let bad = |path: String, message: String| LoadError::BadToolServer {
        file: file.to_path_buf(),
        path,
        message,
    };
    let toml::Value::Array(entries) = value else {
        return Err(bad(
            "tools".to_owned(),
            "expected an array of tables (`[[tools]]`)".to_owned(),
        ));
    };
    let mut servers: Vec<ToolServer> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let at = format!("tools[{i}]");
        let server: ToolServer = serde_path_to_error::deserialize(entry).map_err(|e| {
            let inner = e.path().to_string();
            let path = if inner == "." {
                at.clone()
            } else {
                format!("{at}.{inner}")
            };
            bad(path, e.inner().message().to_owned())
        })?;
        if server.is_reference() {
            return Err(bad(
                at,
                "expected a `command` (a stdio program and its arguments) or a `url` \
                 (streamable HTTP)"
                    .to_owned(),
            ));
        }
        servers.push(server);
    }
    ToolServer::validate_all(&servers).map_err(|e| bad(e.path, e.message))?;
    Ok(servers)
}

/// The most models `[prices]` may name.
pub const MAX_PRICED_MODELS: usize = 1024;

/// The file's `[prices."MODEL"]` tables: `input` and `output` per million
/// tokens, each a number from 0 to [`MAX_PRICE`](leasehold_actors::MAX_PRICE);
/// errors name the entry.
fn prices_of(value: toml::Value, file: &Path) -> Result<leasehold_actors::Prices, LoadError> {
    use leasehold_actors::{MAX_PRICE, Price};
    let bad = |path: String, message: String| LoadError::BadPrice {
        file: file.to_path_buf(),
        path,
        message,
    };
    let toml::Value::Table(models) = value else {
        return Err(bad(
            "prices".to_owned(),
            "expected a table of models (`[prices.\"MODEL\"]` with `input` and `output` per \
             million tokens)"
                .to_owned(),
        ));
    };
    if models.len() > MAX_PRICED_MODELS {
        return Err(bad(
            "prices".to_owned(),
            format!("{} models; at most {MAX_PRICED_MODELS}", models.len()),
        ));
    }
    let mut prices = Vec::with_capacity(models.len());
    for (model, entry) in models {
        let at = format!("prices.{}", toml::Value::String(model.clone()));
        let toml::Value::Table(mut entry) = entry else {
            return Err(bad(
                at,
                "expected a table with `input` and `output` per million tokens".to_owned(),
            ));
        };
        let mut figure = |name: &str| -> Result<f64, LoadError> {
            let value = entry.remove(name).ok_or_else(|| {
                bad(
                    at.clone(),
                    format!("missing `{name}` (the price of a million {name} tokens)"),
                )
            })?;
            let n = match value {
                toml::Value::Float(f) => f,
                // Checked against the bound below, far under 2^53.
                #[allow(clippy::cast_precision_loss)]
                toml::Value::Integer(i) => i as f64,
                other => {
                    return Err(bad(
                        format!("{at}.{name}"),
                        format!("expected a number, found {}", other.type_str()),
                    ));
                }
            };
            if !(n.is_finite() && (0.0..=MAX_PRICE).contains(&n)) {
                return Err(bad(
                    format!("{at}.{name}"),
                    format!("{n} is not a price: expected 0 to {MAX_PRICE} per million tokens"),
                ));
            }
            Ok(n)
        };
        let price = Price::per_million(figure("input")?, figure("output")?);
        if let Some(unknown) = entry.keys().next() {
            return Err(bad(
                format!("{at}.{unknown}"),
                "unknown key: a price has `input` and `output`".to_owned(),
            ));
        }
        prices.push((model, price));
    }
    Ok(leasehold_actors::Prices::new(prices))
}

fn key_of(file: &str) -> &'static Key {
    KEYS.iter()
        .find(|k| k.file == file)
        .unwrap_or(&KEYS[KEYS.len() - 1])
}

fn named(key: &Key) -> String {
    format!("{} ({})", key.env, key.file)
}

fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (name, value) in table {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        match value {
            toml::Value::Table(inner) => flatten(&path, inner, out),
            leaf => out.push((path, leaf.clone())),
        }
    }
}
