//! What a person gives a control by hand — who they are, a lease's id, how
//! much longer a lease runs — read the same way from the API and the
//! command line, and refused with the same words.

use std::time::Duration;

use leasehold_actors::LeaseId;

/// The longest a person extends a lease by at once: a day. More is no
/// extension but a lease nobody watches; extend again if it is needed.
pub const MAX_EXTENSION: Duration = Duration::from_secs(24 * 60 * 60);

/// The most characters a person's name (`by`) has in a run's trace.
pub const MAX_WHO: usize = 200;

/// How much longer a lease runs: a duration such as `30s` or `5m`, from
/// leasehold's shortest lease (10 ms) to [`MAX_EXTENSION`].
pub fn extension(text: &str) -> Result<Duration, String> {
    let extra = humantime::parse_duration(text.trim()).map_err(|e| {
        format!("the extension `{text}` is not a duration such as `30s` or `5m`: {e}")
    })?;
    if extra < leasehold_actors::MIN_LEASE {
        return Err(format!(
            "the extension `{text}` is shorter than the shortest lease ({})",
            humantime::format_duration(leasehold_actors::MIN_LEASE)
        ));
    }
    if extra > MAX_EXTENSION {
        return Err(format!(
            "the extension `{text}` is longer than a day ({}): extend again when it is needed",
            humantime::format_duration(MAX_EXTENSION)
        ));
    }
    Ok(extra)
}

/// A lease's id as the run's events name it: `lease:7`, or `7`.
pub fn lease_id(text: &str) -> Result<LeaseId, String> {
    let number = text.trim();
    let number = number.strip_prefix("lease:").unwrap_or(number);
    number
        .parse::<u64>()
        .map(LeaseId)
        .map_err(|_| format!("`{text}` is no lease id: a lease is named `lease:7` or `7`"))
}

/// Who asked, as the run's trace will say it: `given`, trimmed, or
/// `default` when none was given; at most [`MAX_WHO`] characters, on one
/// line.
pub fn who(given: Option<&str>, default: &str) -> Result<String, String> {
    let Some(name) = given.map(str::trim).filter(|n| !n.is_empty()) else {
        return Ok(default.to_owned());
    };
    if name.chars().count() > MAX_WHO {
        return Err(format!(
            "the name `by` has {} characters, more than {MAX_WHO}",
            name.chars().count()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("the name `by` holds a control character: give it on one line".to_owned());
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extension_is_a_duration_from_the_shortest_lease_to_a_day() {
        assert_eq!(extension("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(extension(" 5m "), Ok(Duration::from_secs(300)));
        for (text, words) in [
            ("soon", "not a duration"),
            ("1ms", "shorter than the shortest lease"),
            ("2days", "longer than a day"),
            ("", "not a duration"),
        ] {
            let refused = extension(text).expect_err(text);
            assert!(refused.contains(words), "{text}: {refused}");
        }
    }

    #[test]
    fn a_lease_is_named_as_its_events_name_it_or_by_its_number() {
        assert_eq!(lease_id("lease:7"), Ok(LeaseId(7)));
        assert_eq!(lease_id("12"), Ok(LeaseId(12)));
        assert!(lease_id("lease:x").is_err());
        assert!(lease_id("-1").is_err());
    }

    #[test]
    fn who_asked_is_one_bounded_line() {
        assert_eq!(who(None, "a person"), Ok("a person".to_owned()));
        assert_eq!(who(Some("  "), "cli"), Ok("cli".to_owned()));
        assert_eq!(who(Some(" ana "), "cli"), Ok("ana".to_owned()));
        assert!(who(Some("a\nb"), "cli").is_err());
        assert!(who(Some(&"x".repeat(MAX_WHO + 1)), "cli").is_err());
        assert!(who(Some(&"é".repeat(MAX_WHO)), "cli").is_ok());
    }
}
