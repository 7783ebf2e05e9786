//! Server-side cursors: `DECLARE`, `FETCH`, `MOVE` and `CLOSE`.
//!
//! A cursor's query runs when it is declared, over the declaring
//! statement's snapshot, and its rows are kept in the session; FETCH and MOVE
//! then walk them with PostgreSQL's position rules (0 is before the first
//! row, n+1 after the last). A cursor without `WITH HOLD` belongs to its
//! transaction and is gone once that transaction ends; one `WITH HOLD`
//! lives until `CLOSE` or the end of the session.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::compute::concat_batches;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::sql::sqlparser::ast::{
    CloseCursor, Declare, DeclareType, FetchDirection, Ident, ObjectName, Statement, Value,
    ValueWithSpan,
};

use weir_planner::parse::{MOVE_MARKER, NEGATED_MARKER};

use super::dml::normalize_ident;
use super::{Session, StatementResult, command};
use crate::error::ServerError;

/// Schema metadata naming the command tag of a row result when it is not
/// `SELECT` (a FETCH reports `FETCH n`).
pub(crate) const COMMAND_TAG_METADATA_KEY: &str = "weir.command_tag";
/// Schema metadata marking rows of a `DECLARE ... BINARY` cursor, which the
/// simple protocol sends in binary format.
pub(crate) const BINARY_METADATA_KEY: &str = "weir.binary";

pub(crate) struct Cursor {
    schema: SchemaRef,
    rows: RecordBatch,
    /// 0 = before the first row, 1..=n on a row, n+1 after the last.
    position: usize,
    /// The transaction the cursor dies with; `None` for `WITH HOLD`.
    txn: Option<u64>,
    /// `NO SCROLL` cursors refuse to move backward.
    no_scroll: bool,
    binary: bool,
}

pub(crate) type Cursors = HashMap<String, Cursor>;

fn cursor_error(sqlstate: &'static str, message: impl Into<String>) -> ServerError {
    ServerError::Sqlstate {
        code: sqlstate,
        message: message.into(),
    }
}

fn undefined(name: &str) -> ServerError {
    cursor_error("34000", format!("cursor \"{name}\" does not exist"))
}

/// How a FETCH or MOVE moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Motion {
    /// Up to `n` rows forward (`None`: all).
    Forward(Option<usize>),
    /// Up to `n` rows backward (`None`: all).
    Backward(Option<usize>),
    /// To row `n` (negative counts from the end), returning it.
    Absolute(i64),
    /// To `n` rows from the current one, returning that row.
    Relative(i64),
}

fn count_of(value: &ValueWithSpan) -> Result<i64, ServerError> {
    match &value.value {
        Value::Number(n, _) => n.parse::<i64>().map_err(|_| {
            cursor_error(
                "22023",
                format!("FETCH/MOVE count must be an integer, got {n}"),
            )
        }),
        Value::Placeholder(p) => Err(ServerError::feature_not_supported(format!(
            "a parameter ({p}) as a FETCH count"
        ))),
        other => Err(cursor_error(
            "42601",
            format!("FETCH/MOVE count must be an integer, got {other}"),
        )),
    }
}

/// A signed count: negative goes the other way, as in PostgreSQL.
fn signed(n: i64, forward: bool) -> Motion {
    let magnitude = Some(usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX));
    match (n >= 0) == forward {
        true => Motion::Forward(magnitude),
        false => Motion::Backward(magnitude),
    }
}

fn motion(direction: &FetchDirection) -> Result<Motion, ServerError> {
    use FetchDirection as D;
    Ok(match direction {
        D::Count { limit } => signed(count_of(limit)?, true),
        D::Next => Motion::Forward(Some(1)),
        D::Prior => Motion::Backward(Some(1)),
        D::First => Motion::Absolute(1),
        D::Last => Motion::Absolute(-1),
        D::Absolute { limit } => Motion::Absolute(count_of(limit)?),
        D::Relative { limit } => Motion::Relative(count_of(limit)?),
        D::All | D::ForwardAll => Motion::Forward(None),
        D::Forward { limit: None } => Motion::Forward(Some(1)),
        D::Forward { limit: Some(l) } => signed(count_of(l)?, true),
        D::BackwardAll => Motion::Backward(None),
        D::Backward { limit: None } => Motion::Backward(Some(1)),
        D::Backward { limit: Some(l) } => signed(count_of(l)?, false),
    })
}

impl Cursor {
    fn len(&self) -> usize {
        self.rows.num_rows()
    }

