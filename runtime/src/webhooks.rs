//! Webhooks: a person told when a run waits for them, and when it ends.
//!
//! Each time a run pauses (`waiting_human`, `reconciliation_required`) or
//! ends (`completed`, `failed`, `cancelled`), the store keeps a notice of
//! it with the change itself (the outbox, [`leasehold_actors::outbox`]). A
//! serving executor's [`Deliverer`](deliver::Deliverer) takes the due
//! notices and posts each to the receivers that should hear of it, signed
//! as the Standard Webhooks specification says ([`sign`]), retrying with
//! backoff until each receiver answers 2xx or the notice is too old: at
//! least once, across a restart of either side. Delivery runs beside the
//! runs and never holds one up: a slow or dead receiver costs a notice in
//! the store and a counter. Each receiver is told in a lane of its own,
//! pauses first ([`deliver`]), so that one receiver never delays another.
//!
//! Receivers are the configuration's, by name (`[webhooks.receivers.NAME]`
//! with `url` and `secret`); a flow names the ones it wants besides those
//! told of every run (`notify = ["ops"]`) and never gives a URL or a
//! secret, so that a client posting flows cannot make the server call an
//! address of its choosing.
//!
//! ```toml
//! [webhooks.receivers.ops]
//! url = "https://hooks.example.com/leasehold"
//! secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
//! events = ["waiting_human", "reconciliation_required", "failed"]  # default: all five
//! runs = "named"  # only runs whose flow names it; default "all"
//! ```

use std::fmt;

use base64::Engine as _;
use leasehold_actors::RunStatus;

use crate::config::tables::{Entry, NamedTables, Wrong};

#[cfg(feature = "webhooks")]
pub mod deliver;
pub mod payload;
#[cfg(feature = "webhooks")]
pub mod sign;

/// The most receivers the configuration may declare.
pub const MAX_RECEIVERS: usize = 64;

/// The statuses a notice is made for, in the order of a run's life: what a
/// receiver hears of unless its `events` says less.
pub const NOTICE_STATUSES: [RunStatus; 5] = [
    RunStatus::WaitingHuman,
    RunStatus::ReconciliationRequired,
    RunStatus::Completed,
    RunStatus::Failed,
    RunStatus::Cancelled,
];

/// A receiver's signing secret: the key bytes of a `whsec_…` secret (its
/// base64 after the prefix). Never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(crate::secret::HIDDEN)
    }
}

impl WebhookSecret {
    /// The fewest key bytes a secret may have.
    pub const MIN_BYTES: usize = 24;
    /// The most key bytes a secret may have.
    pub const MAX_BYTES: usize = 64;

    /// A secret as the Standard Webhooks specification writes it:
    /// `whsec_` then the base64 of 24 to 64 random bytes.
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(encoded) = text.strip_prefix("whsec_") else {
            return Err("expected a secret written `whsec_` then base64".to_owned());
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim_end_matches('=').to_owned() + padding(encoded))
            .map_err(|e| format!("the part after `whsec_` is not base64: {e}"))?;
        if !(Self::MIN_BYTES..=Self::MAX_BYTES).contains(&bytes.len()) {
            return Err(format!(
                "the secret holds {} bytes; expected {} to {}",
                bytes.len(),
                Self::MIN_BYTES,
                Self::MAX_BYTES
            ));
        }
        Ok(Self(bytes))
    }

    /// The key bytes.
    pub fn key(&self) -> &[u8] {
        &self.0
    }
}

/// The `=` padding base64 text of this length lacks.
fn padding(encoded: &str) -> &'static str {
    match encoded.trim_end_matches('=').len() % 4 {
        2 => "==",
        3 => "=",
        _ => "",
    }
}

/// Which runs a receiver hears of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiverRuns {
    /// Every run (`runs = "all"`, the default).
    All,
    /// Only the runs whose flow names it in `notify` (`runs = "named"`).
    Named,
}

