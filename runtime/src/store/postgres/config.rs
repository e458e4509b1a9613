//! [`PostgresConfig`]: which PostgreSQL database holds the runs, and the
//! bounds on every wait for it.

use std::fmt;
use std::time::Duration;

use leasehold_actors::StoreError;

/// How to open a [`PostgresStore`](super::PostgresStore).
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    /// The database's URL: `postgres://user:password@host:port/database`.
    pub url: String,
    /// At most this many connections in the pool.
    pub pool_size: usize,
    /// The longest wait to open a connection, and to get one from the pool.
    pub connect_timeout: Duration,
    /// The longest any one statement may run (PostgreSQL's
    /// `statement_timeout`), so that a locked row or a stuck server gives an
    /// error, not a hang.
    pub statement_timeout: Duration,
    /// The longest a connection may sit idle inside a transaction
    /// (PostgreSQL's `idle_in_transaction_session_timeout`): a process
    /// stopped in the middle of one of its transactions (SIGSTOP, a paused
    /// VM, a long GC pause of a host) has its session ended by the server
    /// and its row locks freed, instead of holding a run's row — and every
    /// other executor's sweep of that row — for as long as it is stopped.
    /// Its transaction is rolled back; its later writes are refused by the
    /// fence.
    pub idle_in_transaction_timeout: Duration,
}

impl PostgresConfig {
    /// The database at `url`, with a pool of 16 connections, a 10 s connect
    /// timeout, a 30 s statement timeout and a 5 s idle-in-transaction
    /// timeout.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            pool_size: 16,
            connect_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(30),
            idle_in_transaction_timeout: Duration::from_secs(5),
        }
    }

    /// The same with at most `pool_size` connections.
    #[must_use]
    pub fn with_pool_size(mut self, pool_size: usize) -> Self {
        self.pool_size = pool_size;
        self
    }

    /// The client's configuration, with the timeouts applied.
    pub(super) fn client_config(&self) -> Result<tokio_postgres::Config, StoreError> {
        if !super::super::is_postgres_url(&self.url) {
            return Err(StoreError::new(format!(
                "the store URL {} is not a PostgreSQL URL: expected postgres://…",
                self.redacted()
            )));
        }
        let mut config: tokio_postgres::Config = self.url.parse().map_err(|e| {
            StoreError::new(format!(
                "the store URL {} is not a valid PostgreSQL URL: {e}",
                self.redacted()
            ))
        })?;
        config
            .connect_timeout(self.connect_timeout)
            .application_name("leasehold")
            .options(format!(
                "-c statement_timeout={} -c idle_in_transaction_session_timeout={}",
                self.statement_timeout.as_millis(),
                self.idle_in_transaction_timeout.as_millis()
            ));
        Ok(config)
    }

    /// The URL with its password, if any, hidden: what errors and logs show.
    pub fn redacted(&self) -> String {
        format!("`{}`", super::super::redact_url(&self.url))
    }
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &self.redacted())
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field(
                "idle_in_transaction_timeout",
                &self.idle_in_transaction_timeout,
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_never_shows() {
        let config = PostgresConfig::new("postgres://lh:s3cret@db:5432/runs");
        assert_eq!(config.redacted(), "`postgres://lh:***@db:5432/runs`");
        assert!(!format!("{config:?}").contains("s3cret"));
        let err = PostgresConfig::new("postgres://lh:s3cret@db:notaport/runs")
            .client_config()
            .unwrap_err();
        assert!(!err.message.contains("s3cret"), "{err}");
    }

    #[test]
    fn only_postgres_urls_are_taken() {
        let err = PostgresConfig::new("mysql://db/runs")
            .client_config()
            .unwrap_err();
        assert!(err.message.contains("not a PostgreSQL URL"), "{err}");
        assert!(
            PostgresConfig::new("postgresql://db/runs")
                .client_config()
                .is_ok()
        );
    }
}
