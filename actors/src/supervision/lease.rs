//! Leases: a timer beside each supervised operation, never around it.
//!
//! An operation started with [`Leases::supervise`] runs once, in a task of its
//! own whose cancellation derives from its parent's. Beside it, the lease
//! actor keeps a timer. When the timer expires nothing is cancelled: the
//! lease publishes a `wait` event, asks the watchdog, and acts on the verdict:
//!
//! - `RENEW` re-arms the timer on the **same** in-flight operation; work is
//!   never restarted by a renewal.
//! - `NUDGE` queues the verdict's message for the next step of the loop
//!   (`nudge_queued`), then renews.
//! - `INTERVENE` cancels the operation; its owner gets
//!   [`LeaseError::Intervened`], for the restart strategy.
//! - `ESCALATE` cancels the operation; its owner gets
//!   [`LeaseError::Escalated`], for the pause.
//!
//! Cancellation by the parent is honoured at once and never consults the
//! watchdog. After `max_renewals` renewals the next expiry stops the
//! operation with [`LeaseError::RenewalCapReached`]. Those are the only paths
//! from a timer to a failure: an expiry alone is never an error.
//!
//! While the run is paused no clock runs: timers are disarmed, evidence does
//! not age (the cell is told when the pause starts and ends), and a verdict
//! that arrives during the pause — or after it, for an expiry judged before
//! it — is dropped with a `verdict_dropped` event; on resume each lease gets
//! a full, fresh period.
//!
//! The lease counts its consecutive renewals on evidence alone and hands the
//! streak to the watchdog, which asks the evaluator anyway once it reaches
//! `evidence_renewals`: evidence earns renewals, not immunity. Any verdict
//! that is not an evidence renewal resets the streak — a renewal on
//! advancing progress too. Each renewal (but a load renewal) marks where
//! the operation's progress value stood, which the next expiry's must rise
//! above to renew on progress.
//!
//! Overload is not the work's fault. With a [`LoadRule`], an expiry is
//! first compared with the executor's lag — the larger of the load gauge's
//! reading and how late this lease's own timer fired: above the rule's
//! bound, the lease is renewed by `load` before any policy judges it, and
//! that renewal moves nothing — not the renewal count (so neither the cap
//! nor the ladder), not the evidence streak. Below the bound, the lag is
//! taken off the silence the evidence is judged on, since the operation's
//! last report may have been recorded that late. A hung operation is judged
//! as usual once the executor is on time again.
//!
//! One lease actor holds many leases — an engine's runs share a few lease
//! actors, each run's leases on one of them — each an entry in a map and in
//! one timer queue, so a live operation and its lease cost about a
//! kilobyte, not an actor each. A run pauses, resumes, drains and releases
//! its own leases alone ([`Leases::for_run`]). A timer fire carries the
//! generation it was armed with; a fire made stale by a renewal is ignored.

mod cancel;
mod error;
mod handle;
mod protocol;
pub(crate) mod spec;
mod task;
pub(crate) mod terms;
mod timer;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::duration::deadline_after;
use crate::event::EventKind;
use crate::load::LoadRule;
use crate::nudge::NudgeQueue;
use crate::pace::{PaceBook, PaceMode};
use crate::ports::EventSink;
use crate::supervision::evidence::{Evidence, TimedEnd, Wake};
use crate::supervision::policy::Judgement;
use crate::supervision::watchdog::{LeaseExpiry, StartError, VerdictReply, WatchdogMsg};
use crate::vocabulary::verdict::{DecidedBy, Decision, Verdict, VerdictRecord};
use terms::{LeaseTerms, TermsByKind};
use timer::TimerCmd;

pub(crate) use crate::vocabulary::lease::min_lease_expected;
pub use crate::vocabulary::lease::{LeaseConfig, LeaseId, LeaseKind, LeaseMeta, MIN_LEASE};
pub use error::LeaseError;
pub use handle::{LeaseHandle, Leases};
pub(crate) use protocol::LeaseEnd;
pub use protocol::{ByPerson, LeaseMsg, Registration};
pub use spec::LeaseSpec;
pub use terms::{
    DEFAULT_CEILING, DEFAULT_EVIDENCE_RENEWALS, DEFAULT_FREE_RENEWALS, DEFAULT_MAX_RENEWALS,
    DEFAULT_REPETITION_THRESHOLD,
};

/// The renewals a checkpoint at the cap adds to it: the doubt one cap
/// allows past its ladder (`max_renewals − free_renewals`, at least one).
/// No more, so that an operation that falls silent after a checkpoint is
/// still given up within the printed worst case, counted from its silence.
fn checkpoint_grant(terms: &LeaseTerms) -> u32 {
    terms
        .max_renewals
        .saturating_sub(terms.free_renewals)
        .max(1)
}

/// The lease actor.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LeaseActor;

/// The longest a verdict that stops an operation waits for its run's log
/// to hold it before it acts: a store that does not answer delays no
/// verdict longer.
pub(crate) const TAIL_WAIT: Duration = Duration::from_secs(5);

