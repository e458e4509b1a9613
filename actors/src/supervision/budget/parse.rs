//! The strict parser of an evaluator's budget answer.
//!
//! An evaluator must answer exactly one JSON object with exactly the keys
//! `decision`, `reason` and `confidence`: `decision` one of `EXTEND`,
//! `WRAP_UP`; `reason` a non-empty string; `confidence` a number in [0, 1].
//! Surrounding white space is allowed; anything else — prose around the
//! object, a code fence, an unknown or lower-case decision, a missing or
//! extra key, a value of the wrong type, a confidence out of range — is
//! refused, and the checkpoint turns the refusal into a breaker trip that
//! wraps up. The discipline is the watchdog's
//! ([`parse_verdict`](crate::parse_verdict)), so every evaluator is
//! held to one standard.

use serde_json::Value;

use crate::strict_json::{self, kind_of, string_field};

/// An evaluator's budget answer that passed the strict parser.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedBudgetDecision {
    /// `true` for `EXTEND`, `false` for `WRAP_UP`.
    pub extend: bool,
    /// The evaluator's reason, non-empty.
    pub reason: String,
    /// The evaluator's confidence, in [0, 1].
    pub confidence: f64,
}

/// Why an evaluator's budget answer was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BudgetParseError(String);

const KEYS: [&str; 3] = ["decision", "reason", "confidence"];

