//! `weir-bench`: benchmarks against a running Weir server.
//!
//! `weir-bench serving --port 5488 --clients 8 --seconds 10` measures, over
//! pgwire with tokio-postgres:
//! - single-row autocommit INSERT throughput (each is an fsynced commit;
//!   group commit lets concurrent clients share fsyncs),
//! - batched INSERT throughput (1000 rows per statement),
//! - point SELECT by primary key with a prepared statement.
//!
//! `weir-bench projections --rows 100000` measures how fast projections keep
//! up with updates and the epoch latency (see [`projections`]).
//!
//! `weir-bench nexmark --query q5 --events 10000000` (or `--all`) starts its
//! own `weir` per query and measures the Nexmark suite (see [`nexmark`]);
//! with `--freshness`, the time from an event's creation until a read sees
//! it (see [`freshness`]).
//!
//! `weir-bench micro` measures engine operators in process, one thread, no
//! server (see [`micro`]).
//!
//! Results are printed as rates per second and per client. Run the server
//! with `--release` for meaningful numbers.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

mod freshness;
mod micro;
mod nexmark;
mod projections;
mod server;
use tokio_postgres::{Client, NoTls};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Write and point-read rates over pgwire.
    Serving {
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        #[arg(long, default_value_t = 5488)]
        port: u16,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value_t = 5)]
        seconds: u64,
    },
    /// Update throughput under a group-by and a join projection, and epoch latency.
    Projections {
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        #[arg(long, default_value_t = 5488)]
        port: u16,
        #[arg(long, default_value_t = 100_000)]
        rows: u64,
        #[arg(long, default_value_t = 1000)]
        groups: u64,
        /// Rows changed by each UPDATE.
        #[arg(long, default_value_t = 1000)]
        batch: u64,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        #[arg(long, default_value_t = 200)]
        latency_samples: usize,
        /// The server's process id, to report rows per server core-second.
        #[arg(long)]
        server_pid: Option<u32>,
    },
    /// The Nexmark suite, each query on a fresh `weir` started by the benchmark.
    Nexmark {
        /// Queries to run (`q5`, or `q0,q5`).
        #[arg(
            long,
            value_delimiter = ',',
            required_unless_present_any = ["all", "freshness"],
            conflicts_with = "all"
        )]
        query: Vec<String>,
        /// Instead of throughput: the time from an event's creation to its
        /// effect being visible in a read, with the sources paced to
        /// `--rate` and the queries (q5, q7 and q17 unless `--query` names
        /// others) as projections on one server.
        #[arg(long, conflicts_with = "all")]
        freshness: bool,
        /// With --freshness: events per second, all types together.
        #[arg(long, default_value_t = 100_000)]
        rate: u64,
        /// With --freshness: events created in the first seconds are left out.
        #[arg(long, default_value_t = 10)]
        warmup_s: u64,
        /// With --freshness: events created after this many seconds are left out.
        #[arg(long, default_value_t = 40)]
        seconds: u64,
        /// With --freshness: how often the visible epoch is probed.
        #[arg(long, default_value_t = 10)]
        probe_ms: u64,
        /// Runs q0 q1 q2 q3 q4 q5 q7 q8 q9 q12 q14 q15 q16 q17 q18 q19 q20 q21 q22.
        #[arg(long)]
        all: bool,
        /// Events of the generated stream (persons, auctions and bids together).
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Also writes the results as a JSON array here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// The weir binary; by default the `weir` next to this executable.
        #[arg(long)]
        weir: Option<PathBuf>,
        /// Passed to `weir serve --barrier-interval`.
        #[arg(long, default_value = "1s")]
        barrier_interval: String,
        /// Passed to `weir serve --workers`; by default the server's own
        /// default (the number of cores).
        #[arg(long)]
        workers: Option<u16>,
        /// Per query, from CREATE SINK until the sources completed.
        #[arg(long, default_value_t = 3600)]
        timeout_s: u64,
        /// The generator's event-time rate (the sources' `event_rate`:
        /// events per second of event time); by default the source's own
        /// (10 000 000, so 100 M events span 10 s of event time).
        #[arg(long)]
        event_rate: Option<u64>,
        /// Reads the operators' live state (`weir_catalog.operator_state`)
        /// every this many seconds while a query runs and reports the
        /// largest (the read walks that state, so it costs a little).
        #[arg(long)]
        state_sample_s: Option<u64>,
    },
    /// Engine operators in process, rows per second: single thread, or
    /// two for the `_2_workers` variants.
    Micro {
        /// Runs only the benchmarks whose name contains this.
        #[arg(long)]
        filter: Option<String>,
    },
}

async fn connect(host: &str, port: u16) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(
        &format!("host={host} port={port} user=weir dbname=weir"),
        NoTls,
    )
    .await?;
    tokio::spawn(connection);
    Ok(client)
}

type Work = fn(
    Arc<Client>,
    u64,
    usize,
) -> futures::future::BoxFuture<'static, Result<u64, tokio_postgres::Error>>;

