//! A flow may only tighten the engine's configuration.
//!
//! Whoever writes a flow — a client of `leasehold serve`, most of all — may
//! make a run stricter than the configuration, never looser: no lease below
//! the configuration's floor (`lease.min`), no more renewals, free renewals,
//! evidence renewals, restarts or budget extensions than it allows, no more
//! workers per answer, per run or in depth, and no longer retention of its
//! finished runs. Without this a posted flow
//! could switch the renewal cap off and ask for the shortest leases, so
//! that a hung call writes verdicts without end.
//!
//! A value past its bound is refused, not lowered: the refusal names the
//! flow key, the value and the configuration key with its bound, so the
//! author learns the rule instead of running something other than what was
//! written. [`within_configuration`] is checked when the engine plans a
//! run, so it holds for every way a flow arrives (a file, a request, the
//! Rust API) and for a resumed run too.

use crate::flow::{Flow, FlowError};
use crate::spawn::SpawnLimits;

use super::EngineConfig;

/// Refuses the first override of `flow` that loosens `config`, naming it.
pub(crate) fn within_configuration(flow: &Flow, config: &EngineConfig) -> Result<(), FlowError> {
    for (kind, path, lease) in flow.leases.leases() {
        let Some(lease) = lease else { continue };
        crate::rules::lease_above_floor(kind, lease, config.supervision.lease.min).map_err(
            |broken| {
                FlowError::new(
                    path,
                    format!(
                        "expected {}: a flow may only tighten the configuration, got {}",
                        crate::supervision::lease::min_lease_expected(
                            config.supervision.lease.min,
                            "lease.min"
                        ),
                        broken.got
                    ),
                )
            },
        )?;
    }
    if let (Some(asked), Some(kept)) = (flow.retention, config.retention)
        && asked > kept
    {
        return Err(FlowError::new(
            "retention",
            format!(
                "expected at most {} (the configuration's `executor.retention`): a flow may \
                 only shorten how long its finished runs are kept, got {}",
                crate::describe_duration(kept),
                crate::describe_duration(asked)
            ),
        ));
    }
    let supervision = &config.supervision;
    let counts = [
        (
            "leases.max_renewals",
            flow.leases.max_renewals,
            "lease.max_renewals",
            supervision.lease.max_renewals,
        ),
        (
            "leases.free_renewals",
            flow.leases.free_renewals,
            "watchdog.free_renewals",
            supervision.watchdog.free_renewals,
        ),
        (
            "leases.evidence_renewals",
            flow.leases.evidence_renewals,
            "watchdog.evidence_renewals",
            supervision.watchdog.evidence_renewals,
        ),
        (
            "supervision.max_restarts",
            flow.supervision.max_restarts,
            "restart.max_restarts",
            config.restart.max_restarts,
        ),
        (
            "budget.max_extensions",
            flow.budget.max_extensions,
            "budget.max_extensions",
            config.budget.max_extensions,
        ),
        (
            "spawn.max_per_answer",
            flow.spawn.max_per_answer,
            "spawn.max_per_answer",
            config.spawn.max_per_answer,
        ),
        (
            "spawn.max_per_run",
            flow.spawn.max_per_run,
            "spawn.max_per_run",
            config.spawn.max_per_run,
        ),
        (
            "spawn.max_depth",
            flow.spawn.max_depth,
            "spawn.max_depth",
            config.spawn.max_depth,
        ),
    ];
    for (path, value, key, bound) in counts {
        if let Some(value) = value
            && value > bound
        {
            return Err(FlowError::new(
                path,
                format!(
                    "expected at most {bound} (the configuration's `{key}`): a flow may only \
                     tighten the configuration, got {value}"
                ),
            ));
        }
    }
    Ok(())
}

