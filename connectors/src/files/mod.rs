//! The `files` connectors: a source that reads Parquet, CSV or JSON-lines
//! files from a local directory or an object store (`s3://`), and a sink
//! that writes them, exactly once across crashes and restarts.
//!
//! - `mod.rs` (here): the sink's spec and the options a CREATE SINK is
//!   checked against, where files are ([`Location`], shared with the
//!   source) and how the sink writes them ([`Target`]).
//! - [`source`]: the source, each file one split read once, new files
//!   picked up as they appear; [`discover`]: its columns, read from the
//!   first file when none are declared.
//! - [`sink`]: the protocol. Each epoch's changes are encoded into a file
//!   under a staging prefix that readers skip (`_weir_staging/`); after the
//!   epoch's seal, `commit` renames them to their final names, which are
//!   fixed by the epoch, so committing again after a crash renames nothing
//!   twice and a file is never half there.
//! - [`encode`]: rows (and, for a changelog, each change's op and epoch) as
//!   file bytes in the chosen format.

mod discover;
mod encode;
mod read;
mod sink;
mod source;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use futures::future::BoxFuture;
use object_store::ObjectStore;
use object_store::path::Path;

use crate::changelog::check_retractions;
use crate::spec::{
    Capabilities, ConnectorKind, ConnectorSpec, Delivery, OptionSpec, OptionType, Options,
};
use crate::{Connector, ConnectorError, Sink, SinkOpen};

pub(crate) use encode::Format;
pub(crate) use source::FilesSourceConnector;

pub(crate) const NAME: &str = "files";

/// `&[options..., the S3 options]`: what the source and the sink of
/// files both take to reach an `s3://` path.
macro_rules! with_s3_options {
    ($($option:expr),* $(,)?) => {
        &[
            $($option,)*
            OptionSpec::optional(
                "s3.endpoint",
                OptionType::Text,
                "an S3-compatible endpoint URL (default: AWS_ENDPOINT_URL, else AWS)",
            ),
            OptionSpec::optional("s3.region", OptionType::Text, "the bucket's region (default: AWS_REGION)"),
            OptionSpec::optional(
                "s3.allow_http",
                OptionType::OneOf(&["true", "false"]),
                "true allows a plain http endpoint",
            ),
            OptionSpec::optional(
                "s3.access_key_id",
                OptionType::Text,
                "the access key id (default: AWS_ACCESS_KEY_ID)",
            ),
            OptionSpec::optional(
                "s3.secret_access_key",
                OptionType::Text,
                "the secret access key, as s3.secret_access_key = SECRET name",
            )
            .secret(),
            OptionSpec::optional(
                "s3.secret_access_key_env",
                OptionType::Text,
                "the name of an environment variable of the Weir server that holds the secret access key (default: AWS_SECRET_ACCESS_KEY; never stored in the catalog)",
            ),
        ]
    };
}
use with_s3_options;

static SPEC: ConnectorSpec = ConnectorSpec {
    name: NAME,
    kind: ConnectorKind::Sink,
    help: "writes changes as Parquet, CSV or JSON-lines files to a directory or an object store, exactly once",
    options: with_s3_options![
        OptionSpec::optional(
            "path",
            OptionType::Text,
            "where the files go: file:///abs/dir (or /abs/dir) or s3://bucket/prefix",
        )
        .required(),
        OptionSpec::optional(
            "format",
            OptionType::OneOf(&["parquet", "csv", "json"]),
            "the file format (json: one JSON object per line)",
        )
        .with_default("parquet"),
        OptionSpec::optional(
            "changelog",
            OptionType::OneOf(&["true", "false"]),
            "true writes every change with columns weir_op ('insert' or 'delete') and weir_epoch, so input that retracts can be written",
        )
        .with_default("false"),
        OptionSpec::optional(
            "compression",
            OptionType::OneOf(&["none", "gzip"]),
            "csv and json: gzip writes .csv.gz / .jsonl.gz files (a files source reads them back); Parquet compresses its own pages",
        )
        .with_default("none"),
    ],
    capabilities: Capabilities {
        read_modes: &[],
        append_only: false,
        replayable: false,
        bounded: false,
        // At-least-once is honoured by the same protocol.
        delivery: &[Delivery::AtLeastOnce, Delivery::ExactlyOnce],
        skips: false,
    },
};

pub(crate) struct FilesConnector;

impl Connector for FilesConnector {
    fn spec(&self) -> &'static ConnectorSpec {
        &SPEC
    }

    fn check_sink<'a>(
        &'a self,
        _schema: &'a SchemaRef,
        options: &'a BTreeMap<String, String>,
        input_append_only: bool,
    ) -> BoxFuture<'a, Result<(), ConnectorError>> {
        Box::pin(async move {
            let target = Target::parse(options)?;
            check_retractions(NAME, target.changelog, input_append_only)?;
            target.location.probe().await
        })
    }

    fn sink_target(&self, options: &BTreeMap<String, String>) -> Option<String> {
        Some(format!(
            "files {}",
            normalized_url(options.get("path")?).ok()?
        ))
    }

    fn open_sink(&self, open: SinkOpen<'_>) -> Result<Box<dyn Sink>, ConnectorError> {
        let target = Target::parse(open.options)?;
        Ok(Box::new(sink::FilesSink::new(open, target)?))
    }
}

fn bad_option(option: &str, message: impl Into<String>) -> ConnectorError {
    ConnectorError::BadOption {
        connector: NAME.into(),
        option: option.into(),
        message: message.into(),
    }
}

