//! Prometheus metrics served at `/metrics`.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

pub struct Metrics {
    registry: Registry,
    connections: Gauge,
    connections_total: Counter,
    queries: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    rows_written: Counter,
    commits: Counter,
    /// Group fsyncs of the table log, and the log's own count at the last
    /// look ([`Metrics::table_log_synced`]).
    table_log_syncs: Counter,
    table_log_syncs_seen: std::sync::atomic::AtomicU64,
    point_lookups: Counter,
    epochs: Counter,
    epoch_seconds: Histogram,
    operator_rows_in: Family<Labels, Counter>,
    operator_rows_out: Family<Labels, Counter>,
    operator_late_rows: Family<Labels, Counter>,
    /// Per source with a watermark: how far it is behind the wall clock.
    watermark_lag: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    late_rows: Family<Labels, Gauge>,
    checkpoints: Counter,
    checkpoint_failures: Counter,
    checkpoint_seconds: Histogram,
    checkpoint_bytes: Counter,
    restore_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("weir");
        let connections = Gauge::default();
        let connections_total = Counter::default();
        let queries = Family::<Labels, Counter>::default();
        let errors = Family::<Labels, Counter>::default();
        let rows_written = Counter::default();
        let commits = Counter::default();
        let point_lookups = Counter::default();
        let table_log_syncs = Counter::default();
        let epochs = Counter::default();
        let epoch_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let operator_rows_in = Family::<Labels, Counter>::default();
        let operator_rows_out = Family::<Labels, Counter>::default();
        let operator_late_rows = Family::<Labels, Counter>::default();
        let watermark_lag = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        let late_rows = Family::<Labels, Gauge>::default();
        registry.register(
            "operator_late_rows",
            "Rows each projection operator dropped as behind the watermark (projection id, node, operator)",
            operator_late_rows.clone(),
        );
        registry.register(
            "source_watermark_lag_seconds",
            "How far each source's watermark is behind the wall clock (source id)",
            watermark_lag.clone(),
        );
        registry.register(
            "source_late_rows",
            "Rows each source received behind its watermark since start (source id)",
            late_rows.clone(),
        );
        let checkpoints = Counter::default();
        let checkpoint_failures = Counter::default();
        let checkpoint_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let checkpoint_bytes = Counter::default();
        let restore_seconds = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "restore_duration_seconds",
            "Time the last start took to restore or rebuild every projection",
            restore_seconds.clone(),
        );
        registry.register(
            "point_lookups",
            "Prepared queries answered by a primary-key lookup, without planning",
            point_lookups.clone(),
        );
        registry.register(
            "checkpoints",
            "Epochs sealed in the state backend",
            checkpoints.clone(),
        );
        registry.register(
            "checkpoint_failures",
            "Checkpoints that failed (the next one is written in full)",
            checkpoint_failures.clone(),
        );
        registry.register(
            "checkpoint_duration_seconds",
            "Time to write an epoch's partials and seal it",
            checkpoint_seconds.clone(),
        );
        registry.register(
            "checkpoint_bytes",
            "Bytes of partial state written",
            checkpoint_bytes.clone(),
        );
        registry.register("epochs", "Epochs completed", epochs.clone());
        registry.register(
            "epoch_duration_seconds",
            "Time to step every projection through one epoch",
            epoch_seconds.clone(),
        );
        registry.register(
            "operator_rows_in",
            "Rows into each projection operator (projection id, node, operator)",
            operator_rows_in.clone(),
        );
        registry.register(
            "operator_rows_out",
            "Rows out of each projection operator (projection id, node, operator)",
            operator_rows_out.clone(),
        );
        registry.register(
            "connections",
            "Open client connections",
            connections.clone(),
        );
        registry.register(
            "connections_opened",
            "Client connections accepted since start",
            connections_total.clone(),
        );
        registry.register("queries", "Statements executed, by kind", queries.clone());
        registry.register("errors", "Statements failed, by SQLSTATE", errors.clone());
        registry.register(
            "rows_written",
            "Table rows inserted, updated or deleted",
            rows_written.clone(),
        );
        registry.register("commits", "Durable table-log commits", commits.clone());
        registry.register(
            "table_log_syncs",
            "Group fsyncs of the table log (fewer than commits when commits share one)",
            table_log_syncs.clone(),
        );
        Self {
            registry,
            connections,
            connections_total,
            queries,
            errors,
            rows_written,
            commits,
            table_log_syncs,
            table_log_syncs_seen: std::sync::atomic::AtomicU64::new(0),
            point_lookups,
            epochs,
            epoch_seconds,
            operator_rows_in,
            operator_rows_out,
            operator_late_rows,
            watermark_lag,
            late_rows,
            checkpoints,
            checkpoint_failures,
            checkpoint_seconds,
            checkpoint_bytes,
            restore_seconds,
        }
    }
}

