//! Tenants and their API keys.
//!
//! Every run belongs to one **tenant**: the one whose key started it
//! ([`RunOptions::tenant`](crate::RunOptions::tenant)), or
//! [`DEFAULT_TENANT`] for a run started without one. A tenant sees, reads,
//! follows, controls and forks only its own runs, and an idempotency key
//! holds within its tenant only.
//!
//! An **API key** ([`ApiKey`]) belongs to one tenant and has one
//! [`Scope`]: `read`, `operate` (also reads) or `admin` (also operates,
//! and manages its tenant's keys). Its secret is given once, when it is
//! made ([`NewKey`]); the store keeps only its SHA-256 digest, and a
//! secret is checked against the digest in constant time
//! ([`ApiKey::accepts`]). A secret reads `lh_ID_SECRET`: the id finds the
//! key in the store ([`KeyStore`](crate::KeyStore)) without a search, the
//! secret proves it.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The tenant of a run started without a tenant's key: by the server's own
/// token, without a token on loopback, or in process.
pub const DEFAULT_TENANT: &str = "default";

/// The most characters a tenant's name has.
pub const MAX_TENANT: usize = 63;

/// The most characters a key's label has.
pub const MAX_KEY_NAME: usize = 200;

/// The tenant a run's `tenant` field stands for: [`DEFAULT_TENANT`] when
/// it has none.
pub fn tenant_or_default(tenant: Option<&str>) -> &str {
    tenant.unwrap_or(DEFAULT_TENANT)
}

/// The tenant as a run's record keeps it: `None` for [`DEFAULT_TENANT`],
/// so that a run started before tenants existed and one started since by
/// the default tenant read the same.
pub fn stored_tenant(tenant: &str) -> Option<String> {
    (tenant != DEFAULT_TENANT).then(|| tenant.to_owned())
}

/// A tenant's name refused, saying why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the tenant {name:?} is refused: {why}")]
pub struct BadTenant {
    /// The name given.
    pub name: String,
    /// Why it is refused.
    pub why: &'static str,
}

/// Checks a tenant's name: 1 to [`MAX_TENANT`] characters, lower-case
/// ASCII letters, digits, `-` and `_`, beginning with a letter or a digit.
/// A name so made is safe in a URL, a log line, a metric's label and a
/// store's key.
///
/// # Errors
/// [`BadTenant`] naming what is wrong.
pub fn check_tenant(name: &str) -> Result<(), BadTenant> {
    let refused = |why| {
        Err(BadTenant {
            name: name.chars().take(MAX_TENANT + 1).collect(),
            why,
        })
    };
    if name.is_empty() {
        return refused("it is empty");
    }
    if name.chars().count() > MAX_TENANT {
        return refused("it is longer than 63 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    {
        return refused("only lower-case letters, digits, `-` and `_` may be used");
    }
    if !name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric())
    {
        return refused("it must begin with a letter or a digit");
    }
    Ok(())
}

/// What a key may do. Each scope includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// List, read and follow the tenant's runs.
    Read,
    /// Also start, pause, steer, resume, cancel, reconcile and fork them.
    Operate,
    /// Also make, list and revoke the tenant's keys.
    Admin,
}

impl Scope {
    /// Every scope, from the least to the most.
    pub const ALL: [Self; 3] = [Self::Read, Self::Operate, Self::Admin];

    /// Its name, as it is written.
    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Operate => "operate",
            Self::Admin => "admin",
        }
    }

    /// Whether a key of this scope may do what `needed` allows.
    pub fn allows(self, needed: Self) -> bool {
        self >= needed
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Scope {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|scope| scope.name() == text.trim())
            .ok_or_else(|| format!("the scope {text:?} is not one of `read`, `operate` or `admin`"))
    }
}

/// An API key as the store keeps it: never its secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    /// Its id: the part of its secret that finds it (`lh_ID_…`).
    pub id: String,
    /// The tenant it acts for.
    pub tenant: String,
    /// What it may do.
    pub scope: Scope,
    /// A label given when it was made (`ci`, `alice's laptop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The SHA-256 digest of its whole secret, in lower-case hex.
    pub digest: String,
    /// When it was made (Unix ms).
    pub created_at_ms: u64,
    /// When it was revoked (Unix ms), if it was: it is refused from then
    /// on, by every executor of the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at_ms: Option<u64>,
}

/// A key as the API shows it: everything but its digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyView {
    /// Its id: the `ID` of `lh_ID_SECRET`.
    pub id: String,
    /// The tenant it acts for.
    pub tenant: String,
    /// What it may do.
    pub scope: Scope,
    /// Its name, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// When it was made (Unix ms).
    pub created_at_ms: u64,
    /// When it was revoked (Unix ms), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at_ms: Option<u64>,
}

impl From<ApiKey> for KeyView {
    fn from(key: ApiKey) -> Self {
        Self {
            id: key.id,
            tenant: key.tenant,
            scope: key.scope,
            name: key.name,
            created_at_ms: key.created_at_ms,
            revoked_at_ms: key.revoked_at_ms,
        }
    }
}