/// What a lease actor is started with.
pub(crate) struct LeaseActorArgs {
    /// Who judges expiries.
    pub watchdog: ActorRef<WatchdogMsg>,
    /// Where `wait`, `nudge_queued`, `intervened`, … go.
    pub events: Arc<dyn EventSink>,
    /// The terms of leases started without their own, per kind. Each
    /// expiry is judged here, by its lease's terms; only what the policy
    /// leaves to the evaluator goes to the watchdog.
    pub terms: TermsByKind,
    /// How many leases are held: up by one on each registration, down by
    /// one when a lease ends, shared by every lease actor of an engine.
    pub live: Arc<AtomicU64>,
    /// What an operation's progress reports may cost the log.
    pub limits: crate::event::EventLimits,
    /// The executor's load and the lag above which an expiry renews by
    /// `load`; none turns the rule off.
    pub load: Option<LoadRule>,
    /// What earlier calls of each pace key showed: seeds new leases, and
    /// learns from those that end by themselves.
    pub paces: PaceBook,
    /// The engine's event log, if the leases' runs are logged: a verdict
    /// that stops an operation acts once the run's log holds it.
    pub log: Option<tokio::sync::mpsc::UnboundedSender<crate::event_log::LogItem>>,
}

impl LeaseActor {
    /// Spawns a lease actor and returns its client.
    pub async fn start(args: LeaseActorArgs) -> Result<Leases, StartError> {
        let (events, limits, terms) = (args.events.clone(), args.limits, args.terms.clone());
        let actor = Self::spawn(args).await?;
        Ok(Leases::new(actor, events, limits, terms))
    }

    /// Spawns a lease actor, for many runs' leases: each run's
    /// [`Leases`] is made with its own terms ([`Leases::for_run`]).
    pub async fn spawn(args: LeaseActorArgs) -> Result<ActorRef<LeaseMsg>, StartError> {
        Actor::spawn(None, LeaseActor, args)
            .await
            .map(|(actor, _)| actor)
            .map_err(|e| StartError::Spawn(e.to_string()))
    }
}

/// The leases a person's act is on: one lease, or every operation's lease
/// of a run (of the actor's, with no run), or of one of its loops.
#[derive(Clone, Copy)]
struct Which<'a> {
    run: Option<&'a str>,
    lease: Option<LeaseId>,
    of_loop: Option<&'a str>,
}

/// The lease actor's state: its leases and its timer queue.
pub(crate) struct LeaseState {
    leases: crate::hash::Map<LeaseId, Entry>,
    timers: mpsc::UnboundedSender<TimerCmd>,
    watchdog: ActorRef<WatchdogMsg>,
    events: Arc<dyn EventSink>,
    /// Every clock stopped ([`LeaseMsg::Pause`]).
    paused: bool,
    /// The runs whose clocks are stopped ([`LeaseMsg::PauseRun`]), on an
    /// actor that holds many runs' leases.
    paused_runs: crate::hash::Set<String>,
    /// The leases each run holds here: what acts on one run's leases
    /// looks at those, not at every lease of the engine.
    held: crate::hash::Map<String, Vec<LeaseId>>,
    live: Arc<AtomicU64>,
    /// Who waits for the last lease to go — the actor's, or one run's
    /// ([`LeaseMsg::Drained`], [`LeaseMsg::DrainedRun`]).
    drained: Vec<(Option<Arc<str>>, oneshot::Sender<()>)>,
    load: Option<LoadRule>,
    paces: PaceBook,
    /// The engine's event log, if the runs are logged.
    log: Option<mpsc::UnboundedSender<crate::event_log::LogItem>>,
    /// This actor, for the evidence cells to wake it.
    myself: ActorRef<LeaseMsg>,
}

impl Drop for LeaseState {
    fn drop(&mut self) {
        // However the actor ends, the leases it still held are not live.
        let held = u64::try_from(self.leases.len()).unwrap_or(u64::MAX);
        self.live.fetch_sub(held, Ordering::AcqRel);
        for entry in self.leases.values() {
            if let Some(endpoint) = entry.meta.endpoint.as_deref() {
                self.paces.leave(endpoint);
            }
        }
    }
}

struct Entry {
    meta: Arc<LeaseMeta>,
    terms: Arc<LeaseTerms>,
    evidence: Evidence,
    token: CancellationToken,
    end: oneshot::Sender<LeaseEnd>,
    cut: Arc<std::sync::atomic::AtomicBool>,
    nudges: Option<NudgeQueue>,
    /// Whether another call was in flight at its endpoint when it started:
    /// its time to a first item is then no pace of the endpoint's.
    queued: bool,
    /// Renewals in all (load renewals aside).
    renewals: u32,
    /// Renewals in doubt in a row, the ones the cap counts (rule 13).
    counted: u32,
    /// The cap now: the terms' own, raised by each checkpoint.
    cap: u32,
    /// Checkpoints at the cap so far.
    checkpoints: u32,
    /// Items of evidence when its last expiry was judged: more since, and
    /// the evidence is still arriving.
    seen_items: u64,
    /// Consecutive renewals decided on evidence alone.
    evidence_renewals: u32,
    generation: u64,
    /// When the current period ends.
    deadline: tokio::time::Instant,
    /// When the timer was last armed to fire: how late it fired is the
    /// executor's lateness, seen by this lease.
    armed_for: tokio::time::Instant,
    /// The lateness of this lease's wakes since its last load renewal:
    /// time the runtime owes it.
    owed: Duration,
    /// Whether an expiry of this lease is with the watchdog: a lease is
    /// never judged twice at once, so never has two evaluator calls in
    /// flight.
    judging: bool,
    /// The term's strong-evidence reading of the expiry with the watchdog,
    /// kept for its verdict: the evaluator's answer is doubt whatever it
    /// says.
    pending: Option<PendingExpiry>,
}

