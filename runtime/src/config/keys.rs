//! The table of every configuration key: its variable, file key, default,
//! meaning, and the field of [`Config`](super::Config) it sets and reads.
//! It is the one home of a key: loading (the file, the environment,
//! `--set`), the entries `leasehold config` prints and the duration checks
//! all go through its row, and `docs/configuration.md` is this table
//! written out, which a test holds together.

use std::fmt;
use std::time::Duration;

use leasehold_actors::{MAX_DURATION_EXPECTED, MAX_EXTENSIONS, MIN_LEASE, MIN_PROGRESS_NOTE_BYTES};

use super::fields::{Field, IdleTimeout, Kind, NoField, Slot, ValueKind, field};
use super::{ENV_CONFIG, format_size, parse_size};

/// One configuration key: its names, default and meaning, and the field of
/// [`Config`](super::Config) it sets and reads.
#[derive(Clone, Copy)]
pub struct Key {
    /// The environment variable, e.g. `LEASEHOLD_LEASE_TOOL_CALL`.
    pub env: &'static str,
    /// The key in the TOML file, e.g. `lease.tool_call`.
    pub file: &'static str,
    /// The default, as it would be written.
    pub default: &'static str,
    /// What the value means, in Markdown: the last column of the table in
    /// `docs/configuration.md`.
    pub meaning: &'static str,
    /// What the value is.
    pub kind: ValueKind,
    /// The names the key had before it was renamed, if it was: still read,
    /// with a warning naming the new ones.
    pub old: Option<OldName>,
    /// The bound the value is checked against on its own, if any (the
    /// rules between keys are [`rules`](leasehold_actors::rules)).
    pub bound: Option<Bound>,
    /// Where the value lives: how it is set from text and read back.
    pub(super) slot: &'static dyn Slot,
}

/// The shortest `executor.claim_interval`: the interval is only the
/// fallback of an executor that claims on each queued run and each ended
/// one, and a shorter one is an idle loop on the store.
pub const MIN_CLAIM_INTERVAL: Duration = Duration::from_millis(100);

/// The bound a key's value is checked against on its own, in the unit of
/// its kind: nanoseconds for a duration, bytes for a size, the number
/// itself for a count. Loading refuses a value outside it, naming the key;
/// the table in `docs/configuration.md` shows it in its `checks` column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The least value allowed.
    pub min: Option<u128>,
    /// The greatest value allowed.
    pub max: Option<u128>,
    /// Why, said after the bound when a value is refused; may be empty.
    pub why: &'static str,
}

/// A key's names before it was renamed. The file, the environment and
/// `--set` still take them, and `leasehold config` warns each time,
/// naming the new name; where both are given in one layer, the new one
/// wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OldName {
    /// The old variable, e.g. `LEASEHOLD_WATCHDOG_MAX_RENEWALS`.
    pub env: &'static str,
    /// The old file key, e.g. `watchdog.max_renewals`.
    pub file: &'static str,
}

impl Key {
    /// This key, its value at least `min` (in its kind's unit), for `why`.
    const fn at_least(self, min: u128, why: &'static str) -> Self {
        Self {
            bound: Some(Bound {
                min: Some(min),
                max: None,
                why,
            }),
            ..self
        }
    }

    /// This key, its value at most `max` (in its kind's unit), for `why`.
    const fn at_most(self, max: u128, why: &'static str) -> Self {
        Self {
            bound: Some(Bound {
                min: None,
                max: Some(max),
                why,
            }),
            ..self
        }
    }

    /// This key, formerly named `env` and `file`.
    const fn was(self, env: &'static str, file: &'static str) -> Self {
        Self {
            old: Some(OldName { env, file }),
            ..self
        }
    }
}

/// The key that the file key `name` names, and whether by its old name.
pub(super) fn by_file_key(name: &str) -> Option<(&'static Key, bool)> {
    KEYS.iter().filter(|k| !k.file.is_empty()).find_map(|key| {
        if key.file == name {
            Some((key, false))
        } else {
            key.old.filter(|old| old.file == name).map(|_| (key, true))
        }
    })
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("env", &self.env)
            .field("file", &self.file)
            .field("default", &self.default)
            .field("kind", &self.kind)
            .field("old", &self.old)
            .finish_non_exhaustive()
    }
}

/// Two keys are the same key when they have the same names: no two rows
/// share one.
impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.env == other.env && self.file == other.file
    }
}

impl Eq for Key {}

/// The first line of the key table in `docs/configuration.md`.
pub const KEYS_TABLE_START: &str =
    "<!-- keys: generated from runtime/src/config/keys.rs; a test checks it -->";

/// The line after the key table in `docs/configuration.md`.
pub const KEYS_TABLE_END: &str = "<!-- end keys -->";

