//! TLS on the pgwire port: with `--tls-cert/--tls-key` psql connects with
//! `sslmode=require` over TLS; without them `sslmode=prefer` falls back to a
//! plain connection and `sslmode=require` is refused.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::{Options, WeirServer, run_command};

/// A self-signed certificate for localhost/127.0.0.1, made with openssl.
pub(crate) fn self_signed(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let cert = dir.join("server.crt");
    let key = dir.join("server.key");
    let mut openssl = Command::new("openssl");
    openssl
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
        ])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        // A server certificate, not a CA: verifiers (webpki) refuse a CA
        // as the end entity even when it is its own trusted root.
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert);
    let (code, out, err) = run_command(openssl, Duration::from_secs(60), "openssl req -x509");
    assert_eq!(
        code,
        Some(0),
        "openssl could not make a certificate (install it with scripts/test-all.sh or `apt-get install -y openssl`)\n{out}\n{err}"
    );
    (cert, key)
}

/// A certificate authority and a client certificate it signed for the
/// PostgreSQL user `user` (its common name), made with openssl: returns
/// (CA certificate, client certificate, client key).
pub(crate) fn client_certificate(
    dir: &Path,
    user: &str,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let [ca, ca_key, csr, cert, key, extensions] = [
        "ca.crt",
        "ca.key",
        "client.csr",
        "client.crt",
        "client.key",
        "client.ext",
    ]
    .map(|f| dir.join(f));
    // X.509 v3 (rustls refuses an extension-less v1 certificate).
    std::fs::write(
        &extensions,
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    let openssl = |what: &str, args: Vec<std::ffi::OsString>| {
        let mut command = Command::new("openssl");
        command.args(args);
        let (code, out, err) = run_command(command, Duration::from_secs(60), what);
        assert_eq!(code, Some(0), "openssl {what}\n{out}\n{err}");
    };
    let os = |parts: &[&dyn AsRef<std::ffi::OsStr>]| -> Vec<std::ffi::OsString> {
        parts.iter().map(|p| p.as_ref().to_os_string()).collect()
    };
    openssl(
        "req -x509 (CA)",
        os(&[
            &"req",
            &"-x509",
            &"-newkey",
            &"rsa:2048",
            &"-nodes",
            &"-days",
            &"2",
            &"-subj",
            &"/CN=weir test CA",
            &"-addext",
            &"basicConstraints=critical,CA:TRUE",
            &"-addext",
            &"keyUsage=critical,keyCertSign,cRLSign",
            &"-keyout",
            &ca_key,
            &"-out",
            &ca,
        ]),
    );
    let subject = format!("/CN={user}");
    openssl(
        "req (client)",
        os(&[
            &"req",
            &"-newkey",
            &"rsa:2048",
            &"-nodes",
            &"-subj",
            &subject,
            &"-keyout",
            &key,
            &"-out",
            &csr,
        ]),
    );
    openssl(
        "x509 -req (sign)",
        os(&[
            &"x509",
            &"-req",
            &"-in",
            &csr,
            &"-CA",
            &ca,
            &"-CAkey",
            &ca_key,
            &"-CAcreateserial",
            &"-extfile",
            &extensions,
            &"-days",
            &"2",
            &"-out",
            &cert,
        ]),
    );
    (ca, cert, key)
}

/// psql with a full connection string; returns (exit code, stdout, stderr).
fn psql(conninfo: &str, sql: &str) -> (Option<i32>, String, String) {
    let mut command = Command::new("psql");
    command.args(["-X", "-tA", conninfo, "-c", sql]);
    for (key, _) in std::env::vars() {
        if key.starts_with("PG") {
            command.env_remove(key);
        }
    }
    run_command(command, Duration::from_secs(60), "psql")
}

fn conninfo(port: u16, sslmode: &str) -> String {
    format!("host=127.0.0.1 port={port} user=weir dbname=weir sslmode={sslmode} connect_timeout=30")
}

#[test]
fn psql_connects_over_tls_with_sslmode_require() {
    let certs = tempfile::tempdir().expect("temp dir");
    let (cert, key) = self_signed(certs.path());
    let server = WeirServer::start_with(Options::default().tls(&cert, &key));

    let (code, out, err) = psql(&conninfo(server.pg_port, "require"), "SELECT 40 + 2");
    assert!(
        code == Some(0) && out.trim() == "42",
        "sslmode=require against a TLS server: exit {code:?}\nstdout: {out}\nstderr: {err}\n{}",
        server.log_tail()
    );
    let (code, out, err) = psql(&conninfo(server.pg_port, "require"), "\\conninfo");
    assert!(
        code == Some(0) && out.contains("SSL connection"),
        "\\conninfo should report an SSL connection: exit {code:?}\nstdout: {out}\nstderr: {err}"
    );
}

#[test]
fn without_tls_prefer_falls_back_and_require_is_refused() {
    let server = WeirServer::start();
    let (code, out, err) = psql(&conninfo(server.pg_port, "prefer"), "SELECT 'plain'");
    assert!(
        code == Some(0) && out.trim() == "plain",
        "sslmode=prefer against a server without TLS must connect: exit {code:?}\nstdout: {out}\nstderr: {err}\n{}",
        server.log_tail()
    );
    let (code, out, err) = psql(&conninfo(server.pg_port, "require"), "SELECT 1");
    assert_ne!(
        code,
        Some(0),
        "sslmode=require must fail without TLS\nstdout: {out}\nstderr: {err}"
    );
    assert!(
        err.contains("does not support SSL"),
        "libpq's reason for the refusal: {err}"
    );
    // The server is unharmed by the refused handshake.
    let (code, out, _) = psql(&conninfo(server.pg_port, "disable"), "SELECT 'still here'");
    assert!(
        code == Some(0) && out.trim() == "still here",
        "plain connection after a refused TLS request"
    );
}
