//! The watchdog's strict-JSON verdict: arbitrary text is a verdict or a
//! refusal, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(parsed) = leasehold::parse_verdict(text) {
        assert!(!parsed.reason.trim().is_empty());
    }
});
