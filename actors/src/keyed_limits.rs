//! Keyed limits: how many runs that share a key may start.
//!
//! A server bounds runs by what they share — their tenant, their flow, the
//! model endpoint they call, or any of these together ([`RunKey`]) — beside
//! its one bound of live runs: "at most 20 live runs calling one provider",
//! "at most 4 live runs of one tenant", "at most 60 runs of one flow a
//! minute". The executor works out, for each limit, how many more runs of
//! each key value it may start now ([`KeyRoom`]); a claim of queued runs
//! carries that room ([`ClaimRoom`]) into the store, which skips a queued
//! run whose key has no room left and takes the next one in fair order, so
//! a run held back by one key never holds back a run of another.
//!
//! ```
//! use leasehold_actors::keyed_limits::{ClaimRoom, KeyRoom, RunKey, RunLabels};
//!
//! let key: RunKey = "tenant+flow".parse().unwrap();
//! let mut room = ClaimRoom::unlimited("http://127.0.0.1:8000/v1");
//! room.rooms.push(KeyRoom::new("per_tenant_flow", key, Some(1), None));
//! let run = |tenant: &str, flow: &str| RunLabels::from_parts(Some(tenant.into()), flow, None);
//! assert!(room.take(&run("acme", "triage")));
//! assert!(!room.take(&run("acme", "triage")), "its key has no room left");
//! assert!(room.take(&run("acme", "digest")), "another key's room is its own");
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a key reads of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyPart {
    /// The run's tenant ([`DEFAULT_TENANT`](crate::tenancy::DEFAULT_TENANT)
    /// for a run of none).
    Tenant,
    /// Its flow's name.
    Flow,
    /// The model endpoint its loops call: the executor's (`model.base_url`).
    Endpoint,
}

impl KeyPart {
    /// Its name in a key (`tenant`, `flow`, `endpoint`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Tenant => "tenant",
            Self::Flow => "flow",
            Self::Endpoint => "endpoint",
        }
    }
}

/// An expression of a run that names what runs share a limit: its parts
/// joined by `+` (`tenant`, `flow`, `endpoint`, `tenant+flow`, …), each at
/// most once.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunKey {
    parts: Vec<KeyPart>,
}

/// A key that is not one ([`RunKey::from_str`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadKey(String);

impl FromStr for RunKey {
    type Err = BadKey;

    fn from_str(text: &str) -> Result<Self, BadKey> {
        let mut parts = Vec::new();
        for part in text.split('+') {
            let part = match part.trim() {
                "tenant" => KeyPart::Tenant,
                "flow" => KeyPart::Flow,
                "endpoint" => KeyPart::Endpoint,
                other => {
                    return Err(BadKey(format!(
                        "`{other}` in key {text:?} is not a part of a run: expected `tenant`, \
                         `flow` or `endpoint`, joined by `+`"
                    )));
                }
            };
            if parts.contains(&part) {
                return Err(BadKey(format!(
                    "key {text:?} names `{}` twice",
                    part.name()
                )));
            }
            parts.push(part);
        }
        Ok(Self { parts })
    }
}

impl fmt::Display for RunKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.parts.iter().map(|part| part.name()).collect();
        f.write_str(&names.join("+"))
    }
}

impl RunKey {
    /// Its parts, in the order written.
    pub fn parts(&self) -> &[KeyPart] {
        &self.parts
    }

    /// Whether it reads only the run's tenant: a limit of queued runs is
    /// counted in the store by tenant, so it takes only this key.
    pub fn is_tenant(&self) -> bool {
        self.parts == [KeyPart::Tenant]
    }

    /// The value of this key for a run of `tenant` and flow `flow` on an
    /// executor calling `endpoint`: one text per part.
    pub fn value(&self, tenant: Option<&str>, flow: &str, endpoint: &str) -> KeyValue {
        KeyValue(
            self.parts
                .iter()
                .map(|part| match part {
                    KeyPart::Tenant => crate::tenancy::tenant_or_default(tenant).to_owned(),
                    KeyPart::Flow => flow.to_owned(),
                    KeyPart::Endpoint => endpoint.to_owned(),
                })
                .collect(),
        )
    }
}

/// A key's value for one run: one text per part of the key.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyValue(pub Vec<String>);

impl fmt::Display for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let texts: Vec<String> = self.0.iter().map(|text| format!("{text:?}")).collect();
        f.write_str(&texts.join("+"))
    }
}

/// A limit on the runs that share a key, as a server configures it
/// (`[limits.NAME]`): at most `live` of them live on one executor at once,
/// at most `per_minute` of them started by one executor in any minute,
/// at most `queued` of them queued in the store (a tenant's key only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyedLimit {
    /// Its name, as configured.
    pub name: String,
    /// What runs share it.
    pub key: RunKey,
    /// The most live runs of one key value on one executor.
    pub live: Option<u32>,
    /// The most runs of one key value one executor starts in any minute.
    pub per_minute: Option<u32>,
    /// The most queued runs of one tenant in the store, over every
    /// executor sharing it.
    pub queued: Option<u32>,
}

