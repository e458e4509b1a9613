//! The sled store's outbox ([`Outbox`], the rules of [`outbox`]): a tree of notices keyed by id
//! (big-endian, so in id order). A notice is inserted before the run's
//! record is replaced, under the run's lock: sled recovers a prefix of its
//! log, so a change that survives a crash has its notice. Taking and
//! settling hold the outbox's own lock, so that of two takers one holds a
//! notice.

use std::sync::{Mutex, PoisonError};

use leasehold_actors::{
    Delivery, Notice, NoticeTake, Outbox, RunRecord, RunStatus, StoreError, StoreFuture, outbox,
};
use sled::Tree;

use super::codec::{decode, encode};
use super::{SledStore, failed};

/// The tree of notices.
pub(super) const OUTBOX: &str = "outbox";

/// The outbox's notices: their tree, and the lock takes and settlements
/// hold.
pub(super) struct Notices {
    tree: Tree,
    taking: Mutex<()>,
}

impl Notices {
    pub(super) fn new(tree: Tree) -> Self {
        Self {
            tree,
            taking: Mutex::new(()),
        }
    }

    /// Keeps the notice the change of `after` from status `before` makes,
    /// if any, under a new id from `db`; says whether it kept one.
    pub(super) fn keep(
        &self,
        db: &sled::Db,
        before: RunStatus,
        after: &RunRecord,
    ) -> Result<bool, StoreError> {
        let Some(mut notice) = outbox::notice_of(before, after) else {
            return Ok(false);
        };
        let doing = format_args!("keeping a notice of run `{}`", after.run_id);
        notice.id = db.generate_id().map_err(|e| failed(&doing, &e))?;
        self.tree
            .insert(notice.id.to_be_bytes(), encode(&notice, &doing)?)
            .map_err(|e| failed(&doing, &e))?;
        Ok(true)
    }

    /// Takes the due notices, oldest first, each held; says whether it
    /// wrote.
    pub(super) fn take(&self, take: &NoticeTake) -> Result<(Vec<Notice>, bool), StoreError> {
        let doing = "taking notices";
        let _taking = self.taking.lock().unwrap_or_else(PoisonError::into_inner);
        let mut taken = Vec::new();
        for entry in &self.tree {
            if taken.len() >= take.max {
                break;
            }
            let (key, value) = entry.map_err(|e| failed(&doing, &e))?;
            let notice: Notice = decode(&value, &"a notice")?;
            if !outbox::is_due(&notice, take) {
                continue;
            }
            let notice = outbox::held(notice, take);
            self.tree
                .insert(key, encode(&notice, &doing)?)
                .map_err(|e| failed(&doing, &e))?;
            taken.push(notice);
        }
        let wrote = !taken.is_empty();
        Ok((taken, wrote))
    }

    /// Settles notice `id` if it is still held until `held_until_ms`.
    pub(super) fn settle(
        &self,
        id: u64,
        held_until_ms: u64,
        delivery: Option<Delivery>,
    ) -> Result<(bool, bool), StoreError> {
        let doing = format_args!("settling notice {id}");
        let _taking = self.taking.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(value) = self
            .tree
            .get(id.to_be_bytes())
            .map_err(|e| failed(&doing, &e))?
        else {
            return Ok((false, false));
        };
        let mut notice: Notice = decode(&value, &"a notice")?;
        if notice.delivery.due_at_ms != held_until_ms {
            return Ok((false, false));
        }
        match delivery {
            None => {
                self.tree
                    .remove(id.to_be_bytes())
                    .map_err(|e| failed(&doing, &e))?;
            }
            Some(delivery) => {
                notice.delivery = delivery;
                self.tree
                    .insert(id.to_be_bytes(), encode(&notice, &doing)?)
                    .map_err(|e| failed(&doing, &e))?;
            }
        }
        Ok((true, true))
    }

    /// Removes the notices of the runs `gone` names (runs deleted); every
    /// notice is read, and they are few: the undelivered ones.
    pub(super) fn remove_of(&self, gone: &[String]) -> Result<(), StoreError> {
        let doing = "removing the notices of deleted runs";
        let _taking = self.taking.lock().unwrap_or_else(PoisonError::into_inner);
        for entry in &self.tree {
            let (key, value) = entry.map_err(|e| failed(&doing, &e))?;
            let notice: Notice = decode(&value, &"a notice")?;
            if gone.contains(&notice.run_id) {
                self.tree.remove(key).map_err(|e| failed(&doing, &e))?;
            }
        }
        Ok(())
    }
}

impl Outbox for SledStore {
    fn take_notices(&self, take: NoticeTake) -> StoreFuture<Vec<Notice>> {
        self.scan_and_settle(move |inner| inner.outbox.take(&take))
    }

    fn settle_notice(
        &self,
        id: u64,
        held_until_ms: u64,
        delivery: Option<Delivery>,
    ) -> StoreFuture<bool> {
        self.scan_and_settle(move |inner| inner.outbox.settle(id, held_until_ms, delivery))
    }
}
