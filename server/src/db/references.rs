//! Foreign keys: the checks and the referential actions.
//!
//! A foreign key holds when every referencing row's key (without NULLs,
//! MATCH SIMPLE) is a row of the referenced table. Both ends can break it:
//! a child row written with a key the parent lacks, or a parent row
//! deleted or re-keyed while children refer to it. [`Snapshot::
//! check_foreign_keys`] checks both over a snapshot with the writes
//! applied, through the parent's primary key or unique index and the index
//! the child keeps over its referencing columns (`TableDef::index_specs`),
//! so a check costs a lookup per written row, never a scan. It runs at the
//! end of each statement (on the transaction's overlay) and again at
//! commit on the head, where what other transactions committed meanwhile
//! is visible: a child inserted under a parent another transaction just
//! deleted fails there.
//!
//! ON DELETE / ON UPDATE CASCADE and SET NULL are writes of their own:
//! [`Snapshot::apply_with_actions`] derives them from the statement's
//! writes, transitively, when the statement runs, so they are logged,
//! replayed and streamed like any other write.

use std::collections::{HashMap, VecDeque};

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, UInt32Array, new_null_array};
use arrow::compute::{cast, filter_record_batch, take};
use arrow::row::{RowConverter, SortField};
use weir_common::{ChangeBatch, ObjectId};
use weir_engine::TableState;

use super::Snapshot;
use crate::catalog::constraint::{ForeignKeyDef, RefAction};
use crate::catalog::model::TableDef;
use crate::error::ServerError;
use crate::wal::TableWrite;

/// The rows a write adds and the rows it takes away.
pub fn added_and_removed(op: &TableWrite) -> (Option<RecordBatch>, Option<RecordBatch>) {
    match op {
        TableWrite::Changes(change) => {
            let weights = change.weights();
            let positive = arrow::compute::kernels::cmp::gt(weights, &Int64Array::new_scalar(0));
            let negative = arrow::compute::kernels::cmp::lt(weights, &Int64Array::new_scalar(0));
            let pick = |mask: Result<arrow::array::BooleanArray, _>| {
                mask.ok()
                    .and_then(|m| filter_record_batch(change.rows(), &m).ok())
                    .filter(|b| b.num_rows() > 0)
            };
            (pick(positive), pick(negative))
        }
        TableWrite::Rewrite { rows, .. } => (Some(rows.clone()), None),
        TableWrite::Truncate => (None, None),
    }
}

/// Positions of `columns` in `def`'s stored layout.
fn positions(def: &TableDef, columns: &[String]) -> Result<Vec<usize>, ServerError> {
    let schema = def.physical_schema();
    columns
        .iter()
        .map(|c| {
            schema.index_of(c).map_err(|_| {
                ServerError::internal(format!(
                    "foreign key column {c} is not a column of {}",
                    def.name
                ))
            })
        })
        .collect()
}

/// Columns `from` of `batch`, cast to the types of columns `to` of `state`.
fn values(
    batch: &RecordBatch,
    from: &[usize],
    state: &TableState,
    to: &[usize],
) -> Result<Vec<ArrayRef>, ServerError> {
    from.iter()
        .zip(to)
        .map(|(&f, &t)| {
            let target = state.schema().field(t).data_type();
            Ok(cast(batch.column(f), target)?)
        })
        .collect()
}

/// `(a, b)=(1, x)` of row `i`.
fn describe(names: &[String], columns: &[ArrayRef], i: usize) -> String {
    let values: Vec<String> = columns
        .iter()
        .map(|c| {
            if c.is_null(i) {
                "null".into()
            } else {
                arrow::util::display::array_value_to_string(c, i).unwrap_or_default()
            }
        })
        .collect();
    format!("({})=({})", names.join(", "), values.join(", "))
}

fn table_state<'a>(snapshot: &'a Snapshot, id: ObjectId) -> Result<&'a TableState, ServerError> {
    snapshot
        .tables
        .get(&id)
        .ok_or_else(|| ServerError::internal(format!("table {id} has no stored state")))
}

impl Snapshot {
    /// Whether a write to table `id` can break or trigger a foreign key.
    fn has_references(&self, id: ObjectId) -> bool {
        self.catalog
            .tables
            .get(&id)
            .is_some_and(|d| !d.foreign_keys.is_empty())
            || self
                .catalog
                .tables
                .values()
                .any(|t| t.foreign_keys.iter().any(|f| f.parent == id))
    }

