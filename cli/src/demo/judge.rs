//! The scripted model's judgement when it is asked as the watchdog's or a
//! budget checkpoint's evaluator: rules over the figures of the prompt that
//! [`ModelEvaluator`](leasehold::model::ModelEvaluator) writes, answered in the
//! strict JSON the evaluator prompts demand.
//!
//! Leases: fresh evidence renews; a silent operation whose subject changes
//! production (a rollback, a deploy, a payment) escalates; any other silent
//! one is intervened. Budgets: a loop whose every step made a tool call is
//! converging and is extended with full confidence; otherwise it wraps up.
//! A prompt whose figures cannot be read gets the runtime's own answer to
//! ambiguity — renew a lease, wrap a budget up — with a reason that says so.

use serde_json::{Value, json};

/// phi at or above which evidence counts as stopped (the accrual
/// detector's default threshold).
const PHI_SILENT: f64 = 8.0;

/// Words in a subject that mean the operation changes production.
const SIDE_EFFECTS: [&str; 5] = ["rollback", "deploy", "charge", "payment", "delete"];

/// The start of the watchdog's system prompt.
pub(crate) const LEASE_PROMPT_START: &str = "You are the watchdog of an agent runtime";

/// The start of the budget checkpoint's system prompt.
pub(crate) const BUDGET_PROMPT_START: &str = "You are the budget checkpoint of an agent runtime";

/// What an expired lease's prompt says, as far as the rules need it.
#[derive(Clone, Debug, PartialEq)]
struct LeaseFacts {
    subject: String,
    kind: Option<String>,
    renewals: Option<u32>,
    evidence: u64,
    phi: Option<f64>,
}

/// The verdict on the lease described by the user message `prompt`, as
/// the JSON object text.
pub(crate) fn judge_lease(prompt: &str) -> String {
    let (verdict, reason) = match lease_facts(prompt) {
        Err(missing) => (
            "RENEW",
            format!(
                "the lease prompt could not be read ({missing}); renewing, as ambiguity on a \
                 lease renews"
            ),
        ),
        Ok(facts) => lease_rule(&facts),
    };
    json!({"verdict": verdict, "reason": reason, "nudge": Value::Null}).to_string()
}

fn lease_rule(facts: &LeaseFacts) -> (&'static str, String) {
    let silent = facts.evidence == 0 || facts.phi.is_none_or(|phi| phi >= PHI_SILENT);
    let subject = &facts.subject;
    let what = match &facts.kind {
        Some(kind) => format!("{kind} `{subject}`"),
        None => format!("`{subject}`"),
    };
    let renewals = facts
        .renewals
        .map_or_else(|| "its".to_owned(), |n| n.to_string());
    let lower = subject.to_ascii_lowercase();
    let side_effects = SIDE_EFFECTS.iter().any(|word| lower.contains(word));
    match (silent, side_effects) {
        (false, _) => (
            "RENEW",
            format!(
                "{what} is alive: {} evidence items, phi {:.2}",
                facts.evidence,
                facts.phi.unwrap_or_default()
            ),
        ),
        (true, true) => (
            "ESCALATE",
            format!(
                "{what} has been silent through {renewals} renewals and changes production: \
                 a person must decide"
            ),
        ),
        (true, false) => (
            "INTERVENE",
            format!("{what} has sent no evidence through {renewals} renewals: restart it"),
        ),
    }
}

/// The figures of a lease prompt; what is missing if they cannot be read.
fn lease_facts(prompt: &str) -> Result<LeaseFacts, &'static str> {
    let subject = field(prompt, "subject:").ok_or("no `subject:` line")?;
    let evidence_line = field(prompt, "evidence:").ok_or("no `evidence:` line")?;
    let evidence =
        leading_number(evidence_line).ok_or("the `evidence:` line does not start with a count")?;
    let phi = evidence_line
        .split_once("phi ")
        .and_then(|(_, rest)| leading_float(rest));
    let renewals = field(prompt, "lease:")
        .and_then(|line| line.split_once("renewed "))
        .and_then(|(_, rest)| leading_number(rest))
        .and_then(|n| u32::try_from(n).ok());
    Ok(LeaseFacts {
        subject: subject.to_owned(),
        kind: field(prompt, "kind:").map(str::to_owned),
        renewals,
        evidence,
        phi,
    })
}

/// The decision on the budget described by the user message `prompt`, as
/// the JSON object text.
pub(crate) fn judge_budget(prompt: &str) -> String {
    let steps = field(prompt, "steps:").and_then(leading_number);
    let tool_calls = field(prompt, "tool calls so far:").and_then(leading_number);
    let answer = match (steps, tool_calls) {
        (Some(steps), Some(calls)) if calls >= steps => json!({
            "decision": "EXTEND",
            "reason": format!("{calls} tool calls in {steps} steps: every step made progress"),
            "confidence": 1.0,
        }),
        (Some(steps), Some(calls)) => json!({
            "decision": "WRAP_UP",
            "reason": format!("{calls} tool calls in {steps} steps: the loop is not converging"),
            "confidence": 0.8,
        }),
        _ => json!({
            "decision": "WRAP_UP",
            "reason": "the budget prompt could not be read (no `steps:` or `tool calls so far:` \
                       figure); wrapping up, as ambiguity on a budget wraps up",
            "confidence": 0.5,
        }),
    };
    answer.to_string()
}

