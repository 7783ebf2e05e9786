//! The `kafka` connectors over TLS. tansu (the test broker) speaks plain
//! TCP only, so it sits behind a TLS terminator made here (rustls) and
//! advertises the terminator's port: every connection a client makes,
//! bootstrap and partition leaders alike, is TLS. A kafka sink writes a
//! topic and a kafka source reads it back, with the broker's certificate
//! checked against `ssl.ca.location`, then with a client certificate the
//! terminator requires. The failures are errors at CREATE naming TLS: no
//! CA given (the system's do not sign the test certificate), no client
//! certificate where one is required, options that do not fit together.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use weir_connectors::testing::start_tansu_with;

use crate::harness::{Options, WeirServer, eventually, try_rows as rows};
use crate::sources::error_of;
use crate::tls::{client_certificate, self_signed};

fn pem_certs(path: &Path) -> Vec<tokio_rustls::rustls::pki_types::CertificateDer<'static>> {
    rustls_pemfile::certs(&mut std::io::BufReader::new(
        std::fs::File::open(path).unwrap(),
    ))
    .collect::<Result<_, _>>()
    .unwrap()
}

/// Accepts TLS on `listener` (with `cert`/`key`, and requiring a client
/// certificate signed by `client_ca` if given) and forwards each
/// connection to 127.0.0.1:`upstream`.
fn terminate_tls(
    listener: TcpListener,
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    upstream: u16,
) -> tokio::task::JoinHandle<()> {
    let provider = Arc::new(ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in pem_certs(ca) {
                roots.add(cert).unwrap();
            }
            builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .unwrap(),
            )
        }
        None => builder.with_no_client_auth(),
    };
    let key = rustls_pemfile::private_key(&mut std::io::BufReader::new(
        std::fs::File::open(key).unwrap(),
    ))
    .unwrap()
    .unwrap();
    let config = builder.with_single_cert(pem_certs(cert), key).unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that fails the handshake is simply dropped.
                let Ok(mut tls) = acceptor.accept(socket).await else {
                    return;
                };
                let Ok(mut broker) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut broker).await;
            });
        }
    })
}

