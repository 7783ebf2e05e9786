//! COPY: `FROM STDIN` into a table and `TO STDOUT` from a table or query,
//! in PostgreSQL's text and CSV formats.

use std::collections::HashMap;

use arrow::array::{Array, ArrayRef, StringArray};
use datafusion::sql::sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Statement,
};

use super::dml::{Conflict, normalize_ident};
use super::{CopyFormat, CopyInTarget, CopyOptions, Session, StatementResult, command};
use crate::error::ServerError;

fn copy_options(
    options: &[CopyOption],
    legacy: &[CopyLegacyOption],
) -> Result<CopyOptions, ServerError> {
    let mut format = CopyFormat::Text;
    for option in options {
        if let CopyOption::Format(f) = option {
            format = match f.value.to_ascii_lowercase().as_str() {
                "text" => CopyFormat::Text,
                "csv" => CopyFormat::Csv,
                "binary" => CopyFormat::Binary,
                other => {
                    return Err(ServerError::feature_not_supported(format!(
                        "COPY format {other}"
                    )));
                }
            };
        }
    }
    if legacy.iter().any(|o| matches!(o, CopyLegacyOption::Csv(_))) {
        format = CopyFormat::Csv;
    }
    if legacy.iter().any(|o| matches!(o, CopyLegacyOption::Binary)) {
        format = CopyFormat::Binary;
    }
    if format == CopyFormat::Binary
        && let Some(other) = options
            .iter()
            .find(|o| !matches!(o, CopyOption::Format(_) | CopyOption::Encoding(_)))
            .map(ToString::to_string)
            .or_else(|| {
                legacy
                    .iter()
                    .find(|o| !matches!(o, CopyLegacyOption::Binary))
                    .map(ToString::to_string)
            })
    {
        return Err(ServerError::Sqlstate {
            code: "42601",
            message: format!("cannot specify {other} in BINARY mode"),
        });
    }
    let mut out = CopyOptions::for_format(format);
    for option in options {
        match option {
            CopyOption::Format(_) => {}
            CopyOption::Delimiter(c) => out.delimiter = *c,
            CopyOption::Null(s) => out.null = s.clone(),
            CopyOption::Header(h) => out.header = *h,
            CopyOption::Quote(c) => out.quote = *c,
            CopyOption::Escape(c) => out.escape = *c,
            CopyOption::Encoding(e)
                if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
            other => {
                return Err(ServerError::feature_not_supported(format!(
                    "COPY option {other}"
                )));
            }
        }
    }
    for option in legacy {
        match option {
            CopyLegacyOption::Csv(csv) => {
                for o in csv {
                    match o {
                        CopyLegacyCsvOption::Header => out.header = true,
                        CopyLegacyCsvOption::Quote(c) => out.quote = *c,
                        CopyLegacyCsvOption::Escape(c) => out.escape = *c,
                        other => {
                            return Err(ServerError::feature_not_supported(format!(
                                "COPY option {other}"
                            )));
                        }
                    }
                }
            }
            CopyLegacyOption::Delimiter(c) => out.delimiter = *c,
            CopyLegacyOption::Null(s) => out.null = s.clone(),
            CopyLegacyOption::Header => out.header = true,
            CopyLegacyOption::Binary => {}
            other => {
                return Err(ServerError::feature_not_supported(format!(
                    "COPY option {other}"
                )));
            }
        }
    }
    if out.format == CopyFormat::Text && out.header {
        return Err(ServerError::feature_not_supported(
            "COPY HEADER in text format (use FORMAT csv)",
        ));
    }
    Ok(out)
}

/// What is left of a simple-protocol query string whose `COPY FROM STDIN`
/// is waiting for its data.
pub(super) struct AfterCopy {
    pub(super) statements: std::collections::VecDeque<Statement>,
    /// The string runs in one implicit transaction, still open.
    pub(super) grouped: bool,
}

impl Session {
    /// After `COPY FROM STDIN` data is loaded: runs the rest of the query
    /// string, as PostgreSQL does, and ends its implicit transaction. A
    /// second `COPY FROM STDIN` in the same string is refused.
    pub async fn resume_after_copy(&mut self) -> Vec<Result<StatementResult, ServerError>> {
        let Some(rest) = self.after_copy.take() else {
            return Vec::new();
        };
        let mut results = self.run_statements(rest.statements, rest.grouped).await;
        if self.after_copy.take().is_some() {
            results.pop();
            results.push(Err(ServerError::feature_not_supported(
                "a second COPY FROM STDIN in one query string",
            )));
            self.abandon_after_copy_txn(rest.grouped);
        }
        results
    }

    /// The COPY failed or was cancelled: the rest of the query string does
    /// not run and its implicit transaction is rolled back.
    pub fn abandon_after_copy(&mut self) {
        if let Some(rest) = self.after_copy.take() {
            self.abandon_after_copy_txn(rest.grouped);
        }
    }

    fn abandon_after_copy_txn(&mut self, grouped: bool) {
        if grouped && self.txn.as_ref().is_some_and(|t| !t.explicit) {
            self.txn = None;
        }
    }

