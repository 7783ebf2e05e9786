//! The contract between the front ends (pgwire, Flight SQL) and the SQL core.
//!
//! A front end owns one [`super::Session`] per client connection and calls
//! [`super::Session::execute_simple`] for simple-protocol query strings,
//! [`super::Session::prepare`] / [`super::Session::execute_prepared`] for the
//! extended protocol and Flight prepared statements. Results come back as
//! [`StatementResult`]s; errors as [`crate::error::ServerError`], which knows
//! its SQLSTATE.

use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
pub use weir_pgsem::copy_format::{CopyFormat, CopyOptions};

/// What one statement produced.
#[derive(Debug)]
pub enum StatementResult {
    /// Rows, fully computed. `schema` is the plan's output schema; batches
    /// share it.
    Rows {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    /// A command completed; `tag` is the PostgreSQL command tag
    /// (`INSERT 0 3`, `CREATE TABLE`, `BEGIN`, ...).
    Command { tag: String },
    /// The statement was empty or only comments.
    Empty,
    /// `COPY t FROM STDIN`: the front end must collect the client's data and
    /// hand it to [`super::Session::copy_in`].
    CopyIn(CopyInTarget),
    /// `COPY ... TO STDOUT`: the rows to send, already computed, with the
    /// format the client asked for.
    CopyOut {
        options: CopyOptions,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
}

/// Where a `COPY ... FROM STDIN` goes.
#[derive(Debug, Clone)]
pub struct CopyInTarget {
    pub table: String,
    /// The columns the data holds, in order (all table columns when the
    /// statement names none).
    pub columns: Vec<String>,
    /// The Arrow schema of those columns, for the front end's field count.
    pub schema: SchemaRef,
    pub options: CopyOptions,
}

/// A parsed and described statement, ready to bind and execute many times.
#[derive(Debug, Clone)]
pub struct PreparedStatement {
    /// The SQL text it came from.
    pub sql: String,
    /// Arrow types of `$1..$n`, in order, resolved from the client's hints
    /// or inferred from the plan (`Utf8` where nothing could be inferred).
    pub param_types: Vec<DataType>,
    /// The PostgreSQL type OID each parameter is described as when the client
    /// names none: the inferred type, with the `varchar`/`uuid`/`json`/`jsonb`
    /// tags that `param_types` alone cannot carry.
    pub param_oids: Vec<u32>,
    /// The row schema it returns, or `None` for statements without rows.
    pub result_schema: Option<SchemaRef>,
    pub(crate) inner: Arc<super::prepared::PreparedInner>,
}
