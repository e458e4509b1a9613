//! What a lease is started with: [`LeaseSpec`], and how it becomes the
//! lease's [`LeaseMeta`] once its terms are settled.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::terms::LeaseTerms;
use crate::duration::clamp_duration;
use crate::error::ConfigError;
use crate::nudge::NudgeQueue;
use crate::ports::TranscriptMessage;
use crate::vocabulary::lease::{LeaseConfig, LeaseId, LeaseKind, LeaseMeta, MIN_LEASE};

impl LeaseConfig {
    /// A spec for a `kind` operation doing `subject`, with this
    /// configuration's length and cap.
    pub fn spec(
        &self,
        kind: LeaseKind,
        subject: impl Into<String>,
    ) -> Result<LeaseSpec, ConfigError> {
        LeaseSpec::new(kind, subject, self.duration(kind))
            .map(|s| s.with_max_renewals(self.max_renewals))
    }
}

/// Everything a lease needs to know about the operation it watches. Built
/// with [`LeaseSpec::new`] and the `with_*` methods.
#[derive(Clone, Debug)]
pub struct LeaseSpec {
    pub(crate) kind: LeaseKind,
    pub(crate) subject: String,
    pub(crate) duration: Duration,
    pub(crate) max_renewals: u32,
    pub(crate) terms: Option<Arc<LeaseTerms>>,
    pub(crate) pace_key: Option<String>,
    pub(crate) endpoint: Option<String>,
    pub(crate) pace_mode: crate::pace::PaceMode,
    pub(crate) run_id: String,
    pub(crate) path: String,
    pub(crate) transcript_tail: Arc<[TranscriptMessage]>,
    pub(crate) nudges: Option<NudgeQueue>,
    pub(crate) parent: Option<CancellationToken>,
    /// The lease's id, when it was chosen before the lease is taken (so
    /// that the event saying the operation started can name it).
    pub(crate) id: Option<LeaseId>,
}

impl LeaseSpec {
    /// A lease of `duration` on a `kind` operation doing `subject`, with the
    /// default cap of 10 renewals. A zero duration is refused; one above
    /// [`MAX_DURATION`](crate::MAX_DURATION) is clamped to it, and one below
    /// [`MIN_LEASE`] (10 ms) is lengthened to it (configuration and flows
    /// refuse such durations before they get here, naming the key): the
    /// lease then expires, and the watchdog judges it, after 30 days or
    /// 10 ms. An expiry is never an error, so moving it only changes when
    /// the watchdog is asked, never what the work may do.
    pub fn new(
        kind: LeaseKind,
        subject: impl Into<String>,
        duration: Duration,
    ) -> Result<Self, ConfigError> {
        if duration.is_zero() {
            return Err(ConfigError::new("duration", "a duration above 0", "0"));
        }
        Ok(Self {
            kind,
            subject: subject.into(),
            duration: clamp_duration(duration).max(MIN_LEASE),
            max_renewals: LeaseConfig::default().max_renewals,
            terms: None,
            pace_key: None,
            endpoint: None,
            pace_mode: crate::pace::PaceMode::Learn,
            run_id: String::new(),
            path: String::new(),
            transcript_tail: Arc::from(Vec::new()),
            nudges: None,
            parent: None,
            id: None,
        })
    }

    /// Caps renewals: the expiry after the `max_renewals`-th renewal stops
    /// the operation. Over terms given with [`LeaseSpec::with_terms`], this
    /// cap wins.
    pub fn with_max_renewals(mut self, max_renewals: u32) -> Self {
        self.max_renewals = max_renewals;
        self.terms = self
            .terms
            .map(|terms| Arc::new(LeaseTerms::clone(&terms).with_max_renewals(max_renewals)));
        self
    }

    /// Judges this lease by `terms` — its policy, cap, ladder, evidence
    /// streak and thresholds — instead of its lease actor's terms for its
    /// kind. The engine gives each run's leases the terms it resolved for
    /// the run and kind.
    pub fn with_terms(mut self, terms: Arc<LeaseTerms>) -> Self {
        self.max_renewals = terms.max_renewals;
        self.terms = Some(terms);
        self
    }

    /// Names what the operation calls — a model at its endpoint, a tool, a
    /// kind of worker — so that its lease is seeded with the pace earlier
    /// calls of the same key showed, and teaches it back when it ends (see
    /// [`PaceBook`](crate::pace::PaceBook)).
    pub fn with_pace_key(mut self, key: Option<String>) -> Self {
        self.pace_key = key;
        self
    }

    /// Names the endpoint the operation calls — a model at its URL, a tool
    /// server — so that the executor knows how many of its calls are in
    /// flight there: a call that another is ahead of at its endpoint is not
    /// judged against the learned time to a first item, since the queue the
    /// executor filled, not the call, may be what keeps it waiting.
    pub fn with_endpoint(mut self, endpoint: Option<String>) -> Self {
        self.endpoint = endpoint;
        self
    }

    /// What the lease does with its key's learned pace (default `learn`).
    pub fn with_pace_mode(mut self, mode: crate::pace::PaceMode) -> Self {
        self.pace_mode = mode;
        self
    }

    /// Places the operation in a run's tree, for events.
    pub fn in_run(mut self, run_id: impl Into<String>, path: impl Into<String>) -> Self {
        self.run_id = run_id.into();
        self.path = path.into();
        self
    }

    /// The last messages of the loop's transcript, shown to the evaluator.
    pub fn with_transcript_tail(mut self, tail: impl Into<Arc<[TranscriptMessage]>>) -> Self {
        self.transcript_tail = tail.into();
        self
    }

    /// The loop's nudge queue, where a `NUDGE` verdict's message goes.
    pub fn with_nudges(mut self, nudges: NudgeQueue) -> Self {
        self.nudges = Some(nudges);
        self
    }

    /// Takes the lease as `id`, chosen beforehand.
    pub(crate) fn with_id(mut self, id: LeaseId) -> Self {
        self.id = Some(id);
        self
    }

    /// Derives the operation's cancellation from `parent`: cancelling the
    /// parent cancels the operation at once, without asking the watchdog.
    pub fn with_parent(mut self, parent: &CancellationToken) -> Self {
        self.parent = Some(parent.clone());
        self
    }
}

impl LeaseMeta {
    /// The identity of a lease built from `spec`, judged by `terms`.
    pub fn new(id: LeaseId, spec: &LeaseSpec, terms: &LeaseTerms) -> Self {
        Self {
            id,
            run_id: spec.run_id.clone(),
            path: spec.path.clone(),
            kind: spec.kind,
            subject: spec.subject.clone(),
            duration: spec.duration,
            max_renewals: terms.max_renewals,
            pace_key: spec.pace_key.clone(),
            endpoint: spec.endpoint.clone(),
            pace_mode: spec.pace_mode,
            transcript_tail: spec.transcript_tail.clone(),
        }
    }
}
