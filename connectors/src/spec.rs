//! Connector specs: the options each connector accepts and what it can do,
//! checked when a source or sink is created, never when it first runs.

use std::collections::BTreeMap;

use arrow::datatypes::{Field, SchemaRef};

use crate::ConnectorError;

/// Whether a connector reads (a source) or writes (a sink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectorKind {
    Source,
    Sink,
}

impl ConnectorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::Sink => "sink",
        }
    }
}

/// The type an option's text must parse as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionType {
    Text,
    /// A non-negative integer.
    Count,
    /// A signed integer.
    Integer,
    /// One of a fixed set of words.
    OneOf(&'static [&'static str]),
    /// Milliseconds since the Unix epoch.
    EpochMillis,
}

impl OptionType {
    pub fn name(&self) -> String {
        match self {
            Self::Text => "text".into(),
            Self::Count => "count".into(),
            Self::Integer => "integer".into(),
            Self::OneOf(words) => format!("one of {}", words.join(", ")),
            Self::EpochMillis => "milliseconds since 1970-01-01 UTC".into(),
        }
    }

    fn check(&self, value: &str) -> Result<(), String> {
        match self {
            Self::Text => Ok(()),
            Self::Count => value
                .parse::<u64>()
                .map(drop)
                .map_err(|_| format!("\"{value}\" is not a non-negative integer")),
            Self::Integer | Self::EpochMillis => value
                .parse::<i64>()
                .map(drop)
                .map_err(|_| format!("\"{value}\" is not an integer")),
            Self::OneOf(words) => {
                if words.contains(&value) {
                    Ok(())
                } else {
                    Err(format!("\"{value}\" is not one of {}", words.join(", ")))
                }
            }
        }
    }
}

/// Where an option's value comes from when CREATE does not give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionDefault {
    /// No default: absent means absent (or, if required, an error).
    None,
    /// This text.
    Value(&'static str),
    /// The wall clock at CREATE, in milliseconds, stored with the object so
    /// every run sees the same value.
    CreateTime,
}

/// One option a connector accepts.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    pub name: &'static str,
    pub ty: OptionType,
    pub default: OptionDefault,
    pub required: bool,
    /// Never shown in plain text (passwords); named by `SECRET` instead.
    pub secret: bool,
    /// Changes how, not what, the source reads or the sink writes (a
    /// password, a backoff, a batch size): `ALTER SOURCE | SINK ... SET`
    /// changes it in place, keeping the position. Any other option names
    /// what is read or written, so changing it makes another input or
    /// target.
    pub tunable: bool,
    pub help: &'static str,
}

impl OptionSpec {
    /// Whether `given` is this option; a `*` in the spec's name stands for
    /// one dotted segment (`fields.*.kind` matches `fields.price.kind`).
    pub fn matches(&self, given: &str) -> bool {
        match self.name.split_once('*') {
            None => self.name == given,
            Some((prefix, suffix)) => {
                given.len() > prefix.len() + suffix.len()
                    && given.starts_with(prefix)
                    && given.ends_with(suffix)
                    && !given[prefix.len()..given.len() - suffix.len()].contains('.')
            }
        }
    }

    pub const fn optional(name: &'static str, ty: OptionType, help: &'static str) -> Self {
        Self {
            name,
            ty,
            default: OptionDefault::None,
            required: false,
            secret: false,
            tunable: false,
            help,
        }
    }

    pub const fn with_default(mut self, value: &'static str) -> Self {
        self.default = OptionDefault::Value(value);
        self
    }

    pub const fn fixed_at_create(mut self) -> Self {
        self.default = OptionDefault::CreateTime;
        self
    }

    pub const fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// A secret: given only as `option = SECRET name`, never shown.
    pub const fn secret(mut self) -> Self {
        self.secret = true;
        self
    }

    /// Changeable in place by `ALTER ... SET` ([`Self::tunable`]).
    pub const fn tunable(mut self) -> Self {
        self.tunable = true;
        self
    }
}

