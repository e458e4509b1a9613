//! The PostgreSQL store's commands: a person's controls stored for the
//! executor that holds a run (`0004_commands.sql`). Storing one notifies
//! the run's [`StoreChange::Command`] in the same statement; taking them is
//! one `DELETE … RETURNING` of the commands of the runs the taker holds, so
//! each is taken once, by the owner only.

use leasehold_actors::{RunCommand, StoreChange, StoreError, StoredCommand};
use tokio_postgres::types::ToSql;

use super::rows::{from_json, to_json, to_u64};
use super::{Inner, failed, no_run, notice};

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
