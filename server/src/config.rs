//! Command-line configuration of `weir serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(name = "weir", version, about = "Weir: a SQL-first streaming database")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the server with embedded defaults.
    Serve(ServeConfig),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// Any client that names an existing user is let in (the default, for localhost).
    Trust,
    /// SCRAM-SHA-256 password authentication.
    Scram,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ServeConfig {
    /// Where the catalog, table log and state live.
    #[arg(long, env = "WEIR_DATA_DIR", default_value = "./weir-data")]
    pub data_dir: PathBuf,
    /// PostgreSQL wire protocol address.
    #[arg(long, env = "WEIR_PG_ADDR", default_value = "127.0.0.1:5488")]
    pub pg_addr: SocketAddr,
    /// Arrow Flight SQL address.
    #[arg(long, env = "WEIR_FLIGHT_ADDR", default_value = "127.0.0.1:5489")]
    pub flight_addr: SocketAddr,
    /// HTTP address for /health, /ready and /metrics.
    #[arg(long, env = "WEIR_HTTP_ADDR", default_value = "127.0.0.1:5490")]
    pub http_addr: SocketAddr,
    /// Client authentication.
    #[arg(long, value_enum, env = "WEIR_AUTH", default_value = "trust")]
    pub auth: AuthMode,
    /// Password of the `weir` superuser; required with `--auth scram`.
    #[arg(long, env = "WEIR_PASSWORD", hide_env_values = true)]
    pub superuser_password: Option<String>,
    /// PEM certificate chain; with --tls-key enables TLS on the pgwire port.
    #[arg(long, env = "WEIR_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, env = "WEIR_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The key (64 hex digits) that encrypts secrets (CREATE SECRET) in the
    /// catalog. Default: `WEIR_SECRET_KEY`, else `secret.key` in the data
    /// directory, generated on first start.
    #[arg(long, env = "WEIR_SECRET_KEY_FILE")]
    pub secret_key_file: Option<PathBuf>,
    /// Where projection state is checkpointed: `file:///abs/dir`,
    /// `s3://bucket/prefix` (credentials and endpoint from the AWS_*
    /// environment) or `memory://` (lost at exit). Default: `state/` in the
    /// data directory.
    #[arg(long, env = "WEIR_STATE_URL")]
    pub state_url: Option<String>,
    /// Interval between epoch barriers (e.g. 1s, 100ms).
    #[arg(long, env = "WEIR_BARRIER_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub barrier_interval: Duration,
    /// Table-log growth (bytes) after which the tables are snapshotted and
    /// the log before the snapshot is truncated; also at least the size of
    /// the previous snapshot, so compaction costs O(bytes written).
    #[arg(long, env = "WEIR_LOG_COMPACTION_BYTES", default_value_t = 64 << 20)]
    pub log_compaction_bytes: u64,
    /// Threads each keyed operator (aggregate, join, top-N per partition)
    /// of a projection is split over, each owning a share of its keys.
    /// Default: the number of available cores; 1 runs every operator whole
    /// on the epoch thread.
    #[arg(long, env = "WEIR_WORKERS", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: Option<u16>,
}

impl ServeConfig {
    /// `--workers`, or the number of available cores.
    pub fn workers(&self) -> usize {
        self.workers.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            usize::from,
        )
    }

    /// `--state-url`, or the data directory's `state/`.
    pub fn state_url(&self) -> String {
        self.state_url.clone().unwrap_or_else(|| {
            let dir = std::path::absolute(&self.data_dir).unwrap_or_else(|_| self.data_dir.clone());
            format!("file://{}/state", dir.display())
        })
    }

    /// Defaults for tests and embedding: everything under `data_dir`,
    /// ports chosen by the caller.
    pub fn for_data_dir(data_dir: PathBuf) -> Self {
        Cli::parse_from(["weir", "serve", "--data-dir", &data_dir.to_string_lossy()])
            .command
            .into_serve()
    }
}

impl Command {
    pub fn into_serve(self) -> ServeConfig {
        match self {
            Command::Serve(config) => config,
        }
    }
}

/// Parses `1s`, `100ms`, `2m`, `500us`, or a bare number of milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim().trim_matches('\'');
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration \"{text}\": expected e.g. 1s or 100ms"))?;
    let seconds = match unit.trim() {
        "" | "ms" => value / 1000.0,
        "us" => value / 1e6,
        "s" | "sec" | "secs" | "second" | "seconds" => value,
        "m" | "min" | "minute" | "minutes" => value * 60.0,
        "h" | "hour" | "hours" => value * 3600.0,
        other => {
            return Err(format!(
                "invalid duration unit \"{other}\" in \"{text}\": use us, ms, s, m or h"
            ));
        }
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("invalid duration \"{text}\""));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("250"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("3 parsecs").is_err());
    }

    #[test]
    fn defaults_match_the_docs() {
        let c = ServeConfig::for_data_dir("d".into());
        assert_eq!(c.pg_addr.port(), 5488);
        assert_eq!(c.flight_addr.port(), 5489);
        assert_eq!(c.http_addr.port(), 5490);
        assert_eq!(c.auth, AuthMode::Trust);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(c.workers(), cores);
    }

    #[test]
    fn workers_are_one_or_more() {
        let parse = |n: &str| Cli::try_parse_from(["weir", "serve", "--workers", n]);
        assert_eq!(parse("3").unwrap().command.into_serve().workers(), 3);
        assert!(parse("0").is_err());
    }
}