/// Every key as a Markdown table — variable, file key, default, checks,
/// meaning — exactly as `docs/configuration.md` holds it between [`KEYS_TABLE_START`] and
/// [`KEYS_TABLE_END`].
pub(super) fn markdown_table() -> String {
    let mut out = String::from(
        "| variable | file key | default | checks | meaning |\n|---|---|---|---|---|\n",
    );
    for key in &KEYS {
        let file = if key.file.is_empty() {
            "—".to_owned()
        } else {
            format!("`{}`", key.file)
        };
        // A default in parentheses says what stands there instead of a
        // value, `(none)`, `(derived)`: it is not written as code.
        let default = if key.default.starts_with('(') {
            key.default.to_owned()
        } else {
            format!("`{}`", key.default)
        };
        let mut meaning = cell(key.meaning);
        if let Some(old) = key.old {
            meaning.push_str(&format!(
                " (formerly `{}`, `{}`: still read, with a warning)",
                old.file, old.env
            ));
        }
        let checks = key.checks().unwrap_or_else(|| "—".to_owned());
        out.push_str(&format!(
            "| `{}` | {file} | {default} | {} | {meaning} |\n",
            key.env,
            cell(&checks)
        ));
    }
    out
}

impl Key {
    /// What loading checks of this key's value on its own, in words: a
    /// duration's range (above 0, at most 30 days) and the key's
    /// [`Bound`]; `None` when nothing is.
    pub fn checks(&self) -> Option<String> {
        let mut checks = Vec::new();
        let (min, max) = self.bound.map_or((None, None), |b| (b.min, b.max));
        match min {
            Some(min) => checks.push(format!("at least {}", self.written(min))),
            None if self.kind == ValueKind::Duration => checks.push("above 0".to_owned()),
            None => {}
        }
        match max {
            Some(max) => checks.push(format!("at most {}", self.written(max))),
            None if self.kind == ValueKind::Duration => {
                checks.push(MAX_DURATION_EXPECTED.to_owned());
            }
            None => {}
        }
        (!checks.is_empty()).then(|| checks.join(", "))
    }

    /// `measure`, in this key's unit, as it would be configured.
    pub(super) fn written(&self, measure: u128) -> String {
        let whole = u64::try_from(measure).unwrap_or(u64::MAX);
        match self.kind {
            ValueKind::Duration | ValueKind::DurationOrOff => {
                humantime::format_duration(Duration::from_nanos(whole)).to_string()
            }
            ValueKind::Size => {
                let size = format_size(whole);
                if size.bytes().all(|b| b.is_ascii_digit()) {
                    format!("{size}B")
                } else {
                    size
                }
            }
            _ => measure.to_string(),
        }
    }

    /// `text`, a value of this key as it is configured, in its kind's
    /// unit; `None` for a kind that has none.
    pub(super) fn measure(&self, text: &str) -> Option<u128> {
        match self.kind {
            ValueKind::Duration | ValueKind::DurationOrOff => {
                humantime::parse_duration(text).ok().map(|d| d.as_nanos())
            }
            ValueKind::Size => parse_size(text).map(u128::from),
            ValueKind::Count => text.trim().parse().ok(),
            _ => None,
        }
    }
}

/// `text` as a table cell: a `|` would end the cell, even in code.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// A row whose value is the field `field`, of the kind it holds.
const fn key<K: Kind>(
    env: &'static str,
    file: &'static str,
    default: &'static str,
    field: &'static Field<K>,
    meaning: &'static str,
) -> Key {
    key_at(env, file, default, K::KIND, field, meaning)
}

/// A row whose value is more than one field, or none: its slot says how it
/// is set and read.
const fn key_at(
    env: &'static str,
    file: &'static str,
    default: &'static str,
    kind: ValueKind,
    slot: &'static dyn Slot,
    meaning: &'static str,
) -> Key {
    Key {
        env,
        file,
        default,
        meaning,
        kind,
        old: None,
        bound: None,
        slot,
    }
}

