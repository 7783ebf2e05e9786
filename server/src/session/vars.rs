//! Session variables: `SET`, `SHOW`, `RESET`, and what the startup sends.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::StringArray;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast::{
    ContextModifier, Expr, Ident, ObjectName, ResetStatement, Set, Value,
};
use parking_lot::RwLock;

use super::{Session, StatementResult, command};
use crate::error::ServerError;

pub const SERVER_VERSION: &str = "16.0";

/// (name, default, description). Names are matched case-insensitively.
const KNOWN: &[(&str, &str, &str)] = &[
    ("application_name", "", "Name of the client application"),
    (
        "client_encoding",
        "UTF8",
        "Client-side character set (only UTF8)",
    ),
    ("DateStyle", "ISO, MDY", "Display format for dates"),
    ("TimeZone", "UTC", "Time zone for timestamps with time zone"),
    (
        "extra_float_digits",
        "1",
        "Digits shown for floating-point values",
    ),
    (
        "search_path",
        "\"$user\", public",
        "Schema search order for unqualified names",
    ),
    (
        "standard_conforming_strings",
        "on",
        "Backslashes in ordinary strings are literal",
    ),
    ("integer_datetimes", "on", "Datetimes are 64-bit integers"),
    ("IntervalStyle", "postgres", "Display format for intervals"),
    (
        "server_version",
        SERVER_VERSION,
        "PostgreSQL version Weir speaks",
    ),
    (
        "server_version_num",
        "160000",
        "PostgreSQL version Weir speaks, as a number",
    ),
    ("server_encoding", "UTF8", "Server character set"),
    (
        "is_superuser",
        "on",
        "Whether the session user is a superuser",
    ),
    ("session_authorization", "", "Session user"),
    (
        "transaction_isolation",
        "serializable",
        "Isolation of the current transaction",
    ),
    (
        "default_transaction_isolation",
        "serializable",
        "Isolation of new transactions",
    ),
    (
        "transaction_read_only",
        "off",
        "Whether the current transaction is read-only",
    ),
    (
        "default_transaction_read_only",
        "off",
        "Whether new transactions are read-only",
    ),
    ("statement_timeout", "0", "Statement timeout (not enforced)"),
    ("lock_timeout", "0", "Lock timeout (not enforced)"),
    (
        "idle_in_transaction_session_timeout",
        "0",
        "Idle-in-transaction timeout (not enforced)",
    ),
    ("max_identifier_length", "63", "Longest identifier"),
    (
        "client_min_messages",
        "notice",
        "Lowest message level sent to the client",
    ),
    ("bytea_output", "hex", "Output format of bytea"),
    ("row_security", "on", "Row security (no policies exist)"),
    ("synchronous_commit", "on", "Commits wait for fsync"),
    ("barrier_interval", "1s", "Interval between epoch barriers"),
    (
        "read_your_writes",
        "on",
        "Queries see the session's own earlier writes",
    ),
];

/// Variables reported to the client at startup and whenever they change.
const REPORTED: &[&str] = &[
    "application_name",
    "client_encoding",
    "DateStyle",
    "TimeZone",
    "integer_datetimes",
    "IntervalStyle",
    "is_superuser",
    "server_encoding",
    "server_version",
    "session_authorization",
    "standard_conforming_strings",
];

fn canonical(name: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .find(|(n, _, _)| n.eq_ignore_ascii_case(name))
        .map(|(n, _, _)| *n)
}

/// The values, shared with the `current_setting()` function.
pub type SharedVars = Arc<RwLock<BTreeMap<String, String>>>;

pub struct Vars {
    values: SharedVars,
    user: String,
    database: String,
    /// What the client's startup packet set: RESET returns to these, as in
    /// PostgreSQL, rather than to the built-in defaults.
    session_defaults: BTreeMap<String, String>,
    /// Set once the session runs its first SET or RESET; until then every
    /// `set` comes from the startup packet.
    started: bool,
}

impl Vars {
    pub fn new(user: &str, database: &str) -> Self {
        let vars = Self {
            values: Arc::default(),
            user: user.to_string(),
            database: database.to_string(),
            session_defaults: BTreeMap::new(),
            started: false,
        };
        vars.reset_all();
        vars
    }

