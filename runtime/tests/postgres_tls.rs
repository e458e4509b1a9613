//! TLS to PostgreSQL: the store's URL says how a connection is secured
//! (`sslmode`, `sslrootcert`, as libpq reads them), tried against a real
//! cluster that takes only TLS connections (`ssl = on`, a `hostssl`-only
//! `pg_hba.conf`) with a certificate made here by a CA made here.
//!
//! Since the cluster lets in no TCP connection without TLS, a store that
//! connects (its migrations applied, its `LISTEN` in place, a run listed)
//! has connected over TLS.

use leasehold::RunStore;
use leasehold::store::{PostgresConfig, PostgresStore};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

#[path = "support/postgres.rs"]
mod postgres;

/// A certificate authority of the test's own.
struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Authority {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = KeyPair::generate().expect("a CA key");
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).expect("a CA certificate"),
        }
    }

    /// The server certificate and key for `names`, signed by this CA.
    fn server(&self, names: &[&str]) -> postgres::ServerTls {
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let params = CertificateParams::new(names).expect("server params");
        let key = KeyPair::generate().expect("a server key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a server certificate");
        postgres::ServerTls {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// This CA's certificate, written as a PEM file in `dir`.
    fn root_file(&self, dir: &tempfile::TempDir, name: &str) -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, self.issuer.pem()).expect("the root is written");
        path.display().to_string()
    }
}

/// A cluster serving a certificate for `127.0.0.1` only, signed by `ca`.
fn cluster(ca: &Authority) -> postgres::Cluster {
    postgres::tls_cluster(&ca.server(&["127.0.0.1"]))
}

/// Connects with `params` appended to a new database's URL, and lists
/// runs through the store; the error otherwise.
async fn try_connect(url: &str, params: &str) -> Result<(), String> {
    let config = PostgresConfig::new(format!("{url}?{params}"));
    let store = PostgresStore::connect(config)
        .await
        .map_err(|e| e.to_string())?;
    store.list_runs().await.map_err(|e| e.to_string())?;
    Ok(())
}

#[tokio::test]
async fn verify_full_connects_with_the_right_root_and_refuses_another() {
    let ca = Authority::new("leasehold test CA");
    let other = Authority::new("someone else's CA");
    let cluster = cluster(&ca);
    let files = tempfile::tempdir().expect("a directory");
    let root = ca.root_file(&files, "root.crt");
    let wrong_root = other.root_file(&files, "other.crt");
    let url = cluster.database();

    try_connect(&url, &format!("sslmode=verify-full&sslrootcert={root}"))
        .await
        .expect("verify-full with the CA that signed the server's certificate connects");

    let refused = try_connect(
        &url,
        &format!("sslmode=verify-full&sslrootcert={wrong_root}"),
    )
    .await
    .expect_err("verify-full with another CA is refused");
    assert!(
        refused.contains("TLS handshake") && refused.contains("invalid peer certificate"),
        "the error says the certificate was not trusted: {refused}"
    );
    // As with libpq, `require` given a root checks the chain against it.
    try_connect(&url, &format!("sslmode=require&sslrootcert={wrong_root}"))
        .await
        .expect_err("require with another CA's root is refused");
}

#[tokio::test]
async fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
    let ca = Authority::new("leasehold test CA");
    let cluster = cluster(&ca);
    let files = tempfile::tempdir().expect("a directory");
    let root = ca.root_file(&files, "root.crt");
    // The certificate names 127.0.0.1; `localhost` reaches the same server
    // under a name the certificate does not hold.
    let url = cluster.database().replace("127.0.0.1", "localhost");

    let refused = try_connect(&url, &format!("sslmode=verify-full&sslrootcert={root}"))
        .await
        .expect_err("verify-full to a name the certificate does not hold is refused");
    assert!(
        refused.contains("invalid peer certificate") && refused.contains("not valid for name"),
        "the error says the certificate is for another name: {refused}"
    );
    try_connect(&url, &format!("sslmode=verify-ca&sslrootcert={root}"))
        .await
        .expect("verify-ca checks the chain, not the name");
}

#[tokio::test]
async fn require_connects_without_a_root_and_disable_is_refused_by_a_tls_only_server() {
    let ca = Authority::new("leasehold test CA");
    let cluster = cluster(&ca);
    let url = cluster.database();

    try_connect(&url, "sslmode=require")
        .await
        .expect("require encrypts without checking the certificate");

    let refused = try_connect(&url, "sslmode=disable")
        .await
        .expect_err("a connection without TLS is refused by a hostssl-only server");
    assert!(
        refused.contains("no pg_hba.conf entry") && refused.contains("no encryption"),
        "the server's refusal is passed on: {refused}"
    );
}

#[tokio::test]
async fn an_unknown_sslmode_is_refused_before_connecting() {
    let error = PostgresStore::open(PostgresConfig::new(
        "postgres://leasehold@db.internal/runs?sslmode=verify_full",
    ))
    .expect_err("an unknown sslmode is refused");
    assert!(
        error.to_string().contains("unknown sslmode `verify_full`"),
        "{error}"
    );
}
