//! [`TopN`]: the first rows by an ordering, per partition: `ORDER BY ..
//! LIMIT n OFFSET m` (one partition) and `ROW_NUMBER() / RANK() OVER
//! (PARTITION BY .. ORDER BY ..) <= n` (with the number as the last column),
//! in O(change · log rows) per partition.
//!
//! Each partition keeps its rows ordered by (sort key, row), so ties are
//! broken the same way every time, split into the rows skipped by `OFFSET`,
//! the rows output (the *window*) and the rest ([`partition`]). An input row
//! lands in its region and the boundaries move by at most its count, so the
//! output change comes from the changed rows only:
//!
//! - `LIMIT`: the rows that entered or left the window (a row inserted past
//!   the window emits nothing; one inserted inside emits itself and retracts
//!   the row it pushes out; a retraction inside pulls the next row in);
//! - `ROW_NUMBER()` and `RANK()`: the window's rows from the least changed
//!   row on, retracted with their numbers before the change and inserted
//!   with their numbers after it: the rows a change can renumber, not the
//!   whole partition.
//!
//! Over an input that only inserts ([`TopN::over_append_only`]) a row past
//! the window can never enter it, so a partition keeps only its first
//! `offset + limit` rows (for `RANK()`, its rows ranked `<= limit`): rows
//! arriving past them are dropped and rows pushed out are forgotten. Then
//! state and checkpoints are O(limit) per partition.
//!
//! Partitions live in an arena indexed by a hash map over their encoded
//! keys, as the aggregate's groups do. A failed step may leave the state
//! part-way (the graph is then poisoned), but a retraction of a row never
//! inserted is found before anything changes.
//!
//! State entries (distribution key = the partition key): one per kept row
//! (`ROW`, keyed by sort key and row, valued by its count). The output is a
//! function of the kept rows, so it is not stored; an epoch changes the
//! entries of its input rows and of the rows it drops.

mod closing;
mod partition;
#[cfg(test)]
mod recompute;
#[cfg(test)]
pub(crate) mod tests;

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::compute::SortOptions;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;
use weir_common::ChangeBatch;

use self::partition::{Cut, Element, Numbered, Partition};
use crate::EngineError;
use crate::operator::{
    Operator, StateEntry, count_value, expect_inputs, expect_watermarks, mark_changed, pair_bytes,
    parse_state_key, read_count, split_pair, state_key, take_changed, unreadable,
};
use crate::ops::parallel::{Keyed, not_shardable};
use crate::rows::{RowBytes, RowCodec, batch_of, consolidate, empty_change};
use crate::watermark::Watermarks;

const NAME: &str = "top_n";

/// State key tags.
const ROW: u8 = 0;

/// How rows are numbered and cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbering {
    /// `ORDER BY .. LIMIT`: no number column.
    None,
    /// `ROW_NUMBER()`: 1, 2, 3, ... ; keeps `limit` rows.
    RowNumber,
    /// `RANK()`: equal sort keys share a number; keeps rows ranked <= `limit`
    /// (`offset` does not apply).
    Rank,
}

#[derive(Clone)]
pub struct TopNSpec {
    pub input_schema: SchemaRef,
    pub partition_by: Vec<Arc<dyn PhysicalExpr>>,
    pub order_by: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    pub offset: usize,
    pub limit: usize,
    pub numbering: Numbering,
    /// The input columns, plus an Int64 number column unless `Numbering::None`.
    pub output_schema: SchemaRef,
}

