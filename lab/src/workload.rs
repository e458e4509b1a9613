//! The workload file: operations described by distribution, and the seeded
//! generator that turns it into a list of [`Operation`]s with their ground
//! truth (how long each would take, where it stalls, whether it ever ends).
//!
//! The generator is ChaCha8 seeded with the workload's `seed` (or the
//! command's `--seed`): the same seed gives the same operations on every
//! platform. Durations are drawn in seconds and kept to whole milliseconds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution as _, LogNormal, Pareto};
use serde::Deserialize;

use super::read::{WorkloadError, human, human_option};

/// The most operations of one kind a workload may ask for.
pub const MAX_OPERATIONS: u32 = 100_000;

/// The longest duration a distribution may produce: longer draws are cut
/// to it.
pub const MAX_OPERATION_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// The most chunks one stream streams: a longer draw is cut to this many
/// chunks, so that no workload of valid keys plays for hours of real time.
pub const MAX_CHUNKS: u32 = 100_000;

/// How many evaluator answers are drawn for each operation: later calls
/// about the same operation repeat the last one.
pub const EVALUATOR_ANSWERS: usize = 16;

/// A workload file that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadFileError {
    /// The file could not be read.
    #[error("cannot read workload file `{}`: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file was read but refused.
    #[error("workload file `{}` refused at `{}`: {}", path.display(), error.key, error.message)]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The refusal, naming the key.
        #[source]
        error: WorkloadError,
    },
}

/// A distribution of durations.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(tag = "dist", rename_all = "lowercase", deny_unknown_fields)]
pub enum Distribution {
    /// Log-normal: half the draws below `median`; `sigma` is the standard
    /// deviation of the logarithm.
    Lognormal {
        /// The median.
        #[serde(deserialize_with = "human")]
        median: Duration,
        /// The spread of the logarithm (0 < sigma ≤ 10).
        sigma: f64,
    },
    /// Pareto: never below `scale`, with a tail that thins as `shape`
    /// grows (heavy for a shape near 1).
    Pareto {
        /// The smallest draw.
        #[serde(deserialize_with = "human")]
        scale: Duration,
        /// The tail index (> 0).
        shape: f64,
    },
    /// Always the same duration.
    Fixed {
        /// The duration.
        #[serde(deserialize_with = "human")]
        value: Duration,
    },
}

impl Distribution {
    fn validate(&self, key: &str) -> Result<(), WorkloadError> {
        let (name, base, parameter) = match *self {
            Self::Lognormal { median, sigma } => ("median", median, Some(("sigma", sigma, 10.0))),
            Self::Pareto { scale, shape } => ("scale", scale, Some(("shape", shape, 1e6))),
            Self::Fixed { value } => ("value", value, None),
        };
        if base.is_zero() || base > MAX_OPERATION_DURATION {
            return Err(WorkloadError::new(
                format!("{key}.{name}"),
                format!(
                    "expected a duration above 0 and at most {}",
                    humantime::format_duration(MAX_OPERATION_DURATION)
                ),
            ));
        }
        if let Some((name, value, max)) = parameter
            && !(value.is_finite() && value > 0.0 && value <= max)
        {
            return Err(WorkloadError::new(
                format!("{key}.{name}"),
                format!("expected a number above 0 and at most {max}, got {value}"),
            ));
        }
        Ok(())
    }

    /// One draw, in whole milliseconds, at most [`MAX_OPERATION_DURATION`].
    fn sample(&self, rng: &mut ChaCha8Rng) -> Duration {
        let seconds = match *self {
            Self::Lognormal { median, sigma } => LogNormal::new(median.as_secs_f64().ln(), sigma)
                .map_or(median.as_secs_f64(), |d| d.sample(rng)),
            Self::Pareto { scale, shape } => Pareto::new(scale.as_secs_f64(), shape)
                .map_or(scale.as_secs_f64(), |d| d.sample(rng)),
            Self::Fixed { value } => value.as_secs_f64(),
        };
        let drawn = Duration::try_from_secs_f64(seconds)
            .unwrap_or(MAX_OPERATION_DURATION)
            .min(MAX_OPERATION_DURATION);
        Duration::from_millis(u64::try_from(drawn.as_millis()).unwrap_or(u64::MAX))
    }
}

