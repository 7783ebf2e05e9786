//! The `kafka` connectors, over librdkafka (the `rdkafka` crate, which
//! builds its own copy): a source reading one topic's partitions with
//! their offsets in the seal, and a sink producing a changelog to a topic.
//!
//! - `mod.rs` (here): the two specs, the options both take, the
//!   connection settings.
//! - [`security`]: TLS and SASL options, checked together.
//! - [`metadata`]: columns filled from the message (key, timestamp,
//!   partition, offset) rather than its value.
//! - [`source`]: explicit assignment of every partition (no consumer-group
//!   join), each partition a split whose offset is sealed (and where it
//!   started, so a projection created later can replay it); consumer group
//!   offsets, when a group is named, committed only after the seal.
//! - [`sink`]: every row a message (JSON or CSV), flushed at the barrier,
//!   so an epoch is in the topic before Weir seals it: at least once.

mod metadata;
mod security;
mod sink;
mod source;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use futures::future::BoxFuture;
use rdkafka::ClientConfig;

use crate::changelog::check_retractions;
use crate::spec::{
    Capabilities, ConnectorKind, ConnectorSpec, Delivery, OptionSpec, OptionType, Options,
};
use crate::{Connector, ConnectorError, Sink, SinkOpen, Source, SourceOpen};

pub(crate) const NAME: &str = "kafka";

/// How long a metadata request (CREATE's checks, a source's first
/// assignment) may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// `&[options..., the options both kafka connectors take]`.
macro_rules! with_kafka_options {
    ($($option:expr),* $(,)?) => {
        &[
            OptionSpec::optional(
                "brokers",
                OptionType::Text,
                "the bootstrap brokers, host:port[,host:port...]",
            )
            .required(),
            OptionSpec::optional("topic", OptionType::Text, "the topic").required(),
            OptionSpec::optional(
                "format",
                OptionType::OneOf(&["json", "csv"]),
                "a message's value: one JSON object, or one CSV line (columns by position)",
            )
            .with_default("json"),
            security::OPTIONS[0],
            security::OPTIONS[1],
            security::OPTIONS[2],
            security::OPTIONS[3],
            security::OPTIONS[4],
            security::OPTIONS[5],
            security::OPTIONS[6],
            $($option,)*
        ]
    };
}

static SOURCE_SPEC: ConnectorSpec = ConnectorSpec {
    name: NAME,
    kind: ConnectorKind::Source,
    help: "reads the messages of a Kafka topic (any Kafka-compatible broker), every partition, offsets sealed",
    options: with_kafka_options![
        OptionSpec::optional(
            "start_offset",
            OptionType::OneOf(&["earliest", "latest"]),
            "where a partition with no sealed offset starts",
        )
        .with_default("earliest"),
        OptionSpec::optional(
            "group_id",
            OptionType::Text,
            "a consumer group whose committed offsets follow each seal (for monitoring; Weir resumes from its seal)",
        ),
        OptionSpec::optional(
            "csv.delimiter",
            OptionType::Text,
            "the field delimiter of csv messages, one character",
        )
        .with_default(","),
        OptionSpec::optional(
            "on_error",
            OptionType::OneOf(&["fail", "skip"]),
            "a message that does not parse: fail stops the source naming it; skip drops it, logs it and counts it in weir_catalog.sources.rows_skipped",
        )
        .with_default("fail"),
        metadata::OPTIONS[0],
        metadata::OPTIONS[1],
        metadata::OPTIONS[2],
        metadata::OPTIONS[3],
        metadata::OPTIONS[4],
    ],
    capabilities: Capabilities {
        read_modes: &[],
        append_only: true,
        // From where each partition first started, while retention keeps it.
        replayable: true,
        bounded: false,
        delivery: &[Delivery::ExactlyOnce],
        skips: false,
    },
};