impl TopNSpec {
    /// The codecs of the sort key (ordered as the ORDER BY says) and of
    /// the partition key (`None` without PARTITION BY).
    pub(crate) fn key_codecs(&self) -> Result<(RowConverter, Option<RowCodec>), EngineError> {
        let spec = self;
        let order_fields = spec
            .order_by
            .iter()
            .map(|(e, options)| {
                Ok(SortField::new_with_options(
                    e.data_type(&spec.input_schema)?,
                    *options,
                ))
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        let partition = RowCodec::of_key(&spec.partition_by, &spec.input_schema)?;
        Ok((RowConverter::new(order_fields)?, partition))
    }
}

pub struct TopN {
    spec: TopNSpec,
    cut: Cut,
    /// The input only inserts: partitions keep their window only.
    append_only: bool,
    input: RowCodec,
    partition: Option<RowCodec>,
    order: RowConverter,
    /// Partition key -> slot in `partitions`.
    index: hashbrown::HashMap<RowBytes, u32>,
    partitions: Vec<Option<Partition>>,
    free: Vec<u32>,
    /// State keys changed since the last `take_state_changes`.
    changed: hashbrown::HashSet<Vec<u8>>,
    scratch: Vec<u8>,
    /// Set when partitions close by a watermark ([`closing`]).
    closing: Option<closing::Closing>,
}

impl TopN {
    pub fn new(spec: TopNSpec) -> Result<Self, EngineError> {
        let (order, partition) = spec.key_codecs()?;
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let cut = match spec.numbering {
            Numbering::Rank => Cut::Rank {
                limit: count(spec.limit),
            },
            Numbering::None | Numbering::RowNumber => Cut::Positions {
                skip: count(spec.offset),
                window: count(spec.limit),
            },
        };
        Ok(Self {
            input: RowCodec::new(spec.input_schema.clone())?,
            order,
            partition,
            cut,
            append_only: false,
            index: hashbrown::HashMap::new(),
            partitions: Vec::new(),
            free: Vec::new(),
            changed: hashbrown::HashSet::new(),
            scratch: Vec::new(),
            closing: None,
            spec,
        })
    }

    /// Declares that the input only ever inserts (an append-only source
    /// through maps, unions and inner joins): each partition then keeps only
    /// the rows that can still be output. A retraction is an error.
    pub fn over_append_only(mut self) -> Self {
        self.append_only = true;
        self
    }

    /// What each partition keeps, for EXPLAIN: `all rows`, or over an input
    /// that only inserts `first N rows` (`rows ranked <= N` for `RANK()`).
    pub fn retention(&self) -> String {
        match (self.append_only, self.cut) {
            (false, _) => "all rows".into(),
            (true, Cut::Positions { skip, window }) => {
                format!("first {} rows", skip.saturating_add(window))
            }
            (true, Cut::Rank { limit }) => format!("rows ranked <= {limit}"),
        }
    }

    fn evaluate(
        exprs: &mut dyn Iterator<Item = &Arc<dyn PhysicalExpr>>,
        rows: &RecordBatch,
    ) -> Result<Vec<ArrayRef>, EngineError> {
        exprs
            .map(|e| Ok(e.evaluate(rows)?.into_array(rows.num_rows())?))
            .collect()
    }

    fn partition(&self, slot: u32) -> &Partition {
        self.partitions[slot as usize]
            .as_ref()
            .expect("a live slot")
    }

    fn partition_mut(&mut self, slot: u32) -> &mut Partition {
        self.partitions[slot as usize]
            .as_mut()
            .expect("a live slot")
    }

    /// The slot of the partition with `key`, created empty if there is none.
    fn slot_of(&mut self, key: &[u8]) -> u32 {
        if let Some(&slot) = self.index.get(key) {
            return slot;
        }
        let key = RowBytes::from(key);
        let partition = Some(Partition::new(key.clone()));
        let slot = match self.free.pop() {
            Some(slot) => {
                self.partitions[slot as usize] = partition;
                slot
            }
            None => {
                self.partitions.push(partition);
                (self.partitions.len() - 1) as u32
            }
        };
        self.index.insert(key, slot);
        slot
    }

    /// Drops the partition in `slot` if it keeps no rows.
    fn drop_if_empty(&mut self, slot: u32) {
        if let Some(partition) = self.partitions[slot as usize].take_if(|p| p.is_empty()) {
            self.index.remove(&partition.key);
            self.free.push(slot);
        }
    }

    /// The partition key of every input row (all empty without PARTITION BY).
    fn partition_keys(&self, rows: &RecordBatch) -> Result<Option<arrow::row::Rows>, EngineError> {
        self.partition
            .as_ref()
            .map(|codec| codec.keys_of(&self.spec.partition_by, rows))
            .transpose()
    }

    /// The output change of `(row, number, weight)` triples.
    fn emit(&self, out: &[Numbered]) -> Result<ChangeBatch, EngineError> {
        if out.is_empty() {
            return Ok(empty_change(&self.spec.output_schema));
        }
        let batch = self.input.decode(out.iter().map(|(row, _, _)| row))?;
        let mut columns = batch.columns().to_vec();
        if self.spec.numbering != Numbering::None {
            columns.push(Arc::new(Int64Array::from_iter_values(
                out.iter().map(|(_, n, _)| *n),
            )));
        }
        let batch = batch_of(&self.spec.output_schema, columns, out.len())?;
        let weights = Int64Array::from_iter_values(out.iter().map(|(_, _, w)| *w));
        consolidate(&ChangeBatch::new(batch, weights)?)
    }
}

/// Records the `ROW` state key of `element` in `partition` as changed.
fn mark_row(
    changed: &mut hashbrown::HashSet<Vec<u8>>,
    scratch: &mut Vec<u8>,
    partition: &[u8],
    (sort_key, row): &Element,
) {
    let len = (sort_key.len() as u32).to_le_bytes();
    mark_changed(changed, scratch, ROW, partition, &[&len, sort_key, row]);
}

fn retracted_too_often() -> EngineError {
    EngineError::Invariant {
        operator: NAME,
        message: "a row was retracted more often than it was inserted".into(),
    }
}

impl Operator for TopN {
    fn name(&self) -> &'static str {
        NAME
    }

    fn output_schema(&self) -> SchemaRef {
        self.spec.output_schema.clone()
    }

    fn structure(&self) -> String {
        use crate::operator::{exprs_text, schema_text};
        let order: Vec<String> = self
            .spec
            .order_by
            .iter()
            .map(|(e, o)| format!("{e} {o:?}"))
            .collect();
        // `/2`: the state layout of kept rows only (no output rows).
        let closes = self.closing_key().map_or(String::new(), |key| {
            let emit = if self.emits_on_close() {
                ", emitting then"
            } else {
                ""
            };
            format!("; closes by partition {key}{emit}")
        });
        format!(
            "{NAME}/2({:?}; partition {}; order {}; offset {} limit {}; append_only={}; in {}; out {})",
            self.spec.numbering,
            exprs_text(&self.spec.partition_by),
            order.join(", "),
            self.spec.offset,
            self.spec.limit,
            self.append_only,
            schema_text(&self.spec.input_schema),
            schema_text(&self.spec.output_schema)
        ) + &closes
    }

    fn watermarks(&mut self, inputs: &[Watermarks]) -> Result<Watermarks, EngineError> {
        expect_watermarks(NAME, inputs, 1)?;
        self.advance_closing(&inputs[0])?;
        Ok(Watermarks::none())
    }

    fn take_late_rows(&mut self) -> u64 {
        self.take_late()
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(NAME, inputs, 1)?;
        let (input, closing_values) = self.on_time(&inputs[0])?;
        let input = &input;
        if input.is_empty() {
            let closed = self.close_partitions();
            return self.emit(&closed);
        }
        let rows = input.rows();
        let weights = input.weights().values();
        let encoded = self.input.encode_rows(rows)?;
        let sort_columns = Self::evaluate(&mut self.spec.order_by.iter().map(|(e, _)| e), rows)?;
        let sort_keys = self.order.convert_columns(&sort_columns)?;
        let elements: Vec<Element> = encoded
            .into_iter()
            .enumerate()
            .map(|(i, row)| (RowBytes::from(sort_keys.row(i).as_ref()), row))
            .collect();
        let partition_keys = self.partition_keys(rows)?;
        let key_of = |i: usize| -> &[u8] {
            match &partition_keys {
                Some(keys) => keys.row(i).data(),
                None => &[],
            }
        };

        // Every retraction is checked before anything changes (the input is
        // consolidated, so each element occurs once).
        for (i, &weight) in weights.iter().enumerate() {
            if weight >= 0 {
                continue;
            }
            if self.append_only {
                return Err(EngineError::Invariant {
                    operator: NAME,
                    message: "a retraction over an input declared append-only".into(),
                });
            }
            let kept = self
                .index
                .get(key_of(i))
                .map_or(0, |&slot| self.partition(slot).count_of(&elements[i]));
            if kept < -weight {
                return Err(retracted_too_often());
            }
        }

        // The partitions touched, each with its least changed element.
        let slots: Vec<u32> = (0..elements.len())
            .map(|i| self.slot_of(key_of(i)))
            .collect();
        let mut touched = Vec::new();
        for (i, &slot) in slots.iter().enumerate() {
            let partition = self.partition_mut(slot);
            match partition.first_change {
                None => {
                    partition.first_change = Some(i);
                    touched.push(slot);
                }
                Some(first) if elements[i] < elements[first] => {
                    partition.first_change = Some(i);
                }
                Some(_) => {}
            }
        }

        let numbered = self.spec.numbering != Numbering::None;
        let cut = self.cut;
        let mut out: Vec<Numbered> = Vec::new();
        if numbered {
            for &slot in &touched {
                let partition = self.partition(slot);
                let first = &elements[partition.first_change.expect("touched")];
                partition.numbered_from(cut, first, -1, &mut out);
            }
        }

        let mut window_change = Vec::new();
        for (i, (&slot, &weight)) in slots.iter().zip(weights).enumerate() {
            let element = &elements[i];
            let partition = self.partitions[slot as usize]
                .as_mut()
                .expect("a live slot");
            if weight > 0 {
                if self.append_only && !partition.would_keep(cut, element) {
                    continue;
                }
                partition.insert(cut, element, weight, &mut window_change);
            } else {
                partition.remove(cut, element, -weight, &mut window_change);
            }
            mark_row(
                &mut self.changed,
                &mut self.scratch,
                &partition.key,
                element,
            );
            if self.append_only {
                for dropped in partition.drain_rest() {
                    mark_row(
                        &mut self.changed,
                        &mut self.scratch,
                        &partition.key,
                        &dropped,
                    );
                }
            }
        }

        for &slot in &touched {
            let partition = self.partition_mut(slot);
            let first = partition.first_change.take().expect("touched");
            if numbered {
                let partition = self.partition(slot);
                partition.numbered_from(cut, &elements[first], 1, &mut out);
            }
            self.drop_if_empty(slot);
        }
        if !numbered {
            out = window_change
                .into_iter()
                .map(|(row, weight)| (row, 0, weight))
                .collect();
        }
        if self.closing.is_some() {
            let inserted: Vec<usize> = (0..weights.len()).filter(|&i| weights[i] > 0).collect();
            let keys: Vec<&[u8]> = inserted.iter().map(|&i| key_of(i)).collect();
            let values: Vec<Option<i64>> = inserted
                .iter()
                .map(|&i| closing_values.get(i).copied().flatten())
                .collect();
            self.file_open(&keys, &values);
            let closed = self.close_partitions();
            if self.emits_on_close() {
                out = closed;
            }
        }
        self.emit(&out)
    }

    fn take_state_changes(&mut self) -> Result<Vec<StateEntry>, EngineError> {
        let mut changed = std::mem::take(&mut self.changed);
        let taken = take_changed(&mut changed, |key| self.value_of(key));
        self.changed = changed;
        let mut taken = taken?;
        taken.extend(self.watermark_change());
        Ok(taken)
    }

    fn state_entries(&self) -> Result<Vec<StateEntry>, EngineError> {
        let mut entries = Vec::new();
        for partition in self.partitions.iter().flatten() {
            for ((sort_key, row), count) in partition.elements() {
                let key = state_key(ROW, &partition.key, &pair_bytes(sort_key, row));
                entries.push(StateEntry::set(key, count_value(count)));
            }
        }
        entries.extend(self.watermark_state());
        // In key order, so equal states snapshot to equal bytes.
        entries.sort_unstable();
        Ok(entries)
    }

    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        // Everything is read before anything changes.
        let mut parsed = Vec::with_capacity(entries.len());
        let mut watermark = None;
        for e in entries {
            let key = parse_state_key(NAME, &e.key)?;
            if key.tag == closing::WATERMARK {
                watermark = Some(e.value.as_deref());
                continue;
            }
            if key.tag != ROW {
                return Err(unreadable(NAME, "an unknown tag"));
            }
            let count = read_count(NAME, e.value.as_deref())?;
            parsed.push((key.distribution, sort_key_and_row(key.rest)?, count));
        }
        let cut = self.cut;
        let mut window_change = Vec::new();
        let mut touched = Vec::new();
        for (distribution, element, count) in parsed {
            let slot = self.slot_of(distribution);
            touched.push(slot);
            let partition = self.partition_mut(slot);
            let kept = partition.count_of(&element);
            if count > kept {
                partition.insert(cut, &element, count - kept, &mut window_change);
            } else if count < kept {
                partition.remove(cut, &element, kept - count, &mut window_change);
            }
            window_change.clear();
        }
        for slot in touched {
            self.drop_if_empty(slot);
        }
        if let Some(value) = watermark {
            self.apply_watermark(value)?;
        }
        self.file_restored()?;
        self.changed.clear();
        Ok(())
    }
}

