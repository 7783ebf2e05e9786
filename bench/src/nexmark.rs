//! `weir-bench nexmark`: the Nexmark suite against a fresh `weir` server per
//! query.
//!
//! The SQL is `bench/nexmark/` (a byte-identical copy of the shared suite,
//! embedded at build time so the binary runs from anywhere). For each query:
//! start `weir serve` on a temporary data directory and free ports, create
//! the nexmark sources the query reads (each limited to the first `N` events
//! of the global stream, with a fixed event-time origin so runs compare), then
//! `CREATE SINK nexmark_qN AS <query> WITH (connector = 'blackhole')` and wait
//! until every source has completed and a `FLUSH` has pushed the last epoch
//! through. The clock and the server's CPU time run from just before CREATE
//! SINK to after that FLUSH; the generator runs inside the server, so its
//! cost is included, as the suite's rules ask.
//!
//! What is pure (event counts, which sources a query reads, the rewritten
//! source statements) is separate from the process and pgwire plumbing, so
//! it is unit tested without a server.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::server::{Server, cpu_seconds, peak_rss_bytes};

type BoxError = Box<dyn std::error::Error>;

/// The source definitions every query draws from.
pub(crate) const SOURCES_SQL: &str = include_str!("../nexmark/sources.sql");

/// The suite, in the order `--all` runs it (q6, q10, q11 and q13 are not
/// part of it, see bench/nexmark/README.md in the shared suite).
pub const QUERIES: &[(&str, &str)] = &[
    ("q0", include_str!("../nexmark/q0.sql")),
    ("q1", include_str!("../nexmark/q1.sql")),
    ("q2", include_str!("../nexmark/q2.sql")),
    ("q3", include_str!("../nexmark/q3.sql")),
    ("q4", include_str!("../nexmark/q4.sql")),
    ("q5", include_str!("../nexmark/q5.sql")),
    ("q7", include_str!("../nexmark/q7.sql")),
    ("q8", include_str!("../nexmark/q8.sql")),
    ("q9", include_str!("../nexmark/q9.sql")),
    ("q12", include_str!("../nexmark/q12.sql")),
    ("q14", include_str!("../nexmark/q14.sql")),
    ("q15", include_str!("../nexmark/q15.sql")),
    ("q16", include_str!("../nexmark/q16.sql")),
    ("q17", include_str!("../nexmark/q17.sql")),
    ("q18", include_str!("../nexmark/q18.sql")),
    ("q19", include_str!("../nexmark/q19.sql")),
    ("q20", include_str!("../nexmark/q20.sql")),
    ("q21", include_str!("../nexmark/q21.sql")),
    ("q22", include_str!("../nexmark/q22.sql")),
];

/// Event-time origin of every generated stream (ms since the Unix epoch):
/// fixed so two runs window the same events the same way.
pub const BASE_TIME_MS: u64 = 1_700_000_000_000;

/// How often the source and sink status is polled.
const POLL: Duration = Duration::from_millis(50);

pub struct Options {
    /// Query names (`q5`), in run order.
    pub queries: Vec<String>,
    /// Events of the global stream (all three types together).
    pub events: u64,
    pub json: Option<PathBuf>,
    pub weir: PathBuf,
    /// Passed to `weir serve --barrier-interval`.
    pub barrier_interval: String,
    /// Passed to `weir serve --workers` when set.
    pub workers: Option<u16>,
    /// Per query, from CREATE SINK until every source completed.
    pub timeout: Duration,
    /// The sources' `event_rate` when set.
    pub event_rate: Option<u64>,
    /// How often to read the operators' live state while a query runs
    /// (`weir_catalog.operator_state`, which walks it); `None`: never.
    pub state_sample: Option<Duration>,
}

/// The three event types of the generator and their place in its cycle of
/// 50 events: 1 person, then 3 auctions, then 46 bids (the `nexmark` crate's
/// default proportions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Person,
    Auction,
    Bid,
}

const CYCLE: u64 = 50;

impl Event {
    pub fn of_source(name: &str) -> Option<Self> {
        match name {
            "person" => Some(Self::Person),
            "auction" => Some(Self::Auction),
            "bid" => Some(Self::Bid),
            _ => None,
        }
    }

    /// (offset within the cycle, events per cycle).
    fn slot(self) -> (u64, u64) {
        match self {
            Self::Person => (0, 1),
            Self::Auction => (1, 3),
            Self::Bid => (4, 46),
        }
    }

    /// This type's events per second in a stream of `total_per_second`.
    pub fn share_of(self, total_per_second: u64) -> u64 {
        let (_, per_cycle) = self.slot();
        total_per_second * per_cycle / CYCLE
    }