/// Delivery guarantees ARCHITECTURE.md §6 names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    AtMostOnce,
    AtLeastOnce,
    ExactlyOnce,
}

impl Delivery {
    pub const WORDS: &'static [&'static str] = &["at_most_once", "at_least_once", "exactly_once"];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::AtMostOnce => "at_most_once",
            Self::AtLeastOnce => "at_least_once",
            Self::ExactlyOnce => "exactly_once",
        }
    }
}

/// What a connector can do, for the planner's checks and `SHOW CONNECTORS`.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// Read modes (full, incremental, cdc) a source offers.
    pub read_modes: &'static [&'static str],
    /// Whether a source only inserts (no retractions).
    pub append_only: bool,
    /// Whether a source can be read again from offset 0, so an object
    /// created later can backfill from the beginning.
    pub replayable: bool,
    /// Whether every split of a source ends (a bounded source).
    pub bounded: bool,
    /// Delivery guarantees a sink can honour (sources: the guarantee its
    /// offsets give with the seal).
    pub delivery: &'static [Delivery],
    /// Whether a sink can skip an epoch its target refuses, committing
    /// its offset alone, and keep the epoch in a dead-letter table
    /// (`on_error = 'skip' | 'retry_and_skip'`, `dead_letter`).
    pub skips: bool,
}

/// Everything Weir knows about a connector before it runs.
#[derive(Debug, Clone, Copy)]
pub struct ConnectorSpec {
    pub name: &'static str,
    pub kind: ConnectorKind,
    pub help: &'static str,
    pub options: &'static [OptionSpec],
    pub capabilities: Capabilities,
}

/// Options every source takes, whatever its connector: how it reads,
/// and how it backs off after a retryable error ([`crate::recovery`]).
pub const SOURCE_OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional(
        "read_mode",
        OptionType::OneOf(&["full", "incremental", "cdc"]),
        "how the source reads: full (a snapshot), incremental (rows past a cursor) or cdc (a snapshot, then every change); refused at CREATE if the connector does not offer it",
    ),
    OptionSpec::optional(
        IDLE_TIMEOUT,
        OptionType::Text,
        "with a WATERMARK: a split (partition, file stream) that delivered nothing for this long stops holding the watermark back until it delivers again (default 30s)",
    )
    .tunable(),
    OptionSpec::optional(
        MAX_DRIFT,
        OptionType::Text,
        "with a WATERMARK: how far in event time this source's rows may run ahead of another watermarked source a projection reads with it before it waits for that one (default 60s; 'off': never waits)",
    )
    .tunable(),
    RESTART_MIN_BACKOFF,
    RESTART_MAX_BACKOFF,
    RESTART_RANDOM_FACTOR,
    RESTART_MAX,
    RESTART_WINDOW,
];

/// The source option that says when an idle split stops holding its
/// source's watermark back.
pub const IDLE_TIMEOUT: &str = "idle_timeout";

/// The source option that bounds how far it runs ahead of the sources
/// read with it (watermark alignment); `off` turns alignment off for it.
pub const MAX_DRIFT: &str = "max_drift";

/// [`IDLE_TIMEOUT`]'s default.
pub const DEFAULT_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

const RESTART_MIN_BACKOFF: OptionSpec = OptionSpec::optional(
    "restart_min_backoff",
    OptionType::Text,
    "after a retryable error, the first retry's delay, doubled for each next one (default 3s)",
)
.tunable();
const RESTART_MAX_BACKOFF: OptionSpec = OptionSpec::optional(
    "restart_max_backoff",
    OptionType::Text,
    "the longest delay between retries (default 30s)",
)
.tunable();
const RESTART_RANDOM_FACTOR: OptionSpec = OptionSpec::optional(
    "restart_random_factor",
    OptionType::Text,
    "each delay is lengthened by up to this fraction, at random (default 0.2)",
)
.tunable();
const RESTART_MAX: OptionSpec = OptionSpec::optional(
    "restart_max",
    OptionType::Count,
    "retries allowed within restart_window before the source or sink fails (default: unlimited)",
)
.tunable();
const RESTART_WINDOW: OptionSpec = OptionSpec::optional(
    "restart_window",
    OptionType::Text,
    "the window restart_max counts retries in, like 10m (default: since it started)",
)
.tunable();