/// What the lease actor keeps of an expiry it judged, until its verdict
/// acts: whether a renewal would be on strong evidence, and, for an expiry
/// judged on a silence, how many items had arrived by then.
#[derive(Clone, Copy, Debug)]
struct PendingExpiry {
    strong: bool,
    silence: Option<u64>,
}

impl Actor for LeaseActor {
    type Msg = LeaseMsg;
    type State = LeaseState;
    type Arguments = LeaseActorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let (timers, commands) = mpsc::unbounded_channel();
        tokio::spawn(timer::drive(commands, myself.clone()));
        Ok(LeaseState {
            leases: crate::hash::Map::default(),
            timers,
            watchdog: args.watchdog,
            events: args.events,
            paused: false,
            paused_runs: crate::hash::Set::default(),
            held: crate::hash::Map::default(),
            live: args.live,
            drained: Vec::new(),
            load: args.load,
            paces: args.paces,
            log: args.log,
            myself: myself.clone(),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // No operation outlives its supervision.
        for entry in state.leases.values() {
            entry.token.cancel();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            LeaseMsg::Register(registration) => state.register(*registration),
            LeaseMsg::Done { id, cancelled } => state.done(id, cancelled),
            LeaseMsg::Expired { id, generation } => state.expired(&myself, id, generation),
            LeaseMsg::Suspect(id) => state.suspect(&myself, id),
            LeaseMsg::Rearm(id) => state.arm(id),
            LeaseMsg::Pause => state.pause(None),
            LeaseMsg::Resume => state.resume(None),
            LeaseMsg::PauseRun(run) => state.pause(Some(&run)),
            LeaseMsg::ResumeRun(run) => state.resume(Some(&run)),
            LeaseMsg::ReleaseRun(run) => state.release(&run),
            LeaseMsg::DrainedRun(run, reply) => {
                state.drained.push((Some(run), reply));
                state.tell_drained();
            }
            LeaseMsg::Drained(reply) => {
                state.drained.push((None, reply));
                state.tell_drained();
            }
            LeaseMsg::Decided {
                id,
                generation,
                decision,
            } => state.decided(id, generation, decision),
            LeaseMsg::ByPerson(act) => {
                let ByPerson {
                    run,
                    lease,
                    of_loop,
                    act,
                    by,
                    reply,
                } = *act;
                let which = Which {
                    run: run.as_deref(),
                    lease,
                    of_loop: of_loop.as_deref(),
                };
                let _ = reply.send(state.by_person(&which, &act, &by));
            }
        }
        Ok(())
    }
}

impl LeaseState {
    fn register(&mut self, registration: Registration) {
        let Registration {
            meta,
            terms,
            deadline,
            evidence,
            token,
            end,
            cut,
            nudges,
        } = registration;
        // Another of this executor's calls ahead at the endpoint: its queue,
        // not this call, may keep the first item waiting.
        let queued = meta
            .endpoint
            .as_deref()
            .is_some_and(|endpoint| self.paces.enter(endpoint) > 0);
        // Only a pace that enough runs taught judges this run's call; a run
        // that reset its paces starts cold (rule 15).
        if let Some(key) = meta.pace_key.as_deref()
            && meta.pace_mode == PaceMode::Learn
            && let Some(pace) = self.paces.for_run(key, crate::pace::run_tag(&meta.run_id))
        {
            evidence.seed(&pace, queued);
            // What it was seeded with, for a replay to seed it the same
            // whatever the book learns later: the figures, not the window.
            self.emit(
                &meta,
                EventKind::LeaseSeeded {
                    lease_id: meta.id,
                    lease_kind: meta.kind,
                    pace_key: key.to_owned(),
                    endpoint: meta.endpoint.clone(),
                    pace: Box::new(crate::pace::Pace {
                        runs: Vec::new(),
                        ..pace
                    }),
                    queued,
                },
            );
        }
        if terms.policy.expires_early() {
            let (actor, id) = (self.myself.clone(), meta.id);
            evidence.on_suspicion(
                terms.repetition_threshold,
                Box::new(move |wake| {
                    let _ = actor.send_message(match wake {
                        Wake::Repetitive => LeaseMsg::Suspect(id),
                        Wake::History => LeaseMsg::Rearm(id),
                    });
                }),
            );
        }
        if self.is_paused(&meta.run_id) {
            evidence.pause(tokio::time::Instant::now());
        }
        self.live.fetch_add(1, Ordering::AcqRel);
        match self.held.get_mut(meta.run_id.as_str()) {
            Some(held) => held.push(meta.id),
            None => {
                self.held.insert(meta.run_id.clone(), vec![meta.id]);
            }
        }
        let id = meta.id;
        let terms_cap = terms.max_renewals;
        self.leases.insert(
            meta.id,
            Entry {
                meta,
                terms,
                evidence,
                token,
                end,
                cut,
                nudges,
                queued,
                renewals: 0,
                counted: 0,
                cap: terms_cap,
                checkpoints: 0,
                seen_items: 0,
                evidence_renewals: 0,
                generation: 0,
                deadline,
                armed_for: deadline,
                owed: Duration::ZERO,
                judging: false,
                pending: None,
            },
        );
        self.arm(id);
    }

    /// Whether the clocks of `run_id`'s leases are stopped.
    fn is_paused(&self, run_id: &str) -> bool {
        self.paused || (!self.paused_runs.is_empty() && self.paused_runs.contains(run_id))
    }

