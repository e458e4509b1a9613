//! Strategies: named combinations of a verdict policy, a lease length, a
//! renewal cap, free renewals and a restart policy, and the sweep that
//! makes several of them from one parameter (the lease length).
//!
//! A strategy is named `NAME` or `NAME@LEASE` (`deadline@30s`): the name
//! is one of the built-in verdict policies ([`BUILT_IN`]: `leasehold`,
//! `deadline`, `idle_kill`, `always_evaluate`, spelled as configuration and
//! flows spell them) with the workload's `[strategy]` settings, or one the
//! workload defines in `[[strategies]]` — a verdict policy with its own
//! lease, renewal cap, free renewals, restarts and supervision, each
//! defaulting to `[strategy]`'s. `@LEASE` overrides the lease. Two
//! strategies differ only where their names and definitions say. From
//! Rust, a strategy may be judged by a verdict policy of the embedder's own
//! ([`Strategy::judged_by`]), compared beside the built-ins.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::rules;
use leasehold_actors::{
    LeaseOverrides, OnExhausted, PolicyChoice, PolicyName, StrategyFactory, StrategyKind,
    SupervisionOverrides, VerdictPolicy,
};
use serde::{Deserialize, Deserializer};

use super::read::{WorkloadError, human, human_option, parse_human};

/// The built-in strategies, in report order: one per built-in verdict
/// policy, named as the policy is.
pub const BUILT_IN: [PolicyName; 4] = PolicyName::BUILT_IN;

/// The strategies run when none are named: the first three built-ins, then
/// the sweep's points.
pub const DEFAULT_STRATEGIES: [&str; 3] = ["leasehold", "deadline", "idle_kill"];

/// What every strategy of a workload shares (`[strategy]`), and its sweep.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StrategySettings {
    /// The lease of model streams, tool calls and workers (default 10 s).
    #[serde(deserialize_with = "human")]
    pub lease: Duration,
    /// Renewals before the next expiry ends the operation (default 10).
    pub max_renewals: u32,
    /// Expiries renewed without a model call (default 2).
    pub free_renewals: u32,
    /// Restarts of one call (default 3).
    pub max_restarts: u32,
    /// The backoff before the first restart, doubling at each one up to
    /// 30 s (or to itself, if longer); default the engine's, 1 s. A call
    /// cut because its endpoint is down is answered only if it is sent
    /// again after the endpoint came back: the restarts must span the
    /// outage, however fast the cut.
    #[serde(deserialize_with = "human_option")]
    pub backoff: Option<Duration>,
    /// Restart the failed call (`restart`, the default) or fail at once
    /// (`fail_fast`).
    pub supervision: StrategyKind,
    /// What a failure at the top of the tree does: `pause` (the default) or
    /// `fail`.
    pub on_exhausted: OnExhausted,
    /// Several points of one parameter.
    pub sweep: Option<Sweep>,
}

impl Default for StrategySettings {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(10),
            max_renewals: 10,
            free_renewals: 2,
            max_restarts: 3,
            backoff: None,
            supervision: StrategyKind::Restart,
            on_exhausted: OnExhausted::Pause,
            sweep: None,
        }
    }
}

/// A sweep of the lease length over some strategies: each pair is a
/// strategy `NAME@LEASE`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// The strategies to sweep: built-in, or defined in `[[strategies]]`.
    pub policies: Vec<String>,
    /// The lease lengths.
    #[serde(deserialize_with = "human_list")]
    pub leases: Vec<Duration>,
}

impl Sweep {
    /// The strategies it makes: one per policy and lease.
    pub fn points(&self) -> usize {
        self.policies.len().saturating_mul(self.leases.len())
    }
}