/// The model streams of a workload.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamLoad {
    /// How many.
    pub count: u32,
    /// How long each streams (stalls aside).
    pub duration: Distribution,
    /// The time between two chunks; each chunk is one token of evidence.
    #[serde(deserialize_with = "human")]
    pub chunk_interval: Duration,
    /// The chance that a stream falls silent once and then goes on.
    #[serde(default)]
    pub stall_probability: f64,
    /// How long such a silence lasts (required when `stall_probability` is
    /// above 0).
    #[serde(default)]
    pub stall: Option<Distribution>,
    /// The chance that a stream falls silent for good.
    #[serde(default)]
    pub hang_probability: f64,
    /// The chance that a stream never ends but keeps streaming the same
    /// sentence: alive by its chunks, stuck in a loop.
    #[serde(default)]
    pub loop_probability: f64,
    /// The chance that the model's endpoint is dead when the run starts
    /// and comes back later: a call sent before then is lost (no chunk, no
    /// answer), one sent after streams.
    #[serde(default)]
    pub dead_probability: f64,
    /// How long such an endpoint stays dead (required when
    /// `dead_probability` is above 0).
    #[serde(default)]
    pub dead_for: Option<Distribution>,
    /// The time from the request to the first chunk (a reasoning model
    /// thinking silently before it answers); default one chunk interval.
    #[serde(default)]
    pub first_chunk: Option<Distribution>,
    /// While a stream is silent — before its first chunk, in a stall, hung
    /// — its server sends a keep-alive this often (an SSE comment): proof
    /// that the connection is open, and nothing more.
    #[serde(default, deserialize_with = "human_option")]
    pub keepalive_interval: Option<Duration>,
}

/// The tool calls of a workload.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolLoad {
    /// How many.
    pub count: u32,
    /// How long each takes.
    pub duration: Distribution,
    /// How often a call reports progress; none means silent until it
    /// answers.
    #[serde(default, deserialize_with = "human_option")]
    pub progress_interval: Option<Duration>,
    /// The chance that a call falls silent once (no progress) and then
    /// goes on (on its first attempt: a stall is transient).
    #[serde(default)]
    pub stall_probability: f64,
    /// How long such a silence lasts (required when `stall_probability` is
    /// above 0).
    #[serde(default)]
    pub stall: Option<Distribution>,
    /// The chance that a call never answers: silent from its start, or,
    /// with `progress_interval`, silent for good from a point drawn in its
    /// duration, after reporting progress until then.
    #[serde(default)]
    pub hang_probability: f64,
    /// The chance that the call's endpoint is dead when the run starts
    /// and comes back later: a call sent before then is lost (never
    /// answers), one sent after works.
    #[serde(default)]
    pub dead_probability: f64,
    /// How long such an endpoint stays dead (required when
    /// `dead_probability` is above 0).
    #[serde(default)]
    pub dead_for: Option<Distribution>,
}

/// The most steps a worker may need, or be declared with.
pub const MAX_WORKER_STEPS: u32 = 10_000;

/// The workers of a workload: each operation is a root that spawns one
/// worker (a sub-agent with its own loop and step budget) and answers with
/// its result. Every step of a worker is one streaming model call that
/// calls a quick tool; its last step answers.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerLoad {
    /// How many.
    pub count: u32,
    /// The steps a worker needs to finish its task, drawn uniformly from
    /// `min` to `max`.
    pub steps: StepRange,
    /// Its declared step budget (`max_steps`): a worker that needs more
    /// reaches a budget checkpoint, which asks the evaluator whether to
    /// extend (0 = unlimited: no checkpoint).
    pub max_steps: u32,
    /// How long one of its steps streams.
    pub step_duration: Distribution,
    /// The time between two chunks of a step's stream.
    #[serde(deserialize_with = "human")]
    pub chunk_interval: Duration,
    /// The chance that one of its steps falls silent for good (on every
    /// attempt).
    #[serde(default)]
    pub hang_probability: f64,
    /// The chance that it never finishes: it keeps taking steps, each
    /// alive by its chunks, calling the same tool with the same arguments.
    #[serde(default)]
    pub loop_probability: f64,
}

/// A range of step counts, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRange {
    /// The fewest (at least 1).
    pub min: u32,
    /// The most (at least `min`).
    pub max: u32,
}

