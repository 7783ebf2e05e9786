//! The sequence functions: `nextval`, `currval`, `setval`, `lastval` and
//! `pg_get_serial_sequence`. Names are read as PostgreSQL reads a
//! `regclass` (`'s'`, `'app.s'`, `'"Mixed"'`) through `search_path`, in
//! the statement's snapshot, so a sequence created earlier in the same
//! transaction is found. Values come from [`crate::sequences`].

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, Int64Array, StringArray};
use arrow::datatypes::DataType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::prelude::SessionContext;
use parking_lot::Mutex;

use crate::catalog::functions::search_path;
use crate::catalog::provider::{SessionView, WeirCatalogList};
use crate::catalog::sequence::{SequenceDef, regclass_parts};
use crate::db::Database;
use crate::error::ServerError;

/// What `currval` and `lastval` remember: the values this session got.
#[derive(Debug, Default)]
struct Seen {
    by_sequence: HashMap<uuid::Uuid, i64>,
    last: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Nextval,
    Currval,
    Setval,
    Lastval,
    SerialSequence,
}

struct SequenceUdf {
    kind: Kind,
    name: &'static str,
    signature: Signature,
    db: Arc<Database>,
    view: Arc<SessionView>,
    user: String,
    seen: Arc<Mutex<Seen>>,
}

pub(super) fn register(ctx: &SessionContext, db: &Arc<Database>, user: &str) {
    let state = ctx.state();
    let Some(list) = state.catalog_list().downcast_ref::<WeirCatalogList>() else {
        return;
    };
    let seen = Arc::new(Mutex::new(Seen::default()));
    let functions = [
        (Kind::Nextval, "nextval", TypeSignature::Any(1)),
        (Kind::Currval, "currval", TypeSignature::Any(1)),
        (
            Kind::Setval,
            "setval",
            TypeSignature::OneOf(vec![TypeSignature::Any(2), TypeSignature::Any(3)]),
        ),
        (Kind::Lastval, "lastval", TypeSignature::Nullary),
        (
            Kind::SerialSequence,
            "pg_get_serial_sequence",
            TypeSignature::Any(2),
        ),
    ];
    for (kind, name, signature) in functions {
        let volatility = if kind == Kind::SerialSequence {
            Volatility::Stable
        } else {
            Volatility::Volatile
        };
        ctx.register_udf(ScalarUDF::from(SequenceUdf {
            kind,
            name,
            signature: Signature::new(signature, volatility),
            db: db.clone(),
            view: list.view().clone(),
            user: user.to_string(),
            seen: seen.clone(),
        }));
    }
}

/// Raised inside a statement: carried as its SQLSTATE and words, so the
/// client sees them, not DataFusion's wrapping.
fn external(e: ServerError) -> DataFusionError {
    DataFusionError::External(Box::new(ServerError::Sqlstate {
        code: e.sqlstate(),
        message: e.to_string(),
    }))
}

impl SequenceUdf {
    /// What `find` finds for a relation named `parts`: in its schema, or
    /// the first schema of `search_path` that has it.
    fn find_in_path<T>(
        &self,
        parts: &[String],
        find: impl Fn(&str, &str) -> Option<T>,
    ) -> Option<T> {
        match parts {
            [name] => search_path(&self.view, &self.user)
                .iter()
                .find_map(|schema| find(schema, name)),
            [schema, name] | [_, schema, name] => find(schema, name),
            _ => None,
        }
    }

    fn sequence(&self, text: &str) -> Result<Arc<SequenceDef>, ServerError> {
        let snapshot = self.view.snapshot();
        let catalog = &snapshot.catalog;
        // A number is an OID, as a `regclass` reads it.
        if let Ok(oid) = text.trim().parse::<i64>()
            && let Some(def) = catalog
                .sequences
                .values()
                .find(|s| crate::catalog::pg::table_oid(s.id) == oid)
        {
            return Ok(def.clone());
        }
        let parts = regclass_parts(text);
        let found = self.find_in_path(&parts, |schema, name| {
            catalog.sequence(schema, name).cloned()
        });
        found.ok_or_else(|| {
            let last = parts.last().map_or("", |s| s.as_str());
            if catalog.tables.values().any(|t| t.name == last) {
                ServerError::Sqlstate {
                    code: "42809",
                    message: format!("\"{text}\" is not a sequence"),
                }
            } else {
                ServerError::UndefinedTable(text.to_string())
            }
        })
    }

    fn nextval(&self, names: &ColumnarValue, rows: usize) -> Result<ColumnarValue, ServerError> {
        let values = self.db.sequence_values();
        // One name for every row (the usual `DEFAULT nextval('s')`): one call.
        if let ColumnarValue::Scalar(_) = names {
            let name = text_array(names, 1)?;
            if name.is_null(0) {
                return Ok(ColumnarValue::Array(Arc::new(Int64Array::new_null(rows))));
            }
            let def = self.sequence(name.value(0))?;
            let out = values.next(&def, rows)?;
            self.remember(&def, out.last().copied());
            return Ok(ColumnarValue::Array(Arc::new(Int64Array::from(out))));
        }
        let names = text_array(names, rows)?;
        let mut out = Vec::with_capacity(rows);
        for name in names.iter() {
            let value = match name {
                None => None,
                Some(name) => {
                    let def = self.sequence(name)?;
                    let value = values.next(&def, 1)?[0];
                    self.remember(&def, Some(value));
                    Some(value)
                }
            };
            out.push(value);
        }
        Ok(ColumnarValue::Array(Arc::new(Int64Array::from(out))))
    }

