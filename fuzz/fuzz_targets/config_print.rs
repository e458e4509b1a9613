//! `leasehold config` of a configuration file: arbitrary text is refused,
//! or printed — every value, of any length, laid out without a panic, as
//! text (no raw control character) and on its own line.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(config) = leasehold::config::Config::from_toml_str(text) {
        let printed = leasehold_cli::cli::describe_config(&config);
        assert!(printed.starts_with("# effective configuration"));
        for line in printed.lines() {
            assert!(!line.contains(char::is_control), "{line:?}");
        }
    }
});