/// The evaluator the watchdog asks: how long it takes and how often it is
/// right (it knows the ground truth, and says the opposite when wrong).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluatorLoad {
    /// Time to answer (default 500 ms).
    #[serde(default = "default_evaluator_latency", deserialize_with = "human")]
    pub latency: Duration,
    /// The chance that one answer is right (default 1).
    #[serde(default = "one")]
    pub accuracy: f64,
    /// What a million of its tokens cost, in whatever unit the report
    /// should use (default 0: the report counts tokens only).
    #[serde(default)]
    pub price_per_million_tokens: f64,
}

impl Default for EvaluatorLoad {
    fn default() -> Self {
        Self {
            latency: default_evaluator_latency(),
            accuracy: 1.0,
            price_per_million_tokens: 0.0,
        }
    }
}

fn default_evaluator_latency() -> Duration {
    Duration::from_millis(500)
}

fn one() -> f64 {
    1.0
}

/// A workload file, parsed and validated.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// The generator's seed.
    pub seed: u64,
    /// Model streams, if any.
    #[serde(default)]
    pub model_streams: Option<StreamLoad>,
    /// Tool calls, if any.
    #[serde(default)]
    pub tool_calls: Option<ToolLoad>,
    /// Workers, if any.
    #[serde(default)]
    pub workers: Option<WorkerLoad>,
    /// The evaluator.
    #[serde(default)]
    pub evaluator: EvaluatorLoad,
    /// What every strategy shares, and the sweep.
    #[serde(default)]
    pub strategy: super::strategy::StrategySettings,
    /// Strategies of its own: each a name, a verdict policy and settings
    /// of `[strategy]` of its own.
    #[serde(default)]
    pub strategies: Vec<super::strategy::StrategyDefinition>,
}

impl Workload {
    /// Parses and validates a workload written in TOML.
    pub fn parse(text: &str) -> Result<Self, WorkloadError> {
        let workload: Self = leasehold::flow_file::read_toml_as(text)
            .map_err(|e| WorkloadError::new(e.path, e.message))?;
        workload.validate()?;
        Ok(workload)
    }

    /// The strategy named `name` (`NAME` or `NAME@LEASE`): built in, or
    /// one of this workload's `[[strategies]]`, with its `[strategy]`.
    pub fn resolve(&self, name: &str) -> Result<super::Strategy, WorkloadError> {
        self.strategy.strategy(name, &self.strategies)
    }

    /// Reads and validates the workload in `path`.
    pub fn load(path: &Path) -> Result<Self, WorkloadFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| WorkloadFileError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|error| WorkloadFileError::Invalid {
            path: path.to_owned(),
            error,
        })
    }

    /// Refuses nonsense, naming the key.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if let Some(streams) = &self.model_streams {
            check_count("model_streams.count", streams.count)?;
            streams.duration.validate("model_streams.duration")?;
            check_interval("model_streams.chunk_interval", streams.chunk_interval)?;
            check_required(
                "model_streams.stall",
                streams.stall,
                streams.stall_probability,
            )?;
            check_probability("model_streams.stall_probability", streams.stall_probability)?;
            check_probability("model_streams.hang_probability", streams.hang_probability)?;
            check_probability("model_streams.loop_probability", streams.loop_probability)?;
            check_probability("model_streams.dead_probability", streams.dead_probability)?;
            check_required(
                "model_streams.dead_for",
                streams.dead_for,
                streams.dead_probability,
            )?;
            if let Some(first) = &streams.first_chunk {
                first.validate("model_streams.first_chunk")?;
            }
            if let Some(every) = streams.keepalive_interval {
                check_interval("model_streams.keepalive_interval", every)?;
            }
        }
        if let Some(tools) = &self.tool_calls {
            check_count("tool_calls.count", tools.count)?;
            tools.duration.validate("tool_calls.duration")?;
            if let Some(every) = tools.progress_interval {
                check_interval("tool_calls.progress_interval", every)?;
            }
            check_probability("tool_calls.stall_probability", tools.stall_probability)?;
            check_required("tool_calls.stall", tools.stall, tools.stall_probability)?;
            check_probability("tool_calls.hang_probability", tools.hang_probability)?;
            check_probability("tool_calls.dead_probability", tools.dead_probability)?;
            check_required(
                "tool_calls.dead_for",
                tools.dead_for,
                tools.dead_probability,
            )?;
        }
        if let Some(workers) = &self.workers {
            workers.validate()?;
        }
        if self.model_streams.is_none() && self.tool_calls.is_none() && self.workers.is_none() {
            return Err(WorkloadError::new(
                ".",
                "expected at least one of `[model_streams]`, `[tool_calls]` and `[workers]`",
            ));
        }
        check_probability("evaluator.accuracy", self.evaluator.accuracy)?;
        let price = self.evaluator.price_per_million_tokens;
        if !(price.is_finite() && (0.0..=1e9).contains(&price)) {
            return Err(WorkloadError::new(
                "evaluator.price_per_million_tokens",
                format!("expected a number from 0 to 1000000000, got {price}"),
            ));
        }
        if self.evaluator.latency > MAX_OPERATION_DURATION {
            return Err(WorkloadError::new(
                "evaluator.latency",
                "expected a duration of at most 24h",
            ));
        }
        self.strategy.validate(&self.strategies)?;
        super::strategy::StrategyDefinition::validate_all(&self.strategies, &self.strategy)
    }

    /// The operations, in a fixed order (streams, tool calls, then
    /// workers), drawn from `seed`.
    pub fn generate(&self, seed: u64) -> Vec<Operation> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut operations = Vec::new();
        if let Some(streams) = &self.model_streams {
            for _ in 0..streams.count {
                operations.push(stream_operation(streams, &self.evaluator, &mut rng));
            }
        }
        if let Some(tools) = &self.tool_calls {
            for _ in 0..tools.count {
                operations.push(tool_operation(tools, &self.evaluator, &mut rng));
            }
        }
        if let Some(workers) = &self.workers {
            for _ in 0..workers.count {
                operations.push(worker_operation(workers, &self.evaluator, &mut rng));
            }
        }
        operations
    }
}