impl ApiKey {
    /// Whether `secret` is this key's, and the key is not revoked.
    pub fn accepts(&self, secret: &str) -> bool {
        self.is_secret(secret) && self.revoked_at_ms.is_none()
    }

    /// Whether `secret` is this key's, revoked or not. The digests are
    /// compared byte for byte, every byte: the time taken says nothing of
    /// where they differ.
    pub fn is_secret(&self, secret: &str) -> bool {
        let given = digest(secret);
        given.len() == self.digest.len()
            && given
                .bytes()
                .zip(self.digest.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// A key just made: what the store keeps, and the secret, shown once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewKey {
    /// What the store keeps.
    pub key: ApiKey,
    /// The whole secret (`lh_ID_SECRET`): given to its holder once, kept
    /// nowhere.
    pub secret: String,
}

/// The prefix of every key's secret.
pub const KEY_PREFIX: &str = "lh_";

/// The characters of a key's id.
const ID_CHARS: usize = 12;

impl NewKey {
    /// A new key of `tenant` with `scope`, made at `now_ms`: its id and
    /// secret from the operating system's random source (uuid v4: 122
    /// random bits each part).
    ///
    /// # Errors
    /// A tenant name [`check_tenant`] refuses, or a label longer than
    /// [`MAX_KEY_NAME`] characters.
    pub fn make(
        tenant: &str,
        scope: Scope,
        name: Option<String>,
        now_ms: u64,
    ) -> Result<Self, String> {
        check_tenant(tenant).map_err(|e| e.to_string())?;
        if let Some(name) = &name
            && name.chars().count() > MAX_KEY_NAME
        {
            return Err(format!(
                "the key's name has {} characters, more than {MAX_KEY_NAME}",
                name.chars().count()
            ));
        }
        let id: String = uuid::Uuid::new_v4()
            .simple()
            .to_string()
            .chars()
            .take(ID_CHARS)
            .collect();
        let secret = format!(
            "{KEY_PREFIX}{id}_{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        Ok(Self {
            key: ApiKey {
                id,
                tenant: tenant.to_owned(),
                scope,
                name: name.filter(|n| !n.trim().is_empty()),
                digest: digest(&secret),
                created_at_ms: now_ms,
                revoked_at_ms: None,
            },
            secret,
        })
    }
}

/// The id in a key's secret (`lh_ID_SECRET`), if it reads as one.
pub fn key_id(secret: &str) -> Option<&str> {
    let rest = secret.strip_prefix(KEY_PREFIX)?;
    let (id, tail) = rest.split_once('_')?;
    let well_made = id.len() == ID_CHARS
        && id.bytes().all(|b| b.is_ascii_hexdigit())
        && !tail.is_empty()
        && tail.len() <= 128;
    well_made.then_some(id)
}

/// The SHA-256 digest of `secret`, in lower-case hex.
pub fn digest(secret: &str) -> String {
    let bytes = Sha256::digest(secret.as_bytes());
    let mut hex = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        use std::fmt::Write as _;
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// The key an idempotency key is kept under for `tenant`: as given for the
/// default tenant, after the tenant's name and a space (`acme KEY`) for
/// any other. A tenant's name holds no space, so a tenant's key never
/// finds another tenant's run; a default tenant's key that holds a space
/// itself (the API refuses one; a program may give one) is kept after
/// `default `, a name no other tenant's key is kept under.
pub fn idempotency_key_of(tenant: Option<&str>, key: &str) -> String {
    match tenant {
        None if !key.contains(' ') => key.to_owned(),
        None => format!("{DEFAULT_TENANT} {key}"),
        Some(tenant) => format!("{tenant} {key}"),
    }
}

/// The order queued runs are claimed in, fair across tenants: in turns,
/// each tenant's oldest run in the first turn, its second oldest in the
/// second, and so on, a turn's runs oldest first; at most `max` run ids.
/// A tenant's turns begin after the runs it has running already
/// (`running`, by tenant name, [`DEFAULT_TENANT`] for the runs of none),
/// so that a tenant holding many live runs waits for one holding none:
/// when one run ends at a time, the next start goes to the tenant with the
/// fewest runs going on, not to the one whose run is oldest. `queued` is
/// every queued run — its id and its record's `tenant` — in id order
/// (oldest first), as every store reads its queue. A tenant that queued
/// 10 000 runs then holds another tenant's one run back by at most one run
/// of its own.
///
/// # Errors
/// The first error `queued` yields.
pub fn fair_order<E>(
    queued: impl IntoIterator<Item = Result<(String, Option<String>), E>>,
    running: &std::collections::BTreeMap<String, u64>,
    max: usize,
) -> Result<Vec<String>, E> {
    // Each tenant's runs counted so far, and where its turns begin.
    let mut tenants: std::collections::HashMap<Option<String>, (usize, usize)> =
        std::collections::HashMap::new();
    let mut picked: Vec<(usize, String)> = Vec::new();
    for entry in queued {
        let (run_id, tenant) = entry?;
        let (counted, begins) = tenants.entry(tenant).or_insert_with_key(|tenant| {
            let live = running.get(tenant_or_default(tenant.as_deref()));
            (
                0,
                live.map_or(0, |n| usize::try_from(*n).unwrap_or(usize::MAX)),
            )
        });
        // No more than `max` of one tenant's runs can be among the first.
        if *counted < max {
            picked.push((begins.saturating_add(*counted), run_id));
        }
        *counted = counted.saturating_add(1);
    }
    picked.sort();
    Ok(picked.into_iter().take(max).map(|(_, id)| id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_runs_are_taken_in_turns_across_tenants() {
        let queued = |runs: &[(&str, Option<&str>)]| {
            runs.iter()
                .map(|(id, tenant)| {
                    Ok::<_, std::convert::Infallible>(((*id).to_owned(), tenant.map(str::to_owned)))
                })
                .collect::<Vec<_>>()
        };
        let mut runs: Vec<(String, Option<&str>)> =
            (0..10).map(|n| (format!("r0{n}"), Some("big"))).collect();
        runs.push(("r10".to_owned(), None));
        runs.push(("r11".to_owned(), Some("small")));
        runs.push(("r12".to_owned(), Some("small")));
        let borrowed: Vec<(&str, Option<&str>)> =
            runs.iter().map(|(id, t)| (id.as_str(), *t)).collect();
        let none = std::collections::BTreeMap::new();
        let order = |max| fair_order(queued(&borrowed), &none, max).unwrap();
        assert_eq!(order(3), ["r00", "r10", "r11"]);
        assert_eq!(order(5), ["r00", "r10", "r11", "r01", "r12"]);
        assert_eq!(order(0), Vec::<String>::new());
        assert_eq!(order(100).len(), 13);
        // One tenant alone: oldest first, as a queue.
        let alone = queued(&[("a", None), ("b", None), ("c", None)]);
        assert_eq!(fair_order(alone, &none, 2).unwrap(), ["a", "b"]);
        // `big` has eight runs going on, `small` none: a run that ends
        // alone gives its room to `small`, though `big`'s runs are older.
        let running = std::collections::BTreeMap::from([("big".to_owned(), 8)]);
        let order = |max| fair_order(queued(&borrowed), &running, max).unwrap();
        assert_eq!(order(1), ["r10"]);
        assert_eq!(order(2), ["r10", "r11"]);
        assert_eq!(order(4), ["r10", "r11", "r12", "r00"]);
    }

    #[test]
    fn a_new_keys_secret_is_accepted_and_nothing_else_nor_once_revoked() {
        let made = NewKey::make("acme", Scope::Operate, Some("ci".into()), 5).unwrap();
        assert_eq!(key_id(&made.secret), Some(made.key.id.as_str()));
        assert!(made.key.accepts(&made.secret));
        assert!(!made.key.accepts(&format!("{}x", made.secret)));
        assert!(!made.key.accepts(""));
        assert!(!made.key.digest.contains(&made.secret[3..15]));
        let other = NewKey::make("acme", Scope::Operate, None, 5).unwrap();
        assert_ne!(other.key.id, made.key.id);
        assert!(!made.key.accepts(&other.secret));
        let mut revoked = made.key.clone();
        revoked.revoked_at_ms = Some(9);
        assert!(!revoked.accepts(&made.secret));
    }

    #[test]
    fn tenant_names_are_short_lower_case_words() {
        for good in ["acme", "team-7", "a", "x_y", &"a".repeat(63)] {
            assert!(check_tenant(good).is_ok(), "{good}");
        }
        for bad in ["", "Acme", "a/b", "-a", "_a", "a b", "é", &"a".repeat(64)] {
            let error = check_tenant(bad).expect_err(bad);
            assert!(error.to_string().contains("refused"), "{error}");
        }
    }

    #[test]
    fn scopes_include_the_ones_before_them() {
        assert!(Scope::Admin.allows(Scope::Read));
        assert!(Scope::Operate.allows(Scope::Read));
        assert!(!Scope::Read.allows(Scope::Operate));
        assert!(!Scope::Operate.allows(Scope::Admin));
        assert_eq!("operate".parse::<Scope>(), Ok(Scope::Operate));
        assert!("root".parse::<Scope>().unwrap_err().contains("root"));
    }

    #[test]
    fn only_well_made_secrets_name_an_id() {
        assert_eq!(key_id("lh_0123456789ab_secret"), Some("0123456789ab"));
        for bad in [
            "",
            "lh_",
            "lh_0123456789ab",
            "lh_0123456789ab_",
            "lh_0123456789_secret",
            "xx_0123456789ab_secret",
            "lh_0123456789zz_secret",
        ] {
            assert_eq!(key_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn idempotency_keys_of_two_tenants_never_meet() {
        assert_eq!(idempotency_key_of(None, "k"), "k");
        assert_eq!(idempotency_key_of(Some("acme"), "k"), "acme k");
        // The default tenant's keys are visible ASCII: none holds a space.
        for key in ["acme/k", "acme_k", "acme-k", "acme k"] {
            assert_ne!(
                idempotency_key_of(None, key),
                idempotency_key_of(Some("acme"), "k")
            );
        }
    }
}
