//! `weir-bench nexmark --freshness`: how long an event takes from its
//! creation until a read sees its effect, with the sources paced to a
//! fixed rate of wall clock.
//!
//! One server. The nexmark sources the queries read are each paced to
//! their share of `--rate` events per second (`rate_limit`: bids are 46 of
//! every 50 events), with event time advancing at the same rate
//! (`event_rate`), and the queries run as projections. Beside them, one
//! probe projection per source, `SELECT count(*) FROM <source>`: a
//! statement reads every projection from one epoch, so the probe's count is
//! how many of that source's events the epoch a read of the queries sees
//! covers. The probe is a global count, so it adds little to the server's
//! work.
//!
//! Two timelines are sampled every `--probe-ms`:
//! - acceptance, `weir_catalog.sources.rows_in`: the events the runtime
//!   has taken from each source;
//! - visibility, the probes' counts.
//!
//! An event's creation time is its slot in the paced schedule: the k-th
//! event of a source paced at r per second is due at `start + k / r`, with
//! `start` estimated from the acceptance samples as the least
//! `t - rows_in / r`. Measuring from the schedule rather than from
//! acceptance keeps in the figure the time an event waits behind a busy
//! runtime: a generator held back by backpressure stands for an upstream
//! queue that grows. An event's visibility time is the reply time of the
//! first probe whose count covers it, an upper bound off by at most one
//! probe interval. Only events created after `--warmup-s` and before
//! `--seconds` count.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_postgres::Client;

use crate::nexmark::{
    Event, SOURCES_SQL, pg_error, query_text, relations_read, rows, source_statements, with_options,
};
use crate::server::{Server, cpu_seconds};

type BoxError = Box<dyn std::error::Error>;

/// Events sampled per run for the percentiles, at most: every event's
/// latency follows from its step, so a stride loses nothing that matters.
const MAX_SAMPLES: u64 = 1_000_000;

pub struct Options {
    /// The queries run as projections (`q5`, `q7`, `q17` by default).
    pub queries: Vec<String>,
    /// Events per second of all types together.
    pub rate: u64,
    /// Events created before this many seconds are left out.
    pub warmup: Duration,
    /// Events created after this many seconds are left out.
    pub seconds: Duration,
    pub probe: Duration,
    pub json: Option<PathBuf>,
    pub weir: PathBuf,
    /// Passed to `weir serve --barrier-interval`.
    pub barrier_interval: String,
    pub workers: Option<u16>,
}

/// One source's paced stream and what was sampled of it.
struct Stream {
    name: String,
    /// Events per second of this source.
    rate: u64,
    /// (seconds since the bench's origin, rows the runtime accepted).
    accepted: Vec<(f64, u64)>,
    /// (reply time of a probe, events the epoch it read covers).
    visible: Vec<(f64, u64)>,
}

/// The latencies of one run: seconds per sampled event, and events of the
/// window that no probe saw before the run ended.
#[derive(Debug, Default, PartialEq)]
pub struct Latencies {
    pub seconds: Vec<f64>,
    pub unseen: u64,
}

/// When the schedule began: the least `t - accepted / rate` over the
/// samples that saw any event. A paced generator has accepted at most
/// `rate * (t - start)` events at `t`, and about that many just after a
/// batch, so the least bound is close.
pub fn schedule_start(accepted: &[(f64, u64)], rate: u64) -> Option<f64> {
    accepted
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(t, n)| t - *n as f64 / rate as f64)
        .min_by(f64::total_cmp)
}

/// Latency of the events (1-based, the k-th due at `start + k / rate`)
/// created inside `window`, every `stride`-th one, from the visibility
/// samples in time order.
pub fn latencies(
    visible: &[(f64, u64)],
    start: f64,
    rate: u64,
    window: (f64, f64),
    stride: u64,
) -> Latencies {
    let rate_f = rate as f64;
    let first = (((window.0 - start) * rate_f).ceil().max(1.0)) as u64;
    let last = ((window.1 - start) * rate_f).floor().max(0.0) as u64;
    let mut out = Latencies::default();
    if last < first {
        return out;
    }
    let stride = stride.max(1);
    let mut covered = 0u64;
    for &(at, count) in visible {
        if count <= covered {
            continue;
        }
        let from = (covered + 1).max(first);
        let to = count.min(last);
        // The first multiple of the stride at or after `from`, so every
        // step samples the same events whatever its bounds.
        let mut k = from.div_ceil(stride) * stride;
        while k <= to {
            out.seconds.push(at - (start + k as f64 / rate_f));
            k += stride;
        }
        covered = count;
    }
    let seen_to = covered.clamp(first - 1, last);
    out.unseen = last - seen_to;
    out
}