/// The spawn limits of a run of `flow`: its `spawn` overrides on `base`
/// (checked by [`within_configuration`] to be no looser).
pub(crate) fn spawn_limits(flow: &Flow, base: SpawnLimits) -> SpawnLimits {
    let o = &flow.spawn;
    SpawnLimits {
        max_per_answer: o.max_per_answer.unwrap_or(base.max_per_answer),
        max_per_run: o.max_per_run.unwrap_or(base.max_per_run),
        max_depth: o.max_depth.unwrap_or(base.max_depth),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn flow(json: serde_json::Value) -> Flow {
        let mut flow = serde_json::json!({"name": "n", "task": "t", "max_steps": 3});
        if let (Some(flow), Some(extra)) = (flow.as_object_mut(), json.as_object()) {
            flow.extend(extra.clone());
        }
        serde_json::from_value(flow).expect("a flow")
    }

    #[test]
    fn a_flow_may_lower_every_bound() {
        let config = EngineConfig::default();
        let lower = flow(serde_json::json!({
            "leases": {"tool_call": "1s", "max_renewals": 2, "free_renewals": 1,
                       "evidence_renewals": 0},
            "supervision": {"max_restarts": 1},
            "budget": {"max_extensions": 0},
            "spawn": {"max_per_answer": 1, "max_per_run": 2, "max_depth": 0},
        }));
        within_configuration(&lower, &config).expect("tightening is allowed");
        let limits = spawn_limits(&lower, config.spawn);
        assert_eq!(
            (limits.max_per_answer, limits.max_per_run, limits.max_depth),
            (1, 2, 0)
        );
    }

    #[test]
    fn a_flow_may_shorten_the_retention_but_not_lengthen_it() {
        let mut config = EngineConfig {
            retention: Some(Duration::from_secs(3600)),
            ..EngineConfig::default()
        };
        let shorter = flow(serde_json::json!({"retention": "10m"}));
        within_configuration(&shorter, &config).expect("shortening is allowed");
        let longer = flow(serde_json::json!({"retention": "2h"}));
        let error = within_configuration(&longer, &config).unwrap_err();
        assert_eq!(error.path, "retention", "{error}");
        assert!(error.message.contains("executor.retention"), "{error}");
        assert!(
            error.message.contains("1h") && error.message.contains("2h"),
            "{error}"
        );
        // Kept for ever: any retention is shorter.
        config.retention = None;
        within_configuration(&longer, &config).expect("shorter than for ever");
        let zero = serde_json::from_value::<Flow>(serde_json::json!(
            {"name": "n", "task": "t", "max_steps": 3, "retention": "0s"}
        ))
        .expect("a flow");
        assert_eq!(zero.validate().unwrap_err().path, "retention");
    }

    #[test]
    fn a_flow_past_a_bound_is_refused_naming_the_key_the_value_and_the_bound() {
        let config = EngineConfig::default();
        for (json, path, key) in [
            (
                serde_json::json!({"leases": {"max_renewals": u32::MAX}}),
                "leases.max_renewals",
                "lease.max_renewals",
            ),
            (
                serde_json::json!({"leases": {"free_renewals": 3}}),
                "leases.free_renewals",
                "watchdog.free_renewals",
            ),
            (
                serde_json::json!({"supervision": {"max_restarts": 4}}),
                "supervision.max_restarts",
                "restart.max_restarts",
            ),
            (
                serde_json::json!({"spawn": {"max_per_answer": 17}}),
                "spawn.max_per_answer",
                "spawn.max_per_answer",
            ),
            (
                serde_json::json!({"spawn": {"max_depth": 5}}),
                "spawn.max_depth",
                "spawn.max_depth",
            ),
        ] {
            let error = within_configuration(&flow(json), &config).unwrap_err();
            assert_eq!(error.path, path, "{error}");
            assert!(error.message.contains(key), "{error}");
        }
        let mut raised = config;
        raised.supervision.lease.min = Duration::from_secs(1);
        let error = within_configuration(
            &flow(serde_json::json!({"leases": {"tool_call": "500ms"}})),
            &raised,
        )
        .unwrap_err();
        assert_eq!(error.path, "leases.tool_call");
        assert!(
            error.message.contains("1s") && error.message.contains("lease.min"),
            "{error}"
        );
    }
}
