//! From a [`Config`] to an engine: the store it names, the model client on
//! its endpoints, the evaluator on its watchdog role, a factory of MCP
//! clients with its handshake timeout, and this executor's owner id — the
//! one place the command line, the demo and embedders build an engine from
//! configuration.
//!
//! The model client and the evaluator come with the `openai` feature, the
//! MCP clients with the `mcp` feature; a build without one leaves that part
//! of the builder to its caller.
//!
//! The supervision strategy comes with the engine's configuration: the
//! restart policy of `restart.*`, which each flow may override or replace
//! with its own `supervision.strategy`. Nothing here picks one of its own.

use std::sync::Arc;

use leasehold_actors::{
    ConfigError, DEFAULT_PROBE_INTERVAL, Engine, EngineBuilder, LoadGauge, Store, StoreError,
};

use super::Config;
#[cfg(feature = "openai")]
use crate::model::{JudgeBounds, ModelEvaluator, OpenAiClient, SetupError};
#[cfg(feature = "mcp")]
use crate::tools::{McpToolClient, ToolGroups};

/// Why an engine could not be set up from a [`Config`].
#[derive(Debug, thiserror::Error)]
pub enum EngineSetupError {
    /// The model endpoint is missing or refused (`model.base_url`,
    /// `model.name`, a `fast_model.*` key, a timeout or a cap), named by its
    /// variable.
    #[error(transparent)]
    Model(#[from] ConfigError),
    /// The model client could not be built from valid settings (its HTTP
    /// client could not start).
    #[cfg(feature = "openai")]
    #[error("the model client cannot be built: {0}")]
    ModelClient(#[from] SetupError),
    /// The run store at `data_dir` could not be opened (another process
    /// holds it, it is not a directory, its format is unknown).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Config {
    /// An engine builder with everything this configuration sets: the run
    /// store, the engine's policies ([`Config::engine_config`]), the model
    /// client ([`Config::model_settings`]), the evaluator on
    /// `watchdog.role`, a factory of MCP clients (one per run, each tool
    /// server's handshake bounded by `mcp.handshake_timeout`) and this
    /// process's [owner id](leasehold_actors::OwnerId::of_process). Add an event sink,
    /// tool servers or a clock of your own, then build.
    ///
    /// Without the `openai` feature the builder has no model client and no
    /// evaluator, and `model.*` is neither read nor required: give it yours
    /// ([`EngineBuilder::model`], [`EngineBuilder::evaluator`]). Without
    /// the `mcp` feature it has no factory of tool clients: give it yours
    /// ([`EngineBuilder::tool_factory`]).
    ///
    /// With the `store` feature the store is the sled store at `data_dir`,
    /// written with `durability` ([`Config::open_store`]); without it the
    /// runs are kept in memory (the engine's default) unless the builder is
    /// given a store. [`Config::engine_builder_with_store`] takes the store
    /// from the caller in every build.
    ///
    /// The model endpoint is checked before the store is opened, so a
    /// configuration without one touches no data directory.
    ///
    /// ```
    /// use leasehold::config::Config;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let data = tempfile::tempdir()?;
    /// let mut config = Config::default();
    /// config.model_base_url.value = Some("http://127.0.0.1:8000/v1".to_owned());
    /// config.model_name.value = Some("gpt-4o-mini".to_owned());
    /// config.data_dir.value = data.path().join("runs");
    ///
    /// let engine = config.engine_builder()?.build().await?;
    /// assert!(engine.owner_id().starts_with("leasehold@"));
    /// assert!(engine.store().list_runs().await?.is_empty());
    /// engine.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn engine_builder(&self) -> Result<EngineBuilder, EngineSetupError> {
        self.with_configured_store(self.engine_builder_without_store()?)
    }

    /// [`Config::engine_builder`], except that a configuration naming no
    /// model endpoint at all (neither `model.base_url` nor `model.name`)
    /// gives an engine that runs nothing
    /// ([`EngineBuilder::without_model`]): it lists, shows, follows and
    /// cancels stored runs, and refuses to start, resume, fork or claim
    /// one, naming the keys to set. What `leasehold serve` builds, so a
    /// server can browse stored runs without an endpoint. A half-set
    /// endpoint is refused as [`Config::engine_builder`] refuses it.
    pub fn engine_builder_for_serving(&self) -> Result<EngineBuilder, EngineSetupError> {
        #[cfg(feature = "openai")]
        if self.model_base_url.value.is_none() && self.model_name.value.is_none() {
            let builder = self.engine_builder_with_model(None).without_model(NO_MODEL);
            return self.with_configured_store(builder);
        }
        self.engine_builder()
    }

    /// `builder` on the configured store ([`Config::open_store`]) when this
    /// build has one; otherwise as it is (its runs kept in memory).
    fn with_configured_store(
        &self,
        builder: EngineBuilder,
    ) -> Result<EngineBuilder, EngineSetupError> {
        #[cfg(feature = "store")]
        let builder = builder.store(self.open_store()?);
        Ok(builder)
    }

    /// [`Config::engine_builder`] on `store` instead of the configured one
    /// (which is not opened).
    pub fn engine_builder_with_store(
        &self,
        store: Arc<dyn Store>,
    ) -> Result<EngineBuilder, EngineSetupError> {
        Ok(self.engine_builder_without_store()?.store(store))
    }

    /// Opens the run store: the PostgreSQL store at `store` when it is
    /// set (it connects on its first call), otherwise the sled store at
    /// `data_dir`, written with `durability`, its page cache bounded by
    /// `sled.cache_capacity`.
    ///
    /// First, whichever the store, it kills what the stdio tool servers of
    /// a SIGKILLed process on this data directory left running
    /// (`leasehold::tools::reap_leftover_groups`, with the `mcp` feature).
    #[cfg(feature = "store")]
    pub fn open_store(&self) -> Result<Arc<dyn Store>, EngineSetupError> {
        use crate::store::{SledConfig, SledStore};
        // Before anything else: what a killed process's tool servers left
        // running is killed, whichever store the runs are in. A build
        // without the MCP client starts no tool servers and keeps no ledger
        // of their process groups to reap from.
        #[cfg(feature = "mcp")]
        crate::tools::reap_leftover_groups(&self.data_dir.value);
        if let Some(url) = &self.store_url.value {
            return open_postgres(url);
        }
        let store = SledStore::open(
            SledConfig::new(self.data_dir.value.clone())
                .with_durability(self.durability.value)
                .with_cache_capacity(self.sled_cache_capacity.value),
        )?;
        Ok(Arc::new(store))
    }

    /// A gauge of this executor's scheduling lag, fed by a probe every
    /// [`DEFAULT_PROBE_INTERVAL`] (100 ms), when a rule reads it:
    /// `executor.load_bound` (leases renew by `load` while the executor is
    /// late) or `executor.lag_target` (a serving executor admits runs only
    /// while it is on time). `None` when both are off. Give it to the
    /// engine ([`EngineBuilder::load`]); `leasehold run` and `leasehold
    /// serve` do. One per process.
    ///
    /// The probe is a task of its own, so call this inside a Tokio runtime;
    /// it stops when the gauge and every clone of it are dropped.
    pub fn load_gauge(&self) -> Option<LoadGauge> {
        let used =
            !self.executor_load_bound.value.is_zero() || !self.executor_lag_target.value.is_zero();
        used.then(|| LoadGauge::probe(DEFAULT_PROBE_INTERVAL))
    }

    fn engine_builder_without_store(&self) -> Result<EngineBuilder, EngineSetupError> {
        // The model endpoint is checked first: a configuration without one
        // fails before anything else is built.
        #[cfg(feature = "openai")]
        let client = Some(OpenAiClient::new(self.model_settings()?)?);
        #[cfg(not(feature = "openai"))]
        let client = None;
        Ok(self.engine_builder_with_model(client))
    }

    /// What one judge call may cost: `watchdog.max_tokens`,
    /// `budget.checkpoint_max_tokens` and `watchdog.max_concurrent_calls`.
    #[cfg(feature = "openai")]
    pub fn judge_bounds(&self) -> JudgeBounds {
        let defaults = JudgeBounds::default();
        JudgeBounds {
            verdict_max_tokens: self
                .watchdog_max_tokens
                .value
                .unwrap_or(defaults.verdict_max_tokens),
            checkpoint_max_tokens: self
                .budget_checkpoint_max_tokens
                .value
                .unwrap_or(defaults.checkpoint_max_tokens),
            max_in_flight: self.watchdog_max_concurrent_calls.value,
        }
    }

    /// The builder with `client` (and its evaluator) when there is one.
    fn engine_builder_with_model(&self, client: Option<ModelClientOf>) -> EngineBuilder {
        let builder = Engine::builder()
            .config(self.engine_config())
            .owner_id(leasehold_actors::OwnerId::of_process());
        #[cfg(feature = "openai")]
        let builder = match client {
            Some(client) => {
                let evaluator = ModelEvaluator::with_role(&client, self.watchdog_role.value)
                    .with_bounds(self.judge_bounds());
                builder
                    .model(Arc::new(client))
                    .evaluator(Arc::new(evaluator))
            }
            None => builder,
        };
        #[cfg(not(feature = "openai"))]
        let _ = client;
        #[cfg(feature = "mcp")]
        let builder = builder.tool_factory(McpToolClient::factory_recorded(
            self.mcp_handshake_timeout.value,
            Some(Arc::new(ToolGroups::in_data_dir(&self.data_dir.value))),
        ));
        builder.tool_secrets(Arc::new(crate::secret::ConfiguredToolSecrets::new(
            self.tools.clone(),
        )))
    }
}

/// The model client this build makes from the configuration.
#[cfg(feature = "openai")]
type ModelClientOf = OpenAiClient;
/// This build makes no model client.
#[cfg(not(feature = "openai"))]
type ModelClientOf = std::convert::Infallible;

/// Why a server with no model endpoint configured runs nothing.
#[cfg(feature = "openai")]
const NO_MODEL: &str = "this server starts no runs: no model endpoint is configured. Set \
     `model.base_url` and `model.name` (LEASEHOLD_MODEL_BASE_URL and LEASEHOLD_MODEL_NAME, or \
     `[model]` in leasehold.toml) and restart it; until then it lists, shows, follows and \
     cancels the stored runs";

/// The PostgreSQL store at `url`.
#[cfg(all(feature = "store", feature = "postgres"))]
fn open_postgres(url: &str) -> Result<Arc<dyn Store>, EngineSetupError> {
    use crate::store::{PostgresConfig, PostgresStore};
    Ok(Arc::new(PostgresStore::open(PostgresConfig::new(url))?))
}

/// Refused: this build has no PostgreSQL store.
#[cfg(all(feature = "store", not(feature = "postgres")))]
fn open_postgres(url: &str) -> Result<Arc<dyn Store>, EngineSetupError> {
    Err(StoreError::invalid(format!(
        "`store` (LEASEHOLD_STORE) names a PostgreSQL store ({}), but this build of leasehold \
         has no `postgres` feature",
        crate::store::redact_url(url)
    ))
    .into())
}