/// A strategy a workload defines (`[[strategies]]`): a name, a verdict
/// policy, and whichever of `[strategy]`'s settings it sets otherwise.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrategyDefinition {
    /// Its name, as `--strategies` and the report say it.
    pub name: String,
    /// Its verdict policy: a built-in's name (`leasehold`, `deadline`,
    /// `idle_kill`, `always_evaluate`), or that of a policy of the
    /// embedder's own ([`Options::policies`](crate::Options::policies)).
    pub policy: String,
    /// Its lease.
    #[serde(default, deserialize_with = "human_option")]
    pub lease: Option<Duration>,
    /// Its renewal cap.
    #[serde(default)]
    pub max_renewals: Option<u32>,
    /// Its free renewals.
    #[serde(default)]
    pub free_renewals: Option<u32>,
    /// Its restarts of one call.
    #[serde(default)]
    pub max_restarts: Option<u32>,
    /// Restart or fail fast.
    #[serde(default)]
    pub supervision: Option<StrategyKind>,
    /// Pause or fail at the top of the tree.
    #[serde(default)]
    pub on_exhausted: Option<OnExhausted>,
}

/// The most strategies a workload may define.
pub const MAX_DEFINED_STRATEGIES: usize = 64;

/// The most strategies one experiment runs, counted after the sweep
/// expands: the workload is played once per strategy, so each one more
/// is the whole workload again.
pub const MAX_STRATEGIES: usize = 64;

impl StrategySettings {
    /// Refuses nonsense, naming the key: a lease that is not positive, more
    /// free renewals than the cap, a sweep naming a strategy that is
    /// neither built in nor in `defined`, a sweep of more than
    /// [`MAX_STRATEGIES`] points.
    pub fn validate(&self, defined: &[StrategyDefinition]) -> Result<(), WorkloadError> {
        check_lease("strategy.lease", self.lease)?;
        check_renewals("strategy", self)?;
        if let Some(backoff) = self.backoff {
            leasehold_actors::check_positive_duration("strategy.backoff", backoff).map_err(
                |e| WorkloadError::new("strategy.backoff", format!("expected {}", e.expected)),
            )?;
        }
        if let Some(sweep) = &self.sweep {
            let points = sweep.points();
            if points > MAX_STRATEGIES {
                return Err(WorkloadError::new(
                    "strategy.sweep",
                    format!(
                        "expands to {points} strategies ({} in `policies` × {} in `leases`); \
                         expected at most {MAX_STRATEGIES} strategies in one experiment",
                        sweep.policies.len(),
                        sweep.leases.len()
                    ),
                ));
            }
            for (i, lease) in sweep.leases.iter().enumerate() {
                check_lease(&format!("strategy.sweep.leases[{i}]"), *lease)?;
            }
            // A name that is neither a built-in nor defined may be an
            // embedder's policy: the plan checks it against the registered
            // ones (`check_policies`).
            for (i, name) in sweep.policies.iter().enumerate() {
                if policy_named(name).is_none()
                    && !defined.iter().any(|d| d.name == *name)
                    && PolicyName::new("policy", name.clone()).is_err()
                {
                    return Err(unknown(
                        format!("strategy.sweep.policies[{i}]"),
                        name,
                        &[],
                        defined,
                    ));
                }
            }
        }
        Ok(())
    }

    /// How many strategies run when none are given: [`DEFAULT_STRATEGIES`],
    /// the strategies `defined` and the sweep's points, counted without
    /// naming them.
    pub fn default_count(&self, defined: &[StrategyDefinition]) -> usize {
        DEFAULT_STRATEGIES
            .len()
            .saturating_add(defined.len())
            .saturating_add(self.sweep.as_ref().map_or(0, Sweep::points))
    }

    /// The names run when none are given: [`DEFAULT_STRATEGIES`], the
    /// strategies `defined`, then every sweep point.
    pub fn default_names(&self, defined: &[StrategyDefinition]) -> Vec<String> {
        let mut names: Vec<String> = DEFAULT_STRATEGIES.map(str::to_owned).to_vec();
        names.extend(defined.iter().map(|d| d.name.clone()));
        if let Some(sweep) = &self.sweep {
            for policy in &sweep.policies {
                for lease in &sweep.leases {
                    names.push(format!("{policy}@{}", humantime::format_duration(*lease)));
                }
            }
        }
        names
    }

    /// The strategy named `name` (`NAME` or `NAME@LEASE`), built in or
    /// one of `defined`.
    pub fn strategy(
        &self,
        name: &str,
        defined: &[StrategyDefinition],
    ) -> Result<Strategy, WorkloadError> {
        self.strategy_judged(name, defined, &[])
    }

