//! `weir-bench micro`: engine operators in process, rows per second, on
//! one thread (two for the `_2_workers` variants).
//!
//! Benchmarks named `_2_workers` step two instances behind
//! `ops::parallel::Parallel` on two threads (`weir serve --workers 2`); the
//! rest run on one thread.
//!
//! Each benchmark builds an operator the way the planner would (DataFusion
//! physical expressions over Arrow schemas) and steps it with batches of a
//! few thousand rows, one step standing for one epoch. Only the operator's
//! work is timed: inputs are generated between timed sections. A stateful
//! operator's step is followed by `take_state_changes`, because the
//! checkpointer drains it every epoch and its cost grows with the step.
//!
//! Every benchmark stops at a time budget or a row cap, whichever comes
//! first, and reports the rows it pushed through in the time it measured.
//! Stateful operators get slower as their state grows (an aggregate
//! recomputes a changed group from all of that group's rows), so their
//! rate is for the state size reached, which the note column gives.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::{AggregateUDF, Operator as BinaryOp};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::{binary, col, lit};
use weir_common::{ChangeBatch, ObjectId};
use weir_engine::ops::aggregate::{Aggregate, AggregateCall};
use weir_engine::ops::join::{Join, JoinKind, JoinSpec};
use weir_engine::ops::map::Map;
use weir_engine::ops::parallel::{Keyed, Parallel};
use weir_engine::ops::session_window::{Bound, SessionSpec, SessionWindow};
use weir_engine::ops::top_n::{Numbering, TopN, TopNSpec};
use weir_engine::rows::consolidate;
use weir_engine::watermark::Watermarks;
use weir_engine::{Coordinator, Graph, Input, Operator, SourceBinding, VnodeState};
use weir_storage::TableLog;

type BoxError = Box<dyn std::error::Error>;

/// Time measured per benchmark, at most.
const BUDGET: Duration = Duration::from_millis(1500);

/// One benchmark's result. `rows` are input rows, except where the note
/// says otherwise (checkpoint entries).
struct Report {
    rows: u64,
    seconds: f64,
    note: String,
}

type Bench = fn() -> Result<Report, BoxError>;

const BENCHES: &[(&str, Bench)] = &[
    ("map_filter", map_filter),
    ("aggregate_10_groups_insert", || aggregate(10, false, 1)),
    ("aggregate_10_groups_retract20", || aggregate(10, true, 1)),
    ("aggregate_100k_groups_insert", || {
        aggregate(100_000, false, 1)
    }),
    ("aggregate_100k_groups_retract20", || {
        aggregate(100_000, true, 1)
    }),
    ("aggregate_100k_groups_insert_2_workers", || {
        aggregate(100_000, false, 2)
    }),
    ("aggregate_100k_groups_retract20_2_workers", || {
        aggregate(100_000, true, 2)
    }),
    ("join_inner", || join_inner(1)),
    ("join_inner_2_workers", || join_inner(2)),
    ("top_n", || top_n(1)),
    ("top_n_2_workers", || top_n(2)),
    ("session_window", || session_window(10_000, 1_000)),
    ("session_window_endless", || session_window(100, 10_000)),
    ("consolidate", consolidate_duplicates),
    ("table_log_append_serial", || table_log_append(1)),
    ("table_log_append_32_writers", || table_log_append(32)),
    ("checkpoint_full_encode", checkpoint_full_encode),
    ("vnode_state_decode", vnode_state_decode),
];

pub fn run(filter: Option<&str>) -> Result<(), BoxError> {
    let selected: Vec<&(&str, Bench)> = BENCHES
        .iter()
        .filter(|(name, _)| filter.is_none_or(|f| name.contains(f)))
        .collect();
    if selected.is_empty() {
        let names: Vec<&str> = BENCHES.iter().map(|(n, _)| *n).collect();
        return Err(format!("no benchmark matches; there are {}", names.join(" ")).into());
    }
    println!(
        "{:<34}{:>11}{:>9}{:>13}  note",
        "benchmark", "rows", "seconds", "rows/s"
    );
    for (name, bench) in selected {
        let r = bench()?;
        println!(
            "{:<34}{:>11}{:>9.3}{:>13.0}  {}",
            name,
            r.rows,
            r.seconds,
            r.rows as f64 / r.seconds,
            r.note
        );
    }
    Ok(())
}

