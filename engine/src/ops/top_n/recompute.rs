//! [`Recompute`]: the first top-N implementation, kept as the oracle of
//! the differential tests: a changed partition's output is recomputed from
//! its first rows and diffed against what it emitted.
//!
//! Each partition keeps all its rows ordered by (sort key, row) in a
//! persistent map, and the output it last emitted. State entries: one per
//! input row (`ROW`) and one per output row (`OUTPUT`), each valued by its
//! count.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::row::RowConverter;
use datafusion::physical_expr::PhysicalExpr;
use weir_common::ChangeBatch;

use super::{Numbering, TopNSpec};
use crate::EngineError;
use crate::multiset::Multiset;
use crate::operator::{
    Operator, StateEntry, changed_entries, count_value, expect_inputs, pair_bytes, parse_state_key,
    read_count, split_pair, state_key, unreadable,
};
use crate::rows::{RowBytes, RowCodec, batch_of, empty_change};

const NAME: &str = "top_n";

/// State key tags.
const ROW: u8 = 0;
const OUTPUT: u8 = 1;

pub struct Recompute {
    spec: TopNSpec,
    input: RowCodec,
    output: RowCodec,
    partition: Option<RowCodec>,
    order: RowConverter,
    /// Per partition: (sort key, row) -> count, in output order; and the
    /// output last emitted.
    partitions: imbl::OrdMap<RowBytes, Partition>,
    /// State keys changed since the last `take_state_changes`.
    changed: BTreeSet<Vec<u8>>,
}

#[derive(Clone, Default)]
struct Partition {
    rows: imbl::OrdMap<(RowBytes, RowBytes), i64>,
    output: Multiset,
}

impl Recompute {
    pub fn new(spec: TopNSpec) -> Result<Self, EngineError> {
        let (order, partition) = spec.key_codecs()?;
        Ok(Self {
            input: RowCodec::new(spec.input_schema.clone())?,
            output: RowCodec::new(spec.output_schema.clone())?,
            order,
            partition,
            partitions: imbl::OrdMap::new(),
            changed: BTreeSet::new(),
            spec,
        })
    }

    fn evaluate(
        exprs: &mut dyn Iterator<Item = &Arc<dyn PhysicalExpr>>,
        rows: &RecordBatch,
    ) -> Result<Vec<ArrayRef>, EngineError> {
        exprs
            .map(|e| Ok(e.evaluate(rows)?.into_array(rows.num_rows())?))
            .collect()
    }

    /// The rows a partition outputs, with their numbers.
    fn partition_output(&self, partition: &Partition) -> Result<Multiset, EngineError> {
        let mut kept: Vec<(&RowBytes, i64)> = Vec::new();
        let mut position = 0usize;
        let mut rank = 0usize;
        let mut previous_key: Option<&RowBytes> = None;
        'rows: for ((sort_key, row), &count) in &partition.rows {
            for _ in 0..count {
                position += 1;
                if previous_key != Some(sort_key) {
                    rank = position;
                    previous_key = Some(sort_key);
                }
                let (number, in_range) = match self.spec.numbering {
                    Numbering::None | Numbering::RowNumber => (
                        position,
                        position > self.spec.offset
                            && position <= self.spec.offset + self.spec.limit,
                    ),
                    Numbering::Rank => (rank, rank <= self.spec.limit),
                };
                let past_end = match self.spec.numbering {
                    Numbering::Rank => rank > self.spec.limit,
                    _ => position > self.spec.offset + self.spec.limit,
                };
                if past_end {
                    break 'rows;
                }
                if in_range {
                    kept.push((row, number as i64));
                }
            }
        }
        let mut out = Multiset::default();
        if kept.is_empty() {
            return Ok(out);
        }
        let batch = self.input.decode(kept.iter().map(|(r, _)| *r))?;
        let mut columns = batch.columns().to_vec();
        if self.spec.numbering != Numbering::None {
            columns.push(Arc::new(Int64Array::from_iter_values(
                kept.iter().map(|(_, n)| *n),
            )));
        }
        let batch = batch_of(self.output.schema(), columns, kept.len())?;
        for row in self.output.encode_rows(&batch)? {
            out.add(&row, 1, NAME)?;
        }
        Ok(out)
    }
}

