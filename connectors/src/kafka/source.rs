//! The kafka source: every partition of one topic, assigned explicitly
//! (no consumer-group join, so no rebalance and no wait for one), each
//! partition a split whose offset (the next message to read) is sealed.
//!
//! A restart assigns each partition at its sealed offset. A partition with
//! none starts at `start_offset`; the offset of the first message read is
//! sealed too (split `<partition>.start`), and a replay (a projection
//! created after the source was read) reads from there up to the offsets
//! it is given. A sealed offset that the broker no longer
//! has (retention deleted it, or the topic was deleted and created again)
//! is a gap: the source stops with status `gap`, naming the partition,
//! and never skips silently to the earliest message. Once the gap is
//! accepted (`weir.gaps_accepted` above the count sealed as split
//! `gaps_accepted`), the source goes on from the earliest message the
//! broker keeps, and seals the new count. Messages that reach one
//! `next` call are delivered as one transaction of per-partition batches.
//! With `group_id`, the sealed offsets are committed to that consumer
//! group after each seal, for tools that watch consumer lag.

use std::collections::BTreeMap;
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use futures::FutureExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Message, Offset, TopicPartitionList};
use weir_common::ChangeBatch;

use super::metadata::{Columns, Meta};
use super::{NAME, Partition, SOURCE_SPEC, client_config, csv_delimiter, kafka_error, partitions};
use crate::spec::Options;
use crate::{ConnectorError, GAPS_ACCEPTED, Offsets, Source, SourceBatch, SourceEvent, SourceOpen};

/// The one split name the runtime is told about (a topic never ends);
/// batches name their partition.
const SPLIT: &str = "kafka";
/// The suffix of the split that records where a partition started.
const START: &str = ".start";
/// The split sealing how many gaps the source has gone on past.
const GAPS: &str = "gaps_accepted";
/// Messages gathered into one event at most.
const MAX_MESSAGES: usize = 8192;
/// After the first message, how long to wait for more before delivering.
const GATHER: Duration = Duration::from_millis(10);

/// One partition's messages gathered by one `next` call.
struct Gathered {
    /// The values, each followed by a newline.
    payloads: Vec<u8>,
    /// Each value's offset and where it is in `payloads`.
    messages: Vec<(i64, std::ops::Range<usize>)>,
    /// Each value's message metadata, when columns hold some.
    meta: Vec<Meta>,
    /// The first message's offset and the one after the last.
    first: i64,
    next: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Csv(u8),
}

pub(crate) struct KafkaSource {
    name: String,
    topic: String,
    format: Format,
    schema: SchemaRef,
    /// Which declared columns the value fills and which the message's
    /// metadata does.
    columns: Columns,
    consumer: StreamConsumer,
    config: rdkafka::ClientConfig,
    /// The next offset to read per partition (sealed, then read).
    next: BTreeMap<i32, i64>,
    /// The offset each partition's first message read had: where a replay
    /// starts (sealed as split `<partition>.start`).
    first: BTreeMap<i32, i64>,
    /// A replay: where each partition ends (it ends when all have).
    until: Option<BTreeMap<i32, i64>>,
    start: Offset,
    commit_group: bool,
    /// `on_error = 'skip'`: a message that does not parse is dropped and
    /// counted, not the end of the source.
    skip_bad: bool,
    /// Going on past an accepted gap: the count to seal, until sealed.
    accepting: Option<u32>,
    assigned: bool,
    ended: bool,
}