    /// Stops the clocks of every lease (`None`) or of one run's.
    fn pause(&mut self, run: Option<&str>) {
        match run {
            None if self.paused => return,
            None => self.paused = true,
            Some(run) => {
                let newly = self.paused_runs.insert(run.to_owned());
                if self.paused || !newly {
                    return;
                }
            }
        }
        let now = tokio::time::Instant::now();
        let ids = self.clocked(run);
        for id in ids {
            if let Some(entry) = self.leases.get(&id) {
                let _ = self.timers.send(TimerCmd::Disarm(id));
                entry.evidence.pause(now);
            }
        }
    }

    /// The leases a pause or a resume of `run` acts on: the run's own, or
    /// (`None`) every lease of a run not paused by itself.
    fn clocked(&self, run: Option<&str>) -> Vec<LeaseId> {
        match run {
            Some(run) => self.held.get(run).cloned().unwrap_or_default(),
            None => self
                .leases
                .iter()
                .filter(|(_, entry)| !self.paused_runs.contains(entry.meta.run_id.as_str()))
                .map(|(id, _)| *id)
                .collect(),
        }
    }

    /// Restarts the clocks of every lease (`None`) or of one run's.
    fn resume(&mut self, run: Option<&str>) {
        match run {
            None if !self.paused => return,
            None => self.paused = false,
            Some(run) => {
                if !self.paused_runs.remove(run) || self.paused {
                    return;
                }
            }
        }
        let now = tokio::time::Instant::now();
        let rearm = self.clocked(run);
        for id in rearm {
            let Some(entry) = self.leases.get_mut(&id) else {
                continue;
            };
            entry.evidence.resume(now);
            // A fresh generation: any fire or verdict from before the
            // pause is stale.
            entry.generation += 1;
            entry.deadline = deadline_after(now, entry.meta.duration);
            self.arm(id);
        }
    }

    /// Cancels every operation of `run`, which has stopped: what stopping
    /// an actor of its own did. Each lease goes when its operation's `Done`
    /// arrives.
    fn release(&mut self, run: &str) {
        self.paused_runs.remove(run);
        for id in self.held.get(run).into_iter().flatten() {
            if let Some(entry) = self.leases.get(id) {
                entry.token.cancel();
            }
        }
    }

    /// A person's act on `lease`, or on every operation's lease of `run`
    /// (of the actor's, with neither; workers' own leases aside): each is
    /// recorded as a verdict decided by
    /// the person. An extension moves its period's end later and counts
    /// toward no cap; it is refused while the run's clocks are stopped
    /// (its resume gives every lease a full, fresh period). A stop ends
    /// the operation as an `INTERVENE` does, paused or not.
    fn by_person(
        &mut self,
        which: &Which<'_>,
        act: &crate::ports::LeaseAct,
        by: &str,
    ) -> Result<usize, String> {
        let Which {
            run,
            lease,
            of_loop,
        } = *which;
        let ids: Vec<LeaseId> = match (run, lease) {
            (Some(run), Some(id)) => self
                .held
                .get(run)
                .filter(|held| held.contains(&id))
                .map(|_| vec![id])
                .unwrap_or_default(),
            (Some(run), None) => self.held.get(run).cloned().unwrap_or_default(),
            (None, Some(id)) => self
                .leases
                .contains_key(&id)
                .then_some(id)
                .into_iter()
                .collect(),
            (None, None) => self.leases.keys().copied().collect(),
        };
        // Every lease of a run means its operations: its model and tool
        // calls. A worker's own lease is left alone, since stopping it
        // would throw the worker's steps away; its calls are stopped.
        let ids: Vec<LeaseId> = ids
            .into_iter()
            .filter(|id| {
                self.leases.get(id).is_some_and(|entry| {
                    !entry.token.is_cancelled()
                        && (lease.is_some() || entry.meta.kind != LeaseKind::WorkerStep)
                        && of_loop.is_none_or(|path| {
                            entry
                                .meta
                                .path
                                .rsplit_once('/')
                                .is_some_and(|(parent, _)| parent == path)
                        })
                })
            })
            .collect();
        if let Some(id) = lease
            && ids.is_empty()
        {
            return Err(format!(
                "{id} is not in flight: its operation has ended, or it is no lease of this run"
            ));
        }
        let now = tokio::time::Instant::now();
        for &id in &ids {
            let Some(entry) = self.leases.get_mut(&id) else {
                continue;
            };
            let decision = match act {
                crate::ports::LeaseAct::Extend { by_ms } => {
                    if self.paused
                        || (!self.paused_runs.is_empty()
                            && self.paused_runs.contains(entry.meta.run_id.as_str()))
                    {
                        return Err(
                            "the run is paused: its clocks are stopped, and each of its leases \
                             gets a full, fresh period when it is resumed"
                                .to_owned(),
                        );
                    }
                    let extra = Duration::from_millis(*by_ms);
                    entry.generation += 1;
                    entry.deadline = deadline_after(entry.deadline.max(now), extra);
                    Decision::renew(
                        DecidedBy::Person,
                        format!("extended by {} by {by}", humantime::format_duration(extra)),
                    )
                }
                crate::ports::LeaseAct::Intervene { reason } => Decision {
                    verdict: Verdict::Intervene,
                    reason: format!("stopped by {by}: {reason}"),
                    nudge: None,
                    decided_by: DecidedBy::Person,
                },
            };
            let meta = entry.meta.clone();
            let evidence = entry.evidence.summary(now, &entry.terms.accrual);
            let record = VerdictRecord::new(&meta, entry.renewals, evidence, &decision, None);
            self.emit(&meta, EventKind::Verdict(Arc::new(record)));
            match decision.verdict {
                Verdict::Intervene => self.intervene(id, &meta, decision.reason),
                _ => self.arm(id),
            }
        }
        Ok(ids.len())
    }