impl Operator for Recompute {
    fn name(&self) -> &'static str {
        NAME
    }

    fn output_schema(&self) -> SchemaRef {
        self.output.schema().clone()
    }

    fn structure(&self) -> String {
        use crate::operator::{exprs_text, schema_text};
        let order: Vec<String> = self
            .spec
            .order_by
            .iter()
            .map(|(e, o)| format!("{e} {o:?}"))
            .collect();
        format!(
            "{NAME}({:?}; partition {}; order {}; offset {} limit {}; in {}; out {})",
            self.spec.numbering,
            exprs_text(&self.spec.partition_by),
            order.join(", "),
            self.spec.offset,
            self.spec.limit,
            schema_text(&self.spec.input_schema),
            schema_text(&self.spec.output_schema)
        )
    }

    fn step(&mut self, inputs: &[ChangeBatch]) -> Result<ChangeBatch, EngineError> {
        expect_inputs(NAME, inputs, 1)?;
        let input = &inputs[0];
        if input.is_empty() {
            return Ok(empty_change(self.output.schema()));
        }
        let rows = input.rows();
        let encoded = self.input.encode_rows(rows)?;
        let sort_columns = Self::evaluate(&mut self.spec.order_by.iter().map(|(e, _)| e), rows)?;
        let sort_keys = self.order.convert_columns(&sort_columns)?;
        let partition_keys: Vec<RowBytes> = match &self.partition {
            None => vec![RowBytes::from(&[][..]); rows.num_rows()],
            Some(codec) => {
                codec.encode_keys(&Self::evaluate(&mut self.spec.partition_by.iter(), rows)?)?
            }
        };
        let mut partitions = self.partitions.clone();
        let mut touched: BTreeSet<RowBytes> = BTreeSet::new();
        let mut changed: Vec<Vec<u8>> = Vec::new();
        for (i, &w) in input.weights().values().iter().enumerate() {
            let partition = partitions.entry(partition_keys[i].clone()).or_default();
            let entry = (
                RowBytes::from(sort_keys.row(i).as_ref()),
                encoded[i].clone(),
            );
            changed.push(state_key(
                ROW,
                &partition_keys[i],
                &pair_bytes(&entry.0, &entry.1),
            ));
            let count = partition.rows.get(&entry).copied().unwrap_or(0) + w;
            match count {
                0 => {
                    partition.rows.remove(&entry);
                }
                c if c > 0 => {
                    partition.rows.insert(entry, c);
                }
                _ => {
                    return Err(EngineError::Invariant {
                        operator: NAME,
                        message: "a row was retracted more often than it was inserted".into(),
                    });
                }
            }
            touched.insert(partition_keys[i].clone());
        }
        let mut change: Vec<(RowBytes, i64)> = Vec::new();
        for key in touched {
            let partition = partitions.get(&key).cloned().unwrap_or_default();
            let output = self.partition_output(&partition)?;
            let first = change.len();
            partition.output.diff_into(&output, &mut change);
            changed.extend(
                change[first..]
                    .iter()
                    .map(|(row, _)| state_key(OUTPUT, &key, row)),
            );
            if partition.rows.is_empty() {
                partitions.remove(&key);
            } else if let Some(p) = partitions.get_mut(&key) {
                p.output = output;
            }
        }
        let out = self.output.consolidated_change(&change)?;
        self.partitions = partitions;
        self.changed.extend(changed);
        Ok(out)
    }

    fn take_state_changes(&mut self) -> Result<Vec<StateEntry>, EngineError> {
        let entries = changed_entries(&self.changed, |key| self.value_of(key))?;
        self.changed.clear();
        Ok(entries)
    }

    fn state_entries(&self) -> Result<Vec<StateEntry>, EngineError> {
        let mut entries = Vec::new();
        for (key, partition) in &self.partitions {
            for ((sort_key, row), &count) in &partition.rows {
                let key = state_key(ROW, key, &pair_bytes(sort_key, row));
                entries.push(StateEntry::set(key, count_value(count)));
            }
            for (row, count) in partition.output.iter() {
                let key = state_key(OUTPUT, key, row);
                entries.push(StateEntry::set(key, count_value(count)));
            }
        }
        Ok(entries)
    }

    fn apply_state_entries(&mut self, entries: &[StateEntry]) -> Result<(), EngineError> {
        let mut partitions = self.partitions.clone();
        let mut touched: BTreeSet<&[u8]> = BTreeSet::new();
        for e in entries {
            let key = parse_state_key(NAME, &e.key)?;
            let count = read_count(NAME, e.value.as_deref())?;
            let partition = partitions.entry(key.distribution.into()).or_default();
            match key.tag {
                ROW => {
                    let entry = sort_key_and_row(key.rest)?;
                    if count == 0 {
                        partition.rows.remove(&entry);
                    } else {
                        partition.rows.insert(entry, count);
                    }
                }
                OUTPUT => {
                    partition.output.set(key.rest, count);
                }
                _ => return Err(unreadable(NAME, "an unknown tag")),
            }
            touched.insert(key.distribution);
        }
        for key in touched {
            if partitions
                .get(key)
                .is_some_and(|p| p.rows.is_empty() && p.output.is_empty())
            {
                partitions.remove(key);
            }
        }
        self.partitions = partitions;
        self.changed.clear();
        Ok(())
    }
}

impl Recompute {
    /// The current value of a state key (`None` when it has none).
    fn value_of(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let key = parse_state_key(NAME, key)?;
        let Some(partition) = self.partitions.get(key.distribution) else {
            return Ok(None);
        };
        let count = match key.tag {
            ROW => partition
                .rows
                .get(&sort_key_and_row(key.rest)?)
                .copied()
                .unwrap_or(0),
            OUTPUT => partition.output.count_of(key.rest),
            _ => return Err(unreadable(NAME, "an unknown tag")),
        };
        Ok((count > 0).then(|| count_value(count)))
    }
}

fn sort_key_and_row(bytes: &[u8]) -> Result<(RowBytes, RowBytes), EngineError> {
    let (sort_key, row) = split_pair(bytes).ok_or_else(|| unreadable(NAME, "a malformed row"))?;
    Ok((sort_key.into(), row.into()))
}