/// `path` as a URL without a trailing slash: `/abs` becomes `file:///abs`.
fn normalized_url(path: &str) -> Result<String, ConnectorError> {
    let url = if path.starts_with('/') {
        format!("file://{path}")
    } else {
        path.to_string()
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(bad_option(
            "path",
            format!(
                "\"{path}\" is neither an absolute path nor a URL (file:///abs/dir, s3://bucket/prefix)"
            ),
        ));
    };
    match scheme {
        "file" if rest.starts_with('/') => {}
        "file" => {
            return Err(bad_option(
                "path",
                format!("\"{path}\": a file URL needs an absolute path (file:///abs/dir)"),
            ));
        }
        "s3" if !rest.is_empty() && !rest.starts_with('/') => {}
        "s3" => {
            return Err(bad_option(
                "path",
                format!("\"{path}\" names no bucket (s3://bucket/prefix)"),
            ));
        }
        other => {
            return Err(bad_option(
                "path",
                format!("scheme \"{other}\" is not supported (file, s3)"),
            ));
        }
    }
    let trimmed = url.trim_end_matches('/');
    Ok(if trimmed.len() < "file:///".len() {
        "file:///".into()
    } else {
        trimmed.to_string()
    })
}

/// Where a files source reads or a files sink writes: `path` and the
/// `s3.*` options.
pub(crate) struct Location {
    /// The normalized URL, for messages.
    pub(crate) url: String,
    pub(crate) store: Arc<dyn ObjectStore>,
    /// The prefix of every file in `store`.
    pub(crate) root: Path,
    /// For a local directory: its path, so files and renames can be made
    /// durable (`object_store` writes local files without `fsync`).
    pub(crate) local: Option<PathBuf>,
}

impl Location {
    pub(crate) fn parse(options: &BTreeMap<String, String>) -> Result<Self, ConnectorError> {
        let url = normalized_url(options.get("path").map_or("", String::as_str))?;
        let mut s3: Vec<(&str, String)> = Vec::new();
        for (option, key) in [
            ("s3.endpoint", "aws_endpoint"),
            ("s3.region", "aws_region"),
            ("s3.allow_http", "aws_allow_http"),
            ("s3.access_key_id", "aws_access_key_id"),
        ] {
            if let Some(value) = options.get(option) {
                s3.push((key, value.clone()));
            }
        }
        if let Some(secret) = options.get("s3.secret_access_key") {
            s3.push(("aws_secret_access_key", secret.clone()));
        } else if let Some(var) = options.get("s3.secret_access_key_env") {
            let secret = std::env::var(var).map_err(|_| {
                bad_option(
                    "s3.secret_access_key_env",
                    format!(
                        "the environment variable {var} is not set in the Weir server's environment"
                    ),
                )
            })?;
            s3.push(("aws_secret_access_key", secret));
        }
        if !url.starts_with("s3://") && !s3.is_empty() {
            return Err(bad_option(
                "path",
                "s3.* options are given but the path is not an s3:// URL",
            ));
        }
        let local = url.strip_prefix("file://").map(PathBuf::from);
        let (store, prefix) = weir_storage::state::store_from_url_with(&url, s3)
            .map_err(|e| bad_option("path", e.to_string()))?;
        Ok(Self {
            url,
            store,
            root: Path::from(prefix),
            local,
        })
    }

    /// The object at `relative` (slash-separated) under the root.
    pub(crate) fn path(&self, relative: &str) -> Path {
        relative
            .split('/')
            .fold(self.root.clone(), |p, part| p.join(part))
    }

    /// Lists the root within 10 s, so a wrong bucket, endpoint or
    /// credential is an error at CREATE rather than a failed object.
    async fn probe(&self) -> Result<(), ConnectorError> {
        let probe = self.store.list_with_delimiter(Some(&self.root));
        match tokio::time::timeout(std::time::Duration::from_secs(10), probe).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(bad_option("path", format!("cannot list {}: {e}", self.url))),
            Err(_) => Err(bad_option(
                "path",
                format!("listing {} took more than 10 s", self.url),
            )),
        }
    }
}

/// Everything a sink's options say about where and how it writes.
pub(crate) struct Target {
    location: Location,
    format: Format,
    changelog: bool,
    /// `compression = 'gzip'` (csv and json).
    gzip: bool,
}

impl Target {
    pub(crate) fn parse(options: &BTreeMap<String, String>) -> Result<Self, ConnectorError> {
        let opts = Options::new(&SPEC, options);
        let format = Format::parse(opts.get("format"));
        let gzip = opts.get("compression") == Some("gzip");
        if gzip && format == Format::Parquet {
            return Err(bad_option(
                "compression",
                "is for csv and json files; Parquet compresses its own pages",
            ));
        }
        Ok(Self {
            location: Location::parse(options)?,
            format,
            changelog: opts.get("changelog") == Some("true"),
            gzip,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalized_and_bad_ones_named() {
        assert_eq!(normalized_url("/data/out/").unwrap(), "file:///data/out");
        assert_eq!(
            normalized_url("file:///data/out").unwrap(),
            "file:///data/out"
        );
        assert_eq!(normalized_url("s3://b/p/").unwrap(), "s3://b/p");
        assert_eq!(normalized_url("/").unwrap(), "file:///");
        for bad in ["data/out", "file://data", "s3:///p", "gs://b/p"] {
            let e = normalized_url(bad).unwrap_err();
            assert_eq!(e.sqlstate(), "22023", "{bad}: {e}");
            assert!(e.to_string().contains("path"), "{e}");
        }
    }
}
