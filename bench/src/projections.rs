//! `weir-bench projections`: how fast projections keep up with updates.
//!
//! A table of `rows` rows (`groups` distinct groups) sits under two
//! projections: a GROUP BY aggregate and a join with a dimension table
//! followed by an aggregate. The benchmark then
//! - updates `batch` rows per statement for `seconds`, then FLUSHes, and
//!   reports updated rows per second until everything is visible (and per
//!   server core-second when `--server-pid` lets it read the server's CPU
//!   time from /proc);
//! - measures epoch latency: one single-row UPDATE, then FLUSH, repeated;
//!   the time from the UPDATE's commit to FLUSH returning (p50, p99).

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::server::cpu_seconds as server_cpu_seconds;

pub struct Options {
    pub rows: u64,
    pub groups: u64,
    pub batch: u64,
    pub seconds: u64,
    pub latency_samples: usize,
    pub server_pid: Option<u32>,
}

pub async fn run(client: &Client, o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    setup(client, o).await?;

    let cpu_before = o.server_pid.map(server_cpu_seconds).transpose()?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(o.seconds);
    let mut updated = 0u64;
    let mut next = 0u64;
    while Instant::now() < deadline {
        let low = next % o.rows;
        let high = (low + o.batch).min(o.rows);
        let n = client
            .execute(
                "UPDATE bench_items SET v = v + 1 WHERE id >= $1 AND id < $2",
                &[&(low as i64), &(high as i64)],
            )
            .await?;
        updated += n;
        next = high;
    }
    client.batch_execute("FLUSH").await?;
    let elapsed = started.elapsed().as_secs_f64();
    let rate = updated as f64 / elapsed;
    println!(
        "updates under 2 projections: {updated} rows in {elapsed:.2}s = {rate:.0} rows/s ({} rows per UPDATE, {} rows, {} groups)",
        o.batch, o.rows, o.groups
    );
    if let (Some(pid), Some(before)) = (o.server_pid, cpu_before) {
        let cpu = server_cpu_seconds(pid)? - before;
        println!(
            "server CPU: {cpu:.2} core-seconds = {:.0} updated rows per core-second",
            updated as f64 / cpu
        );
    }
    check(client).await?;

    let mut latencies = Vec::with_capacity(o.latency_samples);
    for i in 0..o.latency_samples as i64 {
        let id = i % o.rows as i64;
        client
            .execute("UPDATE bench_items SET v = v + 1 WHERE id = $1", &[&id])
            .await?;
        let committed = Instant::now();
        client.batch_execute("FLUSH").await?;
        latencies.push(committed.elapsed());
    }
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "epoch latency (COMMIT to visible after FLUSH), {} samples: p50 {:?}, p99 {:?}, max {:?}",
        latencies.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
    Ok(())
}

async fn setup(client: &Client, o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    client
        .batch_execute(
            "DROP TABLE IF EXISTS bench_items CASCADE;
             DROP TABLE IF EXISTS bench_groups CASCADE;
             CREATE TABLE bench_items (id BIGINT PRIMARY KEY, grp BIGINT NOT NULL, v BIGINT NOT NULL);
             CREATE TABLE bench_groups (grp BIGINT PRIMARY KEY, name TEXT NOT NULL);",
        )
        .await?;
    client
        .batch_execute(&format!(
            "INSERT INTO bench_groups SELECT value, 'group ' || value FROM generate_series(0, {})",
            o.groups - 1
        ))
        .await?;
    let chunk = 50_000;
    for start in (0..o.rows).step_by(chunk as usize) {
        let end = (start + chunk).min(o.rows) - 1;
        client
            .batch_execute(&format!(
                "INSERT INTO bench_items SELECT value, value % {}, 0 FROM generate_series({start}, {end})",
                o.groups
            ))
            .await?;
    }
    let loaded = Instant::now();
    client
        .batch_execute(
            "CREATE PROJECTION bench_by_group AS
               SELECT grp, count(*) AS n, sum(v) AS total, max(v) AS top FROM bench_items GROUP BY grp;
             CREATE PROJECTION bench_by_name AS
               SELECT g.name, count(*) AS n, sum(i.v) AS total
               FROM bench_items i JOIN bench_groups g ON i.grp = g.grp GROUP BY g.name;",
        )
        .await?;
    println!(
        "backfilled 2 projections over {} rows in {:.2}s",
        o.rows,
        loaded.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The projections must equal their queries ad hoc, or the numbers mean nothing.
async fn check(client: &Client) -> Result<(), Box<dyn std::error::Error>> {
    let projected: i64 = client
        .query_one("SELECT sum(total)::BIGINT FROM bench_by_name", &[])
        .await?
        .get(0);
    let ad_hoc: i64 = client
        .query_one("SELECT sum(v)::BIGINT FROM bench_items", &[])
        .await?
        .get(0);
    if projected != ad_hoc {
        return Err(format!("projection total {projected} != table total {ad_hoc}").into());
    }
    Ok(())
}
