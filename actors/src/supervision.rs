//! The supervision core: leases and the evidence beside them
//! ([`lease`], [`evidence`]), the watchdog that judges an expiry
//! ([`watchdog`], with its policies, [`policy`], and the evaluator under a
//! timeout, [`evaluation`]), budget checkpoints ([`budget`]) and the
//! restart strategies of the tree ([`strategy`]). It stands on the
//! vocabulary and the ports, and the run and its loops stand on it. This
//! file starts the lease–watchdog pair together, from one validated
//! configuration.

pub(crate) mod budget;
pub(crate) mod evaluation;
pub(crate) mod evidence;
pub(crate) mod lease;
pub(crate) mod policy;
pub(crate) mod strategy;
pub(crate) mod watchdog;

use std::sync::Arc;

use ractor::ActorRef;

use crate::error::ConfigError;
use crate::load::LoadRule;
use crate::pace::PaceBook;
use crate::ports::{Evaluator, EventSink};
use crate::supervision::lease::{LeaseActor, LeaseActorArgs, LeaseConfig, Leases};
use crate::supervision::policy::Policies;
use crate::supervision::watchdog::{
    StartError, WatchdogActor, WatchdogArgs, WatchdogConfig, WatchdogMsg,
};

/// The lease lengths, the renewal cap and the watchdog's policy, checked
/// together.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SupervisionConfig {
    /// Lease lengths per kind and the renewal cap.
    pub lease: LeaseConfig,
    /// The watchdog's ladder, evaluator timeout and accrual parameters.
    pub watchdog: WatchdogConfig,
}

impl SupervisionConfig {
    /// Refuses zero durations and a `free_renewals` above `max_renewals`
    /// ([`rules::free_renewals_within_cap`](crate::rules::free_renewals_within_cap)),
    /// naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.lease.validate()?;
        self.watchdog.validate()?;
        crate::rules::free_renewals_within_cap(
            self.watchdog.free_renewals,
            self.lease.max_renewals,
        )?;
        Ok(())
    }
}

/// A running watchdog and a lease actor that asks it.
#[derive(Clone, Debug)]
pub struct Supervision {
    /// The configuration it was started with.
    pub config: SupervisionConfig,
    /// The watchdog.
    pub(crate) watchdog: ActorRef<WatchdogMsg>,
    /// Starts operations under leases.
    pub leases: Leases,
    /// The terms of its leases per kind, resolved from `config`.
    pub terms: crate::supervision::lease::terms::TermsByKind,
    /// What its leases learned of each pace key (shared by its shards).
    pub paces: PaceBook,
    /// The load rule of its lease actors, if any.
    load: Option<LoadRule>,
}

impl Supervision {
    /// Validates `config`, then starts a watchdog (with `evaluator`, if any)
    /// and a lease actor, both publishing to `events`.
    pub async fn start(
        config: SupervisionConfig,
        evaluator: Option<Arc<dyn Evaluator>>,
        events: Arc<dyn EventSink>,
    ) -> Result<Self, StartError> {
        Self::start_with_load(config, evaluator, events, None).await
    }

    /// [`Supervision::start`] with a [`LoadRule`]: an expiry while the
    /// executor's lag is above the rule's bound renews by `load`, counted
    /// neither toward the cap nor on the ladder nor in the evidence streak.
    pub async fn start_with_load(
        config: SupervisionConfig,
        evaluator: Option<Arc<dyn Evaluator>>,
        events: Arc<dyn EventSink>,
        load: Option<LoadRule>,
    ) -> Result<Self, StartError> {
        Self::start_with(config, &Policies::builtin(), evaluator, events, load).await
    }

    /// [`Supervision::start_with_load`] with the verdict policies
    /// `policies` knows (the built-ins and policies of your own), which
    /// `config.watchdog.policy` names.
    pub async fn start_with(
        config: SupervisionConfig,
        policies: &Policies,
        evaluator: Option<Arc<dyn Evaluator>>,
        events: Arc<dyn EventSink>,
        load: Option<LoadRule>,
    ) -> Result<Self, StartError> {
        config.validate()?;
        let terms = config
            .watchdog
            .terms(&config.lease, policies, "watchdog.policy")?;
        let watchdog = WatchdogActor::start(WatchdogArgs {
            config: config.watchdog.clone(),
            evaluator,
            events: events.clone(),
            prices: crate::Prices::default(),
        })
        .await?;
        let paces = PaceBook::new();
        let leases = LeaseActor::start(LeaseActorArgs {
            watchdog: watchdog.clone(),
            events,
            terms: terms.clone(),
            live: Arc::default(),
            limits: crate::event::EventLimits::default(),
            load: load.clone(),
            paces: paces.clone(),
            log: None,
        })
        .await?;
        Ok(Self {
            config,
            watchdog,
            leases,
            terms,
            paces,
            load,
        })
    }

    /// Starts another lease actor on the same watchdog: a shard, for
    /// spreading many leases over more than one mailbox.
    pub async fn shard(&self, events: Arc<dyn EventSink>) -> Result<Leases, StartError> {
        LeaseActor::start(LeaseActorArgs {
            watchdog: self.watchdog.clone(),
            events,
            terms: self.terms.clone(),
            live: Arc::default(),
            limits: crate::event::EventLimits::default(),
            load: self.load.clone(),
            paces: self.paces.clone(),
            log: None,
        })
        .await
    }

    /// Stops the lease actor (cancelling what it supervises) and the watchdog.
    pub fn stop(&self) {
        self.leases.actor().stop(None);
        self.watchdog.stop(None);
    }
}
