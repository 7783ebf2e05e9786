//! weir-sqllogictest: runs `.slt` files against a live `weir` server over pgwire.
//!
//! The test files live in `sqllogictest/tests/` (one topic per file, each creating
//! and dropping its own uniquely named objects, so every file can share one server).
//!
//! Main pieces:
//!
//! * [`WeirDb`] implements [`sqllogictest::AsyncDB`] over `tokio-postgres` with the
//!   **simple** query protocol, so every value is compared exactly as the server
//!   renders it as text. `NULL` is written `NULL` and the empty string `(empty)`.
//!   Every column is reported as [`DefaultColumnType::Any`]: the type letters in a
//!   `query ITR` header are documentation, not checked.
//! * Errors display as `db error: {SQLSTATE}: {message}` and also report their
//!   SQLSTATE to the runner, so a file can say either `statement error 42P01`
//!   (a regex over the message) or `statement error (42P01)` (the SQLSTATE alone).
//! * [`run_files`] runs files one after another on a fresh connection each, going on
//!   past failed records and returning every failure; the integration test
//!   `server/tests/it/slt.rs` and the `weir-slt` binary both use it.
//! * [`override_files`] rewrites expected results from the server's actual output
//!   (`weir-slt --override`), for a deliberate change. Read the diff afterwards:
//!   the files hold PostgreSQL's answers, not whatever the server said.
//!
//! Data enters as SQL text from the files and leaves as a pass/fail report; nothing
//! here knows Weir internals, so the same files can be run against PostgreSQL to
//! check an expectation (`weir-slt --port 5432 file.slt`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Record, RecordOutput};
use tokio_postgres::{NoTls, SimpleQueryMessage};

/// How long one record may run before it fails with a timeout; a server that hangs
/// then fails the test instead of hanging CI.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The start of the message of a statement that timed out.
const TIMEOUT_MARKER: &str = "no answer within";

/// Where and as whom to connect.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub dbname: String,
    pub password: Option<String>,
    pub statement_timeout: Duration,
    /// The engine name records can test with `onlyif`/`skipif`: `weir` by default,
    /// `postgres` when checking the files' expectations against PostgreSQL.
    pub engine: String,
}

impl ConnectOptions {
    /// The defaults of a fresh `weir serve`: user `weir`, database `weir`, trust auth.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Self {
            host: host.into(),
            port,
            user: "weir".into(),
            dbname: "weir".into(),
            password: None,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            engine: "weir".into(),
        }
    }

    fn pg_config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .application_name("weir-sqllogictest")
            .connect_timeout(Duration::from_secs(30));
        if let Some(password) = &self.password {
            config.password(password);
        }
        config
    }
}

/// An error as the `.slt` files see it.
#[derive(Debug, Clone)]
pub struct WeirError {
    /// The SQLSTATE the server sent, `None` for client-side failures
    /// (connection lost, timeout).
    pub sqlstate: Option<String>,
    pub message: String,
}

impl fmt::Display for WeirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sqlstate {
            Some(code) => write!(f, "db error: {code}: {}", self.message),
            None => write!(f, "client error: {}", self.message),
        }
    }
}

impl std::error::Error for WeirError {}

impl From<tokio_postgres::Error> for WeirError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            Some(db) => WeirError {
                sqlstate: Some(db.code().code().to_string()),
                message: db.message().to_string(),
            },
            None => WeirError {
                sqlstate: None,
                // The Display of a non-db error omits its source; keep both.
                message: match std::error::Error::source(&e) {
                    Some(source) => format!("{e}: {source}"),
                    None => e.to_string(),
                },
            },
        }
    }
}

/// One pgwire session used by the sqllogictest runner.
pub struct WeirDb {
    client: tokio_postgres::Client,
    connection: tokio::task::JoinHandle<()>,
    options: ConnectOptions,
}

impl WeirDb {
    /// Connects and spawns the connection task on the current tokio runtime.
    pub async fn connect(options: &ConnectOptions) -> Result<Self, WeirError> {
        let (client, connection) = options.pg_config().connect(NoTls).await?;
        let connection = tokio::spawn(async move {
            // The error (if any) surfaces on the next query as "connection closed".
            let _ = connection.await;
        });
        Ok(Self {
            client,
            connection,
            options: options.clone(),
        })
    }

    /// The underlying client, for checks the `.slt` format cannot express.
    pub fn client(&self) -> &tokio_postgres::Client {
        &self.client
    }
}

