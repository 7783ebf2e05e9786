//! The `nexmark` source: the person, auction and bid streams of the
//! `nexmark` crate (RisingWave Labs' generator, the one the benchmark
//! definition names), one event type per source.
//!
//! All three sources of a benchmark slice the same global stream: the
//! crate's type filter maps a per-type offset to the global event number,
//! so `bid` at offset n is the n-th bid of the stream whatever else reads
//! the other types. The offset (one split, `"0"`) is the number of events
//! of this type emitted, so a restart resumes at exactly the next event.
//! `max_events` counts events of all types, as the crate does: 10 M events
//! are 200 000 persons, 600 000 auctions and 9 200 000 bids.

use std::sync::{Arc, LazyLock};

use arrow::array::{
    ArrayRef, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use nexmark::EventGenerator;
use nexmark::config::NexmarkConfig;
use nexmark::event::{Event, EventType};

use crate::spec::{Capabilities, ConnectorKind, ConnectorSpec, Delivery, OptionSpec, OptionType};
use crate::{
    Connector, ConnectorError, GENERATOR_SPLIT, GeneratorSplit, Source, SourceEvent, SourceOpen,
};

const NAME: &str = "nexmark";
/// The benchmark rules' event-time rate (events per second of event time).
const DEFAULT_EVENT_RATE: &str = "10000000";
/// Rows per batch when unpaced.
const BATCH_ROWS: usize = 8192;

static SPEC: ConnectorSpec = ConnectorSpec {
    name: NAME,
    kind: ConnectorKind::Source,
    help: "Nexmark benchmark events (person, auction, bid) from the nexmark crate",
    options: &[
        OptionSpec::optional(
            "event",
            OptionType::OneOf(&["person", "auction", "bid"]),
            "which event type this source carries",
        )
        .required(),
        OptionSpec::optional(
            "event_rate",
            OptionType::Count,
            "events per second of event time (the generator's first_rate and next_rate)",
        )
        .with_default(DEFAULT_EVENT_RATE),
        OptionSpec::optional(
            "rate_limit",
            OptionType::Count,
            "events per second of wall clock this source emits (default: as fast as read)",
        )
        .tunable(),
        OptionSpec::optional(
            "base_time",
            OptionType::EpochMillis,
            "the event-time origin in ms since 1970 (default: the time of CREATE, then fixed)",
        )
        .fixed_at_create(),
        OptionSpec::optional(
            "max_events",
            OptionType::Count,
            "stop after this many events of all types, as the generator counts them (default: unbounded)",
        ),
    ],
    capabilities: Capabilities {
        read_modes: &["full"],
        append_only: true,
        replayable: true,
        bounded: false,
        delivery: &[Delivery::ExactlyOnce],
        skips: false,
    },
};

pub(crate) struct NexmarkConnector;

impl Connector for NexmarkConnector {
    fn spec(&self) -> &'static ConnectorSpec {
        &SPEC
    }

    fn produced_columns(
        &self,
        options: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<SchemaRef>, ConnectorError> {
        Ok(Some(schema_of(event_type(options)?)))
    }

    fn open_source(&self, open: SourceOpen<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        let options = crate::spec::Options::new(&SPEC, open.options);
        let kind = event_type(open.options)?;
        let rate = options.u64("event_rate")?.unwrap_or(10_000_000).max(1) as usize;
        let base_time = options.i64("base_time")?.unwrap_or_else(crate::now_millis);
        let config = NexmarkConfig {
            first_rate: rate,
            next_rate: rate,
            base_time: base_time.max(0) as u64,
            ..NexmarkConfig::default()
        };
        let limit = options
            .u64("max_events")?
            .map(|total| events_of_type(&config, kind, total));
        let split = GeneratorSplit::open(NAME, &open, limit, options.u64("rate_limit")?)?;
        let produced = schema_of(kind);
        let columns = open
            .schema
            .fields()
            .iter()
            .map(|f| crate::spec::produced_index(NAME, &produced, f))
            .collect::<Result<_, _>>()?;
        Ok(Box::new(NexmarkSource {
            generator: EventGenerator::new(config)
                .with_type_filter(kind)
                .with_offset(split.offset()),
            maker: BatchMaker {
                kind,
                schema: open.schema,
                columns,
            },
            split,
        }))
    }
}

fn event_type(
    options: &std::collections::BTreeMap<String, String>,
) -> Result<EventType, ConnectorError> {
    match options.get("event").map(String::as_str) {
        Some("person") => Ok(EventType::Person),
        Some("auction") => Ok(EventType::Auction),
        Some("bid") => Ok(EventType::Bid),
        other => Err(ConnectorError::BadOption {
            connector: NAME.into(),
            option: "event".into(),
            message: format!("{other:?} is not person, auction or bid"),
        }),
    }
}

/// How many events of `kind` the first `total` events of the stream hold.
pub(crate) fn events_of_type(config: &NexmarkConfig, kind: EventType, total: u64) -> u64 {
    let person = config.person_proportion as u64;
    let auction = config.auction_proportion as u64;
    let bid = config.bid_proportion as u64;
    let cycle = person + auction + bid;
    let (start, share) = match kind {
        EventType::Person => (0, person),
        EventType::Auction => (person, auction),
        EventType::Bid => (person + auction, bid),
    };
    total / cycle * share + (total % cycle).saturating_sub(start).min(share)
}

static SCHEMAS: LazyLock<[SchemaRef; 3]> = LazyLock::new(|| {
    use DataType::{Int64, Utf8};
    let ts = || DataType::Timestamp(TimeUnit::Microsecond, None);
    let make = |cols: &[(&str, DataType)]| -> SchemaRef {
        Arc::new(Schema::new(
            cols.iter()
                .map(|(n, t)| Field::new(*n, t.clone(), false))
                .collect::<Vec<_>>(),
        ))
    };
    [
        make(&[
            ("id", Int64),
            ("name", Utf8),
            ("email_address", Utf8),
            ("credit_card", Utf8),
            ("city", Utf8),
            ("state", Utf8),
            ("date_time", ts()),
            ("extra", Utf8),
        ]),
        make(&[
            ("id", Int64),
            ("item_name", Utf8),
            ("description", Utf8),
            ("initial_bid", Int64),
            ("reserve", Int64),
            ("date_time", ts()),
            ("expires", ts()),
            ("seller", Int64),
            ("category", Int64),
            ("extra", Utf8),
        ]),
        make(&[
            ("auction", Int64),
            ("bidder", Int64),
            ("price", Int64),
            ("channel", Utf8),
            ("url", Utf8),
            ("date_time", ts()),
            ("extra", Utf8),
        ]),
    ]
});

/// The columns of `sources.sql` for an event type, in its order.
pub(crate) fn schema_of(kind: EventType) -> SchemaRef {
    let i = match kind {
        EventType::Person => 0,
        EventType::Auction => 1,
        EventType::Bid => 2,
    };
    SCHEMAS[i].clone()
}

struct NexmarkSource {
    /// The crate's generator, positioned at the next event.
    generator: EventGenerator,
    maker: BatchMaker,
    /// Events of this type emitted so far, and where to stop.
    split: GeneratorSplit,
}

#[async_trait]
impl Source for NexmarkSource {
    fn splits(&self) -> Vec<String> {
        vec![GENERATOR_SPLIT.to_string()]
    }

    async fn next(&mut self) -> Result<SourceEvent, ConnectorError> {
        let rows = match self.split.next_rows(BATCH_ROWS).await {
            Ok(rows) => rows,
            Err(event) => return Ok(event),
        };
        let (batch, max_time) = self.generate(rows)?;
        Ok(self.split.batch(batch, Some(max_time)))
    }
}

impl NexmarkSource {
    /// The next `rows` events as a batch of the declared columns, and the
    /// largest event time among them (µs). A large batch is made in two
    /// halves on two threads (the crate makes each event from its number
    /// alone, so the second half starts from a generator moved to its
    /// first event), joined in order. Making the next batch ahead on more
    /// threads was measured too: on two cores it starves the epoch loop and
    /// is slower (bench/README.md).
    fn generate(&mut self, rows: usize) -> Result<(RecordBatch, i64), ConnectorError> {
        let start = self.generator.offset();
        let (batch, max_time) = if rows >= PARALLEL_ROWS && *CORES > 1 {
            let half = rows / 2;
            let (generator, maker) = (&self.generator, &self.maker);
            let second = move || generator.clone().with_offset(start + half as u64);
            let (a, b) = std::thread::scope(|scope| {
                let b = std::thread::Builder::new()
                    .name("weir-nexmark".into())
                    .spawn_scoped(scope, move || maker.make(second(), rows - half));
                let a = maker.make(generator.clone(), half);
                let b = match b {
                    Ok(handle) => handle
                        .join()
                        .unwrap_or_else(|panic| Err(ConnectorError::panicked(NAME, &*panic))),
                    // No thread to be had: make it here.
                    Err(_) => maker.make(second(), rows - half),
                };
                (a, b)
            });
            let ((a, a_time), (b, b_time)) = (a?, b?);
            let batch = arrow::compute::concat_batches(&self.maker.schema, [&a, &b])
                .map_err(|e| ConnectorError::arrow(NAME, e))?;
            (batch, a_time.max(b_time))
        } else {
            self.maker.make(self.generator.clone(), rows)?
        };
        self.generator = std::mem::take(&mut self.generator).with_offset(start + rows as u64);
        Ok((batch, max_time))
    }
}

/// Turns events into batches of the declared columns.
struct BatchMaker {
    kind: EventType,
    /// The declared columns.
    schema: SchemaRef,
    /// Per declared column, its index among the produced ones.
    columns: Vec<usize>,
}

impl BatchMaker {
    /// `rows` events from `generator` on, as a batch of the declared
    /// columns, and the largest event time among them (µs).
    fn make(
        &self,
        generator: EventGenerator,
        rows: usize,
    ) -> Result<(RecordBatch, i64), ConnectorError> {
        let mut columns = Columns::new(self.kind, rows);
        let mut max_time = i64::MIN;
        for event in generator.take(rows) {
            max_time = max_time.max(columns.push(&event));
        }
        let produced = columns.finish();
        let arrays: Vec<ArrayRef> = self.columns.iter().map(|&i| produced[i].clone()).collect();
        let batch = RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
        Ok((batch, max_time))
    }
}

/// Rows of a batch from which it is made on two threads: a thread costs
/// tens of microseconds, a few thousand events a millisecond or more.
const PARALLEL_ROWS: usize = 4096;

static CORES: LazyLock<usize> =
    LazyLock::new(|| std::thread::available_parallelism().map_or(1, |n| n.get()));

fn micros(ms: u64) -> i64 {
    (ms as i64).saturating_mul(1000)
}

/// Builders for every produced column of one event type.
struct Columns {
    ints: Vec<Int64Builder>,
    texts: Vec<StringBuilder>,
    times: Vec<TimestampMicrosecondBuilder>,
    kind: EventType,
}

impl Columns {
    fn new(kind: EventType, rows: usize) -> Self {
        let (ints, texts, times) = match kind {
            EventType::Person => (1, 6, 1),
            EventType::Auction => (5, 3, 2),
            EventType::Bid => (3, 3, 1),
        };
        Self {
            ints: (0..ints)
                .map(|_| Int64Builder::with_capacity(rows))
                .collect(),
            texts: (0..texts)
                .map(|_| StringBuilder::with_capacity(rows, rows * 16))
                .collect(),
            times: (0..times)
                .map(|_| TimestampMicrosecondBuilder::with_capacity(rows))
                .collect(),
            kind,
        }
    }

    /// Appends one event; returns its event time (µs).
    fn push(&mut self, event: &Event) -> i64 {
        let (i, s, t) = (&mut self.ints, &mut self.texts, &mut self.times);
        match event {
            Event::Person(p) => {
                i[0].append_value(p.id as i64);
                for (b, v) in s.iter_mut().zip([
                    &p.name,
                    &p.email_address,
                    &p.credit_card,
                    &p.city,
                    &p.state,
                    &p.extra,
                ]) {
                    b.append_value(v);
                }
                t[0].append_value(micros(p.date_time));
                micros(p.date_time)
            }
            Event::Auction(a) => {
                for (b, v) in i.iter_mut().zip([
                    a.id as i64,
                    a.initial_bid as i64,
                    a.reserve as i64,
                    a.seller as i64,
                    a.category as i64,
                ]) {
                    b.append_value(v);
                }
                for (b, v) in s.iter_mut().zip([&a.item_name, &a.description, &a.extra]) {
                    b.append_value(v);
                }
                t[0].append_value(micros(a.date_time));
                t[1].append_value(micros(a.expires));
                micros(a.date_time)
            }
            Event::Bid(b) => {
                for (builder, v) in
                    i.iter_mut()
                        .zip([b.auction as i64, b.bidder as i64, b.price as i64])
                {
                    builder.append_value(v);
                }
                for (builder, v) in s.iter_mut().zip([&b.channel, &b.url, &b.extra]) {
                    builder.append_value(v);
                }
                t[0].append_value(micros(b.date_time));
                micros(b.date_time)
            }
        }
    }

    /// The produced columns, in the order of [`schema_of`].
    fn finish(mut self) -> Vec<ArrayRef> {
        let mut int = self
            .ints
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef);
        let mut text = self
            .texts
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef);
        let mut time = self
            .times
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef);
        let mut next = |c: char| {
            match c {
                'i' => int.next(),
                's' => text.next(),
                _ => time.next(),
            }
            .expect("one builder per produced column")
        };
        let layout = match self.kind {
            EventType::Person => "isssssts",
            EventType::Auction => "issiittiis",
            EventType::Bid => "iiissts",
        };
        layout.chars().map(&mut next).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array, StringArray, TimestampMicrosecondArray};

    fn open(event: &str, offsets: &[(&str, &str)], max: &str) -> Box<dyn Source> {
        let options = [
            ("event", event),
            ("base_time", "1700000000000"),
            ("max_events", max),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let offsets = offsets
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let kind = event_type(&options).unwrap();
        NexmarkConnector
            .open_source(SourceOpen {
                name: "t",
                schema: schema_of(kind),
                options: &options,
                offsets: &offsets,
                until: None,
                tables: &[],
            })
            .unwrap()
    }

    async fn drain(source: &mut Box<dyn Source>) -> Vec<RecordBatch> {
        let mut out = Vec::new();
        loop {
            match source.next().await.unwrap() {
                SourceEvent::Batch(b) => out.push(b.changes.rows().clone()),
                SourceEvent::Transaction { batches, .. } => {
                    out.extend(batches.iter().map(|b| b.changes.rows().clone()))
                }
                SourceEvent::SplitEnd { .. } => return out,
                SourceEvent::SplitFailed { message, .. } => panic!("a split failed: {message}"),
                SourceEvent::Idle => {}
            }
        }
    }

    #[test]
    fn type_counts_follow_the_generators_proportions() {
        let config = NexmarkConfig::default();
        assert_eq!(
            events_of_type(&config, EventType::Person, 10_000_000),
            200_000
        );
        assert_eq!(
            events_of_type(&config, EventType::Auction, 10_000_000),
            600_000
        );
        assert_eq!(
            events_of_type(&config, EventType::Bid, 10_000_000),
            9_200_000
        );
        assert_eq!(events_of_type(&config, EventType::Bid, 5), 1);
        assert_eq!(events_of_type(&config, EventType::Auction, 2), 1);
    }

    /// Batches large enough to be made on two threads hold, every field,
    /// the crate's events in the crate's order, for each type.
    #[tokio::test]
    async fn batches_made_on_two_threads_are_the_crates_events_in_order() {
        for (event, kind, total) in [
            ("person", EventType::Person, 500_000),
            ("auction", EventType::Auction, 200_000),
            ("bid", EventType::Bid, 50_000),
        ] {
            let mut source = open(event, &[("0", "7")], &total.to_string());
            let batches = drain(&mut source).await;
            assert!(batches.iter().any(|b| b.num_rows() >= PARALLEL_ROWS));
            let got = arrow::compute::concat_batches(&schema_of(kind), &batches).unwrap();
            let config = NexmarkConfig {
                first_rate: 10_000_000,
                next_rate: 10_000_000,
                base_time: 1_700_000_000_000,
                ..NexmarkConfig::default()
            };
            let rows = got.num_rows();
            assert_eq!(rows as u64, events_of_type(&config, kind, total) - 7);
            let mut columns = Columns::new(kind, rows);
            for event in EventGenerator::new(config)
                .with_type_filter(kind)
                .with_offset(7)
                .take(rows)
            {
                columns.push(&event);
            }
            let expected = RecordBatch::try_new(schema_of(kind), columns.finish()).unwrap();
            assert_eq!(got, expected, "{event}");
        }
    }

    #[tokio::test]
    async fn emits_the_crates_bids_and_resumes_exactly_at_an_offset() {
        let mut all = open("bid", &[], "1000");
        let batches = drain(&mut all).await;
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows, 920);
        let first = &batches[0];
        // The same events as the crate's own type-filtered iterator.
        let config = NexmarkConfig {
            first_rate: 10_000_000,
            next_rate: 10_000_000,
            base_time: 1_700_000_000_000,
            ..NexmarkConfig::default()
        };
        let expected: Vec<_> = EventGenerator::new(config)
            .with_type_filter(EventType::Bid)
            .take(3)
            .collect();
        let auctions = first
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        let urls = first
            .column(4)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let times = first
            .column(5)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        for (i, event) in expected.iter().enumerate() {
            let Event::Bid(bid) = event else {
                panic!("not a bid")
            };
            assert_eq!(auctions.value(i), bid.auction as i64);
            assert_eq!(urls.value(i), bid.url);
            assert_eq!(times.value(i), bid.date_time as i64 * 1000);
        }
        // Resuming at offset 500 yields rows 500.. of the uninterrupted run.
        let mut resumed = open("bid", &[("0", "500")], "1000");
        let tail = drain(&mut resumed).await;
        let whole = arrow::compute::concat_batches(&first.schema(), &batches).unwrap();
        let tail = arrow::compute::concat_batches(&first.schema(), &tail).unwrap();
        assert_eq!(tail.num_rows(), 420);
        assert_eq!(whole.slice(500, 420), tail);
        // A replay bounded by `until` ends exactly there.
        let options = [("event", "bid"), ("base_time", "1700000000000")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let until = [("0".to_string(), "333".to_string())].into_iter().collect();
        let mut replay = NexmarkConnector
            .open_source(SourceOpen {
                name: "t",
                schema: schema_of(EventType::Bid),
                options: &options,
                offsets: &Default::default(),
                until: Some(&until),
                tables: &[],
            })
            .unwrap();
        let head = drain(&mut replay).await;
        let head = arrow::compute::concat_batches(&first.schema(), &head).unwrap();
        assert_eq!(head, whole.slice(0, 333));
        assert_eq!(whole.column(0).null_count(), 0);
    }
}