/// What a flow asks of a server's keyed limit for its own runs
/// (`"keyed_limits": {"provider": {"live": 5}}`): at most that many of its
/// runs among those of one key value. A flow may only tighten a limit the
/// server has: a limit it lacks, a field it does not set, or a number over
/// the server's is refused when the flow is posted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowKeyedLimit {
    /// The most live runs of this flow of one key value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<u32>,
    /// The most runs of this flow of one key value started in any minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<u32>,
}

/// The runs of each value of one limit's key that count against it now:
/// those live, and those started in the last minute; each counted as well
/// under the value with its flow's name added, for the flows that tighten
/// the limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRoom {
    /// The limit's name, as configured (`[keyed_limits.NAME]`).
    pub limit: String,
    /// What runs share it.
    pub key: RunKey,
    /// Its most live runs of one value.
    pub live: Option<u32>,
    /// Its most starts of one value in a minute.
    pub per_minute: Option<u32>,
    /// The live runs of each value.
    pub held: BTreeMap<KeyValue, usize>,
    /// The runs of each value started in the last minute.
    pub started: BTreeMap<KeyValue, usize>,
}

impl KeyRoom {
    /// A limit's room with nothing counted yet.
    pub fn new(limit: &str, key: RunKey, live: Option<u32>, per_minute: Option<u32>) -> Self {
        Self {
            limit: limit.to_owned(),
            key,
            live,
            per_minute,
            held: BTreeMap::new(),
            started: BTreeMap::new(),
        }
    }

    /// The values a run labelled `labels` counts under: its key's value,
    /// and that value with its flow's name.
    fn values(&self, labels: &RunLabels, endpoint: &str) -> [KeyValue; 2] {
        let value = self
            .key
            .value(labels.tenant.as_deref(), &labels.flow, endpoint);
        let mut of_flow = value.clone();
        of_flow.0.push(labels.flow.clone());
        [value, of_flow]
    }

    /// Counts a run labelled `labels` as live, as started, or both.
    pub fn count(&mut self, labels: &RunLabels, endpoint: &str, live: bool, started: bool) {
        for value in self.values(labels, endpoint) {
            if live {
                *self.held.entry(value.clone()).or_insert(0) += 1;
            }
            if started {
                *self.started.entry(value).or_insert(0) += 1;
            }
        }
    }

    /// How many more runs like `labels` may start: the limit's room for its
    /// key's value, and its flow's own, whichever is less.
    pub fn room_for(&self, labels: &RunLabels, endpoint: &str) -> usize {
        let [value, of_flow] = self.values(labels, endpoint);
        let left = |cap: Option<u32>, counted: &BTreeMap<KeyValue, usize>, value: &KeyValue| {
            cap.map_or(usize::MAX, |cap| {
                usize::try_from(cap)
                    .unwrap_or(usize::MAX)
                    .saturating_sub(counted.get(value).copied().unwrap_or(0))
            })
        };
        let asked = labels.limits.get(&self.limit).copied().unwrap_or_default();
        left(self.live, &self.held, &value)
            .min(left(self.per_minute, &self.started, &value))
            .min(left(asked.live, &self.held, &of_flow))
            .min(left(asked.per_minute, &self.started, &of_flow))
    }
}

/// The room a claim of queued runs has under every keyed limit
/// ([`QueueClaim::room`](crate::QueueClaim::room)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRoom {
    /// The model endpoint the claimer's runs call (the value of
    /// [`KeyPart::Endpoint`]).
    pub endpoint: String,
    /// One room per limit; none: only the claim's `max` bounds it.
    pub rooms: Vec<KeyRoom>,
}

impl Default for ClaimRoom {
    fn default() -> Self {
        Self::unlimited("")
    }
}

impl ClaimRoom {
    /// No keyed limit, for a claimer calling `endpoint`.
    pub fn unlimited(endpoint: &str) -> Self {
        Self {
            endpoint: endpoint.to_owned(),
            rooms: Vec::new(),
        }
    }

    /// Whether no keyed limit bounds the claim: a store then takes the
    /// first runs in fair order without reading what they are.
    pub fn is_unlimited(&self) -> bool {
        self.rooms.is_empty()
    }

    /// The first limit with no room for a run like `labels`, with its
    /// key's value: `None` when every limit has room.
    pub fn full_for(&self, labels: &RunLabels) -> Option<(&KeyRoom, KeyValue)> {
        self.rooms.iter().find_map(|room| {
            (room.room_for(labels, &self.endpoint) == 0).then(|| {
                let value = room
                    .key
                    .value(labels.tenant.as_deref(), &labels.flow, &self.endpoint);
                (room, value)
            })
        })
    }

