//! What a key's value is ([`ValueKind`]), and how it is read from text,
//! kept in its field of [`Config`] and written back: one [`Kind`] per
//! [`ValueKind`], and a [`Field`] that ties a key's row in the table to the
//! field it sets and reads.
//!
//! A row names its kind and its field once (`field!(Duration,
//! lease_tool_call)`), and everything that reads or prints the key goes
//! through them: [`Config::set`](super::Config) for the file, the
//! environment and `--set`, the entries `leasehold config` prints, and the
//! duration checks. A kind and a field of another type do not compile
//! together, so a row cannot read one type and store another.

use super::{Config, Setting, Source};

/// What a key's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    /// A duration in human form: `250ms`, `90s`, `5m`.
    Duration,
    /// A duration that may be `0` (or `off`) to turn its rule off.
    DurationOrOff,
    /// A whole number from 0 to 4294967295.
    Count,
    /// `true` or `false` (also `1`, `0`, `yes`, `no`, `on`, `off`).
    Flag,
    /// A model role: `default` or `fast`.
    Role,
    /// A durability mode: `sync`, `async` or `exit`.
    Durability,
    /// A filesystem path.
    Path,
    /// A piece of text: a URL, a model name.
    Text,
    /// A secret: an API key or token. Its value is never printed.
    Secret,
    /// A socket address: `127.0.0.1:7878`.
    Address,
    /// A size in bytes, with an optional unit: `65536`, `512KiB`, `4MiB`.
    Size,
    /// A comma-separated list, e.g. of host names.
    List,
    /// What a failure at the top of the tree does: `pause` or `fail`.
    OnExhausted,
    /// A verdict policy for every lease kind, or per kind: `leasehold`,
    /// `deadline, tool_call = idle_kill`.
    Policy,
    /// A share from 0 to 1: `0.5`.
    Share,
    /// A store URL: `postgres://user:password@host/database`.
    StoreUrl,
    /// How long finished runs are kept: a duration, or `forever`.
    Retention,
    /// The most tokens of a model's answer, from 1 to 1000000.
    Tokens,
}

impl ValueKind {
    /// What a value of this kind looks like, for error messages.
    pub fn expected(self) -> &'static str {
        match self {
            Self::Duration => "a duration such as 250ms, 90s or 5m",
            Self::DurationOrOff => "a duration such as 250ms, or 0 (off)",
            Self::Count => "a whole number from 0 to 4294967295",
            Self::Flag => "true or false (or 1, 0, yes, no, on, off)",
            Self::Role => "a model role: default or fast",
            Self::Durability => "a durability mode: sync, async or exit",
            Self::Path => "a non-empty path",
            Self::Text => "a non-empty string",
            Self::Secret => "a non-empty string",
            Self::Address => "a socket address such as 127.0.0.1:7878",
            Self::Size => "a size such as 65536, 512KiB or 4MiB, from 1 byte to 1GiB",
            Self::List => "a comma-separated list such as example.com,10.0.0.5:7878",
            Self::OnExhausted => "pause or fail",
            Self::Policy => {
                "a verdict policy (leasehold, deadline, idle_kill, always_evaluate or one \
                 registered by the embedder), for every lease kind, or per kind as \
                 `leasehold, tool_call = idle_kill`"
            }
            Self::Share => "a share from 0 to 1 such as 0.5",
            Self::StoreUrl => "a PostgreSQL URL such as postgres://leasehold@db/runs",
            Self::Retention => "a duration above 0 such as 7days or 12h, or forever",
            Self::Tokens => "a number of tokens from 1 to 1000000 such as 4096",
        }
    }
}

/// A kind of value: the type its field holds, how text becomes a value and
/// how a value is written back as it would be configured.
pub(super) trait Kind: 'static {
    /// The type of the [`Config`] field.
    type Value: 'static;
    /// What the key's row says it is.
    const KIND: ValueKind;
    /// The value `text` stands for, or `None` when it stands for none (the
    /// refusal then says [`ValueKind::expected`]).
    fn parse(text: &str) -> Option<Self::Value>;
    /// The value as it would be configured; `None` for a value left unset,
    /// which `leasehold config` shows as the key's default text (`(none)`,
    /// `(the default's)`).
    fn show(value: &Self::Value) -> Option<String>;
    /// How a refused text is quoted back in the refusal.
    fn quote(text: &str) -> String {
        format!("{text:?}")
    }
}

