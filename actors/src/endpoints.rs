//! A provider outage is a pause, not a storm of restarts.
//!
//! The executor watches each endpoint its runs call (today: each model
//! endpoint, by what its client calls it, `model M at URL`). A call that
//! cannot reach it — refused, cut off, a 5xx — counts against it; any call
//! it answers clears the count. After [`Outages::failures`] such calls in
//! a row, from any of the executor's runs, the endpoint is **down**: a run
//! whose call to it fails then pauses (`waiting_human`, subject
//! `endpoint`, its clocks stopped, the reason naming the endpoint and what
//! it last said) instead of spending its restarts, and the executor probes
//! the endpoint with backoff — a one-token request — until it answers.
//! Then it is **up** again and the runs paused on it resume by themselves,
//! their calls made again: [`Outages::resume_wave`] at once, then two more
//! for each call it answers, so that a provider coming back is not met by
//! every run's call at once. A person may mark an endpoint down by hand (the
//! runs' next calls to it pause before they are made, and nothing probes
//! it) or up (its runs resume at once); a person may also resume one run
//! by hand, which tries its call once more.
//!
//! What an endpoint's health is, is this executor's view: each executor of
//! a shared store keeps its own, and resumes the runs it paused.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::ports::ModelClient;

/// Tells a run waiting on an endpoint that it answers again.
pub(crate) type Resume = Box<dyn FnOnce() + Send>;

/// When an endpoint is down, and how it is probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outages {
    /// How many calls in a row, across the executor's runs, that cannot
    /// reach an endpoint mark it down (default 5; at least 1).
    pub failures: u32,
    /// The first wait before a down endpoint is probed (default 1 s); each
    /// probe that fails doubles it, up to [`Self::probe_max`].
    pub probe_initial: Duration,
    /// The longest wait between two probes (default 30 s).
    pub probe_max: Duration,
    /// How many of the runs waiting on an endpoint resume at once when it
    /// is up again (default 8; at least 1): each call it answers after
    /// that resumes two more, so that a provider coming back is not met by
    /// every run at once.
    pub resume_wave: usize,
}

impl Default for Outages {
    fn default() -> Self {
        Self {
            failures: 5,
            probe_initial: Duration::from_secs(1),
            probe_max: Duration::from_secs(30),
            resume_wave: 8,
        }
    }
}

/// Who marked an endpoint down.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case", tag = "by", content = "name")]
pub enum DownBy {
    /// Its calls failed [`Outages::failures`] times in a row.
    Failures,
    /// A person, by name.
    Person(String),
}

/// An endpoint as the executor sees it, for `GET /endpoints`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EndpointView {
    /// What its client calls it.
    pub endpoint: String,
    /// Whether its runs call it.
    pub up: bool,
    /// Who marked it down, while it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub down_by: Option<DownBy>,
    /// How long it has been down, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub down_for_ms: Option<u64>,
    /// Its calls that failed in a row, since the last it answered.
    pub failures_in_a_row: u32,
    /// What the last failed call said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// How many probes failed since it went down.
    pub probes: u32,
    /// When the next probe goes, in milliseconds from now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_probe_in_ms: Option<u64>,
    /// The runs paused until it answers.
    pub runs_waiting: Vec<String>,
}

#[derive(Default)]
struct Endpoint {
    down: Option<Down>,
    failures: u32,
    last_error: Option<String>,
    /// The runs paused on it, each with what tells it to resume.
    waiting: BTreeMap<String, Resume>,
    /// How many of them were told to resume since it was last up.
    released: u64,
}

struct Down {
    by: DownBy,
    since: Instant,
    probes: u32,
    next_probe: Option<Instant>,
    /// Ends the probe when the endpoint is marked up.
    stop: tokio_util::sync::CancellationToken,
}

