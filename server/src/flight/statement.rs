//! Ad-hoc statements and prepared statements.
//!
//! Queries take two calls. `GetFlightInfo` prepares the statement to learn the
//! plan's result schema and returns it with a ticket; `DoGet` executes and
//! streams. Statements that return no rows are executed during
//! `GetFlightInfo` instead, answered with an empty schema, no endpoints and
//! the affected row count as `total_records`: clients such as ADBC send DDL
//! and DML through the query path and fetch endpoints in the background, so
//! executing on `DoGet` would leave the statement running (or cancelled)
//! after the client's `execute` returned.
//!
//! A string of several statements cannot be prepared: its `GetFlightInfo`
//! carries no schema, and `DoGet` runs it and streams the rows of its last
//! row-returning statement (clients read the schema from that stream).
//!
//! Updates (`DoPut` with `CommandStatementUpdate` or
//! `CommandPreparedStatementUpdate`) execute immediately and return the
//! affected row count. A prepared update bound to several parameter rows
//! executes once per row and returns the sum.

use arrow::datatypes::SchemaRef;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, CommandPreparedStatementQuery,
    CommandPreparedStatementUpdate, CommandStatementQuery, CommandStatementUpdate,
    DoPutPreparedStatementResult, TicketStatementQuery,
};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo};
use bytes::Bytes;
use tonic::{Response, Status};

use super::encode::{
    DoGetStream, Outcome, any_ticket, batches_response, collect_batches, empty_schema, flight_info,
    schema_bytes,
};
use super::prepared::{Bound, ExecTicket, bind_batch, param_rows, parameter_schema};
use super::service::WeirFlightSql;
use super::status::{bad_request, to_status, unsupported};
use crate::session::{PreparedStatement, Session};

/// Rejects requests that name a transaction: Flight SQL transactions are not
/// offered (every statement autocommits).
fn no_transaction(transaction_id: Option<&Bytes>) -> Result<(), Status> {
    match transaction_id {
        Some(_) => Err(unsupported(
            "Flight SQL transactions (statements autocommit)",
        )),
        None => Ok(()),
    }
}

/// Whether `sql` holds several statements. Scripts cannot be prepared, so
/// their result schema is unknown until they run.
fn is_script(sql: &str) -> bool {
    weir_planner::parse_sql(sql).is_ok_and(|statements| statements.len() > 1)
}

fn sql_from_ticket(ticket: &TicketStatementQuery) -> Result<&str, Status> {
    std::str::from_utf8(&ticket.statement_handle)
        .map_err(|_| bad_request("statement ticket is not UTF-8 SQL"))
}

impl WeirFlightSql {
    /// `GetFlightInfo(CommandStatementQuery)`.
    pub(crate) async fn statement_flight_info(
        &self,
        query: CommandStatementQuery,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        no_transaction(query.transaction_id.as_ref())?;
        if is_script(&query.query) {
            // No schema: clients fetch the endpoint to learn it, which runs
            // the script before their `execute` returns.
            let ticket = TicketStatementQuery {
                statement_handle: Bytes::from(query.query.into_bytes()),
            };
            return Ok(FlightInfo::new()
                .with_descriptor(descriptor)
                .with_endpoint(FlightEndpoint::new().with_ticket(any_ticket(&ticket))));
        }
        let mut session = self.session();
        let stmt = session
            .prepare(&query.query, &[])
            .await
            .map_err(to_status)?;
        match stmt.result_schema {
            Some(schema) => {
                let ticket = TicketStatementQuery {
                    statement_handle: Bytes::from(query.query.into_bytes()),
                };
                flight_info(&schema, Some(any_ticket(&ticket)), descriptor)
            }
            None => {
                let outcome = Outcome::from_simple(session.execute_simple(&query.query).await)?;
                Ok(flight_info(&empty_schema(), None, descriptor)?
                    .with_total_records(outcome.count))
            }
        }
    }

    /// `DoGet(TicketStatementQuery)`: runs the SQL in the ticket and streams
    /// the rows of its last row-returning statement.
    pub(crate) async fn statement_do_get(
        &self,
        ticket: TicketStatementQuery,
    ) -> Result<Response<DoGetStream>, Status> {
        let sql = sql_from_ticket(&ticket)?;
        let mut session = self.session();
        let outcome = Outcome::from_simple(session.execute_simple(sql).await)?;
        Ok(rows_response(outcome, None))
    }

    /// `DoPut(CommandStatementUpdate)`: the affected row count.
    pub(crate) async fn statement_update(
        &self,
        cmd: CommandStatementUpdate,
    ) -> Result<i64, Status> {
        no_transaction(cmd.transaction_id.as_ref())?;
        let mut session = self.session();
        let outcome = Outcome::from_simple(session.execute_simple(&cmd.query).await)?;
        Ok(outcome.count)
    }