/// Where a key's value lives, as the table holds it: set from text, read
/// back as text. Implemented by [`Field`] for every kind, and by the few
/// keys whose value is more than their field ([`IdleTimeout`]).
pub(super) trait Slot: Sync {
    /// Parses `text` and stores it with `source`; refused, the text as the
    /// refusal quotes it.
    fn set(&self, config: &mut Config, text: &str, source: Source) -> Result<(), String>;
    /// The value as it would be configured (`None`: unset, shown as the
    /// key's default text) and where it came from.
    fn show<'c>(&self, config: &'c Config) -> (Option<String>, &'c Source);
}

/// The field of [`Config`] that a key sets and reads, holding a value of
/// kind `K`. Made by [`field!`].
pub(super) struct Field<K: Kind> {
    /// The field, to read.
    pub(super) read: fn(&Config) -> &Setting<K::Value>,
    /// The field, to set.
    pub(super) write: fn(&mut Config) -> &mut Setting<K::Value>,
}

impl<K: Kind> Slot for Field<K> {
    fn set(&self, config: &mut Config, text: &str, source: Source) -> Result<(), String> {
        let value = K::parse(text).ok_or_else(|| K::quote(text))?;
        *(self.write)(config) = Setting { value, source };
        Ok(())
    }

    fn show<'c>(&self, config: &'c Config) -> (Option<String>, &'c Source) {
        let setting = (self.read)(config);
        (K::show(&setting.value), &setting.source)
    }
}

/// `&Field::<kinds::$kind>` on the [`Config`] field `$name`: the slot of a
/// key's row.
macro_rules! field {
    ($kind:ident, $name:ident) => {
        &$crate::config::fields::Field::<$crate::config::fields::kinds::$kind> {
            read: |config| &config.$name,
            write: |config| &mut config.$name,
        }
    };
}
pub(super) use field;

/// `LEASEHOLD_CONFIG`: it names the file and is read before any other key,
/// so it has no field and is never set through the table.
pub(super) struct NoField;

/// Where an unset key without a field comes from.
static DEFAULT: Source = Source::Default;

impl Slot for NoField {
    fn set(&self, _: &mut Config, text: &str, _: Source) -> Result<(), String> {
        Err(format!("{text:?}"))
    }

    fn show<'c>(&self, _: &'c Config) -> (Option<String>, &'c Source) {
        (None, &DEFAULT)
    }
}

/// `model.idle_timeout`: a duration when set; unset, derived from other
/// keys and shown with the source that says how ([`Config::idle_timeout`]).
pub(super) struct IdleTimeout;

impl Slot for IdleTimeout {
    fn set(&self, config: &mut Config, text: &str, source: Source) -> Result<(), String> {
        let value = kinds::Duration::parse(text).ok_or_else(|| format!("{text:?}"))?;
        config.model_idle_timeout = Setting {
            value: Some(value),
            source,
        };
        Ok(())
    }

    fn show<'c>(&self, config: &'c Config) -> (Option<String>, &'c Source) {
        let (idle, source) = config.idle_timeout_entry();
        (kinds::Duration::show(&idle), source)
    }
}

/// One marker type per [`ValueKind`], named after it.
pub(super) mod kinds {
    use std::net::SocketAddr;
    use std::path::PathBuf;
    use std::time::Duration as Span;

    use leasehold_actors::PolicyChoice;

    use super::super::{format_size, list, parse_size};
    use super::{Kind, ValueKind};
    use crate::model::ModelRole;
    use crate::store::Durability as Mode;

    /// [`ValueKind::Duration`].
    pub struct Duration;
    impl Kind for Duration {
        type Value = Span;
        const KIND: ValueKind = ValueKind::Duration;
        fn parse(text: &str) -> Option<Span> {
            humantime::parse_duration(text.trim()).ok()
        }
        fn show(value: &Span) -> Option<String> {
            Some(humantime::format_duration(*value).to_string())
        }
    }

    /// [`ValueKind::DurationOrOff`]: `0` and `off` are zero, shown `off`.
    pub struct DurationOrOff;
    impl Kind for DurationOrOff {
        type Value = Span;
        const KIND: ValueKind = ValueKind::DurationOrOff;
        fn parse(text: &str) -> Option<Span> {
            match text.trim() {
                "0" | "off" => Some(Span::ZERO),
                _ => Duration::parse(text),
            }
        }
        fn show(value: &Span) -> Option<String> {
            if value.is_zero() {
                Some("off".to_owned())
            } else {
                Duration::show(value)
            }
        }
    }

