//! Where the model client connects, per role, and its two timeouts.
//!
//! Two roles: `default`, the model every loop calls, and `fast`, the cheap
//! model the watchdog and the budget checkpoints ask (it falls back to the
//! default endpoint when none is configured). There are exactly two
//! timeouts, and neither covers a whole request: a *connect* timeout and an
//! *idle* timeout between chunks. How long a live call may take is the
//! lease's decision alone.
//!
//! [`ModelSettings::from_env`] reads the `LEASEHOLD_MODEL_*` variables; every
//! refusal names the variable and what it expected.

use std::time::Duration;

use crate::ConfigError;

/// `max_tokens` of a judge's call by default (`watchdog.max_tokens`,
/// `budget.checkpoint_max_tokens`): a verdict's JSON with a one-sentence
/// reason and a nudge fits in a hundred; 256 leaves room for a model that
/// says a little more.
pub(crate) const JUDGE_MAX_TOKENS: u32 = 256;

/// Judge calls in flight at once on the evaluator's endpoint by default
/// (`watchdog.max_concurrent_calls`): one, so that the judge takes at most
/// one of a local server's slots from the work it judges.
pub(crate) const JUDGE_MAX_IN_FLIGHT: u32 = 1;

/// The variable of the default role's base URL.
pub const ENV_BASE_URL: &str = "LEASEHOLD_MODEL_BASE_URL";
/// The variable of the default role's model name.
pub const ENV_NAME: &str = "LEASEHOLD_MODEL_NAME";
/// The variable of the default role's API key.
pub const ENV_API_KEY: &str = "LEASEHOLD_MODEL_API_KEY";
/// The variable of the fast role's base URL.
pub const ENV_FAST_BASE_URL: &str = "LEASEHOLD_FAST_MODEL_BASE_URL";
/// The variable of the fast role's model name.
pub const ENV_FAST_NAME: &str = "LEASEHOLD_FAST_MODEL_NAME";
/// The variable of the fast role's API key.
pub const ENV_FAST_API_KEY: &str = "LEASEHOLD_FAST_MODEL_API_KEY";
/// The most tokens of an answer of role `default`.
pub const ENV_MAX_TOKENS: &str = "LEASEHOLD_MODEL_MAX_TOKENS";
/// The most tokens of an answer of role `fast`.
pub const ENV_FAST_MAX_TOKENS: &str = "LEASEHOLD_FAST_MODEL_MAX_TOKENS";
/// The variable of the idle timeout.
pub const ENV_IDLE_TIMEOUT: &str = "LEASEHOLD_MODEL_IDLE_TIMEOUT";
/// The variable of the connect timeout.
pub const ENV_CONNECT_TIMEOUT: &str = "LEASEHOLD_MODEL_CONNECT_TIMEOUT";
/// The variable of the number of retries after a 429.
pub const ENV_RATE_LIMIT_RETRIES: &str = "LEASEHOLD_MODEL_RATE_LIMIT_RETRIES";
/// The configuration key of [`ModelSettings::max_answer_bytes`].
pub const KEY_MAX_ANSWER: &str = "limits.model_answer";
/// The variable of [`ModelSettings::max_answer_bytes`].
pub const ENV_MAX_ANSWER: &str = "LEASEHOLD_LIMITS_MODEL_ANSWER";
/// The configuration key of [`ModelSettings::max_body_bytes`].
pub const KEY_MAX_BODY: &str = "limits.model_body";
/// The variable of [`ModelSettings::max_body_bytes`].
pub const ENV_MAX_BODY: &str = "LEASEHOLD_LIMITS_MODEL_BODY";
/// The default cap on one model answer: 4 MiB of content, tool-call names
/// and arguments, and reasoning.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// The default cap on the body of a non-streamed (blocking) answer: 8 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Which model a call goes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ModelRole {
    /// The model the loops call.
    #[default]
    Default,
    /// The cheap model that judges leases and budgets.
    Fast,
}

/// One OpenAI-compatible endpoint: requests go to
/// `{base_url}/chat/completions`, with `Authorization: Bearer {api_key}`
/// when a key is set.
#[derive(Clone, PartialEq, Eq)]
pub struct ModelEndpoint {
    /// The API's base, e.g. `https://api.openai.com/v1` or
    /// `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// The model's name, sent as `model`.
    pub model: String,
    /// The bearer token, if the server wants one.
    pub api_key: Option<String>,
    /// The most tokens of an answer, sent as `max_tokens` when a request
    /// sets none of its own; none: the server's own limit.
    pub max_tokens: Option<u32>,
}

