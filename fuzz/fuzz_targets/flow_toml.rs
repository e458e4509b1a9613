//! A flow file in TOML: arbitrary text is a flow or a refusal naming a
//! key, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(flow) = leasehold::flow_file::parse_toml(text) {
        // What parses is valid and serializes back.
        assert!(flow.validate().is_ok());
        assert!(serde_json::to_string(&flow).is_ok());
    }
});