    /// Checks every foreign key that `ops`, already applied to this
    /// snapshot, could break (23503 naming the constraint).
    pub fn check_foreign_keys(&self, ops: &[(ObjectId, TableWrite)]) -> Result<(), ServerError> {
        for (id, op) in ops {
            if !self.has_references(*id) {
                continue;
            }
            let Some(def) = self.catalog.tables.get(id) else {
                continue;
            };
            let (added, removed) = added_and_removed(op);
            if let Some(added) = &added {
                for fk in &def.foreign_keys {
                    self.check_child_rows(def, fk, added)?;
                }
            }
            if let Some(removed) = &removed {
                for (child, fk) in self.catalog.foreign_keys_to(*id) {
                    self.check_parent_rows(def, child, fk, removed)?;
                }
            }
        }
        Ok(())
    }

    /// Every row of `rows` (of table `def`) has its key for `fk` in the
    /// referenced table.
    pub fn check_child_rows(
        &self,
        def: &TableDef,
        fk: &ForeignKeyDef,
        rows: &RecordBatch,
    ) -> Result<(), ServerError> {
        let parent_def = self.catalog.tables.get(&fk.parent).ok_or_else(|| {
            ServerError::internal(format!(
                "foreign key {} references a dropped table",
                fk.name
            ))
        })?;
        let parent = table_state(self, fk.parent)?;
        let to = positions(parent_def, &fk.parent_columns)?;
        let keys = values(rows, &positions(def, &fk.columns)?, parent, &to)?;
        let found = parent.contains_each(&to, &keys)?.ok_or_else(|| {
            ServerError::internal(format!(
                "foreign key {} references columns without a unique index",
                fk.name
            ))
        })?;
        if let Some(i) = found.iter().position(|f| !f) {
            return Err(ServerError::Sqlstate {
                code: "23503",
                message: format!(
                    "insert or update on table \"{}\" violates foreign key constraint \"{}\": Key {} is not present in table \"{}\".",
                    def.name,
                    fk.name,
                    describe(&fk.columns, &keys, i),
                    parent_def.name
                ),
            });
        }
        Ok(())
    }

    /// No row of `child` refers, through `fk`, to a row of `removed`
    /// (taken from table `def`) whose key the table no longer has.
    fn check_parent_rows(
        &self,
        def: &TableDef,
        child: &TableDef,
        fk: &ForeignKeyDef,
        removed: &RecordBatch,
    ) -> Result<(), ServerError> {
        let (gone, _) = self.gone_keys(def, fk, removed)?;
        if gone.first().is_none_or(|g| g.is_empty()) {
            return Ok(());
        }
        let (child_state, child_columns, as_child) = self.as_child_keys(child, fk, &gone)?;
        let referenced = child_state
            .contains_each(&child_columns, &as_child)?
            .ok_or_else(|| {
                ServerError::internal(format!("foreign key {} has no index on its table", fk.name))
            })?;
        if let Some(i) = referenced
            .iter()
            .enumerate()
            .position(|(i, r)| *r && as_child.iter().all(|c| c.is_valid(i)))
        {
            return Err(ServerError::Sqlstate {
                code: "23503",
                message: format!(
                    "update or delete on table \"{}\" violates foreign key constraint \"{}\" on table \"{}\": Key {} is still referenced from table \"{}\".",
                    def.name,
                    fk.name,
                    child.name,
                    describe(&fk.parent_columns, &gone, i),
                    child.name
                ),
            });
        }
        Ok(())
    }

    /// Referenced keys (`gone`, in the parent's types) as the child's
    /// referencing columns hold them: the child's state, those columns'
    /// positions and the keys cast to their types.
    fn as_child_keys(
        &self,
        child: &TableDef,
        fk: &ForeignKeyDef,
        gone: &[ArrayRef],
    ) -> Result<(&TableState, Vec<usize>, Vec<ArrayRef>), ServerError> {
        let state = table_state(self, child.id)?;
        let columns = positions(child, &fk.columns)?;
        let keys = gone
            .iter()
            .zip(&columns)
            .map(|(g, &c)| cast(g, state.schema().field(c).data_type()))
            .collect::<Result<_, _>>()?;
        Ok((state, columns, keys))
    }

