//! Verdicts, who decided them, their audit record, and the strict parser of
//! an evaluator's answer.
//!
//! This is shared vocabulary: the event schema, the lease, the watchdog and
//! the budget checkpoint all speak it, so it imports no actor and a change to
//! an actor cannot change the wire format of a verdict.
//!
//! An evaluator must answer exactly one JSON object with exactly the keys
//! `verdict`, `reason` and `nudge`: `verdict` one of `RENEW`, `NUDGE`,
//! `INTERVENE`, `ESCALATE`; `reason` a non-empty string; `nudge` a string
//! (non-empty for `NUDGE`) or `null`. Surrounding white space is allowed;
//! anything else — prose around the object, a code fence, an unknown or
//! lower-case verdict, a missing or extra key — is refused, and the watchdog
//! turns the refusal into a breaker trip that renews.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ports::TokenCost;
use crate::strict_json::{self, kind_of, string_field};
use crate::vocabulary::evidence::EvidenceSummary;
use crate::vocabulary::lease::{LeaseId, LeaseKind, LeaseMeta};

/// What to do with an expired lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// Re-arm the timer on the same in-flight operation.
    Renew,
    /// Queue a message for the next step of the loop, then renew.
    Nudge,
    /// Cancel the operation and hand it to the restart strategy.
    Intervene,
    /// Cancel the operation and pause the run until a person answers.
    Escalate,
}

impl Verdict {
    /// The verdict's name as evaluators write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Renew => "RENEW",
            Self::Nudge => "NUDGE",
            Self::Intervene => "INTERVENE",
            Self::Escalate => "ESCALATE",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who decided a verdict: the audit trail's answer to "why did this happen".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DecidedBy {
    /// A free renewal of the cost ladder: no evaluator call.
    Ladder,
    /// Fresh evidence (phi below threshold): no evaluator call.
    Evidence,
    /// A progress value that rose since the last expiry, within its total:
    /// no evaluator call, and no evidence-streak limit.
    Progress,
    /// The evaluator's valid answer.
    Evaluator,
    /// The evaluator failed, timed out or answered something invalid (or
    /// none is configured): renewed, because ambiguity on a lease renews.
    Breaker,
    /// The lease's renewal cap, or its ceiling (`lease.ceiling`): the
    /// bounds of doubt and of time.
    Cap,
    /// The renewal cap was reached while the evidence was fresh: a
    /// checkpoint extended it by the doubt one cap allows (at most
    /// [`MAX_CAP_CHECKPOINTS`](crate::MAX_CAP_CHECKPOINTS) times) instead
    /// of restarting work that visibly converges. No evaluator call.
    Checkpoint,
    /// A verdict policy other than the default decided by its own rule (a
    /// deadline, an idle timeout): no evaluator call.
    Policy,
    /// The executor was late: the lease expired while the runtime's lag
    /// was above its bound, so the time was the runtime's, not the
    /// operation's. Renewed without counting toward the cap, the ladder or
    /// the evidence streak; no evaluator call.
    Load,
    /// A person, by hand: a lease extended or stopped from the API, the
    /// command line or the dashboard. No evaluator call.
    Person,
}

impl DecidedBy {
    /// The snake_case name, as in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ladder => "ladder",
            Self::Evidence => "evidence",
            Self::Progress => "progress",
            Self::Evaluator => "evaluator",
            Self::Breaker => "breaker",
            Self::Cap => "cap",
            Self::Checkpoint => "checkpoint",
            Self::Policy => "policy",
            Self::Load => "load",
            Self::Person => "person",
        }
    }
}

impl std::fmt::Display for DecidedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A verdict with its reason, nudge and author.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in words.
    pub reason: String,
    /// For `NUDGE`, the message for the next step.
    pub nudge: Option<String>,
    /// Who decided.
    pub decided_by: DecidedBy,
}

impl Decision {
    /// A `RENEW` decided by `decided_by` for `reason`.
    pub fn renew(decided_by: DecidedBy, reason: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Renew,
            reason: reason.into(),
            nudge: None,
            decided_by,
        }
    }
}