/// Sums the time of timed sections until the budget or the row cap.
struct Clock {
    spent: Duration,
    rows: u64,
    max_rows: u64,
    /// Rows per second of the last timed section: where a stateful
    /// operator's rate ended up, against the average over the run.
    last_rate: f64,
}

impl Clock {
    fn new(max_rows: u64) -> Self {
        Self {
            spent: Duration::ZERO,
            rows: 0,
            max_rows,
            last_rate: 0.0,
        }
    }

    fn more(&self) -> bool {
        self.spent < BUDGET && self.rows < self.max_rows
    }

    fn time<T>(&mut self, rows: u64, work: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = work();
        let elapsed = started.elapsed();
        self.spent += elapsed;
        self.rows += rows;
        self.last_rate = rows as f64 / elapsed.as_secs_f64();
        out
    }

    fn report(&self, note: String) -> Report {
        Report {
            rows: self.rows,
            seconds: self.spent.as_secs_f64(),
            note,
        }
    }
}

/// xorshift64*: deterministic inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|(name, ty)| Field::new(*name, ty.clone(), true))
            .collect::<Vec<_>>(),
    ))
}

fn int64s(values: impl IntoIterator<Item = i64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(values))
}

fn batch(schema: &SchemaRef, columns: Vec<ArrayRef>) -> RecordBatch {
    RecordBatch::try_new(schema.clone(), columns).expect("columns follow the schema")
}

fn bid_schema() -> SchemaRef {
    schema(&[
        ("auction", DataType::Int64),
        ("bidder", DataType::Int64),
        ("price", DataType::Int64),
        ("channel", DataType::Utf8),
        ("url", DataType::Utf8),
    ])
}

const CHANNELS: [&str; 5] = ["apple", "google", "facebook", "baidu", "channel-4711"];

/// Nexmark-like bids: `rows` of them, bidders numbered from `first`.
fn bids(rows: usize, first: i64, rng: &mut Rng) -> RecordBatch {
    let n = rows as i64;
    let auctions: Vec<i64> = (0..n).map(|_| 1000 + rng.below(10_000) as i64).collect();
    let prices: Vec<i64> = (0..n).map(|_| rng.below(2_000) as i64).collect();
    let channels: Vec<&str> = (0..n).map(|i| CHANNELS[i as usize % 5]).collect();
    let urls: Vec<String> = auctions
        .iter()
        .map(|a| format!("https://www.nexmark.com/item/{a}/bids?channel_id=5"))
        .collect();
    batch(
        &bid_schema(),
        vec![
            Arc::new(Int64Array::from(auctions)),
            int64s(first..first + n),
            Arc::new(Int64Array::from(prices)),
            Arc::new(StringArray::from(channels)),
            Arc::new(StringArray::from(urls)),
        ],
    )
}

