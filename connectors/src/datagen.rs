//! The `datagen` source: typed rows from per-column specs, deterministic
//! for a seed, for tests and demos.
//!
//! Options per column `c` (all optional):
//! - `fields.c.kind`: `sequence` (the row number counted from `start`,
//!   default 1; text columns get its digits; timestamps advance
//!   `step_ms` per row from `base_time`) or `random` (uniform in
//!   [`min`, `max`], default 0..1000 for numbers; `length` random
//!   letters and digits for text, default 10; true or false for booleans).
//!   Default: `sequence` for timestamps, `random` for the rest.
//! - `fields.c.start`, `fields.c.min`, `fields.c.max`, `fields.c.length`,
//!   `fields.c.step_ms`.
//!
//! Row n's random values come from a generator seeded by (`seed`, n), so
//! resuming at offset n (the rows emitted, one split `"0"`) yields exactly
//! the rows an uninterrupted run would.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Float32Builder, Float64Builder, Int16Builder, Int32Builder,
    Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use async_trait::async_trait;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::spec::{
    Capabilities, ConnectorKind, ConnectorSpec, Delivery, OptionSpec, OptionType, Options,
};
use crate::{
    Connector, ConnectorError, GENERATOR_SPLIT, GeneratorSplit, Source, SourceEvent, SourceOpen,
};

const NAME: &str = "datagen";
const BATCH_ROWS: usize = 4096;

