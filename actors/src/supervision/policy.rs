//! Verdict policies: what an expired lease gets without a model call, and
//! when the evaluator is asked — and the registry that names them.
//!
//! A [`VerdictPolicy`] is a pure function from an expiry — the lease's kind
//! and length, its renewals so far and its cap, where it stands on the
//! ladder, its evidence (phi, age, repetition) and its streak of evidence
//! renewals — to a [`Judgement`]: a verdict, or "ask the evaluator". The
//! lease actor is the one place a verdict is decided: it judges each expiry
//! by its lease's policy, and only what the policy leaves to the evaluator
//! goes to the watchdog, which runs the evaluator (its timeout, its
//! breaker, its record) and nothing else. A policy reads no clock and keeps
//! no state: it is judged on paused time, and swapped for an experiment by
//! name in a flow (`leases.policy`) or in the configuration
//! (`watchdog.policy`), for every lease or per lease kind
//! ([`PolicyChoice`]).
//!
//! A policy is a port: implement [`VerdictPolicy`] and register it with the
//! engine's builder ([`EngineBuilder::policy`](crate::EngineBuilder::policy));
//! configuration and flows then name it like a built-in, and an unknown
//! name is refused when the engine is built or the run is started, naming
//! the key. Four ship, pre-registered ([`Policies::builtin`]):
//!
//! - [`LeaseholdPolicy`] (`leasehold`), the default: the renewal cap
//!   intervenes; a lease whose evidence turns suspicious against its
//!   learned pace expires early, past the ladder; the first
//!   `free_renewals` expiries renew (the ladder); a progress value that
//!   rose since the last expiry, within its total, renews
//!   (`decided_by = progress`, with no streak limit: a counter advancing
//!   toward its total is the strongest evidence there is); fresh evidence
//!   (phi below threshold, not repetitive, fewer than `evidence_renewals`
//!   evidence renewals in a row) renews; anything else asks the evaluator.
//! - [`DeadlinePolicy`] (`deadline`): the first expiry intervenes, as a
//!   plain timeout would. The baseline every deadline-based runtime stands
//!   for.
//! - [`IdleKillPolicy`] (`idle_kill`): an expiry intervenes when the
//!   operation has been silent for a whole lease (or said nothing at all),
//!   and renews otherwise, without ever asking the evaluator: an idle
//!   timeout that any sign from the peer resets — progress, or a keep-alive
//!   — as a read timeout, or LangGraph's idle timeout with a heartbeat per
//!   chunk, is.
//! - [`AlwaysEvaluatePolicy`] (`always_evaluate`): no free renewals, no
//!   evidence rung; every expiry below the cap asks the evaluator.
//!
//! Every built-in intervenes at the renewal cap ([`renewal_cap`]): however
//! lenient a policy is, an operation is bounded. A policy of one's own
//! that forgets the cap is bounded all the same: the lease actor
//! intervenes at the cap whatever the policy says.
//!
//! The cap bounds doubt, not progress. A renewal on strong evidence
//! ([`strong_evidence`]: a progress value that advanced toward its known
//! total, or answer text that keeps arriving at its usual pace without
//! repeating) is not counted toward it; such an operation is bounded by its
//! own limits (its total, `max_tokens`, the answer cap) and by the lease's
//! ceiling in time (`lease.ceiling`). And under a policy that says so
//! ([`VerdictPolicy::checkpoints_at_cap`], the default's), reaching the cap
//! while the evidence is fresh ([`fresh_evidence`]) is a checkpoint that
//! extends the cap by the doubt one cap allows, at most
//! [`MAX_CAP_CHECKPOINTS`] times, instead of a restart from zero.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::ConfigError;
use crate::vocabulary::evidence::EvidenceSummary;
use crate::vocabulary::lease::LeaseKind;
use crate::vocabulary::verdict::{DecidedBy, Decision, Verdict};

