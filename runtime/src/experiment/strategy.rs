//! Strategies: named combinations of a verdict policy, a lease length, a
//! renewal cap, free renewals and a restart policy, and the sweep that
//! makes several of them from one parameter (the lease length).
//!
//! A strategy is named `POLICY` or `POLICY@LEASE` (`deadline@30s`): the
//! policy is one of the built-ins ([`BUILT_IN`]), the lease defaults to the
//! workload's `[strategy] lease`. Every strategy of one experiment shares
//! the rest of `[strategy]`, so two strategies differ only where their
//! names say.

use std::time::Duration;

use leasehold_actors::{
    LeaseOverrides, OnExhausted, PolicyKind, StrategyKind, SupervisionOverrides,
};
use serde::{Deserialize, Deserializer};

use super::workload::{WorkloadError, human, parse_human};

/// The built-in strategy names and their policies, in report order.
pub const BUILT_IN: [(&str, PolicyKind); 4] = [
    ("leasehold", PolicyKind::Leasehold),
    ("deadline", PolicyKind::Deadline),
    ("idle-kill", PolicyKind::IdleKill),
    ("always-evaluate", PolicyKind::AlwaysEvaluate),
];

/// The strategies run when none are named: the first three built-ins, then
/// the sweep's points.
pub const DEFAULT_STRATEGIES: [&str; 3] = ["leasehold", "deadline", "idle-kill"];

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
            supervision: StrategyKind::Restart,
            on_exhausted: OnExhausted::Pause,
            sweep: None,
        }
    }
}

/// A sweep of the lease length over some policies: each pair is a strategy
/// `POLICY@LEASE`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// The built-in strategies to sweep.
    pub policies: Vec<String>,
    /// The lease lengths.
    #[serde(deserialize_with = "human_list")]
    pub leases: Vec<Duration>,
}

impl StrategySettings {
    /// Refuses nonsense, naming the key.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        check_lease("strategy.lease", self.lease)?;
        if let Some(sweep) = &self.sweep {
            for (i, name) in sweep.policies.iter().enumerate() {
                if policy_named(name).is_none() {
                    return Err(unknown(format!("strategy.sweep.policies[{i}]"), name));
                }
            }
            for (i, lease) in sweep.leases.iter().enumerate() {
                check_lease(&format!("strategy.sweep.leases[{i}]"), *lease)?;
            }
        }
        Ok(())
    }

    /// The names run when none are given: [`DEFAULT_STRATEGIES`], then
    /// every sweep point.
    pub fn default_names(&self) -> Vec<String> {
        let mut names: Vec<String> = DEFAULT_STRATEGIES.map(str::to_owned).to_vec();
        if let Some(sweep) = &self.sweep {
            for policy in &sweep.policies {
                for lease in &sweep.leases {
                    names.push(format!("{policy}@{}", humantime::format_duration(*lease)));
                }
            }
        }
        names
    }

    /// The strategy named `name` (`POLICY` or `POLICY@LEASE`).
    pub fn strategy(&self, name: &str) -> Result<Strategy, WorkloadError> {
        let (policy_name, lease) = match name.split_once('@') {
            Some((policy, lease)) => {
                let lease = parse_human(lease)
                    .map_err(|e| WorkloadError::new("--strategies", format!("`{name}`: {e}")))?;
                check_lease("--strategies", lease)?;
                (policy, lease)
            }
            None => (name, self.lease),
        };
        let policy = policy_named(policy_name).ok_or_else(|| unknown("--strategies", name))?;
        Ok(Strategy {
            name: name.to_owned(),
            policy,
            lease,
            shared: self.clone(),
        })
    }
}

/// One strategy, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Strategy {
    /// Its name, as given.
    pub name: String,
    /// The verdict policy.
    pub policy: PolicyKind,
    /// The lease of model streams, tool calls and workers (which wins
    /// over `shared.lease`).
    pub lease: Duration,
    /// The workload's `[strategy]`: the renewal cap, the free renewals and
    /// the restart policy every strategy of the experiment shares.
    pub shared: StrategySettings,
}

impl Strategy {
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
            policy: Some(self.policy),
        }
    }

    /// The flow's supervision overrides that apply it, without jitter so
    /// that a seed gives one report.
    pub fn supervision_overrides(&self) -> SupervisionOverrides {
        SupervisionOverrides {
            strategy: Some(self.shared.supervision),
            max_restarts: Some(self.shared.max_restarts),
            jitter: Some(0.0),
            on_exhausted: Some(self.shared.on_exhausted),
            ..SupervisionOverrides::default()
        }
    }
}

fn policy_named(name: &str) -> Option<PolicyKind> {
    BUILT_IN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, policy)| *policy)
}

fn unknown(key: impl Into<String>, name: &str) -> WorkloadError {
    let known: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
    WorkloadError::new(
        key,
        format!(
            "unknown strategy `{name}`: expected one of {}, optionally with `@LEASE` (as `deadline@30s`)",
            known.join(", ")
        ),
    )
}

fn check_lease(key: &str, lease: Duration) -> Result<(), WorkloadError> {
    leasehold_actors::check_positive_duration(key, lease)
        .map_err(|e| WorkloadError::new(key, format!("expected {}", e.expected)))
}

fn human_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|text| parse_human(text).map_err(serde::de::Error::custom))
        .collect()
}
