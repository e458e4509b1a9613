//! The outbox: each time a run pauses for a person or ends, the store
//! keeps a [`Notice`] of it **with the change that made it** — in the same
//! transaction (PostgreSQL), before the record in the same log (sled) — so
//! that a notice is never lost with its process, and never written for a
//! change that did not land. Whoever delivers notices (a serving
//! executor's webhooks) takes the due ones ([`Outbox::take_notices`]),
//! which holds each for a while so that two deliverers do not both send
//! it, and settles each ([`Outbox::settle_notice`]): removed once every
//! receiver has it, or kept with its progress and a later due time. A
//! deliverer that dies mid-delivery leaves its notices held until the hold
//! ends; then another takes them again: at least once.
//!
//! Which changes make a notice, what a notice holds and when it is due are
//! pure functions here, so every store keeps the same notices.

use serde::{Deserialize, Serialize};

use super::{PauseRecord, RunRecord, RunStatus, StoreFuture, listing};

/// How many characters of each text a notice keeps (a reason, an answer,
/// a pause's reason and subject): a notice says what happened and links
/// to the run, which holds the whole texts.
pub const NOTICE_CHARS: usize = 1000;

/// A run's pause or end, kept until every receiver that should hear of it
/// has.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    /// Its id: unique in the store, in the order notices were kept.
    #[serde(default)]
    pub id: u64,
    /// The run.
    pub run_id: String,
    /// The run's flow's name, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
    /// The receivers the run's flow names (its `notify`), besides those
    /// that hear of every run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<String>,
    /// The status the run took: paused (`waiting_human`,
    /// `reconciliation_required`) or ended.
    pub status: RunStatus,
    /// When (Unix ms).
    pub at_ms: u64,
    /// Why it failed or was cancelled, cut to [`NOTICE_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its answer, once completed, cut to [`NOTICE_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Why it waits, while paused: the reason and subject cut to
    /// [`NOTICE_CHARS`]; for a reconciliation, the call in question
    /// without its arguments or result (a model's and a tool's text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseRecord>,
    /// Which of the texts were cut, by name (`reason`, `answer`,
    /// `pause.reason`, `pause.subject`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub truncated: Vec<String>,
    /// Where its delivery is.
    #[serde(default)]
    pub delivery: Delivery,
    /// The run's tenant; `None` for the default tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// Where a notice's delivery is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// When it is next due to be taken (Unix ms). A take holds it by
    /// moving this forward; the take's settlement names it back, so that
    /// only the latest taker settles.
    pub due_at_ms: u64,
    /// How many times it was tried.
    #[serde(default)]
    pub attempts: u32,
    /// The receivers that have it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delivered: Vec<String>,
    /// What went wrong at the last try, if anything did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A take of due notices ([`Outbox::take_notices`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoticeTake {
    /// Now (Unix ms): notices due at or before it are taken.
    pub now_ms: u64,
    /// How long each taken notice is held (ms): not due again before
    /// `now_ms + hold_ms` unless it is settled.
    pub hold_ms: u64,
    /// At most this many, oldest first (id ascending).
    pub max: usize,
}

/// The outbox of a store: notices kept with the changes that made them,
/// taken and settled by whoever delivers them.
pub trait Outbox: Send + Sync + 'static {
    /// Takes up to `take.max` notices due at `take.now_ms` ([`is_due`]),
    /// oldest first, each held as [`held`] says, and answers them as held:
    /// a notice's `delivery.due_at_ms` is what settling it names. Every
    /// change of a run's record that [`notice_of`] makes a notice of keeps
    /// that notice, with the change, or neither lands; once it landed, the
    /// store publishes a [`StoreChange::Notice`] of the run (after its
    /// [`StoreChange::Run`]), which is what wakes a deliverer.
    ///
    /// [`StoreChange::Notice`]: crate::ports::StoreChange::Notice
    /// [`StoreChange::Run`]: crate::ports::StoreChange::Run
    fn take_notices(&self, take: NoticeTake) -> StoreFuture<Vec<Notice>>;

    /// Settles a taken notice if it is still held as the take left it
    /// (its due time is `held_until_ms`: no take since): `None` removes
    /// it, `Some(delivery)` keeps it with that progress, due again at its
    /// `due_at_ms`. Answers whether it settled; a notice taken again
    /// meanwhile, or gone with its run, is left as it is.
    fn settle_notice(
        &self,
        id: u64,
        held_until_ms: u64,
        delivery: Option<Delivery>,
    ) -> StoreFuture<bool>;
}