    /// How many of the first `total` events of the global stream are of this type.
    pub fn count(self, total: u64) -> u64 {
        let (offset, per_cycle) = self.slot();
        (total / CYCLE) * per_cycle + (total % CYCLE).saturating_sub(offset).min(per_cycle)
    }
}

/// The `CREATE SOURCE` statements of `sources.sql`, by source name.
pub fn source_statements(sql: &str) -> Result<Vec<(String, String)>, String> {
    // No statement of the suite has a `;` inside a literal, so splitting on
    // it is exact for this file.
    sql.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|statement| {
            let words: Vec<&str> = statement.split_whitespace().take(3).collect();
            match words.as_slice() {
                [create, source, name]
                    if create.eq_ignore_ascii_case("create")
                        && source.eq_ignore_ascii_case("source") =>
                {
                    let name = name.split('(').next().unwrap_or(name).to_ascii_lowercase();
                    Ok((name, statement.to_string()))
                }
                _ => Err(format!("not a CREATE SOURCE statement: {statement}")),
            }
        })
        .collect()
}

/// `statement` with `max_events` and `base_time` added to its `WITH (...)`
/// list, which must close the statement.
pub fn with_limits(statement: &str, max_events: u64, base_time_ms: u64) -> Result<String, String> {
    with_options(
        statement,
        &[
            ("max_events", max_events.to_string()),
            ("base_time", base_time_ms.to_string()),
        ],
    )
}

/// `statement` with `options` added to its `WITH (...)` list, which must
/// close the statement.
pub fn with_options(statement: &str, options: &[(&str, String)]) -> Result<String, String> {
    let statement = statement.trim().trim_end_matches(';').trim_end();
    let upper = statement.to_ascii_uppercase();
    let with = upper
        .rfind("WITH")
        .filter(|&at| upper[at + 4..].trim_start().starts_with('('))
        .ok_or_else(|| format!("no WITH (...) clause in: {statement}"))?;
    if !statement.ends_with(')') {
        return Err(format!("the WITH (...) clause does not end: {statement}"));
    }
    let close = statement.len() - 1;
    debug_assert!(close > with);
    let added: Vec<String> = options
        .iter()
        .map(|(key, value)| format!("{key} = '{value}'"))
        .collect();
    Ok(format!(
        "{}, {})",
        statement[..close].trim_end(),
        added.join(", ")
    ))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// An identifier or keyword (lowercased unless quoted), or a number.
    Word(String),
    Punct(char),
    /// A string literal; its contents never name a relation.
    Literal,
}

fn tokenize(sql: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '\'' => {
                // '' inside a literal is an escaped quote: keep reading.
                loop {
                    match chars.next() {
                        None => break,
                        Some('\'') if chars.peek() == Some(&'\'') => {
                            chars.next();
                        }
                        Some('\'') => break,
                        Some(_) => {}
                    }
                }
                tokens.push(Token::Literal);
            }
            '"' => {
                let quoted: String = chars.by_ref().take_while(|&c| c != '"').collect();
                tokens.push(Token::Word(quoted));
            }
            c if c.is_alphanumeric() || c == '_' => {
                let mut word = c.to_lowercase().to_string();
                while let Some(&next) = chars.peek() {
                    if !(next.is_alphanumeric() || next == '_') {
                        break;
                    }
                    word.extend(next.to_lowercase());
                    chars.next();
                }
                tokens.push(Token::Word(word));
            }
            other => tokens.push(Token::Punct(other)),
        }
    }
    tokens
}

/// The relations a query reads: names right after FROM or JOIN, after a
/// comma of a FROM list, or as the first argument of TUMBLE(..)/HOP(..).
///
/// This reads the query text, which STYLE.md warns against for planning;
/// here it only decides which sources to create before the server plans
/// anything, and every query the suite ships is pinned by a test. Column
/// names that equal a source name (`bid.auction`, `SELECT auction, ...`) are
/// why a plain word search would not do.
pub fn relations_read(sql: &str) -> BTreeSet<String> {
    let tokens = tokenize(sql);
    let word = |i: usize| match tokens.get(i) {
        Some(Token::Word(w)) => Some(w.as_str()),
        _ => None,
    };
    let mut read = BTreeSet::new();
    // Per parenthesis depth: whether a FROM list is open there.
    let mut from_list = vec![false];
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::Word(w) => {
                let in_from = *from_list.last().expect("depth 0 stays");
                let reference = i > 0
                    && match &tokens[i - 1] {
                        Token::Word(prev) => prev == "from" || prev == "join",
                        Token::Punct(',') => in_from,
                        Token::Punct('(') => i > 1 && matches!(word(i - 2), Some("tumble" | "hop")),
                        _ => false,
                    };
                if reference {
                    read.insert(w.clone());
                }
                let open = from_list.last_mut().expect("depth 0 stays");
                match w.as_str() {
                    "from" => *open = true,
                    "where" | "group" | "having" | "order" | "limit" | "union" | "on"
                    | "window" | "select" => *open = false,
                    _ => {}
                }
            }
            Token::Punct('(') => from_list.push(false),
            Token::Punct(')') if from_list.len() > 1 => {
                from_list.pop();
            }
            _ => {}
        }
    }
    read
}

