//! Secrets never leave the process.
//!
//! A tool server's or a model's declaration may hold credentials: a URL's
//! user-info (`user:password@`), its query values (`?token=…`) and fragment,
//! a command argument marked `{ secret = "…" }` or following a flag whose
//! name says it is one (`--token X`, `--password=X`, `API_KEY=X`), an `env`
//! value. The process uses them as written; everything it shows — the API,
//! events and failure reasons in the store, `leasehold config`, the log —
//! shows them hidden:
//!
//! ```
//! use leasehold::secret::{redact_url, Secrets};
//!
//! let url = "http://user:hunter2@127.0.0.1:9/mcp?token=s3cret&v=2";
//! assert_eq!(redact_url(url), "http://user:***@127.0.0.1:9/mcp?token=***&v=***");
//! let secrets = Secrets::of_url(url);
//! // An error that names the URL, or repeats one of its secrets alone.
//! let shown = secrets.scrub(&format!("error sending request for url ({url}): s3cret"));
//! assert_eq!(shown, "error sending request for url (http://user:***@127.0.0.1:9/mcp?token=***&v=***): ***");
//! ```
//!
//! Two tools, used together wherever text leaves the process:
//!
//! * **Shown forms** of what is declared: [`redact_url`],
//!   [`redact_command`], [`redact_flow`]. They hide by structure, so they
//!   hide secrets of any length.
//! * **[`Secrets::scrub`]** for free text that may quote them, above all an
//!   error from the HTTP or MCP library: every URL in the text is shown
//!   redacted, then each known secret value is replaced by `***`. A value
//!   shorter than [`MIN_SCRUBBED_CHARS`] is not searched for in free text
//!   (it would match everywhere: an exit status, a port); the shown forms
//!   still hide it.
//!
//! The log is scrubbed too: the secrets of every server a process builds a
//! client for are remembered ([`hide_in_logs`], at most
//! [`MAX_LOGGED_SECRETS`]), and the binary's log writer passes each line
//! through [`scrub_log`], which also redacts every URL in it — a library's
//! own log line that quotes a request's URL included.
//!
//! A URL's path is shown as it is: a credential belongs in its user-info or
//! its query (or in an `env` value, or a secret argument).

use std::borrow::Cow;
use std::collections::{BTreeSet, VecDeque};
use std::sync::{Mutex, PoisonError};

use leasehold_actors::{CommandArg, ToolServer};
use percent_encoding::percent_decode_str;

/// What a hidden value is shown as.
pub const HIDDEN: &str = "***";

/// The shortest secret value searched for in free text.
pub const MIN_SCRUBBED_CHARS: usize = 4;

/// How many secret values the log scrubber remembers; the oldest are
/// forgotten first (a server that allows flow tools sees new ones with
/// every posted flow).
pub const MAX_LOGGED_SECRETS: usize = 1024;

/// Words that, in a flag's or a variable's name, mark the value that goes
/// with it as a secret: `--token X`, `--api-key=X`, `DB_PASSWORD=X`.
const SECRET_NAME_WORDS: &[&str] = &[
    "token",
    "secret",
    "passw",
    "pwd",
    "key",
    "auth",
    "credential",
    "cookie",
    "session",
];

/// PostgreSQL connection parameters that are settings, not credentials:
/// shown in a `postgres://` URL, where an operator needs them to tell why a
/// connection failed (`sslmode=verify-full`). Every other query value, of
/// any URL, is hidden.
const SHOWN_POSTGRES_PARAMETERS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "connect_timeout",
    "application_name",
    "target_session_attrs",
];

/// `url` with its credentials hidden: the password of its user-info (the
/// user alone when there is no password, as in `https://TOKEN@host`), every
/// query value (but a `postgres://` URL's settings such as `sslmode`) and
/// its fragment. Text that is not a URL is shown as `(not a URL)`.
pub fn redact_url(url: &str) -> String {
    match UrlParts::of(url) {
        Some(parts) => parts.redacted(),
        None => "(not a URL)".to_owned(),
    }
}