    /// Marks the end of startup: later `set`s no longer change what RESET
    /// restores.
    /// Every setting's value now.
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        self.values.read().clone()
    }

    /// Puts back values a [`Vars::snapshot`] took.
    pub fn restore(&mut self, values: BTreeMap<String, String>) {
        *self.values.write() = values;
    }

    pub fn start(&mut self) {
        self.started = true;
    }

    pub fn shared(&self) -> SharedVars {
        self.values.clone()
    }

    pub fn reset_all(&self) {
        let mut values = self.values.write();
        values.clear();
        for (name, default, _) in KNOWN {
            values.insert(name.to_string(), default.to_string());
        }
        values.insert("session_authorization".into(), self.user.clone());
        values.extend(self.session_defaults.clone());
        let _ = &self.database;
    }

    pub fn get(&self, name: &str) -> Option<String> {
        let key = canonical(name)
            .map(str::to_string)
            .unwrap_or_else(|| name.to_ascii_lowercase());
        self.values.read().get(&key).cloned()
    }

    /// Sets a variable; unknown names without a dot (custom `app.x` names
    /// are allowed, as in PostgreSQL) are an error.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), ServerError> {
        let key = match canonical(name) {
            Some(k) => k.to_string(),
            None if name.contains('.') => name.to_ascii_lowercase(),
            None => return Err(ServerError::UndefinedParameter(name.to_string())),
        };
        let current = self.values.read().get(&key).cloned();
        let value = normalize(&key, value, current.as_deref())?;
        if !self.started {
            self.session_defaults.insert(key.clone(), value.clone());
        }
        self.values.write().insert(key, value);
        Ok(())
    }

    pub fn reset(&mut self, name: &str) -> Result<(), ServerError> {
        match KNOWN.iter().find(|(n, _, _)| n.eq_ignore_ascii_case(name)) {
            Some((n, default, _)) => {
                let value = self
                    .session_defaults
                    .get(*n)
                    .map_or(*default, String::as_str)
                    .to_string();
                self.values.write().insert(n.to_string(), value);
                Ok(())
            }
            None if name.contains('.') => {
                self.values.write().remove(&name.to_ascii_lowercase());
                Ok(())
            }
            None => Err(ServerError::UndefinedParameter(name.to_string())),
        }
    }

    pub fn startup_parameters(&self) -> Vec<(String, String)> {
        let values = self.values.read();
        REPORTED
            .iter()
            .map(|n| (n.to_string(), values.get(*n).cloned().unwrap_or_default()))
            .collect()
    }

    /// The first schema of `search_path` (`$user` skipped), for unqualified names.
    pub fn default_schema(&self) -> String {
        crate::planning::default_schema_of(&self.get("search_path").unwrap_or_default())
    }
}

/// The value a SET stores; `current` is the value it replaces (DateStyle
/// keeps the half a SET does not name).
fn normalize(key: &str, value: &str, current: Option<&str>) -> Result<String, ServerError> {
    let value = value.trim();
    match key {
        "DateStyle" => weir_pgsem::datetime_in::date_style(value, current.unwrap_or("ISO, MDY"))
            .map_err(ServerError::from),
        "client_encoding" => {
            let upper = value.to_ascii_uppercase().replace(['-', '_'], "");
            if upper != "UTF8" && upper != "UNICODE" {
                return Err(ServerError::feature_not_supported(format!(
                    "client_encoding {value} (only UTF8)"
                )));
            }
            Ok("UTF8".into())
        }
        "TimeZone" => {
            let tz = if value.eq_ignore_ascii_case("utc")
                || value.eq_ignore_ascii_case("gmt")
                || value.eq_ignore_ascii_case("z")
            {
                "UTC".to_string()
            } else {
                value.to_string()
            };
            if tz != "UTC" && tz.parse::<arrow::array::timezone::Tz>().is_err() {
                return Err(ServerError::invalid_param(format!(
                    "invalid value for parameter \"TimeZone\": \"{value}\""
                )));
            }
            Ok(tz)
        }
        "barrier_interval" => crate::config::parse_duration(value)
            .map(|_| value.to_string())
            .map_err(ServerError::invalid_param),
        "read_your_writes" => match value.to_ascii_lowercase().as_str() {
            "on" | "true" | "1" | "yes" => Ok("on".into()),
            "off" | "false" | "0" | "no" => Ok("off".into()),
            _ => Err(ServerError::invalid_param(format!(
                "parameter \"read_your_writes\" requires a Boolean value, not \"{value}\""
            ))),
        },
        _ => Ok(value.to_string()),
    }
}

/// The text of a SET value: `'x'`, `x`, `1`, `DEFAULT`.
fn value_text(expr: &Expr) -> String {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            Value::Number(n, _) => n.to_string(),
            Value::Boolean(b) => b.to_string(),
            other => other.to_string(),
        },
        Expr::Identifier(Ident { value, .. }) => value.clone(),
        other => other.to_string(),
    }
}

fn one_column(name: &str, values: Vec<String>) -> StatementResult {
    let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, true)]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(values))])
        .expect("one Utf8 column matches its schema");
    StatementResult::Rows {
        schema,
        batches: vec![batch],
    }
}