impl KafkaSource {
    pub(crate) fn new(open: &SourceOpen<'_>) -> Result<Self, ConnectorError> {
        let opts = Options::new(&SOURCE_SPEC, open.options);
        let format = match opts.get("format") {
            Some("csv") => Format::Csv(csv_delimiter(open.options)?),
            _ => Format::Json,
        };
        let accepted: u32 = open
            .options
            .get(GAPS_ACCEPTED)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let (next, first, until, accepting) = match open.until {
            None => {
                let (next, first, sealed_gaps) = parse_offsets(open.offsets)?;
                (
                    next,
                    first,
                    None,
                    (accepted > sealed_gaps).then_some(accepted),
                )
            }
            // A replay reads from where each partition first started.
            Some(until) => {
                let (end, from, _) = parse_offsets(until)?;
                if let Some(p) = end.keys().find(|p| !from.contains_key(p)) {
                    return Err(ConnectorError::BadPosition {
                        connector: NAME.into(),
                        value: format!("{p}={}", end[p]),
                        message: "a replay needs where the partition started".into(),
                    });
                }
                (from.clone(), from, Some(end), None)
            }
        };
        let mut config = client_config(open.options)?;
        let group = opts.get("group_id");
        config
            .set(
                "group.id",
                group.map_or_else(|| format!("weir-{}", open.name), String::from),
            )
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // A sealed offset the broker no longer has is an error (a gap),
            // not a silent jump to the earliest or latest message, unless
            // this run goes on past an accepted gap.
            .set(
                "auto.offset.reset",
                if accepting.is_some() {
                    "earliest"
                } else {
                    "error"
                },
            )
            .set("enable.partition.eof", "false")
            // librdkafka pauses fetching for this long once its prefetch
            // queue is full (1 s by default): at a full queue the reader
            // is busy decoding, and a second of idle broker link halves
            // the rate.
            .set("fetch.queue.backoff.ms", "10");
        let consumer: StreamConsumer = config
            .create()
            .map_err(|e| kafka_error("creating a consumer", e))?;
        Ok(Self {
            name: open.name.to_string(),
            topic: opts.get("topic").unwrap_or_default().to_string(),
            format,
            schema: open.schema.clone(),
            columns: Columns::parse(&open.schema, open.options)?,
            consumer,
            config,
            next,
            first,
            until,
            start: match opts.get("start_offset") {
                Some("latest") => Offset::End,
                _ => Offset::Beginning,
            },
            commit_group: group.is_some() && open.until.is_none(),
            skip_bad: opts.get("on_error") == Some("skip"),
            accepting,
            assigned: false,
            ended: false,
        })
    }

    /// Assigns every partition of the topic at its sealed offset, after
    /// checking that the broker still keeps it.
    async fn assign(&mut self) -> Result<(), ConnectorError> {
        let found = partitions(self.config.clone(), &self.topic).await?;
        // A partition the seal names that the topic lacks: the topic was
        // created again with fewer partitions, and that partition's
        // messages are gone.
        let missing: Vec<i32> = self
            .next
            .keys()
            .copied()
            .filter(|p| !found.iter().any(|f| f.id == *p))
            .collect();
        if let Some(first_missing) = missing.first() {
            if self.accepting.is_none() {
                return Err(self.gap(format!(
                    "topic {} has no partition {first_missing}, which source {} read before: the topic was \
                     deleted and created again, and the messages it had not read are lost to it",
                    self.topic, self.name
                )));
            }
            for p in &missing {
                tracing::warn!(source = %self.name, topic = %self.topic, partition = p, "going on past an accepted gap without a partition");
                self.next.remove(p);
                self.first.remove(p);
            }
        }
        let mut list = TopicPartitionList::new();
        for partition in found {
            if self.until.is_some() && self.replay_done(partition.id) {
                continue;
            }
            let at = match self.next.get(&partition.id) {
                Some(&next) if next < partition.low && self.accepting.is_some() => {
                    tracing::warn!(source = %self.name, topic = %self.topic, partition = partition.id,
                        from = next, to = partition.low, "going on past an accepted gap");
                    Offset::Offset(partition.low)
                }
                Some(&next) => {
                    self.check_sealed(partition, next)?;
                    Offset::Offset(next)
                }
                None => self.start,
            };
            list.add_partition_offset(&self.topic, partition.id, at)
                .map_err(|e| kafka_error("assigning partitions", e))?;
        }
        self.consumer
            .assign(&list)
            .map_err(|e| kafka_error("assigning partitions", e))?;
        self.assigned = true;
        Ok(())
    }

    /// In a replay, whether `partition` reached its end.
    fn replay_done(&self, partition: i32) -> bool {
        let end = self.until.as_ref().and_then(|u| u.get(&partition)).copied();
        end.is_none_or(|end| self.next.get(&partition).is_some_and(|n| *n >= end))
    }

