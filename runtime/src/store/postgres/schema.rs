//! The PostgreSQL store's versioned schema: migrations embedded in the
//! binary, applied in order at start, each recorded in `schema_migrations`.
//!
//! Applying them takes a transaction-scoped advisory lock first, so two
//! processes starting at once on a fresh database apply each migration once
//! (the second waits, then finds it recorded), and applying them again is a
//! no-op. A database whose schema is newer than this build knows is refused
//! with a clear error instead of being misread.

use deadpool_postgres::Client;
use leasehold_actors::{Clock, StoreError, SystemClock};

use super::failed;
use super::rows::to_i64;

/// The migrations, in order: version and SQL.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("migrations/0001_init.sql")),
    (2, include_str!("migrations/0002_listing.sql")),
    (3, include_str!("migrations/0003_queue.sql")),
    (4, include_str!("migrations/0004_commands.sql")),
    (5, include_str!("migrations/0005_retention.sql")),
    (6, include_str!("migrations/0006_paces.sql")),
    (7, include_str!("migrations/0007_fork.sql")),
    (8, include_str!("migrations/0008_outbox.sql")),
    (9, include_str!("migrations/0009_trace_parent.sql")),
    (10, include_str!("migrations/0010_run_counts.sql")),
    (11, include_str!("migrations/0011_snapshot_bases.sql")),
    (12, include_str!("migrations/0012_idempotency_keys.sql")),
    (13, include_str!("migrations/0013_tenants.sql")),
];

/// The advisory lock key that serializes migrations ("lh_migr" in ASCII).
const MIGRATION_LOCK: i64 = 0x006c_685f_6d69_6772;

/// The schema version this build reads and writes.
pub(super) fn current_version() -> i32 {
    MIGRATIONS.last().map_or(0, |(version, _)| *version)
}

/// Applies every migration the database lacks, in one transaction.
pub(super) async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let doing = "applying the store's schema migrations";
    let tx = client.transaction().await.map_err(|e| failed(&doing, &e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(|e| failed(&doing, &e))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version integer PRIMARY KEY,
             applied_at_ms bigint NOT NULL
         )",
    )
    .await
    .map_err(|e| failed(&doing, &e))?;
    let applied: i32 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            &[],
        )
        .await
        .map_err(|e| failed(&doing, &e))?
        .get(0);
    if applied > current_version() {
        return Err(StoreError::corrupt(format!(
            "the PostgreSQL store's schema is at version {applied}, but this build knows only up \
             to version {}; it was migrated by a later leasehold: refusing to use it",
            current_version()
        )));
    }
    let now_ms = to_i64(SystemClock.now_unix_ms(), &"the migration time")?;
    for (version, sql) in MIGRATIONS.iter().filter(|(version, _)| *version > applied) {
        tx.batch_execute(sql)
            .await
            .map_err(|e| failed(&format_args!("applying schema migration {version}"), &e))?;
        tx.execute(
            "INSERT INTO schema_migrations (version, applied_at_ms) VALUES ($1, $2)",
            &[version, &now_ms],
        )
        .await
        .map_err(|e| failed(&doing, &e))?;
    }
    tx.commit().await.map_err(|e| failed(&doing, &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_from_one_without_gaps() {
        for (index, (version, sql)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(usize::try_from(*version).ok(), Some(index + 1));
            assert!(!sql.trim().is_empty());
        }
    }
}