    /// The referenced keys (`fk.parent_columns`) of `removed`, rows of
    /// table `def`, that the table no longer holds, and which rows of
    /// `removed` they came from.
    fn gone_keys(
        &self,
        def: &TableDef,
        fk: &ForeignKeyDef,
        removed: &RecordBatch,
    ) -> Result<(Vec<ArrayRef>, Vec<u32>), ServerError> {
        let state = table_state(self, def.id)?;
        let columns = positions(def, &fk.parent_columns)?;
        let keys: Vec<ArrayRef> = columns.iter().map(|&c| removed.column(c).clone()).collect();
        let still = state.contains_each(&columns, &keys)?.ok_or_else(|| {
            ServerError::internal(format!(
                "foreign key {} references columns without a unique index",
                fk.name
            ))
        })?;
        let rows: Vec<u32> = (0..removed.num_rows())
            .filter(|&i| !still[i])
            .map(|i| i as u32)
            .collect();
        let indices = UInt32Array::from(rows.clone());
        let gone = keys
            .iter()
            .map(|k| take(k.as_ref(), &indices, None))
            .collect::<Result<_, _>>()?;
        Ok((gone, rows))
    }

    /// Applies `ops` and the writes their ON DELETE / ON UPDATE actions
    /// make (transitively), returning all of them in the order applied.
    /// Keys and unique indexes are checked; foreign keys are the caller's
    /// to check after, over everything returned.
    pub fn apply_with_actions(
        &mut self,
        ops: Vec<(ObjectId, TableWrite)>,
    ) -> Result<Vec<(ObjectId, TableWrite)>, ServerError> {
        let acts = |s: &Self, id: ObjectId| {
            s.catalog.foreign_keys_to(id).iter().any(|(_, f)| {
                !matches!(f.on_delete, RefAction::NoAction | RefAction::Restrict)
                    || !matches!(f.on_update, RefAction::NoAction | RefAction::Restrict)
            })
        };
        if !ops.iter().any(|(id, _)| acts(self, *id)) {
            self.apply_writes(&ops)?;
            return Ok(ops);
        }
        // Each write is applied before the next action is derived, so two
        // foreign keys onto the same rows (a CASCADE and a SET NULL) see
        // each other's effect, as PostgreSQL's triggers do in turn.
        let mut queue: VecDeque<_> = VecDeque::new();
        for op in ops {
            self.apply_writes(std::slice::from_ref(&op))?;
            queue.push_back(op);
        }
        let mut done = Vec::new();
        while let Some((id, op)) = queue.pop_front() {
            if let TableWrite::Changes(change) = &op
                && acts(self, id)
            {
                let fks: Vec<ObjectId> = self
                    .catalog
                    .foreign_keys_to(id)
                    .iter()
                    .map(|(_, f)| f.id)
                    .collect();
                for fk in fks {
                    if let Some(write) = self.action_of(id, change, fk)? {
                        self.apply_writes(std::slice::from_ref(&write))?;
                        queue.push_back(write);
                    }
                }
            }
            done.push((id, op));
        }
        Ok(done)
    }

