//! Helpers for tests of this crate and of crates that store objects
//! (`testing` feature): a local S3 server.
//!
//! [`start_moto`] runs `moto_server` from `$HOME/.cache/weir-venv` (installed
//! by scripts/test-all.sh). A test that needs S3 fails without it rather
//! than skipping.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A moto server on a free port; killed on drop.
pub struct Moto {
    child: Child,
    pub port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn moto_binary() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is set");
    PathBuf::from(home).join(".cache/weir-venv/bin/moto_server")
}

/// Starts a moto server, waiting until it listens; panics (failing the
/// test) when moto is not installed.
pub fn start_moto() -> Moto {
    let bin = moto_binary();
    assert!(
        bin.exists(),
        "moto_server not found at {}: tests that write to S3 need it. Install it with \
         `$HOME/.cache/weir-venv/bin/pip install 'moto[server]'` (scripts/test-all.sh does)",
        bin.display()
    );
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(&bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    let moto = Moto { child, port };
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "moto_server did not listen on {port} within 30s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    moto
}

/// `PUT /bucket` over plain HTTP: moto needs no signature to create a bucket.
pub async fn create_bucket(port: u16, bucket: &str) {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let request = format!(
        "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "creating bucket {bucket}: {response}"
    );
}