    /// Moves the cursor; returns the 1-based rows passed over, in order.
    fn step(&mut self, motion: Motion) -> Result<Vec<usize>, ServerError> {
        let n = self.len();
        let backward = match motion {
            Motion::Backward(_) => true,
            Motion::Absolute(k) => k < 0 || (k as usize) < self.position,
            Motion::Relative(k) => k < 0,
            Motion::Forward(_) => false,
        };
        if backward && self.no_scroll {
            return Err(cursor_error(
                "55000",
                "cursor can only scan forward (declare it with SCROLL to move backward)",
            ));
        }
        Ok(match motion {
            Motion::Forward(count) => {
                let count = count.unwrap_or(usize::MAX);
                let first = self.position + 1;
                let last = self.position.saturating_add(count).min(n);
                let rows: Vec<usize> = (first..=last).collect();
                self.position = if rows.len() < count {
                    n + 1
                } else {
                    self.position + count
                };
                rows
            }
            Motion::Backward(count) => {
                let count = count.unwrap_or(usize::MAX);
                let start = self.position.min(n + 1);
                let rows: Vec<usize> = (1..start).rev().take(count).collect();
                self.position = if rows.len() < count { 0 } else { start - count };
                rows
            }
            Motion::Absolute(k) => {
                let target = if k >= 0 {
                    usize::try_from(k).unwrap_or(usize::MAX).min(n + 1)
                } else {
                    let back = usize::try_from(k.unsigned_abs()).unwrap_or(usize::MAX);
                    (n + 1).saturating_sub(back)
                };
                self.position = target;
                if (1..=n).contains(&target) {
                    vec![target]
                } else {
                    vec![]
                }
            }
            Motion::Relative(k) => {
                let target = if k >= 0 {
                    self.position
                        .saturating_add(usize::try_from(k).unwrap_or(usize::MAX))
                        .min(n + 1)
                } else {
                    let back = usize::try_from(k.unsigned_abs()).unwrap_or(usize::MAX);
                    self.position.saturating_sub(back)
                };
                self.position = target;
                if (1..=n).contains(&target) {
                    vec![target]
                } else {
                    vec![]
                }
            }
        })
    }

    fn take(&self, rows: &[usize]) -> Result<RecordBatch, ServerError> {
        let indices =
            arrow::array::UInt64Array::from_iter_values(rows.iter().map(|r| (*r - 1) as u64));
        let columns = self
            .rows
            .columns()
            .iter()
            .map(|c| arrow::compute::take(c, &indices, None))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RecordBatch::try_new_with_options(
            self.rows.schema(),
            columns,
            &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?)
    }
}

/// The schema FETCH reports: the cursor's, tagged for the front end.
fn fetch_schema(schema: &Schema, binary: bool) -> SchemaRef {
    let mut metadata = schema.metadata().clone();
    metadata.insert(COMMAND_TAG_METADATA_KEY.to_string(), "FETCH".to_string());
    if binary {
        metadata.insert(BINARY_METADATA_KEY.to_string(), "true".to_string());
    }
    Arc::new(Schema::new_with_metadata(schema.fields().clone(), metadata))
}

impl Session {
    /// The id of the open transaction, if any.
    fn current_txn_id(&self) -> Option<u64> {
        self.txn.as_ref().map(|t| t.id)
    }

    /// Drops cursors whose transaction has ended.
    fn prune_cursors(&mut self) {
        let current = self.current_txn_id();
        self.cursors
            .retain(|_, c| c.txn.is_none() || c.txn == current);
    }

    pub(super) async fn declare(
        &mut self,
        mut stmts: Vec<Declare>,
        params: Option<&ParamValues>,
    ) -> Result<StatementResult, ServerError> {
        self.prune_cursors();
        let declare = match (stmts.pop(), stmts.is_empty()) {
            (Some(d), true) if matches!(d.declare_type, Some(DeclareType::Cursor)) => d,
            _ => return Err(ServerError::feature_not_supported("this DECLARE form")),
        };
        let [name] = &declare.names[..] else {
            return Err(ServerError::feature_not_supported(
                "DECLARE of several names",
            ));
        };
        let name = normalize_ident(name);
        let Some(query) = declare.for_query else {
            return Err(cursor_error("42601", "DECLARE CURSOR needs FOR <query>"));
        };
        let hold = declare.hold == Some(true);
        let txn = self
            .txn
            .as_ref()
            .expect("a statement runs in a transaction");
        if !hold && txn.statement_only {
            return Err(cursor_error(
                "25P01",
                "DECLARE CURSOR can only be used in transaction blocks",
            ));
        }
        let txn_id = (!hold).then_some(txn.id);
        if self.cursors.contains_key(&name) {
            return Err(cursor_error(
                "42P03",
                format!("cursor \"{name}\" already exists"),
            ));
        }
        let plan = Self::bind(self.plan_statement(Statement::Query(query)).await?, params)?;
        let (schema, batches) = self.run_plan(plan).await?;
        let rows = concat_batches(&schema, &batches)?;
        self.cursors.insert(
            name,
            Cursor {
                schema,
                rows,
                position: 0,
                txn: txn_id,
                no_scroll: declare.scroll == Some(false),
                binary: declare.binary == Some(true),
            },
        );
        Ok(command("DECLARE CURSOR"))
    }

