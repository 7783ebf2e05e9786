//! The conformance suite against S3 semantics, served by a local moto server
//! (`moto_server` from `$HOME/.cache/weir-venv`, installed by
//! scripts/test-all.sh). Without moto this test fails rather than skipping:
//! create-only puts on S3 (If-None-Match) are what the fence rests on.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::conformance::{Fixture, run_suite};

/// A moto server on a free port; killed on drop.
struct Moto {
    child: Child,
    port: u16,
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

fn start_moto() -> Moto {
    let bin = moto_binary();
    assert!(
        bin.exists(),
        "moto_server not found at {}: the S3 conformance test needs it. Install it with \
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
async fn create_bucket(port: u16, bucket: &str) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_via_moto() {
    let moto = start_moto();
    create_bucket(moto.port, "weir-state").await;
    let endpoint = format!("http://127.0.0.1:{}", moto.port);
    let (store, prefix) = weir_storage::state::store_from_url_with(
        "s3://weir-state/cluster",
        [
            ("aws_endpoint", endpoint.as_str()),
            ("aws_allow_http", "true"),
            ("aws_access_key_id", "test"),
            ("aws_secret_access_key", "test"),
            ("aws_region", "us-east-1"),
        ],
    )
    .unwrap();
    assert_eq!(prefix, "cluster");
    let next = AtomicUsize::new(0);
    // One bucket; every case gets its own root prefix.
    run_suite("s3", 200, &|| Fixture {
        store: Arc::clone(&store),
        root: format!("{prefix}/case{}", next.fetch_add(1, Ordering::SeqCst)),
        _dir: None,
    })
    .await;
}
