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
    let with_path =
        |path: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let certs = rustls_pemfile::certs(&mut BufReader::new(
        File::open(cert_path).map_err(|e| with_path(cert_path, e))?,
    ))
    .collect::<Result<Vec<_>, _>>()
    .map_err(|e| with_path(cert_path, e))?;
    if certs.is_empty() {
        return Err(invalid(format!(
            "{}: no certificate found",
            cert_path.display()
        )));
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::client::danger::{
        HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
    };
    use tokio_rustls::rustls::crypto::ring;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, Error, SignatureScheme};

    use super::super::raw_tests::startup_packet;
    use super::super::tests::start;

    /// A self-signed P-256 certificate for `localhost` (valid until 2126),
    /// test-only.
    const CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBlTCCATugAwIBAgIUEZKs6uiEqzHS1no2e4jcEa/Y4awwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTEyOTEyNDY1M1oYDzIxMjYxMTA1
MTI0NjUzWjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAARp9UTjk/sriIOxsMIxcDKO7spoFk8exhKk77F5LU5ebQvnbwW3gWpJ
ND9coY2vRRDOCgFaWB1qeDMkLUFUzEfYo2kwZzAdBgNVHQ4EFgQUie07oe4QXtNA
gGdkKF19n5ZiI18wHwYDVR0jBBgwFoAUie07oe4QXtNAgGdkKF19n5ZiI18wDwYD
VR0TAQH/BAUwAwEB/zAUBgNVHREEDTALgglsb2NhbGhvc3QwCgYIKoZIzj0EAwID
SAAwRQIgAZt/verxJOzEJvecKf5UPps4EctIvI5xenAk0B8wYDcCIQD7crZll4WY
EgF3ozfWkof70gam8PhF1u0wTKew1Nimsg==
-----END CERTIFICATE-----
";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgYJ0HSNdeM8sm0yKb
UBkbS2fWMMf9lmEtz9IFGIeg2HihRANCAARp9UTjk/sriIOxsMIxcDKO7spoFk8e
xhKk77F5LU5ebQvnbwW3gWpJND9coY2vRRDOCgFaWB1qeDMkLUFUzEfY
-----END PRIVATE KEY-----
";

    /// The test only checks that the server speaks TLS, not who it is.
    #[derive(Debug)]
    struct AcceptAnyCertificate;

    impl ServerCertVerifier for AcceptAnyCertificate {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp_response: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            _message: &[u8],
            _cert: &CertificateDer<'_>,
            _dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            Ok(HandshakeSignatureValid::assertion())
        }

        fn verify_tls13_signature(
            &self,
            _message: &[u8],
            _cert: &CertificateDer<'_>,
            _dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            Ok(HandshakeSignatureValid::assertion())
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            ring::default_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    #[tokio::test]
    async fn ssl_request_upgrades_to_tls() {
        let pem_dir = tempfile::tempdir().expect("tempdir");
        let cert = pem_dir.path().join("server.crt");
        let key = pem_dir.path().join("server.key");
        std::fs::write(&cert, CERT).expect("cert");
        std::fs::write(&key, KEY).expect("key");
        let server = start(|c| {
            c.tls_cert = Some(cert.clone());
            c.tls_key = Some(key.clone());
        })
        .await;

        let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
        tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
            .await
            .expect("SSLRequest");
        let mut answer = [0u8; 1];
        tcp.read_exact(&mut answer).await.expect("answer");
        assert_eq!(&answer, b"S");

        let config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate))
            .with_no_client_auth();
        let name = ServerName::try_from("localhost").expect("name");
        let mut tls = TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .expect("TLS handshake");
        tls.write_all(&startup_packet()).await.expect("startup");
        // AuthenticationOk: 'R', length 8, code 0.
        let mut auth = [0u8; 9];
        tls.read_exact(&mut auth).await.expect("auth");
        assert_eq!(auth, [b'R', 0, 0, 0, 8, 0, 0, 0, 0]);
    }

    #[test]
    fn half_configured_tls_is_an_error() {
        let mut config = crate::config::ServeConfig::for_data_dir("unused".into());
        config.tls_cert = Some("server.crt".into());
        assert!(super::acceptor(&config).is_err());
        config.tls_cert = None;
        assert!(super::acceptor(&config).expect("no TLS").is_none());
    }
}