impl Drop for WeirDb {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// Renders one text value the way `.slt` files spell it.
pub fn render_value(value: Option<&str>) -> String {
    match value {
        None => "NULL".to_string(),
        Some("") => "(empty)".to_string(),
        Some(text) => text.to_string(),
    }
}

/// Turns the messages of one simple-query round trip into the runner's output:
/// the rows of every result set (a multi-statement string's result sets are
/// concatenated), or, when no statement returned rows, the count of the last one.
pub fn to_output(messages: Vec<SimpleQueryMessage>) -> DBOutput<DefaultColumnType> {
    let mut columns: Option<usize> = None;
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut last_count = 0;
    for message in messages {
        match message {
            SimpleQueryMessage::RowDescription(description) => {
                columns.get_or_insert(description.len());
            }
            SimpleQueryMessage::Row(row) => {
                columns.get_or_insert(row.len());
                rows.push((0..row.len()).map(|i| render_value(row.get(i))).collect());
            }
            SimpleQueryMessage::CommandComplete(count) => last_count = count,
            _ => {}
        }
    }
    match columns {
        Some(n) => DBOutput::Rows {
            types: vec![DefaultColumnType::Any; n],
            rows,
        },
        None => DBOutput::StatementComplete(last_count),
    }
}

#[async_trait]
impl AsyncDB for WeirDb {
    type Error = WeirError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<Self::ColumnType>, Self::Error> {
        if self.client.is_closed() {
            // The server dropped the session (a crash of that connection is reported
            // on the record that caused it); go on with a fresh session so the rest
            // of the file is still checked.
            *self = WeirDb::connect(&self.options).await?;
        }
        let timeout = self.options.statement_timeout;
        match tokio::time::timeout(timeout, self.client.simple_query(sql)).await {
            Ok(result) => Ok(to_output(result?)),
            Err(_) => {
                // The statement may still be running: ask the server to stop it so the
                // next record does not queue behind it.
                let _ = self.client.cancel_token().cancel_query(NoTls).await;
                Err(WeirError {
                    sqlstate: None,
                    message: format!("{TIMEOUT_MARKER} {timeout:?}"),
                })
            }
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        &self.options.engine
    }

    async fn sleep(dur: Duration) {
        tokio::time::sleep(dur).await;
    }

    async fn run_command(command: std::process::Command) -> std::io::Result<std::process::Output> {
        tokio::process::Command::from(command).output().await
    }

    fn error_sql_state(err: &Self::Error) -> Option<String> {
        err.sqlstate.clone()
    }
}

type WeirRunner = sqllogictest::Runner<
    WeirDb,
    Box<dyn FnMut() -> futures::future::BoxFuture<'static, Result<WeirDb, WeirError>> + Send>,
>;

fn runner(options: &ConnectOptions) -> WeirRunner {
    let options = options.clone();
    let make: Box<
        dyn FnMut() -> futures::future::BoxFuture<'static, Result<WeirDb, WeirError>> + Send,
    > = Box::new(move || {
        let options = options.clone();
        Box::pin(async move { WeirDb::connect(&options).await })
    });
    sqllogictest::Runner::new(make)
}

/// The outcome of one `.slt` file.
#[derive(Debug, Clone)]
pub struct FileReport {
    pub file: PathBuf,
    /// Statements and queries that ran and matched.
    pub passed: usize,
    /// One rendered failure per record that did not match (with its line).
    pub failures: Vec<String>,
}

impl FileReport {
    pub fn ok(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Runs every record of one file on its own connection(s), going on after a
/// failed record so one report shows every mismatch of the file.
pub async fn run_file(options: &ConnectOptions, file: &Path) -> FileReport {
    let mut report = FileReport {
        file: file.to_path_buf(),
        passed: 0,
        failures: Vec::new(),
    };
    let records = match sqllogictest::parse_file::<DefaultColumnType>(file) {
        Ok(records) => records,
        Err(e) => {
            report.failures.push(format!("cannot parse: {e}"));
            return report;
        }
    };
    let mut runner = runner(options);
    for record in records {
        if matches!(record, Record::Halt { .. }) {
            break;
        }
        let counts = matches!(record, Record::Statement { .. } | Record::Query { .. });
        match runner.run_async(record).await {
            // Records skipped by onlyif/skipif produce Nothing and are not counted.
            Ok(RecordOutput::Nothing) => {}
            Ok(_) if counts => report.passed += 1,
            Ok(_) => {}
            Err(e) => {
                let text = e.display(false).to_string();
                let timed_out = text.contains(TIMEOUT_MARKER);
                report.failures.push(truncate(text, MAX_FAILURE_CHARS));
                if timed_out {
                    // A hung server would make every later record wait as long: stop here.
                    report
                        .failures
                        .push("(rest of the file skipped after a timeout)".to_string());
                    break;
                }
            }
        }
    }
    runner.shutdown_async().await;
    report
}

/// A failure longer than this is cut (a `SHOW ALL` mismatch prints every row).
const MAX_FAILURE_CHARS: usize = 4000;

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let rest = text.len() - cut;
        text.truncate(cut);
        text.push_str(&format!("\n... ({rest} more bytes)"));
    }
    text
}

/// Renders reports as a summary: one line per file, then each failure in full.
pub fn summarize(reports: &[FileReport]) -> String {
    let mut out = String::new();
    for r in reports {
        let status = if r.ok() { "ok" } else { "FAILED" };
        out.push_str(&format!(
            "{status:6} {} ({} records passed, {} failed)\n",
            r.file.display(),
            r.passed,
            r.failures.len()
        ));
    }
    for r in reports.iter().filter(|r| !r.ok()) {
        out.push_str(&format!("\n==== {} ====\n", r.file.display()));
        for failure in &r.failures {
            out.push_str(failure.trim_end());
            out.push_str("\n\n");
        }
    }
    let passed = reports.iter().filter(|r| r.ok()).count();
    out.push_str(&format!(
        "{passed} passed, {} failed\n",
        reports.len() - passed
    ));
    out
}

/// Runs each file in turn against `host:port` as user `weir`, database `weir`.
/// `Ok(())` when every record of every file matched; otherwise the summary of
/// [`summarize`], naming every failing record.
pub async fn run_files(host: &str, port: u16, files: &[PathBuf]) -> Result<(), String> {
    let options = ConnectOptions::new(host, port);
    let mut reports = Vec::new();
    for file in files {
        reports.push(run_file(&options, file).await);
    }
    if reports.iter().all(FileReport::ok) {
        Ok(())
    } else {
        Err(summarize(&reports))
    }
}

/// Rewrites the expected output of each file from what the server returns.
pub async fn override_files(options: &ConnectOptions, files: &[PathBuf]) -> Result<(), String> {
    for file in files {
        let mut runner = runner(options);
        runner
            .update_test_file(
                file,
                " ",
                sqllogictest::default_validator,
                sqllogictest::default_normalizer,
                sqllogictest::default_column_validator,
            )
            .await
            .map_err(|e| format!("{}: {e}", file.display()))?;
        runner.shutdown_async().await;
    }
    Ok(())
}

/// The `.slt` files shipped in `sqllogictest/tests/`, sorted by name.
pub fn bundled_files() -> Vec<PathBuf> {
    let dir = bundled_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "slt"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// `sqllogictest/tests/` of the checkout being tested: found from the run-time
/// `CARGO_MANIFEST_DIR` (set by `cargo test`/`cargo run` to whichever crate
/// runs) or the current directory, walking up. The compile-time path is only
/// the last resort, because cargo may reuse an artifact built in another
/// checkout that shares the target dir.
fn bundled_dir() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok());
    start
        .iter()
        .flat_map(|dir| dir.ancestors())
        .map(|dir| dir.join("sqllogictest").join("tests"))
        .find(|candidate| candidate.is_dir())
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_and_empty_strings_have_their_own_spelling() {
        assert_eq!(render_value(None), "NULL");
        assert_eq!(render_value(Some("")), "(empty)");
        assert_eq!(render_value(Some("NULL")), "NULL");
        assert_eq!(render_value(Some(" x ")), " x ");
    }