/// An evaluator's answer that passed the strict parser.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedVerdict {
    /// The verdict.
    pub verdict: Verdict,
    /// The evaluator's reason.
    pub reason: String,
    /// The nudge, present (and non-empty) exactly when it says something.
    pub nudge: Option<String>,
}

/// Why an evaluator's answer was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct VerdictParseError(String);

const KEYS: [&str; 3] = ["verdict", "reason", "nudge"];

/// Parses an evaluator's answer under the strict rules of this module.
pub fn parse_verdict(text: &str) -> Result<ParsedVerdict, VerdictParseError> {
    let object = strict_json::object(text, &KEYS).map_err(VerdictParseError)?;
    let verdict = match string_field(&object, "verdict").map_err(VerdictParseError)? {
        "RENEW" => Verdict::Renew,
        "NUDGE" => Verdict::Nudge,
        "INTERVENE" => Verdict::Intervene,
        "ESCALATE" => Verdict::Escalate,
        other => {
            return Err(VerdictParseError(format!(
                "unknown verdict {other:?}: expected RENEW, NUDGE, INTERVENE or ESCALATE"
            )));
        }
    };
    let reason = strict_json::reason_field(&object, "reason").map_err(VerdictParseError)?;
    let nudge = match object.get("nudge") {
        None => return Err(VerdictParseError("missing field `nudge`".into())),
        Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(VerdictParseError(format!(
                "field `nudge` must be a string or null, got {}",
                kind_of(other)
            )));
        }
    };
    if verdict == Verdict::Nudge && nudge.is_none() {
        return Err(VerdictParseError(
            "verdict NUDGE needs a non-empty `nudge`".into(),
        ));
    }
    Ok(ParsedVerdict {
        verdict,
        reason: reason.to_owned(),
        nudge,
    })
}

/// The evaluator's share of a verdict: how long it took and what it cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EvaluatorUsage {
    /// Wall time of the evaluation, in milliseconds.
    pub latency_ms: u64,
    /// Tokens spent.
    pub cost: TokenCost,
    /// Who the cost is attributed to (`engine.watchdog`).
    pub consumer: String,
    /// The evaluator's model, when it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What the call cost at the engine's prices, when the model has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<f64>,
}

/// The audit-trail record of one verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VerdictRecord {
    /// The lease.
    pub lease_id: LeaseId,
    /// What it watches.
    pub lease_kind: LeaseKind,
    /// What the operation is doing.
    pub subject: String,
    /// Renewals before this verdict.
    pub renewals: u32,
    /// The evidence the verdict was made on.
    pub evidence: EvidenceSummary,
    /// The verdict.
    pub verdict: Verdict,
    /// Why.
    pub reason: String,
    /// For `NUDGE`, the queued message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nudge: Option<String>,
    /// Who decided.
    pub decided_by: DecidedBy,
    /// Present when an evaluator was called (even if it then failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluator: Option<EvaluatorUsage>,
    /// Whether the lease expired before its period's end, its evidence
    /// suspicious against its learned pace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub early: bool,
}

impl VerdictRecord {
    /// The record of `decision` on the lease `meta`, renewed `renewals`
    /// times so far, judged on `evidence`.
    pub fn new(
        meta: &LeaseMeta,
        renewals: u32,
        evidence: EvidenceSummary,
        decision: &Decision,
        evaluator: Option<EvaluatorUsage>,
    ) -> Self {
        Self {
            lease_id: meta.id,
            lease_kind: meta.kind,
            subject: meta.subject.clone(),
            renewals,
            evidence,
            verdict: decision.verdict,
            reason: decision.reason.clone(),
            nudge: decision.nudge.clone(),
            decided_by: decision.decided_by,
            evaluator,
            early: false,
        }
    }