    /// FETCH, or MOVE when `into` is [`MOVE_MARKER`].
    pub(super) fn fetch(
        &mut self,
        name: &Ident,
        direction: &FetchDirection,
        into: Option<&ObjectName>,
    ) -> Result<StatementResult, ServerError> {
        let marker = into.map(ToString::to_string);
        let (is_move, negated) = match marker.as_deref().map(|m| m.trim_matches('"')) {
            None => (false, false),
            Some(m) if m == MOVE_MARKER => (true, false),
            Some(m) if m == NEGATED_MARKER => (false, true),
            Some(m) if m == format!("{MOVE_MARKER}.{NEGATED_MARKER}") => (true, true),
            Some(_) => {
                return Err(ServerError::feature_not_supported("FETCH ... INTO"));
            }
        };
        self.prune_cursors();
        let name = normalize_ident(name);
        let motion = match (motion(direction)?, negated) {
            (Motion::Absolute(k), true) => Motion::Absolute(-k),
            (Motion::Relative(k), true) => Motion::Relative(-k),
            (motion, _) => motion,
        };
        let cursor = self
            .cursors
            .get_mut(&name)
            .ok_or_else(|| undefined(&name))?;
        let rows = cursor.step(motion)?;
        if is_move {
            return Ok(command(&format!("MOVE {}", rows.len())));
        }
        let batch = cursor.take(&rows)?;
        let schema = fetch_schema(&cursor.schema, cursor.binary);
        Ok(StatementResult::Rows {
            schema,
            batches: vec![batch],
        })
    }

    pub(super) fn close_cursor(
        &mut self,
        which: &CloseCursor,
    ) -> Result<StatementResult, ServerError> {
        self.prune_cursors();
        match which {
            CloseCursor::All => self.cursors.clear(),
            CloseCursor::Specific { name } => {
                let name = normalize_ident(name);
                if self.cursors.remove(&name).is_none() {
                    return Err(undefined(&name));
                }
            }
        }
        Ok(command("CLOSE CURSOR"))
    }

    /// The row schema of an open cursor (what Describe of the portal of that
    /// name reports) and whether it was declared BINARY.
    pub fn cursor_description(&mut self, name: &str) -> Option<(SchemaRef, bool)> {
        self.prune_cursors();
        self.cursors.get(name).map(|c| (c.schema.clone(), c.binary))
    }

    /// The schema a FETCH from `name` will return, for Describe.
    pub(super) fn fetch_description(&mut self, name: &Ident) -> Result<SchemaRef, ServerError> {
        let name = normalize_ident(name);
        let (schema, binary) = self
            .cursor_description(&name)
            .ok_or_else(|| undefined(&name))?;
        Ok(fetch_schema(&schema, binary))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int32Array};
    use arrow::datatypes::{DataType, Field};

    fn cursor(n: i32, no_scroll: bool) -> Cursor {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int32, false)]));
        let rows = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int32Array::from_iter_values(1..=n))],
        )
        .expect("batch");
        Cursor {
            schema,
            rows,
            position: 0,
            txn: None,
            no_scroll,
            binary: false,
        }
    }

    fn values(c: &mut Cursor, m: Motion) -> Vec<i32> {
        let rows = c.step(m).expect("step");
        let batch = c.take(&rows).expect("take");
        let col = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int32Array>()
            .expect("int32");
        (0..col.len()).map(|i| col.value(i)).collect()
    }

    #[test]
    fn forward_and_backward_follow_postgresql_positions() {
        let mut c = cursor(5, false);
        assert_eq!(values(&mut c, Motion::Forward(Some(2))), vec![1, 2]);
        assert_eq!(values(&mut c, Motion::Forward(Some(2))), vec![3, 4]);
        assert_eq!(values(&mut c, Motion::Forward(Some(2))), vec![5]);
        assert_eq!(c.position, 6, "past the end");
        assert_eq!(values(&mut c, Motion::Forward(None)), Vec::<i32>::new());
        assert_eq!(values(&mut c, Motion::Backward(Some(1))), vec![5]);
        assert_eq!(values(&mut c, Motion::Backward(None)), vec![4, 3, 2, 1]);
        assert_eq!(c.position, 0);
        assert_eq!(values(&mut c, Motion::Absolute(-1)), vec![5]);
        assert_eq!(values(&mut c, Motion::Relative(-2)), vec![3]);
        assert_eq!(values(&mut c, Motion::Relative(0)), vec![3]);
        assert_eq!(values(&mut c, Motion::Absolute(9)), Vec::<i32>::new());
        assert_eq!(c.position, 6);
        assert_eq!(values(&mut c, Motion::Absolute(0)), Vec::<i32>::new());
        assert_eq!(values(&mut c, Motion::Forward(None)), vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn no_scroll_refuses_to_go_back() {
        let mut c = cursor(3, true);
        assert_eq!(values(&mut c, Motion::Forward(Some(2))), vec![1, 2]);
        let err = c.step(Motion::Backward(Some(1))).expect_err("backward");
        assert_eq!(err.sqlstate(), "55000");
        assert_eq!(values(&mut c, Motion::Forward(Some(5))), vec![3]);
    }

    #[test]
    fn negative_counts_reverse_direction() {
        assert_eq!(signed(-3, true), Motion::Backward(Some(3)));
        assert_eq!(signed(-3, false), Motion::Forward(Some(3)));
        assert_eq!(signed(2, true), Motion::Forward(Some(2)));
    }
}
