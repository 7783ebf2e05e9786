//! `ALTER SOURCE | SINK name SET (option = value, ...)`: the options given
//! replace those of the same name, checked as a CREATE checks them.
//!
//! What the change keeps depends on the options changed (the connector's
//! spec marks the *tunable* ones: passwords, backoffs, batch sizes):
//! - only tunable ones: the source's reader restarts where it was, the
//!   sink reopens from its last sealed epoch (as after a retry): nothing is
//!   read or delivered twice, nothing is missed;
//! - a sink's other options name its target (its table, path, topic): the
//!   change starts a new generation, as `RESET OFFSET` does (a new id,
//!   delivering its input from the beginning to the target now named);
//! - a source's other options name what it reads: a new generation of the
//!   source, reading the new input from its beginning (what was read
//!   before stays in what reads it, as after `RESET OFFSET`); refused
//!   (55000) for a source that carries updates and deletes.

use std::collections::BTreeMap;

use weir_connectors::ConnectorKind;
use weir_planner::streaming_ddl::StreamingKind;

use super::{Session, StatementResult, command};
use crate::catalog::CatalogChange;
use crate::catalog::streaming::SourceDef;
use crate::db::TxnWrites;
use crate::error::ServerError;

impl Session {
    pub(super) async fn alter_options(
        &mut self,
        kind: StreamingKind,
        name: &[String],
        options: Vec<(String, String)>,
        secrets: Vec<(String, String)>,
    ) -> Result<StatementResult, ServerError> {
        if let Some((option, _)) = options
            .iter()
            .chain(&secrets)
            .find(|(k, _)| k == "connector")
        {
            return Err(ServerError::Sqlstate {
                code: "55000",
                message: format!(
                    "ALTER ... SET cannot change the {option}: DROP and CREATE the {} instead",
                    kind.keyword().to_lowercase()
                ),
            });
        }
        match kind {
            StreamingKind::Source => self.alter_source_options(name, options, secrets).await,
            _ => self.alter_sink_options(name, options, secrets).await,
        }
    }

    async fn alter_source_options(
        &mut self,
        name: &[String],
        options: Vec<(String, String)>,
        secrets: Vec<(String, String)>,
    ) -> Result<StatementResult, ServerError> {
        let (catalog, def) = self.named_source(name)?;
        if let Some(parent) = def.parent().and_then(|p| catalog.sources.get(&p)) {
            return Err(ServerError::Sqlstate {
                code: "42809",
                message: format!(
                    "{} is a table of source {}, whose options it reads: ALTER SOURCE {} SET (...)",
                    def.qualified_name(),
                    parent.qualified_name(),
                    parent.qualified_name()
                ),
            });
        }
        let Alteration {
            identity,
            options: stored,
            secrets: stored_secrets,
            ..
        } = self.alteration(
            ConnectorKind::Source,
            &def.connector,
            &def.options,
            &def.secrets,
            options,
            secrets,
        )?;
        let mut changed = (*def).clone();
        changed.options = stored;
        changed.secrets = stored_secrets;
        if identity.is_empty() {
            return self.replace_source(changed).await;
        }
        self.new_source_generation(&def, changed, &identity).await
    }

    /// A source whose options now name another input: its next generation
    /// ([`Session::next_source_generation`]), reading the new input from
    /// its beginning. Refused for a source that carries updates and
    /// deletes: what reads it would be left with the old input's rows,
    /// which nothing would ever retract.
    async fn new_source_generation(
        &mut self,
        old: &SourceDef,
        changed: SourceDef,
        identity: &[String],
    ) -> Result<StatementResult, ServerError> {
        let name = changed.qualified_name();
        let append_only = weir_connectors::connector(&changed.connector, ConnectorKind::Source)
            .is_ok_and(|c| c.spec().capabilities.append_only);
        if !append_only {
            return Err(ServerError::Sqlstate {
                code: "55000",
                message: format!(
                    "changing {} of source {name} makes it read another input, and what reads it \
                     holds the updates and deletes of the input it read until now, which nothing \
                     would retract: CREATE another source (or DROP and CREATE this one); ALTER \
                     SOURCE ... SET changes only how it reads (passwords, backoffs, batch sizes)",
                    identity.join(", "),
                ),
            });
        }
        self.next_source_generation(old, changed).await?;
        self.notice(format!(
            "source {name} reads another input ({} changed): from its beginning; what was read \
             before stays in the projections and sinks over it",
            identity.join(", ")
        ));
        Ok(command("ALTER SOURCE"))
    }

