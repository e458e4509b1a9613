//! A flow in JSON, as the HTTP API receives it: arbitrary text is a flow
//! or a refusal naming a key, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(flow) = leasehold::flow_file::parse_json(text) {
        assert!(flow.validate().is_ok());
    }
});