    /// The strategy named `name` as [`StrategySettings::strategy`] finds
    /// it, where a policy may also be one of `policies`, the embedder's
    /// own: `NAME` or `NAME@LEASE` for one of them is this `[strategy]`
    /// judged by it, and a defined strategy may name one as its `policy`.
    pub fn strategy_judged(
        &self,
        name: &str,
        defined: &[StrategyDefinition],
        policies: &[Arc<dyn VerdictPolicy>],
    ) -> Result<Strategy, WorkloadError> {
        let (base, lease) = match name.split_once('@') {
            Some((base, lease)) => {
                let lease = parse_human(lease)
                    .map_err(|e| WorkloadError::new("--strategies", format!("`{name}`: {e}")))?;
                check_lease("--strategies", lease)?;
                (base, Some(lease))
            }
            None => (name, None),
        };
        let ((policy, judge), settings) = match defined.iter().find(|d| d.name == base) {
            Some(definition) => (
                judge_named(&definition.policy, policies)
                    .ok_or_else(|| unknown("--strategies", name, policies, defined))?,
                definition.apply(self),
            ),
            None => (
                judge_named(base, policies)
                    .ok_or_else(|| unknown("--strategies", name, policies, defined))?,
                self.clone(),
            ),
        };
        Ok(Strategy {
            name: name.to_owned(),
            policy,
            judge,
            lease: lease.unwrap_or(settings.lease),
            shared: settings,
            supervisor: None,
        })
    }
}

impl StrategyDefinition {
    /// Refuses nonsense, naming the key (`strategies[i].…`): a name that
    /// is empty, holds `@`, `,` or a control character (it is printed in
    /// the table and drawn in the plots), is a built-in's or repeats one
    /// before;
    /// a policy that is not a policy's name; a lease that is not positive;
    /// more free renewals than the cap, once applied over `shared`. Whether
    /// a policy is known is checked when the experiment is planned
    /// ([`StrategyDefinition::check_policies`]): it may be an embedder's.
    pub fn validate_all(defined: &[Self], shared: &StrategySettings) -> Result<(), WorkloadError> {
        if defined.len() > MAX_DEFINED_STRATEGIES {
            return Err(WorkloadError::new(
                "strategies",
                format!(
                    "expected at most {MAX_DEFINED_STRATEGIES} strategies, got {}",
                    defined.len()
                ),
            ));
        }
        for (i, definition) in defined.iter().enumerate() {
            let at = format!("strategies[{i}]");
            let name = definition.name.trim();
            if name.is_empty()
                || name != definition.name
                || name.contains(['@', ','])
                || name.contains(char::is_control)
            {
                return Err(WorkloadError::new(
                    format!("{at}.name"),
                    format!(
                        "expected a name without spaces around it, `@`, `,` or control \
                         characters, got {:?}",
                        definition.name
                    ),
                ));
            }
            if policy_named(name).is_some() || defined[..i].iter().any(|d| d.name == name) {
                return Err(WorkloadError::new(
                    format!("{at}.name"),
                    format!("`{name}` is already a strategy's name"),
                ));
            }
            if PolicyName::new("policy", definition.policy.clone()).is_err() {
                return Err(unknown_policy(
                    &format!("{at}.policy"),
                    &definition.policy,
                    &[],
                    &[],
                ));
            }
            if let Some(lease) = definition.lease {
                check_lease(&format!("{at}.lease"), lease)?;
            }
            check_renewals(&at, &definition.apply(shared))?;
        }
        Ok(())
    }

    /// Refuses the first of `defined` whose policy is neither a built-in
    /// nor one of `policies`, naming its key (`strategies[i].policy`), then
    /// the first name of `shared`'s sweep that is none of these nor a
    /// defined strategy (`strategy.sweep.policies[i]`).
    pub fn check_policies(
        defined: &[Self],
        shared: &StrategySettings,
        policies: &[Arc<dyn VerdictPolicy>],
    ) -> Result<(), WorkloadError> {
        for (i, definition) in defined.iter().enumerate() {
            if judge_named(&definition.policy, policies).is_none() {
                return Err(unknown_policy(
                    &format!("strategies[{i}].policy"),
                    &definition.policy,
                    policies,
                    &[],
                ));
            }
        }
        let swept = shared.sweep.iter().flat_map(|sweep| &sweep.policies);
        for (i, name) in swept.enumerate() {
            if judge_named(name, policies).is_none() && !defined.iter().any(|d| d.name == *name) {
                return Err(unknown_policy(
                    &format!("strategy.sweep.policies[{i}]"),
                    name,
                    policies,
                    defined,
                ));
            }
        }
        Ok(())
    }

