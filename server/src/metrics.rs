//! Prometheus metrics served at `/metrics`.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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
        Self {
            registry,
            connections,
            connections_total,
            queries,
            errors,
            rows_written,
            commits,
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

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
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
}
