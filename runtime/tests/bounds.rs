//! A key's bound lives in its row of the key table: loading refuses a value
//! just outside it, naming the key and the bound as the `checks` column of
//! `docs/configuration.md` writes it, and takes the bound itself.

use std::time::Duration;

use leasehold::config::{Config, Key, ValueKind};

/// `measure`, in `key`'s unit, as text a person would configure.
fn text(key: &Key, measure: u128) -> String {
    let whole = u64::try_from(measure).expect("a bound fits in 64 bits");
    match key.kind {
        ValueKind::Duration | ValueKind::DurationOrOff => {
            humantime::format_duration(Duration::from_nanos(whole)).to_string()
        }
        _ => whole.to_string(),
    }
}

fn load(key: &Key, value: &str) -> Result<Config, String> {
    let env = |name: &str| (name == key.env).then(|| value.to_owned());
    Config::load(None, env).map_err(|e| e.to_string())
}

#[test]
fn every_bound_of_the_key_table_is_checked_and_shown_in_its_checks_column() {
    let bounded: Vec<&Key> = Config::keys()
        .iter()
        .filter(|k| k.bound.is_some())
        .collect();
    assert!(bounded.len() >= 9, "the bounded keys: {bounded:?}");
    for key in bounded {
        let bound = key.bound.expect("bounded");
        let checks = key.checks().expect("a bounded key shows its checks");
        let (outside, inside, said) = match (bound.min, bound.max) {
            (Some(min), _) => (min - 1, min, "at least"),
            (None, Some(max)) => (max + 1, max, "at most"),
            (None, None) => panic!("{}: a bound with neither end", key.env),
        };
        let error = load(key, &text(key, outside)).expect_err(key.env);
        assert!(error.contains(key.env), "{}: {error}", key.env);
        let stated = checks
            .split(", ")
            .find(|c| c.starts_with(said))
            .unwrap_or_else(|| panic!("{}: {checks:?} says no {said}", key.env));
        assert!(
            error.contains(&format!("expected {stated} (from env")),
            "{}: {error:?} does not say {stated:?}",
            key.env
        );
        if !bound.why.is_empty() {
            assert!(error.contains(bound.why), "{}: {error}", key.env);
        }
        assert!(
            load(key, &text(key, inside)).is_ok(),
            "{}: its bound itself is refused",
            key.env
        );
    }
}

#[test]
fn the_checks_column_says_what_a_duration_key_may_be_without_a_bound() {
    let key = Config::keys()
        .iter()
        .find(|k| k.file == "lease.tool_call")
        .expect("lease.tool_call");
    assert_eq!(key.checks().as_deref(), Some("above 0, at most 30 days"));
    let key = Config::keys()
        .iter()
        .find(|k| k.file == "executor.claim_interval")
        .expect("executor.claim_interval");
    assert_eq!(
        key.checks().as_deref(),
        Some("at least 100ms, at most 30 days")
    );
    let table = Config::keys_table();
    assert!(table.starts_with("| variable | file key | default | checks | meaning |"));
    assert!(table.contains("| `3` | at most 3 |"), "{table}");
}
