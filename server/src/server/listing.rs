//! Paging `GET /runs`: its query parameters, read into a [`RunQuery`] with
//! a refusal that names the parameter, the page it answers, and the
//! [`ListingBudget`] that bounds what every listing in flight holds.
//!
//! The command line reads its `runs list` flags with the same parsers, so
//! that a status or an instant means the same thing over HTTP and on the
//! data directory.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use leasehold::{RunQuery, RunStatus};
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ApiError;
use super::view::RunView;

/// How many runs a page holds when the request does not say.
pub const DEFAULT_PAGE_LIMIT: usize = 50;

/// The most runs one page holds: a larger `limit` is cut to it.
pub const MAX_PAGE_LIMIT: usize = 500;

/// The most run summaries every `GET /runs` in flight holds at once: four
/// pages of [`MAX_PAGE_LIMIT`]. A summary is at most a few kilobytes (no
/// flow, each text cut to [`SUMMARY_CHARS`](leasehold::SUMMARY_CHARS)
/// characters), so listings hold a few megabytes at most, however many
/// are asked for at once and however large the runs' flows are.
pub const MAX_LISTED_IN_FLIGHT: usize = 4 * MAX_PAGE_LIMIT;

/// What bounds the memory of listings: a request takes as many permits as
/// its page's `limit` before it reads the store, and gives them back once
/// its answer has been sent (or its client went away). A request beyond
/// the bound waits its turn (the semaphore is fair: first come, first
/// served); it holds nothing but its query while it waits.
///
/// It also counts the summaries held, from the store's answer to the end
/// of the response, and the most ever held at once: what a test reads to
/// see the bound kept.
#[derive(Debug)]
pub struct ListingBudget {
    permits: Arc<Semaphore>,
    held: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    waiting: AtomicUsize,
}

impl Default for ListingBudget {
    fn default() -> Self {
        Self::new(MAX_LISTED_IN_FLIGHT)
    }
}

impl ListingBudget {
    /// A budget of `max` summaries in flight (at least one page's worth).
    pub fn new(max: usize) -> Self {
        let max = max.clamp(MAX_PAGE_LIMIT, Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(max)),
            held: Arc::new(AtomicUsize::new(0)),
            peak: Arc::new(AtomicUsize::new(0)),
            waiting: AtomicUsize::new(0),
        }
    }

    /// How many listings wait for room now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// The most summaries held at once since the server started.
    pub fn peak_held(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Waits for room for a page of `limit` runs.
    pub(super) async fn admit(&self, limit: usize) -> ListingPermit {
        let weight = u32::try_from(limit.clamp(1, MAX_PAGE_LIMIT)).unwrap_or(u32::MAX);
        self.waiting.fetch_add(1, Ordering::SeqCst);
        // The semaphore is never closed.
        let permit = Arc::clone(&self.permits)
            .acquire_many_owned(weight)
            .await
            .ok();
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        ListingPermit {
            _permit: permit,
            held: Arc::clone(&self.held),
            peak: Arc::clone(&self.peak),
            counted: 0,
        }
    }
}

/// A listing's room in the [`ListingBudget`], given back when dropped.
pub(super) struct ListingPermit {
    _permit: Option<OwnedSemaphorePermit>,
    held: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    counted: usize,
}

impl ListingPermit {
    /// The page read holds `runs` summaries until the permit is dropped.
    pub(super) fn holding(&mut self, runs: usize) {
        self.counted = self.counted.saturating_add(runs);
        let now = self
            .held
            .fetch_add(runs, Ordering::Relaxed)
            .saturating_add(runs);
        self.peak.fetch_max(now, Ordering::Relaxed);
    }
}

impl Drop for ListingPermit {
    fn drop(&mut self) {
        self.held.fetch_sub(self.counted, Ordering::Relaxed);
    }
}

/// A page of runs as `GET /runs` answers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunsPage {
    /// The runs, newest first.
    pub runs: Vec<RunView>,
    /// The cursor of the next page (send it back as `after`), or `null`
    /// when there is none.
    #[serde(default)]
    pub next: Option<String>,
}