/// `SELECT auction, bidder, price * 908 / 1000, channel, url FROM bid
/// WHERE price > 1000 AND channel <> 'apple'` (about 40 % of rows pass).
fn map_filter() -> Result<Report, BoxError> {
    let input = bid_schema();
    let price = col("price", &input)?;
    let predicate = binary(
        binary(price.clone(), BinaryOp::Gt, lit(1000i64), &input)?,
        BinaryOp::And,
        binary(
            col("channel", &input)?,
            BinaryOp::NotEq,
            lit("apple"),
            &input,
        )?,
        &input,
    )?;
    let scaled = binary(
        binary(price, BinaryOp::Multiply, lit(908i64), &input)?,
        BinaryOp::Divide,
        lit(1000i64),
        &input,
    )?;
    let projection: Vec<Arc<dyn PhysicalExpr>> = vec![
        col("auction", &input)?,
        col("bidder", &input)?,
        scaled,
        col("channel", &input)?,
        col("url", &input)?,
    ];
    let mut map = Map::new(input.clone(), Some(predicate), projection, bid_schema());
    let mut rng = Rng(7);
    const ROWS: usize = 8192;
    let inputs: Vec<ChangeBatch> = (0..16)
        .map(|i| ChangeBatch::inserts(bids(ROWS, i * ROWS as i64, &mut rng)))
        .collect();
    let mut clock = Clock::new(u64::MAX);
    let mut out = 0;
    for input in inputs.iter().cycle() {
        if !clock.more() {
            break;
        }
        out += clock
            .time(ROWS as u64, || map.step(std::slice::from_ref(input)))?
            .num_rows();
    }
    Ok(clock.report(format!(
        "{ROWS} rows per step, {:.0} % pass",
        100.0 * out as f64 / clock.rows as f64
    )))
}

fn aggregate_call(
    udaf: Arc<AggregateUDF>,
    input: &SchemaRef,
    name: &str,
) -> Result<AggregateCall, BoxError> {
    let function = AggregateExprBuilder::new(udaf, vec![col("v", input)?])
        .schema(input.clone())
        .alias(name)
        .build()?;
    Ok(AggregateCall {
        function: Arc::new(function),
        filter: None,
    })
}

/// `make()`, or with more than one worker that many instances behind a
/// [`Parallel`], as the planner builds it for `weir serve --workers`.
fn workers_of(
    workers: usize,
    make: impl Fn() -> Result<Box<dyn Keyed>, BoxError>,
) -> Result<Box<dyn Operator>, BoxError> {
    if workers <= 1 {
        return Ok(make()?);
    }
    let instances = (0..workers)
        .map(|_| make())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Box::new(Parallel::new(instances)?))
}

/// `SELECT k, count(v), sum(v) FROM t GROUP BY k` over rows `(id % groups,
/// id)`; with `retract`, a fifth of each step retracts rows of the step before.
fn aggregate(groups: i64, retract: bool, workers: usize) -> Result<Report, BoxError> {
    let input = schema(&[("k", DataType::Int64), ("v", DataType::Int64)]);
    let mut agg = workers_of(workers, || {
        Ok(Box::new(Aggregate::new(
            input.clone(),
            vec![col("k", &input)?],
            vec![
                aggregate_call(count_udaf(), &input, "c")?,
                aggregate_call(sum_udaf(), &input, "s")?,
            ],
            schema(&[
                ("k", DataType::Int64),
                ("c", DataType::Int64),
                ("s", DataType::Int64),
            ]),
        )?))
    })?;
    const ROWS: i64 = 4096;
    let inserts = if retract { ROWS * 4 / 5 } else { ROWS };
    let mut next = 0i64;
    let mut previous: Option<std::ops::Range<i64>> = None;
    let mut held = 0i64;
    let mut clock = Clock::new(2_000_000);
    while clock.more() {
        let fresh = next..next + inserts;
        next += inserts;
        let retracted = match (&previous, retract) {
            (Some(p), true) => p.start..p.start + (ROWS - inserts),
            _ => 0..0,
        };
        let ids: Vec<i64> = fresh.clone().chain(retracted.clone()).collect();
        let weights: Vec<i64> = fresh
            .clone()
            .map(|_| 1)
            .chain(retracted.clone().map(|_| -1))
            .collect();
        let rows = batch(
            &input,
            vec![int64s(ids.iter().map(|v| v % groups)), int64s(ids)],
        );
        let change = ChangeBatch::new(rows, Int64Array::from(weights))?;
        held += fresh.end - fresh.start - (retracted.end - retracted.start);
        previous = Some(fresh);
        clock.time(ROWS as u64, || -> Result<(), BoxError> {
            agg.step(&[change])?;
            agg.take_state_changes()?;
            Ok(())
        })?;
    }
    Ok(clock.report(format!(
        "{ROWS} rows per step; at the end {held} rows in {} groups, {:.0} rows/s",
        groups.min(held),
        clock.last_rate
    )))
}