/// Every row of `query` once `want` rows are there (60 s at most).
async fn rows_reach(client: &tokio_postgres::Client, query: &str, want: &[String]) {
    eventually(Duration::from_secs(60), query, || async {
        let got = rows(client, query).await.ok()?;
        (got == want).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_sources_and_sinks_reach_a_broker_over_tls_and_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let clients = dir.path().join("clients");
    std::fs::create_dir(&clients).unwrap();
    let (client_ca, client_cert, client_key) = client_certificate(&clients, "weir");

    // Two terminators in front of one broker: plain TLS, and TLS that
    // requires a client certificate. The broker advertises the first; the
    // second is used for bootstrap only, so it gets its own broker too.
    let tls = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tls_port = tls.local_addr().unwrap().port();
    let tansu = start_tansu_with(Some(tls_port), false);
    tansu.create_topic("events", 2);
    let _tls = terminate_tls(tls, &cert, &key, None, tansu.port);

    let mutual = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mutual_port = mutual.local_addr().unwrap().port();
    let mutual_tansu = start_tansu_with(Some(mutual_port), false);
    mutual_tansu.create_topic("events", 1);
    let _mutual = terminate_tls(mutual, &cert, &key, Some(&client_ca), mutual_tansu.port);

    let server = WeirServer::start_with(Options::default());
    let client = server.connect().await;
    let ca = cert.display().to_string();
    let tls_options = format!(
        "brokers = '127.0.0.1:{tls_port}', security.protocol = 'ssl', ssl.ca.location = '{ca}'"
    );

    // Refused at CREATE, each naming what is wrong.
    for (options, code, says) in [
        (
            format!(
                "brokers = '127.0.0.1:{tls_port}', topic = 'events', security.protocol = 'ssl'"
            ),
            "58000",
            "certificate verify failed",
        ),
        (
            format!(
                "{tls_options}, topic = 'events', ssl.certificate.location = '{}'",
                client_cert.display()
            ),
            "22023",
            "ssl.key.location",
        ),
        (
            format!("brokers = '127.0.0.1:{tls_port}', topic = 'events', ssl.ca.location = '{ca}'"),
            "22023",
            "is for security.protocol = 'ssl' or 'sasl_ssl'",
        ),
        (
            format!(
                "brokers = '127.0.0.1:{tls_port}', topic = 'events', security.protocol = 'ssl', ssl.ca.location = '/nope/ca.pem'"
            ),
            "22023",
            "cannot read /nope/ca.pem",
        ),
        (
            format!(
                "brokers = '127.0.0.1:{tls_port}', topic = 'events', security.protocol = 'sasl_ssl', sasl.username = 'u'"
            ),
            "22023",
            "CREATE SECRET",
        ),
    ] {
        let (got, message) = error_of(
            &client,
            &format!("CREATE SINK bad AS SELECT 1 AS one WITH (connector = 'kafka', {options})"),
        )
        .await;
        assert_eq!(got, code, "{options}: {message}");
        assert!(message.contains(says), "{options}: {message}");
    }

    // Over TLS: a sink writes the topic, a source reads it back.
    client
        .batch_execute(&format!(
            "CREATE TABLE facts (id BIGINT PRIMARY KEY, name TEXT);
             INSERT INTO facts SELECT i, 'n' || i FROM generate_series(1, 500) AS g(i);
             CREATE SINK out FROM facts WITH (connector = 'kafka', {tls_options}, topic = 'events', changelog = 'true');
             CREATE SOURCE back (id BIGINT NOT NULL, name TEXT)
               WITH (connector = 'kafka', {tls_options}, topic = 'events');
             CREATE PROJECTION seen AS SELECT count(*) AS n, sum(id) AS s FROM back;"
        ))
        .await
        .expect("kafka over TLS");
    rows_reach(
        &client,
        "SELECT n, s FROM seen",
        &["500|125250".to_string()],
    )
    .await;
    let shown = rows(&client, "SHOW CREATE SINK out")
        .await
        .unwrap()
        .join("\n");
    assert!(shown.contains("security.protocol = 'ssl'"), "{shown}");

    // A broker that requires a client certificate: refused without one,
    // read and written with one.
    let mutual_options = format!(
        "brokers = '127.0.0.1:{mutual_port}', security.protocol = 'ssl', ssl.ca.location = '{ca}'"
    );
    let (code, message) = error_of(
        &client,
        &format!("CREATE SINK anonymous FROM facts WITH (connector = 'kafka', {mutual_options}, topic = 'events', changelog = 'true')"),
    )
    .await;
    assert_eq!(code, "58000", "{message}");
    assert!(
        message.contains(&format!("127.0.0.1:{mutual_port}")),
        "{message}"
    );
    client
        .batch_execute(&format!(
            "CREATE SINK signed FROM facts WITH (connector = 'kafka', {mutual_options}, topic = 'events', changelog = 'true',
                 ssl.certificate.location = '{cert}', ssl.key.location = '{key}');
             CREATE SOURCE signed_back (id BIGINT NOT NULL, name TEXT)
               WITH (connector = 'kafka', {mutual_options}, topic = 'events',
                     ssl.certificate.location = '{cert}', ssl.key.location = '{key}');
             CREATE PROJECTION signed_seen AS SELECT count(*) AS n FROM signed_back;",
            cert = client_cert.display(),
            key = client_key.display(),
        ))
        .await
        .expect("kafka with a client certificate");
    rows_reach(&client, "SELECT n FROM signed_seen", &["500".to_string()]).await;
}

/// SASL: tansu requires SCRAM here but can keep no users in its memory
/// store, so this proves the exchange happens with the password of the
/// SECRET (the broker answers it as an unknown user), not a login.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_sasl_runs_the_scram_exchange_with_the_secret_password() {
    let tansu = start_tansu_with(None, true);
    let server = WeirServer::start_with(Options::default());
    let client = server.connect().await;
    let brokers = tansu.brokers();
    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SINK s AS SELECT 1 AS one WITH (connector = 'kafka', brokers = '{brokers}', topic = 't',
                 security.protocol = 'sasl_plaintext', sasl.username = 'weir', sasl.password = 'inline')"
        ),
    )
    .await;
    assert!(message.contains("SECRET"), "{code}: {message}");
    client
        .batch_execute("CREATE SECRET kafka_pw AS 'not stored anywhere'")
        .await
        .unwrap();
    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SINK s AS SELECT 1 AS one WITH (connector = 'kafka', brokers = '{brokers}', topic = 't',
                 security.protocol = 'sasl_plaintext', sasl.mechanism = 'scram-sha-512',
                 sasl.username = 'weir', sasl.password = SECRET kafka_pw)"
        ),
    )
    .await;
    assert_eq!(code, "58000", "{message}");
    assert!(
        message.contains("SASL SCRAM authentication failed"),
        "{message}"
    );
    assert!(!message.contains("not stored anywhere"), "{message}");
}