/// The `q`-quantile (0..=1) of sorted values, by the nearest-rank rule.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

/// `100ms`, `1s` or a number of milliseconds, as `weir serve` reads
/// `--barrier-interval`.
pub fn interval_seconds(text: &str) -> Option<f64> {
    let text = text.trim();
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.trim().parse::<f64>().ok().map(|v| v / 1000.0);
    }
    if let Some(s) = text.strip_suffix('s') {
        return s.trim().parse::<f64>().ok();
    }
    text.parse::<f64>().ok().map(|v| v / 1000.0)
}

pub async fn run(o: &Options) -> Result<(), BoxError> {
    for name in &o.queries {
        if query_text(name).is_none() {
            return Err(format!("unknown query {name}").into());
        }
    }
    if o.seconds <= o.warmup {
        return Err("--seconds must be more than --warmup-s".into());
    }
    let interval = interval_seconds(&o.barrier_interval)
        .ok_or_else(|| format!("cannot read barrier interval {}", o.barrier_interval))?;
    let mut server = Server::start(&o.weir, &o.barrier_interval, o.workers)?;
    let outcome = measure(o, &mut server, interval).await;
    if outcome.is_err() {
        eprintln!("last lines of the server log:\n{}", server.log_tail(20));
    }
    server.stop();
    outcome
}

