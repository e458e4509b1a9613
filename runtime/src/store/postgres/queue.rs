//! The PostgreSQL store's queue and commands ([`QueueStore`]): queued runs
//! are claimed by one statement that locks them with `SKIP LOCKED`, so of
//! executors claiming at once each claims different runs; a person's
//! controls are stored for the executor that holds a run
//! (`0004_commands.sql`). Storing one notifies
//! the run's [`StoreChange::Command`] in the same statement; taking them is
//! one `DELETE … RETURNING` of the commands of the runs the taker holds, so
//! each is taken once, by the owner only.

use leasehold_actors::keyed_limits::RunLabels;
use leasehold_actors::{
    QueueClaim, QueueStore, RunCommand, RunRecord, RunStatus, StoreChange, StoreError, StoreFuture,
    StoredCommand,
};
use tokio_postgres::types::ToSql;

use super::rows::{RUN_COLUMNS, from_json, status_name, to_i64, to_json, to_u64};
use super::{Inner, PostgresStore, failed, no_run, notice};

impl Inner {
    pub(super) async fn send_command(
        &self,
        run_id: &str,
        command: &RunCommand,
    ) -> Result<u64, StoreError> {
        let doing = format!("storing a command for run `{run_id}`");
        let value = to_json(command, &doing)?;
        let payload = notice(&StoreChange::Command {
            run_id: run_id.to_owned(),
        })?;
        let row = self
            .client()
            .await?
            .query_opt(
                "WITH sent AS (INSERT INTO commands (run_id, command) \
                 SELECT run_id, $2 FROM runs WHERE run_id = $1 RETURNING id), \
                 notified AS (SELECT id, pg_notify('leasehold', $3) FROM sent) \
                 SELECT id FROM notified",
                &[&run_id, &value, &payload],
            )
            .await
            .map_err(|e| failed(&doing, &e))?
            .ok_or_else(|| no_run(run_id))?;
        to_u64(row.get(0), &"a command's id")
    }

    /// How many commands wait for `run_id` (`commands_by_run` answers it).
    pub(super) async fn count_commands(&self, run_id: &str) -> Result<u64, StoreError> {
        let doing = format!("counting the commands of run `{run_id}`");
        let row = self
            .client()
            .await?
            .query_one(
                "SELECT count(*) FROM commands WHERE run_id = $1",
                &[&run_id],
            )
            .await
            .map_err(|e| failed(&doing, &e))?;
        to_u64(row.get(0), &doing)
    }