impl Session {
    /// SET, SET LOCAL and their spellings. Inside a transaction block the
    /// block's [`BlockSettings`] learn what changed; SET LOCAL outside one
    /// does nothing (PostgreSQL warns), since its transaction ends at once.
    pub(super) fn set(&mut self, set: Set) -> Result<StatementResult, ServerError> {
        let local = matches!(
            set,
            Set::SingleAssignment {
                scope: Some(ContextModifier::Local),
                ..
            } | Set::SetTimeZone { local: true, .. }
        );
        let in_block = self.txn.as_ref().is_some_and(|t| t.explicit);
        if local && !in_block {
            return Ok(command("SET"));
        }
        let before = self.vars.snapshot();
        let result = self.apply_set(set)?;
        if in_block {
            let after = self.vars.snapshot();
            if let Some(t) = &mut self.txn {
                t.settings.record(&before, &after, local);
            }
        }
        Ok(result)
    }

    fn apply_set(&mut self, set: Set) -> Result<StatementResult, ServerError> {
        self.vars.start();
        match set {
            Set::SingleAssignment {
                variable, values, ..
            } => {
                let name = object_name_text(&variable);
                let value = values.iter().map(value_text).collect::<Vec<_>>().join(", ");
                if value.eq_ignore_ascii_case("default") {
                    self.vars.reset(&name)?;
                } else {
                    self.vars.set(&name, &value)?;
                }
                if name.eq_ignore_ascii_case("barrier_interval") {
                    // One coordinator serves every session: the interval is
                    // server-wide, like RisingWave's barrier_interval_ms.
                    let value = self.vars.get("barrier_interval").unwrap_or_default();
                    let interval = crate::config::parse_duration(&value)
                        .map_err(ServerError::invalid_param)?;
                    self.db.runtime().set_barrier_interval(interval);
                }
            }
            Set::SetTimeZone { value, .. } => {
                self.vars.set("TimeZone", &value_text(&value))?;
            }
            Set::SetNames { charset_name, .. } => {
                self.vars
                    .set("client_encoding", &charset_name.to_string())?;
            }
            Set::SetTransaction { .. } => {
                // Every Weir transaction is serializable; accepting the modes
                // keeps migration tools happy.
            }
            Set::MultipleAssignments { assignments } => {
                for a in assignments {
                    self.vars
                        .set(&object_name_text(&a.name), &value_text(&a.value))?;
                }
            }
            other => {
                return Err(ServerError::feature_not_supported(format!(
                    "SET form \"{other}\""
                )));
            }
        }
        self.apply_vars_to_planner();
        Ok(command("SET"))
    }

    pub(super) fn reset(&mut self, reset: ResetStatement) -> Result<StatementResult, ServerError> {
        self.vars.start();
        match reset.reset {
            datafusion::sql::sqlparser::ast::Reset::ALL => self.vars.reset_all(),
            datafusion::sql::sqlparser::ast::Reset::ConfigurationParameter(name) => {
                self.vars.reset(&object_name_text(&name))?
            }
        }
        self.apply_vars_to_planner();
        Ok(command("RESET"))
    }

    pub(super) fn show_variable(
        &mut self,
        variable: &[Ident],
    ) -> Result<StatementResult, ServerError> {
        let name = variable
            .iter()
            .map(|i| i.value.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        if name.eq_ignore_ascii_case("all") {
            let values = self.vars.shared();
            let values = values.read();
            let schema = Arc::new(Schema::new(vec![
                Field::new("name", DataType::Utf8, false),
                Field::new("setting", DataType::Utf8, false),
                Field::new("description", DataType::Utf8, false),
            ]));
            let rows: Vec<_> = values.iter().collect();
            let describe = |n: &str| {
                KNOWN
                    .iter()
                    .find(|(k, _, _)| *k == n)
                    .map_or("", |(_, _, d)| *d)
                    .to_string()
            };
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from_iter_values(
                        rows.iter().map(|(k, _)| k.as_str()),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        rows.iter().map(|(_, v)| v.as_str()),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        rows.iter().map(|(k, _)| describe(k)),
                    )),
                ],
            )?;
            return Ok(StatementResult::Rows {
                schema,
                batches: vec![batch],
            });
        }
        let lookup = match name.to_ascii_lowercase().as_str() {
            "time zone" => "TimeZone".to_string(),
            "transaction isolation level" => "transaction_isolation".to_string(),
            _ => name.clone(),
        };
        let value = self
            .vars
            .get(&lookup)
            .ok_or_else(|| ServerError::UndefinedParameter(name.clone()))?;
        let column = canonical(&lookup).unwrap_or(&lookup).to_ascii_lowercase();
        Ok(one_column(&column, vec![value]))
    }

    /// Pushes the variables the planner cares about into DataFusion's config.
    pub(super) fn apply_vars_to_planner(&mut self) {
        let schema = self.vars.default_schema();
        let tz = self.vars.get("TimeZone").unwrap_or_else(|| "UTC".into());
        let date_style = self.vars.get("DateStyle").unwrap_or_default();
        let state = self.ctx.state_ref();
        let mut state = state.write();
        crate::planning::apply_settings(state.config_mut().options_mut(), &schema, tz, date_style);
    }

    /// How this session reads date/time text: its DateStyle and TimeZone.
    pub(crate) fn datetime_context(&self) -> weir_pgsem::datetime_in::DateTimeContext {
        weir_pgsem::datetime_context(self.ctx.state_ref().read().config().options())
    }
}

