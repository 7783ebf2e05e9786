//! TLS to PostgreSQL, as libpq's `sslmode` and `sslrootcert` say it, for
//! the query sessions (tokio-postgres over rustls) and the replication
//! session (pgwire-replication's own rustls) alike.
//!
//! tokio-postgres parses only `disable`, `prefer` and `require`, so the
//! two settings are taken out of the DSN here and applied by hand:
//! - `disable`: no TLS;
//! - `prefer` (libpq's default) and `require`: encrypted, the certificate
//!   not checked (as libpq does without a root certificate); `prefer`
//!   falls back to plain text if the server has no TLS;
//! - `verify-ca`: the chain checked against the roots, not the name;
//! - `verify-full`: the chain and the host name checked.
//!
//! Roots: `sslrootcert` (a PEM file) when given, else the Mozilla roots.
//! A client certificate (`sslcert` and `sslkey`, PEM files, both or
//! neither) is presented when given, for servers that authenticate with
//! `cert` in `pg_hba.conf`; libpq's default files under `~/.postgresql`
//! are not read.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// What a DSN says about TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tls {
    pub mode: Mode,
    pub root_cert: Option<PathBuf>,
    /// The client certificate and its key, presented when both are given.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// Takes `sslmode`, `sslrootcert`, `sslcert` and `sslkey` out of `dsn`
/// (key = value form or a `postgresql://` URL's query), returning the
/// rest for tokio-postgres.
pub(crate) fn split(dsn: &str) -> Result<(String, Tls), String> {
    let mut tls = Tls {
        mode: Mode::Prefer,
        root_cert: None,
        client_cert: None,
    };
    let (mut cert_file, mut key_file) = (None, None);
    let mut take = |key: &str, value: &str| -> Result<bool, String> {
        match key {
            "sslmode" => {
                tls.mode = match value {
                    "disable" => Mode::Disable,
                    "allow" | "prefer" => Mode::Prefer,
                    "require" => Mode::Require,
                    "verify-ca" => Mode::VerifyCa,
                    "verify-full" => Mode::VerifyFull,
                    other => {
                        return Err(format!(
                            "sslmode \"{other}\" is not one of disable, prefer, require, verify-ca, verify-full"
                        ));
                    }
                };
                Ok(true)
            }
            "sslrootcert" => {
                tls.root_cert = Some(PathBuf::from(value));
                Ok(true)
            }
            "sslcert" => {
                cert_file = Some(PathBuf::from(value));
                Ok(true)
            }
            "sslkey" => {
                key_file = Some(PathBuf::from(value));
                Ok(true)
            }
            _ => Ok(false),
        }
    };
    let rest = if let Some((base, query)) = dsn
        .split_once('?')
        .filter(|_| dsn.starts_with("postgres://") || dsn.starts_with("postgresql://"))
    {
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if !take(k, v)? {
                kept.push(pair);
            }
        }
        if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        }
    } else {
        let mut kept = Vec::new();
        for word in dsn.split_whitespace() {
            let (k, v) = word.split_once('=').unwrap_or((word, ""));
            if !take(k.trim(), v.trim_matches('\''))? {
                kept.push(word);
            }
        }
        kept.join(" ")
    };
    tls.client_cert = match (cert_file, key_file) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (Some(_), None) => {
            return Err(
                "sslcert is given without sslkey: give the client certificate's key file too"
                    .into(),
            );
        }
        (None, Some(_)) => {
            return Err(
                "sslkey is given without sslcert: give the client certificate file too".into(),
            );
        }
    };
    if tls.client_cert.is_some() && tls.mode == Mode::Disable {
        return Err("sslcert and sslkey need TLS, which sslmode=disable turns off".into());
    }
    if tls.root_cert.is_some() && matches!(tls.mode, Mode::Prefer | Mode::Require) {
        // libpq: a root certificate given turns require into verify-ca.
        tls.mode = Mode::VerifyCa;
    }
    Ok((rest, tls))
}

