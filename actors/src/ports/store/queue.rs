//! [`QueueStore`]: the queue of runs no executor owns yet, and the
//! commands a person sends to a run whoever holds it.

use super::{QueueClaim, RunRecord, StoreFuture};
use crate::ports::changes::{RunCommand, StoredCommand};

/// Queued runs and stored commands.
pub trait QueueStore: Send + Sync + 'static {
    /// Claims up to `claim.max` queued runs for `claim.owner_id`, in fair
    /// turns across tenants, oldest first in each
    /// ([`fair_order`](crate::tenancy::fair_order); run ids sort in
    /// creation order), each by
    /// [`fencing::claim_queued`](super::fencing::claim_queued): `running`,
    /// owned by the claimer, its fence raised, its lease expiring at
    /// `now_ms + ttl_ms`. Executors claiming at once never claim the same
    /// run: each queued run is claimed exactly once.
    fn claim_queued(&self, claim: QueueClaim) -> StoreFuture<Vec<RunRecord>>;

    /// How many runs each tenant holds queued, by tenant name
    /// ([`DEFAULT_TENANT`](crate::tenancy::DEFAULT_TENANT) for the runs of
    /// none); a tenant with none is left out. What a post reads once the
    /// queue is full, to give each tenant its share of it.
    fn count_queued_by_tenant(&self) -> StoreFuture<std::collections::BTreeMap<String, u64>>;

    /// Stores `command` for the run (whoever holds it takes it) and
    /// publishes a [`StoreChange::Command`](crate::ports::StoreChange::Command);
    /// answers the command's id. Fails if there is no such run.
    fn send_command(&self, run_id: &str, command: RunCommand) -> StoreFuture<u64>;

    /// How many commands wait for the run's owner to take them: what
    /// forwarding another reads first, so that the commands waiting for
    /// one run stay bounded when its owner does not take them.
    fn count_commands(&self, run_id: &str) -> StoreFuture<u64>;

    /// Takes the stored commands of the runs `owner_id` holds, in id order:
    /// each is removed as it is taken, so it is taken once, and only by the
    /// run's owner.
    fn take_commands(&self, owner_id: &str) -> StoreFuture<Vec<StoredCommand>>;
}
