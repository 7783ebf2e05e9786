//! CREATE / ALTER / DROP / SHOW of secrets and connections, and the
//! options a CREATE SOURCE or SINK hands its connector.
//!
//! A secret's value is sealed ([`crate::secrets`]) before it reaches the
//! catalog; no statement shows it again. A connection holds options (and
//! secrets) for the sources and sinks that name it, which read it each
//! time their connector is opened, so ALTER CONNECTION and ALTER SECRET
//! apply at their next start or reconnect. A value for an option a
//! connector marks secret (a password) is refused inline, so what SHOW
//! CREATE prints, and what the catalog stores, never holds one.

use std::collections::BTreeMap;
use std::sync::Arc;

use weir_connectors::Connector;
use weir_planner::streaming_ddl::NamedKind;

use super::{Session, StatementResult, command, show::text_rows};
use crate::catalog::CatalogChange;
use crate::catalog::streaming::{ConnectionDef, SecretDef};
use crate::db::TxnWrites;
use crate::error::ServerError;

/// What a CREATE SOURCE or SINK stores and what its connector is handed.
/// What an ALTER changed, for [`Session::reopen_users`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Named<'a> {
    Secret(&'a str),
    Connection(&'a str),
}

pub(super) struct ConnectorOptions {
    /// The object's own options (with `connection` and defaults fixed at
    /// CREATE), as stored.
    pub stored: BTreeMap<String, String>,
    /// `option = SECRET name`, as stored.
    pub secrets: BTreeMap<String, String>,
    /// Everything the connector sees: the connection's options under the
    /// object's, secrets opened, validated against the spec.
    pub resolved: BTreeMap<String, String>,
}

impl Session {
    /// Checks `given` and `secrets` (of a CREATE naming `connector_name`)
    /// and resolves them for the connector.
    pub(super) fn connector_options(
        &self,
        connector: &dyn Connector,
        connector_name: &str,
        given: BTreeMap<String, String>,
        secrets: &[(String, String)],
    ) -> Result<ConnectorOptions, ServerError> {
        let spec = connector.spec();
        let is_secret = |k: &str| spec.all_options().any(|o| o.secret && o.matches(k));
        check_secret_options(&given, secrets, &is_secret, connector_name)?;
        let secrets: BTreeMap<String, String> = secrets.iter().cloned().collect();
        let catalog = self.snapshot().catalog.clone();
        let resolved = crate::secrets::resolve(
            &catalog,
            self.db.secret_key(),
            connector_name,
            &given,
            &secrets,
        )?;
        let validated = spec.validate(&resolved, weir_connectors::now_millis())?;
        let mut stored = given;
        for (k, v) in &validated {
            if !resolved.contains_key(k) {
                stored.insert(k.clone(), v.clone());
            }
        }
        Ok(ConnectorOptions {
            stored,
            secrets,
            resolved: validated,
        })
    }

    /// CREATE SECRET (`if_not_exists` given) or ALTER SECRET (None; its
    /// running users take the new value: [`Self::reopen_users`]).
    pub(super) fn put_secret(
        &mut self,
        if_not_exists: Option<bool>,
        name: String,
        value: String,
    ) -> Result<StatementResult, ServerError> {
        let catalog = self.snapshot().catalog.clone();
        let exists = catalog.secrets.contains_key(&name);
        let tag = match if_not_exists {
            Some(_) if exists && if_not_exists == Some(true) => {
                return Ok(command("CREATE SECRET"));
            }
            Some(_) if exists => {
                return Err(ServerError::DuplicateObject(format!("secret \"{name}\"")));
            }
            Some(_) => "CREATE SECRET",
            None if !exists => return Err(undefined(NamedKind::Secret, &name)),
            None => "ALTER SECRET",
        };
        let value = self.db.secret_key().seal(&name, &value)?;
        self.write(TxnWrites {
            ddl: vec![CatalogChange::PutSecret(SecretDef { name, value })],
            tables: vec![],
        })?;
        Ok(command(tag))
    }

    pub(super) fn create_connection(
        &mut self,
        if_not_exists: bool,
        name: String,
        kind: String,
        options: Vec<(String, String)>,
        secrets: Vec<(String, String)>,
    ) -> Result<StatementResult, ServerError> {
        if self.snapshot().catalog.connections.contains_key(&name) {
            if if_not_exists {
                return Ok(command("CREATE CONNECTION"));
            }
            return Err(ServerError::DuplicateObject(format!(
                "connection \"{name}\""
            )));
        }
        let def = connection_def(name, kind, options.into_iter().collect(), secrets)?;
        self.write(TxnWrites {
            ddl: vec![CatalogChange::PutConnection(def)],
            tables: vec![],
        })?;
        Ok(command("CREATE CONNECTION"))
    }

    /// The running sources and sinks that use `named` (directly, or a
    /// secret through their connection) take its new value: each source's
    /// reader starts again where it was, each sink reopens from its last
    /// sealed epoch as after a retry ([`weir_engine::runtime::Runtime::reconfigure_sink`]).
    pub(super) async fn reopen_users(&mut self, named: Named<'_>) -> Result<(), ServerError> {
        let catalog = self.snapshot().catalog.clone();
        let uses = |options: &BTreeMap<String, String>, secrets: &BTreeMap<String, String>| {
            let connection = options.get("connection");
            match named {
                Named::Connection(name) => connection.is_some_and(|c| c == name),
                Named::Secret(name) => {
                    secrets.values().any(|s| s == name)
                        || connection
                            .and_then(|c| catalog.connections.get(c))
                            .is_some_and(|c| c.secrets.values().any(|s| s == name))
                }
            }
        };
        let sources: Vec<_> = catalog
            .sources
            .values()
            .filter(|s| uses(&s.options, &s.secrets))
            .cloned()
            .collect();
        let sinks: Vec<_> = catalog
            .sinks
            .values()
            .filter(|s| uses(&s.options, &s.secrets))
            .cloned()
            .collect();
        for source in sources {
            let read = self.plan_context().source_to_read(&source)?;
            self.db.runtime().restart_source(read).await;
        }
        for sink in sinks {
            let spec = self.plan_context().sink_to_open(&sink)?;
            self.db.runtime().reconfigure_sink(sink.id, spec).await;
        }
        Ok(())
    }

    /// ALTER CONNECTION name SET (...): the options given replace those of
    /// the same name; its running users take them at once
    /// ([`Self::reopen_users`]).
    pub(super) fn alter_connection(
        &mut self,
        name: String,
        options: Vec<(String, String)>,
        secrets: Vec<(String, String)>,
    ) -> Result<StatementResult, ServerError> {
        let catalog = self.snapshot().catalog.clone();
        let old = catalog
            .connections
            .get(&name)
            .ok_or_else(|| undefined(NamedKind::Connection, &name))?;
        let mut all = old.options.clone();
        let mut all_secrets: Vec<(String, String)> = old
            .secrets
            .iter()
            .filter(|(k, _)| !options.iter().any(|(o, _)| o == *k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, v) in options {
            all.insert(k, v);
        }
        for (k, v) in secrets {
            all.remove(&k);
            all_secrets.retain(|(o, _)| *o != k);
            all_secrets.push((k, v));
        }
        let def = connection_def(name, old.kind.clone(), all, all_secrets)?;
        self.write(TxnWrites {
            ddl: vec![CatalogChange::PutConnection(def)],
            tables: vec![],
        })?;
        Ok(command("ALTER CONNECTION"))
    }

    /// DROP SECRET | CONNECTION: refused while something names it, unless
    /// CASCADE, which drops those (and what reads the sources among them).
    pub(super) fn drop_named(
        &mut self,
        what: NamedKind,
        if_exists: bool,
        names: Vec<String>,
        cascade: bool,
    ) -> Result<StatementResult, ServerError> {
        let catalog = self.snapshot().catalog.clone();
        let mut changes = Vec::new();
        let mut released = Vec::new();
        for name in names {
            let exists = match what {
                NamedKind::Secret => catalog.secrets.contains_key(&name),
                NamedKind::Connection => catalog.connections.contains_key(&name),
            };
            if !exists {
                if if_exists {
                    continue;
                }
                return Err(undefined(what, &name));
            }
            // The connections that name the secret go with it.
            let users: Vec<Arc<ConnectionDef>> = match what {
                NamedKind::Secret => catalog
                    .connections
                    .values()
                    .filter(|c| c.secrets.values().any(|s| *s == name))
                    .cloned()
                    .collect(),
                NamedKind::Connection => Vec::new(),
            };
            let names_it =
                |options: &BTreeMap<String, String>, secrets: &BTreeMap<String, String>| match what
                {
                    NamedKind::Secret => {
                        secrets.values().any(|s| *s == name)
                            || options
                                .get("connection")
                                .is_some_and(|c| users.iter().any(|u| u.name == *c))
                    }
                    NamedKind::Connection => options.get("connection") == Some(&name),
                };
            let sources: Vec<_> = catalog
                .sources
                .values()
                .filter(|s| names_it(&s.options, &s.secrets))
                .cloned()
                .collect();
            let sinks: Vec<_> = catalog
                .sinks
                .values()
                .filter(|s| names_it(&s.options, &s.secrets))
                .cloned()
                .collect();
            if !cascade
                && let Some(first) = users
                    .iter()
                    .map(|c| format!("connection {}", c.name))
                    .chain(
                        sources
                            .iter()
                            .map(|s| format!("source {}", s.qualified_name())),
                    )
                    .chain(sinks.iter().map(|s| format!("sink {}", s.qualified_name())))
                    .next()
            {
                return Err(ServerError::DependentObjects {
                    object: format!("{} {name}", what.keyword().to_lowercase()),
                    dependents: first,
                });
            }
            for sink in &sinks {
                push_once(&mut changes, CatalogChange::DropSink { id: sink.id });
            }
            for source in &sources {
                // A shared source's tables go first.
                super::sources::drop_source(&catalog, source, true, &mut changes)?;
                // Opened while the secret still exists.
                if let Ok(options) = crate::secrets::resolve(
                    &catalog,
                    self.db.secret_key(),
                    &source.connector,
                    &source.options,
                    &source.secrets,
                ) {
                    released.push((source.clone(), options));
                }
            }
            for connection in &users {
                push_once(
                    &mut changes,
                    CatalogChange::DropConnection {
                        name: connection.name.clone(),
                    },
                );
            }
            push_once(
                &mut changes,
                match what {
                    NamedKind::Secret => CatalogChange::DropSecret { name },
                    NamedKind::Connection => CatalogChange::DropConnection { name },
                },
            );
        }
        self.write(TxnWrites {
            ddl: changes,
            tables: vec![],
        })?;
        for (def, options) in released {
            super::streaming::release_source(def, options);
        }
        Ok(command(match what {
            NamedKind::Secret => "DROP SECRET",
            NamedKind::Connection => "DROP CONNECTION",
        }))
    }

    /// SHOW SECRETS (names and the key that sealed each, never a value)
    /// or SHOW CONNECTIONS (their CREATE statements).
    pub(super) fn show_named(&mut self, what: NamedKind) -> Result<StatementResult, ServerError> {
        let catalog = self.snapshot().catalog.clone();
        match what {
            NamedKind::Secret => text_rows(
                &["name", "key_id"],
                catalog
                    .secrets
                    .values()
                    .map(|s| vec![s.name.clone(), s.value.key_id.clone()])
                    .collect(),
            ),
            NamedKind::Connection => text_rows(
                &["name", "kind", "create_sql"],
                catalog
                    .connections
                    .values()
                    .map(|c| vec![c.name.clone(), c.kind.clone(), c.create_statement()])
                    .collect(),
            ),
        }
    }
}

fn push_once(changes: &mut Vec<CatalogChange>, change: CatalogChange) {
    if !changes.contains(&change) {
        changes.push(change);
    }
}

fn undefined(what: NamedKind, name: &str) -> ServerError {
    ServerError::Sqlstate {
        code: "42704",
        message: format!(
            "{} \"{name}\" does not exist",
            what.keyword().to_lowercase()
        ),
    }
}

/// A connection of `kind` with these options, checked: the kind exists,
/// every option is one it holds, and secret options name secrets.
fn connection_def(
    name: String,
    kind: String,
    options: BTreeMap<String, String>,
    secrets: Vec<(String, String)>,
) -> Result<ConnectionDef, ServerError> {
    let Some((_, allowed)) = crate::secrets::connection_kind(&kind) else {
        return Err(ServerError::invalid_param(format!(
            "there is no connection kind \"{kind}\" (kinds: postgres, kafka, s3)"
        )));
    };
    for key in options.keys().chain(secrets.iter().map(|(k, _)| k)) {
        if !allowed.contains(&key.as_str()) {
            return Err(ServerError::invalid_param(format!(
                "option \"{key}\" is not valid for a {kind} connection (valid options: {})",
                allowed.join(", ")
            )));
        }
    }
    let is_secret = |k: &str| matches!(k, "password" | "s3.secret_access_key");
    check_secret_options(
        &options,
        &secrets,
        &is_secret,
        &format!("{kind} connection"),
    )?;
    Ok(ConnectionDef {
        name,
        kind,
        options,
        secrets: secrets.into_iter().collect(),
    })
}

/// A secret option must name a secret, and only a secret option may.
fn check_secret_options(
    given: &BTreeMap<String, String>,
    secrets: &[(String, String)],
    is_secret: &dyn Fn(&str) -> bool,
    what: &str,
) -> Result<(), ServerError> {
    if let Some(key) = given.keys().find(|k| is_secret(k)) {
        return Err(ServerError::invalid_param(format!(
            "option \"{key}\" of {what} holds a secret, which is never written inline (it would be stored and shown): CREATE SECRET name AS '...', then write {key} = SECRET name"
        )));
    }
    if let Some((key, _)) = secrets.iter().find(|(k, _)| !is_secret(k)) {
        return Err(ServerError::invalid_param(format!(
            "option \"{key}\" of {what} is not a secret: give its value, quoted"
        )));
    }
    Ok(())
}