/// Options every sink takes, whatever its connector: the delivery
/// guarantee and how it recovers from errors ([`crate::recovery`]).
pub const SINK_OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional(
        "delivery",
        OptionType::OneOf(Delivery::WORDS),
        "the delivery guarantee; refused at CREATE if the connector cannot honour it (default: its strongest)",
    ),
    OptionSpec::optional(
        "on_error",
        OptionType::Text,
        "after an error: unset (back off and retry, see restart_*), 'fail', 'retry_and_fail(n, delay)', 'skip' (an epoch the target refuses is skipped, its offset committed alone) or 'retry_and_skip(n, delay)' (retried n times, then skipped); without arguments 5 times, 1s apart",
    )
    .tunable(),
    OptionSpec::optional(
        "dead_letter",
        OptionType::OneOf(&["none", "table"]),
        "table: the changes of every skipped epoch are kept, with the error, in a dead-letter table beside the target (needs on_error = 'skip' or 'retry_and_skip')",
    ),
    OptionSpec::optional(
        "group_size",
        OptionType::Count,
        "grouped delivery: commit once this many row changes wait (with group_max_wait, whichever comes first; default: every checkpoint)",
    )
    .tunable(),
    OptionSpec::optional(
        "group_max_wait",
        OptionType::Text,
        "grouped delivery: commit once the oldest waiting epoch has waited this long, like 10s (default 5s when group_size is given)",
    )
    .tunable(),
    RESTART_MIN_BACKOFF,
    RESTART_MAX_BACKOFF,
    RESTART_RANDOM_FACTOR,
    RESTART_MAX,
    RESTART_WINDOW,
];

impl ConnectorSpec {
    /// Every option this connector accepts (its own, then the common ones).
    pub fn all_options(&self) -> impl Iterator<Item = &OptionSpec> {
        let common: &[OptionSpec] = match self.kind {
            ConnectorKind::Source => SOURCE_OPTIONS,
            ConnectorKind::Sink => SINK_OPTIONS,
        };
        self.options.iter().chain(common)
    }

