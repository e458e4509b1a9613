//! [`PostgresConfig`]: which PostgreSQL database holds the runs, how the
//! connections to it are secured (`sslmode`, `sslrootcert` in its URL, as
//! libpq reads them: [`tls`](super::tls)), and the bounds on every wait for
//! it.

use std::fmt;
use std::time::Duration;

use leasehold_actors::StoreError;
use percent_encoding::percent_decode_str;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::tls::{RootCerts, SslMode, Tls};

/// How to open a [`PostgresStore`](super::PostgresStore).
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    /// The database's URL: `postgres://user:password@host:port/database`,
    /// with `?sslmode=…&sslrootcert=PATH` as libpq takes them.
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

    /// The client's configuration, with the timeouts applied, and the
    /// connector that secures its connections as the URL's `sslmode` says.
    pub(super) fn client_config(
        &self,
    ) -> Result<(tokio_postgres::Config, MakeRustlsConnect), StoreError> {
        if !super::super::is_postgres_url(&self.url) {
            return Err(StoreError::invalid(format!(
                "the store URL {} is not a PostgreSQL URL: expected postgres://…",
                self.redacted()
            )));
        }
        let invalid = |e: &dyn fmt::Display| {
            StoreError::invalid(format!(
                "the store URL {} is not a valid PostgreSQL URL: {e}",
                self.redacted()
            ))
        };
        let (url, tls) = split_tls(&self.url).map_err(|e| invalid(&e))?;
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| invalid(&e))?;
        config
            .connect_timeout(self.connect_timeout)
            .application_name("leasehold")
            .ssl_mode(tls.mode.client_mode())
            .options(format!(
                "-c statement_timeout={} -c idle_in_transaction_session_timeout={}",
                self.statement_timeout.as_millis(),
                self.idle_in_transaction_timeout.as_millis()
            ));
        let connector = tls.connector().map_err(|e| {
            StoreError::invalid(format!(
                "cannot connect to the PostgreSQL store {} with sslmode={}: {e}",
                self.redacted(),
                tls.mode
            ))
        })?;
        Ok((config, connector))
    }

    /// The URL with its password, if any, hidden: what errors and logs show.
    pub fn redacted(&self) -> String {
        format!("`{}`", super::super::redact_url(&self.url))
    }
}

/// `url` without its `sslmode` and `sslrootcert` parameters (which the
/// client does not know, or knows only in part), and the TLS settings they
/// make. The other parameters are left as they were written.
fn split_tls(url: &str) -> Result<(String, Tls), String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), Tls::default()));
    };
    let mut tls = Tls::default();
    let mut kept = Vec::new();
    for param in query.split('&') {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        let value = || percent_decode_str(value).decode_utf8_lossy().into_owned();
        match key {
            "sslmode" => tls.mode = SslMode::parse(&value())?,
            "sslrootcert" => tls.roots = Some(RootCerts::parse(Some(&value()))),
            _ => kept.push(param),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, tls))
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

    /// The error of the client configuration of `url`.
    fn refused(url: &str) -> StoreError {
        PostgresConfig::new(url)
            .client_config()
            .err()
            .expect("the URL is refused")
    }

    #[test]
    fn the_password_never_shows() {
        let config = PostgresConfig::new("postgres://lh:s3cret@db:5432/runs");
        assert_eq!(config.redacted(), "`postgres://lh:***@db:5432/runs`");
        assert!(!format!("{config:?}").contains("s3cret"));
        let err = refused("postgres://lh:s3cret@db:notaport/runs");
        assert!(!err.message().contains("s3cret"), "{err}");
    }

    #[test]
    fn sslmode_and_sslrootcert_are_read_as_libpq_reads_them() {
        let (url, tls) = split_tls(
            "postgres://lh@db/runs?connect_timeout=5&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(url, "postgres://lh@db/runs?connect_timeout=5");
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(
            tls.roots,
            Some(RootCerts::File(std::path::PathBuf::from("/etc/ca.pem")))
        );
        let (url, tls) = split_tls("postgres://lh@db/runs").unwrap();
        assert_eq!(
            (url.as_str(), tls),
            ("postgres://lh@db/runs", Tls::default())
        );
        assert_eq!(Tls::default().mode, SslMode::Prefer, "libpq's default");
        let (config, _) = PostgresConfig::new("postgres://lh@db/runs?sslmode=require")
            .client_config()
            .unwrap();
        assert_eq!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
    }

    #[test]
    fn an_unknown_sslmode_is_refused_by_name() {
        let err = refused("postgres://lh:s3cret@db/runs?sslmode=verify");
        assert!(err.message().contains("unknown sslmode `verify`"), "{err}");
        assert!(!err.message().contains("s3cret"), "{err}");
    }

    #[test]
    fn only_postgres_urls_are_taken() {
        let err = refused("mysql://db/runs");
        assert!(err.message().contains("not a PostgreSQL URL"), "{err}");
        assert!(
            PostgresConfig::new("postgresql://db/runs")
                .client_config()
                .is_ok()
        );
    }
}