/// What an operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperationKind {
    /// A streaming model call: a chunk every `interval`.
    ModelStream {
        /// Chunks it streams if it ends.
        chunks: u32,
        /// The time between chunks.
        interval: Duration,
    },
    /// A tool call, reporting progress every `progress` if given.
    ToolCall {
        /// The progress cadence.
        progress: Option<Duration>,
    },
    /// A worker that needs `steps` steps, each a stream of `chunks` chunks
    /// `interval` apart.
    Worker {
        /// Steps it needs to finish (if it does not loop).
        steps: u32,
        /// Chunks each step streams.
        chunks: u32,
        /// The time between chunks.
        interval: Duration,
        /// Its declared step budget.
        max_steps: u32,
        /// The step and chunk at which it falls silent for good, if it
        /// hangs.
        hang: Option<(u32, u32)>,
    },
}

/// One generated operation and its ground truth.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// What it is.
    pub kind: OperationKind,
    /// How long it works, stalls aside, if it ends.
    pub work: Duration,
    /// A stream falls silent after this many chunks for this long, then
    /// goes on (first attempt only: a stall is transient).
    pub stall: Option<(u32, Duration)>,
    /// A tool call falls silent this long after it starts, for this long,
    /// then goes on (first attempt only).
    pub tool_stall: Option<(Duration, Duration)>,
    /// Stops making progress for good this long after it starts (every
    /// attempt): falls silent, or loops; `None` for an operation that ends.
    pub hangs_at: Option<Duration>,
    /// Streams the same sentence forever instead of ending (`hangs_at` is
    /// then zero).
    pub loops: bool,
    /// Its endpoint (the model's or the tool's) is dead this long after
    /// the run starts: a call sent before then is lost, one sent after
    /// works. `None` for an endpoint that is up.
    pub dead_until: Option<Duration>,
    /// A stream's first chunk comes this long after the request, instead
    /// of one chunk interval.
    pub first_chunk: Option<Duration>,
    /// A stream's server sends a keep-alive this often while it is silent.
    pub keepalive: Option<Duration>,
    /// Whether each evaluator answer about it is right, in call order.
    pub evaluator_right: Vec<bool>,
    /// Whether each budget checkpoint's answer about it is right, in call
    /// order (workers only: empty for the others).
    pub budget_right: Vec<bool>,
}

impl Operation {
    /// Whether it ends, given time: slow or stalled, it is alive. (A call
    /// to a dead endpoint is not: only a call sent again can end.)
    pub fn alive(&self) -> bool {
        self.hangs_at.is_none() && self.dead_until.is_none()
    }
}