    pub(super) async fn take_commands(
        &self,
        owner_id: &str,
    ) -> Result<Vec<StoredCommand>, StoreError> {
        let client = self.client().await?;
        let params: [&(dyn ToSql + Sync); 1] = [&owner_id];
        // One statement: of two takers, the second finds the rows gone.
        let taking = client.query(
            "DELETE FROM commands c USING runs r \
             WHERE c.run_id = r.run_id AND r.owner_id = $1 \
             RETURNING c.id, c.run_id, c.command",
            &params,
        );
        let rows = taking
            .await
            .map_err(|e| failed(&format_args!("taking the commands of `{owner_id}`"), &e))?;
        let mut taken = rows
            .iter()
            .map(|row| {
                Ok(StoredCommand {
                    id: to_u64(row.get(0), &"a command's id")?,
                    run_id: row.get(1),
                    command: from_json(row.get(2), &"a stored command")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        taken.sort_by_key(|command| command.id);
        Ok(taken)
    }
}

impl Inner {
    async fn count_queued_by_tenant(
        &self,
    ) -> Result<std::collections::BTreeMap<String, u64>, StoreError> {
        let doing = "counting the queued runs of each tenant";
        let queued = status_name(RunStatus::Queued)?;
        let rows = self
            .client()
            .await?
            .query(
                "SELECT coalesce(tenant, 'default'), count(*) FROM runs WHERE status = $1 \
                 GROUP BY 1",
                &[&queued],
            )
            .await
            .map_err(|e| failed(&doing, &e))?;
        rows.iter()
            .map(|row| {
                let tenant: String = row.get(0);
                let count = to_u64(row.get(1), &format_args!("the queued runs of `{tenant}`"))?;
                Ok((tenant, count))
            })
            .collect()
    }
}

/// The queued runs (status `queued`) with their turn in the fair order
/// (`tenancy::fair_order`): each tenant's queued runs numbered oldest
/// first, after the runs it has running (status `running`), so that a
/// tenant holding many live runs waits for one holding none.
fn fair_turns(running: &str, queued: &str) -> String {
    format!(
        "SELECT w.run_id, w.turn + coalesce(rc.n, 0) AS turn FROM \
         (SELECT run_id, coalesce(tenant, 'default') AS t, row_number() OVER \
         (PARTITION BY coalesce(tenant, 'default') ORDER BY run_id COLLATE \"C\") AS turn \
         FROM runs WHERE status = {queued}) w LEFT JOIN \
         (SELECT coalesce(tenant, 'default') AS t, count(*) AS n FROM runs \
         WHERE status = {running} GROUP BY 1) rc ON rc.t = w.t"
    )
}

impl Inner {
    async fn claim_queued(&self, claim: &QueueClaim) -> Result<Vec<RunRecord>, StoreError> {
        let doing = "claiming queued runs";
        let now = to_i64(claim.now_ms, &"the claim time")?;
        let expires = claim.now_ms.saturating_add(claim.ttl_ms);
        let expires = to_i64(expires, &"the claimed lease's expiry")?;
        let max = u64::try_from(claim.max).unwrap_or(u64::MAX);
        let max = to_i64(max, &"the claim's limit")?;
        let owner_id = &claim.owner_id;
        let queued = status_name(RunStatus::Queued)?;
        let running = status_name(RunStatus::Running)?;
        // The change is `fencing::claim_queued`'s, in one statement: each
        // claimer locks the queued rows no other claimer holds in fair
        // turns across tenants (`tenancy::fair_order`: each tenant's
        // oldest first, its turns after the runs it has running, a turn's
        // runs oldest first), so
        // claimers at once take disjoint runs, and a run claimed meanwhile
        // is no longer queued when its lock is granted.
        self.load_runs(
            &format!(
                "WITH claimed AS (UPDATE runs SET status = $1, owner_id = $2, \
                     fence = fence + 1, lease_expires_at_ms = $3, reason = NULL, \
                     updated_at_ms = $4 \
                     WHERE run_id IN (SELECT r.run_id FROM runs r JOIN ({turns}) q \
                     ON q.run_id = r.run_id WHERE r.status = $5 \
                     ORDER BY q.turn, r.run_id COLLATE \"C\" LIMIT $6 \
                     FOR UPDATE OF r SKIP LOCKED) \
                     RETURNING {RUN_COLUMNS}), \
                 notified AS (SELECT claimed.*, pg_notify('leasehold', \
                     json_build_object('change', 'run', 'run_id', run_id)::text) FROM claimed) \
                     SELECT {RUN_COLUMNS} FROM notified ORDER BY run_id COLLATE \"C\"",
                turns = fair_turns("$1", "$5")
            ),
            &[&running, &owner_id, &expires, &now, &queued, &max],
            &doing,
        )
        .await
    }
}

impl Inner {
    /// [`claim_queued`](Inner::claim_queued) under keyed limits: the
    /// queue's runs are read in fair order with what their keys read (the
    /// tenant, the flow's name, what the flow asks of the limits), picked in that order while their keys have
    /// room, and claimed by one statement that takes only those still
    /// queued — of claimers at once picking the same run, one claims it.
    async fn claim_queued_within(&self, claim: &QueueClaim) -> Result<Vec<RunRecord>, StoreError> {
        let doing = "claiming queued runs within their keyed limits";
        let queued = status_name(RunStatus::Queued)?;
        let running = status_name(RunStatus::Running)?;
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT r.run_id, r.tenant, r.flow->>'name', r.flow->'keyed_limits' FROM runs r \
                     JOIN ({}) q ON q.run_id = r.run_id WHERE r.status = $2 \
                     ORDER BY q.turn, r.run_id COLLATE \"C\"",
                    fair_turns("$1", "$2")
                ),
                &[&running, &queued],
            )
            .await
            .map_err(|e| failed(&doing, &e))?;
        let mut room = claim.room.clone();
        let mut picked: Vec<String> = Vec::new();
        for row in &rows {
            if picked.len() >= claim.max {
                break;
            }
            let flow: Option<String> = row.get(2);
            let asked: Option<serde_json::Value> = row.get(3);
            let labels = RunLabels::from_parts(
                row.get(1),
                flow.as_deref().unwrap_or_default(),
                asked.as_ref(),
            );
            if room.take(&labels) {
                picked.push(row.get(0));
            }
        }
        if picked.is_empty() {
            return Ok(Vec::new());
        }
        let now = to_i64(claim.now_ms, &"the claim time")?;
        let expires = to_i64(
            claim.now_ms.saturating_add(claim.ttl_ms),
            &"the claimed lease's expiry",
        )?;
        let owner_id = &claim.owner_id;
        self.load_runs(
            &format!(
                "WITH claimed AS (UPDATE runs SET status = $1, owner_id = $2, \
                     fence = fence + 1, lease_expires_at_ms = $3, reason = NULL, \
                     updated_at_ms = $4 WHERE run_id = ANY($5) AND status = $6 \
                     RETURNING {RUN_COLUMNS}), \
                 notified AS (SELECT claimed.*, pg_notify('leasehold', \
                     json_build_object('change', 'run', 'run_id', run_id)::text) FROM claimed) \
                     SELECT {RUN_COLUMNS} FROM notified ORDER BY run_id COLLATE \"C\""
            ),
            &[&running, &owner_id, &expires, &now, &picked, &queued],
            &doing,
        )
        .await
    }
}

impl QueueStore for PostgresStore {
    fn claim_queued(&self, claim: QueueClaim) -> StoreFuture<Vec<RunRecord>> {
        self.with(move |inner| async move {
            if claim.room.is_unlimited() {
                inner.claim_queued(&claim).await
            } else {
                inner.claim_queued_within(&claim).await
            }
        })
    }

    fn count_queued_by_tenant(&self) -> StoreFuture<std::collections::BTreeMap<String, u64>> {
        self.with(move |inner| async move { inner.count_queued_by_tenant().await })
    }

    fn send_command(&self, run_id: &str, command: RunCommand) -> StoreFuture<u64> {
        let run_id = run_id.to_owned();
        self.with(move |inner| async move { inner.send_command(&run_id, &command).await })
    }

    fn count_commands(&self, run_id: &str) -> StoreFuture<u64> {
        let run_id = run_id.to_owned();
        self.with(move |inner| async move { inner.count_commands(&run_id).await })
    }

    fn take_commands(&self, owner_id: &str) -> StoreFuture<Vec<StoredCommand>> {
        let owner_id = owner_id.to_owned();
        self.with(move |inner| async move { inner.take_commands(&owner_id).await })
    }
}