static SINK_SPEC: ConnectorSpec = ConnectorSpec {
    name: NAME,
    kind: ConnectorKind::Sink,
    help: "produces every change as a message to a Kafka topic (any Kafka-compatible broker), at least once",
    options: with_kafka_options![
        OptionSpec::optional(
            "key",
            OptionType::Text,
            "columns whose values, as a JSON object, are each message's key (comma-separated; default: no key)",
        ),
        OptionSpec::optional(
            "changelog",
            OptionType::OneOf(&["true", "false"]),
            "true adds weir_op ('insert' or 'delete') and weir_epoch to every message, so input that retracts can be written",
        )
        .with_default("false"),
    ],
    capabilities: Capabilities {
        read_modes: &[],
        append_only: false,
        replayable: false,
        bounded: false,
        // Exactly once would need a broker transaction that outlives the
        // process between pre-commit and commit, which librdkafka cannot
        // resume after a restart.
        delivery: &[Delivery::AtLeastOnce],
        skips: false,
    },
};

pub(crate) struct KafkaSourceConnector;

impl Connector for KafkaSourceConnector {
    fn spec(&self) -> &'static ConnectorSpec {
        &SOURCE_SPEC
    }

    fn check_source(&self, options: &BTreeMap<String, String>) -> Result<(), ConnectorError> {
        security::Security::parse(options)?;
        csv_delimiter(options).map(drop)
    }

    fn open_source(&self, open: SourceOpen<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        Ok(Box::new(source::KafkaSource::new(&open)?))
    }

    /// The declared columns, with those named by `key_column`,
    /// `timestamp_column`, `partition_column` and `offset_column` checked.
    fn describe_source<'a>(
        &'a self,
        declared: Option<&'a SchemaRef>,
        options: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<SchemaRef, ConnectorError>> {
        Box::pin(async move {
            let schema = self.source_columns(declared, options)?;
            metadata::Columns::parse(&schema, options)?;
            Ok(schema)
        })
    }
}

pub(crate) struct KafkaSinkConnector;

impl Connector for KafkaSinkConnector {
    fn spec(&self) -> &'static ConnectorSpec {
        &SINK_SPEC
    }

    fn check_sink<'a>(
        &'a self,
        schema: &'a SchemaRef,
        options: &'a BTreeMap<String, String>,
        input_append_only: bool,
    ) -> BoxFuture<'a, Result<(), ConnectorError>> {
        Box::pin(async move {
            let opts = Options::new(&SINK_SPEC, options);
            check_retractions(
                NAME,
                opts.get("changelog") == Some("true"),
                input_append_only,
            )?;
            sink::key_columns(schema, opts.get("key"))?;
            let topic = opts.get("topic").unwrap_or_default();
            partitions(client_config(options)?, topic).await.map(drop)
        })
    }

    fn open_sink(&self, open: SinkOpen<'_>) -> Result<Box<dyn Sink>, ConnectorError> {
        Ok(Box::new(sink::KafkaSink::new(&open)?))
    }
}

fn bad_option(option: &str, message: impl Into<String>) -> ConnectorError {
    ConnectorError::BadOption {
        connector: NAME.into(),
        option: option.into(),
        message: message.into(),
    }
}

fn csv_delimiter(options: &BTreeMap<String, String>) -> Result<u8, ConnectorError> {
    let delimiter = options.get("csv.delimiter").map_or(",", String::as_str);
    match delimiter.as_bytes() {
        [b] => Ok(*b),
        _ => Err(bad_option(
            "csv.delimiter",
            format!("\"{delimiter}\" is not one single-byte character"),
        )),
    }
}

/// librdkafka settings shared by consumers and producers: the brokers and
/// how to reach them ([`security`]).
fn client_config(options: &BTreeMap<String, String>) -> Result<ClientConfig, ConnectorError> {
    let mut config = ClientConfig::new();
    config
        .set(
            "bootstrap.servers",
            options.get("brokers").map_or("", String::as_str),
        )
        .set("socket.timeout.ms", "10000")
        .set("log_level", "4");
    security::Security::parse(options)?.apply(&mut config);
    Ok(config)
}