    /// [`ValueKind::Retention`]: `forever` is `None`; a duration above 0.
    pub struct Retention;
    impl Kind for Retention {
        type Value = Option<Span>;
        const KIND: ValueKind = ValueKind::Retention;
        fn parse(text: &str) -> Option<Option<Span>> {
            if text.trim() == "forever" {
                return Some(None);
            }
            Duration::parse(text)
                .filter(|kept| !kept.is_zero())
                .map(Some)
        }
        fn show(value: &Option<Span>) -> Option<String> {
            Some(value.map_or_else(
                || "forever".to_owned(),
                |kept| humantime::format_duration(kept).to_string(),
            ))
        }
    }

    /// [`ValueKind::Count`].
    pub struct Count;
    impl Kind for Count {
        type Value = u32;
        const KIND: ValueKind = ValueKind::Count;
        fn parse(text: &str) -> Option<u32> {
            text.trim().parse().ok()
        }
        fn show(value: &u32) -> Option<String> {
            Some(value.to_string())
        }
    }

    /// [`ValueKind::Tokens`]: unset is the model server's own limit.
    pub struct Tokens;
    impl Kind for Tokens {
        type Value = Option<u32>;
        const KIND: ValueKind = ValueKind::Tokens;
        fn parse(text: &str) -> Option<Option<u32>> {
            let n: u32 = text.trim().parse().ok()?;
            (1..=leasehold_actors::MAX_ANSWER_TOKENS)
                .contains(&n)
                .then_some(Some(n))
        }
        fn show(value: &Option<u32>) -> Option<String> {
            value.map(|n| n.to_string())
        }
    }

    /// [`ValueKind::Flag`].
    pub struct Flag;
    impl Kind for Flag {
        type Value = bool;
        const KIND: ValueKind = ValueKind::Flag;
        fn parse(text: &str) -> Option<bool> {
            crate::executor::parse_flag(text).ok()
        }
        fn show(value: &bool) -> Option<String> {
            Some(value.to_string())
        }
    }

    /// [`ValueKind::Role`].
    pub struct Role;
    impl Kind for Role {
        type Value = ModelRole;
        const KIND: ValueKind = ValueKind::Role;
        fn parse(text: &str) -> Option<ModelRole> {
            match text.trim() {
                "default" => Some(ModelRole::Default),
                "fast" => Some(ModelRole::Fast),
                _ => None,
            }
        }
        fn show(value: &ModelRole) -> Option<String> {
            let role = match value {
                ModelRole::Default => "default",
                ModelRole::Fast => "fast",
            };
            Some(role.to_owned())
        }
    }

    /// [`ValueKind::Durability`].
    pub struct Durability;
    impl Kind for Durability {
        type Value = Mode;
        const KIND: ValueKind = ValueKind::Durability;
        fn parse(text: &str) -> Option<Mode> {
            text.trim().parse().ok()
        }
        fn show(value: &Mode) -> Option<String> {
            Some(value.to_string())
        }
    }

    /// [`ValueKind::Path`]: kept as written, blanks and all, but not blank.
    pub struct Path;
    impl Kind for Path {
        type Value = PathBuf;
        const KIND: ValueKind = ValueKind::Path;
        fn parse(text: &str) -> Option<PathBuf> {
            (!text.trim().is_empty()).then(|| PathBuf::from(text))
        }
        fn show(value: &PathBuf) -> Option<String> {
            Some(value.display().to_string())
        }
    }

    /// [`ValueKind::Text`], shown as it is: a model's name.
    pub struct Text;
    impl Kind for Text {
        type Value = Option<String>;
        const KIND: ValueKind = ValueKind::Text;
        fn parse(text: &str) -> Option<Option<String>> {
            let text = text.trim();
            (!text.is_empty()).then(|| Some(text.to_owned()))
        }
        fn show(value: &Option<String>) -> Option<String> {
            value.clone()
        }
    }

    /// [`ValueKind::Text`] that is a URL, shown with its credentials
    /// hidden: a model endpoint's base URL.
    pub struct Url;
    impl Kind for Url {
        type Value = Option<String>;
        const KIND: ValueKind = ValueKind::Text;
        fn parse(text: &str) -> Option<Option<String>> {
            Text::parse(text)
        }
        fn show(value: &Option<String>) -> Option<String> {
            value.as_deref().map(crate::secret::redact_url)
        }
    }