fn stream_operation(
    load: &StreamLoad,
    evaluator: &EvaluatorLoad,
    rng: &mut ChaCha8Rng,
) -> Operation {
    let work = load.duration.sample(rng);
    let interval = load.chunk_interval;
    let chunks = u32::try_from(work.as_millis() / interval.as_millis().max(1))
        .unwrap_or(u32::MAX)
        .clamp(1, MAX_CHUNKS);
    let work = interval.saturating_mul(chunks);
    let hangs = rng.random_bool(load.hang_probability);
    let loops = !hangs && rng.random_bool(load.loop_probability);
    let stalls = !hangs && !loops && rng.random_bool(load.stall_probability);
    let at_chunk = rng.random_range(0..chunks);
    let stall = match (&load.stall, stalls) {
        (Some(length), true) => Some((at_chunk, length.sample(rng))),
        _ => None,
    };
    // Drawn only when asked for, so that a workload without it draws what
    // it drew before it existed.
    let first_chunk = load.first_chunk.as_ref().map(|first| first.sample(rng));
    // The last chunk before a hang comes at `first + (k − 1) × interval`:
    // the time the stream stops making progress for good.
    let hangs_at = match (hangs, loops, first_chunk) {
        (true, _, None) => Some(interval.saturating_mul(at_chunk)),
        (true, _, Some(_)) if at_chunk == 0 => Some(Duration::ZERO),
        (true, _, Some(first)) => Some(first.saturating_add(interval.saturating_mul(at_chunk - 1))),
        (false, true, _) => Some(Duration::ZERO),
        (false, false, _) => None,
    };
    let work = match first_chunk {
        Some(first) => work.saturating_sub(interval).saturating_add(first),
        None => work,
    };
    // Drawn only when asked for, so that a workload without dead model
    // endpoints draws what it drew before they existed.
    let dead =
        hangs_at.is_none() && load.dead_probability > 0.0 && rng.random_bool(load.dead_probability);
    let dead_until = match (&load.dead_for, dead) {
        (Some(length), true) => Some(length.sample(rng)),
        _ => None,
    };
    Operation {
        kind: OperationKind::ModelStream { chunks, interval },
        work,
        stall,
        tool_stall: None,
        hangs_at,
        loops,
        dead_until,
        first_chunk,
        keepalive: load.keepalive_interval,
        evaluator_right: evaluator_answers(evaluator, rng),
        budget_right: Vec::new(),
    }
}

fn tool_operation(load: &ToolLoad, evaluator: &EvaluatorLoad, rng: &mut ChaCha8Rng) -> Operation {
    let work = load.duration.sample(rng);
    let hangs = rng.random_bool(load.hang_probability);
    let dead = !hangs && rng.random_bool(load.dead_probability);
    let dead_until = match (&load.dead_for, dead) {
        (Some(length), true) => Some(length.sample(rng)),
        _ => None,
    };
    // Each drawn only when asked for, so that a workload without them
    // draws what it drew before they existed.
    let hangs_at = match (hangs, load.progress_interval) {
        (true, Some(_)) => Some(Duration::from_millis(
            rng.random_range(0..u64::try_from(work.as_millis()).unwrap_or(u64::MAX).max(1)),
        )),
        (true, None) => Some(Duration::ZERO),
        (false, _) => None,
    };
    let stalls = !hangs
        && dead_until.is_none()
        && load.stall_probability > 0.0
        && rng.random_bool(load.stall_probability);
    let tool_stall = match (&load.stall, stalls) {
        (Some(length), true) => {
            let at =
                rng.random_range(0..u64::try_from(work.as_millis()).unwrap_or(u64::MAX).max(1));
            Some((Duration::from_millis(at), length.sample(rng)))
        }
        _ => None,
    };
    Operation {
        kind: OperationKind::ToolCall {
            progress: load.progress_interval,
        },
        work,
        stall: None,
        tool_stall,
        hangs_at,
        loops: false,
        dead_until,
        first_chunk: None,
        keepalive: None,
        evaluator_right: evaluator_answers(evaluator, rng),
        budget_right: Vec::new(),
    }
}