/// The query's text, without the trailing semicolon.
pub fn query_text(name: &str) -> Option<&'static str> {
    QUERIES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, sql)| sql.trim().trim_end_matches(';').trim_end())
}

/// What one query measured, or why it could not be measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub query: String,
    /// Whether CREATE SINK accepted the query; `None` when the run failed
    /// before it (the server did not start, a source was refused).
    pub supported: Option<bool>,
    /// Events of the types the query reads.
    pub events: u64,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub peak_rss_bytes: u64,
    pub state_bytes: i64,
    /// The largest live operator state read while it ran, in bytes.
    pub operator_state_peak: Option<i64>,
    pub epochs: i64,
    pub rows_out: i64,
    pub error: Option<String>,
}

impl Outcome {
    fn measured(&self) -> bool {
        self.supported == Some(true) && self.error.is_none()
    }

    fn events_per_s(&self) -> f64 {
        rate(self.events, self.wall_s)
    }

    fn events_per_core_s(&self) -> f64 {
        rate(self.events, self.cpu_s)
    }

    pub fn header() -> String {
        format!(
            "{:<6}{:>12}{:>9}{:>9}{:>12}{:>13}{:>10}{:>13}{:>13}{:>8}{:>12}",
            "query",
            "events",
            "wall s",
            "cpu s",
            "events/s",
            "ev/s/core",
            "RSS MB",
            "state bytes",
            "op state max",
            "epochs",
            "rows out"
        )
    }

    pub fn line(&self) -> String {
        let mut line = format!("{:<6}{:>12}", self.query, self.events);
        if self.supported == Some(false) {
            let _ = write!(
                line,
                "  not supported: {}",
                one_line(self.error.as_deref().unwrap_or("?"))
            );
        } else if let Some(error) = &self.error {
            let _ = write!(line, "  failed: {}", one_line(error));
        } else {
            let _ = write!(
                line,
                "{:>9.2}{:>9.2}{:>12.0}{:>13.0}{:>10.1}{:>13}{:>13}{:>8}{:>12}",
                self.wall_s,
                self.cpu_s,
                self.events_per_s(),
                self.events_per_core_s(),
                self.peak_rss_bytes as f64 / 1e6,
                self.state_bytes,
                self.operator_state_peak
                    .map_or_else(|| "-".to_string(), |b| b.to_string()),
                self.epochs,
                self.rows_out
            );
        }
        line
    }

    pub fn to_json(&self) -> serde_json::Value {
        let measured = self.measured();
        // Figures of a run that did not finish are not figures: null.
        let figure = |v: f64| if measured { json!(v) } else { json!(null) };
        json!({
            "query": self.query,
            "supported": self.supported,
            "events": self.events,
            "wall_s": figure(self.wall_s),
            "cpu_s": figure(self.cpu_s),
            "events_per_s": figure(self.events_per_s()),
            "events_per_core_s": figure(self.events_per_core_s()),
            "peak_rss_bytes": if measured { json!(self.peak_rss_bytes) } else { json!(null) },
            "state_bytes": if measured { json!(self.state_bytes) } else { json!(null) },
            "operator_state_peak_bytes": if measured { json!(self.operator_state_peak) } else { json!(null) },
            "epochs": if measured { json!(self.epochs) } else { json!(null) },
            "rows_out": if measured { json!(self.rows_out) } else { json!(null) },
            "error": self.error,
        })
    }
}