impl ModelEndpoint {
    /// An endpoint without an API key.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            max_tokens: None,
        }
    }

    /// The same endpoint, its answers at most `max_tokens` long.
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// The same endpoint, with `api_key`.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(api_key.into());
        self
    }

    /// The chat-completions URL.
    pub fn chat_completions_url(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }

    fn validate(&self, url_field: &str, name_field: &str) -> Result<(), ConfigError> {
        let url = self.base_url.trim();
        let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
        if !scheme_ok || url.len() <= "https://".len() {
            return Err(ConfigError::new(
                url_field,
                "an http:// or https:// base URL of an OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1",
                // A URL is not echoed as written: it may carry a password.
                if url.contains("://") {
                    format!("{:?}", crate::secret::redact_url(&self.base_url))
                } else {
                    format!("{:?}", self.base_url)
                },
            ));
        }
        if self.model.trim().is_empty() {
            return Err(ConfigError::new(
                name_field,
                "a model name, e.g. gpt-4o-mini",
                "an empty name",
            ));
        }
        Ok(())
    }
}

/// A most number of tokens read from `name`, if set.
fn tokens(name: &str, value: Option<String>) -> Result<Option<u32>, ConfigError> {
    let Some(value) = value else { return Ok(None) };
    match value.trim().parse::<u32>() {
        Ok(n) if (1..=leasehold_actors::MAX_ANSWER_TOKENS).contains(&n) => Ok(Some(n)),
        _ => Err(ConfigError::new(
            name,
            "a number of tokens from 1 to 1000000 such as 4096",
            format!("{value:?}"),
        )),
    }
}

impl std::fmt::Debug for ModelEndpoint {
    // The key, and the URL's credentials, stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelEndpoint")
            .field("base_url", &crate::secret::redact_url(&self.base_url))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

/// The model client's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSettings {
    /// The endpoint of role `default`.
    pub default: ModelEndpoint,
    /// The endpoint of role `fast`; `None` means the default endpoint.
    pub fast: Option<ModelEndpoint>,
    /// How long establishing a connection may take (default 10 s).
    pub connect_timeout: Duration,
    /// How long the server may stay silent while an answer is expected
    /// (default 60 s): between SSE chunks of a stream (from the moment the
    /// request is sent), between body bytes of a blocking answer (from its
    /// headers on). Never a bound on the whole call.
    pub idle_timeout: Duration,
    /// How many times a call answered 429 is retried, after waiting as the
    /// server said (default 3).
    pub rate_limit_retries: u32,
    /// The most one answer may hold, in bytes: its content, its tool calls'
    /// names and arguments and its reasoning, together (default
    /// [`DEFAULT_MAX_ANSWER_BYTES`], 4 MiB; configuration key
    /// `limits.model_answer`). It also bounds one line and one event of a
    /// stream (the cap plus 64 KiB for the JSON around the text). Past it
    /// the call ends at once with an error naming the cap and the endpoint;
    /// nothing past it counts as evidence.
    pub max_answer_bytes: usize,
    /// The most the body of a non-streamed answer may hold, in bytes
    /// (default [`DEFAULT_MAX_BODY_BYTES`], 8 MiB; configuration key
    /// `limits.model_body`). Past it the call ends at once with an error
    /// naming the cap and the endpoint.
    pub max_body_bytes: usize,
}

