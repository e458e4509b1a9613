//! The sled store's commands: a person's controls stored for the executor
//! that holds a run, in a tree of their own keyed by id (big-endian, so in
//! id order), each removed as it is taken so that it is taken once.

use leasehold_actors::{RunCommand, StoreError, StoredCommand};
use sled::Tree;

use super::codec::{decode, encode};

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