    /// [`ValueKind::Secret`]: shown as `(set)`, never as itself.
    pub struct Secret;
    impl Kind for Secret {
        type Value = Option<String>;
        const KIND: ValueKind = ValueKind::Secret;
        fn parse(text: &str) -> Option<Option<String>> {
            Text::parse(text)
        }
        fn show(value: &Option<String>) -> Option<String> {
            value.as_ref().map(|_| "(set)".to_owned())
        }
    }

    /// [`ValueKind::StoreUrl`]: its password is never shown, not even in
    /// the refusal of a URL that is not PostgreSQL's.
    pub struct StoreUrl;
    impl Kind for StoreUrl {
        type Value = Option<String>;
        const KIND: ValueKind = ValueKind::StoreUrl;
        fn parse(text: &str) -> Option<Option<String>> {
            let text = text.trim();
            crate::store::is_postgres_url(text).then(|| Some(text.to_owned()))
        }
        fn show(value: &Option<String>) -> Option<String> {
            value.as_deref().map(crate::store::redact_url)
        }
        fn quote(text: &str) -> String {
            crate::store::redact_url(text.trim())
        }
    }

    /// [`ValueKind::Address`].
    pub struct Address;
    impl Kind for Address {
        type Value = SocketAddr;
        const KIND: ValueKind = ValueKind::Address;
        fn parse(text: &str) -> Option<SocketAddr> {
            text.trim().parse().ok()
        }
        fn show(value: &SocketAddr) -> Option<String> {
            Some(value.to_string())
        }
    }

    /// [`ValueKind::Size`], in bytes.
    pub struct Size;
    impl Kind for Size {
        type Value = u64;
        const KIND: ValueKind = ValueKind::Size;
        fn parse(text: &str) -> Option<u64> {
            parse_size(text)
        }
        fn show(value: &u64) -> Option<String> {
            Some(format_size(*value))
        }
    }

    /// [`ValueKind::List`]: empty is unset.
    pub struct List;
    impl Kind for List {
        type Value = Vec<String>;
        const KIND: ValueKind = ValueKind::List;
        fn parse(text: &str) -> Option<Vec<String>> {
            Some(list(text.trim()))
        }
        fn show(value: &Vec<String>) -> Option<String> {
            (!value.is_empty()).then(|| value.join(","))
        }
    }

    /// [`ValueKind::OnExhausted`].
    pub struct OnExhausted;
    impl Kind for OnExhausted {
        type Value = leasehold_actors::OnExhausted;
        const KIND: ValueKind = ValueKind::OnExhausted;
        fn parse(text: &str) -> Option<Self::Value> {
            text.trim().parse().ok()
        }
        fn show(value: &Self::Value) -> Option<String> {
            Some(value.to_string())
        }
    }

    /// What a run whose store write was given up does: `pause` or `fail`
    /// (read as [`ValueKind::OnExhausted`] is).
    pub struct OnStoreFailure;
    impl Kind for OnStoreFailure {
        type Value = leasehold_actors::OnStoreFailure;
        const KIND: ValueKind = ValueKind::OnExhausted;
        fn parse(text: &str) -> Option<Self::Value> {
            leasehold_actors::OnStoreFailure::from_name(text.trim())
        }
        fn show(value: &Self::Value) -> Option<String> {
            Some(value.name().to_owned())
        }
    }

    /// [`ValueKind::Policy`].
    pub struct Policy;
    impl Kind for Policy {
        type Value = PolicyChoice;
        const KIND: ValueKind = ValueKind::Policy;
        fn parse(text: &str) -> Option<PolicyChoice> {
            // The refusal says what a policy looks like; the parser's own
            // message is not needed for it.
            PolicyChoice::parse_at("watchdog.policy", text.trim()).ok()
        }
        fn show(value: &PolicyChoice) -> Option<String> {
            Some(value.to_string())
        }
    }

    /// [`ValueKind::Share`].
    pub struct Share;
    impl Kind for Share {
        type Value = super::super::Share;
        const KIND: ValueKind = ValueKind::Share;
        fn parse(text: &str) -> Option<Self::Value> {
            Self::Value::parse(text)
        }
        fn show(value: &Self::Value) -> Option<String> {
            Some(value.to_string())
        }
    }
}