/// `SELECT * FROM l JOIN r ON l.k = r.rk`, 100 000 keys, both sides
/// inserting 4096 new rows per step.
fn join_inner(workers: usize) -> Result<Report, BoxError> {
    let left = schema(&[("k", DataType::Int64), ("a", DataType::Int64)]);
    let right = schema(&[("rk", DataType::Int64), ("b", DataType::Int64)]);
    let output = schema(&[
        ("k", DataType::Int64),
        ("a", DataType::Int64),
        ("rk", DataType::Int64),
        ("b", DataType::Int64),
    ]);
    let mut join = workers_of(workers, || {
        Ok(Box::new(Join::new(JoinSpec {
            kind: JoinKind::Inner,
            on: vec![(col("k", &left)?, col("rk", &right)?)],
            left_schema: left.clone(),
            right_schema: right.clone(),
            residual: None,
            output_schema: output.clone(),
        })?))
    })?;
    const ROWS: i64 = 4096;
    const KEYS: u64 = 100_000;
    let mut rng = Rng(11);
    let mut next = 0i64;
    let mut out = 0;
    let mut clock = Clock::new(2_000_000);
    while clock.more() {
        let mut side = |schema: &SchemaRef| {
            let keys: Vec<i64> = (0..ROWS).map(|_| rng.below(KEYS) as i64).collect();
            ChangeBatch::inserts(batch(
                schema,
                vec![Arc::new(Int64Array::from(keys)), int64s(next..next + ROWS)],
            ))
        };
        let inputs = [side(&left), side(&right)];
        next += ROWS;
        out += clock.time(2 * ROWS as u64, || -> Result<usize, BoxError> {
            let out = join.step(&inputs)?.num_rows();
            join.take_state_changes()?;
            Ok(out)
        })?;
    }
    Ok(clock.report(format!(
        "{ROWS} rows per side per step, {KEYS} keys; at the end {} rows held, {:.0} rows/s; \
         {out} rows out",
        next * 2,
        clock.last_rate
    )))
}

/// `ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) <= 10`
/// (Nexmark q19's shape), 10 000 auctions.
fn top_n(workers: usize) -> Result<Report, BoxError> {
    let input = bid_schema();
    let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("rank_number", DataType::Int64, true));
    let output = Arc::new(Schema::new(fields));
    let mut top = workers_of(workers, || {
        Ok(Box::new(TopN::new(TopNSpec {
            partition_by: vec![col("auction", &input)?],
            order_by: vec![(
                col("price", &input)?,
                SortOptions {
                    descending: true,
                    nulls_first: true,
                },
            )],
            input_schema: input.clone(),
            offset: 0,
            limit: 10,
            numbering: Numbering::RowNumber,
            output_schema: output.clone(),
        })?))
    })?;
    const ROWS: usize = 4096;
    let mut rng = Rng(13);
    let mut next = 0i64;
    let mut out = 0;
    let mut clock = Clock::new(2_000_000);
    while clock.more() {
        let input = [ChangeBatch::inserts(bids(ROWS, next, &mut rng))];
        next += ROWS as i64;
        out += clock.time(ROWS as u64, || -> Result<usize, BoxError> {
            let out = top.step(&input)?.num_rows();
            top.take_state_changes()?;
            Ok(out)
        })?;
    }
    Ok(clock.report(format!(
        "{ROWS} rows per step, 10 of each of 10000 partitions; at the end {next} rows held, \
         {:.0} rows/s; {out} rows out",
        clock.last_rate
    )))
}