async fn measure(o: &Options, server: &mut Server, interval: f64) -> Result<(), BoxError> {
    let client = server.wait_ready().await?;
    let read: BTreeSet<String> = o
        .queries
        .iter()
        .flat_map(|q| relations_read(query_text(q).expect("checked")))
        .collect();
    let base_time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis()
        .to_string();
    let mut streams = Vec::new();
    for (name, statement) in source_statements(SOURCES_SQL)? {
        let Some(event) = Event::of_source(&name).filter(|_| read.contains(&name)) else {
            continue;
        };
        let rate = event.share_of(o.rate);
        if rate == 0 {
            return Err(format!("--rate {} gives {name} no events per second", o.rate).into());
        }
        let statement = with_options(
            &statement,
            &[
                ("event_rate", o.rate.to_string()),
                ("rate_limit", rate.to_string()),
                ("base_time", base_time.clone()),
            ],
        )?;
        execute(&client, &statement).await?;
        streams.push(Stream {
            name,
            rate,
            accepted: Vec::new(),
            visible: Vec::new(),
        });
    }
    for query in &o.queries {
        let sql = query_text(query).expect("checked");
        execute(&client, &format!("CREATE PROJECTION {query} AS {sql}")).await?;
    }
    for stream in &streams {
        let name = &stream.name;
        execute(
            &client,
            &format!("CREATE PROJECTION freshness_{name} AS SELECT count(*) AS events FROM {name}"),
        )
        .await?;
    }
    let probe = format!(
        "SELECT {} FROM {}",
        streams
            .iter()
            .map(|s| format!("freshness_{}.events", s.name))
            .collect::<Vec<_>>()
            .join(", "),
        streams
            .iter()
            .map(|s| format!("freshness_{}", s.name))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "nexmark freshness: {} as projections, {} events/s ({}), barrier interval {}, workers {}",
        o.queries.join(", "),
        o.rate,
        streams
            .iter()
            .map(|s| format!("{} {}/s", s.name, s.rate))
            .collect::<Vec<_>>()
            .join(", "),
        o.barrier_interval,
        o.workers
            .map_or_else(|| "(server default)".to_string(), |w| w.to_string()),
    );

    let pid = server.pid();
    let origin = Instant::now();
    let (warmup, end) = (o.warmup.as_secs_f64(), o.seconds.as_secs_f64());
    // After the window closes, probes go on until its last events are
    // visible, for at most this long.
    let drain = (20.0 * interval).max(10.0);
    let mut cpu_window: (Option<f64>, Option<f64>) = (None, None);
    let mut next = origin;
    loop {
        let now = origin.elapsed().as_secs_f64();
        if now >= warmup && cpu_window.0.is_none() {
            cpu_window.0 = Some(cpu_seconds(pid)?);
        }
        if now >= end && cpu_window.1.is_none() {
            cpu_window.1 = Some(cpu_seconds(pid)?);
        }
        let asked = origin.elapsed().as_secs_f64();
        let sources = rows(&client, "SELECT name, rows_in FROM weir_catalog.sources").await?;
        let answered = origin.elapsed().as_secs_f64();
        for stream in &mut streams {
            let n = sources
                .iter()
                .find(|r| r[0].as_deref() == Some(stream.name.as_str()))
                .and_then(|r| r[1].as_deref()?.parse::<u64>().ok())
                .unwrap_or(0);
            stream.accepted.push(((asked + answered) / 2.0, n));
        }
        let counts = rows(&client, &probe).await?;
        let seen = origin.elapsed().as_secs_f64();
        if let Some(row) = counts.first() {
            for (stream, cell) in streams.iter_mut().zip(row) {
                let n = cell.as_deref().and_then(|c| c.parse().ok()).unwrap_or(0);
                stream.visible.push((seen, n));
            }
        }
        if now >= end {
            let done = streams.iter().all(|s| {
                let last = schedule_start(&s.accepted, s.rate)
                    .map_or(u64::MAX, |start| ((end - start) * s.rate as f64) as u64);
                s.visible.last().is_some_and(|&(_, n)| n >= last)
            });
            if done || now >= end + drain {
                break;
            }
        }
        next += o.probe;
        tokio::time::sleep_until(next.into()).await;
    }
    let cpu_s = match cpu_window {
        (Some(a), Some(b)) => b - a,
        _ => 0.0,
    };

    let mut all = Vec::new();
    let mut unseen = 0;
    let mut accepted_in_window = 0u64;
    for stream in &streams {
        let start = schedule_start(&stream.accepted, stream.rate)
            .ok_or_else(|| format!("source {} accepted no events", stream.name))?;
        let due = ((end - warmup) * stream.rate as f64) as u64;
        let stride = (due / MAX_SAMPLES).max(1);
        let measured = latencies(&stream.visible, start, stream.rate, (warmup, end), stride);
        unseen += measured.unseen;
        all.extend(measured.seconds);
        accepted_in_window += accepted_between(&stream.accepted, warmup, end);
    }
    all.sort_by(f64::total_cmp);
    let q = |p: f64| quantile(&all, p).map(|s| s * 1000.0);
    let (p50, p99, max) = (q(0.5), q(0.99), all.last().map(|s| s * 1000.0));
    let accepted_rate = accepted_in_window as f64 / (end - warmup);
    let cores = cpu_s / (end - warmup);
    let target_ms = 2.0 * interval * 1000.0;
    let met = unseen == 0 && p99.is_some_and(|p| p <= target_ms);
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.0}"));
    let due_rate: u64 = streams.iter().map(|s| s.rate).sum();
    println!(
        "events created {warmup:.0}..{end:.0} s: accepted {accepted_rate:.0}/s of {due_rate} due, {cores:.2} cores"
    );
    println!(
        "creation to visible in a read: p50 {} ms, p99 {} ms, max {} ms over {} sampled events; \
         {unseen} not visible when the run ended; target p99 <= {target_ms:.0} ms (two barrier intervals): {}",
        ms(p50),
        ms(p99),
        ms(max),
        all.len(),
        if met { "met" } else { "unmet" }
    );
    for query in &o.queries {
        let n = rows(&client, &format!("SELECT count(*) FROM {query}")).await?;
        let n = n.first().and_then(|r| r[0].clone()).unwrap_or_default();
        println!("  {query}: {n} rows");
    }
    if let Some(path) = &o.json {
        let report = json!({
            "queries": o.queries,
            "rate": o.rate,
            "barrier_interval": o.barrier_interval,
            "window_s": [warmup, end],
            "accepted_per_s": accepted_rate,
            "due_per_s": due_rate,
            "cores": cores,
            "p50_ms": p50,
            "p99_ms": p99,
            "max_ms": max,
            "sampled_events": all.len(),
            "unseen": unseen,
            "target_p99_ms": target_ms,
            "met": met,
        });
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")?;
    }
    Ok(())
}

