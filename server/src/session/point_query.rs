//! Point queries: `SELECT columns FROM t WHERE key = $1 [AND key2 = $2 ...]`
//! with every primary-key column pinned, answered by a key lookup in the
//! statement's snapshot without planning.
//!
//! The first execution of a statement with parameters is bound as usual;
//! when the bound plan has exactly this shape (plain columns out, a
//! conjunction of key equalities against parameters or literals, one base
//! table), the session remembers it, keyed by the statement and valid for
//! as long as the catalog it was bound against is the one the statement
//! reads (any DDL, committed or in the open transaction, makes a new
//! catalog) and `search_path` is unchanged. Later executions look the key
//! up directly, and a prepared statement keeps what its first lookup found
//! ([`PointMemo`]), so an execution neither hashes its syntax tree nor
//! enters the statement machinery (no implicit transaction to open and
//! commit: the read is one lookup in one snapshot). Whatever does not fit (another shape, a parameter whose
//! value does not convert exactly to the key's type) takes the planned path,
//! so the answer is always the planned one.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use datafusion::common::ParamValues;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::scalar::ScalarValue;
use datafusion::sql::sqlparser::ast::Statement;

use super::{Session, StatementResult};
use crate::catalog::provider::WeirTable;
use crate::catalog::{Catalog, TableDef};
use crate::db::Snapshot;
use crate::error::ServerError;

/// Remembered statements per session; past this the cache starts over.
const MAX_REMEMBERED: usize = 256;

/// A statement recognized as a point query.
#[derive(Debug)]
pub(super) struct PointQuery {
    table: Arc<TableDef>,
    /// The key columns, as indices into the table's stored columns.
    key_columns: Vec<usize>,
    /// Where each key column's value comes from, in key order.
    key_values: Vec<KeyValue>,
    /// Output columns, as indices into the table's stored columns.
    columns: Vec<usize>,
    /// The planned output schema (before presentation).
    schema: SchemaRef,
}

#[derive(Debug)]
enum KeyValue {
    /// `$n`, zero-based.
    Param(usize),
    Literal(ScalarValue),
}

/// What a session knows about the statements it has run with parameters.
#[derive(Default)]
pub(super) struct PointQueries {
    remembered: HashMap<Statement, Remembered>,
}

#[derive(Clone)]
struct Remembered {
    catalog: Arc<Catalog>,
    search_path: String,
    /// `None`: not a point query (so the statement is not analyzed again).
    point: Option<Arc<PointQuery>>,
}

impl PointQueries {
    /// The point query `statement` is, if it was seen against this catalog
    /// and search path. `Some(None)`: seen, and not a point query.
    pub(super) fn get(
        &self,
        statement: &Statement,
        catalog: &Arc<Catalog>,
        search_path: &str,
    ) -> Option<Option<Arc<PointQuery>>> {
        let r = self.remembered.get(statement)?;
        (Arc::ptr_eq(&r.catalog, catalog) && r.search_path == search_path).then(|| r.point.clone())
    }

    /// Remembers what `plan` (the bound plan of `statement`, parameters not
    /// yet substituted) is.
    pub(super) fn remember(
        &mut self,
        statement: Statement,
        catalog: Arc<Catalog>,
        search_path: String,
        plan: &LogicalPlan,
    ) {
        if self.remembered.len() >= MAX_REMEMBERED {
            self.remembered.clear();
        }
        let point = recognize(plan).map(Arc::new);
        self.remembered.insert(
            statement,
            Remembered {
                catalog,
                search_path,
                point,
            },
        );
    }
}

/// A prepared statement's copy of what [`PointQueries::get`] answered for
/// it, under the same validity rule (same catalog, same search path).
#[derive(Default)]
pub(crate) struct PointMemo(parking_lot::Mutex<Option<Remembered>>);

impl std::fmt::Debug for PointMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PointMemo")
    }
}

impl PointMemo {
    fn get(&self, catalog: &Arc<Catalog>, search_path: &str) -> Option<Option<Arc<PointQuery>>> {
        let memo = self.0.lock();
        let r = memo.as_ref()?;
        (Arc::ptr_eq(&r.catalog, catalog) && r.search_path == search_path).then(|| r.point.clone())
    }
}

impl Session {
    /// Answers a prepared point query by a key lookup, without planning
    /// and without the statement machinery; `None` when the statement is
    /// not known to be one (the usual path then plans it and remembers
    /// what it is), its transaction block has failed, Weir is still
    /// restoring, or the lookup cannot answer these parameters. The answer
    /// and its effects are the usual path's: a base table's read needs no
    /// barrier, and a read-only implicit transaction commits nothing.
    pub(super) fn answer_point_query(
        &mut self,
        memo: &PointMemo,
        statement: &Statement,
        params: &ParamValues,
    ) -> Option<Result<StatementResult, ServerError>> {
        if !matches!(statement, Statement::Query(_))
            || self.txn.as_ref().is_some_and(|t| t.failed)
            || !self.db.is_recovered()
        {
            return None;
        }
        let latest;
        let snapshot: &Snapshot = match &self.txn {
            Some(t) => &t.overlay,
            None => {
                latest = self.db.snapshot();
                &latest
            }
        };
        let search_path = self.vars.default_schema();
        let point = match memo.get(&snapshot.catalog, &search_path) {
            Some(known) => known,
            None => {
                let known = self
                    .point_queries
                    .get(statement, &snapshot.catalog, &search_path)?;
                *memo.0.lock() = Some(Remembered {
                    catalog: snapshot.catalog.clone(),
                    search_path,
                    point: known.clone(),
                });
                known
            }
        }?;
        let answered = match point.run(snapshot, params) {
            Ok(None) => return None,
            Ok(Some((schema, batches))) => self
                .present(schema, batches)
                .and_then(|(s, b)| self.in_session_time_zone(s, b))
                .and_then(|(s, b)| self.with_float_digits(s, b)),
            Err(e) => Err(e),
        };
        self.db.metrics().query("select");
        match answered {
            Ok((schema, batches)) => {
                self.db.metrics().point_lookup();
                Some(Ok(StatementResult::Rows { schema, batches }))
            }
            Err(e) => {
                self.note_error(&e);
                self.fail_block();
                Some(Err(e))
            }
        }
    }
}