fn worker_operation(
    load: &WorkerLoad,
    evaluator: &EvaluatorLoad,
    rng: &mut ChaCha8Rng,
) -> Operation {
    let steps = rng.random_range(load.steps.min..=load.steps.max);
    let step = load.step_duration.sample(rng);
    let interval = load.chunk_interval;
    // A worker streams at most MAX_CHUNKS chunks over all its steps.
    let chunks = u32::try_from(step.as_millis() / interval.as_millis().max(1))
        .unwrap_or(u32::MAX)
        .clamp(1, (MAX_CHUNKS / steps).max(1));
    let step = interval.saturating_mul(chunks);
    let hangs = rng.random_bool(load.hang_probability);
    let loops = !hangs && rng.random_bool(load.loop_probability);
    let hang_step = rng.random_range(1..=steps);
    let hang_chunk = rng.random_range(0..chunks);
    let hang = hangs.then_some((hang_step, hang_chunk));
    let hangs_at = match (hang, loops) {
        (Some((at_step, at_chunk)), _) => Some(
            step.saturating_mul(at_step - 1)
                .saturating_add(interval.saturating_mul(at_chunk)),
        ),
        (None, true) => Some(Duration::ZERO),
        (None, false) => None,
    };
    Operation {
        kind: OperationKind::Worker {
            steps,
            chunks,
            interval,
            max_steps: load.max_steps,
            hang,
        },
        work: step.saturating_mul(steps),
        stall: None,
        tool_stall: None,
        hangs_at,
        loops,
        dead_until: None,
        first_chunk: None,
        keepalive: None,
        evaluator_right: evaluator_answers(evaluator, rng),
        budget_right: evaluator_answers(evaluator, rng),
    }
}

impl WorkerLoad {
    fn validate(&self) -> Result<(), WorkloadError> {
        check_count("workers.count", self.count)?;
        if self.steps.min == 0 || self.steps.min > MAX_WORKER_STEPS {
            return Err(WorkloadError::new(
                "workers.steps.min",
                format!(
                    "expected from 1 to {MAX_WORKER_STEPS}, got {}",
                    self.steps.min
                ),
            ));
        }
        if self.steps.max < self.steps.min || self.steps.max > MAX_WORKER_STEPS {
            return Err(WorkloadError::new(
                "workers.steps.max",
                format!(
                    "expected from `min` ({}) to {MAX_WORKER_STEPS}, got {}",
                    self.steps.min, self.steps.max
                ),
            ));
        }
        if self.max_steps > MAX_WORKER_STEPS {
            return Err(WorkloadError::new(
                "workers.max_steps",
                format!(
                    "expected at most {MAX_WORKER_STEPS} (0 = unlimited), got {}",
                    self.max_steps
                ),
            ));
        }
        self.step_duration.validate("workers.step_duration")?;
        check_interval("workers.chunk_interval", self.chunk_interval)?;
        check_probability("workers.hang_probability", self.hang_probability)?;
        check_probability("workers.loop_probability", self.loop_probability)
    }
}

fn evaluator_answers(evaluator: &EvaluatorLoad, rng: &mut ChaCha8Rng) -> Vec<bool> {
    (0..EVALUATOR_ANSWERS)
        .map(|_| rng.random_bool(evaluator.accuracy))
        .collect()
}

/// A distribution that must be given when its probability is above 0,
/// and valid when given.
fn check_required(
    key: &str,
    distribution: Option<Distribution>,
    probability: f64,
) -> Result<(), WorkloadError> {
    match distribution {
        Some(distribution) => distribution.validate(key),
        None if probability > 0.0 => Err(WorkloadError::new(
            key,
            "expected a distribution of durations, as its probability is above 0",
        )),
        None => Ok(()),
    }
}

fn check_count(key: &str, count: u32) -> Result<(), WorkloadError> {
    if count > MAX_OPERATIONS {
        return Err(WorkloadError::new(
            key,
            format!("expected at most {MAX_OPERATIONS}, got {count}"),
        ));
    }
    Ok(())
}

fn check_interval(key: &str, interval: Duration) -> Result<(), WorkloadError> {
    if interval < Duration::from_millis(1) || interval > MAX_OPERATION_DURATION {
        return Err(WorkloadError::new(
            key,
            "expected a duration of at least 1ms and at most 24h",
        ));
    }
    Ok(())
}

fn check_probability(key: &str, p: f64) -> Result<(), WorkloadError> {
    if !(p.is_finite() && (0.0..=1.0).contains(&p)) {
        return Err(WorkloadError::new(
            key,
            format!("expected a probability between 0 and 1, got {p}"),
        ));
    }
    Ok(())
}