/// A webhook receiver, as the configuration declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receiver {
    /// Its name: what flows name in `notify`, and what delivery records.
    pub name: String,
    /// Where notices are posted (`http` or `https`).
    pub url: String,
    /// What signs them.
    pub secret: WebhookSecret,
    /// The statuses it hears of.
    pub events: Vec<RunStatus>,
    /// Which runs it hears of.
    pub runs: ReceiverRuns,
}

impl Receiver {
    /// Whether it should hear of a run of a flow that names `notify`
    /// taking `status`.
    pub fn hears(&self, status: RunStatus, notify: &[String]) -> bool {
        self.events.contains(&status)
            && (self.runs == ReceiverRuns::All || notify.contains(&self.name))
    }
}

/// The file's `webhooks.receivers` table.
const RECEIVERS: NamedTables = NamedTables {
    at: "webhooks.receivers",
    noun: ("receiver", "receivers"),
    holds: "`url` and `secret`",
    max: MAX_RECEIVERS,
};

/// The file's `[webhooks.receivers.NAME]` tables, each checked; `Err`
/// names the entry (`webhooks.receivers.ops.secret`) and what was wrong.
pub fn receivers_of(value: toml::Value) -> Result<Vec<Receiver>, (String, String)> {
    RECEIVERS.read(value, receiver_of)
}

fn receiver_of(name: String, entry: &mut Entry) -> Result<Receiver, Wrong> {
    let url = entry
        .text("url")?
        .ok_or_else(|| entry.wrong("", "missing `url`".to_owned()))?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(entry.wrong(
            "url",
            format!(
                "expected an `http://` or `https://` URL, got {}",
                crate::secret::redact_url(&url)
            ),
        ));
    }
    let secret = entry
        .text("secret")?
        .ok_or_else(|| entry.wrong("", "missing `secret` (`whsec_` then base64)".to_owned()))?;
    let secret = WebhookSecret::parse(&secret).map_err(|message| entry.wrong("secret", message))?;
    let runs = match entry.text("runs")?.as_deref() {
        None | Some("all") => ReceiverRuns::All,
        Some("named") => ReceiverRuns::Named,
        Some(other) => {
            return Err(entry.wrong(
                "runs",
                format!("expected \"all\" or \"named\", got {other:?}"),
            ));
        }
    };
    let events = match entry.take("events") {
        None => NOTICE_STATUSES.to_vec(),
        Some(value) => events_of(value).map_err(|message| entry.wrong("events", message))?,
    };
    entry.done("`url`, `secret`, `events` and `runs`")?;
    Ok(Receiver {
        name,
        url,
        secret,
        events,
        runs,
    })
}

fn events_of(value: toml::Value) -> Result<Vec<RunStatus>, String> {
    let names = NOTICE_STATUSES.map(RunStatus::name).join(", ");
    let toml::Value::Array(items) = value else {
        return Err(format!("expected a list of statuses among {names}"));
    };
    let mut events = Vec::new();
    for item in items {
        let status = item
            .as_str()
            .and_then(|text| NOTICE_STATUSES.into_iter().find(|s| s.name() == text))
            .ok_or_else(|| format!("{item} is not one of {names}"))?;
        if !events.contains(&status) {
            events.push(status);
        }
    }
    if events.is_empty() {
        return Err(format!("an empty list: name at least one of {names}"));
    }
    Ok(events)
}

/// The names a flow's `notify` gives that no receiver has: what posting or
/// running the flow refuses, naming them.
pub fn unknown_receivers<'a>(receivers: &[Receiver], notify: &'a [String]) -> Vec<&'a str> {
    notify
        .iter()
        .filter(|name| !receivers.iter().any(|r| r.name == **name))
        .map(String::as_str)
        .collect()
}