    #[test]
    fn errors_put_the_sqlstate_where_a_regex_finds_it() {
        let e = WeirError {
            sqlstate: Some("42P01".into()),
            message: "table \"nope\" does not exist".into(),
        };
        assert_eq!(
            e.to_string(),
            "db error: 42P01: table \"nope\" does not exist"
        );
        assert_eq!(WeirDb::error_sql_state(&e).as_deref(), Some("42P01"));
    }

    #[test]
    fn statements_without_rows_report_their_count() {
        let out = to_output(vec![SimpleQueryMessage::CommandComplete(3)]);
        assert!(
            matches!(out, DBOutput::StatementComplete(3)),
            "expected StatementComplete(3)"
        );
    }

    #[test]
    fn long_failures_are_cut_on_a_char_boundary() {
        let cut = truncate("é".repeat(10), 5);
        assert_eq!(cut, "éé\n... (16 more bytes)");
        assert_eq!(truncate("short".into(), 10), "short");
    }

    #[test]
    fn bundled_files_are_found() {
        let names: Vec<String> = bundled_files()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for expected in ["ddl.slt", "dml.slt", "errors.slt", "types.slt"] {
            assert!(
                names.contains(&expected.to_string()),
                "{expected} missing from {names:?}"
            );
        }
    }
}