/// Runs `work` from `clients` connections for `seconds`; returns units done per second.
async fn measure(
    host: &str,
    port: u16,
    clients: usize,
    seconds: u64,
    work: Work,
) -> Result<f64, Box<dyn std::error::Error>> {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let client = Arc::new(connect(host, port).await?);
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while Instant::now() < deadline {
                let n = work(client.clone(), i, c).await?;
                done.fetch_add(n, Ordering::Relaxed);
                i += 1;
            }
            Ok::<_, tokio_postgres::Error>(())
        }));
    }
    let started = Instant::now();
    for t in tasks {
        t.await??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    match Cli::parse().command {
        // In process and single threaded: no runtime threads beside it.
        Bench::Micro { filter } => micro::run(filter.as_deref()),
        command => tokio::runtime::Runtime::new()?.block_on(against_server(command)),
    }
}

async fn against_server(command: Bench) -> Result<(), Box<dyn std::error::Error>> {
    let (host, port, clients, seconds) = match command {
        Bench::Serving {
            host,
            port,
            clients,
            seconds,
        } => (host, port, clients, seconds),
        Bench::Projections {
            host,
            port,
            rows,
            groups,
            batch,
            seconds,
            latency_samples,
            server_pid,
        } => {
            let client = connect(&host, port).await?;
            let options = projections::Options {
                rows,
                groups,
                batch,
                seconds,
                latency_samples,
                server_pid,
            };
            return projections::run(&client, &options).await;
        }
        Bench::Nexmark {
            query,
            all,
            events,
            json,
            weir,
            barrier_interval,
            workers,
            timeout_s,
            event_rate,
            state_sample_s,
            freshness,
            rate,
            warmup_s,
            seconds,
            probe_ms,
        } => {
            let weir = match weir {
                Some(path) => path,
                None => std::env::current_exe()?
                    .parent()
                    .ok_or("weir-bench has no directory")?
                    .join("weir"),
            };
            if freshness {
                let queries = if query.is_empty() {
                    ["q5", "q7", "q17"].map(String::from).to_vec()
                } else {
                    query
                };
                let options = freshness::Options {
                    queries,
                    rate,
                    warmup: Duration::from_secs(warmup_s),
                    seconds: Duration::from_secs(seconds),
                    probe: Duration::from_millis(probe_ms.max(1)),
                    json,
                    weir,
                    barrier_interval,
                    workers,
                };
                return freshness::run(&options).await;
            }
            let queries = if all {
                nexmark::QUERIES
                    .iter()
                    .map(|(n, _)| n.to_string())
                    .collect()
            } else {
                query
            };
            let options = nexmark::Options {
                queries,
                events,
                json,
                weir,
                barrier_interval,
                workers,
                timeout: Duration::from_secs(timeout_s),
                event_rate,
                state_sample: state_sample_s.map(Duration::from_secs),
            };
            return nexmark::run(&options).await;
        }
        Bench::Micro { .. } => unreachable!("run without a runtime by main"),
    };
    let admin = connect(&host, port).await?;
    admin
        .batch_execute(
            "DROP TABLE IF EXISTS bench_rows; CREATE TABLE bench_rows (id BIGINT PRIMARY KEY, client INT, payload TEXT)",
        )
        .await?;

    let single = measure(&host, port, clients, seconds, |client, i, c| {
        Box::pin(async move {
            let id = (c as i64) << 40 | i as i64;
            client
                .execute(
                    "INSERT INTO bench_rows VALUES ($1, $2, 'x')",
                    &[&id, &(c as i32)],
                )
                .await?;
            Ok(1)
        })
    })
    .await?;
    println!(
        "single-row INSERT commits: {single:.0}/s ({:.0}/s per client, {clients} clients)",
        single / clients as f64
    );

    let batched = measure(&host, port, clients, seconds, |client, i, c| {
        Box::pin(async move {
            let base = (1i64 << 50) | ((c as i64) << 40) | (i as i64 * 1000);
            let sql = format!(
                "INSERT INTO bench_rows SELECT {base} + value, {c}, 'y' FROM generate_series(0, 999)"
            );
            client.batch_execute(&sql).await?;
            Ok(1000)
        })
    })
    .await?;
    println!("batched INSERT rows: {batched:.0}/s (1000 rows per statement)");

    let rows: i64 = admin
        .query_one("SELECT count(*) FROM bench_rows", &[])
        .await?
        .get(0);
    let reads = measure(&host, port, clients, seconds, |client, i, c| {
        Box::pin(async move {
            let statement = client
                .prepare("SELECT payload FROM bench_rows WHERE id = $1")
                .await?;
            let id = (c as i64) << 40 | (i as i64 % 100);
            client.query(&statement, &[&id]).await?;
            Ok(1)
        })
    })
    .await?;
    println!("point SELECT (prepare + execute) over {rows} rows: {reads:.0}/s");
    Ok(())
}
