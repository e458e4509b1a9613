//! [`FlowCheck`]: the one check a new run's flow passes before anything of
//! it is stored, whichever way the run comes — posted (`POST /runs`), run
//! from a file (`leasehold run`) or forked with changes (`POST
//! /runs/{id}/fork`, `leasehold runs fork`): its task and its whole within
//! [`RunLimits`], a valid flow, and a `notify` that names only receivers of
//! this configuration. A fork's changes cannot make a flow its server
//! would refuse if it were posted.
//!
//! A fork's own texts are bounded too ([`FlowCheck::check_fork`]): its
//! guidance as a person's text, and its changes as a whole — at most
//! [`MAX_FORK_CHANGES`] of them, and no more bytes in all than a person's
//! text (`limits.guidance`) — since they are kept in the fork's record and
//! its first event, and shown wherever the fork is.

use leasehold_actors::keyed_limits::KeyedLimit;
use leasehold_actors::{Flow, FlowError, ForkError, ForkSpec};

use crate::run_limits::{PersonText, RunLimits, TooLarge};
use crate::webhooks::Receiver;

/// The most changes one fork makes to its flow (`--set`, `"set"`): a
/// change sets one key, and a flow has far fewer keys worth changing.
pub const MAX_FORK_CHANGES: usize = 64;

/// What a new run's flow is held to: this configuration's limits and
/// webhook receivers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowCheck {
    /// What a client may make one run hold (`limits.*`).
    pub limits: RunLimits,
    /// The receivers a flow's `notify` may name (`webhooks.receivers`).
    pub receivers: Vec<Receiver>,
    /// The keyed limits a flow's `keyed_limits` may tighten
    /// (`[keyed_limits.NAME]`).
    pub keyed_limits: Vec<KeyedLimit>,
}