/// What a verdict policy sees of one expiry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Expiry<'a> {
    /// Whether the lease expired before its period's end, because its
    /// evidence became suspicious against its learned pace (only for a
    /// policy whose [`VerdictPolicy::expires_early`] says so): the ladder
    /// does not apply to it.
    pub early: bool,
    /// What the lease watches.
    pub kind: LeaseKind,
    /// One lease period.
    pub lease: Duration,
    /// Renewals so far (by `load` aside): the ladder renews the first
    /// `free_renewals` of them.
    pub renewals: u32,
    /// Renewals in doubt in a row, the ones the cap counts: under a policy
    /// that follows rule 13, an expiry with strong evidence
    /// ([`strong_evidence`]) ends a stretch of doubt and is not counted; for
    /// any other, every renewal.
    pub doubts: u32,
    /// The renewal cap: the expiry after this many renewals in doubt ends
    /// the operation (raised by each checkpoint at the cap).
    pub max_renewals: u32,
    /// How many expiries the ladder renews for free.
    pub free_renewals: u32,
    /// The evidence, judged now.
    pub evidence: &'a EvidenceSummary,
    /// Items of evidence (keepalives aside) that arrived since the lease's
    /// previous expiry was judged.
    pub new_items: u64,
    /// phi at or above which evidence is suspicious, for this kind.
    pub phi_threshold: f64,
    /// Renewals decided on evidence alone, in a row, before this expiry.
    pub evidence_renewals: u32,
    /// How many of those may follow each other before the evaluator is
    /// asked anyway.
    pub max_evidence_renewals: u32,
    /// The share of repeated n-grams above which evidence is suspicious.
    pub repetition_threshold: f64,
}

impl Expiry<'_> {
    /// Whether the evidence repeats itself past the threshold: a loop.
    pub fn repetitive(&self) -> bool {
        self.evidence
            .repetition
            .is_some_and(|share| share > self.repetition_threshold)
    }
}

/// A policy's answer to an expiry.
#[derive(Clone, Debug, PartialEq)]
pub enum Judgement {
    /// This verdict, with who decided it and why.
    Decided(Decision),
    /// The policy cannot tell: the evaluator is asked (and, if it fails or
    /// there is none, the breaker renews).
    AskEvaluator,
}

/// A verdict policy: a port. Implement it, register it with
/// [`EngineBuilder::policy`](crate::EngineBuilder::policy) (or in
/// [`Policies`]), and name it in configuration or flows, for every lease
/// or for one kind of lease; compare it with the built-ins in an
/// experiment.
///
/// A policy judges one expiry at a time, purely: no clock, no state, no
/// I/O. It is called by the lease actor, the one place a verdict is
/// decided, on the evidence of that instant; what it leaves to the
/// evaluator ([`Judgement::AskEvaluator`]) goes to the watchdog. The
/// renewal cap holds whatever it says.
///
/// ```
/// use std::sync::Arc;
/// use leasehold_actors::prelude::*;
///
/// /// Renews while anything arrived in the last lease, else asks the
/// /// evaluator: an idle timeout with a judge instead of a kill.
/// #[derive(Debug)]
/// struct AskWhenIdle;
///
/// impl VerdictPolicy for AskWhenIdle {
///     fn name(&self) -> &str {
///         "ask_when_idle"
///     }
///
///     fn judge(&self, expiry: &Expiry<'_>) -> Judgement {
///         if let Some(capped) = renewal_cap(expiry) {
///             return capped;
///         }
///         let lease_ms = expiry.lease.as_millis() as u64;
///         match expiry.evidence.last_progress_age_ms {
///             Some(age) if age < lease_ms => Judgement::Decided(Decision::renew(
///                 DecidedBy::Policy,
///                 format!("progress {age} ms ago"),
///             )),
///             _ => Judgement::AskEvaluator,
///         }
///     }
/// }
///
/// let mut policies = Policies::builtin();
/// policies.register(Arc::new(AskWhenIdle))?;
/// // A configuration or a flow may now say `policy = "ask_when_idle"`,
/// // for every lease or for one kind of lease.
/// let choice: PolicyChoice = "leasehold, tool_call = ask_when_idle".parse()?;
/// policies.check(&choice, "leases.policy")?;
/// assert_eq!(policies.resolve(&choice, LeaseKind::ToolCall).name(), "ask_when_idle");
/// assert_eq!(policies.resolve(&choice, LeaseKind::ModelStream).name(), "leasehold");
/// # Ok::<(), ConfigError>(())
/// ```
pub trait VerdictPolicy: Send + Sync + fmt::Debug + 'static {
    /// The policy's name, as in configuration and flows: lowercase letters,
    /// digits and `_`, starting with a letter (see [`PolicyName`]).
    fn name(&self) -> &str;

    /// Judges one expiry. Pure: the same expiry gets the same judgement.
    fn judge(&self, expiry: &Expiry<'_>) -> Judgement;

    /// Whether a lease under this policy expires before its period's end
    /// when its evidence becomes suspicious (phi at its threshold) against
    /// a history — its pace key's learned pace, or enough items of its own.
    /// The period stays the bound for operations with no history. `false`
    /// by default: a baseline (a deadline, an idle timeout) keeps its
    /// period.
    fn expires_early(&self) -> bool {
        false
    }

    /// Whether the policy may ever ask the evaluator (`true` by default):
    /// the configuration's timing arithmetic counts evaluator calls only
    /// for policies that do.
    fn asks_the_evaluator(&self) -> bool {
        true
    }

    /// Whether the policy follows rule 13, the cap bounds doubt, not
    /// progress: a renewal of an expiry with strong evidence
    /// ([`strong_evidence`]) is not counted toward the cap, and reaching the
    /// cap while the evidence is fresh is a checkpoint that extends it (at
    /// most [`MAX_CAP_CHECKPOINTS`] times) rather than the operation's end.
    /// `false` by default: a baseline counts every renewal, as it always
    /// did; [`LeaseholdPolicy`] says yes.
    fn checkpoints_at_cap(&self) -> bool {
        false
    }
}