/// Rows accepted between two times, from the samples around them.
fn accepted_between(samples: &[(f64, u64)], from: f64, to: f64) -> u64 {
    let at = |t: f64| {
        samples
            .iter()
            .take_while(|(s, _)| *s <= t)
            .last()
            .map_or(0, |(_, n)| *n)
    };
    at(to).saturating_sub(at(from))
}

async fn execute(client: &Client, sql: &str) -> Result<(), BoxError> {
    client
        .batch_execute(sql)
        .await
        .map_err(|e| format!("{sql}: {}", pg_error(&e)).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_starts_at_the_tightest_bound() {
        // 1000/s from t = 2: batches of 100 land at 2.1, 2.2, ...; samples
        // taken a little after each.
        let accepted = [(1.0, 0), (2.15, 100), (2.21, 200), (2.5, 400)];
        let start = schedule_start(&accepted, 1000).unwrap();
        assert!((start - 2.01).abs() < 1e-9, "{start}");
        assert_eq!(schedule_start(&[(1.0, 0)], 1000), None);
    }

    #[test]
    fn each_event_waits_until_the_first_probe_that_covers_it() {
        // 10 events/s from t = 0: event k is due at k/10.
        let visible = [(0.5, 0), (1.0, 5), (1.2, 5), (2.0, 15)];
        let all = latencies(&visible, 0.0, 10, (0.0, 10.0), 1);
        let expected: Vec<f64> = (1..=5)
            .map(|k| 1.0 - k as f64 / 10.0)
            .chain((6..=15).map(|k| 2.0 - k as f64 / 10.0))
            .collect();
        assert_eq!(all.seconds.len(), expected.len());
        for (got, want) in all.seconds.iter().zip(&expected) {
            assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        }
        // Events due up to t = 10 are 100; 15 were seen.
        assert_eq!(all.unseen, 85);
    }

    #[test]
    fn the_window_and_the_stride_pick_events() {
        let visible = [(3.0, 30)];
        // Due in 1..=2 s: events 10..=20; every 5th: 10, 15, 20.
        let some = latencies(&visible, 0.0, 10, (1.0, 2.0), 5);
        assert_eq!(some.seconds.len(), 3);
        assert!((some.seconds[0] - 2.0).abs() < 1e-9);
        assert!((some.seconds[2] - 1.0).abs() < 1e-9);
        assert_eq!(some.unseen, 0);
        // A count that goes back (it must not) is not counted twice.
        let twice = latencies(&[(3.0, 30), (4.0, 20), (5.0, 30)], 0.0, 10, (1.0, 2.0), 1);
        assert_eq!(twice.seconds.len(), 11);
        // Nothing seen: every event of the window is unseen.
        let none = latencies(&[], 0.0, 10, (1.0, 2.0), 1);
        assert_eq!(none.unseen, 11);
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&values, 0.5), Some(50.0));
        assert_eq!(quantile(&values, 0.99), Some(99.0));
        assert_eq!(quantile(&values, 1.0), Some(100.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn intervals_read_as_the_server_reads_them() {
        assert_eq!(interval_seconds("1s"), Some(1.0));
        assert_eq!(interval_seconds("100ms"), Some(0.1));
        assert_eq!(interval_seconds("250"), Some(0.25));
        assert_eq!(interval_seconds("soon"), None);
    }

    #[test]
    fn accepted_rows_between_two_times() {
        let samples = [(0.5, 10), (1.5, 100), (2.5, 250)];
        assert_eq!(accepted_between(&samples, 1.0, 3.0), 240);
        assert_eq!(accepted_between(&samples, 0.0, 2.0), 100);
    }
}