impl ModelSettings {
    /// Settings with one endpoint for both roles and the default timeouts.
    pub fn new(default: ModelEndpoint) -> Self {
        Self {
            default,
            fast: None,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            rate_limit_retries: 3,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }

    /// The same settings with a `fast` endpoint.
    pub fn with_fast(mut self, fast: ModelEndpoint) -> Self {
        self.fast = Some(fast);
        self
    }

    /// The endpoint serving `role`.
    pub fn endpoint(&self, role: ModelRole) -> &ModelEndpoint {
        match role {
            ModelRole::Default => &self.default,
            ModelRole::Fast => self.fast.as_ref().unwrap_or(&self.default),
        }
    }

    /// Refuses a base URL that is not http(s), an empty model name, zero
    /// timeouts and zero caps, naming the variable that sets each.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.default.validate(ENV_BASE_URL, ENV_NAME)?;
        if let Some(fast) = &self.fast {
            fast.validate(ENV_FAST_BASE_URL, ENV_FAST_NAME)?;
        }
        for (field, value) in [
            (ENV_CONNECT_TIMEOUT, self.connect_timeout),
            (ENV_IDLE_TIMEOUT, self.idle_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::new(field, "a duration above 0", "0"));
            }
        }
        for (field, value) in [
            (KEY_MAX_ANSWER, self.max_answer_bytes),
            (KEY_MAX_BODY, self.max_body_bytes),
        ] {
            if value == 0 {
                return Err(ConfigError::new(field, "a size above 0 bytes", "0"));
            }
        }
        Ok(())
    }

    /// Reads the settings from the process environment. See
    /// [`ModelSettings::from_lookup`].
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `lookup` (a variable's value, or `None`
    /// when unset; an empty value counts as unset):
    ///
    /// | variable | meaning | default |
    /// |---|---|---|
    /// | `LEASEHOLD_MODEL_BASE_URL` | base URL of role `default` | required |
    /// | `LEASEHOLD_MODEL_NAME` | model of role `default` | required |
    /// | `LEASEHOLD_MODEL_API_KEY` | bearer key of role `default` | none |
    /// | `LEASEHOLD_FAST_MODEL_BASE_URL` | base URL of role `fast` | the default role's |
    /// | `LEASEHOLD_FAST_MODEL_NAME` | model of role `fast` | the default role's |
    /// | `LEASEHOLD_FAST_MODEL_API_KEY` | bearer key of role `fast` | the default role's |
    /// | `LEASEHOLD_MODEL_CONNECT_TIMEOUT` | connect timeout | `10s` |
    /// | `LEASEHOLD_MODEL_IDLE_TIMEOUT` | idle timeout between chunks | `60s` |
    /// | `LEASEHOLD_MODEL_RATE_LIMIT_RETRIES` | retries after a 429 | `3` |
    ///
    /// Durations are written like `250ms`, `90s`, `5m`. The fast role exists
    /// as its own endpoint only when one of its variables is set.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::model::{ModelRole, ModelSettings};
    ///
    /// let env = |name: &str| match name {
    ///     "LEASEHOLD_MODEL_BASE_URL" => Some("http://127.0.0.1:8000/v1".to_owned()),
    ///     "LEASEHOLD_MODEL_NAME" => Some("big".to_owned()),
    ///     "LEASEHOLD_FAST_MODEL_NAME" => Some("small".to_owned()),
    ///     "LEASEHOLD_MODEL_IDLE_TIMEOUT" => Some("90s".to_owned()),
    ///     _ => None,
    /// };
    /// let settings = ModelSettings::from_lookup(env)?;
    /// assert_eq!(settings.endpoint(ModelRole::Fast).model, "small");
    /// assert_eq!(settings.endpoint(ModelRole::Fast).base_url, "http://127.0.0.1:8000/v1");
    /// assert_eq!(settings.idle_timeout, Duration::from_secs(90));
    /// # Ok::<(), leasehold::ConfigError>(())
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let required = |name: &str, expected: &str| {
            get(name)
                .ok_or_else(|| ConfigError::new(name, expected, "nothing (the variable is unset)"))
        };
        let default = ModelEndpoint {
            base_url: required(
                ENV_BASE_URL,
                "the base URL of an OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1",
            )?,
            model: required(ENV_NAME, "a model name, e.g. gpt-4o-mini")?,
            api_key: get(ENV_API_KEY),
            max_tokens: tokens(ENV_MAX_TOKENS, get(ENV_MAX_TOKENS))?,
        };
        let fast_max_tokens = tokens(ENV_FAST_MAX_TOKENS, get(ENV_FAST_MAX_TOKENS))?;
        let fast_vars = [
            ENV_FAST_BASE_URL,
            ENV_FAST_NAME,
            ENV_FAST_API_KEY,
            ENV_FAST_MAX_TOKENS,
        ];
        let fast = fast_vars
            .iter()
            .any(|name| get(name).is_some())
            .then(|| ModelEndpoint {
                base_url: get(ENV_FAST_BASE_URL).unwrap_or_else(|| default.base_url.clone()),
                model: get(ENV_FAST_NAME).unwrap_or_else(|| default.model.clone()),
                api_key: get(ENV_FAST_API_KEY).or_else(|| default.api_key.clone()),
                max_tokens: fast_max_tokens.or(default.max_tokens),
            });
        let mut settings = Self::new(default);
        settings.fast = fast;
        if let Some(value) = get(ENV_CONNECT_TIMEOUT) {
            settings.connect_timeout = duration(ENV_CONNECT_TIMEOUT, &value)?;
        }
        if let Some(value) = get(ENV_IDLE_TIMEOUT) {
            settings.idle_timeout = duration(ENV_IDLE_TIMEOUT, &value)?;
        }
        if let Some(value) = get(ENV_RATE_LIMIT_RETRIES) {
            settings.rate_limit_retries = value.trim().parse().map_err(|_| {
                ConfigError::new(
                    ENV_RATE_LIMIT_RETRIES,
                    "a whole number of retries, e.g. 3",
                    format!("{value:?}"),
                )
            })?;
        }
        settings.validate()?;
        Ok(settings)
    }
}

fn duration(variable: &str, value: &str) -> Result<Duration, ConfigError> {
    let parsed = humantime::parse_duration(value.trim()).map_err(|e| {
        ConfigError::new(
            variable,
            "a duration above 0 such as 250ms, 90s or 5m",
            format!("{value:?} ({e})"),
        )
    })?;
    if parsed.is_zero() {
        return Err(ConfigError::new(
            variable,
            "a duration above 0 such as 250ms, 90s or 5m",
            format!("{value:?}"),
        ));
    }
    Ok(parsed)
}