/// How many times the renewal cap of one lease may be extended at a
/// checkpoint, on fresh evidence. Each extension adds the doubt one cap
/// allows past its ladder (`max_renewals − free_renewals`: 8 by default,
/// so a lease capped at 10 goes at most 10 → 18 → 26 → 34), so that an
/// operation that falls silent after a checkpoint is still given up within
/// the printed worst case, counted from its silence.
pub const MAX_CAP_CHECKPOINTS: u32 = 3;

/// Whether `expiry` came while the operation showed strong evidence, which
/// under rule 13 ends a stretch of doubt: the cap counts renewals in doubt
/// in a row, and an expiry with strong evidence is not one, whoever renews
/// it (the evaluator asked by the evidence streak too). Strong evidence is
/// a progress value that advanced toward its known total since the last
/// expiry (bounded by that total), or answer bytes — text, reasoning, a
/// tool call's arguments — still arriving (new items since the previous
/// expiry was judged) at their usual pace (phi below its threshold) without repeating
/// (bounded by `max_tokens` and the answer cap). A silence, keepalives,
/// progress with no total or a loop are doubt.
pub fn strong_evidence(expiry: &Expiry<'_>) -> bool {
    let evidence = expiry.evidence;
    let toward_total = evidence
        .progress
        .is_some_and(|p| p.advanced && p.total.is_some_and(|total| p.value <= total));
    let kinds = &evidence.kinds;
    let answer = kinds.text + kinds.reasoning + kinds.tool_call;
    let streaming = answer > 0
        && expiry.new_items > 0
        && evidence.phi.is_some_and(|phi| phi < expiry.phi_threshold)
        && !expiry.repetitive();
    toward_total || streaming
}

/// Why the evidence of `expiry` is fresh enough to extend a cap at a
/// checkpoint, if it is: a progress value that rose since the last expiry,
/// or items that keep arriving (phi below its threshold, the last one
/// within a lease period) without repeating. Keepalives never are.
pub fn fresh_evidence(expiry: &Expiry<'_>) -> Option<String> {
    let evidence = expiry.evidence;
    if let Some(progress) = evidence.progress.filter(|p| p.advanced) {
        return Some(format!(
            "progress advanced to {}{}",
            progress.value,
            progress
                .total
                .map(|total| format!(" of {total}"))
                .unwrap_or_default()
        ));
    }
    let lease_ms = u64::try_from(expiry.lease.as_millis()).unwrap_or(u64::MAX);
    let repetitive = expiry.repetitive();
    match (evidence.phi, evidence.last_progress_age_ms) {
        (Some(phi), Some(age))
            if evidence.count > 0
                && phi < expiry.phi_threshold
                && age < lease_ms
                && !repetitive =>
        {
            Some(evidence.describe(Some(expiry.phi_threshold)))
        }
        _ => None,
    }
}