/// Sharded by partition: every row's state has its partition key as its
/// distribution key, and an output row is an input row (with its number),
/// whose partition key it determines, so equal output rows come from one
/// worker.
impl Keyed for TopN {
    fn shardable(&self) -> bool {
        self.partition.is_some()
    }

    fn distribution_keys(
        &self,
        _input: usize,
        rows: &RecordBatch,
    ) -> Result<arrow::row::Rows, EngineError> {
        self.partition_keys(rows)?
            .ok_or_else(|| not_shardable(NAME))
    }
}

impl TopN {
    /// The current value of a state key (`None` when it has none).
    fn value_of(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let key = parse_state_key(NAME, key)?;
        if key.tag != ROW {
            return Err(unreadable(NAME, "an unknown tag"));
        }
        let Some(&slot) = self.index.get(key.distribution) else {
            return Ok(None);
        };
        let count = self.partition(slot).count_of(&sort_key_and_row(key.rest)?);
        Ok((count > 0).then(|| count_value(count)))
    }
}

fn sort_key_and_row(bytes: &[u8]) -> Result<Element, EngineError> {
    let (sort_key, row) = split_pair(bytes).ok_or_else(|| unreadable(NAME, "a malformed row"))?;
    Ok((sort_key.into(), row.into()))
}