fn object_name_text(name: &ObjectName) -> String {
    name.0
        .iter()
        .map(|p| {
            p.as_ident()
                .map(|i| i.value.clone())
                .unwrap_or_else(|| p.to_string())
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_case_insensitive_and_unknown_ones_fail() {
        let mut vars = Vars::new("weir", "weir");
        vars.start();
        vars.set("datestyle", "ISO, DMY").unwrap();
        assert_eq!(vars.get("DateStyle").as_deref(), Some("ISO, DMY"));
        assert_eq!(
            vars.set("no_such_thing", "1").unwrap_err().sqlstate(),
            "42704"
        );
        vars.set("myapp.tenant", "7").unwrap();
        assert_eq!(vars.get("myapp.tenant").as_deref(), Some("7"));
        vars.reset("DateStyle").unwrap();
        assert_eq!(vars.get("datestyle").as_deref(), Some("ISO, MDY"));
    }

    #[test]
    fn reset_returns_to_what_startup_set() {
        let mut vars = Vars::new("weir", "weir");
        vars.set("application_name", "from-startup").unwrap();
        vars.start();
        vars.set("application_name", "changed").unwrap();
        vars.reset("application_name").unwrap();
        assert_eq!(
            vars.get("application_name").as_deref(),
            Some("from-startup")
        );
        vars.set("DateStyle", "ISO, DMY").unwrap();
        vars.reset_all();
        assert_eq!(
            vars.get("application_name").as_deref(),
            Some("from-startup")
        );
        assert_eq!(vars.get("DateStyle").as_deref(), Some("ISO, MDY"));
    }

    #[test]
    fn search_path_gives_the_default_schema() {
        let mut vars = Vars::new("weir", "weir");
        assert_eq!(vars.default_schema(), "public");
        vars.set("search_path", "app, public").unwrap();
        assert_eq!(vars.default_schema(), "app");
    }
}

/// What a transaction block's SETs did to the session settings.
#[derive(Debug, Default, Clone)]
pub(super) struct BlockSettings {
    /// The settings as the block began; `None` outside a block.
    at_begin: Option<BTreeMap<String, String>>,
    /// Settings a SET LOCAL changed.
    local: BTreeSet<String>,
    /// The last value a plain SET gave each setting in the block (`None`:
    /// it removed a custom setting).
    session: BTreeMap<String, Option<String>>,
}

impl BlockSettings {
    pub(super) fn begin(&mut self, at_begin: BTreeMap<String, String>) {
        if self.at_begin.is_none() {
            self.at_begin = Some(at_begin);
        }
    }

    /// Notes the settings one SET changed (`before` to `after`).
    pub(super) fn record(
        &mut self,
        before: &BTreeMap<String, String>,
        after: &BTreeMap<String, String>,
        local: bool,
    ) {
        let changed = before
            .keys()
            .chain(after.keys())
            .filter(|k| before.get(*k) != after.get(*k));
        for key in changed {
            if local {
                self.local.insert(key.clone());
            } else {
                self.session.insert(key.clone(), after.get(key).cloned());
            }
        }
    }

    /// At COMMIT: SET LOCAL values end, plain SETs stay.
    pub(super) fn commit(self, vars: &mut Vars) {
        let Some(at_begin) = self.at_begin else {
            return;
        };
        let mut values = vars.snapshot();
        for key in self.local {
            let kept = match self.session.get(&key) {
                Some(set) => set.clone(),
                None => at_begin.get(&key).cloned(),
            };
            match kept {
                Some(value) => values.insert(key, value),
                None => values.remove(&key),
            };
        }
        vars.restore(values);
    }

    /// At ROLLBACK (or the COMMIT of a failed block): every SET of the
    /// block is undone.
    pub(super) fn roll_back(self, vars: &mut Vars) {
        if let Some(at_begin) = self.at_begin {
            vars.restore(at_begin);
        }
    }
}