/// The renewal cap, shared by every built-in policy: once a lease has been
/// renewed `max_renewals` times in doubt ([`Expiry::doubts`]), its next
/// expiry intervenes (`decided_by = cap`), and the lease ends the operation
/// as capped.
pub fn renewal_cap(expiry: &Expiry<'_>) -> Option<Judgement> {
    (expiry.doubts >= expiry.max_renewals).then(|| {
        Judgement::Decided(Decision {
            verdict: Verdict::Intervene,
            reason: format!(
                "renewal cap reached: max_renewals = {}",
                expiry.max_renewals
            ),
            nudge: None,
            decided_by: DecidedBy::Cap,
        })
    })
}

/// The default: cap, ladder, evidence, then the evaluator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseholdPolicy;

impl VerdictPolicy for LeaseholdPolicy {
    fn name(&self) -> &str {
        PolicyName::LEASEHOLD.as_str()
    }

    fn expires_early(&self) -> bool {
        true
    }

    fn checkpoints_at_cap(&self) -> bool {
        true
    }

    fn judge(&self, expiry: &Expiry<'_>) -> Judgement {
        if let Some(capped) = renewal_cap(expiry) {
            return capped;
        }
        if !expiry.early && expiry.renewals < expiry.free_renewals {
            return Judgement::Decided(Decision::renew(
                DecidedBy::Ladder,
                format!(
                    "free renewal {} of {}",
                    expiry.renewals + 1,
                    expiry.free_renewals
                ),
            ));
        }
        let evidence = expiry.evidence;
        if let Some(progress) = evidence.progress.filter(|p| p.advanced) {
            return Judgement::Decided(Decision::renew(
                DecidedBy::Progress,
                format!(
                    "progress advanced{} to {}{}",
                    progress
                        .previous
                        .map(|before| format!(" from {before}"))
                        .unwrap_or_default(),
                    progress.value,
                    progress
                        .total
                        .map(|total| format!(" of {total}"))
                        .unwrap_or_default(),
                ),
            ));
        }
        let repetitive = expiry.repetitive();
        let streak_left = expiry.evidence_renewals < expiry.max_evidence_renewals;
        match evidence.phi {
            Some(phi)
                if evidence.count > 0
                    && phi < expiry.phi_threshold
                    && !repetitive
                    && streak_left =>
            {
                Judgement::Decided(Decision::renew(
                    DecidedBy::Evidence,
                    format!(
                        "evidence is fresh: {}; evidence renewal {} of {} in a row",
                        evidence.describe(Some(expiry.phi_threshold)),
                        expiry.evidence_renewals + 1,
                        expiry.max_evidence_renewals
                    ),
                ))
            }
            _ => Judgement::AskEvaluator,
        }
    }
}

/// The first expiry intervenes, as a plain timeout would.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeadlinePolicy;

impl VerdictPolicy for DeadlinePolicy {
    fn name(&self) -> &str {
        PolicyName::DEADLINE.as_str()
    }

    fn asks_the_evaluator(&self) -> bool {
        false
    }

    fn judge(&self, expiry: &Expiry<'_>) -> Judgement {
        if let Some(capped) = renewal_cap(expiry) {
            return capped;
        }
        Judgement::Decided(Decision {
            verdict: Verdict::Intervene,
            reason: format!(
                "deadline: the operation outlived its {} ms",
                expiry.lease.as_millis()
            ),
            nudge: None,
            decided_by: DecidedBy::Policy,
        })
    }
}

/// Intervenes once the evidence has been silent for a whole lease; renews
/// otherwise; never asks the evaluator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdleKillPolicy;

impl VerdictPolicy for IdleKillPolicy {
    fn name(&self) -> &str {
        PolicyName::IDLE_KILL.as_str()
    }

    fn asks_the_evaluator(&self) -> bool {
        false
    }