    async fn alter_sink_options(
        &mut self,
        name: &[String],
        options: Vec<(String, String)>,
        secrets: Vec<(String, String)>,
    ) -> Result<StatementResult, ServerError> {
        let (catalog, def) = self.named_sink(name)?;
        if def.destination.is_some() {
            return Err(ServerError::Sqlstate {
                code: "42809",
                message: format!(
                    "{} is a destination, not a sink: a destination's target and key are its identity; DROP and CREATE it to change them",
                    def.qualified_name()
                ),
            });
        }
        let Alteration {
            connector,
            identity,
            options: stored,
            secrets: stored_secrets,
        } = self.alteration(
            ConnectorKind::Sink,
            &def.connector,
            &def.options,
            &def.secrets,
            options,
            secrets,
        )?;
        let mut changed = (*def).clone();
        changed.options = stored;
        changed.secrets = stored_secrets;
        if identity.is_empty() {
            self.write(TxnWrites {
                ddl: vec![CatalogChange::ReplaceSink(changed.clone())],
                tables: vec![],
            })?;
            let spec = self.plan_context().sink_to_open(&changed)?;
            self.db.runtime().reconfigure_sink(changed.id, spec).await;
            return Ok(command("ALTER SINK"));
        }
        // Another target: a new generation, delivering from the beginning.
        let resolved = crate::secrets::resolve(
            &catalog,
            self.db.secret_key(),
            &changed.connector,
            &changed.options,
            &changed.secrets,
        )?;
        if let Some(target) = connector.sink_target(&resolved)
            && let Some(owner) = self.sink_writing(&target, Some(def.id))
        {
            return Err(ServerError::DuplicateObject(format!(
                "a sink writing to {target} ({owner})"
            )));
        }
        let planned = self
            .plan_context()
            .plan_projection_emitting(
                &crate::planning::parse_query(&def.query)?,
                &[],
                def.emit_on_window_close,
            )
            .await?;
        connector
            .check_sink(
                &planned.stream.schema,
                &resolved,
                planned.stream.append_only,
            )
            .await?;
        changed.id = (*catalog).clone().allocate_id();
        let deployment = self.plan_sink_deployment(&changed).await?;
        self.check_sources_that_cannot_replay("sink", &changed.qualified_name(), &deployment)?;
        self.write(TxnWrites {
            ddl: vec![
                CatalogChange::DropSink { id: def.id },
                CatalogChange::CreateSink(changed),
            ],
            tables: vec![],
        })?;
        self.notice(format!(
            "changing {} of sink {} starts it over: it delivers its input from the beginning to the target now named",
            identity.join(", "),
            def.qualified_name()
        ));
        Ok(command("ALTER SINK"))
    }

    /// `old` options and secrets with `options` and `secrets` over them,
    /// checked as a CREATE checks them, and which of the changed ones are
    /// not tunable.
    fn alteration(
        &self,
        kind: ConnectorKind,
        connector_name: &str,
        old: &BTreeMap<String, String>,
        old_secrets: &BTreeMap<String, String>,
        options: Vec<(String, String)>,
        secrets: Vec<(String, String)>,
    ) -> Result<Alteration, ServerError> {
        let connector = weir_connectors::connector(connector_name, kind)?;
        let identity = changed_identity(connector.spec(), old, old_secrets, &options, &secrets);
        let mut given = old.clone();
        let mut all_secrets = old_secrets.clone();
        for (k, v) in options {
            all_secrets.remove(&k);
            given.insert(k, v);
        }
        for (k, v) in secrets {
            given.remove(&k);
            all_secrets.insert(k, v);
        }
        let secrets: Vec<(String, String)> = all_secrets.into_iter().collect();
        let checked = self.connector_options(connector, connector_name, given, &secrets)?;
        Ok(Alteration {
            connector,
            identity,
            options: checked.stored,
            secrets: checked.secrets,
        })
    }
}

/// An `ALTER ... SET` checked: the merged options as stored, and the
/// changed options that name what is read or written.
struct Alteration {
    connector: &'static dyn weir_connectors::Connector,
    identity: Vec<String>,
    options: BTreeMap<String, String>,
    secrets: BTreeMap<String, String>,
}

/// The options (by name) whose value the change alters and that are not
/// tunable.
fn changed_identity(
    spec: &weir_connectors::ConnectorSpec,
    old: &BTreeMap<String, String>,
    old_secrets: &BTreeMap<String, String>,
    options: &[(String, String)],
    secrets: &[(String, String)],
) -> Vec<String> {
    let changed = options
        .iter()
        .filter(|(k, v)| old.get(k) != Some(v))
        .chain(
            secrets
                .iter()
                .filter(|(k, v)| old_secrets.get(k) != Some(v)),
        )
        .map(|(k, _)| k.as_str());
    spec.identity_options(changed)
        .into_iter()
        .map(str::to_string)
        .collect()
}