fn recognize(plan: &LogicalPlan) -> Option<PointQuery> {
    let LogicalPlan::Projection(projection) = plan else {
        return None;
    };
    let LogicalPlan::Filter(filter) = projection.input.as_ref() else {
        return None;
    };
    let scan = match filter.input.as_ref() {
        LogicalPlan::TableScan(scan) => scan,
        LogicalPlan::SubqueryAlias(alias) => match alias.input.as_ref() {
            LogicalPlan::TableScan(scan) => scan,
            _ => return None,
        },
        _ => return None,
    };
    if !scan.filters.is_empty() || scan.fetch.is_some() {
        return None;
    }
    let provider = source_as_provider(&scan.source).ok()?;
    let table = provider.downcast_ref::<WeirTable>()?;
    let def = table.def().clone();
    let stored = def.physical_schema();
    if datafusion::catalog::TableProvider::schema(table)
        .fields()
        .len()
        != def.user_schema().fields().len()
    {
        // A DML plan that exposes hidden row ids: not a user's read.
        return None;
    }
    let columns = projection
        .expr
        .iter()
        .map(|e| match e.clone().unalias() {
            Expr::Column(c) => stored.index_of(&c.name).ok(),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    let keys: Vec<usize> = def
        .primary_key
        .iter()
        .map(|k| stored.index_of(k).ok())
        .collect::<Option<_>>()?;
    if keys.is_empty() {
        return None;
    }
    let mut key_values: Vec<Option<KeyValue>> = keys.iter().map(|_| None).collect();
    for conjunct in split_conjunction(&filter.predicate) {
        let Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) = conjunct
        else {
            return None;
        };
        let (column, value) = match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), v) | (v, Expr::Column(c)) => (c, v),
            _ => return None,
        };
        let position = keys
            .iter()
            .position(|&k| stored.field(k).name() == &column.name)?;
        let value = match value {
            Expr::Placeholder(p) => KeyValue::Param(
                p.id.strip_prefix('$')?
                    .parse::<usize>()
                    .ok()?
                    .checked_sub(1)?,
            ),
            Expr::Literal(v, _) => KeyValue::Literal(v.clone()),
            _ => return None,
        };
        if key_values[position].replace(value).is_some() {
            // `key = $1 AND key = $2`: leave it to the planner.
            return None;
        }
    }
    let key_values = key_values.into_iter().collect::<Option<Vec<_>>>()?;
    Some(PointQuery {
        table: def,
        key_columns: keys,
        key_values,
        columns,
        schema: Arc::new(plan.schema().as_arrow().clone()),
    })
}

impl PointQuery {
    /// The query's rows in `snapshot`, or `None` when this statement must be
    /// planned after all (the table changed, or a parameter's value does not
    /// convert exactly to its key column's type).
    pub(super) fn run(
        &self,
        snapshot: &Snapshot,
        params: &ParamValues,
    ) -> Result<Option<(SchemaRef, Vec<RecordBatch>)>, ServerError> {
        let def = &self.table;
        if !snapshot
            .catalog
            .tables
            .get(&def.id)
            .is_some_and(|current| Arc::ptr_eq(current, def))
        {
            return Ok(None);
        }
        let Some(state) = snapshot
            .tables
            .get(&def.id)
            .filter(|s| s.key_columns() == self.key_columns)
        else {
            return Ok(None);
        };
        let stored = def.physical_schema();
        let mut keys: Vec<ArrayRef> = Vec::with_capacity(self.key_values.len());
        for (value, &k) in self.key_values.iter().zip(&self.key_columns) {
            let value = match value {
                KeyValue::Literal(v) => v.clone(),
                KeyValue::Param(i) => match params {
                    ParamValues::List(list) => match list.get(*i) {
                        Some(v) => v.value.clone(),
                        None => return Ok(None),
                    },
                    ParamValues::Map(_) => return Ok(None),
                },
            };
            let ty = stored.field(k).data_type();
            if value.is_null() {
                // `key = NULL` matches nothing.
                return Ok(Some((self.schema.clone(), Vec::new())));
            }
            let exact = if &value.data_type() == ty {
                value
            } else {
                match value.cast_to(ty) {
                    Ok(c) if c.cast_to(&value.data_type()).ok().as_ref() == Some(&value) => c,
                    _ => return Ok(None),
                }
            };
            keys.push(exact.to_array()?);
        }
        let found = state.rows_with_keys(&keys)?;
        let columns = self
            .columns
            .iter()
            .map(|&c| found.column(c).clone())
            .collect();
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(found.num_rows())),
        )?;
        Ok(Some((self.schema.clone(), vec![batch])))
    }
}
