//! The PostgreSQL store's learned paces (`0006_paces.sql`): one row per
//! pace key, shared by every executor of the database; the last writer of
//! a key wins, which is what learning wants (each writer folded the newest
//! calls it saw into what it had loaded).

use leasehold_actors::{Clock, Pace, PaceStore, StoreError, StoreFuture, SystemClock};

use super::rows::{to_i64, to_json};
use super::{Inner, PostgresStore, failed};

impl Inner {
    pub(super) async fn load_paces(&self) -> Result<Vec<(String, Pace)>, StoreError> {
        let doing = "reading the learned paces";
        let rows = self
            .client()
            .await?
            .query("SELECT key, pace FROM paces ORDER BY key", &[])
            .await
            .map_err(|e| failed(&doing, &e))?;
        let mut paces = Vec::with_capacity(rows.len());
        for row in rows {
            let key: String = row.get(0);
            // A pace is what was learned, not what was done: one that
            // cannot be read is learned again, not a reason to refuse the
            // store.
            match serde_json::from_value(row.get(1)) {
                Ok(pace) => paces.push((key, pace)),
                Err(error) => {
                    tracing::warn!(%key, %error, "a learned pace in the store is unreadable: ignored");
                }
            }
        }
        Ok(paces)
    }

    pub(super) async fn save_paces(
        &self,
        paces: &[(String, Option<Pace>)],
    ) -> Result<(), StoreError> {
        let doing = "saving the learned paces";
        let now = to_i64(SystemClock.now_unix_ms(), &"the time")?;
        let client = self.client().await?;
        for (key, pace) in paces {
            match pace {
                Some(pace) => {
                    let value = to_json(pace, &format_args!("the pace of `{key}`"))?;
                    let statement = client
                        .prepare_cached(
                            "INSERT INTO paces (key, pace, updated_at_ms) VALUES ($1, $2, $3) \
                             ON CONFLICT (key) DO UPDATE SET pace = $2, updated_at_ms = $3",
                        )
                        .await
                        .map_err(|e| failed(&doing, &e))?;
                    client
                        .execute(&statement, &[key, &value, &now])
                        .await
                        .map_err(|e| failed(&doing, &e))?;
                }
                None => {
                    client
                        .execute("DELETE FROM paces WHERE key = $1", &[key])
                        .await
                        .map_err(|e| failed(&doing, &e))?;
                }
            }
        }
        Ok(())
    }
}

impl PaceStore for PostgresStore {
    fn load_paces(&self) -> StoreFuture<Vec<(String, Pace)>> {
        self.with(move |inner| async move { inner.load_paces().await })
    }

    fn save_paces(&self, paces: Vec<(String, Option<Pace>)>) -> StoreFuture<()> {
        self.with(move |inner| async move { inner.save_paces(&paces).await })
    }
}
