//! The sled store's queue and commands ([`QueueStore`]): queued runs are
//! claimed in fair turns across tenants, oldest first in each
//! ([`fair_order`](leasehold_actors::tenancy::fair_order)), read from the
//! status index, each under its lock; a
//! person's controls are stored for the executor that holds a run, in a
//! tree of their own keyed by id (big-endian, so in id order), each
//! removed as it is taken so that it is taken once.

use leasehold_actors::{
    QueueClaim, QueueStore, RunCommand, RunRecord, StoreChange, StoreError, StoreFuture,
    StoredCommand, fencing,
};
use sled::Tree;

use super::codec::{decode, encode};
use super::{Inner, SledStore, no_run};

/// The tree of commands.
pub(super) const COMMANDS: &str = "commands";

/// Stores `command` for `run_id` under a new id from `db`.
pub(super) fn send(
    db: &sled::Db,
    commands: &Tree,
    run_id: &str,
    command: RunCommand,
) -> Result<u64, StoreError> {
    let doing = format_args!("storing a command for run `{run_id}`");
    let id = db
        .generate_id()
        .map_err(|e| StoreError::failed(format!("{doing} failed: {e}")))?;
    let stored = StoredCommand {
        id,
        run_id: run_id.to_owned(),
        command,
    };
    commands
        .insert(id.to_be_bytes(), encode(&stored, &doing)?)
        .map_err(|e| StoreError::failed(format!("{doing} failed: {e}")))?;
    Ok(id)
}

/// How many commands wait for `run_id`: every waiting command is read,
/// and they are few (each run's are bounded by its forwarding).
pub(super) fn count(commands: &Tree, run_id: &str) -> Result<u64, StoreError> {
    let mut count = 0_u64;
    for entry in commands {
        let (_, value) = entry
            .map_err(|e| StoreError::failed(format!("counting the commands of `{run_id}`: {e}")))?;
        let command: StoredCommand = decode(&value, &"a stored command")?;
        if command.run_id == run_id {
            count = count.saturating_add(1);
        }
    }
    Ok(count)
}

/// Takes, in id order, the commands whose run `owns` says the taker holds.
pub(super) fn take(
    commands: &Tree,
    owns: impl Fn(&str) -> Result<bool, StoreError>,
) -> Result<Vec<StoredCommand>, StoreError> {
    let doing = "taking commands";
    let failed = |e: sled::Error| StoreError::failed(format!("{doing} failed: {e}"));
    let mut taken = Vec::new();
    for entry in commands {
        let (key, value) = entry.map_err(failed)?;
        let command: StoredCommand = decode(&value, &"a stored command")?;
        // Removed before it is handed over: of two takers, one gets it.
        if owns(&command.run_id)? && commands.remove(&key).map_err(failed)?.is_some() {
            taken.push(command);
        }
    }
    Ok(taken)
}

/// Removes the commands waiting for `run_id` (a run deleted): every
/// waiting command is read, as [`count`] does.
pub(super) fn remove_of(commands: &Tree, run_id: &str) -> Result<(), StoreError> {
    let failed =
        |e: sled::Error| StoreError::failed(format!("removing the commands of `{run_id}`: {e}"));
    for entry in commands {
        let (key, value) = entry.map_err(failed)?;
        let command: StoredCommand = decode(&value, &"a stored command")?;
        if command.run_id == run_id {
            commands.remove(&key).map_err(failed)?;
        }
    }
    Ok(())
}

impl Inner {
    /// Claims up to `max` queued runs in fair turns across tenants, oldest
    /// first in each: reads the status index's queued runs and their
    /// tenants, and claims each picked under its lock, where
    /// [`fencing::claim_queued`] skips one claimed meanwhile (or an index
    /// entry left over by a crash).
    fn claim_queued(&self, claim: &QueueClaim) -> Result<(Vec<RunRecord>, bool), StoreError> {
        let mut claimed = Vec::new();
        let mut room = claim.room.clone();
        // In fair turns across tenants; under keyed limits runs may be
        // skipped, so the whole queue in order, else only its first `max`.
        let considered = if room.is_unlimited() {
            claim.max
        } else {
            usize::MAX
        };
        let running = self
            .indexes
            .count_by_tenant(leasehold_actors::RunStatus::Running)?;
        let order = leasehold_actors::tenancy::fair_order(
            self.indexes.queued_with_tenants()?,
            &running,
            considered,
        )?;
        for run_id in order {
            if claimed.len() >= claim.max {
                break;
            }
            let (record, _) = self.change_run(&run_id, |record| {
                let record = record
                    .and_then(|r| fencing::claim_queued(&r, claim))
                    .filter(|r| room.has_room_for(&r.labels()));
                Ok((record.clone(), record))
            })?;
            if let Some(record) = record {
                room.take(&record.labels());
                claimed.push(record);
            }
        }
        let wrote = !claimed.is_empty();
        Ok((claimed, wrote))
    }
}

impl QueueStore for SledStore {
    fn claim_queued(&self, claim: QueueClaim) -> StoreFuture<Vec<RunRecord>> {
        let store = self.clone();
        Box::pin(async move {
            let claimed = store
                .scan_and_settle(move |inner| inner.claim_queued(&claim))
                .await?;
            for record in &claimed {
                store.inner.changes.publish(StoreChange::Run {
                    run_id: record.run_id.clone(),
                });
            }
            Ok(claimed)
        })
    }

    fn count_queued_by_tenant(&self) -> StoreFuture<std::collections::BTreeMap<String, u64>> {
        self.scan(|inner| {
            inner
                .indexes
                .count_by_tenant(leasehold_actors::RunStatus::Queued)
        })
    }

    fn send_command(&self, run_id: &str, command: RunCommand) -> StoreFuture<u64> {
        let inner = &self.inner;
        let sent = match inner.read_run(run_id) {
            Ok(Some(_)) => send(&inner.db, &inner.commands, run_id, command),
            Ok(None) => Err(no_run(run_id)),
            Err(error) => Err(error),
        };
        let run_id = run_id.to_owned();
        self.settle_publishing(sent.map(|id| (id, true)), |_| {
            Some(StoreChange::Command { run_id })
        })
    }

    fn count_commands(&self, run_id: &str) -> StoreFuture<u64> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| count(&inner.commands, &run_id))
    }

    fn take_commands(&self, owner_id: &str) -> StoreFuture<Vec<StoredCommand>> {
        let owner_id = owner_id.to_owned();
        let store = self.clone();
        Box::pin(async move {
            let taken = store
                .scan(move |inner| {
                    let taken = take(&inner.commands, |run_id| {
                        Ok(inner.read_run(run_id)?.is_some_and(|(_, record)| {
                            record.owner_id.as_deref() == Some(owner_id.as_str())
                        }))
                    })?;
                    let wrote = !taken.is_empty();
                    Ok((taken, wrote))
                })
                .await;
            store.settle(taken).await
        })
    }
}
