//! How the PostgreSQL store's connections are secured: libpq's `sslmode`
//! and `sslrootcert`, read from the store's URL, made into a rustls
//! connector for every connection (the pool's and the `LISTEN` one).
//!
//! The modes mean what libpq says they mean:
//!
//! | `sslmode` | encrypted | certificate checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default) | if the server offers it | no |
//! | `require` | always | no; against `sslrootcert`'s roots when it is given, as libpq does |
//! | `verify-ca` | always | signed by a trusted root |
//! | `verify-full` | always | signed by a trusted root, and issued for the host connected to |
//!
//! The trusted roots are the certificates of the PEM file `sslrootcert`
//! names (a private CA), or the platform's roots when it is absent or
//! `system`. `allow` (plain first, then TLS) is refused: it is a downgrade
//! an attacker can choose, and the client cannot do it. Any other value is
//! refused with an error that names it.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{WebPkiSupportedAlgorithms, aws_lc_rs};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How much a connection is secured (libpq's `sslmode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, its certificate not checked.
    #[default]
    Prefer,
    /// Always TLS, the certificate checked only against `sslrootcert`.
    Require,
    /// Always TLS, the certificate signed by a trusted root.
    VerifyCa,
    /// Always TLS, the certificate signed by a trusted root and issued for
    /// the host.
    VerifyFull,
}

impl SslMode {
    /// The mode named `name`, or an error naming it.
    pub(super) fn parse(name: &str) -> Result<Self, String> {
        match name {
            "disable" => Ok(Self::Disable),
            "prefer" => Ok(Self::Prefer),
            "require" => Ok(Self::Require),
            "verify-ca" => Ok(Self::VerifyCa),
            "verify-full" => Ok(Self::VerifyFull),
            "allow" => Err(
                "sslmode `allow` is not supported (it tries a connection without TLS first): \
                 use `prefer`, `require`, `verify-ca` or `verify-full`"
                    .to_owned(),
            ),
            other => Err(format!(
                "unknown sslmode `{other}`: expected disable, prefer, require, verify-ca or \
                 verify-full"
            )),
        }
    }

    /// What the client asks of the server.
    pub(super) fn client_mode(self) -> tokio_postgres::config::SslMode {
        match self {
            Self::Disable => tokio_postgres::config::SslMode::Disable,
            Self::Prefer => tokio_postgres::config::SslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        })
    }
}

/// Where the trusted roots come from (libpq's `sslrootcert`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum RootCerts {
    /// The platform's roots (`sslrootcert` absent, or `system`).
    #[default]
    Platform,
    /// The certificates of this PEM file.
    File(PathBuf),
}

impl RootCerts {
    /// The roots `sslrootcert` names, if given.
    pub(super) fn parse(sslrootcert: Option<&str>) -> Self {
        match sslrootcert {
            None | Some("system") => Self::Platform,
            Some(path) => Self::File(PathBuf::from(path)),
        }
    }

    fn load(&self) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        match self {
            Self::Platform => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err(format!(
                        "no trusted root certificate found on this machine{}: give the \
                         database's CA with sslrootcert=PATH",
                        found
                            .errors
                            .first()
                            .map(|e| format!(" ({e})"))
                            .unwrap_or_default()
                    ));
                }
            }
            Self::File(path) => {
                let shown = path.display();
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                    .map_err(|e| {
                        format!("cannot read the certificates of sslrootcert `{shown}`: {e}")
                    })?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(format!(
                        "sslrootcert `{shown}` holds no usable PEM certificate"
                    ));
                }
            }
        }
        Ok(roots)
    }
}

/// The TLS settings of a store's URL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Tls {
    /// libpq's `sslmode`.
    pub(super) mode: SslMode,
    /// libpq's `sslrootcert`, if given.
    pub(super) roots: Option<RootCerts>,
}

impl Tls {
    /// The connector that secures each connection as the settings say;
    /// reads the roots it needs now, so that a missing file is an error
    /// before the first connection.
    pub(super) fn connector(&self) -> Result<MakeRustlsConnect, String> {
        let provider = Arc::new(aws_lc_rs::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?;
        let trusted = || {
            self.roots
                .as_ref()
                .unwrap_or(&RootCerts::Platform)
                .load()
                .map(Arc::new)
        };
        let verifier: Arc<dyn ServerCertVerifier> = match (self.mode, &self.roots) {
            (SslMode::VerifyFull, _) => {
                WebPkiServerVerifier::builder_with_provider(trusted()?, Arc::clone(&provider))
                    .build()
                    .map_err(|e| format!("cannot set up TLS: {e}"))?
            }
            (SslMode::VerifyCa, _) | (SslMode::Require, Some(_)) => Arc::new(Verifier {
                roots: Some(trusted()?),
                algorithms: provider.signature_verification_algorithms,
            }),
            (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => {
                Arc::new(Verifier {
                    roots: None,
                    algorithms: provider.signature_verification_algorithms,
                })
            }
        };
        let config = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

/// The certificate check of the modes below `verify-full`: with roots,
/// that the chain is signed by one of them (`verify-ca`); without, none.
/// Either way the handshake's signatures are checked, so the server holds
/// the key of the certificate it showed.
#[derive(Debug)]
struct Verifier {
    roots: Option<Arc<RootCertStore>>,
    /// The provider's signature algorithms.
    algorithms: WebPkiSupportedAlgorithms,
}

/// What a handshake signature check answers.
type Signed = Result<HandshakeSignatureValid, rustls::Error>;
/// A certificate, as the handshake carries it.
type Der<'a> = CertificateDer<'a>;
/// A handshake signature.
type Dss = DigitallySignedStruct;

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            verify_server_cert_signed_by_trust_anchor(
                &ParsedCertificate::try_from(end_entity)?,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(&self, message: &[u8], cert: &Der<'_>, dss: &Dss) -> Signed {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &Der<'_>, dss: &Dss) -> Signed {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_libpq_mode_but_allow_is_known() {
        for mode in [
            SslMode::Disable,
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ] {
            assert_eq!(SslMode::parse(&mode.to_string()), Ok(mode));
        }
        let allow = SslMode::parse("allow").unwrap_err();
        assert!(allow.contains("`allow` is not supported"), "{allow}");
        let unknown = SslMode::parse("verify_full").unwrap_err();
        assert!(
            unknown.contains("unknown sslmode `verify_full`"),
            "{unknown}"
        );
    }

    #[test]
    fn a_missing_root_file_is_an_error_naming_it() {
        let tls = Tls {
            mode: SslMode::VerifyFull,
            roots: Some(RootCerts::parse(Some("/nonexistent/root.crt"))),
        };
        let error = tls.connector().err().expect("an error");
        assert!(
            error.contains("sslrootcert `/nonexistent/root.crt`"),
            "{error}"
        );
    }

    #[test]
    fn system_means_the_platform_roots() {
        assert_eq!(RootCerts::parse(Some("system")), RootCerts::Platform);
        assert_eq!(RootCerts::parse(None), RootCerts::Platform);
        assert_eq!(
            RootCerts::parse(Some("/etc/ca.pem")),
            RootCerts::File(PathBuf::from("/etc/ca.pem"))
        );
    }
}