static SPEC: ConnectorSpec = ConnectorSpec {
    name: NAME,
    kind: ConnectorKind::Source,
    help: "generated rows from per-column specs (fields.<column>.kind = sequence | random, ...)",
    options: &[
        OptionSpec::optional("rows_per_second", OptionType::Count, "rows per second of wall clock (default: as fast as read)"),
        OptionSpec::optional("max_rows", OptionType::Count, "stop after this many rows (default: unbounded)"),
        OptionSpec::optional("seed", OptionType::Integer, "seed of the random columns").with_default("0"),
        OptionSpec::optional("base_time", OptionType::EpochMillis, "first value of sequence timestamps, ms since 1970 (default: the time of CREATE, then fixed)").fixed_at_create(),
        OptionSpec::optional("fields.*.kind", OptionType::OneOf(&["sequence", "random"]), "how the column's values are made"),
        OptionSpec::optional("fields.*.start", OptionType::Integer, "first value of a sequence (default 1)"),
        OptionSpec::optional("fields.*.min", OptionType::Integer, "smallest random value (default 0)"),
        OptionSpec::optional("fields.*.max", OptionType::Integer, "largest random value (default 1000)"),
        OptionSpec::optional("fields.*.length", OptionType::Count, "length of random text (default 10)"),
        OptionSpec::optional("fields.*.step_ms", OptionType::Count, "milliseconds a sequence timestamp advances per row (default 1000)"),
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

pub(crate) struct DatagenConnector;

impl Connector for DatagenConnector {
    fn spec(&self) -> &'static ConnectorSpec {
        &SPEC
    }

    fn source_columns(
        &self,
        declared: Option<&SchemaRef>,
        options: &BTreeMap<String, String>,
    ) -> Result<SchemaRef, ConnectorError> {
        let Some(schema) = declared else {
            return Err(ConnectorError::BadOption {
                connector: NAME.into(),
                option: "columns".into(),
                message: "datagen needs the columns declared: CREATE SOURCE name (column type, ...) WITH (connector = 'datagen', ...)".into(),
            });
        };
        plans(schema, options)?;
        Ok(schema.clone())
    }

    fn open_source(&self, open: SourceOpen<'_>) -> Result<Box<dyn Source>, ConnectorError> {
        let options = Options::new(&SPEC, open.options);
        let split = GeneratorSplit::open(
            NAME,
            &open,
            options.u64("max_rows")?,
            options.u64("rows_per_second")?,
        )?;
        Ok(Box::new(DatagenSource {
            plans: plans(&open.schema, open.options)?,
            schema: open.schema,
            seed: options.i64("seed")?.unwrap_or(0) as u64,
            split,
        }))
    }
}

/// How one column's values are made.
#[derive(Debug, Clone)]
enum Plan {
    Sequence { start: i64 },
    Random { min: i64, max: i64 },
    Text { length: usize },
    SequenceText { start: i64 },
    Bool,
    Timestamp { base_us: i64, step_us: i64 },
}

fn plans(
    schema: &SchemaRef,
    given: &BTreeMap<String, String>,
) -> Result<Vec<Plan>, ConnectorError> {
    let options = Options::new(&SPEC, given);
    for key in given.keys().filter(|k| k.starts_with("fields.")) {
        let column = key
            .trim_start_matches("fields.")
            .split('.')
            .next()
            .unwrap_or("");
        if schema.index_of(column).is_err() {
            return Err(ConnectorError::BadOption {
                connector: NAME.into(),
                option: key.clone(),
                message: format!("there is no column \"{column}\" in this source"),
            });
        }
    }
    let base_ms = options.i64("base_time")?.unwrap_or(0);
    schema
        .fields()
        .iter()
        .map(|field| {
            let name = field.name();
            let get = |what: &str| options.i64(&format!("fields.{name}.{what}"));
            let kind = options.get(&format!("fields.{name}.kind"));
            let mismatch = |message: String| ConnectorError::ColumnMismatch {
                connector: NAME.into(),
                column: name.clone(),
                message,
            };
            Ok(match field.data_type() {
                DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::Float32 | DataType::Float64 => {
                    match kind {
                        Some("sequence") => Plan::Sequence { start: get("start")?.unwrap_or(1) },
                        _ => {
                            let (min, max) = (get("min")?.unwrap_or(0), get("max")?.unwrap_or(1000));
                            if min > max {
                                return Err(ConnectorError::BadOption {
                                    connector: NAME.into(),
                                    option: format!("fields.{name}.min"),
                                    message: format!("min {min} is above max {max}"),
                                });
                            }
                            Plan::Random { min, max }
                        }
                    }
                }
                DataType::Utf8 => match kind {
                    Some("sequence") => Plan::SequenceText { start: get("start")?.unwrap_or(1) },
                    _ => Plan::Text { length: get("length")?.unwrap_or(10).max(0) as usize },
                },
                DataType::Boolean => match kind {
                    Some("sequence") => return Err(mismatch("a boolean column can only be random".into())),
                    _ => Plan::Bool,
                },
                DataType::Timestamp(TimeUnit::Microsecond, _) => match kind {
                    Some("random") => return Err(mismatch("a timestamp column can only be a sequence".into())),
                    _ => Plan::Timestamp {
                        base_us: base_ms.saturating_mul(1000),
                        step_us: get("step_ms")?.unwrap_or(1000).saturating_mul(1000),
                    },
                },
                other => {
                    return Err(mismatch(format!(
                        "datagen makes smallint, integer, bigint, real, double precision, text, boolean and timestamp columns, not {other}"
                    )));
                }
            })
        })
        .collect()
}

struct DatagenSource {
    schema: SchemaRef,
    plans: Vec<Plan>,
    seed: u64,
    split: GeneratorSplit,
}

#[async_trait]
impl Source for DatagenSource {
    fn splits(&self) -> Vec<String> {
        vec![GENERATOR_SPLIT.to_string()]
    }

    async fn next(&mut self) -> Result<SourceEvent, ConnectorError> {
        let rows = match self.split.next_rows(BATCH_ROWS).await {
            Ok(rows) => rows,
            Err(event) => return Ok(event),
        };
        let (batch, max_time) = self.generate(rows)?;
        Ok(self.split.batch(batch, max_time))
    }
}

enum Builder {
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    Text(StringBuilder),
    Bool(BooleanBuilder),
    Time(TimestampMicrosecondBuilder, Option<Arc<str>>),
}

impl DatagenSource {
    fn generate(&mut self, rows: usize) -> Result<(RecordBatch, Option<i64>), ConnectorError> {
        let mut builders: Vec<Builder> = self
            .schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Int16 => Builder::I16(Int16Builder::with_capacity(rows)),
                DataType::Int32 => Builder::I32(Int32Builder::with_capacity(rows)),
                DataType::Int64 => Builder::I64(Int64Builder::with_capacity(rows)),
                DataType::Float32 => Builder::F32(Float32Builder::with_capacity(rows)),
                DataType::Float64 => Builder::F64(Float64Builder::with_capacity(rows)),
                DataType::Boolean => Builder::Bool(BooleanBuilder::with_capacity(rows)),
                DataType::Timestamp(_, tz) => {
                    Builder::Time(TimestampMicrosecondBuilder::with_capacity(rows), tz.clone())
                }
                _ => Builder::Text(StringBuilder::with_capacity(rows, rows * 10)),
            })
            .collect();
        let mut max_time = None;
        let mut text = String::new();
        let first = self.split.offset();
        for n in first..first + rows as u64 {
            let mut rng =
                SmallRng::seed_from_u64(self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            for (plan, builder) in self.plans.iter().zip(&mut builders) {
                let number = match plan {
                    Plan::Sequence { start } => start.saturating_add(n as i64),
                    Plan::Random { min, max } => rng.gen_range(*min..=*max),
                    _ => 0,
                };
                match (plan, builder) {
                    (Plan::Text { length }, Builder::Text(b)) => {
                        text.clear();
                        text.extend(
                            (0..*length)
                                .map(|_| rng.sample(rand::distributions::Alphanumeric) as char),
                        );
                        b.append_value(&text);
                    }
                    (Plan::SequenceText { start }, Builder::Text(b)) => {
                        b.append_value(start.saturating_add(n as i64).to_string())
                    }
                    (Plan::Bool, Builder::Bool(b)) => b.append_value(rng.r#gen()),
                    (Plan::Timestamp { base_us, step_us }, Builder::Time(b, _)) => {
                        let t = base_us.saturating_add(step_us.saturating_mul(n as i64));
                        max_time = Some(max_time.map_or(t, |m: i64| m.max(t)));
                        b.append_value(t);
                    }
                    (_, Builder::I16(b)) => b.append_value(number as i16),
                    (_, Builder::I32(b)) => b.append_value(number as i32),
                    (_, Builder::I64(b)) => b.append_value(number),
                    (_, Builder::F32(b)) => b.append_value(number as f32),
                    (_, Builder::F64(b)) => b.append_value(number as f64),
                    (plan, _) => unreachable!("plans() pairs {plan:?} with its column type"),
                }
            }
        }
        let arrays: Vec<ArrayRef> = builders
            .into_iter()
            .map(|b| -> ArrayRef {
                match b {
                    Builder::I16(mut b) => Arc::new(b.finish()),
                    Builder::I32(mut b) => Arc::new(b.finish()),
                    Builder::I64(mut b) => Arc::new(b.finish()),
                    Builder::F32(mut b) => Arc::new(b.finish()),
                    Builder::F64(mut b) => Arc::new(b.finish()),
                    Builder::Text(mut b) => Arc::new(b.finish()),
                    Builder::Bool(mut b) => Arc::new(b.finish()),
                    Builder::Time(mut b, tz) => Arc::new(b.finish().with_timezone_opt(tz)),
                }
            })
            .collect();
        let batch = RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|e| ConnectorError::arrow(NAME, e))?;
        Ok((batch, max_time))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ]))
    }

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    async fn rows(offsets: &[(&str, &str)], seed: &str) -> RecordBatch {
        let options = options(&[
            ("fields.id.kind", "sequence"),
            ("fields.v.min", "5"),
            ("fields.v.max", "7"),
            ("fields.s.length", "4"),
            ("max_rows", "10000"),
            ("seed", seed),
            ("base_time", "0"),
        ]);
        let offsets = options_of(offsets);
        let mut source = DatagenConnector
            .open_source(SourceOpen {
                name: "g",
                schema: schema(),
                options: &options,
                offsets: &offsets,
                until: None,
                tables: &[],
            })
            .unwrap();
        let mut out = Vec::new();
        loop {
            match source.next().await.unwrap() {
                SourceEvent::Batch(b) => out.push(b.changes.rows().clone()),
                SourceEvent::Transaction { batches, .. } => {
                    out.extend(batches.iter().map(|b| b.changes.rows().clone()))
                }
                SourceEvent::SplitEnd { .. } => break,
                SourceEvent::SplitFailed { message, .. } => panic!("a split failed: {message}"),
                SourceEvent::Idle => {}
            }
        }
        arrow::compute::concat_batches(&schema(), &out).unwrap()
    }

    fn options_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        options(pairs)
    }

    #[tokio::test]
    async fn deterministic_for_a_seed_and_resumable_at_any_offset() {
        let all = rows(&[], "42").await;
        assert_eq!(all.num_rows(), 10_000);
        assert_eq!(all, rows(&[], "42").await);
        assert_ne!(all, rows(&[], "43").await);
        assert_eq!(
            all.slice(1234, 10_000 - 1234),
            rows(&[("0", "1234")], "42").await
        );
        let text = arrow::util::pretty::pretty_format_batches(&[all.slice(0, 2)])
            .unwrap()
            .to_string();
        assert!(text.contains("| 1  |"), "{text}");
        assert!(text.contains("1970-01-01T00:00:01"), "{text}");
        let v = arrow::compute::cast(all.column(1), &DataType::Int64).unwrap();
        let v = v
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        assert!(v.iter().all(|x| (5..=7).contains(&x.unwrap())));
    }

    #[test]
    fn column_options_must_name_a_column_of_a_type_it_can_make() {
        let bad = DatagenConnector
            .source_columns(Some(&schema()), &options(&[("fields.nope.kind", "random")]));
        assert!(bad.unwrap_err().to_string().contains("no column \"nope\""));
        let dec = Arc::new(Schema::new(vec![Field::new(
            "d",
            DataType::Decimal128(10, 2),
            true,
        )]));
        let err = DatagenConnector
            .source_columns(Some(&dec), &options(&[]))
            .unwrap_err();
        assert_eq!(err.sqlstate(), "42804");
        assert!(
            DatagenConnector
                .source_columns(None, &options(&[]))
                .is_err()
        );
    }
}