    /// Arms the lease's timer for the end of its period or, if its policy
    /// expires early and its silence will be suspicious before then, for
    /// that moment.
    fn arm(&mut self, id: LeaseId) {
        let Some(entry) = self.leases.get(&id) else {
            return;
        };
        let (generation, at) = (entry.generation, Self::next_check(entry));
        self.arm_at(id, generation, at);
    }

    /// When `entry` must be looked at next: the end of its period, its
    /// ceiling if that comes first, or earlier when its evidence will be
    /// suspicious before then.
    fn next_check(entry: &Entry) -> tokio::time::Instant {
        let bound = entry
            .evidence
            .working_until(entry.terms.ceiling)
            .map_or(entry.deadline, |ceiling| ceiling.min(entry.deadline));
        if !entry.terms.policy.expires_early() {
            return bound;
        }
        entry
            .evidence
            .suspicion_at(&entry.terms.accrual)
            .map_or(bound, |at| at.min(bound))
    }

    fn arm_at(&mut self, id: LeaseId, generation: u64, at: tokio::time::Instant) {
        let Some(entry) = self.leases.get(&id) else {
            return;
        };
        if self.is_paused(&entry.meta.run_id) {
            return;
        }
        if let Some(entry) = self.leases.get_mut(&id) {
            entry.armed_for = at;
        }
        let _ = self.timers.send(TimerCmd::Arm { id, generation, at });
    }

    fn remove(&mut self, id: LeaseId) -> Option<Entry> {
        let entry = self.leases.remove(&id)?;
        self.live.fetch_sub(1, Ordering::AcqRel);
        if let Some(held) = self.held.get_mut(entry.meta.run_id.as_str()) {
            if let Some(at) = held.iter().position(|held| *held == id) {
                held.swap_remove(at);
            }
            if held.is_empty() {
                self.held.remove(entry.meta.run_id.as_str());
            }
        }
        if let Some(endpoint) = entry.meta.endpoint.as_deref() {
            self.paces.leave(endpoint);
        }
        let _ = self.timers.send(TimerCmd::Disarm(id));
        Some(entry)
    }

    fn done(&mut self, id: LeaseId, cancelled: bool) {
        if let Some(entry) = self.remove(id) {
            if cancelled {
                self.emit(&entry.meta, EventKind::LeaseCancelled { lease_id: id });
                self.timed(&entry, TimedEnd::Cut);
            } else {
                self.timed(&entry, TimedEnd::Ended);
                if let Some(key) = &entry.meta.pace_key
                    && entry.meta.pace_mode != PaceMode::Off
                {
                    // Ended by itself: what it showed is the key's normal
                    // pace — but for a wait for its first item that the
                    // executor's own queue may have made.
                    let mut call = entry.evidence.call_pace();
                    if entry.queued {
                        call.first_item_ms = None;
                    }
                    let run = crate::pace::run_tag(&entry.meta.run_id);
                    self.paces.learn(key, run, &call);
                }
            }
        }
        self.tell_drained();
    }

    /// Answers whoever waits for the last lease, if none is left.
    fn tell_drained(&mut self) {
        if self.drained.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut self.drained);
        for (run, reply) in waiting {
            let drained = match &run {
                None => self.leases.is_empty(),
                Some(run) => !self.held.contains_key(&**run),
            };
            if drained {
                let _ = reply.send(());
            } else {
                self.drained.push((run, reply));
            }
        }
    }