    fn judge(&self, expiry: &Expiry<'_>) -> Judgement {
        if let Some(capped) = renewal_cap(expiry) {
            return capped;
        }
        let lease_ms = u64::try_from(expiry.lease.as_millis()).unwrap_or(u64::MAX);
        // Any sign from the peer resets an idle timeout, a keep-alive too:
        // as a socket's read timeout, or a heartbeat per chunk, would.
        let evidence = expiry.evidence;
        let heard = match (evidence.last_progress_age_ms, evidence.keepalive_age_ms) {
            (Some(progress), Some(keepalive)) => Some(progress.min(keepalive)),
            (progress, keepalive) => progress.or(keepalive),
        };
        let decision = match heard {
            Some(age) if age < lease_ms => Decision::renew(
                DecidedBy::Policy,
                format!("idle_kill: progress {age} ms ago, within the {lease_ms} ms lease"),
            ),
            Some(age) => Decision {
                verdict: Verdict::Intervene,
                reason: format!("idle_kill: no progress for {age} ms, a whole lease"),
                nudge: None,
                decided_by: DecidedBy::Policy,
            },
            None => Decision {
                verdict: Verdict::Intervene,
                reason: format!("idle_kill: no progress at all in the {lease_ms} ms lease"),
                nudge: None,
                decided_by: DecidedBy::Policy,
            },
        };
        Judgement::Decided(decision)
    }
}

/// No free renewals and no evidence rung: every expiry below the cap asks
/// the evaluator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlwaysEvaluatePolicy;

impl VerdictPolicy for AlwaysEvaluatePolicy {
    fn name(&self) -> &str {
        PolicyName::ALWAYS_EVALUATE.as_str()
    }

    fn judge(&self, expiry: &Expiry<'_>) -> Judgement {
        renewal_cap(expiry).unwrap_or(Judgement::AskEvaluator)
    }
}

/// The name of a verdict policy, as configuration and flows say it:
/// lowercase ASCII letters, digits and `_`, starting with a letter, at
/// most 64 bytes. One spelling everywhere: configuration, flows, events,
/// experiments.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyName(Cow<'static, str>);

impl PolicyName {
    /// [`LeaseholdPolicy`]'s name, the default.
    pub const LEASEHOLD: Self = Self(Cow::Borrowed("leasehold"));
    /// [`DeadlinePolicy`]'s name.
    pub const DEADLINE: Self = Self(Cow::Borrowed("deadline"));
    /// [`IdleKillPolicy`]'s name.
    pub const IDLE_KILL: Self = Self(Cow::Borrowed("idle_kill"));
    /// [`AlwaysEvaluatePolicy`]'s name.
    pub const ALWAYS_EVALUATE: Self = Self(Cow::Borrowed("always_evaluate"));
    /// The built-ins' names, in a fixed order.
    pub const BUILT_IN: [Self; 4] = [
        Self::LEASEHOLD,
        Self::DEADLINE,
        Self::IDLE_KILL,
        Self::ALWAYS_EVALUATE,
    ];
    /// The longest name, in bytes.
    pub const MAX_LEN: usize = 64;

    /// `name`, if it is one: refused otherwise, naming `key`.
    pub fn new(key: &str, name: impl Into<String>) -> Result<Self, ConfigError> {
        let name = name.into();
        let valid = name.len() <= Self::MAX_LEN
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(ConfigError::new(
                key,
                "a policy name: lowercase letters, digits and `_`, starting with a letter, \
                 at most 64 bytes",
                format_args!("{name:?}"),
            ));
        }
        Ok(Self(Cow::Owned(name)))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::str::FromStr for PolicyName {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::new("policy", text)
    }
}

impl Serialize for PolicyName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PolicyName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::new("policy", text).map_err(|e| serde::de::Error::custom(e.expected_got()))
    }
}

/// Which policy judges each kind of lease: one for every kind, one per
/// kind, or both (a kind's own wins). Each name is `None` where this choice
/// says nothing, so that a flow's choice can lie over the configuration's
/// ([`PolicyChoice::over`]); a kind that no choice names is judged by
/// [`LeaseholdPolicy`].
///
/// Written as text — in configuration, an environment variable or a flow —
/// as comma-separated items, each a policy name (for every kind) or
/// `KIND = NAME`: `deadline`, `leasehold, tool_call = idle_kill`. In a
/// flow's TOML or JSON it may also be a table: `{ default = "leasehold",
/// tool_call = "idle_kill" }`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyChoice {
    /// The policy of every kind that has none of its own.
    pub default: Option<PolicyName>,
    /// Each kind's own, in [`LeaseKind::ALL`]'s order.
    by_kind: [Option<PolicyName>; 4],
}

fn kind_index(kind: LeaseKind) -> usize {
    match kind {
        LeaseKind::ModelStream => 0,
        LeaseKind::ModelBlocking => 1,
        LeaseKind::ToolCall => 2,
        LeaseKind::WorkerStep => 3,
    }
}

