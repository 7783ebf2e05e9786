//! Readable change-batch fixtures for operator tests.
//!
//! `change("g text, x int", "a 1 +1; a 2 +1; b null -1")` is a batch of three
//! rows whose last token is the weight; `render` turns a change back into
//! sorted lines of the same form, so tests compare text.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, RecordBatchOptions, StringArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::util::display::array_value_to_string;
use weir_common::ChangeBatch;

/// `"name type, ..."`; `""` is a schema without columns.
pub fn schema(spec: &str) -> SchemaRef {
    let fields: Vec<Field> = spec
        .split(',')
        .filter(|f| !f.trim().is_empty())
        .map(|f| {
            let (name, ty) = f.trim().split_once(' ').expect("`name type`");
            let ty = match ty.trim() {
                "int" => DataType::Int64,
                "float" => DataType::Float64,
                "text" => DataType::Utf8,
                other => panic!("fixture type {other}"),
            };
            Field::new(name, ty, true)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

pub fn change(spec: &str, rows: &str) -> ChangeBatch {
    change_of(&schema(spec), rows)
}

pub fn change_of(schema: &SchemaRef, rows: &str) -> ChangeBatch {
    let rows: Vec<Vec<&str>> = rows
        .split(';')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| r.split_whitespace().collect())
        .collect();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(c, field)| -> ArrayRef {
            fn cell<'a>(r: &[&'a str], c: usize) -> Option<&'a str> {
                Some(r[c]).filter(|v| *v != "null")
            }
            match field.data_type() {
                DataType::Int64 => Arc::new(Int64Array::from_iter(
                    rows.iter()
                        .map(|r| cell(r, c).map(|v| v.parse::<i64>().expect("int"))),
                )),
                DataType::Float64 => Arc::new(Float64Array::from_iter(
                    rows.iter()
                        .map(|r| cell(r, c).map(|v| v.parse::<f64>().expect("float"))),
                )),
                _ => Arc::new(StringArray::from_iter(rows.iter().map(|r| cell(r, c)))),
            }
        })
        .collect();
    let weights = Int64Array::from_iter_values(rows.iter().map(|r| {
        r.last()
            .expect("weight")
            .parse::<i64>()
            .expect("weight like +1")
    }));
    let options = RecordBatchOptions::new().with_row_count(Some(rows.len()));
    let batch = RecordBatch::try_new_with_options(schema.clone(), columns, &options)
        .expect("fixture batch");
    ChangeBatch::new(batch, weights).expect("fixture change")
}

/// Sorted `values weight` lines.
pub fn render(change: &ChangeBatch) -> Vec<String> {
    let mut lines: Vec<String> = (0..change.num_rows())
        .map(|i| {
            let mut cells: Vec<String> = change
                .rows()
                .columns()
                .iter()
                .map(|col| {
                    if col.is_null(i) {
                        "null".to_string()
                    } else {
                        array_value_to_string(col, i).expect("displayable")
                    }
                })
                .collect();
            cells.push(format!("{:+}", change.weights().value(i)));
            cells.join(" ")
        })
        .collect();
    lines.sort();
    lines
}

/// Adds `change` to `result`, a collection as rendered rows (without the
/// weight) and their counts; rows whose count reaches 0 leave it.
pub fn accumulate(result: &mut std::collections::BTreeMap<String, i64>, change: &ChangeBatch) {
    for line in render(change) {
        let (row, weight) = line.rsplit_once(' ').expect("a weight");
        let count = result.entry(row.to_string()).or_default();
        *count += weight.parse::<i64>().expect("a weight like +1");
        if *count == 0 {
            result.remove(row);
        }
    }
}

/// A small deterministic random source (xorshift64*), so randomized tests
/// need no extra dependency and replay from their seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random consolidated changes of one input whose rows take their cells
/// from `cells` (one list per column), never retracting more than was
/// inserted: it keeps the input's current contents.
pub struct RandomInput {
    spec: &'static str,
    cells: Vec<Vec<&'static str>>,
    contents: std::collections::BTreeMap<String, i64>,
    inserts_only: bool,
}

impl RandomInput {
    pub fn new(spec: &'static str, cells: &[&[&'static str]]) -> Self {
        Self {
            spec,
            cells: cells.iter().map(|c| c.to_vec()).collect(),
            contents: Default::default(),
            inserts_only: false,
        }
    }

    /// Changes that only insert, as an append-only source makes.
    pub fn inserts_only(mut self) -> Self {
        self.inserts_only = true;
        self
    }

    /// The next change: a few inserts and retractions, sometimes none.
    pub fn next(&mut self, rng: &mut Rng) -> ChangeBatch {
        let mut delta: std::collections::BTreeMap<String, i64> = Default::default();
        let operations = rng.below(5);
        for _ in 0..operations {
            let live: Vec<&String> = self
                .contents
                .iter()
                .filter(|&(row, &count)| count + delta.get(row).copied().unwrap_or(0) > 0)
                .map(|(row, _)| row)
                .collect();
            if !self.inserts_only && !live.is_empty() && rng.below(3) == 0 {
                let row = live[rng.below(live.len())].clone();
                *delta.entry(row).or_default() -= 1;
            } else {
                let row: Vec<&str> = self.cells.iter().map(|c| c[rng.below(c.len())]).collect();
                *delta.entry(row.join(" ")).or_default() += 1 + (rng.below(4) == 0) as i64;
            }
        }
        delta.retain(|_, w| *w != 0);
        for (row, w) in &delta {
            *self.contents.entry(row.clone()).or_default() += w;
        }
        self.contents.retain(|_, c| *c != 0);
        let text: Vec<String> = delta.iter().map(|(r, w)| format!("{r} {w:+}")).collect();
        change(self.spec, &text.join("; "))
    }
}
