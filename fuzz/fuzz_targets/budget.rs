//! A budget checkpoint's strict-JSON decision: arbitrary text is a decision
//! or a refusal, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(parsed) = leasehold::parse_budget_decision(text) {
        assert!((0.0..=1.0).contains(&parsed.confidence));
        assert!(!parsed.reason.trim().is_empty());
    }
});