    fn expired(&mut self, myself: &ActorRef<LeaseMsg>, id: LeaseId, generation: u64) {
        let Some(entry) = self.leases.get(&id) else {
            return;
        };
        if entry.generation != generation {
            tracing::debug!(%id, generation, current = entry.generation, "stale lease timer ignored");
            return;
        }
        if entry.token.is_cancelled() || self.is_paused(&entry.meta.run_id) || entry.judging {
            // The parent's cancellation wins (`Done` is on its way); a paused
            // lease is re-armed on resume; a lease with the watchdog is
            // re-armed by its verdict.
            return;
        }
        let now = tokio::time::Instant::now();
        // Every wake's lateness is time the runtime owes the lease.
        let late = now.saturating_duration_since(entry.armed_for);
        if let Some(entry) = self.leases.get_mut(&id) {
            entry.owed = entry.owed.saturating_add(late);
        }
        let Some(entry) = self.leases.get(&id) else {
            return;
        };
        if let Some(ceiling) = entry.evidence.working_until(entry.terms.ceiling)
            && ceiling <= now
        {
            let decision = Decision {
                verdict: Verdict::Escalate,
                reason: format!(
                    "ceiling reached: the operation has worked {} (lease.ceiling), however \
                     fresh its evidence; a person decides whether it goes on",
                    crate::describe_duration(entry.terms.ceiling)
                ),
                nudge: None,
                decided_by: DecidedBy::Cap,
            };
            let (meta, renewals) = (entry.meta.clone(), entry.renewals);
            let evidence = entry.evidence.summary(now, &entry.terms.accrual);
            let record = VerdictRecord::new(&meta, renewals, evidence, &decision, None);
            self.emit(&meta, EventKind::Verdict(Arc::new(record)));
            self.decided(id, generation, decision);
            return;
        }
        // Still waiting for its first item while another of this
        // executor's calls is in flight at its endpoint: the queue may be
        // what keeps it waiting, whichever reached the server first. Its
        // wait is judged by its period from now on, and teaches nothing.
        if entry.evidence.count() == 0
            && !entry.queued
            && entry
                .meta
                .endpoint
                .as_deref()
                .is_some_and(|endpoint| self.paces.in_flight(endpoint) > 1)
        {
            entry.evidence.forget_first_item();
            if let Some(entry) = self.leases.get_mut(&id) {
                entry.queued = true;
            }
        }
        let Some(entry) = self.leases.get(&id) else {
            return;
        };
        let suspicious = entry.terms.policy.expires_early()
            && entry
                .evidence
                .suspicion_at(&entry.terms.accrual)
                .is_some_and(|at| at <= now);
        // At the period's end, evidence already suspicious against its
        // history is judged as an early expiry would be: past the ladder.
        let early = now < entry.deadline || suspicious;
        if early && now < entry.deadline {
            // A check before the period's end: the evidence was to be
            // suspicious by now. If something arrived since, look again
            // later; if it is suspicious (and the executor is on time, so
            // the silence is the operation's), the watchdog is asked now.
            let on_time = self
                .load
                .as_ref()
                .is_none_or(|rule| rule.late_by(Duration::ZERO).is_none());
            if !(suspicious && on_time) {
                let at = if on_time {
                    Self::next_check(entry)
                } else {
                    entry.deadline
                };
                self.arm_at(id, generation, at);
                return;
            }
        }
        if early {
            entry.evidence.suspect();
        }
        self.judge(myself, id, generation, early);
    }

    /// The evidence of `id` told it turned repetitive: judged at once, as
    /// an early expiry, if its policy expires early and the run is not
    /// paused.
    fn suspect(&mut self, myself: &ActorRef<LeaseMsg>, id: LeaseId) {
        let Some(entry) = self.leases.get(&id) else {
            return;
        };
        if entry.token.is_cancelled()
            || self.is_paused(&entry.meta.run_id)
            || entry.judging
            || !entry.terms.policy.expires_early()
        {
            return;
        }
        let generation = entry.generation;
        self.judge(myself, id, generation, true);
    }

