//! The file's `[keyed_limits.NAME]` tables: limits on the runs that share
//! a key ([`KeyedLimit`]), each with a `key` and at least one of `live`,
//! `per_minute` and `queued`.
//!
//! ```toml
//! [keyed_limits.provider]
//! key = "endpoint"     # at most 20 live runs calling one provider
//! live = 20
//!
//! [keyed_limits.tenants]
//! key = "tenant"       # each tenant: 4 live, 30 started a minute, 200 queued
//! live = 4
//! per_minute = 30
//! queued = 200
//! ```

use leasehold_actors::keyed_limits::{KeyedLimit, RunKey};

use super::tables::{Entry, NamedTables, Wrong};

/// The most keyed limits a server holds.
pub const MAX_KEYED_LIMITS: usize = 32;

/// The file's `keyed_limits` table.
const KEYED_LIMITS: NamedTables = NamedTables {
    at: "keyed_limits",
    noun: ("limit", "limits"),
    holds: "`key` and `live`, `per_minute` or `queued`",
    max: MAX_KEYED_LIMITS,
};

/// The limits of `value`, the file's `keyed_limits` table; an error names
/// where (`keyed_limits."provider".live`) and what was wrong.
pub(super) fn keyed_limits_of(value: toml::Value) -> Result<Vec<KeyedLimit>, Wrong> {
    KEYED_LIMITS.read(value, keyed_limit_of)
}

fn keyed_limit_of(name: String, entry: &mut Entry) -> Result<KeyedLimit, Wrong> {
    let key = entry
        .text("key")?
        .ok_or_else(|| {
            entry.wrong(
                "",
                "missing `key` (`tenant`, `flow`, `endpoint`, or parts joined by `+`)".to_owned(),
            )
        })?
        .parse::<RunKey>()
        .map_err(|error| entry.wrong("key", error.to_string()))?;
    let live = count(entry, "live")?;
    let per_minute = count(entry, "per_minute")?;
    let queued = count(entry, "queued")?;
    entry.done("`key`, `live`, `per_minute` and `queued`")?;
    if live.is_none() && per_minute.is_none() && queued.is_none() {
        return Err(entry.wrong(
            "",
            "a limit needs `live`, `per_minute` or `queued`".to_owned(),
        ));
    }
    if queued.is_some() && !key.is_tenant() {
        return Err(entry.wrong(
            "queued",
            format!(
                "`queued` is counted in the store by tenant: it needs `key = \"tenant\"`, not {:?}",
                key.to_string()
            ),
        ));
    }
    Ok(KeyedLimit {
        name,
        key,
        live,
        per_minute,
        queued,
    })
}

/// `field` of `entry`, a count of at least one, if given.
fn count(entry: &mut Entry, field: &str) -> Result<Option<u32>, Wrong> {
    match entry.take(field) {
        None => Ok(None),
        Some(toml::Value::Integer(n)) => match u32::try_from(n) {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(entry.wrong(
                field,
                format!("expected a count from 1 to {}, got {n}", u32::MAX),
            )),
        },
        Some(other) => Err(entry.wrong(
            field,
            format!("expected a count, found {}", other.type_str()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Vec<KeyedLimit>, (String, String)> {
        let table: toml::Table = text.parse().unwrap();
        keyed_limits_of(table["keyed_limits"].clone())
    }

    #[test]
    fn keyed_limits_are_read_and_each_wrong_one_is_named() {
        let limits = parsed(
            "[keyed_limits.provider]\nkey = \"endpoint\"\nlive = 20\n\
             [keyed_limits.tenants]\nkey = \"tenant\"\nlive = 4\nper_minute = 30\nqueued = 200\n",
        )
        .unwrap();
        assert_eq!(limits.len(), 2);
        assert_eq!(
            (limits[0].name.as_str(), limits[0].live),
            ("provider", Some(20))
        );
        assert_eq!(limits[1].queued, Some(200));
        let error = |text: &str| parsed(text).unwrap_err();
        let (at, message) = error("[keyed_limits.a]\nkey = \"model\"\nlive = 1\n");
        assert_eq!(at, "keyed_limits.\"a\".key");
        assert!(message.contains("`model`"), "{message}");
        let (at, _) = error("[keyed_limits.a]\nkey = \"flow\"\nlive = 0\n");
        assert_eq!(at, "keyed_limits.\"a\".live");
        let (at, _) = error("[keyed_limits.a]\nkey = \"flow\"\nlive = -3\n");
        assert_eq!(at, "keyed_limits.\"a\".live");
        let (at, message) = error("[keyed_limits.a]\nkey = \"flow\"\nqueued = 5\n");
        assert_eq!(at, "keyed_limits.\"a\".queued");
        assert!(message.contains("tenant"), "{message}");
        let (at, message) = error("[keyed_limits.a]\nkey = \"flow\"\n");
        assert_eq!(at, "keyed_limits.\"a\"");
        assert!(message.contains("`live`"), "{message}");
        let (at, _) = error("[keyed_limits.a]\nkey = \"flow\"\nlive = 2\nlives = 3\n");
        assert_eq!(at, "keyed_limits.\"a\".lives");
        let (at, _) = error("[keyed_limits.a]\nlive = 2\n");
        assert_eq!(at, "keyed_limits.\"a\"");
        let (at, _) = error("keyed_limits = 3\n");
        assert_eq!(at, "keyed_limits");
    }

    #[test]
    fn a_configuration_file_gives_its_keyed_limits_to_the_executor_and_names_a_wrong_one() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("leasehold.toml");
        std::fs::write(
            &file,
            "[model]\nbase_url = \"http://127.0.0.1:9/v1\"\nname = \"m\"\n\
             [keyed_limits.provider]\nkey = \"endpoint\"\nlive = 20\n",
        )
        .unwrap();
        let config = crate::config::Config::load(Some(&file), |_| None).unwrap();
        let options = config.executor_options();
        assert_eq!(options.limits.len(), 1);
        assert_eq!(options.limits[0].live, Some(20));
        assert_eq!(options.endpoint, "http://127.0.0.1:9/v1");
        std::fs::write(&file, "[keyed_limits.provider]\nkey = \"endpoint\"\n").unwrap();
        let error = crate::config::Config::load(Some(&file), |_| None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("keyed_limits.\"provider\""), "{error}");
    }
}
