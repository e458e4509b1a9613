//! The PostgreSQL store's idempotency keys (`0012_idempotency_keys.sql`):
//! a keyed creation is one transaction that takes the key — inserted, or
//! taken over when its retention is over — and creates the run; or, when
//! the key holds, reads the run it names and creates nothing. Executors
//! creating under one key at once queue on the key's row: one creates, the
//! others find it held (the condition of the take-over is evaluated on the
//! row as the first left it). A key goes with its run when the run is
//! purged (a cascading reference), so a key that is kept names a run.

use leasehold_actors::{IdempotencyKey, KeyedCreation, RunRecord, StoreError};

use super::rows::to_i64;
use super::runs::insert_run;
use super::{Inner, failed};

impl Inner {
    pub(super) async fn create_run_keyed(
        &self,
        record: RunRecord,
        key: IdempotencyKey,
    ) -> Result<KeyedCreation, StoreError> {
        let doing = format!("creating run `{}` under an idempotency key", record.run_id);
        let at_ms = to_i64(key.at_ms, &"the key's time")?;
        let retention_ms = to_i64(key.retention_ms, &"the key's retention")?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| failed(&doing, &e))?;
        let taken = tx
            .query(
                "INSERT INTO idempotency_keys (key, run_id, fingerprint, at_ms, retention_ms) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (key) DO UPDATE SET run_id = EXCLUDED.run_id, \
                 fingerprint = EXCLUDED.fingerprint, at_ms = EXCLUDED.at_ms, \
                 retention_ms = EXCLUDED.retention_ms \
                 WHERE idempotency_keys.at_ms + idempotency_keys.retention_ms <= EXCLUDED.at_ms \
                 RETURNING run_id",
                &[
                    &key.key,
                    &record.run_id,
                    &key.fingerprint,
                    &at_ms,
                    &retention_ms,
                ],
            )
            .await
            .map_err(|e| failed(&doing, &e))?;
        if taken.is_empty() {
            let held = tx
                .query_one(
                    "SELECT run_id, fingerprint FROM idempotency_keys WHERE key = $1",
                    &[&key.key],
                )
                .await
                .map_err(|e| failed(&doing, &e))?;
            tx.commit().await.map_err(|e| failed(&doing, &e))?;
            return Ok(KeyedCreation::Existing {
                run_id: held.get(0),
                fingerprint: held.get(1),
            });
        }
        insert_run(&tx, &record).await?;
        tx.commit().await.map_err(|e| failed(&doing, &e))?;
        Ok(KeyedCreation::Created)
    }
}