    /// Takes room for one run like `labels` under every limit: `false`,
    /// and nothing taken, when one of them has none left.
    pub fn take(&mut self, labels: &RunLabels) -> bool {
        if self.full_for(labels).is_some() {
            return false;
        }
        for room in &mut self.rooms {
            room.count(labels, &self.endpoint, true, true);
        }
        true
    }

    /// Whether every limit has room for a run like `labels`.
    pub fn has_room_for(&self, labels: &RunLabels) -> bool {
        self.is_unlimited() || self.full_for(labels).is_none()
    }
}

/// What keys read of one run: its tenant, its flow's name, and what its
/// flow asks of the keyed limits. A run's handle carries them
/// ([`RunHandle::labels`](crate::RunHandle::labels)), so that an executor
/// counts its live runs by key without reading them; a stored run's are
/// [`RunRecord::labels`](crate::RunRecord::labels).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunLabels {
    /// Its tenant, `None` for the default one.
    pub tenant: Option<String>,
    /// Its flow's name.
    pub flow: String,
    /// What its flow asks of the keyed limits, by the limit's name.
    pub limits: BTreeMap<String, FlowKeyedLimit>,
}

impl RunLabels {
    /// The labels of a run of `tenant` whose flow is named `flow` and asks
    /// `limits` (its `keyed_limits`, as JSON; what does not read as such
    /// asks nothing — a flow is checked when it is posted).
    pub fn from_parts(
        tenant: Option<String>,
        flow: &str,
        limits: Option<&serde_json::Value>,
    ) -> Self {
        Self {
            tenant,
            flow: flow.to_owned(),
            limits: limits
                .and_then(|limits| serde_json::from_value(limits.clone()).ok())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_parts_of_a_run_joined_by_plus_each_once() {
        let key: RunKey = "tenant + endpoint".parse().unwrap();
        assert_eq!(key.parts(), [KeyPart::Tenant, KeyPart::Endpoint]);
        assert_eq!(key.to_string(), "tenant+endpoint");
        assert!("tenant".parse::<RunKey>().unwrap().is_tenant());
        assert!(!"tenant+flow".parse::<RunKey>().unwrap().is_tenant());
        let bad = "tenant+model".parse::<RunKey>().unwrap_err().to_string();
        assert!(
            bad.contains("`model`") && bad.contains("`endpoint`"),
            "{bad}"
        );
        let twice = "flow+flow".parse::<RunKey>().unwrap_err().to_string();
        assert!(twice.contains("twice"), "{twice}");
        assert!("".parse::<RunKey>().is_err());
    }

    fn run(tenant: Option<&str>, flow: &str) -> RunLabels {
        RunLabels::from_parts(tenant.map(str::to_owned), flow, None)
    }

    #[test]
    fn a_run_takes_room_under_every_limit_or_none() {
        let mut room = ClaimRoom::unlimited("http://models");
        let mut tenants = KeyRoom::new("tenants", "tenant".parse().unwrap(), Some(2), None);
        tenants.count(&run(Some("acme"), "a"), "http://models", true, false);
        room.rooms.push(tenants);
        room.rooms.push(KeyRoom::new(
            "provider",
            "endpoint".parse().unwrap(),
            Some(3),
            None,
        ));
        assert!(room.take(&run(Some("acme"), "a")));
        // acme's room is spent; the provider's is not taken for a refusal.
        assert!(!room.take(&run(Some("acme"), "a")));
        let (full, value) = room.full_for(&run(Some("acme"), "a")).unwrap();
        assert_eq!(
            (full.limit.as_str(), value.to_string()),
            ("tenants", "\"acme\"".to_owned())
        );
        assert!(room.take(&run(None, "a")));
        assert!(room.take(&run(None, "a")));
        // The provider's three are taken: nobody else starts.
        assert!(!room.take(&run(Some("other"), "b")));
        let (full, _) = room.full_for(&run(Some("other"), "b")).unwrap();
        assert_eq!(full.limit, "provider");
    }

    #[test]
    fn a_flow_that_tightens_a_limit_has_its_runs_counted_apart_within_it() {
        let mut room = ClaimRoom::unlimited("http://models");
        room.rooms.push(KeyRoom::new(
            "provider",
            "endpoint".parse().unwrap(),
            Some(3),
            None,
        ));
        let limits = serde_json::json!({"provider": {"live": 1}});
        let digest = RunLabels::from_parts(None, "digest", Some(&limits));
        assert_eq!(digest.limits["provider"].live, Some(1));
        assert!(room.take(&digest));
        // `digest` asks one of the provider's three: its second waits, and
        // other flows take the rest.
        assert!(!room.take(&digest));
        assert!(room.take(&run(None, "triage")));
        assert!(room.take(&run(None, "triage")));
        assert!(!room.take(&run(None, "triage")));
        // What does not read as limits asks nothing.
        let odd = serde_json::json!({"provider": "many"});
        assert!(
            RunLabels::from_parts(None, "x", Some(&odd))
                .limits
                .is_empty()
        );
    }
}