fn kafka_error(what: &str, e: rdkafka::error::KafkaError) -> ConnectorError {
    ConnectorError::Transient {
        connector: NAME.into(),
        message: format!("{what}: {e}"),
    }
}

/// One partition of a topic: its id and the offset of its earliest kept
/// message (its low watermark). Not its high watermark: tansu's is not
/// exact, so a sealed offset past it proves nothing there.
#[derive(Debug, Clone, Copy)]
struct Partition {
    id: i32,
    low: i64,
}

/// The partitions of `topic`, asked of the brokers (blocking calls, so on
/// a blocking thread); an error naming the option when the topic does not
/// exist, and saying why the brokers could not be reached when they could
/// not (librdkafka's own reason: a refused certificate, a failed SASL
/// exchange, a refused connection).
async fn partitions(config: ClientConfig, topic: &str) -> Result<Vec<Partition>, ConnectorError> {
    let topic = topic.to_string();
    let brokers = config
        .get("bootstrap.servers")
        .unwrap_or_default()
        .to_string();
    let asked = tokio::task::spawn_blocking(move || {
        use rdkafka::consumer::Consumer;
        let consumer: rdkafka::consumer::BaseConsumer<LastError> = config
            .create_with_context(LastError::default())
            .map_err(|e| kafka_error("creating a client", e))?;
        let asking = format!("asking {brokers} about topic {topic}");
        let failed = |e| {
            // librdkafka queues its log of the failure on the client's
            // queue, which only a poll delivers to the context.
            let _ = consumer.poll(Duration::from_millis(50));
            let why = consumer.context().take();
            ConnectorError::Transient {
                connector: NAME.into(),
                message: match why {
                    Some(why) => format!("{asking}: {e} ({why})"),
                    None => format!("{asking}: {e}"),
                },
            }
        };
        let metadata = consumer
            .fetch_metadata(Some(&topic), METADATA_TIMEOUT)
            .map_err(failed)?;
        let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Err(missing_topic(&topic, &brokers));
        };
        if found.error().is_some() || found.partitions().is_empty() {
            return Err(missing_topic(&topic, &brokers));
        }
        found
            .partitions()
            .iter()
            .map(|p| {
                let (low, _) = consumer
                    .fetch_watermarks(&topic, p.id(), METADATA_TIMEOUT)
                    .map_err(failed)?;
                Ok(Partition { id: p.id(), low })
            })
            .collect()
    })
    .await;
    asked.map_err(|e| ConnectorError::Transient {
        connector: NAME.into(),
        message: e.to_string(),
    })?
}

/// Keeps the latest failure librdkafka reported for a client, whose
/// reason (the broker's address and what failed there) says more than
/// the error a call returns ("broker transport failure").
#[derive(Default)]
struct LastError(std::sync::Mutex<Option<String>>);

impl LastError {
    fn take(&self) -> Option<String> {
        self.0.lock().ok().and_then(|mut last| last.take())
    }
}

impl rdkafka::ClientContext for LastError {
    /// librdkafka logs why a connection failed (`FAIL`: a refused
    /// certificate, a failed SASL exchange), where a call waiting for
    /// metadata sees only "broker transport failure".
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        if fac == "FAIL"
            && let Ok(mut last) = self.0.lock()
        {
            *last = Some(log_message.to_string());
        }
        rdkafka::client::DefaultClientContext.log(level, fac, log_message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        tracing::debug!(%error, reason, "kafka client error");
        if let Ok(mut last) = self.0.lock() {
            *last = Some(reason.to_string());
        }
    }
}

impl rdkafka::consumer::ConsumerContext for LastError {}

fn missing_topic(topic: &str, brokers: &str) -> ConnectorError {
    bad_option(
        "topic",
        format!("topic \"{topic}\" does not exist on {brokers}; create it first"),
    )
}