fn rate(n: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds
    } else {
        0.0
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub async fn run(o: &Options) -> Result<(), BoxError> {
    for name in &o.queries {
        if query_text(name).is_none() {
            let known: Vec<&str> = QUERIES.iter().map(|(n, _)| *n).collect();
            return Err(format!("unknown query {name}; the suite has {}", known.join(" ")).into());
        }
    }
    if !o.weir.is_file() {
        return Err(format!(
            "no weir binary at {}: build it with `cargo build --release --bin weir` \
             (it lands next to weir-bench) or pass --weir PATH",
            o.weir.display()
        )
        .into());
    }
    let sources = source_statements(SOURCES_SQL)?;
    println!(
        "nexmark: {} events per query, event rate {}, barrier interval {}, workers {}, server {}",
        o.events,
        o.event_rate
            .map_or_else(|| "(source default)".to_string(), |r| format!("{r}/s")),
        o.barrier_interval,
        o.workers
            .map_or_else(|| "(server default)".to_string(), |w| w.to_string()),
        o.weir.display()
    );
    println!("{}", Outcome::header());
    let mut outcomes = Vec::new();
    for name in &o.queries {
        let outcome = run_query(o, name, &sources).await;
        println!("{}", outcome.line());
        std::io::stdout().flush()?;
        outcomes.push(outcome);
        // Rewritten after every query, so an interrupted suite keeps what it measured.
        if let Some(path) = &o.json {
            let all: Vec<serde_json::Value> = outcomes.iter().map(Outcome::to_json).collect();
            std::fs::write(path, serde_json::to_string_pretty(&all)? + "\n")?;
        }
    }
    Ok(())
}

/// One query on its own server; never fails, the outcome says what went wrong.
async fn run_query(o: &Options, name: &str, sources: &[(String, String)]) -> Outcome {
    let query = query_text(name).expect("checked by run");
    let read: Vec<&(String, String)> = {
        let relations = relations_read(query);
        sources
            .iter()
            .filter(|(source, _)| relations.contains(source))
            .collect()
    };
    let mut outcome = Outcome {
        query: name.to_string(),
        events: read
            .iter()
            .filter_map(|(source, _)| Event::of_source(source))
            .map(|e| e.count(o.events))
            .sum(),
        ..Outcome::default()
    };
    let mut server = match Server::start(&o.weir, &o.barrier_interval, o.workers) {
        Ok(server) => server,
        Err(e) => {
            outcome.error = Some(format!("cannot start weir: {e}"));
            return outcome;
        }
    };
    if let Err(e) = measure(o, &mut server, name, query, &read, &mut outcome).await {
        outcome.error = Some(e.to_string());
    }
    if outcome.supported == Some(true) && outcome.error.is_some() {
        // A query that planned and then failed: the server's log says why.
        eprintln!(
            "{name}: last lines of the server log:\n{}",
            server.log_tail(20)
        );
    }
    server.stop();
    outcome
}

async fn measure(
    o: &Options,
    server: &mut Server,
    name: &str,
    query: &str,
    read: &[&(String, String)],
    outcome: &mut Outcome,
) -> Result<(), BoxError> {
    let client = server.wait_ready().await?;
    for (source, statement) in read {
        let mut statement = with_limits(statement, o.events, BASE_TIME_MS)?;
        if let Some(rate) = o.event_rate {
            statement = with_options(&statement, &[("event_rate", rate.to_string())])?;
        }
        client
            .batch_execute(&statement)
            .await
            .map_err(|e| format!("CREATE SOURCE {source}: {}", pg_error(&e)))?;
    }
    let pid = server.pid();
    let already = cell_i64(
        &client,
        "SELECT coalesce(sum(rows_in), 0)::bigint FROM weir_catalog.sources",
    )
    .await;
    if let Ok(n) = already
        && n > 0
    {
        // Sources that run before anything reads them would put part of the
        // work outside the measured window.
        eprintln!("{name}: warning: the sources produced {n} rows before CREATE SINK");
    }
    let cpu_before = cpu_seconds(pid)?;
    let started = Instant::now();
    let sink = format!("nexmark_{name}");
    if let Err(e) = client
        .batch_execute(&format!(
            "CREATE SINK {sink} AS {query} WITH (connector = 'blackhole')"
        ))
        .await
    {
        outcome.supported = Some(false);
        outcome.error = Some(pg_error(&e));
        return Ok(());
    }
    outcome.supported = Some(true);
    let names: BTreeSet<&str> = read.iter().map(|(source, _)| source.as_str()).collect();
    outcome.operator_state_peak = wait_for_sources(
        &client,
        &names,
        &sink,
        started + o.timeout,
        o.timeout,
        o.state_sample,
    )
    .await?;
    client
        .batch_execute("FLUSH")
        .await
        .map_err(|e| pg_error(&e))?;
    let sink_row = rows(
        &client,
        &format!("SELECT rows_out, status, error FROM weir_catalog.sinks WHERE name = '{sink}'"),
    )
    .await?;
    outcome.wall_s = started.elapsed().as_secs_f64();
    outcome.cpu_s = cpu_seconds(pid)? - cpu_before;
    let [rows_out, status, error] = sink_row
        .first()
        .and_then(|r| <[Option<String>; 3]>::try_from(r.clone()).ok())
        .ok_or_else(|| format!("no sink {sink} in weir_catalog.sinks"))?;
    if status.as_deref() == Some("failed") {
        return Err(format!("sink failed: {}", error.unwrap_or_default()).into());
    }
    outcome.rows_out = parse_i64(rows_out.as_deref())?;
    outcome.peak_rss_bytes = peak_rss_bytes(pid)?;
    outcome.state_bytes = cell_i64(
        &client,
        "SELECT coalesce(sum(snapshot_bytes + delta_bytes), 0)::bigint FROM weir_catalog.checkpoints",
    )
    .await?;
    outcome.epochs = cell_i64(
        &client,
        "SELECT coalesce(max(epoch), 0) FROM weir_catalog.epochs",
    )
    .await?;
    Ok(())
}

/// Polls until every source in `names` completed; a failed source or sink,
/// or the deadline, ends the wait with an error. Every `sample`, reads
/// the operators' live state; returns the largest read.
async fn wait_for_sources(
    client: &Client,
    names: &BTreeSet<&str>,
    sink: &str,
    deadline: Instant,
    timeout: Duration,
    sample: Option<Duration>,
) -> Result<Option<i64>, BoxError> {
    let mut peak: Option<i64> = None;
    let mut next_sample = Instant::now();
    loop {
        if let Some(every) = sample
            && Instant::now() >= next_sample
        {
            let bytes = cell_i64(
                client,
                "SELECT coalesce(sum(bytes), 0)::bigint FROM weir_catalog.operator_state",
            )
            .await?;
            peak = Some(peak.map_or(bytes, |p| p.max(bytes)));
            next_sample = Instant::now() + every;
        }
        let listed = rows(
            client,
            "SELECT name, status, error FROM weir_catalog.sources",
        )
        .await?;
        let mut pending = Vec::new();
        for name in names {
            match listed.iter().find(|r| r[0].as_deref() == Some(*name)) {
                None => pending.push(format!("{name}=missing")),
                Some(r) => match r[1].as_deref() {
                    Some("completed") => {}
                    Some("failed") => {
                        let error = r[2].clone().unwrap_or_default();
                        return Err(format!("source {name} failed: {error}").into());
                    }
                    status => pending.push(format!("{name}={}", status.unwrap_or("null"))),
                },
            }
        }
        if pending.is_empty() {
            return Ok(peak);
        }
        let sink_state = rows(
            client,
            &format!("SELECT status, error FROM weir_catalog.sinks WHERE name = '{sink}'"),
        )
        .await?;
        if let Some(r) = sink_state.first()
            && r[0].as_deref() == Some("failed")
        {
            let error = r[1].clone().unwrap_or_default();
            return Err(format!("sink failed: {error}").into());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "timed out after {} s waiting for the sources ({})",
                timeout.as_secs(),
                pending.join(", ")
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Rows of a simple-protocol query, every cell as text. Text, not typed
/// reads: the catalog's integer columns may come back as int8 or numeric
/// depending on the expression, and text reads both.
pub(crate) async fn rows(client: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, BoxError> {
    let messages = client
        .simple_query(sql)
        .await
        .map_err(|e| format!("{sql}: {}", pg_error(&e)))?;
    Ok(messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_string))
                    .collect(),
            ),
            _ => None,
        })
        .collect())
}

async fn cell_i64(client: &Client, sql: &str) -> Result<i64, BoxError> {
    let rows = rows(client, sql).await?;
    let cell = rows.first().and_then(|r| r.first()).cloned().flatten();
    parse_i64(cell.as_deref()).map_err(|e| format!("{sql}: {e}").into())
}

fn parse_i64(cell: Option<&str>) -> Result<i64, BoxError> {
    let text = cell.ok_or("NULL where a number was expected")?;
    // A numeric result may print as `123` or `123.0`.
    Ok(text
        .parse::<i64>()
        .or_else(|_| text.parse::<f64>().map(|f| f as i64))
        .map_err(|_| format!("not a number: {text}"))?)
}

/// The server's message (with its SQLSTATE) rather than tokio-postgres's
/// generic "db error".
pub(crate) fn pg_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

#[cfg(test)]
#[path = "nexmark_tests.rs"]
mod tests;