    /// `DoAction(CreatePreparedStatement)`.
    pub(crate) async fn create_prepared(
        &self,
        req: ActionCreatePreparedStatementRequest,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        no_transaction(req.transaction_id.as_ref())?;
        if is_script(&req.query) {
            // Unimplemented makes ADBC fall back to a plain statement.
            return Err(unsupported(
                "preparing a string of several statements (send it as a plain statement)",
            ));
        }
        let mut session = self.session();
        let stmt = session.prepare(&req.query, &[]).await.map_err(to_status)?;
        let dataset_schema = match &stmt.result_schema {
            Some(schema) => schema_bytes(schema)?,
            None => schema_bytes(&empty_schema())?,
        };
        let parameter_schema = schema_bytes(&parameter_schema(&stmt.param_types))?;
        let handle = self.prepared.insert(stmt);
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle,
            dataset_schema,
            parameter_schema,
        })
    }

    /// `DoAction(ClosePreparedStatement)`; idempotent.
    pub(crate) fn close_prepared(&self, req: ActionClosePreparedStatementRequest) {
        self.prepared.remove(&req.prepared_statement_handle);
    }

    /// `DoPut(CommandPreparedStatementQuery)`: binds parameters (one row per
    /// execution) for the following `GetFlightInfo`.
    pub(crate) async fn bind_prepared(
        &self,
        cmd: CommandPreparedStatementQuery,
        stream: PeekableFlightDataStream,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let handle = cmd.prepared_statement_handle;
        let bound = self.prepared.get(&handle)?;
        let (schema, batches) = collect_batches(stream).await?;
        let params = bind_batch(schema, &batches, &bound.stmt.param_types)?;
        self.prepared.bind(&handle, params)?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(handle),
        })
    }

    /// `GetFlightInfo(CommandPreparedStatementQuery)`.
    pub(crate) async fn prepared_flight_info(
        &self,
        cmd: CommandPreparedStatementQuery,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        let ticket = ExecTicket::decode(&cmd.prepared_statement_handle)?;
        let Bound { stmt, params } = self.prepared.get(&ticket.handle)?;
        let params = ticket.params.or(params);
        match &stmt.result_schema {
            Some(schema) => {
                let exec = ExecTicket {
                    handle: ticket.handle,
                    params,
                };
                let cmd = CommandPreparedStatementQuery {
                    prepared_statement_handle: exec.encode()?,
                };
                flight_info(schema, Some(any_ticket(&cmd)), descriptor)
            }
            None => {
                let mut session = self.session();
                let outcome = execute_bound(&mut session, &stmt, params.as_ref()).await?;
                Ok(flight_info(&empty_schema(), None, descriptor)?
                    .with_total_records(outcome.count))
            }
        }
    }

    /// `DoGet(CommandPreparedStatementQuery)`: executes with the parameters
    /// snapshotted in the ticket (or currently bound, for a bare handle).
    pub(crate) async fn prepared_do_get(
        &self,
        cmd: CommandPreparedStatementQuery,
    ) -> Result<Response<DoGetStream>, Status> {
        let ticket = ExecTicket::decode(&cmd.prepared_statement_handle)?;
        let Bound { stmt, params } = self.prepared.get(&ticket.handle)?;
        let params = ticket.params.or(params);
        let mut session = self.session();
        let outcome = execute_bound(&mut session, &stmt, params.as_ref()).await?;
        Ok(rows_response(outcome, stmt.result_schema.clone()))
    }

    /// `DoPut(CommandPreparedStatementUpdate)`: executes once per parameter
    /// row sent with the request (or with the parameters bound earlier).
    pub(crate) async fn prepared_update(
        &self,
        cmd: CommandPreparedStatementUpdate,
        stream: PeekableFlightDataStream,
    ) -> Result<i64, Status> {
        let Bound { stmt, params } = self.prepared.get(&cmd.prepared_statement_handle)?;
        let (schema, batches) = collect_batches(stream).await?;
        let sent_columns = batches
            .first()
            .map(|b| b.num_columns())
            .or(schema.as_ref().map(|s| s.fields().len()))
            .unwrap_or(0);
        let params = if sent_columns > 0 {
            Some(bind_batch(schema, &batches, &stmt.param_types)?)
        } else {
            params
        };
        let mut session = self.session();
        Ok(execute_bound(&mut session, &stmt, params.as_ref())
            .await?
            .count)
    }
}

/// Executes `stmt` once per parameter row and folds the results.
async fn execute_bound(
    session: &mut Session,
    stmt: &PreparedStatement,
    params: Option<&arrow::record_batch::RecordBatch>,
) -> Result<Outcome, Status> {
    let mut outcome = Outcome::new();
    for row in param_rows(params, &stmt.param_types)? {
        let result = session
            .execute_prepared(stmt, row)
            .await
            .map_err(to_status)?;
        outcome.add(result)?;
    }
    Ok(outcome)
}

/// The DoGet answer for `outcome`: its rows, or no rows with `fallback` (the
/// announced schema) or the empty schema.
fn rows_response(outcome: Outcome, fallback: Option<SchemaRef>) -> Response<DoGetStream> {
    match outcome.rows {
        Some((schema, batches)) => batches_response(schema, batches),
        None => batches_response(fallback.unwrap_or_else(empty_schema), Vec::new()),
    }
}