/// Every key, in the order of the table `docs/configuration.md` holds.
pub(super) static KEYS: [Key; 80] = [
    key(
        "LEASEHOLD_LEASE_MODEL_STREAM",
        "lease.model_stream",
        "2m",
        field!(Duration, lease_model_stream),
        "lease of a streaming model call; each chunk is evidence",
    ),
    key(
        "LEASEHOLD_LEASE_MODEL_BLOCKING",
        "lease.model_blocking",
        "5m",
        field!(Duration, lease_model_blocking),
        "lease of a blocking model call",
    ),
    key(
        "LEASEHOLD_LEASE_TOOL_CALL",
        "lease.tool_call",
        "5m",
        field!(Duration, lease_tool_call),
        "lease of a tool call; each MCP progress notification is evidence",
    ),
    key(
        "LEASEHOLD_LEASE_WORKER_STEP",
        "lease.worker_step",
        "10m",
        field!(Duration, lease_worker_step),
        "lease of one worker step; each completed step is evidence",
    ),
    key(
        "LEASEHOLD_LEASE_MIN",
        "lease.min",
        "10ms",
        field!(Duration, lease_min),
        "the shortest lease: each lease length above (`lease.model_stream` to `lease.worker_step`) and every flow's `leases.*` must be at least this long (see \"A flow can only tighten the configuration\" below)",
    )
    .at_least(MIN_LEASE.as_nanos(), "no lease may be shorter"),
    key(
        "LEASEHOLD_LEASE_MAX_RENEWALS",
        "lease.max_renewals",
        "10",
        field!(Count, max_renewals),
        "renewals a lease may have; the next expiry stops the operation (the renewal cap)",
    )
    .was("LEASEHOLD_WATCHDOG_MAX_RENEWALS", "watchdog.max_renewals"),
    key(
        "LEASEHOLD_LEASE_CEILING",
        "lease.ceiling",
        "4h",
        field!(Duration, lease_ceiling),
        "the longest one operation may work (pauses excluded), however fresh its evidence: renewals on strong evidence (a progress value advancing toward its total, answer text arriving at its usual pace without repeating) do not count toward `lease.max_renewals`, so this bounds an operation that keeps converging; at the ceiling its lease escalates and the run pauses for a person (30 days, the longest duration, is no ceiling)",
    ),
    key(
        "LEASEHOLD_WATCHDOG_FREE_RENEWALS",
        "watchdog.free_renewals",
        "2",
        field!(Count, free_renewals),
        "expiries renewed on the ladder, whatever the evidence and without asking the evaluator: the first this many of each lease (`decided_by = ladder`) under the `leasehold` policy; evidence that turns suspicious expires a lease early, past the ladder; at most `lease.max_renewals`",
    ),
    key(
        "LEASEHOLD_WATCHDOG_EVIDENCE_RENEWALS",
        "watchdog.evidence_renewals",
        "3",
        field!(Count, evidence_renewals),
        "consecutive renewals on fresh evidence alone, once past the ladder; at the next expiry the evaluator is asked anyway, shown the tail of a stream's text (0: never renew on evidence alone). A progress value that advances renews without this limit",
    ),
    key(
        "LEASEHOLD_WATCHDOG_REPETITION_THRESHOLD",
        "watchdog.repetition_threshold",
        "0.5",
        field!(Share, repetition_threshold),
        "above this share of repetition in an operation's recent evidence — repeated word 3-grams in a stream's text, or a worker's steps repeating the same tool calls — its evidence is suspicious: it earns no evidence renewal, and under the `leasehold` policy the lease expires at once, past the ladder, and the evaluator is asked",
    ),
    key(
        "LEASEHOLD_WATCHDOG_POLICY",
        "watchdog.policy",
        "leasehold",
        field!(Policy, watchdog_policy),
        "the verdict policy, for every lease kind or per kind (`leasehold, tool_call = idle_kill`): `leasehold` (cap, ladder, evidence, evaluator), `deadline` (the first expiry intervenes), `idle_kill` (intervene after a whole lease without evidence), `always_evaluate` (every expiry below the cap asks the evaluator) or a policy the embedder registered; a flow's `leases.policy` overrides it, kind by kind",
    ),
    key(
        "LEASEHOLD_WATCHDOG_ROLE",
        "watchdog.role",
        "fast",
        field!(Role, watchdog_role),
        "the model role (`default` or `fast`) the watchdog and budget checkpoints ask",
    ),
    key(
        "LEASEHOLD_WATCHDOG_MAX_TOKENS",
        "watchdog.max_tokens",
        "256",
        field!(Tokens, watchdog_max_tokens),
        "the most tokens one verdict of the watchdog's evaluator may take, sent as `max_tokens` (its JSON with a one-sentence reason fits in a hundred); the request is streamed, so that when `evaluator_timeout` is up the server stops generating it",
    ),
    key(
        "LEASEHOLD_BUDGET_CHECKPOINT_MAX_TOKENS",
        "budget.checkpoint_max_tokens",
        "256",
        field!(Tokens, budget_checkpoint_max_tokens),
        "the same for a budget checkpoint's decision",
    ),
    key(
        "LEASEHOLD_WATCHDOG_MAX_CONCURRENT_CALLS",
        "watchdog.max_concurrent_calls",
        "1",
        field!(Count, watchdog_max_concurrent_calls),
        "judge calls (lease verdicts and budget checkpoints) in flight at once on the evaluator's endpoint; one more waits for a place within `evaluator_timeout`, past which the breaker renews. One by default, so that the judge takes at most one of a local server's slots from the work it judges",
    )
    .at_least(1, "a judge with no place on its endpoint would never be asked"),
    key(
        "LEASEHOLD_EVALUATOR_TIMEOUT",
        "evaluator_timeout",
        "15s",
        field!(Duration, evaluator_timeout),
        "flat timeout of one evaluation, by the watchdog or a budget checkpoint",
    ),
    key(
        "LEASEHOLD_BUDGET_MAX_EXTENSIONS",
        "budget.max_extensions",
        "3",
        field!(Count, budget_max_extensions),
        "budget extensions one loop may get in all, whatever the evaluator says",
    )
    .at_most(MAX_EXTENSIONS as u128, "a loop is extended at most that many times, whatever the evaluator says: lower it, never raise it"),
    key(
        "LEASEHOLD_SPAWN_MAX_PER_ANSWER",
        "spawn.max_per_answer",
        "16",
        field!(Count, spawn_max_per_answer),
        "workers one model answer may spawn; its further `spawn_worker` calls get an error result the model sees, and a `spawn_refused` event",
    ),
    key(
        "LEASEHOLD_SPAWN_MAX_PER_RUN",
        "spawn.max_per_run",
        "256",
        field!(Count, spawn_max_per_run),
        "workers one run may start in all, restarts included; past it a spawn gets an error result",
    ),
    key(
        "LEASEHOLD_SPAWN_MAX_DEPTH",
        "spawn.max_depth",
        "4",
        field!(Count, spawn_max_depth),
        "how deep workers may nest below the root (1: the root's workers spawn none; 0: no loop spawns)",
    ),
    key(
        "LEASEHOLD_RUN_LEASE_TTL",
        "run_lease_ttl",
        "1m 30s",
        field!(Duration, run_lease_ttl),
        "how long an executor owns a run without a heartbeat (heartbeats every third of it); also how long `leasehold runs resume|cancel|reconcile` wait, at least 10 s, for a control forwarded to the run's owner to take effect",
    )
    .at_least(Duration::from_millis(3).as_nanos(), ""),
    key(
        "LEASEHOLD_RESUME_ON_BOOT",
        "resume_on_boot",
        "false",
        field!(Flag, resume_on_boot),
        "whether `serve` resumes orphaned runs (those whose executor stopped heartbeating), found at boot and by its sweep every third of the run-lease TTL: it claims them as it claims queued runs, within its limit of live runs, and with them the runs left paused on a down endpoint by an executor that is gone; `leasehold run` never resumes them",
    ),
    key(
        "LEASEHOLD_EXECUTOR_CLAIM_INTERVAL",
        "executor.claim_interval",
        "1s",
        field!(Duration, executor_claim_interval),
        "how often a serving executor with room claims queued runs (it also claims when one of its runs ends and when it queues one); see `durability.md`",
    )
    .at_least(MIN_CLAIM_INTERVAL.as_nanos(), "an executor also claims as soon as a run is queued and whenever one of its runs ends, so a shorter interval only makes an idle server spin on the store"),
    key(
        "LEASEHOLD_EXECUTOR_RETENTION",
        "executor.retention",
        "7days",
        field!(Retention, executor_retention),
        "how long a finished run (`completed`, `failed`, `cancelled`) is kept before a serving executor deletes it with everything kept of it (events, snapshots of every loop, tool-call records, waiting commands); `forever` keeps every run; a paused, queued, running or orphaned run is never deleted. A flow's `retention` may shorten it for its runs, never lengthen it (a longer one is refused when the run is planned). `GET /runs/ID` of a deleted run answers 404; see `deployment.md` for sizing the disk by it",
    ),
    key(
        "LEASEHOLD_EXECUTOR_LOAD_BOUND",
        "executor.load_bound",
        "250ms",
        field!(DurationOrOff, executor_load_bound),
        "the executor's lag (how late it wakes its timers, measured by a probe every 100 ms in `run` and `serve`) above which a lease that expires is renewed by `load` instead of judged; such a renewal counts neither toward the renewal cap, nor on the ladder, nor in the evidence streak; at least `10ms`, or `0` (`off`) to judge every expiry whatever the load; see \"The executor at swarm scale: load and admission\" in `runtime-semantics.md` and \"Sizing an executor\" in `deployment.md`",
    ),
    key(
        "LEASEHOLD_EXECUTOR_LAG_TARGET",
        "executor.lag_target",
        "100ms",
        field!(DurationOrOff, executor_lag_target),
        "the lag under which `serve` admits runs: its admitted limit of live runs halves (at most once a second) while the lag is over it, and grows by a 64th of `server.max_live_runs` every 100 ms while it is under it and runs wait; between 1 and `server.max_live_runs`; at most `executor.load_bound`; at least `10ms`, or `0` (`off`) for a fixed limit of `server.max_live_runs`",
    ),
    key(
        "LEASEHOLD_DURABILITY",
        "durability",
        "sync",
        field!(Durability, durability),
        "when a store write counts as done: `sync`, `async` or `exit` (see `durability.md`)",
    ),
    key(
        "LEASEHOLD_DATA_DIR",
        "data_dir",
        ".leasehold",
        field!(Path, data_dir),
        "the directory of the run store",
    ),
    key(
        "LEASEHOLD_SLED_CACHE_CAPACITY",
        "sled.cache_capacity",
        "64MiB",
        field!(Size, sled_cache_capacity),
        "the most memory the sled store's page cache holds (sled's own default is `1GiB`, which a busy executor's cache grows into); a size such as `256MiB`, at most `1GiB`. Not used with `store` (PostgreSQL)",
    ),
    key(
        "LEASEHOLD_STORE",
        "store",
        "(none)",
        field!(StoreUrl, store_url),
        "the run store on PostgreSQL shared by many executors (postgres://…); when set it replaces the sled store at data_dir; its password is never printed. `?sslmode=` says how connections are secured, as libpq reads it: `disable`, `prefer` (the default: TLS if the server offers it, certificate unchecked), `require` (always TLS), `verify-ca` (and the certificate signed by a trusted root), `verify-full` (and issued for the host); `&sslrootcert=PATH` is a PEM file of the trusted roots (a private CA), otherwise the platform's are used. Any other `sslmode` (`allow` included) is refused at start, naming it; see `deployment.md`",
    ),
    key(
        "LEASEHOLD_STORE_WRITE_RETRY_FOR",
        "store.write_retry_for",
        "30s",
        field!(DurationOrOff, store_write_retry_for),
        "how long a run's store write (an event, a snapshot, a tool-call record, a status change) that fails with an error worth trying again (the store unavailable, a connection reset) is tried again, with backoff from 50 ms doubling to 2 s, before it is given up and `store.on_write_failure` applies; `0` gives up at the first error (see `durability.md`)",
    ),
    key(
        "LEASEHOLD_STORE_ON_WRITE_FAILURE",
        "store.on_write_failure",
        "pause",
        field!(OnStoreFailure, store_on_write_failure),
        "what a run whose store write was given up does: `pause` for a person (`waiting_human`, the store's error as its reason; a resume goes on from its last durable snapshot) or `fail`; a run whose pause or end cannot be written either is let go, and resumed by an executor once its lease runs out",
    ),
    key(
        "LEASEHOLD_RESTART_MAX_RESTARTS",
        "restart.max_restarts",
        "3",
        field!(Count, restart_max),
        "restarts of any one call, however far apart (a call gets at most `1 +` this many attempts), and of all the calls of a loop within `restart.window` (the restart intensity); past either the call is given up and its failure goes up the tree",
    )
    .was("LEASEHOLD_RESTART_MAX", "restart.max"),
    key(
        "LEASEHOLD_RESTART_WINDOW",
        "restart.window",
        "1m",
        field!(Duration, restart_window),
        "the sliding window within which a loop's calls may restart `restart.max_restarts` times in all (the restart intensity, which stops a crash loop early)",
    ),
    key(
        "LEASEHOLD_RESTART_BACKOFF_INITIAL",
        "restart.backoff_initial",
        "1s",
        field!(Duration, restart_backoff_initial),
        "backoff before the first restart, doubling after each",
    ),
    key(
        "LEASEHOLD_RESTART_BACKOFF_MAX",
        "restart.backoff_max",
        "30s",
        field!(Duration, restart_backoff_max),
        "the longest backoff, before a jitter of ±10 %",
    ),
    key(
        "LEASEHOLD_RESTART_ON_EXHAUSTED",
        "restart.on_exhausted",
        "pause",
        field!(OnExhausted, restart_on_exhausted),
        "what a failure that reaches the top of the tree does (a model call out of restarts, the root loop past its intensity): `pause` the run for a person, who resumes it, or `fail` it",
    ),
    key(
        "LEASEHOLD_OUTAGE_FAILURES",
        "outage.failures",
        "5",
        field!(Count, outage_failures),
        "calls in a row, from any of the executor's runs, that cannot reach a model endpoint (the connection refused or cut, a 5xx) before the endpoint is down: a run whose call then fails pauses on it, its clocks stopped, instead of spending its restarts, and resumes when it answers again (`GET /endpoints`)",
    )
    .at_least(1, "an endpoint is down only once a call failed to reach it"),
    key(
        "LEASEHOLD_OUTAGE_PROBE_INITIAL",
        "outage.probe_initial",
        "1s",
        field!(Duration, outage_probe_initial),
        "how long after an endpoint went down it is first probed (a one-token request); the wait doubles after each probe it does not answer",
    ),
    key(
        "LEASEHOLD_OUTAGE_PROBE_MAX",
        "outage.probe_max",
        "30s",
        field!(Duration, outage_probe_max),
        "the longest wait between two probes of a down endpoint; once it is up, another wave of its runs resumes whenever this long passes with none resumed",
    ),
    key(
        "LEASEHOLD_OUTAGE_RESUME_WAVE",
        "outage.resume_wave",
        "8",
        field!(Count, outage_resume_wave),
        "runs paused on an endpoint that resume at once when it answers again; then two more for each call it answers, so that a provider coming back is not met by every run at once",
    )
    .at_least(1, "a wave of no run would resume none"),
    key(
        "LEASEHOLD_MODEL_BASE_URL",
        "model.base_url",
        "(none)",
        field!(Url, model_base_url),
        "base URL of the OpenAI-compatible API of role `default`, e.g. `http://127.0.0.1:8000/v1`",
    ),
    key(
        "LEASEHOLD_MODEL_NAME",
        "model.name",
        "(none)",
        field!(Text, model_name),
        "the model of role `default`",
    ),
    key(
        "LEASEHOLD_MODEL_API_KEY",
        "model.api_key",
        "(none)",
        field!(Secret, model_api_key),
        "its API key, sent as a bearer token; never printed",
    ),
    key(
        "LEASEHOLD_FAST_MODEL_BASE_URL",
        "fast_model.base_url",
        "(the default's)",
        field!(Url, fast_model_base_url),
        "base URL of role `fast`, which the watchdog and budget checkpoints ask",
    ),
    key(
        "LEASEHOLD_FAST_MODEL_NAME",
        "fast_model.name",
        "(the default's)",
        field!(Text, fast_model_name),
        "the model of role `fast`",
    ),
    key(
        "LEASEHOLD_FAST_MODEL_API_KEY",
        "fast_model.api_key",
        "(the default's)",
        field!(Secret, fast_model_api_key),
        "its API key; never printed",
    ),
    key(
        "LEASEHOLD_MODEL_MAX_TOKENS",
        "model.max_tokens",
        "(the server's)",
        field!(Tokens, model_max_tokens),
        "the most tokens one answer of role `default` may hold, sent as `max_tokens` unless the flow (or its worker kind) sets its own; an answer cut off there is continued in the next step",
    ),
    key(
        "LEASEHOLD_FAST_MODEL_MAX_TOKENS",
        "fast_model.max_tokens",
        "(the default's)",
        field!(Tokens, fast_model_max_tokens),
        "the same for role `fast`: the watchdog's and budget checkpoints' verdicts",
    ),
    key(
        "LEASEHOLD_MODEL_CONNECT_TIMEOUT",
        "model.connect_timeout",
        "10s",
        field!(Duration, model_connect_timeout),
        "how long connecting to a model endpoint may take",
    ),
    key_at(
        "LEASEHOLD_MODEL_IDLE_TIMEOUT",
        "model.idle_timeout",
        "(derived)",
        ValueKind::Duration,
        &IdleTimeout,
        "how long a model endpoint may stay silent mid-answer; never a bound on the whole call. Unset, it is derived so that the watchdog judges a silent call first: `(watchdog.free_renewals + 1)` × the longer of `lease.model_stream` and `lease.model_blocking` + `evaluator_timeout`, with no free renewals for a kind whose `watchdog.policy` is `always_evaluate`, and no `evaluator_timeout` when `watchdog.free_renewals` = `lease.max_renewals` (no evaluation happens) (15m15s with the defaults)",
    ),
    key(
        "LEASEHOLD_MODEL_RATE_LIMIT_RETRIES",
        "model.rate_limit_retries",
        "3",
        field!(Count, model_rate_limit_retries),
        "retries of a call answered 429, each after the wait the server asked for (`retry-after-ms` or `Retry-After`; 1s, 2s, 4s … when it named none) and a random extra of up to a tenth of it; past them the call fails, with the server's wait",
    ),
    key(
        "LEASEHOLD_MCP_HANDSHAKE_TIMEOUT",
        "mcp.handshake_timeout",
        "30s",
        field!(Duration, mcp_handshake_timeout),
        "how long a new MCP tool server may take to start and complete the handshake, and then to answer `tools/list`; a server that does not fails its run with a reason naming it (never a bound on a tool call)",
    ),
    key(
        "LEASEHOLD_SERVER_ADDR",
        "server.addr",
        "127.0.0.1:7878",
        field!(Address, server_addr),
        "where `leasehold serve` listens",
    ),
    key(
        "LEASEHOLD_API_TOKEN",
        "api_token",
        "(none)",
        field!(Secret, api_token),
        "the bearer token the HTTP API requires; needed to listen beyond loopback; never printed",
    ),
    key(
        "LEASEHOLD_SERVER_ALLOWED_HOSTS",
        "server.allowed_hosts",
        "(none)",
        field!(List, server_allowed_hosts),
        "`Host` values accepted without a token besides the bound loopback address (against DNS rebinding); comma-separated",
    ),
    key(
        "LEASEHOLD_SERVER_ALLOWED_ORIGINS",
        "server.allowed_origins",
        "(none)",
        field!(List, server_allowed_origins),
        "origins (`https://ops.example.com`) a browser request may come from besides the server's own; comma-separated",
    ),
    key(
        "LEASEHOLD_SERVER_ALLOW_FLOW_TOOLS",
        "server.allow_flow_tools",
        "false",
        field!(Flag, server_allow_flow_tools),
        "let posted flows carry a tool server's `command`, `url` or `env` (needs a token; also `serve --allow-flow-tools`)",
    ),
    key(
        "LEASEHOLD_SERVER_HEADER_TIMEOUT",
        "server.header_timeout",
        "10s",
        field!(Duration, server_header_timeout),
        "how long a client may take to send a request's headers; an idle kept-alive connection is closed after as long",
    ),
    key(
        "LEASEHOLD_SERVER_BODY_TIMEOUT",
        "server.body_timeout",
        "30s",
        field!(Duration, server_body_timeout),
        "how long a client may take to send a request's body (never a bound on an event stream or a run)",
    ),
    key(
        "LEASEHOLD_SERVER_MAX_CONNECTIONS",
        "server.max_connections",
        "512",
        field!(Count, server_max_connections),
        "open connections at once; further clients wait to be accepted",
    )
    .at_least(1, "a limit of 0 would refuse every client"),
    key(
        "LEASEHOLD_SERVER_MAX_EVENT_STREAMS",
        "server.max_event_streams",
        "128",
        field!(Count, server_max_event_streams),
        "event streams open at once; past it a 503 with `Retry-After`",
    )
    .at_least(1, "a limit of 0 would refuse every client"),
    key(
        "LEASEHOLD_SERVER_MAX_LIVE_RUNS",
        "server.max_live_runs",
        "64",
        field!(Count, server_max_live_runs),
        "runs this executor runs at once, at most (its admitted limit is lower while it is late: `executor.lag_target`); past it a posted run waits queued, and resuming one is a 429",
    )
    .at_least(1, "a limit of 0 would refuse every client"),
    key(
        "LEASEHOLD_SERVER_MAX_QUEUED_RUNS",
        "server.max_queued_runs",
        "1024",
        field!(Count, server_max_queued_runs),
        "runs waiting `queued` in the store, counted over every executor sharing it; past it `POST /runs` is a 429 `queue_full` with `Retry-After` and nothing is stored (`0`: never queue, refuse when this executor is full)",
    ),
    key(
        "LEASEHOLD_SERVER_SHUTDOWN_GRACE",
        "server.shutdown_grace",
        "5s",
        field!(Duration, server_shutdown_grace),
        "on SIGINT or SIGTERM, how long requests may take to finish before the server closes them",
    ),
    key(
        "LEASEHOLD_WEBHOOKS_PUBLIC_URL",
        "webhooks.public_url",
        "(derived)",
        field!(Url, webhooks_public_url),
        "the server's address as the people who answer a webhook reach it (`https://leasehold.example.com`): the links a pause's webhook carries to resume, cancel or reconcile it point there; by default `http://` and `server.addr`. Receivers themselves are declared as `[webhooks.receivers.NAME]` tables (`url`, `secret`, `events`, `runs`), see `deployment.md`",
    ),
    key(
        "LEASEHOLD_WEBHOOKS_TIMEOUT",
        "webhooks.timeout",
        "10s",
        field!(Duration, webhooks_timeout),
        "how long one webhook request may take, connecting included; a receiver slower than that has the attempt count as failed and retried",
    )
    .at_least(Duration::from_millis(100).as_nanos(), ""),
    key(
        "LEASEHOLD_WEBHOOKS_RETRY_FIRST",
        "webhooks.retry_first",
        "5s",
        field!(Duration, webhooks_retry_first),
        "the wait before a webhook a receiver did not take is sent again; it doubles with each attempt, up to `webhooks.retry_max`",
    )
    .at_least(Duration::from_millis(100).as_nanos(), "a shorter wait only hammers a receiver that is down"),
    key(
        "LEASEHOLD_WEBHOOKS_RETRY_MAX",
        "webhooks.retry_max",
        "1h",
        field!(Duration, webhooks_retry_max),
        "the longest wait between two attempts of a webhook",
    )
    .at_least(Duration::from_millis(100).as_nanos(), ""),
    key(
        "LEASEHOLD_WEBHOOKS_GIVE_UP_AFTER",
        "webhooks.give_up_after",
        "3days",
        field!(Duration, webhooks_give_up_after),
        "how old a pause's or an end's notice may grow while a receiver does not take it; then it is dropped, said in the log and counted in `leasehold_webhooks_total{outcome=\"given_up\"}`. The run is never affected",
    ),
    key(
        "LEASEHOLD_LIMITS_MODEL_ANSWER",
        "limits.model_answer",
        "4MiB",
        field!(Size, limits_model_answer),
        "one model answer: content, reasoning and tool-call arguments together; past it the call fails, naming the cap and the endpoint",
    ),
    key(
        "LEASEHOLD_LIMITS_MODEL_BODY",
        "limits.model_body",
        "8MiB",
        field!(Size, limits_model_body),
        "one non-streamed model response body; past it the call fails",
    ),
    key(
        "LEASEHOLD_LIMITS_TOOL_RESULT",
        "limits.tool_result",
        "1MiB",
        field!(Size, limits_tool_result),
        "one tool result; a larger one is truncated with a visible marker, an event says so, and the store keeps the truncated form",
    ),
    key(
        "LEASEHOLD_LIMITS_PROGRESS_NOTE",
        "limits.progress_note",
        "1KiB",
        field!(Size, limits_progress_note),
        "one progress note (an MCP progress message, a worker's step): a longer one is cut at a character boundary with a marker, in the evidence the watchdog and the evaluator see and in the stored event",
    )
    .at_least(MIN_PROGRESS_NOTE_BYTES as u128, "room for the start of a note and the marker saying it was cut"),
    key(
        "LEASEHOLD_LIMITS_PROGRESS_INTERVAL",
        "limits.progress_interval",
        "1s",
        field!(Duration, limits_progress_interval),
        "at most one stored `progress` event per operation per interval: reports in between are coalesced and the next event says how many in `reports`; every report still counts as evidence for the lease",
    ),
    key(
        "LEASEHOLD_LIMITS_RUN_EVENTS",
        "limits.run_events",
        "10000",
        field!(Count, limits_run_events),
        "events a run's log holds before its `progress` events are counted instead of stored; `events_dropped` events say how many, and `runs show` adds them up; every other event is stored past it",
    )
    .at_least(1, "a log of 0 events would store no progress at all"),
    key(
        "LEASEHOLD_LIMITS_TASK",
        "limits.task",
        "64KiB",
        field!(Size, limits_task),
        "a flow's task, posted or in a `leasehold run` file; past it the flow is refused (a 413 `too_large` over the API) naming this key, and nothing is stored",
    ),
    key(
        "LEASEHOLD_LIMITS_FLOW",
        "limits.flow",
        "256KiB",
        field!(Size, limits_flow),
        "a whole flow, measured as the JSON the store keeps (before the configuration completes its tool servers); past it the flow is refused likewise. A posted body, and a flow file, may be up to twice as long (at least 1 MiB) before it is read at all",
    ),
    key(
        "LEASEHOLD_LIMITS_GUIDANCE",
        "limits.guidance",
        "64KiB",
        field!(Size, limits_guidance),
        "one text from a person: guidance on resume, the result given to a reconciliation, a cancel's reason, over the API or on the command line; past it the request is refused, nothing changed",
    ),
    key_at(
        ENV_CONFIG,
        "",
        "(none)",
        ValueKind::Path,
        &NoField,
        "the TOML file read between the defaults and the environment",
    ),
];