    /// Of the options `changed` (by name), those that are not tunable:
    /// they name what is read or written, so changing one makes another
    /// input or target. An option the spec does not know counts as one.
    pub fn identity_options<'a>(&self, changed: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        changed
            .into_iter()
            .filter(|name| !self.all_options().any(|o| o.tunable && o.matches(name)))
            .collect()
    }

    /// Checks the options of a CREATE (without `connector` itself) and
    /// returns them with the defaults fixed at CREATE filled in (what is
    /// stored and shown by SHOW CREATE). `now_ms` is the CREATE's clock.
    pub fn validate(
        &self,
        given: &BTreeMap<String, String>,
        now_ms: i64,
    ) -> Result<BTreeMap<String, String>, ConnectorError> {
        for name in given.keys() {
            if !self.all_options().any(|o| o.matches(name)) {
                return Err(ConnectorError::UnknownOption {
                    connector: self.name.to_string(),
                    option: name.clone(),
                    valid: self
                        .all_options()
                        .map(|o| o.name)
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        }
        for (name, value) in given {
            if let Some(option) = self
                .all_options()
                .find(|o| o.name.contains('*') && o.matches(name))
            {
                option
                    .ty
                    .check(value)
                    .map_err(|message| ConnectorError::BadOption {
                        connector: self.name.to_string(),
                        option: name.clone(),
                        message,
                    })?;
            }
        }
        let mut out = given.clone();
        for option in self.all_options().filter(|o| !o.name.contains('*')) {
            match given.get(option.name) {
                Some(value) => {
                    option
                        .ty
                        .check(value)
                        .map_err(|message| ConnectorError::BadOption {
                            connector: self.name.to_string(),
                            option: option.name.to_string(),
                            message,
                        })?
                }
                None if option.required => {
                    return Err(ConnectorError::MissingOption {
                        connector: self.name.to_string(),
                        option: option.name.to_string(),
                        help: option.help.to_string(),
                    });
                }
                None => {
                    if option.default == OptionDefault::CreateTime {
                        out.insert(option.name.to_string(), now_ms.to_string());
                    }
                }
            }
        }
        if let Some(mode) = given.get("read_mode")
            && !self.capabilities.read_modes.contains(&mode.as_str())
        {
            return Err(ConnectorError::BadOption {
                connector: self.name.to_string(),
                option: "read_mode".into(),
                message: if self.capabilities.read_modes.is_empty() {
                    format!("{mode}: this connector has one way of reading; leave read_mode out")
                } else {
                    format!(
                        "{mode} is not offered by this connector (it offers: {})",
                        self.capabilities.read_modes.join(", ")
                    )
                },
            });
        }
        if self.kind == ConnectorKind::Source {
            crate::recovery::Recovery::restarts(given).map_err(|(option, message)| {
                ConnectorError::BadOption {
                    connector: self.name.to_string(),
                    option,
                    message,
                }
            })?;
        }
        if self.kind == ConnectorKind::Sink {
            let recovery =
                crate::recovery::Recovery::from_options(given).map_err(|(option, message)| {
                    ConnectorError::BadOption {
                        connector: self.name.to_string(),
                        option,
                        message,
                    }
                })?;
            crate::grouping::Grouping::from_options(given).map_err(|(option, message)| {
                ConnectorError::BadOption {
                    connector: self.name.to_string(),
                    option,
                    message,
                }
            })?;
            if recovery.on_error.skips() && !self.capabilities.skips {
                return Err(ConnectorError::BadOption {
                    connector: self.name.to_string(),
                    option: "on_error".into(),
                    message: format!(
                        "{}: this sink cannot skip an epoch (it cannot commit an offset without the epoch's changes); use 'fail' or 'retry_and_fail(n, delay)', or leave on_error out to back off and retry (sinks that can skip: postgres and destinations)",
                        given.get("on_error").map_or("", String::as_str)
                    ),
                });
            }
        }
        if self.kind == ConnectorKind::Sink
            && let Some(delivery) = given.get("delivery")
            && !self
                .capabilities
                .delivery
                .iter()
                .any(|d| d.as_str() == delivery)
        {
            return Err(ConnectorError::BadOption {
                connector: self.name.to_string(),
                option: "delivery".into(),
                message: format!(
                    "{delivery} cannot be honoured by this connector (it offers: {})",
                    self.capabilities
                        .delivery
                        .iter()
                        .map(|d| d.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        Ok(out)
    }
}

/// Validated options with typed accessors; defaults come from the spec.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    spec: &'a ConnectorSpec,
    values: &'a BTreeMap<String, String>,
}

impl<'a> Options<'a> {
    pub fn new(spec: &'a ConnectorSpec, values: &'a BTreeMap<String, String>) -> Self {
        Self { spec, values }
    }

    /// The option's text, or its default.
    pub fn get(&self, name: &str) -> Option<&'a str> {
        if let Some(v) = self.values.get(name) {
            return Some(v.as_str());
        }
        self.spec
            .all_options()
            .find(|o| o.name == name)
            .and_then(|o| match o.default {
                OptionDefault::Value(v) => Some(v),
                _ => None,
            })
    }

    /// Every option given, including ones like `fields.x.kind` that a
    /// connector reads by prefix.
    pub fn given(&self) -> &'a BTreeMap<String, String> {
        self.values
    }

    pub fn u64(&self, name: &str) -> Result<Option<u64>, ConnectorError> {
        self.parsed(name)
    }

    pub fn i64(&self, name: &str) -> Result<Option<i64>, ConnectorError> {
        self.parsed(name)
    }

    fn parsed<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, ConnectorError> {
        self.get(name)
            .map(|v| {
                v.parse::<T>().map_err(|_| ConnectorError::BadOption {
                    connector: self.spec.name.to_string(),
                    option: name.to_string(),
                    message: format!("\"{v}\" is not a number"),
                })
            })
            .transpose()
    }
}

/// Checks declared columns against the ones a connector produces: each
/// declared column must be produced, with the same type. Returns the
/// declared schema, or the produced one when none is declared.
pub fn fit_columns(
    connector: &str,
    declared: Option<&SchemaRef>,
    produced: &SchemaRef,
) -> Result<SchemaRef, ConnectorError> {
    let Some(declared) = declared else {
        return Ok(produced.clone());
    };
    for field in declared.fields() {
        let Some(made) = produced.fields().iter().find(|f| f.name() == field.name()) else {
            return Err(ConnectorError::UnknownColumn {
                connector: connector.to_string(),
                column: field.name().clone(),
                produced: produced
                    .fields()
                    .iter()
                    .map(|f| format!("{} {}", f.name(), f.data_type()))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        if made.data_type() != field.data_type() {
            return Err(ConnectorError::ColumnMismatch {
                connector: connector.to_string(),
                column: field.name().clone(),
                message: format!(
                    "declared as {} but the connector produces {}",
                    field.data_type(),
                    made.data_type()
                ),
            });
        }
    }
    Ok(declared.clone())
}

/// The produced column a declared one is built from (CREATE checked that
/// there is one; a source stored by another build may not fit any more).
pub(crate) fn produced_index(
    connector: &str,
    produced: &SchemaRef,
    field: &Field,
) -> Result<usize, ConnectorError> {
    produced
        .index_of(field.name())
        .map_err(|_| ConnectorError::UnknownColumn {
            connector: connector.to_string(),
            column: field.name().clone(),
            produced: produced
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: ConnectorSpec = ConnectorSpec {
        name: "demo",
        kind: ConnectorKind::Sink,
        help: "",
        options: &[
            OptionSpec::optional("n", OptionType::Count, "how many").required(),
            OptionSpec::optional("mode", OptionType::OneOf(&["a", "b"]), "").with_default("a"),
            OptionSpec::optional("at", OptionType::EpochMillis, "").fixed_at_create(),
        ],
        capabilities: Capabilities {
            read_modes: &[],
            append_only: true,
            replayable: false,
            bounded: false,
            delivery: &[Delivery::AtMostOnce],
            skips: false,
        },
    };

    fn given(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn validation_names_the_bad_option_and_fills_create_time_defaults() {
        let unknown = SPEC
            .validate(&given(&[("n", "1"), ("nn", "2")]), 7)
            .unwrap_err();
        assert!(unknown.to_string().contains("\"nn\""), "{unknown}");
        assert!(
            unknown.to_string().contains("n, mode, at, delivery"),
            "{unknown}"
        );
        assert_eq!(unknown.sqlstate(), "22023");
        let missing = SPEC.validate(&given(&[]), 7).unwrap_err();
        assert!(matches!(missing, ConnectorError::MissingOption { .. }));
        let bad = SPEC.validate(&given(&[("n", "-1")]), 7).unwrap_err();
        assert!(bad.to_string().contains("non-negative"), "{bad}");
        let word = SPEC
            .validate(&given(&[("n", "1"), ("mode", "c")]), 7)
            .unwrap_err();
        assert!(word.to_string().contains("one of a, b"), "{word}");
        let delivery = SPEC
            .validate(&given(&[("n", "1"), ("delivery", "exactly_once")]), 7)
            .unwrap_err();
        assert!(
            delivery.to_string().contains("offers: at_most_once"),
            "{delivery}"
        );
        let ok = SPEC.validate(&given(&[("n", "1")]), 7).unwrap();
        assert_eq!(ok, given(&[("n", "1"), ("at", "7")]));
        assert_eq!(Options::new(&SPEC, &ok).get("mode"), Some("a"));
    }
}