/// Why a new run's flow, or a fork's texts, were refused; nothing was
/// stored.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FlowRefused {
    /// Its task, its whole or a person's text is larger than allowed
    /// (`413` over the API).
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    /// The flow is not one this server runs (`422`).
    #[error(transparent)]
    Invalid(#[from] FlowError),
    /// A fork's changes, as a whole, are more than a fork may make
    /// (`422`).
    #[error(transparent)]
    Fork(#[from] ForkError),
}

impl FlowCheck {
    /// Refuses a flow that a new run may not hold: a task or a whole
    /// larger than [`RunLimits`] allows, a flow that is not valid, or a
    /// `notify` naming a receiver this configuration lacks.
    pub fn check(&self, flow: &Flow) -> Result<(), FlowRefused> {
        self.limits.check_flow(flow)?;
        flow.validate()?;
        crate::webhooks::check_notify(&self.receivers, flow)?;
        check_keyed_limits(&self.keyed_limits, flow)?;
        Ok(())
    }

    /// Refuses a fork whose own texts are too large: its guidance (as a
    /// person's guidance), or its changes — more than [`MAX_FORK_CHANGES`],
    /// or more bytes in all than `limits.guidance`. The flow the changes
    /// make is [`FlowCheck::check`]ed as the fork is made.
    pub fn check_fork(&self, spec: &ForkSpec) -> Result<(), FlowRefused> {
        if let Some(guidance) = &spec.guidance {
            self.limits.check_text(PersonText::Guidance, guidance)?;
        }
        if spec.set.len() > MAX_FORK_CHANGES {
            return Err(ForkError::Change(format!(
                "{} changes were asked, more than the {MAX_FORK_CHANGES} a fork may make; \
                 nothing was stored",
                spec.set.len()
            ))
            .into());
        }
        let bytes = spec
            .set
            .iter()
            .fold(0_usize, |sum, change| sum.saturating_add(change.len()));
        if bytes > self.limits.guidance {
            return Err(ForkError::Change(format!(
                "the changes are {bytes} bytes in all, more than the {} bytes \
                 limits.guidance allows (LEASEHOLD_LIMITS_GUIDANCE); nothing was stored",
                self.limits.guidance
            ))
            .into());
        }
        Ok(())
    }
}

/// Refuses a flow's `keyed_limits` that do more than tighten the
/// server's `limits`: a limit the server lacks, a field the server's limit
/// does not set, a number over the server's, or none at all.
pub fn check_keyed_limits(limits: &[KeyedLimit], flow: &Flow) -> Result<(), FlowError> {
    for (name, asked) in &flow.keyed_limits {
        let path = format!("keyed_limits.{name}");
        let Some(limit) = limits.iter().find(|limit| &limit.name == name) else {
            let names: Vec<&str> = limits.iter().map(|limit| limit.name.as_str()).collect();
            let has = if names.is_empty() {
                "it has none".to_owned()
            } else {
                format!("it has {}", names.join(", "))
            };
            return Err(FlowError::new(
                path,
                format!(
                    "{name:?} is not a keyed limit of this server ({has}): a flow may only \
                     tighten the server's [keyed_limits.NAME]"
                ),
            ));
        };
        if asked.live.is_none() && asked.per_minute.is_none() {
            return Err(FlowError::new(path, "expected `live` or `per_minute`"));
        }
        for (field, asked, allowed) in [
            ("live", asked.live, limit.live),
            ("per_minute", asked.per_minute, limit.per_minute),
        ] {
            let Some(asked) = asked else { continue };
            let path = format!("{path}.{field}");
            match allowed {
                None => {
                    return Err(FlowError::new(
                        path,
                        format!(
                            "the server's limit `{name}` sets no `{field}`: a flow may only \
                             tighten what it sets"
                        ),
                    ));
                }
                Some(_) if asked == 0 => {
                    return Err(FlowError::new(path, "expected at least 1"));
                }
                Some(allowed) if asked > allowed => {
                    return Err(FlowError::new(
                        path,
                        format!(
                            "{asked} is beyond what the server allows (keyed_limits.{name}.{field} \
                             = {allowed}): a flow may only tighten it"
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(notify: &[&str]) -> Flow {
        crate::flow_file::parse_json(
            &serde_json::json!({"name": "f", "task": "t", "max_steps": 1, "notify": notify})
                .to_string(),
        )
        .expect("a flow")
    }

    #[test]
    fn a_flow_naming_no_receiver_of_the_configuration_is_refused() {
        let check = FlowCheck::default();
        assert_eq!(check.check(&flow(&[])), Ok(()));
        let refused = check.check(&flow(&["nope"])).unwrap_err();
        assert!(
            matches!(&refused, FlowRefused::Invalid(e) if e.path == "notify[0]"),
            "{refused}"
        );
    }

    #[test]
    fn a_flow_may_only_tighten_the_servers_keyed_limits_and_is_refused_beyond_them() {
        let check = FlowCheck {
            keyed_limits: vec![KeyedLimit {
                name: "provider".to_owned(),
                key: "endpoint".parse().unwrap(),
                live: Some(20),
                per_minute: None,
                queued: None,
            }],
            ..FlowCheck::default()
        };
        let flow = |limits: serde_json::Value| -> Flow {
            serde_json::from_value(serde_json::json!({
                "name": "f", "task": "t", "max_steps": 2, "keyed_limits": limits
            }))
            .unwrap()
        };
        let refused = |limits: serde_json::Value| match check.check(&flow(limits)) {
            Err(FlowRefused::Invalid(error)) => (error.path, error.message),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            check.check(&flow(serde_json::json!({"provider": {"live": 5}}))),
            Ok(())
        );
        assert_eq!(
            check.check(&flow(serde_json::json!({"provider": {"live": 20}}))),
            Ok(())
        );
        let (path, message) = refused(serde_json::json!({"provider": {"live": 50}}));
        assert_eq!(path, "keyed_limits.provider.live");
        assert!(
            message.contains("beyond what the server allows") && message.contains("= 20"),
            "{message}"
        );
        let (path, _) = refused(serde_json::json!({"provider": {"per_minute": 5}}));
        assert_eq!(path, "keyed_limits.provider.per_minute");
        let (path, message) = refused(serde_json::json!({"tenants": {"live": 1}}));
        assert_eq!(path, "keyed_limits.tenants");
        assert!(message.contains("it has provider"), "{message}");
        let (path, _) = refused(serde_json::json!({"provider": {"live": 0}}));
        assert_eq!(path, "keyed_limits.provider.live");
        let (path, _) = refused(serde_json::json!({"provider": {}}));
        assert_eq!(path, "keyed_limits.provider");
        // A field a flow's limit does not have is refused as it is read.
        let odd: Result<Flow, _> = serde_json::from_value(serde_json::json!({
            "name": "f", "task": "t", "max_steps": 2, "keyed_limits": {"provider": {"queued": 3}}
        }));
        assert!(odd.unwrap_err().to_string().contains("queued"));
    }

    #[test]
    fn a_forks_changes_are_bounded_in_number_and_in_bytes() {
        let check = FlowCheck {
            limits: RunLimits {
                guidance: 100,
                ..RunLimits::default()
            },
            ..FlowCheck::default()
        };
        let with = |set: Vec<String>| ForkSpec {
            set,
            ..ForkSpec::root(2)
        };
        assert_eq!(
            check.check_fork(&with(vec!["max_steps=3".to_owned()])),
            Ok(())
        );
        let many = check
            .check_fork(&with(vec!["max_steps=3".to_owned(); MAX_FORK_CHANGES + 1]))
            .unwrap_err()
            .to_string();
        assert!(many.contains("more than the 64 a fork may make"), "{many}");
        let long = check
            .check_fork(&with(vec![format!("task={}", "x".repeat(60)); 2]))
            .unwrap_err()
            .to_string();
        assert!(long.contains("limits.guidance"), "{long}");
    }
}