/// `url` without the `user:password@` of its authority: a link shown to
/// people, who reach the server with credentials of their own.
pub(crate) fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// `text` with every URL in it (`scheme://…`, up to a space, a quote, a
/// bracket or a `)`) shown as [`redact_url`] shows it.
pub fn redact_urls_in(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((start, end)) = next_url(rest) {
        out.push_str(&rest[..start]);
        let url = &rest[start..end];
        match UrlParts::of(url) {
            Some(parts) => out.push_str(&parts.redacted()),
            None => out.push_str(url),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// A command line as shown: each argument marked secret, and each value
/// that follows a secret-named flag (`--token X`, `--token=X`, `TOKEN=X`),
/// as `***`; URLs in arguments redacted.
pub fn redact_command(command: &[CommandArg]) -> Vec<String> {
    shown_command(command).0
}

/// The shown form of `command` and the values it hides.
fn shown_command(command: &[CommandArg]) -> (Vec<String>, Vec<String>) {
    let mut shown = Vec::with_capacity(command.len());
    let mut hidden = Vec::new();
    let mut next_is_secret = false;
    for (i, arg) in command.iter().enumerate() {
        let value = arg.value();
        if arg.is_secret() || next_is_secret {
            next_is_secret = false;
            shown.push(HIDDEN.to_owned());
            hidden.push(value.to_owned());
            continue;
        }
        // The program is shown as it is (a path, never a credential).
        if i == 0 {
            shown.push(value.to_owned());
            continue;
        }
        if let Some((name, secret)) = value.split_once('=')
            && !name.contains("://")
            && secret_name(name)
        {
            shown.push(format!("{name}={HIDDEN}"));
            hidden.push(secret.to_owned());
            continue;
        }
        if value.starts_with('-') && secret_name(value) {
            next_is_secret = true;
        }
        hidden.extend(urls_in(value).flat_map(url_secrets));
        shown.push(redact_urls_in(value).into_owned());
    }
    (shown, hidden)
}

/// Whether a flag's or a variable's name says its value is a secret.
fn secret_name(name: &str) -> bool {
    let name = name.trim_start_matches('-').to_ascii_lowercase();
    name == "pass" || SECRET_NAME_WORDS.iter().any(|word| name.contains(word))
}

/// A flow (as JSON) as the API and `runs show` show it: each tool server's
/// `url` redacted, its `command` shown by [`redact_command`] (a secret
/// argument keeps its shape, `{"secret": "***"}`), its `env` values as
/// `(set)`.
pub fn redact_flow(mut flow: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let Some(tools) = flow.get_mut("tools").and_then(Value::as_array_mut) else {
        return flow;
    };
    for server in tools {
        let Some(server) = server.as_object_mut() else {
            continue;
        };
        if let Some(Value::String(url)) = server.get_mut("url") {
            *url = redact_url(url);
        }
        if let Some(command) = server.get_mut("command") {
            let parsed: Option<Vec<CommandArg>> = serde_json::from_value(command.clone()).ok();
            *command = match parsed {
                Some(args) => Value::Array(
                    redact_command(&args)
                        .into_iter()
                        .zip(&args)
                        .map(|(shown, arg)| {
                            if arg.is_secret() {
                                serde_json::json!({ "secret": HIDDEN })
                            } else {
                                Value::String(shown)
                            }
                        })
                        .collect(),
                ),
                // Not a command line at all: nothing of it is shown.
                None => Value::String(HIDDEN.to_owned()),
            };
        }
        if let Some(env) = server.get_mut("env").and_then(Value::as_object_mut) {
            for value in env.values_mut() {
                *value = Value::from("(set)");
            }
        }
    }
    flow
}

/// The secret values known to one part of the process (a tool server, a
/// model endpoint), to hide from free text that may quote them.
#[derive(Clone, Debug, Default)]
pub struct Secrets {
    values: BTreeSet<String>,
}

impl Secrets {
    /// No known secret: [`scrub`](Self::scrub) still redacts URLs.
    pub fn new() -> Self {
        Self::default()
    }

    /// The secrets of a tool server's declaration: its URL's, its command
    /// line's (marked, flag-named, or in a URL argument) and its `env`
    /// values.
    pub fn of_server(server: &ToolServer) -> Self {
        let mut secrets = Self::new();
        if let Some(url) = &server.url {
            secrets.extend(url_secrets(url));
        }
        if let Some(command) = &server.command {
            secrets.extend(shown_command(command).1);
        }
        secrets.extend(server.env.values().cloned());
        secrets
    }

    /// The secrets in a URL: its user-info's password (or user), its query
    /// values and fragment.
    pub fn of_url(url: &str) -> Self {
        let mut secrets = Self::new();
        secrets.extend(url_secrets(url));
        secrets
    }

    /// Adds secret values (an API key, a token).
    pub fn extend(&mut self, values: impl IntoIterator<Item = String>) {
        self.values.extend(
            values
                .into_iter()
                .filter(|v| v.chars().count() >= MIN_SCRUBBED_CHARS),
        );
    }

    /// Whether no value is known.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` as it may be shown: every URL in it redacted, then every known
    /// secret value replaced by `***` (the longest first, so a secret that
    /// contains another goes whole).
    pub fn scrub(&self, text: &str) -> String {
        let mut out = redact_urls_in(text).into_owned();
        let mut values: Vec<&String> = self.values.iter().collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        for value in values {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), HIDDEN);
            }
        }
        out
    }
}