impl PolicyChoice {
    /// `name` for every kind.
    pub fn all(name: PolicyName) -> Self {
        Self {
            default: Some(name),
            by_kind: Default::default(),
        }
    }

    /// This choice, with `name` for `kind`.
    #[must_use]
    pub fn with_kind(mut self, kind: LeaseKind, name: PolicyName) -> Self {
        self.by_kind[kind_index(kind)] = Some(name);
        self
    }

    /// The name this choice gives `kind`, if any: its own, else the default.
    pub fn for_kind(&self, kind: LeaseKind) -> Option<&PolicyName> {
        self.by_kind[kind_index(kind)]
            .as_ref()
            .or(self.default.as_ref())
    }

    /// The name `kind` is judged by: this choice's, else `leasehold`.
    pub fn name_for(&self, kind: LeaseKind) -> &PolicyName {
        self.for_kind(kind).unwrap_or(&PolicyName::LEASEHOLD)
    }

    /// Whether this choice names nothing.
    pub fn is_empty(&self) -> bool {
        self.default.is_none() && self.by_kind.iter().all(Option::is_none)
    }

    /// This choice over `base`: for each kind, this choice's name where it
    /// gives one (its kind's own or its default), else `base`'s.
    #[must_use]
    pub fn over(&self, base: &Self) -> Self {
        let mut merged = Self {
            default: self.default.clone().or_else(|| base.default.clone()),
            by_kind: Default::default(),
        };
        for kind in LeaseKind::ALL {
            let own = &self.by_kind[kind_index(kind)];
            merged.by_kind[kind_index(kind)] = match (own, &self.default) {
                (Some(name), _) => Some(name.clone()),
                // This choice's default covers every kind it does not name,
                // over the base's kind-specific names too.
                (None, Some(_)) => None,
                (None, None) => base.by_kind[kind_index(kind)].clone(),
            };
        }
        merged
    }

    /// Every name this choice gives, with the key that gives it under
    /// `key` (`leases.policy`, `leases.policy.tool_call`).
    pub fn names<'a>(&'a self, key: &'a str) -> impl Iterator<Item = (String, &'a PolicyName)> {
        let default = self.default.iter().map(move |name| (key.to_owned(), name));
        let kinds = LeaseKind::ALL.into_iter().filter_map(move |kind| {
            self.by_kind[kind_index(kind)]
                .as_ref()
                .map(|name| (format!("{key}.{kind}"), name))
        });
        default.chain(kinds)
    }

    /// Parses the text form, naming `key` in errors.
    pub fn parse_at(key: &str, text: &str) -> Result<Self, ConfigError> {
        let mut choice = Self::default();
        for item in text.split(',').map(str::trim) {
            if item.is_empty() {
                return Err(ConfigError::new(
                    key,
                    "policy names separated by commas, each `NAME` or `KIND = NAME` \
                     (as `leasehold, tool_call = idle_kill`)",
                    format_args!("{text:?}"),
                ));
            }
            match item.split_once('=') {
                Some((kind, name)) => {
                    let (kind, name) = (kind.trim(), name.trim());
                    let Some(kind) = LeaseKind::ALL.into_iter().find(|k| k.as_str() == kind) else {
                        return Err(ConfigError::new(
                            key,
                            "a lease kind: model_stream, model_blocking, tool_call or worker_step",
                            format_args!("{kind:?}"),
                        ));
                    };
                    let slot = &mut choice.by_kind[kind_index(kind)];
                    if slot.is_some() {
                        return Err(ConfigError::new(
                            format!("{key}.{kind}"),
                            "one policy per lease kind",
                            format_args!("{text:?}"),
                        ));
                    }
                    *slot = Some(PolicyName::new(&format!("{key}.{kind}"), name)?);
                }
                None => {
                    if choice.default.is_some() {
                        return Err(ConfigError::new(
                            key,
                            "one policy for every kind, and `KIND = NAME` for the others",
                            format_args!("{text:?}"),
                        ));
                    }
                    choice.default = Some(PolicyName::new(key, item)?);
                }
            }
        }
        Ok(choice)
    }
}

impl fmt::Display for PolicyChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items = Vec::new();
        if let Some(name) = &self.default {
            items.push(name.to_string());
        }
        for kind in LeaseKind::ALL {
            if let Some(name) = &self.by_kind[kind_index(kind)] {
                items.push(format!("{kind} = {name}"));
            }
        }
        if items.is_empty() {
            return f.write_str(PolicyName::LEASEHOLD.as_str());
        }
        f.write_str(&items.join(", "))
    }
}