    /// A sealed offset below the partition's earliest kept message means
    /// retention deleted messages Weir had not read: a gap, never skipped
    /// silently. One past the end (a topic deleted and created again,
    /// shorter) is left to the broker's out-of-range answer,
    /// [`Self::failed_read`]: not every compatible broker reports its end
    /// exactly (tansu's high watermark lags), and one that answers nothing
    /// leaves that case unseen.
    pub(super) fn check_sealed(
        &self,
        partition: Partition,
        next: i64,
    ) -> Result<(), ConnectorError> {
        if next >= partition.low {
            return Ok(());
        }
        if self.until.is_some() {
            return Err(ConnectorError::Rejected {
                connector: NAME.into(),
                message: format!(
                    "topic {} partition {}: a projection or sink created after source {} was read must \
                     read it again from offset {next}, but the earliest offset the broker keeps is {}: \
                     retention deleted messages, so it cannot be built",
                    self.topic, partition.id, self.name, partition.low
                ),
            });
        }
        Err(self.gap(format!(
            "topic {} partition {}: source {} sealed offset {next}, but the earliest offset the broker keeps is {}: \
             retention deleted messages it had not read, and they are lost to it",
            self.topic, partition.id, self.name, partition.low
        )))
    }

    /// A retention gap, with what to do about it.
    fn gap(&self, what: String) -> ConnectorError {
        ConnectorError::Gap {
            connector: NAME.into(),
            message: format!(
                "{what} (a retention gap); ALTER DESTINATION ... ACCEPT GAP to go on from the earliest \
                 message the broker keeps, or DROP and CREATE the source to start again"
            ),
        }
    }

    /// Payloads (newline-separated) as rows of the declared columns.
    fn parse(&self, payloads: &[u8]) -> Result<RecordBatch, arrow::error::ArrowError> {
        let cursor = std::io::Cursor::new(payloads);
        let batches: Result<Vec<RecordBatch>, _> = match self.format {
            Format::Json => arrow::json::ReaderBuilder::new(self.columns.value.clone())
                .build(cursor)
                .and_then(|reader| reader.collect()),
            Format::Csv(delimiter) => arrow::csv::ReaderBuilder::new(self.columns.value.clone())
                .with_header(false)
                .with_delimiter(delimiter)
                .build(cursor)
                .and_then(|reader| reader.collect()),
        };
        batches.and_then(|b| arrow::compute::concat_batches(&self.columns.value, &b))
    }

    /// One partition's gathered messages as rows of the declared columns,
    /// and how many of them `on_error = 'skip'` dropped.
    fn decode(
        &self,
        partition: i32,
        gathered: &Gathered,
    ) -> Result<(RecordBatch, u64), ConnectorError> {
        let (values, skipped, owners) = self.decode_values(partition, gathered)?;
        if !self.columns.any() {
            return Ok((values, skipped));
        }
        let rows = self
            .columns
            .assemble(values, partition, &gathered.meta, &owners)
            .map_err(|e| ConnectorError::Rejected {
                connector: NAME.into(),
                message: format!(
                    "topic {} partition {partition}, the messages from offset {}: {e}",
                    self.topic, gathered.first
                ),
            })?;
        Ok((rows, skipped))
    }

    /// The values as rows of the value columns, how many `on_error =
    /// 'skip'` dropped, and (when metadata columns need it) the message
    /// each row came from. The messages are parsed together; only when
    /// that fails (or does not give one row per message) are they parsed
    /// one by one.
    fn decode_values(
        &self,
        partition: i32,
        gathered: &Gathered,
    ) -> Result<(RecordBatch, u64, Vec<usize>), ConnectorError> {
        let error = match self.parse(&gathered.payloads) {
            Ok(rows) if !self.columns.any() => return Ok((rows, 0, Vec::new())),
            Ok(rows) if rows.num_rows() == gathered.messages.len() => {
                return Ok((rows, 0, (0..gathered.messages.len()).collect()));
            }
            Ok(_) => None,
            Err(e) => Some(e),
        };
        let rejected = |offset: i64, e| ConnectorError::Rejected {
            connector: NAME.into(),
            message: format!(
                "topic {} partition {partition}, the message at offset {offset}: {e} \
                 (on_error = 'skip' drops such messages)",
                self.topic
            ),
        };
        let mut good = Vec::new();
        let mut owners = Vec::new();
        let mut skipped = 0;
        for (index, (offset, range)) in gathered.messages.iter().enumerate() {
            match self.parse(&gathered.payloads[range.clone()]) {
                Ok(rows) => {
                    owners.extend(std::iter::repeat_n(index, rows.num_rows()));
                    good.push(rows);
                }
                // Name the first bad message, not just the batch.
                Err(e) if !self.skip_bad => return Err(rejected(*offset, e)),
                Err(e) => {
                    skipped += 1;
                    tracing::warn!(source = %self.name, topic = %self.topic, partition, offset, error = %e,
                        "skipped a message that does not parse (on_error = 'skip')");
                }
            }
        }
        if let Some(error) = error
            && !self.skip_bad
        {
            // The batch failed but no message alone did.
            return Err(rejected(gathered.first, error));
        }
        let rows = arrow::compute::concat_batches(&self.columns.value, &good)
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
        Ok((rows, skipped, owners))
    }

