//! What a webhook says: a Standard Webhooks payload (`type`, `timestamp`,
//! `data`) made from a notice alone, so that every attempt sends the same
//! body. A pause's says how to answer it: the requests to send (a link to
//! `POST /runs/{id}/resume`, `/cancel` or `/reconcile` with the body each
//! takes) and the same as commands.

use std::time::{Duration, UNIX_EPOCH};

use leasehold_actors::{Notice, RunStatus};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};

/// What a run id is escaped of in a link's path: all but the unreserved
/// characters of RFC 3986.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Where the links of a payload point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Links {
    /// The server's address as its callers reach it, without a trailing
    /// slash and without the credentials it may carry (a person who
    /// answers has their own): `webhooks.public_url`, or `http://` and
    /// `server.addr`.
    pub base: String,
    /// Whether the server asks for a bearer token (`api_token`): said, so
    /// that an answer sends it; the token itself is never in a payload.
    pub token_required: bool,
}

impl Links {
    /// Links to `base` (a trailing slash and any `user:password@`
    /// dropped).
    pub fn new(base: &str, token_required: bool) -> Self {
        Self {
            base: crate::secret::without_credentials(base.trim_end_matches('/')),
            token_required,
        }
    }

    fn run(&self, run_id: &str, rest: &str) -> String {
        let id = utf8_percent_encode(run_id, PATH_SEGMENT);
        format!("{}/runs/{id}{rest}", self.base)
    }
}

/// The message id of `notice`: the same on every attempt, unique in the
/// store (`webhook-id`).
pub fn message_id(notice: &Notice) -> String {
    format!("msg_{}_{}", notice.run_id, notice.id)
}

/// The event type of a notice: `run.waiting_human`, `run.completed`, ….
pub fn event_type(status: RunStatus) -> String {
    format!("run.{}", status.name())
}

/// The payload of `notice`.
pub fn payload(notice: &Notice, links: &Links) -> Value {
    let at = UNIX_EPOCH + Duration::from_millis(notice.at_ms);
    let mut data = json!({
        "run_id": notice.run_id,
        "status": notice.status.name(),
        "at_ms": notice.at_ms,
        "links": {
            "run": links.run(&notice.run_id, ""),
            "events": links.run(&notice.run_id, "/events"),
            "dashboard": format!("{}/#/runs/{}", links.base,
                utf8_percent_encode(&notice.run_id, PATH_SEGMENT)),
        },
    });
    let tenant = leasehold_actors::tenancy::tenant_or_default(notice.tenant.as_deref());
    data["tenant"] = json!(tenant);
    let fields = [
        ("flow", notice.flow.as_ref().map(|flow| json!(flow))),
        ("reason", notice.reason.as_ref().map(|text| json!(text))),
        ("answer", notice.answer.as_ref().map(|text| json!(text))),
        (
            "pause",
            notice
                .pause
                .as_ref()
                .map(|pause| serde_json::to_value(pause).unwrap_or(Value::Null)),
        ),
        (
            "truncated",
            (!notice.truncated.is_empty()).then(|| json!(notice.truncated)),
        ),
        ("respond", respond(notice, links)),
    ];
    for (key, value) in fields {
        if let Some(value) = value {
            data[key] = value;
        }
    }
    json!({
        "type": event_type(notice.status),
        "timestamp": humantime::format_rfc3339_millis(at).to_string(),
        "data": data,
    })
}