    /// Judges an expiry of `id` (`early`: before its period's end).
    fn judge(&mut self, myself: &ActorRef<LeaseMsg>, id: LeaseId, generation: u64, early: bool) {
        let Some(entry) = self.leases.get(&id) else {
            return;
        };
        let now = tokio::time::Instant::now();
        let (meta, renewals) = (entry.meta.clone(), entry.renewals);
        // How late this lease's own timer fired: the executor's lateness as
        // this lease saw it, beside the gauge's.
        let seen = now.saturating_duration_since(entry.armed_for);
        self.emit(
            &meta,
            EventKind::Wait {
                lease_id: id,
                lease_kind: meta.kind,
                subject: meta.subject.clone(),
                renewals,
                lease_ms: u64::try_from(meta.duration.as_millis()).unwrap_or(u64::MAX),
            },
        );

        let accrual = &entry.terms.accrual;
        if let Some(rule) = &self.load {
            // Late now (the gauge, or this wake), or late a little at each
            // of its wakes until the lateness adds up past the bound: either
            // way the time was the runtime's.
            let reason = match rule.late_by(seen) {
                Some(lag) => Some(format!(
                    "the executor was {} ms late (load bound {} ms)",
                    lag.as_millis(),
                    rule.bound().as_millis()
                )),
                None if entry.owed > rule.bound() => Some(format!(
                    "the executor was late at this lease's wakes by {} ms in all (load bound {} ms)",
                    entry.owed.as_millis(),
                    rule.bound().as_millis()
                )),
                None => None,
            };
            if let Some(reason) = reason {
                let evidence = entry.evidence.summary(now, accrual);
                let decision = Decision::renew(
                    DecidedBy::Load,
                    format!(
                        "{reason}: the time was the runtime's, not the operation's; not counted \
                         toward the renewal cap"
                    ),
                );
                let record = VerdictRecord::new(&meta, renewals, evidence, &decision, None);
                self.emit(&meta, EventKind::Verdict(Arc::new(record)));
                self.decided(id, generation, decision);
                return;
            }
        }
        // The silence is judged without the lag: the operation's last
        // report may have been recorded that late.
        let lag = self
            .load
            .as_ref()
            .map_or(Duration::ZERO, |rule| rule.gauge().lag().max(seen));
        let evidence = entry
            .evidence
            .summary(now.checked_sub(lag).unwrap_or(now), accrual);
        let terms = &entry.terms;
        let mut judged = terms.expiry(
            &meta,
            (renewals, entry.counted),
            entry.evidence_renewals,
            (&evidence, evidence.count.saturating_sub(entry.seen_items)),
            early,
        );
        judged.max_renewals = entry.cap;
        let seen_items = evidence.count;
        // Strong evidence ends a stretch of doubt (rule 13), under a policy
        // that follows it: this expiry is not one the cap counts, whoever
        // renews it.
        let strong = terms.policy.checkpoints_at_cap()
            && crate::supervision::policy::strong_evidence(&judged);
        if strong {
            judged.doubts = 0;
        }
        // At the cap, evidence that is fresh but not strong (progress with no
        // total, steps, notes) under a policy that says so is a checkpoint:
        // the cap is extended, the work goes on.
        let checkpoint = (judged.doubts >= judged.max_renewals
            && entry.checkpoints < crate::supervision::policy::MAX_CAP_CHECKPOINTS
            && terms.policy.checkpoints_at_cap())
        .then(|| crate::supervision::policy::fresh_evidence(&judged))
        .flatten()
        .map(|why| {
            let more = checkpoint_grant(terms);
            Decision::renew(
                DecidedBy::Checkpoint,
                format!(
                    "renewal cap {} reached while the evidence is fresh ({why}): extended by {more} \
                     to {}, checkpoint {} of {}",
                    entry.cap,
                    entry.cap.saturating_add(more),
                    entry.checkpoints + 1,
                    crate::supervision::policy::MAX_CAP_CHECKPOINTS
                ),
            )
        });
        // The cap holds whatever the policy: one of an embedder's own that
        // forgets it is bounded all the same.
        let judgement = match checkpoint {
            Some(decision) => Judgement::Decided(decision),
            None => crate::supervision::policy::renewal_cap(&judged)
                .unwrap_or_else(|| terms.policy.judge(&judged)),
        };
        if let Judgement::Decided(decision) = judgement {
            let record =
                VerdictRecord::new(&meta, renewals, evidence, &decision, None).early(early);
            self.emit(&meta, EventKind::Verdict(Arc::new(record)));
            if let Some(entry) = self.leases.get_mut(&id) {
                entry.seen_items = seen_items;
                entry.pending = Some(PendingExpiry {
                    strong,
                    silence: None,
                });
            }
            self.decided(id, generation, decision);
            return;
        }
        // Judged on a silence (no items, or phi at its threshold), not on a
        // loop: if the silence ends before the verdict comes, a cut is moot.
        let silence = (evidence.count == 0
            || evidence.phi.is_none_or(|phi| phi >= judged.phi_threshold))
            && !judged.repetitive();
        let count = evidence.count;
        // The policy leaves it to the evaluator: the watchdog asks it, shown
        // the evidence as it was judged here.
        let expiry = LeaseExpiry {
            meta,
            renewals,
            counted: judged.doubts,
            max_renewals: judged.max_renewals,
            evidence_renewals: entry.evidence_renewals,
            stream_tail: entry.evidence.tail(),
            evidence,
            early,
        };
        if let Some(entry) = self.leases.get_mut(&id) {
            entry.seen_items = seen_items;
            entry.judging = true;
            entry.pending = Some(PendingExpiry {
                strong,
                silence: silence.then_some(count),
            });
        }
        let me = myself.clone();
        let reply = VerdictReply::new(move |decision| {
            let _ = me.send_message(LeaseMsg::Decided {
                id,
                generation,
                decision,
            });
        });
        // If the watchdog is gone the message, and with it the reply, is
        // dropped, and the reply answers RENEW by the breaker.
        let _ = self
            .watchdog
            .send_message(WatchdogMsg::Assess(Box::new((expiry, reply))));
    }

