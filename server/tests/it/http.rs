//! The HTTP operations port: `/health`, `/ready`, `/metrics` (Prometheus text).
//! A few lines of HTTP/1.1 over a TcpStream, so no HTTP client crate is needed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::harness::{WeirServer, eventually};

pub struct HttpResponse {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

/// `GET path` on 127.0.0.1:port with `Connection: close`.
pub fn http_get(port: u16, path: &str) -> std::io::Result<HttpResponse> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nAccept: */*\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no end of headers in {text:?}")))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line in {head:?}")))?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok(HttpResponse {
        status,
        headers: head.to_string(),
        body,
    })
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size_line, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("0").trim(), 16)
            .unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

/// The value of the first sample whose line starts with `series`
/// (a metric name, optionally with its `{labels}`).
pub fn metric_value(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn health_and_ready_answer_200() {
    let server = WeirServer::start();
    let health = http_get(server.http_port, "/health").expect("GET /health");
    assert_eq!(
        health.status, 200,
        "/health of a live server; body: {}",
        health.body
    );
    let ready = eventually_ready(&server);
    assert_eq!(ready, 200);
    let missing = http_get(server.http_port, "/no-such-page").expect("GET /no-such-page");
    assert_eq!(missing.status, 404, "an unknown path");
}

/// Polls /ready until 200 (a fresh server replays nothing, so this is quick).
pub fn eventually_ready(server: &WeirServer) -> u16 {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = http_get(server.http_port, "/ready")
            .map(|r| r.status)
            .unwrap_or(0);
        if status == 200 {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/ready did not answer 200 within 60 s (last status {status})\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_connections_queries_errors_and_rows() {
    let server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE http_t (id int4 PRIMARY KEY, v text)")
        .await
        .expect("CREATE TABLE");
    client
        .batch_execute("INSERT INTO http_t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        .await
        .expect("INSERT");
    client
        .simple_query("SELECT * FROM http_t")
        .await
        .expect("SELECT");
    let err = client
        .simple_query("SELECT * FROM http_no_such_table")
        .await
        .expect_err("unknown table");
    assert_eq!(crate::harness::sqlstate(&err), "42P01");

    let port = server.http_port;
    let metrics = eventually(
        Duration::from_secs(30),
        "metrics reflecting the queries",
        || async move {
            let r = http_get(port, "/metrics").ok()?;
            (r.status == 200
                && metric_value(&r.body, "weir_rows_written_total").unwrap_or(0.0) >= 3.0)
                .then_some(r)
        },
    )
    .await;
    let text = &metrics.body;
    assert!(
        metrics
            .headers
            .to_ascii_lowercase()
            .contains("content-type: text/plain"),
        "Prometheus text content type: {}",
        metrics.headers
    );
    let connections = metric_value(text, "weir_connections")
        .unwrap_or_else(|| panic!("weir_connections in:\n{text}"));
    assert!(
        connections >= 1.0,
        "weir_connections with one open session is {connections}:\n{text}"
    );
    assert!(
        text.contains("weir_queries_total{kind=\""),
        "weir_queries_total by kind in:\n{text}"
    );
    let statements = text
        .lines()
        .filter(|l| l.starts_with("weir_queries_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    assert!(
        statements >= 3.0,
        "CREATE, INSERT and SELECT ran, so weir_queries_total sums to at least 3, got {statements}:\n{text}"
    );
    let errors = metric_value(text, "weir_errors_total{sqlstate=\"42P01\"}")
        .unwrap_or_else(|| panic!("weir_errors_total{{sqlstate=\"42P01\"}} in:\n{text}"));
    assert!(errors >= 1.0, "one 42P01 counted, got {errors}");
    let rows = metric_value(text, "weir_rows_written_total").expect("weir_rows_written_total");
    assert!(
        rows >= 3.0,
        "3 rows inserted, weir_rows_written_total = {rows}"
    );
    // The INSERT was acknowledged after its fsync.
    let syncs = metric_value(text, "weir_table_log_syncs_total")
        .unwrap_or_else(|| panic!("weir_table_log_syncs_total in:\n{text}"));
    assert!(syncs >= 1.0, "an acknowledged INSERT was synced: {syncs}");
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let value = line.rsplit(' ').next().unwrap_or("");
        assert!(
            value.parse::<f64>().is_ok(),
            "a sample line ends with a number: {line:?}"
        );
    }
    drop(client);
}