    /// The write foreign key `only`'s action makes to the rows that
    /// referred to keys `change` (applied to table `id`) removed or changed.
    fn action_of(
        &self,
        id: ObjectId,
        change: &ChangeBatch,
        only: ObjectId,
    ) -> Result<Option<(ObjectId, TableWrite)>, ServerError> {
        let Some(def) = self.catalog.tables.get(&id) else {
            return Ok(None);
        };
        let (added, removed) = added_and_removed(&TableWrite::Changes(change.clone()));
        let Some(removed) = removed else {
            return Ok(None);
        };
        let state = table_state(self, id)?;
        // Which added row each removed row was updated to, if any: an
        // UPDATE's change is its old rows then its new ones, pairwise;
        // otherwise a removed row whose primary key comes back was updated.
        let weights = change.weights().values();
        let half = weights.len() / 2;
        let update_shaped = weights.len() % 2 == 0
            && weights[..half].iter().all(|&w| w == -1)
            && weights[half..].iter().all(|&w| w == 1);
        let updated: Vec<Option<usize>> = if update_shaped {
            (0..removed.num_rows()).map(Some).collect()
        } else {
            let added_at: HashMap<Vec<u8>, usize> = match &added {
                Some(a) => state
                    .keys(a)?
                    .into_iter()
                    .enumerate()
                    .map(|(i, k)| (k.to_vec(), i))
                    .collect(),
                None => HashMap::new(),
            };
            state
                .keys(&removed)?
                .iter()
                .map(|k| added_at.get(k.as_slice()).copied())
                .collect()
        };
        let mut writes = Vec::new();
        for (child, fk) in self.catalog.foreign_keys_to(id) {
            if fk.id != only {
                continue;
            }
            let (gone, rows) = self.gone_keys(def, fk, &removed)?;
            if rows.is_empty() {
                continue;
            }
            // Per gone key: the row it was updated to, if any.
            let updated_to: Vec<Option<usize>> =
                rows.iter().map(|&r| updated[r as usize]).collect();
            let (child_state, child_columns, as_child) = self.as_child_keys(child, fk, &gone)?;
            let referencing = child_state
                .rows_matching(&child_columns, &as_child)?
                .ok_or_else(|| {
                    ServerError::internal(format!(
                        "foreign key {} has no index on its table",
                        fk.name
                    ))
                })?;
            if referencing.num_rows() == 0 {
                continue;
            }
            // Which gone key each referencing row refers to.
            let converter = RowConverter::new(
                as_child
                    .iter()
                    .map(|a| SortField::new(a.data_type().clone()))
                    .collect(),
            )?;
            let gone_rows = converter.convert_columns(&as_child)?;
            let by_key: HashMap<&[u8], usize> = (0..gone_rows.num_rows())
                .map(|i| (gone_rows.row(i).data(), i))
                .collect();
            let child_keys: Vec<ArrayRef> = child_columns
                .iter()
                .map(|&c| referencing.column(c).clone())
                .collect();
            let child_rows = converter.convert_columns(&child_keys)?;
            let mut deleted = Vec::new();
            let mut nulled = Vec::new();
            let mut rekeyed: Vec<(u32, u32)> = Vec::new();
            for i in 0..referencing.num_rows() {
                let Some(&g) = by_key.get(child_rows.row(i).data()) else {
                    continue;
                };
                let action = match updated_to[g] {
                    Some(_) => fk.on_update,
                    None => fk.on_delete,
                };
                match (action, updated_to[g]) {
                    (RefAction::Cascade, None) => deleted.push(i as u32),
                    (RefAction::Cascade, Some(to)) => rekeyed.push((i as u32, to as u32)),
                    (RefAction::SetNull, _) => nulled.push(i as u32),
                    // Left to the check, which refuses them.
                    (RefAction::NoAction | RefAction::Restrict, _) => {}
                }
            }
            let pick = |rows: &[u32]| -> Result<RecordBatch, ServerError> {
                Ok(arrow::compute::take_record_batch(
                    &referencing,
                    &UInt32Array::from(rows.to_vec()),
                )?)
            };
            let mut retract = Vec::new();
            let mut insert = Vec::new();
            if !deleted.is_empty() {
                retract.push(pick(&deleted)?);
            }
            if !nulled.is_empty() {
                let old = pick(&nulled)?;
                let mut columns = old.columns().to_vec();
                for &c in &child_columns {
                    columns[c] = new_null_array(columns[c].data_type(), old.num_rows());
                }
                insert.push(RecordBatch::try_new(old.schema(), columns)?);
                retract.push(old);
            }
            if !rekeyed.is_empty() {
                let from: Vec<u32> = rekeyed.iter().map(|r| r.0).collect();
                let to = UInt32Array::from(rekeyed.iter().map(|r| r.1).collect::<Vec<_>>());
                let old = pick(&from)?;
                let added = added.as_ref().expect("an update has added rows");
                let parent_columns = positions(def, &fk.parent_columns)?;
                let mut columns = old.columns().to_vec();
                for (&c, &p) in child_columns.iter().zip(&parent_columns) {
                    let new = take(added.column(p).as_ref(), &to, None)?;
                    columns[c] = cast(&new, columns[c].data_type())?;
                }
                insert.push(RecordBatch::try_new(old.schema(), columns)?);
                retract.push(old);
            }
            let weights: Vec<i64> = retract
                .iter()
                .flat_map(|b| std::iter::repeat_n(-1, b.num_rows()))
                .chain(
                    insert
                        .iter()
                        .flat_map(|b| std::iter::repeat_n(1, b.num_rows())),
                )
                .collect();
            let rows = arrow::compute::concat_batches(
                &referencing.schema(),
                retract.iter().chain(&insert),
            )?;
            let change = ChangeBatch::new(rows, Int64Array::from(weights))
                .map_err(|e| ServerError::internal(e.to_string()))?;
            if !change.is_empty() {
                writes.push((child.id, TableWrite::Changes(change)));
            }
        }
        Ok(writes.pop())
    }
}