impl Tls {
    /// The rustls configuration for this mode; None for `disable`.
    pub(crate) fn client_config(&self) -> Result<Option<rustls::ClientConfig>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let config = match self.mode {
            Mode::Disable => return Ok(None),
            Mode::Prefer | Mode::Require => self.with_client_auth(
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(Unchecked(provider))),
            )?,
            Mode::VerifyCa | Mode::VerifyFull => {
                let roots = Arc::new(self.roots()?);
                let chain = rustls::client::WebPkiServerVerifier::builder_with_provider(
                    roots.clone(),
                    provider.clone(),
                )
                .build()
                .map_err(|e| e.to_string())?;
                if self.mode == Mode::VerifyFull {
                    self.with_client_auth(builder.with_root_certificates(roots))?
                } else {
                    self.with_client_auth(
                        builder
                            .dangerous()
                            .with_custom_certificate_verifier(Arc::new(AnyName(chain))),
                    )?
                }
            }
        };
        Ok(Some(config))
    }

    /// Finishes `builder` with the client certificate, if one is given.
    fn with_client_auth(
        &self,
        builder: rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>,
    ) -> Result<rustls::ClientConfig, String> {
        let Some((cert, key)) = &self.client_cert else {
            return Ok(builder.with_no_client_auth());
        };
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("sslcert {}: {e}", cert.display()))?;
        if chain.is_empty() {
            return Err(format!("sslcert {}: no certificate in it", cert.display()));
        }
        let key_der = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| format!("sslkey {}: {e}", key.display()))?;
        builder.with_client_auth_cert(chain, key_der).map_err(|e| {
            format!(
                "sslcert {} with sslkey {}: {e} (an X.509 v3 certificate whose key is sslkey is needed)",
                cert.display(),
                key.display()
            )
        })
    }

    fn roots(&self) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        match &self.root_cert {
            Some(path) => {
                let certs = CertificateDer::pem_file_iter(path)
                    .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                for cert in certs {
                    let cert = cert.map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        Ok(roots)
    }

    /// The same settings for the replication session.
    pub(crate) fn replication(&self) -> pgwire_replication::TlsConfig {
        use pgwire_replication::{SslMode, TlsConfig};
        let config = match self.mode {
            Mode::Disable => return TlsConfig::disabled(),
            Mode::Prefer => {
                let mut prefer = TlsConfig::require();
                prefer.mode = SslMode::Prefer;
                prefer
            }
            Mode::Require => TlsConfig::require(),
            Mode::VerifyCa => TlsConfig::verify_ca(self.root_cert.clone()),
            Mode::VerifyFull => TlsConfig::verify_full(self.root_cert.clone()),
        };
        match &self.client_cert {
            Some((cert, key)) => config.with_client_cert(cert, key),
            None => config,
        }
    }
}

/// `require`: encrypted, any certificate (libpq without a root file).
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain is checked, the host name is not.
#[derive(Debug)]
struct AnyName(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssl_settings_leave_the_dsn_for_tokio_postgres() {
        let (rest, tls) =
            split("host=db user=weir sslmode=verify-full sslrootcert=/ca.pem").unwrap();
        assert_eq!(rest, "host=db user=weir");
        assert_eq!(tls.mode, Mode::VerifyFull);
        assert_eq!(tls.root_cert, Some(PathBuf::from("/ca.pem")));
        let (rest, tls) =
            split("postgresql://weir@db:5432/app?sslmode=require&application_name=x").unwrap();
        assert_eq!(rest, "postgresql://weir@db:5432/app?application_name=x");
        assert_eq!(tls.mode, Mode::Require);
        let (_, tls) = split("host=db").unwrap();
        assert_eq!(tls.mode, Mode::Prefer);
        let (_, tls) = split("host=db sslmode=require sslrootcert=/ca.pem").unwrap();
        assert_eq!(tls.mode, Mode::VerifyCa);
        assert!(split("host=db sslmode=sometimes").is_err());
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_tls() {
        let (rest, tls) = split("host=db user=weir sslcert=/c.pem sslkey=/k.pem").unwrap();
        assert_eq!(rest, "host=db user=weir");
        assert_eq!(
            tls.client_cert,
            Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem")))
        );
        let alone = split("host=db sslcert=/c.pem").unwrap_err();
        assert!(alone.contains("without sslkey"), "{alone}");
        let alone = split("host=db sslkey=/k.pem").unwrap_err();
        assert!(alone.contains("without sslcert"), "{alone}");
        let plain = split("host=db sslmode=disable sslcert=/c.pem sslkey=/k.pem").unwrap_err();
        assert!(plain.contains("sslmode=disable"), "{plain}");
        // Files that are not there are named when the session is set up.
        let missing = tls.client_config().unwrap_err();
        assert!(missing.contains("sslcert /c.pem"), "{missing}");
    }
}
