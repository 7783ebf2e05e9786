//! The kafka sink: every row (each change, with `changelog`) one message,
//! its value a JSON object or a CSV line, its key the `key` columns as a
//! JSON object. `write` hands the messages to librdkafka; `pre_commit`
//! waits until the brokers acknowledged every one, so an epoch is in the
//! topic before Weir seals it. After a restart the epochs after the seal
//! are produced again: at least once, and the docs say so.

use std::collections::VecDeque;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use weir_common::ChangeBatch;

use super::{NAME, SINK_SPEC, bad_option, client_config, kafka_error};
use crate::changelog::{output_rows, output_schema};
use crate::spec::Options;
use crate::{ConnectorError, Sink, SinkOpen};

/// The indexes of the `key` option's columns in the sink's columns.
pub(crate) fn key_columns(
    schema: &SchemaRef,
    key: Option<&str>,
) -> Result<Vec<usize>, ConnectorError> {
    let Some(key) = key else {
        return Ok(Vec::new());
    };
    key.split(',')
        .map(|name| {
            let name = name.trim();
            schema.index_of(name).map_err(|_| {
                bad_option(
                    "key",
                    format!(
                        "the sink has no column \"{name}\" (it has: {})",
                        schema
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })
        })
        .collect()
}

pub(crate) struct KafkaSink {
    topic: String,
    producer: FutureProducer,
    csv: bool,
    changelog: bool,
    output: SchemaRef,
    key: Vec<usize>,
    /// Messages handed to librdkafka and not yet acknowledged.
    in_flight: VecDeque<DeliveryFuture>,
    /// Messages acknowledged in all, what a descriptor records.
    delivered: u64,
    /// What it produced since its last receipt.
    tally: crate::Tally,
}

impl KafkaSink {
    pub(crate) fn new(open: &SinkOpen<'_>) -> Result<Self, ConnectorError> {
        let opts = Options::new(&SINK_SPEC, open.options);
        let changelog = opts.get("changelog") == Some("true");
        let mut config = client_config(open.options)?;
        config.set("message.timeout.ms", "60000");
        let producer: FutureProducer = config
            .create()
            .map_err(|e| kafka_error("creating a producer", e))?;
        let delivered = match open.sealed {
            Some((_, text)) => text.parse().map_err(|_| ConnectorError::BadPosition {
                connector: NAME.into(),
                value: text.to_string(),
                message: "expected a message count".into(),
            })?,
            None => 0,
        };
        Ok(Self {
            topic: opts.get("topic").unwrap_or_default().to_string(),
            producer,
            csv: opts.get("format") == Some("csv"),
            changelog,
            output: output_schema(&open.schema, changelog),
            key: key_columns(&open.schema, opts.get("key"))?,
            in_flight: VecDeque::new(),
            delivered,
            tally: Default::default(),
        })
    }

    /// Each row of `rows` as its message value.
    fn values(&self, rows: &RecordBatch) -> Result<Vec<Vec<u8>>, ConnectorError> {
        let arrow = |e| ConnectorError::arrow(NAME, e);
        if self.csv {
            // One writer per row: a quoted field may hold a newline, so
            // the lines of one CSV text cannot be split apart after.
            return (0..rows.num_rows())
                .map(|i| {
                    let mut out = Vec::new();
                    let mut writer = arrow::csv::WriterBuilder::new()
                        .with_header(false)
                        .build(&mut out);
                    writer.write(&rows.slice(i, 1)).map_err(arrow)?;
                    drop(writer);
                    if out.last() == Some(&b'\n') {
                        out.pop();
                    }
                    Ok(out)
                })
                .collect();
        }
        json_lines(rows)
    }

    /// Waits for the oldest message in flight; an error fails the epoch.
    async fn settle_oldest(&mut self) -> Result<(), ConnectorError> {
        let Some(delivery) = self.in_flight.pop_front() else {
            return Ok(());
        };
        match delivery.await {
            Ok(Ok(_)) => {
                self.delivered += 1;
                Ok(())
            }
            Ok(Err((e, _))) => Err(kafka_error(&format!("producing to {}", self.topic), e)),
            Err(_) => Err(ConnectorError::Transient {
                connector: NAME.into(),
                message: format!("producing to {}: the producer went away", self.topic),
            }),
        }
    }
}

/// Each row of `rows` as one JSON object (arrow's JSON-lines writer
/// escapes newlines inside strings, so its lines are the rows).
fn json_lines(rows: &RecordBatch) -> Result<Vec<Vec<u8>>, ConnectorError> {
    let mut out = Vec::new();
    let mut writer = arrow::json::LineDelimitedWriter::new(&mut out);
    writer
        .write(rows)
        .and_then(|()| writer.finish())
        .map_err(|e| ConnectorError::arrow(NAME, e))?;
    Ok(out
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

#[async_trait]
impl Sink for KafkaSink {
    fn receipt(&mut self) -> crate::Receipt {
        self.tally.take()
    }

    async fn write(&mut self, epoch: u64, changes: &ChangeBatch) -> Result<(), ConnectorError> {
        let rows = output_rows(NAME, changes, epoch, &self.output, self.changelog)?;
        if rows.num_rows() == 0 {
            return Ok(());
        }
        crate::changelog::tally_output(NAME, &mut self.tally, &rows, self.changelog)?;
        let values = self.values(&rows)?;
        let keys = if self.key.is_empty() {
            None
        } else {
            let key_rows = rows
                .project(&self.key)
                .map_err(|e| ConnectorError::arrow(NAME, e))?;
            Some(json_lines(&key_rows)?)
        };
        for (i, value) in values.iter().enumerate() {
            loop {
                let mut record = FutureRecord::<[u8], [u8]>::to(&self.topic).payload(value);
                if let Some(keys) = &keys {
                    record = record.key(&keys[i]);
                }
                match self.producer.send_result(record) {
                    Ok(delivery) => {
                        self.in_flight.push_back(delivery);
                        break;
                    }
                    // librdkafka's queue is full: wait for a message to
                    // be acknowledged, then hand this one over again.
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        if self.in_flight.is_empty() {
                            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        }
                        self.settle_oldest().await?;
                    }
                    Err((e, _)) => {
                        return Err(kafka_error(&format!("producing to {}", self.topic), e));
                    }
                }
            }
        }
        Ok(())
    }

    async fn pre_commit(&mut self, _epoch: u64) -> Result<String, ConnectorError> {
        while !self.in_flight.is_empty() {
            self.settle_oldest().await?;
        }
        Ok(self.delivered.to_string())
    }

    async fn commit(&mut self, _epoch: u64, _descriptor: &str) -> Result<(), ConnectorError> {
        // Every message of the epoch was acknowledged before its seal.
        Ok(())
    }

    async fn abort(&mut self, _epoch: u64) -> Result<(), ConnectorError> {
        // What was produced stays produced: at least once.
        Ok(())
    }
}