    /// `shared` with this definition's own settings over it (the sweep
    /// aside).
    fn apply(&self, shared: &StrategySettings) -> StrategySettings {
        StrategySettings {
            lease: self.lease.unwrap_or(shared.lease),
            max_renewals: self.max_renewals.unwrap_or(shared.max_renewals),
            free_renewals: self.free_renewals.unwrap_or(shared.free_renewals),
            max_restarts: self.max_restarts.unwrap_or(shared.max_restarts),
            backoff: shared.backoff,
            supervision: self.supervision.unwrap_or(shared.supervision),
            on_exhausted: self.on_exhausted.unwrap_or(shared.on_exhausted),
            sweep: None,
        }
    }
}

/// One strategy, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Strategy {
    /// Its name, as given.
    pub name: String,
    /// The verdict policy's name: a built-in's, or that of
    /// [`Strategy::judge`].
    pub policy: PolicyName,
    /// A verdict policy of the embedder's own ([`Strategy::judged_by`]),
    /// registered with the engine the strategy runs on.
    pub judge: Option<OwnPolicy>,
    /// The lease of model streams, tool calls and workers (which wins
    /// over `shared.lease`).
    pub lease: Duration,
    /// The settings it runs with: the workload's `[strategy]` (the
    /// renewal cap, the free renewals, the restarts and the supervision),
    /// with a defined strategy's own settings over them.
    pub shared: StrategySettings,
    /// A supervision strategy of the embedder's own, instead of
    /// `shared.supervision` ([`Strategy::supervised_by`]).
    pub supervisor: Option<Supervisor>,
}

/// A verdict policy of an embedder's own, as the engine takes it
/// ([`EngineBuilder::policy`](leasehold_actors::EngineBuilder::policy)).
/// Two are equal when they are the same policy.
#[derive(Clone)]
pub struct OwnPolicy(pub Arc<dyn VerdictPolicy>);

impl std::fmt::Debug for OwnPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OwnPolicy({})", self.0.name())
    }
}

impl PartialEq for OwnPolicy {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A supervision strategy of an embedder's own, as the engine takes it
/// ([`EngineBuilder::strategy`](leasehold_actors::EngineBuilder::strategy)):
/// one instance per loop. Two are equal when they are the same factory.
#[derive(Clone)]
pub struct Supervisor(pub StrategyFactory);

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Supervisor(custom)")
    }
}

impl PartialEq for Supervisor {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Strategy {
    /// This strategy, renamed `name`, with `factory`'s supervision
    /// strategy instead of its own: to compare a
    /// [`SupervisionStrategy`](leasehold_actors::SupervisionStrategy) of
    /// yours with the built-ins, under the same verdict policy and leases.
    /// The report says its supervision is `custom`.
    #[must_use]
    pub fn supervised_by(self, name: impl Into<String>, factory: StrategyFactory) -> Self {
        Self {
            name: name.into(),
            supervisor: Some(Supervisor(factory)),
            ..self
        }
    }

    /// This strategy, renamed `name`, judged by `policy` — a verdict policy
    /// of yours — instead of its own: to compare it with the built-ins
    /// under the same leases, renewals and restarts. The report names its
    /// policy by `policy`'s name.
    #[must_use]
    pub fn judged_by(self, name: impl Into<String>, policy: Arc<dyn VerdictPolicy>) -> Self {
        Self {
            name: name.into(),
            policy: PolicyName::new("policy", policy.name()).unwrap_or(PolicyName::LEASEHOLD),
            judge: Some(OwnPolicy(policy)),
            ..self
        }
    }

    /// The flow's lease overrides that apply it.
    pub fn lease_overrides(&self) -> LeaseOverrides {
        LeaseOverrides {
            model_stream: Some(self.lease),
            model_blocking: Some(self.lease),
            tool_call: Some(self.lease),
            worker_step: Some(self.lease),
            max_renewals: Some(self.shared.max_renewals),
            free_renewals: Some(self.shared.free_renewals),
            evidence_renewals: None,
            policy: Some(PolicyChoice::all(self.policy.clone())),
            pace: None,
        }
    }