/// `SESSION(bid, ts, gap, bidder)` over rows in time order, 1 ms apart,
/// each from one of `bidders` at random, the watermark 1 s behind each
/// step's first row, so sessions close. Many bidders and a short gap: most
/// rows start or end a session. Few bidders and a long gap (`_endless`):
/// each bidder's one session never ends and is re-emitted whole at every
/// step it grows in, the operator's known worst case.
fn session_window(bidders: u64, gap_ms: i64) -> Result<Report, BoxError> {
    let input = schema(&[("bidder", DataType::Int64), ("ts", DataType::Int64)]);
    let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("window_start", DataType::Int64, true));
    fields.push(Field::new("window_end", DataType::Int64, true));
    let mut op = SessionWindow::new(SessionSpec {
        partition_by: vec![col("bidder", &input)?],
        input_schema: input.clone(),
        time: 1,
        gap: gap_ms * 1000,
        bounds: vec![Bound::Start, Bound::End],
        output_schema: Arc::new(Schema::new(fields)),
    })?
    .closing();
    const ROWS: usize = 4096;
    let mut rng = Rng(17);
    let mut next = 0i64;
    let mut out = 0;
    let mut clock = Clock::new(2_000_000);
    while clock.more() {
        let keys: Vec<i64> = (0..ROWS).map(|_| rng.below(bidders) as i64).collect();
        let rows = batch(
            &input,
            vec![
                int64s(keys),
                int64s((next..next + ROWS as i64).map(|i| i * 1000)),
            ],
        );
        let watermark = Watermarks::of([(1, next * 1000 - 1_000_000)]);
        next += ROWS as i64;
        out += clock.time(ROWS as u64, || -> Result<usize, BoxError> {
            op.watermarks(&[watermark])?;
            let out = op.step(&[ChangeBatch::inserts(rows)])?.num_rows();
            op.take_state_changes()?;
            Ok(out)
        })?;
    }
    let held = op.state_entries()?.len();
    Ok(clock.report(format!(
        "{ROWS} rows per step, {bidders} bidders, gap {gap_ms} ms; {held} entries held at the \
         end, {:.0} rows/s last; {out} rows out",
        clock.last_rate
    )))
}

/// `rows::consolidate` of 8192 bid rows where every row appears twice, a
/// quarter of the pairs cancelling out.
fn consolidate_duplicates() -> Result<Report, BoxError> {
    const HALF: usize = 4096;
    let once = bids(HALF, 0, &mut Rng(17));
    let twice = arrow::compute::concat_batches(&once.schema(), [&once, &once])?;
    let weights = (0..2 * HALF).map(|i| if i >= HALF && i % 4 == 0 { -1 } else { 1 });
    let change = ChangeBatch::new(twice, Int64Array::from_iter_values(weights))?;
    let mut clock = Clock::new(u64::MAX);
    let mut out = 0;
    while clock.more() {
        out = clock
            .time(2 * HALF as u64, || consolidate(&change))?
            .num_rows();
    }
    Ok(clock.report(format!("{} rows per batch -> {out}", 2 * HALF)))
}

/// `TableLog::append` of 1000-row records (a ChangeBatch as Arrow IPC, as
/// the server's WAL writes it), from `writers` concurrent committers; each
/// append returns after the fsync that covers it, so one writer measures
/// fsync latency and many measure group commit.
fn table_log_append(writers: usize) -> Result<Report, BoxError> {
    const ROWS: usize = 1000;
    let change = ChangeBatch::inserts(bids(ROWS, 0, &mut Rng(19))).to_record_batch()?;
    let mut ipc = Vec::new();
    {
        let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut ipc, &change.schema())?;
        writer.write(&change)?;
        writer.finish()?;
    }
    let payload = Bytes::from(ipc);
    let dir = tempfile::Builder::new()
        .prefix("weir-micro-log-")
        .tempdir()?;
    let (log, _) = TableLog::open(dir.path())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let records = runtime.block_on(async {
        let tasks: Vec<_> = (0..writers)
            .map(|_| {
                let log = log.clone();
                let payload = payload.clone();
                tokio::spawn(async move {
                    let mut records = 0u64;
                    while started.elapsed() < BUDGET {
                        log.append(payload.clone()).await?;
                        records += 1;
                    }
                    Ok::<_, weir_storage::StorageError>(records)
                })
            })
            .collect();
        let mut records = 0;
        for task in tasks {
            records += task.await??;
        }
        Ok::<_, BoxError>(records)
    })?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(Report {
        rows: records * ROWS as u64,
        seconds,
        note: format!(
            "{records} records of {} bytes, {:.0} records/s, fsync each group, in {}",
            payload.len(),
            records as f64 / seconds,
            std::env::temp_dir().display()
        ),
    })
}

