//! A configuration file: arbitrary text is a validated configuration or a
//! refusal naming the key, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(config) = leasehold::config::Config::from_toml_str(text) {
        assert!(config.validate().is_ok());
        // Every duration it holds is within the ceiling.
        assert!(config.lease_tool_call.value <= leasehold::MAX_DURATION);
    }
});