/// How to answer a pause: the requests, and the same as commands; `None`
/// for an end.
fn respond(notice: &Notice, links: &Links) -> Option<Value> {
    let run_id = &notice.run_id;
    let server = &links.base;
    let shell_id = shell_word(run_id);
    let request = |path: &str, body: Value| {
        json!({
            "method": "POST",
            "url": links.run(run_id, path),
            "body": body,
        })
    };
    let cancel = request("/cancel", json!({"reason": "why it is cancelled"}));
    let cancel_command = format!("leasehold runs cancel {shell_id} --server {server}");
    let mut answer = match notice.status {
        RunStatus::WaitingHuman => json!({
            "resume": request("/resume", json!({"guidance": "what to do next (optional)"})),
            "cancel": cancel,
            "commands": [
                format!("leasehold runs resume {shell_id} --server {server} --guidance 'what to do next'"),
                cancel_command,
            ],
        }),
        RunStatus::ReconciliationRequired => {
            let key = notice
                .pause
                .as_ref()
                .and_then(|pause| pause.call.as_ref())
                .map_or_else(String::new, |call| call.key.clone());
            let shell_key = shell_word(&key);
            json!({
                "reconcile": request("/reconcile", json!({
                    "key": key,
                    "decision": "mark_done | retry | cancel",
                    "result": "what the call did (for mark_done)",
                })),
                "cancel": cancel,
                "commands": [
                    format!("leasehold runs reconcile {shell_id} --server {server} --key {shell_key} --mark-done --result 'what it did'"),
                    format!("leasehold runs reconcile {shell_id} --server {server} --key {shell_key} --retry"),
                    cancel_command,
                ],
            })
        }
        _ => return None,
    };
    if links.token_required {
        let tenant = leasehold_actors::tenancy::tenant_or_default(notice.tenant.as_deref());
        answer["authorization"] = json!(format!(
            "Bearer: a key of tenant `{tenant}` with scope operate (the server's api_token \
             for the default tenant)"
        ));
    }
    Some(answer)
}

/// `text` as one shell word: as it is when it is plain, else in single
/// quotes.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use leasehold_actors::{Delivery, PauseRecord};

    use super::*;

    fn notice(status: RunStatus) -> Notice {
        Notice {
            id: 7,
            run_id: "run-1".to_owned(),
            flow: Some("research".to_owned()),
            notify: Vec::new(),
            status,
            at_ms: 1_700_000_000_000,
            reason: None,
            answer: None,
            pause: Some(PauseRecord {
                reason: "the search ran long".to_owned(),
                subject: "search".to_owned(),
                path: "run".to_owned(),
                call: None,
            }),
            truncated: Vec::new(),
            delivery: Delivery::default(),
            tenant: None,
        }
    }

    #[test]
    fn a_pause_says_how_to_answer_it() {
        let links = Links::new("http://127.0.0.1:7878/", true);
        let body = payload(&notice(RunStatus::WaitingHuman), &links);
        assert_eq!(body["type"], "run.waiting_human");
        assert_eq!(body["timestamp"], "2023-11-14T22:13:20.000Z");
        let data = &body["data"];
        assert_eq!(data["pause"]["reason"], "the search ran long");
        assert_eq!(
            data["respond"]["resume"]["url"],
            "http://127.0.0.1:7878/runs/run-1/resume"
        );
        assert_eq!(data["respond"]["resume"]["method"], "POST");
        assert_eq!(
            data["respond"]["commands"][0],
            "leasehold runs resume run-1 --server http://127.0.0.1:7878 --guidance 'what to do next'"
        );
        assert!(data["respond"]["authorization"].is_string());
        assert_eq!(message_id(&notice(RunStatus::WaitingHuman)), "msg_run-1_7");
    }

    #[test]
    fn an_end_has_no_answer_to_give() {
        let links = Links::new("http://h", false);
        let body = payload(&notice(RunStatus::Completed), &links);
        assert_eq!(body["type"], "run.completed");
        assert!(body["data"].get("respond").is_none());
        assert_eq!(body["data"]["links"]["run"], "http://h/runs/run-1");
    }

    #[test]
    fn links_carry_no_credentials_of_the_public_url() {
        let links = Links::new("https://ops:pa55@leasehold.example.com/", true);
        assert_eq!(links.base, "https://leasehold.example.com");
        let body = payload(&notice(RunStatus::WaitingHuman), &links);
        assert!(!body.to_string().contains("pa55"), "{body}");
    }

    #[test]
    fn words_that_are_not_plain_are_quoted_for_a_shell() {
        assert_eq!(shell_word("run-1"), "run-1");
        assert_eq!(shell_word("it's $x"), r"'it'\''s $x'");
        assert_eq!(shell_word(""), "''");
    }
}
