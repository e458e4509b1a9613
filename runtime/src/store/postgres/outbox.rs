//! The PostgreSQL store's outbox (`0008_outbox.sql`): a notice is inserted
//! by the statement that writes the run's changed record
//! ([`Inner::change_run`]), so it lands with the change or not at all. Taking is one `UPDATE` of
//! the due rows, locked with `SKIP LOCKED`, that moves their due time
//! forward: of two takers, each holds different notices. Settling is
//! conditional on the hold the take left.
//!
//! [`Inner::change_run`]: super::Inner

use leasehold_actors::{Delivery, Notice, NoticeTake, Outbox, StoreError, StoreFuture};

use super::rows::{from_json, to_i64, to_json, to_u64};
use super::{Inner, PostgresStore, failed};

/// The `due_at_ms` and `notice` columns of the notice a change of a run's
/// record keeps, if any: what [`Inner::change_run`](super::Inner) inserts
/// in the statement that writes the record (both `NULL` for none).
pub(super) fn columns(
    notice: Option<&Notice>,
) -> Result<(Option<i64>, Option<serde_json::Value>), StoreError> {
    let Some(notice) = notice else {
        return Ok((None, None));
    };
    let doing = format!("keeping a notice of run `{}`", notice.run_id);
    let due = to_i64(
        notice.delivery.due_at_ms,
        &format_args!("the due time of {doing}"),
    )?;
    Ok((Some(due), Some(to_json(notice, &doing)?)))
}

impl Inner {
    pub(super) async fn take_notices(&self, take: NoticeTake) -> Result<Vec<Notice>, StoreError> {
        let doing = "taking notices";
        let now = to_i64(take.now_ms, &"the time of a take of notices")?;
        let until = to_i64(
            take.now_ms.saturating_add(take.hold_ms),
            &"the hold of a take of notices",
        )?;
        let max = i64::try_from(take.max).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "UPDATE outbox o SET due_at_ms = $2 FROM ( \
                 SELECT id FROM outbox WHERE due_at_ms <= $1 ORDER BY id LIMIT $3 \
                 FOR UPDATE SKIP LOCKED) due \
                 WHERE o.id = due.id RETURNING o.id, o.due_at_ms, o.notice",
            )
            .await
            .map_err(|e| failed(&doing, &e))?;
        let rows = client
            .query(&statement, &[&now, &until, &max])
            .await
            .map_err(|e| failed(&doing, &e))?;
        let mut taken = rows
            .iter()
            .map(|row| {
                let mut notice: Notice = from_json(row.get(2), &"a notice")?;
                notice.id = to_u64(row.get(0), &"a notice's id")?;
                notice.delivery.due_at_ms = to_u64(row.get(1), &"a notice's due time")?;
                Ok(notice)
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        taken.sort_by_key(|notice| notice.id);
        Ok(taken)
    }

    pub(super) async fn settle_notice(
        &self,
        id: u64,
        held_until_ms: u64,
        delivery: Option<Delivery>,
    ) -> Result<bool, StoreError> {
        let doing = format!("settling notice {id}");
        let id = to_i64(id, &doing)?;
        let held = to_i64(held_until_ms, &doing)?;
        let client = self.client().await?;
        let settled = match delivery {
            None => {
                let statement = client
                    .prepare_cached("DELETE FROM outbox WHERE id = $1 AND due_at_ms = $2")
                    .await
                    .map_err(|e| failed(&doing, &e))?;
                client
                    .execute(&statement, &[&id, &held])
                    .await
                    .map_err(|e| failed(&doing, &e))?
            }
            Some(delivery) => {
                let due = to_i64(delivery.due_at_ms, &doing)?;
                let value = to_json(&delivery, &doing)?;
                client
                    .execute(
                        "UPDATE outbox SET due_at_ms = $3, \
                         notice = jsonb_set(notice, '{delivery}', $4) \
                         WHERE id = $1 AND due_at_ms = $2",
                        &[&id, &held, &due, &value],
                    )
                    .await
                    .map_err(|e| failed(&doing, &e))?
            }
        };
        Ok(settled == 1)
    }
}

impl Outbox for PostgresStore {
    fn take_notices(&self, take: NoticeTake) -> StoreFuture<Vec<Notice>> {
        self.with(move |inner| async move { inner.take_notices(take).await })
    }

    fn settle_notice(
        &self,
        id: u64,
        held_until_ms: u64,
        delivery: Option<Delivery>,
    ) -> StoreFuture<bool> {
        self.with(
            move |inner| async move { inner.settle_notice(id, held_until_ms, delivery).await },
        )
    }
}