impl Metrics {
    pub fn connection_opened(&self) {
        self.connections.inc();
        self.connections_total.inc();
    }

    pub fn connection_closed(&self) {
        self.connections.dec();
    }

    /// `kind` is a statement kind such as `select`, `insert`, `create_table`.
    pub fn query(&self, kind: &str) {
        self.queries
            .get_or_create(&vec![("kind", kind.to_string())])
            .inc();
    }

    pub fn error(&self, sqlstate: &str) {
        self.errors
            .get_or_create(&vec![("sqlstate", sqlstate.to_string())])
            .inc();
    }

    pub fn rows_written(&self, n: u64) {
        self.rows_written.inc_by(n);
    }

    pub fn commit(&self) {
        self.commits.inc();
    }

    pub fn point_lookup(&self) {
        self.point_lookups.inc();
    }

    fn record_epoch(&self, report: &weir_engine::coordinator::EpochReport) {
        self.epochs.inc();
        self.epoch_seconds.observe(report.duration.as_secs_f64());
        for (projection, nodes) in &report.operators {
            for (i, node) in nodes.iter().enumerate() {
                let labels = vec![
                    ("projection", projection.0.to_string()),
                    ("node", i.to_string()),
                    ("operator", node.operator.to_string()),
                ];
                self.operator_rows_in
                    .get_or_create(&labels)
                    .inc_by(node.rows_in);
                self.operator_rows_out
                    .get_or_create(&labels)
                    .inc_by(node.rows_out);
                if node.late_rows > 0 {
                    self.operator_late_rows
                        .get_or_create(&labels)
                        .inc_by(node.late_rows);
                }
            }
        }
    }

    /// Brings `weir_table_log_syncs_total` up to `syncs`, the table log's
    /// own running count. Concurrent callers add each sync once: only the
    /// one that raises the seen maximum adds the difference.
    pub fn table_log_synced(&self, syncs: u64) {
        let seen = self
            .table_log_syncs_seen
            .fetch_max(syncs, std::sync::atomic::Ordering::Relaxed);
        if syncs > seen {
            self.table_log_syncs.inc_by(syncs - seen);
        }
    }

    /// Sets each source's watermark gauges from its status (`watermark`
    /// in µs since the Unix epoch; a final one has no lag).
    pub fn source_watermarks(&self, sources: &[(u64, Option<i64>, u64)]) {
        let now_micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        for &(source, watermark, late) in sources {
            let labels = vec![("source", source.to_string())];
            if let Some(w) = watermark {
                let lag = if w == i64::MAX {
                    0.0
                } else {
                    (now_micros.saturating_sub(w)) as f64 / 1e6
                };
                self.watermark_lag.get_or_create(&labels).set(lag);
                self.late_rows.get_or_create(&labels).set(late as i64);
            }
        }
    }

    pub fn restored(&self, duration: std::time::Duration) {
        self.restore_seconds.set(duration.as_secs_f64());
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

impl weir_engine::runtime::RuntimeObserver for Metrics {
    fn epoch(&self, report: &weir_engine::coordinator::EpochReport) {
        self.record_epoch(report);
    }

    fn checkpoint(&self, took: std::time::Duration, bytes: u64) {
        self.checkpoints.inc();
        self.checkpoint_seconds.observe(took.as_secs_f64());
        self.checkpoint_bytes.inc_by(bytes);
    }

    fn checkpoint_failed(&self) {
        self.checkpoint_failures.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_with_labels() {
        let m = Metrics::default();
        m.connection_opened();
        m.query("select");
        m.error("42P01");
        m.rows_written(3);
        let text = m.render();
        assert!(text.contains("weir_connections 1"), "{text}");
        assert!(
            text.contains("weir_queries_total{kind=\"select\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("weir_errors_total{sqlstate=\"42P01\"} 1"),
            "{text}"
        );
        assert!(text.contains("weir_rows_written_total 3"), "{text}");
    }

    #[test]
    fn table_log_syncs_follow_the_logs_count() {
        let m = Metrics::default();
        m.table_log_synced(3);
        m.table_log_synced(2); // a late look at an older count
        m.table_log_synced(5);
        let text = m.render();
        assert!(text.contains("weir_table_log_syncs_total 5"), "{text}");
    }
}