/// Parses an evaluator's budget answer under the strict rules of this
/// module.
///
/// ```
/// use leasehold_actors::parse_budget_decision;
///
/// let parsed = parse_budget_decision(
///     r#" {"decision": "EXTEND", "reason": "two milestones left", "confidence": 0.8} "#,
/// )?;
/// assert!(parsed.extend);
/// // A lower-case decision is refused.
/// let lower = r#"{"decision": "extend", "reason": "r", "confidence": 1}"#;
/// assert!(parse_budget_decision(lower).is_err());
/// # Ok::<(), leasehold_actors::BudgetParseError>(())
/// ```
pub fn parse_budget_decision(text: &str) -> Result<ParsedBudgetDecision, BudgetParseError> {
    let object = strict_json::object(text, &KEYS).map_err(BudgetParseError)?;
    let extend = match string_field(&object, "decision").map_err(BudgetParseError)? {
        "EXTEND" => true,
        "WRAP_UP" => false,
        other => {
            return Err(BudgetParseError(format!(
                "unknown decision {other:?}: expected EXTEND or WRAP_UP"
            )));
        }
    };
    let reason = strict_json::reason_field(&object, "reason").map_err(BudgetParseError)?;
    let confidence = match object.get("confidence") {
        None => return Err(BudgetParseError("missing field `confidence`".into())),
        Some(Value::Number(n)) => n.as_f64().ok_or_else(|| {
            BudgetParseError(format!("field `confidence` is not a finite number: {n}"))
        })?,
        Some(other) => {
            return Err(BudgetParseError(format!(
                "field `confidence` must be a number, got {}",
                kind_of(other)
            )));
        }
    };
    if !(0.0..=1.0).contains(&confidence) {
        return Err(BudgetParseError(format!(
            "field `confidence` must be in [0, 1], got {confidence}"
        )));
    }
    Ok(ParsedBudgetDecision {
        extend,
        reason: reason.to_owned(),
        confidence,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn parse_budget_decision_accepts_both_decisions() {
        let extend =
            parse_budget_decision(r#"{"decision":"EXTEND","reason":"converging","confidence":1}"#);
        assert_eq!(
            extend,
            Ok(ParsedBudgetDecision {
                extend: true,
                reason: "converging".into(),
                confidence: 1.0
            })
        );
        let wrap_up = parse_budget_decision(
            "\n  {\"confidence\": 0, \"reason\": \"done\", \"decision\": \"WRAP_UP\"}\t\n",
        );
        assert_eq!(
            wrap_up,
            Ok(ParsedBudgetDecision {
                extend: false,
                reason: "done".into(),
                confidence: 0.0
            })
        );
        let fraction =
            parse_budget_decision(r#"{"decision":"EXTEND","reason":"r","confidence":0.35}"#);
        assert_eq!(fraction.map(|p| p.confidence), Ok(0.35));
    }

    #[test]
    fn parse_budget_decision_refuses_everything_else() {
        for bad in [
            "",
            "   ",
            "EXTEND",
            "null",
            r#""EXTEND""#,
            r#"Sure! {"decision":"EXTEND","reason":"r","confidence":1}"#,
            "```json\n{\"decision\":\"EXTEND\",\"reason\":\"r\",\"confidence\":1}\n```",
            r#"{"decision":"extend","reason":"r","confidence":1}"#,
            r#"{"decision":"Wrap_Up","reason":"r","confidence":1}"#,
            r#"{"decision":"CONTINUE","reason":"r","confidence":1}"#,
            r#"{"decision":"RENEW","reason":"r","confidence":1}"#,
            r#"{"reason":"r","confidence":1}"#,
            r#"{"decision":"EXTEND","confidence":1}"#,
            r#"{"decision":"EXTEND","reason":"r"}"#,
            r#"{"decision":"EXTEND","reason":"","confidence":1}"#,
            r#"{"decision":"EXTEND","reason":"  ","confidence":1}"#,
            r#"{"decision":"EXTEND","reason":"r","confidence":1,"nudge":""}"#,
            r#"{"decision":"EXTEND","reason":"r","confidence":"1"}"#,
            r#"{"decision":"EXTEND","reason":"r","confidence":null}"#,
            r#"{"decision":"EXTEND","reason":"r","confidence":true}"#,
            r#"{"decision":"EXTEND","reason":"r","confidence":1.5}"#,
            r#"{"decision":"EXTEND","reason":"r","confidence":-0.1}"#,
            r#"{"decision":"EXTEND","reason":"r","confidence":1e400}"#,
            r#"{"decision":"EXTEND","reason":7,"confidence":1}"#,
            r#"{"decision":true,"reason":"r","confidence":1}"#,
            r#"[{"decision":"EXTEND","reason":"r","confidence":1}]"#,
            r#"{"decision":"EXTEND","reason":"r","confidence":1}{}"#,
        ] {
            assert!(parse_budget_decision(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn refusals_say_what_was_wrong() {
        let refusal = |text: &str| {
            parse_budget_decision(text)
                .expect_err("refused")
                .to_string()
        };
        assert!(refusal(r#"{"decision":"MAYBE","reason":"r","confidence":1}"#).contains("MAYBE"));
        assert!(
            refusal(r#"{"decision":"EXTEND","reason":"r"}"#).contains("missing field `confidence`")
        );
        assert!(refusal(r#"{"decision":"EXTEND","reason":"r","confidence":2}"#).contains("[0, 1]"));
        assert!(
            refusal(r#"{"decision":"EXTEND","reason":"r","confidence":1,"x":1}"#)
                .contains("unexpected field `x`")
        );
    }

    fn decision_text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("EXTEND".to_owned()),
            Just("WRAP_UP".to_owned()),
            "[A-Za-z_]{0,10}",
        ]
    }

    proptest! {
        #[test]
        fn parse_budget_decision_never_panics_on_arbitrary_strings(text in any::<String>()) {
            // Either a valid decision or a refusal: nothing else can come out.
            if let Ok(parsed) = parse_budget_decision(&text) {
                prop_assert!(!parsed.reason.trim().is_empty());
                prop_assert!((0.0..=1.0).contains(&parsed.confidence));
            }
        }

        #[test]
        fn parse_budget_decision_on_json_shaped_input_yields_valid_decision_or_refusal(
            decision in decision_text(),
            reason in ".{0,20}",
            confidence in proptest::option::of(prop_oneof![0.0..=1.0f64, -10.0..10.0f64]),
            extra in proptest::option::of("[a-z]{1,8}"),
            prefix in prop_oneof![Just(String::new()), Just(" \n".to_owned()), "[a-z ]{1,5}"],
        ) {
            let mut object = serde_json::json!({"decision": decision, "reason": reason});
            if let Some(confidence) = confidence {
                object["confidence"] = serde_json::json!(confidence);
            }
            if let Some(extra) = &extra {
                object[extra.as_str()] = Value::Bool(true);
            }
            let text = format!("{prefix}{object}");
            let valid_decision = decision == "EXTEND" || decision == "WRAP_UP";
            let should_accept = valid_decision
                && !reason.trim().is_empty()
                && confidence.is_some_and(|c| (0.0..=1.0).contains(&c))
                // An unknown key is refused; a known one is overwritten with
                // a boolean, the wrong type for each of them.
                && extra.is_none()
                && prefix.trim().is_empty();
            match parse_budget_decision(&text) {
                Ok(parsed) => {
                    prop_assert!(should_accept, "accepted {}", text);
                    prop_assert_eq!(parsed.extend, decision == "EXTEND");
                    // serde_json may read a float back one ulp off.
                    let written = confidence.unwrap_or(f64::NAN);
                    prop_assert!((parsed.confidence - written).abs() < 1e-12);
                    prop_assert_eq!(parsed.reason, reason);
                }
                Err(_) => prop_assert!(!should_accept, "refused a valid answer: {}", text),
            }
        }
    }
}