    fn failed_read(&self, e: KafkaError) -> ConnectorError {
        let gap = matches!(
            e.rdkafka_error_code(),
            Some(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange)
        );
        if gap && self.until.is_none() {
            self.gap(format!(
                "topic {}: an offset Weir sealed is out of the broker's range (retention deleted \
                 messages, or the topic was deleted and created again), so messages are lost to source {}: {e}",
                self.topic, self.name
            ))
        } else if gap {
            ConnectorError::Rejected {
                connector: NAME.into(),
                message: format!(
                    "topic {}: a projection or sink created after source {} was read must read it \
                     again, but an offset is out of the broker's range: {e}",
                    self.topic, self.name
                ),
            }
        } else {
            kafka_error(&format!("reading topic {}", self.topic), e)
        }
    }
}

#[async_trait]
impl Source for KafkaSource {
    fn splits(&self) -> Vec<String> {
        vec![SPLIT.to_string()]
    }

    async fn next(&mut self) -> Result<SourceEvent, ConnectorError> {
        if !self.assigned {
            self.assign().await?;
        }
        if let Some(accepted) = self.accepting.take() {
            // Sealed, so a restart knows the gap is behind it.
            return Ok(SourceEvent::Transaction {
                batches: vec![SourceBatch {
                    split: GAPS.to_string(),
                    changes: ChangeBatch::inserts(RecordBatch::new_empty(self.schema.clone())),
                    offset: accepted.to_string(),
                    max_event_time: None,
                    skipped: 0,
                }],
                position: String::new(),
            });
        }
        if let Some(until) = &self.until
            && until.keys().all(|p| self.replay_done(*p))
        {
            if self.ended {
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Ok(SourceEvent::Idle);
            }
            self.ended = true;
            return Ok(SourceEvent::SplitEnd {
                split: SPLIT.to_string(),
            });
        }
        let mut gathered: BTreeMap<i32, Gathered> = BTreeMap::new();
        let mut messages = 0;
        while messages < MAX_MESSAGES {
            // Messages already fetched are taken without a timer each (a
            // timer per message was a tenth of the reader's time); only
            // when none is ready does the reader wait, briefly once some
            // were gathered.
            let ready = match self.consumer.recv().now_or_never() {
                Some(ready) => Some(ready),
                None => {
                    let wait = if messages == 0 {
                        Duration::from_secs(1)
                    } else {
                        GATHER
                    };
                    tokio::time::timeout(wait, self.consumer.recv()).await.ok()
                }
            };
            let message = match ready {
                None => break,
                Some(Err(e)) => return Err(self.failed_read(e)),
                Some(Ok(message)) => message,
            };
            let (partition, offset) = (message.partition(), message.offset());
            let end = self
                .until
                .as_ref()
                .map(|u| u.get(&partition).copied().unwrap_or(0));
            if end.is_some_and(|end| offset >= end) {
                // A replay past its end in this partition.
                continue;
            }
            let entry = gathered.entry(partition).or_insert_with(|| Gathered {
                payloads: Vec::new(),
                messages: Vec::new(),
                meta: Vec::new(),
                first: offset,
                next: offset,
            });
            entry.next = offset + 1;
            // A message without a value (a tombstone) holds no row.
            if let Some(payload) = message.payload() {
                let start = entry.payloads.len();
                entry.payloads.extend_from_slice(payload);
                entry.payloads.push(b'\n');
                entry.messages.push((offset, start..entry.payloads.len()));
                if self.columns.any() {
                    entry.meta.push(Meta {
                        key: self
                            .columns
                            .wants_key()
                            .then(|| message.key().map(<[u8]>::to_vec))
                            .flatten(),
                        timestamp: message.timestamp().to_millis(),
                        offset,
                        headers: self
                            .columns
                            .wants_headers()
                            .then(|| message.headers().map(headers_json))
                            .flatten(),
                    });
                }
            }
            messages += 1;
        }
        if gathered.is_empty() {
            return Ok(SourceEvent::Idle);
        }
        let mut batches = Vec::with_capacity(gathered.len());
        for (partition, gathered) in gathered {
            let (rows, skipped) = self.decode(partition, &gathered)?;
            let (first, next) = (gathered.first, gathered.next);
            self.next.insert(partition, next);
            if !self.first.contains_key(&partition) {
                // Sealed with the rows: where a replay of this partition starts.
                self.first.insert(partition, first);
                batches.push(SourceBatch {
                    split: format!("{partition}{START}"),
                    changes: ChangeBatch::inserts(RecordBatch::new_empty(self.schema.clone())),
                    offset: first.to_string(),
                    max_event_time: None,
                    skipped: 0,
                });
            }
            batches.push(SourceBatch {
                split: partition.to_string(),
                changes: ChangeBatch::inserts(rows),
                offset: next.to_string(),
                max_event_time: None,
                skipped,
            });
        }
        Ok(SourceEvent::Transaction {
            batches,
            position: String::new(),
        })
    }