/// The secrets the log scrubber remembers, oldest first.
static LOGGED: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// Remembers `secrets` for [`scrub_log`].
pub fn hide_in_logs(secrets: &Secrets) {
    if secrets.is_empty() {
        return;
    }
    let mut logged = LOGGED.lock().unwrap_or_else(PoisonError::into_inner);
    for value in &secrets.values {
        if !logged.contains(value) {
            if logged.len() >= MAX_LOGGED_SECRETS {
                logged.pop_front();
            }
            logged.push_back(value.clone());
        }
    }
}

/// A log line as it may be written: every URL redacted and every secret
/// remembered by [`hide_in_logs`] hidden.
pub fn scrub_log(line: &str) -> String {
    let values: Vec<String> = LOGGED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .cloned()
        .collect();
    let secrets = Secrets {
        values: values.into_iter().collect(),
    };
    secrets.scrub(line)
}

/// The parts of a URL, as written (nothing normalised).
struct UrlParts<'a> {
    scheme: &'a str,
    user_info: Option<&'a str>,
    host: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> UrlParts<'a> {
    fn of(url: &'a str) -> Option<Self> {
        let (scheme, rest) = url.split_once("://")?;
        if scheme.is_empty() || !scheme.chars().all(is_scheme_char) {
            return None;
        }
        let (rest, fragment) = match rest.split_once('#') {
            Some((rest, fragment)) => (rest, Some(fragment)),
            None => (rest, None),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (user_info, host) = match authority.rsplit_once('@') {
            Some((user_info, host)) => (Some(user_info), host),
            None => (None, authority),
        };
        Some(Self {
            scheme,
            user_info,
            host,
            path,
            query,
            fragment,
        })
    }

    fn redacted(&self) -> String {
        let mut out = format!("{}://", self.scheme);
        if let Some(user_info) = self.user_info {
            match user_info.split_once(':') {
                Some((user, _)) => out.push_str(&format!("{user}:{HIDDEN}@")),
                None => out.push_str(&format!("{HIDDEN}@")),
            }
        }
        out.push_str(self.host);
        out.push_str(self.path);
        if let Some(query) = self.query {
            out.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if self.shows(name) => pair.to_owned(),
                    Some((name, _)) => format!("{name}={HIDDEN}"),
                    None if pair.is_empty() => String::new(),
                    None => HIDDEN.to_owned(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
        }
        if let Some(fragment) = self.fragment {
            out.push('#');
            if !fragment.is_empty() {
                out.push_str(HIDDEN);
            }
        }
        out
    }

    /// Whether the query parameter `name` is a setting shown as it is.
    fn shows(&self, name: &str) -> bool {
        self.scheme.starts_with("postgres") && SHOWN_POSTGRES_PARAMETERS.contains(&name)
    }

    /// The hidden values, as written and percent-decoded.
    fn secrets(&self) -> Vec<String> {
        let mut raw: Vec<&str> = Vec::new();
        if let Some(user_info) = self.user_info {
            raw.push(user_info.split_once(':').map_or(user_info, |(_, pw)| pw));
        }
        if let Some(query) = self.query {
            raw.extend(
                query
                    .split('&')
                    .filter_map(|pair| match pair.split_once('=') {
                        Some((name, _)) if self.shows(name) => None,
                        Some((_, value)) => Some(value),
                        None => Some(pair),
                    }),
            );
        }
        raw.extend(self.fragment);
        let mut out = Vec::new();
        for value in raw.into_iter().filter(|v| !v.is_empty()) {
            out.push(value.to_owned());
            let decoded = percent_decode_str(value).decode_utf8_lossy();
            if decoded != value {
                out.push(decoded.into_owned());
            }
            // A query value's `+` is a space once decoded as a form.
            if value.contains('+') {
                out.push(value.replace('+', " "));
            }
        }
        out
    }
}

fn url_secrets(url: &str) -> Vec<String> {
    UrlParts::of(url).map_or_else(Vec::new, |parts| parts.secrets())
}

fn is_scheme_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')
}

/// Where a URL ends in free text.
fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | ')' | ']' | '}' | ',')
}

/// The byte range of the first URL in `text`.
fn next_url(text: &str) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let at = from + found;
        let start = text[..at]
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_scheme_char(*c))
            .last()
            .map_or(at, |(i, _)| i);
        // A scheme starts with a letter.
        let start = text[start..at]
            .char_indices()
            .find(|(_, c)| c.is_ascii_alphabetic())
            .map_or(at, |(i, _)| start + i);
        let after = at + 3;
        let end = text[after..]
            .char_indices()
            .find(|(_, c)| ends_url(*c))
            .map_or(text.len(), |(i, _)| after + i);
        if start < at {
            return Some((start, end));
        }
        from = after;
    }
    None
}

/// The URLs in `text`.
fn urls_in(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let (start, end) = next_url(rest)?;
        let url = &rest[start..end];
        rest = &rest[end..];
        Some(url)
    })
}

mod at_rest;
pub(crate) use at_rest::ConfiguredToolSecrets;

#[cfg(test)]
mod tests;