/// A coordinator with one projection, `SELECT k, count(v), sum(v) FROM t
/// GROUP BY k` over `rows` rows in 100 000 groups.
fn checkpointed_coordinator(rows: i64) -> Result<Coordinator, BoxError> {
    let input = schema(&[("k", DataType::Int64), ("v", DataType::Int64)]);
    let output = schema(&[
        ("k", DataType::Int64),
        ("c", DataType::Int64),
        ("s", DataType::Int64),
    ]);
    let agg = Aggregate::new(
        input.clone(),
        vec![col("k", &input)?],
        vec![
            aggregate_call(count_udaf(), &input, "c")?,
            aggregate_call(sum_udaf(), &input, "s")?,
        ],
        output.clone(),
    )?;
    let mut graph = Graph::new(1);
    graph.add(Box::new(agg), vec![Input::Source(0)])?;
    let table = ObjectId(1);
    let mut coordinator = Coordinator::new();
    coordinator.deploy(
        ObjectId(2),
        graph,
        vec![SourceBinding {
            object: table,
            schema: input.clone(),
        }],
        output,
        &|_| Ok(None),
    )?;
    for start in (0..rows).step_by(50_000) {
        let ids = start..(start + 50_000).min(rows);
        let rows = batch(
            &input,
            vec![int64s(ids.clone().map(|v| v % 100_000)), int64s(ids)],
        );
        coordinator.push(table, ChangeBatch::inserts(rows));
        coordinator.run_epoch()?;
    }
    Ok(coordinator)
}

const CHECKPOINT_ROWS: i64 = 300_000;

/// `Coordinator::checkpoint_full` then `VnodeState::encode` of every vnode.
fn checkpoint_full_encode() -> Result<Report, BoxError> {
    let coordinator = checkpointed_coordinator(CHECKPOINT_ROWS)?;
    let mut clock = Clock::new(u64::MAX);
    let mut bytes = 0;
    let mut checkpoints = 0;
    while clock.more() {
        let (entries, size) = clock.time(0, || -> Result<(u64, usize), BoxError> {
            let vnodes = coordinator.checkpoint_full()?;
            let entries = vnodes.values().map(|v| v.entries.len() as u64).sum();
            let size = vnodes.values().map(|v| v.encode().len()).sum();
            Ok((entries, size))
        })?;
        clock.rows += entries;
        bytes = size;
        checkpoints += 1;
    }
    let mb = bytes as f64 / 1e6;
    Ok(clock.report(format!(
        "rows = state entries ({CHECKPOINT_ROWS} input rows, 100000 groups); \
         {mb:.1} MB per checkpoint, {:.0} MB/s",
        mb * checkpoints as f64 / clock.spent.as_secs_f64()
    )))
}

/// `VnodeState::decode` of every vnode of a full checkpoint.
fn vnode_state_decode() -> Result<Report, BoxError> {
    let coordinator = checkpointed_coordinator(CHECKPOINT_ROWS)?;
    let encoded: Vec<Bytes> = coordinator
        .checkpoint_full()?
        .values()
        .map(VnodeState::encode)
        .collect();
    let mut clock = Clock::new(u64::MAX);
    while clock.more() {
        let entries = clock.time(0, || -> Result<u64, BoxError> {
            let mut entries = 0;
            for blob in &encoded {
                entries += VnodeState::decode(blob)?.entries.len() as u64;
            }
            Ok(entries)
        })?;
        clock.rows += entries;
    }
    let bytes: usize = encoded.iter().map(Bytes::len).sum();
    Ok(clock.report(format!(
        "rows = state entries, {} vnodes, {:.1} MB",
        encoded.len(),
        bytes as f64 / 1e6
    )))
}