/// Refuses a flow whose `notify` names a receiver `receivers` lacks,
/// naming it and the receivers there are.
pub fn check_notify(
    receivers: &[Receiver],
    flow: &leasehold_actors::Flow,
) -> Result<(), leasehold_actors::FlowError> {
    let Some((i, name)) = flow
        .notify
        .iter()
        .enumerate()
        .find(|(_, name)| !receivers.iter().any(|r| r.name == **name))
    else {
        return Ok(());
    };
    let declared = if receivers.is_empty() {
        "it declares none".to_owned()
    } else {
        let names: Vec<&str> = receivers.iter().map(|r| r.name.as_str()).collect();
        format!("it declares {}", names.join(", "))
    };
    Err(leasehold_actors::FlowError::new(
        format!("notify[{i}]"),
        format!(
            "{name:?} is not a webhook receiver of this configuration ({declared}); receivers \
             are declared as [webhooks.receivers.NAME] in the configuration file"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn parsed(text: &str) -> Result<Vec<Receiver>, (String, String)> {
        let table: toml::Table = text.parse().unwrap();
        receivers_of(table["webhooks"]["receivers"].clone())
    }

    #[test]
    fn a_receiver_is_read_with_its_defaults() {
        let receivers = parsed(&format!(
            "[webhooks.receivers.ops]\nurl = \"https://h.example/x\"\nsecret = \"{SECRET}\"\n"
        ))
        .unwrap();
        assert_eq!(receivers.len(), 1);
        let ops = &receivers[0];
        assert_eq!((ops.name.as_str(), ops.runs), ("ops", ReceiverRuns::All));
        assert_eq!(ops.events, NOTICE_STATUSES);
        assert_eq!(ops.secret.key().len(), 24);
        assert_eq!(format!("{:?}", ops.secret), "***");
        assert!(ops.hears(RunStatus::Failed, &[]));
        assert!(!ops.hears(RunStatus::Running, &[]));
    }

    #[test]
    fn a_named_receiver_hears_only_of_the_runs_that_name_it() {
        let receivers = parsed(&format!(
            "[webhooks.receivers.pager]\nurl = \"http://127.0.0.1:9/\"\nsecret = \"{SECRET}\"\n\
             runs = \"named\"\nevents = [\"waiting_human\"]\n"
        ))
        .unwrap();
        let pager = &receivers[0];
        assert!(!pager.hears(RunStatus::WaitingHuman, &["ops".to_owned()]));
        assert!(pager.hears(RunStatus::WaitingHuman, &["pager".to_owned()]));
        assert!(!pager.hears(RunStatus::Completed, &["pager".to_owned()]));
        assert_eq!(
            unknown_receivers(&receivers, &["pager".to_owned(), "nope".to_owned()]),
            ["nope"]
        );
    }

    #[test]
    fn a_bad_receiver_is_refused_naming_the_entry() {
        let refused =
            |body: &str| parsed(&format!("[webhooks.receivers.ops]\n{body}")).unwrap_err();
        let url = "url = \"https://h.example/\"\n";
        assert_eq!(
            refused(&format!("{url}secret = \"abc\"")).0,
            "webhooks.receivers.\"ops\".secret"
        );
        assert!(
            refused(&format!("{url}secret = \"whsec_c2hvcnQ=\""))
                .1
                .contains("bytes")
        );
        assert!(
            refused(&format!("{url}secret = \"whsec_!!\""))
                .1
                .contains("base64")
        );
        assert_eq!(
            refused(&format!("url = \"ftp://h/\"\nsecret = \"{SECRET}\"")).0,
            "webhooks.receivers.\"ops\".url"
        );
        assert_eq!(
            refused(&format!(
                "{url}secret = \"{SECRET}\"\nevents = [\"running\"]"
            ))
            .0,
            "webhooks.receivers.\"ops\".events"
        );
        assert_eq!(
            refused(&format!("{url}secret = \"{SECRET}\"\nruns = \"some\"")).0,
            "webhooks.receivers.\"ops\".runs"
        );
        assert_eq!(
            refused(&format!("{url}secret = \"{SECRET}\"\nheaders = 1")).0,
            "webhooks.receivers.\"ops\".headers"
        );
        assert!(
            refused(&format!("secret = \"{SECRET}\""))
                .1
                .contains("missing `url`")
        );
    }
}