    /// The record of an early expiry if `early`.
    #[must_use]
    pub fn early(mut self, early: bool) -> Self {
        self.early = early;
        self
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn parse_verdict_accepts_each_verdict() {
        for (text, verdict) in [
            ("RENEW", Verdict::Renew),
            ("INTERVENE", Verdict::Intervene),
            ("ESCALATE", Verdict::Escalate),
        ] {
            let answer = format!(r#"{{"verdict": "{text}", "reason": "r", "nudge": ""}}"#);
            assert_eq!(parse_verdict(&answer).map(|p| p.verdict), Ok(verdict));
        }
        let nudge = parse_verdict(r#" {"verdict":"NUDGE","reason":"loops","nudge":"try X"} "#);
        assert_eq!(nudge.map(|p| p.nudge), Ok(Some("try X".to_owned())));
    }

    #[test]
    fn parse_verdict_refuses_everything_else() {
        for bad in [
            "",
            "RENEW",
            r#"Sure! {"verdict":"RENEW","reason":"r","nudge":""}"#,
            "```json\n{\"verdict\":\"RENEW\",\"reason\":\"r\",\"nudge\":\"\"}\n```",
            r#"{"verdict":"renew","reason":"r","nudge":""}"#,
            r#"{"verdict":"KILL","reason":"r","nudge":""}"#,
            r#"{"verdict":"RENEW","nudge":""}"#,
            r#"{"verdict":"RENEW","reason":"r"}"#,
            r#"{"verdict":"RENEW","reason":"","nudge":""}"#,
            r#"{"verdict":"RENEW","reason":"r","nudge":"","confidence":1}"#,
            r#"{"verdict":"NUDGE","reason":"r","nudge":""}"#,
            r#"{"verdict":1,"reason":"r","nudge":""}"#,
            r#"[{"verdict":"RENEW","reason":"r","nudge":""}]"#,
            r#"{"verdict":"RENEW","reason":"r","nudge":""}{}"#,
        ] {
            assert!(parse_verdict(bad).is_err(), "accepted {bad:?}");
        }
    }

    fn verdict_text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("RENEW".to_owned()),
            Just("NUDGE".to_owned()),
            Just("INTERVENE".to_owned()),
            Just("ESCALATE".to_owned()),
            "[A-Za-z]{0,10}",
        ]
    }

    proptest! {
        #[test]
        fn parse_verdict_never_panics_on_arbitrary_strings(text in any::<String>()) {
            // Either a valid verdict or a refusal: nothing else can come out.
            if let Ok(parsed) = parse_verdict(&text) {
                prop_assert!(!parsed.reason.trim().is_empty());
            }
        }

        #[test]
        fn parse_verdict_on_json_shaped_input_yields_valid_verdict_or_refusal(
            verdict in verdict_text(),
            reason in ".{0,20}",
            nudge in proptest::option::of(".{0,20}"),
            extra in proptest::option::of("[a-z]{1,8}"),
            prefix in prop_oneof![Just(String::new()), Just(" ".to_owned()), "[a-z ]{1,5}"],
        ) {
            let mut object = serde_json::json!({"verdict": verdict, "reason": reason});
            if let Some(nudge) = &nudge {
                object["nudge"] = Value::String(nudge.clone());
            }
            if let Some(extra) = &extra {
                object[extra.as_str()] = Value::Bool(true);
            }
            let text = format!("{prefix}{object}");
            match parse_verdict(&text) {
                Ok(parsed) => {
                    prop_assert_eq!(parsed.verdict.as_str(), verdict.as_str());
                    prop_assert!(nudge.is_some());
                    prop_assert!(extra.is_none());
                    prop_assert!(prefix.trim().is_empty());
                    prop_assert!(parsed.verdict != Verdict::Nudge || parsed.nudge.is_some());
                }
                Err(_) => {
                    let valid_verdict = ["RENEW", "NUDGE", "INTERVENE", "ESCALATE"].contains(&verdict.as_str());
                    let extra_is_unknown = extra.as_deref().is_some_and(|e| !KEYS.contains(&e));
                    prop_assert!(
                        !valid_verdict
                            || reason.trim().is_empty()
                            || nudge.is_none()
                            || extra_is_unknown
                            || !prefix.trim().is_empty()
                            || (verdict == "NUDGE" && nudge.as_deref().is_some_and(|n| n.trim().is_empty()))
                            || extra.as_deref().is_some_and(|e| KEYS.contains(&e)),
                        "refused a valid answer: {}", text
                    );
                }
            }
        }
    }
}