impl std::str::FromStr for PolicyChoice {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse_at("policy", text)
    }
}

impl From<PolicyName> for PolicyChoice {
    fn from(name: PolicyName) -> Self {
        Self::all(name)
    }
}

impl Serialize for PolicyChoice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PolicyChoice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Text(String),
            Table(Table),
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            default: Option<PolicyName>,
            model_stream: Option<PolicyName>,
            model_blocking: Option<PolicyName>,
            tool_call: Option<PolicyName>,
            worker_step: Option<PolicyName>,
        }
        match Form::deserialize(deserializer).map_err(|_| {
            serde::de::Error::custom(
                "expected a policy name, `NAME, KIND = NAME, …`, or a table of `default`, \
                 `model_stream`, `model_blocking`, `tool_call` and `worker_step`",
            )
        })? {
            Form::Text(text) => Self::parse_at("policy", &text)
                .map_err(|e| serde::de::Error::custom(e.expected_got())),
            Form::Table(table) => Ok(Self {
                default: table.default,
                by_kind: [
                    table.model_stream,
                    table.model_blocking,
                    table.tool_call,
                    table.worker_step,
                ],
            }),
        }
    }
}

/// The verdict policies an engine knows, by name: the built-ins, and those
/// an embedder registers.
#[derive(Clone)]
pub struct Policies {
    by_name: BTreeMap<PolicyName, Arc<dyn VerdictPolicy>>,
}

impl Policies {
    /// The four built-ins.
    pub fn builtin() -> Self {
        let builtins: [Arc<dyn VerdictPolicy>; 4] = [
            Arc::new(LeaseholdPolicy),
            Arc::new(DeadlinePolicy),
            Arc::new(IdleKillPolicy),
            Arc::new(AlwaysEvaluatePolicy),
        ];
        Self {
            by_name: PolicyName::BUILT_IN.into_iter().zip(builtins).collect(),
        }
    }

    /// Registers `policy` under its name. Refused if the name is not one
    /// ([`PolicyName`]) or is taken — a built-in's too: a policy of one's
    /// own gets a name of its own, so `deadline` means the same everywhere.
    pub fn register(&mut self, policy: Arc<dyn VerdictPolicy>) -> Result<(), ConfigError> {
        let name = PolicyName::new("policy", policy.name())?;
        if self.by_name.contains_key(&name) {
            return Err(ConfigError::new(
                "policy",
                "a name no other policy has",
                format_args!("{name:?}, already registered"),
            ));
        }
        self.by_name.insert(name, policy);
        Ok(())
    }

    /// The policy named `name`, if registered.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn VerdictPolicy>> {
        self.by_name
            .iter()
            .find(|(n, _)| n.as_str() == name)
            .map(|(_, policy)| policy)
    }

    /// Every registered name, in order.
    pub fn names(&self) -> impl Iterator<Item = &PolicyName> {
        self.by_name.keys()
    }

    /// Refuses a choice naming a policy that is not registered, naming the
    /// key under `key` and the registered names.
    pub fn check(&self, choice: &PolicyChoice, key: &str) -> Result<(), ConfigError> {
        for (at, name) in choice.names(key) {
            if !self.by_name.contains_key(name) {
                let known: Vec<&str> = self.names().map(PolicyName::as_str).collect();
                return Err(ConfigError::new(
                    at,
                    format!("a registered verdict policy: {}", known.join(", ")),
                    format_args!("{name:?}"),
                ));
            }
        }
        Ok(())
    }

    /// The policy that judges `kind` under `choice`. A name that is not
    /// registered (which [`Policies::check`] refuses first) falls back to
    /// [`LeaseholdPolicy`].
    pub fn resolve(&self, choice: &PolicyChoice, kind: LeaseKind) -> Arc<dyn VerdictPolicy> {
        self.by_name
            .get(choice.name_for(kind))
            .cloned()
            .unwrap_or_else(|| Arc::new(LeaseholdPolicy))
    }
}

impl Default for Policies {
    fn default() -> Self {
        Self::builtin()
    }
}

impl fmt::Debug for Policies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.by_name.keys()).finish()
    }
}
