//! The TLS acceptor for pgwire, built from `config.tls_cert` / `tls_key`
//! (PEM files) with rustls' ring provider. Without both files there is no
//! acceptor and pgwire answers an SSLRequest with 'N'.

use std::fs::File;
use std::io::{self, BufReader};
use std::path::Path;
use std::sync::Arc;

use pgwire::tokio::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::ring;

use crate::config::ServeConfig;

/// ALPN name PostgreSQL 17 clients send for direct TLS connections.
const POSTGRESQL_ALPN: &[u8] = b"postgresql";

pub(crate) fn acceptor(config: &ServeConfig) -> io::Result<Option<TlsAcceptor>> {
    match (&config.tls_cert, &config.tls_key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => load(cert, key).map(Some),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "TLS needs both a certificate and a private key",
        )),
    }
}

fn load(cert_path: &Path, key_path: &Path) -> io::Result<TlsAcceptor> {
    let with_path = |path: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let certs = rustls_pemfile::certs(&mut BufReader::new(
        File::open(cert_path).map_err(|e| with_path(cert_path, e))?,
    ))
    .collect::<Result<Vec<_>, _>>()
    .map_err(|e| with_path(cert_path, e))?;
    if certs.is_empty() {
        return Err(invalid(format!("{}: no certificate found", cert_path.display())));
    }
    let key = rustls_pemfile::private_key(&mut BufReader::new(
        File::open(key_path).map_err(|e| with_path(key_path, e))?,
    ))
    .map_err(|e| with_path(key_path, e))?
    .ok_or_else(|| invalid(format!("{}: no private key found", key_path.display())))?;

    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| invalid(e.to_string()))?;
    config.alpn_protocols = vec![POSTGRESQL_ALPN.to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}