    fn decided(&mut self, id: LeaseId, generation: u64, decision: Decision) {
        let paused = match self.leases.get(&id) {
            Some(entry) => self.is_paused(&entry.meta.run_id),
            None => return,
        };
        let Some(entry) = self.leases.get_mut(&id) else {
            return;
        };
        let pending = entry.pending.take();
        let strong = pending.is_some_and(|pending| pending.strong);
        // The watchdog answered: no evaluator call of this lease is in
        // flight any more.
        entry.judging = false;
        if entry.token.is_cancelled() {
            return;
        }
        let mut overruled = false;
        let decision = match pending.and_then(|pending| pending.silence) {
            Some(before)
                if decision.decided_by == DecidedBy::Evaluator
                    && matches!(decision.verdict, Verdict::Intervene | Verdict::Escalate)
                    && entry.evidence.count() > before
                    && !paused
                    && entry.generation == generation =>
            {
                // The evaluator judged a silence that has ended since it was
                // asked: the operation is visibly alive, and cutting it now
                // would be a false kill on stale evidence.
                let since = entry.evidence.count() - before;
                let renewed = Decision::renew(
                    DecidedBy::Evidence,
                    format!(
                        "the evaluator's {} judged a silence that has ended: {} arrived since \
                         it was asked; renewed, and judged again at the next expiry",
                        decision.verdict,
                        crate::counted(since, "item")
                    ),
                );
                let meta = entry.meta.clone();
                let evidence = entry
                    .evidence
                    .summary(tokio::time::Instant::now(), &entry.terms.accrual);
                let record = VerdictRecord::new(&meta, entry.renewals, evidence, &renewed, None);
                self.emit(&meta, EventKind::Verdict(Arc::new(record)));
                overruled = true;
                renewed
            }
            _ => decision,
        };
        let Some(entry) = self.leases.get_mut(&id) else {
            return;
        };
        // A pause changes no generation, and its resume bumps it: a verdict
        // during a pause, or after it on an expiry judged before it, must not
        // act on a run whose clocks were stopped.
        let reason = if paused {
            Some("the run is paused")
        } else if entry.generation != generation {
            Some(
                "the lease's period changed while the expiry was judged: the run was paused, or a person extended the lease",
            )
        } else {
            None
        };
        if let Some(reason) = reason {
            let meta = entry.meta.clone();
            self.emit(
                &meta,
                EventKind::VerdictDropped {
                    lease_id: id,
                    verdict: decision.verdict,
                    reason: reason.to_owned(),
                },
            );
            // A fire skipped while this verdict was awaited is made good.
            self.arm(id);
            return;
        }
        match decision.verdict {
            Verdict::Renew | Verdict::Nudge => {
                match decision.decided_by {
                    // The runtime's time: nothing the operation did moves,
                    // and what it owed is paid.
                    DecidedBy::Load => entry.owed = Duration::ZERO,
                    DecidedBy::Checkpoint => {
                        entry.checkpoints += 1;
                        entry.cap = entry.cap.saturating_add(checkpoint_grant(&entry.terms));
                        entry.evidence_renewals = 0;
                        entry.renewals += 1;
                        entry.evidence.judged();
                    }
                    decided_by => {
                        // The evaluator was just asked, if overruled: a
                        // new streak of evidence renewals starts (rule 4).
                        entry.evidence_renewals = if decided_by == DecidedBy::Evidence && !overruled
                        {
                            entry.evidence_renewals + 1
                        } else {
                            0
                        };
                        entry.renewals += 1;
                        // Strong evidence ends a stretch of doubt: the cap
                        // counts renewals in doubt in a row (rule 13).
                        if strong {
                            entry.counted = 0;
                        } else {
                            entry.counted += 1;
                        }
                        entry.evidence.judged();
                    }
                }
                entry.generation += 1;
                entry.deadline = deadline_after(tokio::time::Instant::now(), entry.meta.duration);
                let (meta, nudges) = (entry.meta.clone(), entry.nudges.clone());
                if decision.verdict == Verdict::Nudge
                    && let Some(nudge) = decision.nudge
                {
                    if let Some(queue) = nudges {
                        queue.push(nudge.clone());
                    }
                    self.emit(
                        &meta,
                        EventKind::NudgeQueued {
                            lease_id: id,
                            nudge,
                        },
                    );
                }
                self.arm(id);
            }
            Verdict::Intervene if decision.decided_by == DecidedBy::Cap => {
                let (meta, cap) = (entry.meta.clone(), entry.cap);
                self.emit(
                    &meta,
                    EventKind::RenewalCapReached {
                        lease_id: id,
                        max_renewals: cap,
                    },
                );
                self.end(id, LeaseEnd::RenewalCapReached(cap));
            }
            Verdict::Intervene => {
                let meta = entry.meta.clone();
                self.intervene(id, &meta, decision.reason);
            }
            Verdict::Escalate => {
                let meta = entry.meta.clone();
                let evidence = entry
                    .evidence
                    .summary(tokio::time::Instant::now(), &entry.terms.accrual);
                self.emit(
                    &meta,
                    EventKind::Escalated {
                        lease_id: id,
                        reason: decision.reason.clone(),
                    },
                );
                self.end(id, LeaseEnd::Escalated(decision.reason, evidence));
            }
        }
    }

    /// Stops the operation of `id` for an `INTERVENE`: says so, then ends
    /// it.
    fn intervene(&mut self, id: LeaseId, meta: &LeaseMeta, reason: String) {
        self.emit(
            meta,
            EventKind::Intervened {
                lease_id: id,
                reason: reason.clone(),
            },
        );
        self.end(id, LeaseEnd::Intervened(reason));
    }

    /// Ends the operation for `end`: tells the owner why, then cancels it.
    ///
    /// With the run logged, both wait until the run's log holds what was
    /// published so far — the verdict, `intervened` or `escalated` — at
    /// most [`TAIL_WAIT`]: a verdict that cut an operation is in its run's
    /// trace even if the executor dies right after. The lease is gone at
    /// once: it fires no more.
    fn end(&mut self, id: LeaseId, end: LeaseEnd) {
        let Some(entry) = self.remove(id) else {
            return;
        };
        self.timed(&entry, TimedEnd::Cut);
        // Decided now: the operation is ended by this verdict even if it
        // finishes while the log is written.
        entry.cut.store(true, Ordering::Release);
        let log = self.log.clone().filter(|_| !entry.meta.run_id.is_empty());
        let Some(log) = log else {
            let _ = entry.end.send(end);
            entry.token.cancel();
            return;
        };
        let (written, synced) = tokio::sync::oneshot::channel();
        let _ = log.send(crate::event_log::LogItem::Sync(
            entry.meta.run_id.clone(),
            written,
        ));
        tokio::spawn(async move {
            let _ = tokio::time::timeout(TAIL_WAIT, synced).await;
            let _ = entry.end.send(end);
            entry.token.cancel();
        });
    }

    /// Says how the operation of `entry` went in time, as it ends.
    fn timed(&self, entry: &Entry, ended: TimedEnd) {
        let timing = entry
            .evidence
            .timing(tokio::time::Instant::now(), ended, entry.renewals);
        self.emit(
            &entry.meta,
            EventKind::OperationTimed {
                lease_id: entry.meta.id,
                lease_kind: entry.meta.kind,
                subject: entry.meta.subject.clone(),
                timing: Box::new(timing),
            },
        );
    }

    fn emit(&self, meta: &LeaseMeta, kind: EventKind) {
        self.events.emit(&meta.run_id, &meta.path, kind);
    }
}
