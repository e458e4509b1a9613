//! Serde helpers for durations, one home for every format a duration takes
//! on the wire: whole milliseconds in events and evaluation requests
//! (`millis`), humantime strings (`"250ms"`, `"90s"`, `"5m"`) in flows
//! (`human_duration`). Used with `#[serde(with = "...")]`.

/// Serde helper: a [`std::time::Duration`] as whole milliseconds.
pub(crate) mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    #[allow(dead_code)]
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// `Option<Duration>` as a humantime string: `"250ms"`, `"90s"`, `"5m"`.
pub(crate) mod human_duration {
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, Visitor};
    use serde::{Deserialize, Deserializer, Serializer};

    const EXPECTED: &str = r#"a duration such as "250ms", "90s" or "5m""#;

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.collect_str(&humantime::format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<Human>::deserialize(d).map(|h| h.map(|Human(d)| d))
    }

    struct Human(Duration);

    impl<'de> Deserialize<'de> for Human {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_str(HumanVisitor)
        }
    }

    struct HumanVisitor;

    impl Visitor<'_> for HumanVisitor {
        type Value = Human;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(EXPECTED)
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Human, E> {
            humantime::parse_duration(v)
                .map(Human)
                .map_err(|_| E::custom(format_args!("expected {EXPECTED}, got {v:?}")))
        }
    }
}
