//! Durations have a ceiling in configuration and flows: every duration key
//! of the configuration (file and environment) and every duration of a flow
//! is refused above `MAX_DURATION` (30 days), naming the key.

use leasehold::{
    MAX_DURATION,
    config::{Config, ValueKind},
    flow_file,
};

#[test]
fn every_duration_key_of_the_configuration_is_refused_above_the_maximum() {
    let durations: Vec<_> = Config::keys()
        .iter()
        .filter(|k| k.kind == ValueKind::Duration)
        .collect();
    assert!(durations.len() >= 11, "the duration keys: {durations:?}");
    for key in durations {
        // From the environment.
        let env = |name: &str| (name == key.env).then(|| "31days".to_owned());
        let error = Config::load(None, env).unwrap_err().to_string();
        let expected = format!("{} ({})`: expected at most 30 days", key.env, key.file);
        assert!(
            error.contains(&expected),
            "{}: got {error:?}, wanted {expected:?}",
            key.env
        );
        assert!(error.ends_with("got 31 days"), "{error}");
        // From the file.
        let (table, leaf) = key.file.rsplit_once('.').unwrap_or(("", key.file));
        let text = if table.is_empty() {
            format!("{leaf} = \"1000 days\"\n")
        } else {
            format!("[{table}]\n{leaf} = \"1000 days\"\n")
        };
        let error = Config::from_toml_str(&text).unwrap_err().to_string();
        assert!(error.contains(&expected), "{}: got {error:?}", key.file);
        // The maximum itself is accepted, unless another rule refuses it.
        let env = |name: &str| (name == key.env).then(|| "30days".to_owned());
        if let Err(error) = Config::load(None, env) {
            assert!(!error.to_string().contains("at most 30 days"), "{error}");
        }
    }
}

#[test]
fn a_duration_too_long_to_print_back_is_refused_too() {
    // Far past anything humantime reads back: still refused by name, not
    // accepted and never a panic.
    let mut config = Config::default();
    config.run_lease_ttl.value = std::time::Duration::MAX;
    let error = config.validate().unwrap_err();
    assert_eq!(error.field, "LEASEHOLD_RUN_LEASE_TTL (run_lease_ttl)");
    assert!(error.expected.starts_with("at most 30 days"), "{error}");
}

#[test]
fn the_timing_arithmetic_of_any_configuration_answers_at_once() {
    // Unvalidated extremes: the backoff is capped at the maximum, so the sum
    // of backoffs stops at the first capped one instead of looping over
    // four billion restarts, and nothing overflows.
    let mut config = Config::default();
    config.restart_max.value = u32::MAX;
    config.max_renewals.value = u32::MAX;
    config.free_renewals.value = u32::MAX;
    config.restart_backoff_max.value = std::time::Duration::MAX;
    config.lease_tool_call.value = std::time::Duration::MAX;
    for timing in config.timings() {
        assert!(timing.backoffs >= MAX_DURATION);
        assert_eq!(timing.attempts, u32::MAX);
        let _ = timing.to_string();
    }
}

#[test]
fn flow_durations_above_the_maximum_are_refused_naming_the_key() {
    for (table, key) in [
        ("leases", "model_stream"),
        ("leases", "model_blocking"),
        ("leases", "tool_call"),
        ("leases", "worker_step"),
        ("supervision", "window"),
        ("supervision", "backoff_initial"),
        ("supervision", "backoff_max"),
    ] {
        let toml =
            format!("name = \"f\"\ntask = \"t\"\nmax_steps = 0\n[{table}]\n{key} = \"1000days\"\n");
        let error = flow_file::parse_toml(&toml).unwrap_err();
        assert_eq!(error.path, format!("{table}.{key}"), "{error}");
        assert!(
            error.message.starts_with("expected at most 30 days"),
            "{error}"
        );
        let json =
            format!(r#"{{"name":"f","task":"t","max_steps":0,"{table}":{{"{key}":"31d"}}}}"#);
        let error = flow_file::parse_json(&json).unwrap_err();
        assert_eq!(error.path, format!("{table}.{key}"), "{error}");
        let json =
            format!(r#"{{"name":"f","task":"t","max_steps":0,"{table}":{{"{key}":"30d"}}}}"#);
        assert!(flow_file::parse_json(&json).is_ok(), "{key} at the maximum");
    }
    assert_eq!(MAX_DURATION.as_secs(), 30 * 86_400);
}