#[cfg(test)]
mod tests {
    use super::super::{Config, Source};
    use super::{KEYS, Key, ValueKind};

    /// A value of `kind` that parses, whatever the key.
    fn sample(kind: ValueKind) -> &'static str {
        match kind {
            ValueKind::Duration => "7s",
            ValueKind::DurationOrOff => "off",
            ValueKind::Count => "7",
            ValueKind::Flag => "true",
            ValueKind::Role => "default",
            ValueKind::Durability => "async",
            ValueKind::Path => "/var/lib/leasehold",
            ValueKind::Text => "http://127.0.0.1:8000/v1",
            ValueKind::Secret => "sk-secret",
            ValueKind::Address => "127.0.0.1:1",
            ValueKind::Size => "1KiB",
            ValueKind::List => "a.example",
            ValueKind::OnExhausted => "fail",
            ValueKind::Policy => "deadline",
            ValueKind::Share => "0.25",
            ValueKind::StoreUrl => "postgres://leasehold@db/runs",
            ValueKind::Retention => "forever",
            ValueKind::Tokens => "4096",
        }
    }

    fn settable() -> impl Iterator<Item = &'static Key> {
        KEYS.iter().filter(|k| !k.file.is_empty())
    }

    #[test]
    fn each_row_sets_the_field_it_reads_and_no_other_row_reads_it() {
        for key in settable() {
            let mut config = Config::default();
            let source = Source::Flag(format!("--set {}", key.file));
            config
                .set(key, sample(key.kind), source.clone(), key.file)
                .unwrap_or_else(|e| panic!("{}: {e}", key.file));
            let changed: Vec<&str> = config
                .entries()
                .into_iter()
                .filter(|(_, _, from)| *from == source)
                .map(|(other, _, _)| other.file)
                .collect();
            assert_eq!(
                changed,
                [key.file],
                "the rows that read what {} set",
                key.file
            );
        }
    }

    #[test]
    fn a_printed_value_reads_back_as_itself() {
        let mut config = Config::default();
        for key in settable() {
            let source = Source::Flag(format!("--set {}", key.file));
            config
                .set(key, sample(key.kind), source, key.file)
                .unwrap_or_else(|e| panic!("{}: {e}", key.file));
        }
        for key in settable() {
            let (printed, _) = config.value_of(key);
            let mut again = config.clone();
            again
                .set(key, &printed, Source::Default, key.file)
                .unwrap_or_else(|e| panic!("{} printed {printed:?}: {e}", key.file));
            // A secret prints as `(set)`, which is not the secret.
            if key.kind != ValueKind::Secret {
                assert_eq!(again.value_of(key).0, printed, "{}", key.file);
            }
        }
    }

    #[test]
    fn a_value_that_does_not_parse_is_refused_as_its_kind_expects() {
        // Any text but a blank one is a name, a path or a list.
        let free = [
            ValueKind::Text,
            ValueKind::Secret,
            ValueKind::Path,
            ValueKind::List,
        ];
        for key in settable().filter(|k| !free.contains(&k.kind)) {
            let mut config = Config::default();
            let error = config
                .set(key, "\u{1}", Source::Default, key.env)
                .expect_err(key.file);
            assert!(
                error.to_string().contains(key.kind.expected()),
                "{}: {error}",
                key.file
            );
        }
    }
}