    fn remember(&self, def: &SequenceDef, value: Option<i64>) {
        if let Some(value) = value {
            let mut seen = self.seen.lock();
            seen.by_sequence.insert(def.incarnation, value);
            seen.last = Some(value);
        }
    }

    fn currval(&self, names: &ColumnarValue, rows: usize) -> Result<ColumnarValue, ServerError> {
        let names = text_array(names, rows)?;
        let mut out = Vec::with_capacity(rows);
        for name in names.iter() {
            out.push(match name {
                None => None,
                Some(name) => {
                    let def = self.sequence(name)?;
                    let value = self.seen.lock().by_sequence.get(&def.incarnation).copied();
                    Some(value.ok_or_else(|| ServerError::Sqlstate {
                        code: "55000",
                        message: format!(
                            "currval of sequence \"{}\" is not yet defined in this session",
                            def.name
                        ),
                    })?)
                }
            });
        }
        Ok(ColumnarValue::Array(Arc::new(Int64Array::from(out))))
    }

    fn setval(&self, args: &[ColumnarValue], rows: usize) -> Result<ColumnarValue, ServerError> {
        let names = text_array(&args[0], rows)?;
        let targets = arrow::compute::cast(&args[1].to_array(rows)?, &DataType::Int64)
            .map_err(|e| ServerError::invalid_param(e.to_string()))?;
        let targets = targets.as_primitive::<arrow::datatypes::Int64Type>();
        let called: Option<BooleanArray> = match args.get(2) {
            None => None,
            Some(flag) => Some(
                arrow::compute::cast(&flag.to_array(rows)?, &DataType::Boolean)
                    .map_err(|e| ServerError::invalid_param(e.to_string()))?
                    .as_boolean()
                    .clone(),
            ),
        };
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            if names.is_null(row) || targets.is_null(row) {
                out.push(None);
                continue;
            }
            let def = self.sequence(names.value(row))?;
            let value = targets.value(row);
            if value < def.min || value > def.max {
                return Err(ServerError::Value {
                    sqlstate: "22003",
                    message: format!(
                        "setval: value {value} is out of bounds for sequence \"{}\" ({}..{})",
                        def.name, def.min, def.max
                    ),
                });
            }
            let is_called = called
                .as_ref()
                .is_none_or(|c| c.is_null(row) || c.value(row));
            self.db.sequence_values().set(&def, value, is_called)?;
            if is_called {
                self.remember(&def, Some(value));
            }
            out.push(Some(value));
        }
        Ok(ColumnarValue::Array(Arc::new(Int64Array::from(out))))
    }

    fn serial_sequence(
        &self,
        args: &[ColumnarValue],
        rows: usize,
    ) -> Result<ColumnarValue, ServerError> {
        let tables = text_array(&args[0], rows)?;
        let columns = text_array(&args[1], rows)?;
        let snapshot = self.view.snapshot();
        let catalog = &snapshot.catalog;
        let out: StringArray = (0..rows)
            .map(|row| {
                if tables.is_null(row) || columns.is_null(row) {
                    return Ok(None);
                }
                let parts = regclass_parts(tables.value(row));
                let table = self
                    .find_in_path(&parts, |schema, name| catalog.table(schema, name))
                    .ok_or_else(|| ServerError::UndefinedTable(tables.value(row).to_string()))?;
                // The column is an identifier as written: not folded.
                let column = columns.value(row);
                if !table.columns.iter().any(|c| c.name == column) {
                    return Err(ServerError::Sqlstate {
                        code: "42703",
                        message: format!(
                            "column \"{column}\" of relation \"{}\" does not exist",
                            table.name
                        ),
                    });
                }
                Ok(catalog
                    .sequences
                    .values()
                    .find(|s| {
                        s.owned_by
                            .as_ref()
                            .is_some_and(|o| o.table == table.id && o.column == column)
                    })
                    .map(|s| format!("{}.{}", s.schema, s.name)))
            })
            .collect::<Result<_, ServerError>>()?;
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

fn text_array(value: &ColumnarValue, rows: usize) -> Result<StringArray, ServerError> {
    let array = arrow::compute::cast(
        &value.to_array(rows).map_err(ServerError::from)?,
        &DataType::Utf8,
    )
    .map_err(|e| ServerError::invalid_param(e.to_string()))?;
    Ok(array.as_string::<i32>().clone())
}

impl std::fmt::Debug for SequenceUdf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for SequenceUdf {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && Arc::ptr_eq(&self.seen, &other.seen)
    }
}

impl Eq for SequenceUdf {}

impl std::hash::Hash for SequenceUdf {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.kind.hash(state);
    }
}

impl ScalarUDFImpl for SequenceUdf {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(match self.kind {
            Kind::SerialSequence => DataType::Utf8,
            _ => DataType::Int64,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        let result = match self.kind {
            Kind::Nextval => self.nextval(&args.args[0], rows),
            Kind::Currval => self.currval(&args.args[0], rows),
            Kind::Setval => self.setval(&args.args, rows),
            Kind::Lastval => match self.seen.lock().last {
                Some(v) => Ok(ColumnarValue::Array(Arc::new(Int64Array::from(vec![
                    v;
                    rows
                ])))),
                None => Err(ServerError::Sqlstate {
                    code: "55000",
                    message: "lastval is not yet defined in this session".into(),
                }),
            },
            Kind::SerialSequence => self.serial_sequence(&args.args, rows),
        };
        result.map_err(external)
    }
}