/// `GET /runs`'s parameters as sent: text, so that a refusal can name the
/// one that is wrong.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ListParams {
    /// The cursor of the page before (its `next`).
    after: Option<String>,
    /// How many runs a page holds: 1 to 500 (larger is cut to 500), 50 by
    /// default.
    limit: Option<String>,
    /// Only runs in this status (`running`, `waiting_human`, …).
    status: Option<String>,
    /// Only runs of this flow.
    flow: Option<String>,
    /// Only runs created at or after this instant (RFC 3339, or Unix ms).
    since: Option<String>,
    /// Only runs created before this instant (RFC 3339, or Unix ms).
    until: Option<String>,
}

impl ListParams {
    /// The store query these parameters ask for.
    pub(super) fn query(self) -> Result<RunQuery, ApiError> {
        let refuse = |name: &str, why: String| {
            ApiError::bad_request(format!("the query parameter `{name}` is wrong: {why}"))
        };
        let limit = match self.limit {
            None => DEFAULT_PAGE_LIMIT,
            Some(text) => parse_limit(&text).map_err(|why| refuse("limit", why))?,
        };
        let after = match self.after {
            Some(after) if after.is_empty() || after.len() > MAX_CURSOR_BYTES => {
                return Err(refuse(
                    "after",
                    format!(
                        "expected the `next` of a previous page (1 to {MAX_CURSOR_BYTES} bytes)"
                    ),
                ));
            }
            after => after,
        };
        let instant = |name: &str, text: Option<String>| {
            text.map(|text| parse_instant(&text).map_err(|why| refuse(name, why)))
                .transpose()
        };
        Ok(RunQuery {
            after,
            limit,
            status: self
                .status
                .map(|text| parse_status(&text).map_err(|why| refuse("status", why)))
                .transpose()?,
            flow: self.flow,
            created_from_ms: instant("since", self.since)?,
            created_before_ms: instant("until", self.until)?,
            tenant: None,
        })
    }
}

/// The longest cursor taken: a run id is far shorter.
const MAX_CURSOR_BYTES: usize = 512;

/// A page size: a whole number from 1, cut to [`MAX_PAGE_LIMIT`].
pub fn parse_limit(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) | Err(_) => Err(format!(
            "`{text}` is not a page size: expected a whole number from 1 (at most \
             {MAX_PAGE_LIMIT} are sent)"
        )),
        Ok(limit) => Ok(limit.min(MAX_PAGE_LIMIT)),
    }
}

/// A run status by its name (`waiting_human`).
pub fn parse_status(text: &str) -> Result<RunStatus, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).map_err(|_| {
        format!(
            "not a run status: {text} (queued, running, waiting_human, reconciliation_required, \
             orphaned, completed, failed, cancelled)"
        )
    })
}

/// An instant as Unix milliseconds (`1767225600000`) or RFC 3339 in UTC
/// (`2026-01-01T00:00:00Z`, fractions of a second allowed), in Unix ms.
pub fn parse_instant(text: &str) -> Result<u64, String> {
    let expected = "expected Unix milliseconds (1767225600000) or an RFC 3339 time in UTC \
                    (2026-01-01T00:00:00Z)";
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map_err(|_| format!("`{text}` is too large: {expected}"));
    }
    let at = humantime::parse_rfc3339_weak(text)
        .map_err(|e| format!("`{text}` is not a time ({e}): {expected}"))?;
    let since_epoch = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("`{text}` is before 1970: {expected}"))?;
    u64::try_from(since_epoch.as_millis()).map_err(|_| format!("`{text}` is too late: {expected}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_read_as_unix_ms_or_rfc_3339() {
        assert_eq!(parse_instant("1767225600000"), Ok(1_767_225_600_000));
        assert_eq!(parse_instant("2026-01-01T00:00:00Z"), Ok(1_767_225_600_000));
        assert_eq!(
            parse_instant("2026-01-01T00:00:00.250Z"),
            Ok(1_767_225_600_250)
        );
        for bad in ["", "yesterday", "-5", "99999999999999999999999"] {
            assert!(parse_instant(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn limits_are_whole_numbers_from_one_cut_to_the_cap() {
        assert_eq!(parse_limit("7"), Ok(7));
        assert_eq!(parse_limit("100000"), Ok(MAX_PAGE_LIMIT));
        assert!(parse_limit("0").is_err());
        assert!(parse_limit("ten").is_err());
    }
}