    async fn on_sealed(&mut self, _epoch: u64, offsets: &Offsets) -> Result<(), ConnectorError> {
        if !self.commit_group {
            return Ok(());
        }
        let mut list = TopicPartitionList::new();
        for (split, offset) in offsets {
            if let (Ok(partition), Ok(offset)) = (split.parse::<i32>(), offset.parse::<i64>()) {
                list.add_partition_offset(&self.topic, partition, Offset::Offset(offset))
                    .map_err(|e| kafka_error("committing offsets", e))?;
            }
        }
        if list.count() == 0 {
            return Ok(());
        }
        self.consumer
            .commit(&list, CommitMode::Async)
            .map_err(|e| kafka_error("committing offsets", e))
    }
}

/// Offsets as sealed: per partition the next offset (split `<p>`) and
/// where it started (split `<p>.start`).
type PartitionOffsets = BTreeMap<i32, i64>;

/// Offsets as sealed: the next offsets, the first ones, and the gaps
/// gone on past.
fn parse_offsets(
    offsets: &Offsets,
) -> Result<(PartitionOffsets, PartitionOffsets, u32), ConnectorError> {
    let mut next = BTreeMap::new();
    let mut first = BTreeMap::new();
    let mut gaps = 0;
    for (split, offset) in offsets {
        if split == SPLIT {
            continue;
        }
        if split == GAPS {
            gaps = offset.parse().unwrap_or(0);
            continue;
        }
        let bad = || ConnectorError::BadPosition {
            connector: NAME.into(),
            value: format!("{split}={offset}"),
            message: "expected a partition number (or <partition>.start) and an offset".into(),
        };
        let (partition, into) = match split.strip_suffix(START) {
            Some(p) => (p, &mut first),
            None => (split.as_str(), &mut next),
        };
        into.insert(
            partition.parse::<i32>().map_err(|_| bad())?,
            offset.parse::<i64>().map_err(|_| bad())?,
        );
    }
    Ok((next, first, gaps))
}

/// A message's headers as one JSON object (`{"name": "value"}`, values
/// as UTF-8 text with invalid bytes replaced, a header without a value as
/// null, a repeated name's last value).
fn headers_json(headers: &rdkafka::message::BorrowedHeaders) -> String {
    use rdkafka::message::Headers;
    let object: serde_json::Map<String, serde_json::Value> = headers
        .iter()
        .map(|h| {
            let value = h.value.map_or(serde_json::Value::Null, |v| {
                serde_json::Value::String(String::from_utf8_lossy(v).into_owned())
            });
            (h.key.to_string(), value)
        })
        .collect();
    serde_json::Value::Object(object).to_string()
}