/// The health of the endpoints an executor's runs call.
pub struct Endpoints {
    config: Outages,
    endpoints: Mutex<BTreeMap<String, Endpoint>>,
    /// Told each time an endpoint goes down or up.
    changed: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Why a run should pause for its endpoint: its reason.
pub(crate) type DownReason = String;

impl Endpoints {
    /// The endpoints of an executor that marks one down as `config` says.
    pub fn new(config: Outages) -> Arc<Self> {
        Arc::new(Self {
            config: Outages {
                failures: config.failures.max(1),
                resume_wave: config.resume_wave.max(1),
                ..config
            },
            endpoints: Mutex::new(BTreeMap::new()),
            changed: tokio::sync::watch::Sender::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Endpoint>> {
        self.endpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn told(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// A receiver told each time an endpoint goes down or up.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Lists `endpoint` (up) before any call to it: the executor's own
    /// model, which a person may mark down before it fails.
    pub fn know(&self, endpoint: &str) {
        self.lock().entry(endpoint.to_owned()).or_default();
    }

    /// A call to `endpoint` was answered (or refused: either way it
    /// answered): two more of the runs waiting on it resume.
    pub(crate) fn answered(&self, endpoint: &str) {
        let mut endpoints = self.lock();
        if let Some(state) = endpoints.get_mut(endpoint)
            && state.down.is_none()
        {
            state.failures = 0;
            if !state.waiting.is_empty() {
                release(state, 2);
            }
        }
    }

    /// A call to `endpoint` could not reach it, saying `error`; `model`
    /// probes it if this marks it down. The reason a run should pause when
    /// the endpoint is (now) down.
    pub(crate) fn unreachable(
        self: &Arc<Self>,
        endpoint: &str,
        error: &str,
        model: &Arc<dyn ModelClient>,
    ) -> Option<DownReason> {
        let mut endpoints = self.lock();
        let state = endpoints.entry(endpoint.to_owned()).or_default();
        state.failures = state.failures.saturating_add(1);
        state.last_error = Some(error.to_owned());
        if state.down.is_none() && state.failures >= self.config.failures {
            let stop = tokio_util::sync::CancellationToken::new();
            state.down = Some(Down {
                by: DownBy::Failures,
                since: Instant::now(),
                probes: 0,
                next_probe: Some(Instant::now() + self.config.probe_initial),
                stop: stop.clone(),
            });
            tracing::warn!(%endpoint, failures = state.failures, %error, "endpoint down: its runs pause until it answers");
            tokio::spawn(Arc::clone(self).probe(endpoint.to_owned(), Arc::clone(model), stop));
            drop(endpoints);
            self.told();
            return self.down_reason(endpoint);
        }
        drop(endpoints);
        self.down_reason(endpoint)
    }

    /// Why a run pauses for `endpoint`, while it is down.
    pub(crate) fn down_reason(&self, endpoint: &str) -> Option<DownReason> {
        let endpoints = self.lock();
        let state = endpoints.get(endpoint)?;
        let down = state.down.as_ref()?;
        let last = state
            .last_error
            .as_deref()
            .map(|e| {
                format!(
                    "; it last said: {}",
                    crate::event::cut_note(e.to_owned(), 400)
                )
            })
            .unwrap_or_default();
        Some(match &down.by {
            DownBy::Failures => format!(
                "{endpoint} is down ({} calls in a row could not reach it{last}); the run waits \
                 with its clocks stopped and resumes by itself when the endpoint answers again",
                state.failures
            ),
            DownBy::Person(by) => format!(
                "{by} marked {endpoint} down; the run waits with its clocks stopped and resumes \
                 by itself when the endpoint is marked up"
            ),
        })
    }

    /// Whether a person marked `endpoint` down: a call to it waits instead
    /// of being made.
    pub(crate) fn marked_down(&self, endpoint: &str) -> Option<DownReason> {
        let by_person = self
            .lock()
            .get(endpoint)
            .and_then(|state| state.down.as_ref())
            .is_some_and(|down| matches!(down.by, DownBy::Person(_)));
        if by_person {
            self.down_reason(endpoint)
        } else {
            None
        }
    }

    /// Run `run_id` waits for `endpoint`, told by `resume` when it
    /// answers; told at once if it is up already.
    pub(crate) fn wait(&self, endpoint: &str, run_id: &str, resume: Resume) {
        let mut endpoints = self.lock();
        let state = endpoints.entry(endpoint.to_owned()).or_default();
        if state.down.is_none() {
            drop(endpoints);
            resume();
            return;
        }
        state.waiting.insert(run_id.to_owned(), resume);
    }

    /// Run `run_id` no longer waits for anything (resumed by a person, or
    /// ended).
    pub(crate) fn forget_run(&self, run_id: &str) {
        for state in self.lock().values_mut() {
            state.waiting.remove(run_id);
        }
    }

    /// Marks `endpoint` down by hand: its runs' next calls to it wait,
    /// paused, until it is marked up. Nothing probes it.
    pub fn mark_down(&self, endpoint: &str, by: &str) {
        let mut endpoints = self.lock();
        let state = endpoints.entry(endpoint.to_owned()).or_default();
        if let Some(down) = state.down.take() {
            down.stop.cancel();
        }
        state.down = Some(Down {
            by: DownBy::Person(by.to_owned()),
            since: Instant::now(),
            probes: 0,
            next_probe: None,
            stop: tokio_util::sync::CancellationToken::new(),
        });
        drop(endpoints);
        tracing::warn!(%endpoint, %by, "endpoint marked down by hand");
        self.told();
    }

    /// Marks `endpoint` up, by hand or after a probe it answered: the runs
    /// paused on it resume, [`Outages::resume_wave`] at once and two more
    /// for each call it answers. How many waited.
    pub fn mark_up(self: &Arc<Self>, endpoint: &str) -> usize {
        let waiting = {
            let mut endpoints = self.lock();
            let Some(state) = endpoints.get_mut(endpoint) else {
                return 0;
            };
            if let Some(down) = state.down.take() {
                down.stop.cancel();
            }
            state.failures = 0;
            state.released = 0;
            let waiting = state.waiting.len();
            release(state, self.config.resume_wave);
            waiting
        };
        tracing::info!(%endpoint, runs = waiting, "endpoint up: its runs resume");
        if waiting > self.config.resume_wave {
            tokio::spawn(Arc::clone(self).keep_resuming(endpoint.to_owned()));
        }
        self.told();
        waiting
    }

    /// Resumes a wave of the runs still waiting on `endpoint` whenever no
    /// answered call resumed one for a probe's longest wait: the runs go
    /// on even if the calls that would free them never end. Stops when
    /// none waits, or the endpoint is down again.
    async fn keep_resuming(self: Arc<Self>, endpoint: String) {
        let mut seen = 0;
        loop {
            tokio::time::sleep(self.config.probe_max).await;
            let mut endpoints = self.lock();
            let Some(state) = endpoints.get_mut(&endpoint) else {
                return;
            };
            if state.down.is_some() || state.waiting.is_empty() {
                return;
            }
            if state.released == seen {
                release(state, self.config.resume_wave);
            }
            seen = state.released;
        }
    }

    /// Each endpoint known: the executor's model, and any a call failed to
    /// reach.
    pub fn list(&self) -> Vec<EndpointView> {
        let now = Instant::now();
        self.lock()
            .iter()
            .map(|(endpoint, state)| EndpointView {
                endpoint: endpoint.clone(),
                up: state.down.is_none(),
                down_by: state.down.as_ref().map(|d| d.by.clone()),
                down_for_ms: state.down.as_ref().map(|d| millis(now - d.since)),
                failures_in_a_row: state.failures,
                last_error: state.last_error.clone(),
                probes: state.down.as_ref().map_or(0, |d| d.probes),
                next_probe_in_ms: state
                    .down
                    .as_ref()
                    .and_then(|d| d.next_probe)
                    .map(|at| millis(at.saturating_duration_since(now))),
                runs_waiting: state.waiting.keys().cloned().collect(),
            })
            .collect()
    }

    /// Probes `endpoint` with backoff until it answers or `stop`.
    async fn probe(
        self: Arc<Self>,
        endpoint: String,
        model: Arc<dyn ModelClient>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let mut wait = self.config.probe_initial;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            // A probe of a server that hangs is bounded: it is the
            // executor's question, not a run's work.
            let bound = self.config.probe_max.max(Duration::from_secs(10));
            let answered = tokio::select! {
                () = stop.cancelled() => return,
                answered = tokio::time::timeout(bound, model.probe()) => answered
                    .map_err(|_| format!("no answer to a probe within {bound:?}"))
                    .and_then(|answered| answered.map_err(|error| error.to_string())),
            };
            match answered {
                Ok(()) => {
                    self.mark_up(&endpoint);
                    return;
                }
                Err(error) => {
                    wait = (wait * 2).min(self.config.probe_max);
                    let mut endpoints = self.lock();
                    if let Some(state) = endpoints.get_mut(&endpoint) {
                        state.last_error = Some(error);
                        if let Some(down) = &mut state.down {
                            down.probes += 1;
                            down.next_probe = Some(Instant::now() + wait);
                        }
                    }
                }
            }
        }
    }
}

/// Tells `count` of the runs waiting on an endpoint (the first by id) to
/// resume.
fn release(state: &mut Endpoint, count: usize) {
    for _ in 0..count {
        let Some((_, resume)) = state.waiting.pop_first() else {
            return;
        };
        state.released += 1;
        resume();
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