/// The rest of the first line that starts with `label`, trimmed.
fn field<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    text.lines()
        .map(str::trim_start)
        .find_map(|line| line.strip_prefix(label))
        .map(str::trim)
}

/// The whole number `text` starts with.
fn leading_number(text: &str) -> Option<u64> {
    let text = text.trim_start();
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text[..end].parse().ok()
}

/// The decimal number `text` starts with.
fn leading_float(text: &str) -> Option<f64> {
    let text = text.trim_start();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    text[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use leasehold::model::ModelEvaluator;
    use leasehold::{
        BudgetEvaluationRequest, BudgetFigures, EvaluationRequest, EvidenceSummary, LeaseId,
        LeaseKind, Verdict, parse_budget_decision, parse_verdict,
    };

    fn lease(subject: &str, evidence: EvidenceSummary) -> String {
        let request = EvaluationRequest {
            lease_id: LeaseId(7),
            run_id: "run-1".into(),
            path: "run/worker:x:1/tool_call:1.0".into(),
            kind: LeaseKind::ToolCall,
            subject: subject.into(),
            renewals: 2,
            max_renewals: 10,
            lease: Duration::from_millis(300),
            evidence,
            evidence_renewals: 0,
            stream_tail: None,
            transcript_tail: Arc::new([]),
        };
        let messages = ModelEvaluator::lease_prompt(&request);
        assert!(messages[0].content.starts_with(LEASE_PROMPT_START));
        messages[1].content.clone()
    }

    fn verdict(prompt: &str) -> Verdict {
        parse_verdict(&judge_lease(prompt))
            .expect("the judge answers the strict JSON")
            .verdict
    }

    #[test]
    fn leases_are_judged_on_the_evaluators_own_prompt() {
        let fresh = EvidenceSummary {
            count: 9,
            last_progress_age_ms: Some(40),
            phi: Some(0.12),
            last_note: Some("searched shard 9 of 12".into()),
            repetition: None,
            ..EvidenceSummary::default()
        };
        assert_eq!(verdict(&lease("search_logs", fresh)), Verdict::Renew);
        let silent = EvidenceSummary::default();
        assert_eq!(
            verdict(&lease("fetch_metrics", silent.clone())),
            Verdict::Intervene
        );
        assert_eq!(
            verdict(&lease("rollback_deploy", silent)),
            Verdict::Escalate
        );
        let stale = EvidenceSummary {
            count: 3,
            last_progress_age_ms: Some(90_000),
            phi: Some(12.5),
            last_note: None,
            repetition: None,
            ..EvidenceSummary::default()
        };
        assert_eq!(verdict(&lease("fetch_metrics", stale)), Verdict::Intervene);
    }

    #[test]
    fn an_unreadable_lease_prompt_renews_and_says_why() {
        let answer = parse_verdict(&judge_lease("what is this?")).expect("strict JSON");
        assert_eq!(answer.verdict, Verdict::Renew);
        assert!(
            answer.reason.contains("could not be read"),
            "{}",
            answer.reason
        );
    }

    #[test]
    fn budgets_extend_when_every_step_made_a_tool_call() {
        let request = |tool_calls| BudgetEvaluationRequest {
            run_id: "run-1".into(),
            path: "run/worker:logs:1".into(),
            figures: BudgetFigures {
                spending: None,
                steps_used: 2,
                steps_declared: 2,
                limit: 2,
                tool_calls,
                spawns: 0,
                milestones_closed: vec!["errors_found".into()],
                milestones_open: vec!["cause_found".into()],
                extensions_used: 0,
                extensions_left: 3,
            },
            transcript_tail: Arc::new([]),
        };
        let prompt = |tool_calls| {
            let messages = ModelEvaluator::budget_prompt(&request(tool_calls));
            assert!(messages[0].content.starts_with(BUDGET_PROMPT_START));
            judge_budget(&messages[1].content)
        };
        let extend = parse_budget_decision(&prompt(2)).expect("strict JSON");
        assert!(extend.extend, "{extend:?}");
        assert!((extend.confidence - 1.0).abs() < f64::EPSILON);
        let wrap_up = parse_budget_decision(&prompt(1)).expect("strict JSON");
        assert!(!wrap_up.extend, "{wrap_up:?}");
        let unreadable = parse_budget_decision(&judge_budget("nothing here")).expect("strict JSON");
        assert!(!unreadable.extend);
        assert!(
            unreadable.reason.contains("could not be read"),
            "{}",
            unreadable.reason
        );
    }
}