    /// The flow's supervision overrides that apply it, without jitter so
    /// that a seed gives one report.
    pub fn supervision_overrides(&self) -> SupervisionOverrides {
        SupervisionOverrides {
            strategy: Some(self.shared.supervision),
            max_restarts: Some(self.shared.max_restarts),
            backoff_initial: self.shared.backoff,
            backoff_max: self
                .shared
                .backoff
                .map(|backoff| backoff.max(leasehold_actors::RestartPolicy::default().backoff_max)),
            jitter: Some(0.0),
            on_exhausted: Some(self.shared.on_exhausted),
            ..SupervisionOverrides::default()
        }
    }
}

fn policy_named(name: &str) -> Option<PolicyName> {
    BUILT_IN.into_iter().find(|policy| policy.as_str() == name)
}

/// The verdict policy named `name`: a built-in, or one of `policies` with
/// the policy that judges for it.
fn judge_named(
    name: &str,
    policies: &[Arc<dyn VerdictPolicy>],
) -> Option<(PolicyName, Option<OwnPolicy>)> {
    if let Some(policy) = policy_named(name) {
        return Some((policy, None));
    }
    let own = policies.iter().find(|policy| policy.name() == name)?;
    let policy = PolicyName::new("policy", own.name()).ok()?;
    Some((policy, Some(OwnPolicy(Arc::clone(own)))))
}

/// The names that would do where `name` was refused: the built-ins,
/// `policies` (the embedder's own) and the strategies `defined`.
fn known(policies: &[Arc<dyn VerdictPolicy>], defined: &[StrategyDefinition]) -> String {
    let known: Vec<&str> = BUILT_IN
        .iter()
        .map(PolicyName::as_str)
        .chain(policies.iter().map(|p| p.name()))
        .chain(defined.iter().map(|d| d.name.as_str()))
        .collect();
    known.join(", ")
}

/// A policy's name that names none, refused at `key`.
fn unknown_policy(
    key: &str,
    name: &str,
    policies: &[Arc<dyn VerdictPolicy>],
    defined: &[StrategyDefinition],
) -> WorkloadError {
    WorkloadError::new(
        key,
        format!(
            "unknown verdict policy `{name}`: expected one of {}",
            known(policies, defined)
        ),
    )
}

/// A strategy's name that names none, refused at `key`.
fn unknown(
    key: impl Into<String>,
    name: &str,
    policies: &[Arc<dyn VerdictPolicy>],
    defined: &[StrategyDefinition],
) -> WorkloadError {
    WorkloadError::new(
        key,
        format!(
            "unknown strategy `{name}`: expected one of {}, optionally with `@LEASE` (as `deadline@30s`)",
            known(policies, defined)
        ),
    )
}

/// The flow's rule on renewals (free ones at most the cap), as the engine
/// would apply it to these settings, naming the workload's key.
/// The strategy at `at` gives no more free renewals than its cap
/// ([`rules::free_renewals_within_cap`]), refused at `{at}.free_renewals`.
fn check_renewals(at: &str, settings: &StrategySettings) -> Result<(), WorkloadError> {
    rules::free_renewals_within_cap(settings.free_renewals, settings.max_renewals).map_err(
        |broken| {
            let refusal = broken.named(format!("{at}.free_renewals"), "`max_renewals`");
            WorkloadError::new(refusal.field.clone(), refusal.expected_got())
        },
    )
}

fn check_lease(key: &str, lease: Duration) -> Result<(), WorkloadError> {
    leasehold_actors::check_positive_duration(key, lease)
        .map_err(|e| WorkloadError::new(key, format!("expected {}", e.expected)))?;
    if lease < leasehold_actors::MIN_LEASE {
        return Err(WorkloadError::new(
            key,
            format!(
                "expected a lease of at least {} (the shortest lease leasehold runs), got {}",
                humantime::format_duration(leasehold_actors::MIN_LEASE),
                humantime::format_duration(lease)
            ),
        ));
    }
    Ok(())
}

fn human_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|text| parse_human(text).map_err(serde::de::Error::custom))
        .collect()
}