/// Whether a change of a run's record from status `before` to `after`
/// makes a notice ([`notice_of`]): the run takes a paused or terminal
/// status it did not have.
pub fn makes_notice(before: RunStatus, after: RunStatus) -> bool {
    after != before && (after.is_paused() || after.is_terminal())
}

/// The notice a change of a run's record from status `before` to `after`
/// makes, if it makes one: when the run takes a paused or terminal status
/// it did not have. Its id is the store's to give; it is due at once.
pub fn notice_of(before: RunStatus, after: &RunRecord) -> Option<Notice> {
    let status = after.status;
    if !makes_notice(before, status) {
        return None;
    }
    let mut truncated = Vec::new();
    let mut cut = |name: &str, text: &str| {
        let mut text = text.to_owned();
        if clip(&mut text) {
            truncated.push(name.to_owned());
        }
        text
    };
    let reason = after.reason.as_deref().map(|text| cut("reason", text));
    let answer = after.answer.as_deref().map(|text| cut("answer", text));
    let pause = after.pause.as_ref().map(|pause| PauseRecord {
        reason: cut("pause.reason", &pause.reason),
        subject: cut("pause.subject", &pause.subject),
        path: pause.path.clone(),
        call: pause.call.as_ref().map(|call| {
            let mut call = call.clone();
            call.arguments = serde_json::Value::Null;
            call.result = None;
            call
        }),
    });
    Some(Notice {
        id: 0,
        run_id: after.run_id.clone(),
        flow: listing::flow_name(after).map(str::to_owned),
        notify: receivers_named(after),
        status,
        at_ms: after.updated_at_ms,
        reason,
        answer,
        pause,
        truncated,
        delivery: Delivery {
            due_at_ms: after.updated_at_ms,
            ..Delivery::default()
        },
        tenant: after.tenant.clone(),
    })
}

/// The receivers a run's flow names in its `notify` list, in its order,
/// each once; names that are not text are skipped (the flow was checked
/// when the run was planned).
pub fn receivers_named(record: &RunRecord) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let listed = record
        .flow
        .get("notify")
        .and_then(serde_json::Value::as_array);
    for name in listed
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
    {
        if !names.iter().any(|known| known == name) {
            names.push(name.to_owned());
        }
    }
    names
}

/// Whether `notice` may be taken at `take.now_ms`.
pub fn is_due(notice: &Notice, take: &NoticeTake) -> bool {
    notice.delivery.due_at_ms <= take.now_ms
}

/// `notice` as a take holds it: due again only once the hold has passed.
#[must_use]
pub fn held(mut notice: Notice, take: &NoticeTake) -> Notice {
    notice.delivery.due_at_ms = take.now_ms.saturating_add(take.hold_ms);
    notice
}

/// Cuts `text` to its first [`NOTICE_CHARS`] characters; whether it cut.
fn clip(text: &mut String) -> bool {
    match text.char_indices().nth(NOTICE_CHARS) {
        Some((at, _)) => {
            text.truncate(at);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: RunStatus) -> RunRecord {
        RunRecord {
            trace_parent: None,
            tenant: None,
            run_id: "r".to_owned(),
            flow: serde_json::json!({"name": "f", "notify": ["ops", "ops", 3, "audit"]}),
            status,
            owner_id: Some("e".to_owned()),
            fence: 1,
            lease_expires_at_ms: 0,
            reason: None,
            answer: None,
            pause: None,
            created_at_ms: 1,
            updated_at_ms: 7,
            fork: None,
        }
    }

    #[test]
    fn pauses_and_ends_make_notices_and_nothing_else_does() {
        for status in RunStatus::ALL {
            let made = notice_of(RunStatus::Running, &record(status)).is_some();
            assert_eq!(
                made,
                status.is_paused() || status.is_terminal(),
                "{status:?}"
            );
        }
        // The same status again (a pause's reason replaced) makes none.
        let waiting = record(RunStatus::WaitingHuman);
        assert!(notice_of(waiting.status, &waiting).is_none());
    }

    #[test]
    fn a_notice_names_the_flows_receivers_once_and_cuts_its_texts() {
        let mut ended = record(RunStatus::Completed);
        ended.answer = Some("é".repeat(NOTICE_CHARS + 5));
        let notice = notice_of(RunStatus::Running, &ended).unwrap();
        assert_eq!(notice.notify, ["ops", "audit"]);
        assert_eq!(notice.flow.as_deref(), Some("f"));
        assert_eq!(notice.answer.unwrap().chars().count(), NOTICE_CHARS);
        assert_eq!(notice.truncated, ["answer"]);
        assert_eq!(notice.delivery.due_at_ms, 7);
    }
}