    pub(super) async fn copy(
        &mut self,
        statement: Statement,
    ) -> Result<StatementResult, ServerError> {
        let Statement::Copy {
            source,
            to,
            target,
            options,
            legacy_options,
            ..
        } = statement
        else {
            unreachable!("dispatch sends only COPY here");
        };
        let options = copy_options(&options, &legacy_options)?;
        match (to, target) {
            (false, CopyTarget::Stdin) => {
                let CopySource::Table {
                    table_name,
                    columns,
                } = source
                else {
                    return Err(ServerError::feature_not_supported("COPY (query) FROM"));
                };
                let def = self.resolve_table(&table_name)?;
                let columns: Vec<String> = if columns.is_empty() {
                    def.columns.iter().map(|c| c.name.clone()).collect()
                } else {
                    columns.iter().map(normalize_ident).collect()
                };
                let mut fields = Vec::new();
                for name in &columns {
                    let column = def
                        .columns
                        .iter()
                        .find(|c| &c.name == name)
                        .ok_or_else(|| {
                            ServerError::UndefinedColumn(format!("{}.{name}", def.name))
                        })?;
                    fields.push(column.sql_type.field(&column.name, column.nullable));
                }
                Ok(StatementResult::CopyIn(CopyInTarget {
                    table: def.qualified_name(),
                    columns,
                    schema: std::sync::Arc::new(arrow::datatypes::Schema::new(fields)),
                    options,
                }))
            }
            (true, CopyTarget::Stdout) => {
                let (schema, batches) = match source {
                    CopySource::Query(query) => {
                        let plan = self.plan_statement(Statement::Query(query)).await?;
                        self.run_plan(plan).await?
                    }
                    CopySource::Table {
                        table_name,
                        columns,
                    } => {
                        let def = self.resolve_table(&table_name)?;
                        let state = self
                            .snapshot()
                            .tables
                            .get(&def.id)
                            .cloned()
                            .ok_or_else(|| ServerError::UndefinedTable(def.name.clone()))?;
                        let user: Vec<usize> = if columns.is_empty() {
                            (0..def.columns.len()).collect()
                        } else {
                            columns
                                .iter()
                                .map(|c| {
                                    let name = normalize_ident(c);
                                    def.columns
                                        .iter()
                                        .position(|d| d.name == name)
                                        .ok_or(ServerError::UndefinedColumn(name))
                                })
                                .collect::<Result<_, _>>()?
                        };
                        let batches = state
                            .scan()?
                            .iter()
                            .map(|b| b.project(&user))
                            .collect::<Result<Vec<_>, _>>()?;
                        let schema = std::sync::Arc::new(def.physical_schema().project(&user)?);
                        (schema, batches)
                    }
                };
                let (schema, batches) = self.in_session_time_zone(schema, batches)?;
                Ok(StatementResult::CopyOut {
                    options,
                    schema,
                    batches,
                })
            }
            (_, CopyTarget::File { .. } | CopyTarget::Program { .. }) => {
                Err(ServerError::feature_not_supported(
                    "COPY to or from a server file or program (use STDIN/STDOUT, e.g. psql's \\copy)",
                ))
            }
            (to, target) => Err(ServerError::feature_not_supported(format!(
                "COPY {} {target}",
                if to { "TO" } else { "FROM" }
            ))),
        }
    }

    /// Loads the data of a `COPY ... FROM STDIN` (all CopyData concatenated).
    pub async fn copy_in(
        &mut self,
        target: &CopyInTarget,
        data: bytes::Bytes,
    ) -> Result<StatementResult, ServerError> {
        self.db.metrics().query("copy");
        let implicit = self.open_implicit()?;
        let result = (|| {
            let name = datafusion::sql::sqlparser::ast::ObjectName::from(
                target
                    .table
                    .split('.')
                    .map(|part| datafusion::sql::sqlparser::ast::Ident::with_quote('"', part))
                    .collect::<Vec<_>>(),
            );
            let def = self.resolve_table(&name)?;
            let mut provided: HashMap<String, ArrayRef> = HashMap::new();
            if target.options.format == CopyFormat::Binary {
                let fields: Vec<_> = target
                    .schema
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone())
                    .collect();
                let arrays = crate::pgwire::copy_binary::decode_binary_copy(&data, &fields)?;
                let count = arrays.first().map_or(0, |a| a.len());
                provided.extend(target.columns.iter().cloned().zip(arrays));
                let batch = self.complete_columns(&def, provided, count)?;
                let written =
                    self.insert_rows(&def, batch, Conflict::Error, &def.name.clone(), None)?;
                return Ok(command(&format!("COPY {}", written.num_rows())));
            }
            let rows =
                weir_pgsem::copy_format::decode_copy(&data, &target.options, target.columns.len())?;
            let datetime = self.datetime_context();
            for (i, name) in target.columns.iter().enumerate() {
                let column = def
                    .columns
                    .iter()
                    .find(|c| &c.name == name)
                    .ok_or_else(|| ServerError::UndefinedColumn(name.clone()))?;
                let text = StringArray::from_iter(rows.iter().map(|r| r[i].as_deref()));
                let array =
                    weir_pgsem::text_input::parse_column(&text, &column.sql_type, &datetime)
                        .map_err(|e| {
                            e.in_context(format!("COPY {}, column {}", def.name, column.name))
                        })?;
                provided.insert(name.clone(), array);
            }
            let batch = self.complete_columns(&def, provided, rows.len())?;
            let written =
                self.insert_rows(&def, batch, Conflict::Error, &def.name.clone(), None)?;
            Ok(command(&format!("COPY {}", written.num_rows())))
        })();
        self.close_implicit(implicit, result).await
    }
}
