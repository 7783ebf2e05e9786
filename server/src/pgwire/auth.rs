//! Connection startup: protocol negotiation, trust or SCRAM-SHA-256
//! authentication, creating the [`Session`], and cancel requests.
//!
//! After authentication the client gets AuthenticationOk, the session's
//! startup parameters as ParameterStatus, BackendKeyData carrying the
//! session's (pid, secret) — which a later CancelRequest hands to
//! `Database::cancel` — and ReadyForQuery.

use std::fmt::{self, Debug};
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::auth::sasl::scram::{SCRAM_ITERATIONS, ScramAuth};
use pgwire::api::auth::sasl::{SASLState, SCRAM_SHA_256_METHOD};
use pgwire::api::auth::{
    AuthSource, LoginInfo, Password, StartupHandler, protocol_negotiation,
    save_startup_parameters_to_metadata,
};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::response::ReadyForQuery;
use pgwire::messages::startup::{
    Authentication, BackendKeyData, ParameterStatus, PasswordMessageFamily, SecretKey, Startup,
};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use super::{Conn, errors, frames, sync_status};
use crate::config::AuthMode;
use crate::session::Session;

const DEFAULT_USER: &str = "weir";
const DEFAULT_DATABASE: &str = "weir";

/// What startup learned, kept until the session exists.
#[derive(Default)]
pub(crate) struct AuthState {
    login: Option<Login>,
    scram: Option<Arc<ScramAuth>>,
    sasl: Option<SASLState>,
}

#[derive(Debug, Clone)]
struct Login {
    user: String,
    database: String,
    /// Every other startup parameter (application_name, client_encoding,
    /// DateStyle, options, ...), for `Session::set_startup_option`.
    options: Vec<(String, String)>,
}

impl Login {
    fn from_startup(startup: &Startup) -> Login {
        let param = |key: &str, default: &str| {
            startup
                .parameters
                .get(key)
                .filter(|v| !v.is_empty())
                .cloned()
                .unwrap_or_else(|| default.to_owned())
        };
        Login {
            user: param("user", DEFAULT_USER),
            database: param("database", DEFAULT_DATABASE),
            options: startup
                .parameters
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "user" | "database"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }
}

/// The one password SCRAM checks this connection against.
struct KnownPassword(Password);

impl Debug for KnownPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KnownPassword(..)")
    }
}

#[async_trait]
impl AuthSource for KnownPassword {
    async fn get_password(&self, _login: &LoginInfo) -> PgWireResult<Password> {
        Ok(self.0.clone())
    }
}

/// SCRAM for `user`. A user without credentials gets random ones, so the
/// exchange runs to the end and fails like a wrong password would, without
/// revealing whether the user exists.
fn scram_for(conn: &Conn, user: &str) -> ScramAuth {
    let (password, iterations) = match conn.db.scram_credentials(user) {
        Some(secret) => (
            Password::new(Some(secret.salt), secret.salted_password),
            secret.iterations,
        ),
        None => (
            Password::new(
                Some(uuid::Uuid::new_v4().as_bytes().to_vec()),
                uuid::Uuid::new_v4().as_bytes().to_vec(),
            ),
            SCRAM_ITERATIONS,
        ),
    };
    let mut scram = ScramAuth::new(Arc::new(KnownPassword(password)));
    scram.set_iterations(iterations);
    scram
}

#[async_trait]
impl StartupHandler for Conn {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(startup) => {
                protocol_negotiation(client, &startup).await?;
                save_startup_parameters_to_metadata(client, &startup);
                let login = Login::from_startup(&startup);
                match self.db.config().auth {
                    AuthMode::Trust => {
                        if !self.db.user_exists(&login.user) {
                            return Err(errors::fatal(
                                "28000",
                                format!("role \"{}\" does not exist", login.user),
                            ));
                        }
                        self.finish_startup(client, login).await
                    }
                    AuthMode::Scram => {
                        let mut auth = self.auth.lock().await;
                        auth.scram = Some(Arc::new(scram_for(self, &login.user)));
                        auth.sasl = Some(SASLState::Initial);
                        auth.login = Some(login);
                        client.set_state(PgWireConnectionState::AuthenticationInProgress);
                        client
                            .send(PgWireBackendMessage::Authentication(Authentication::SASL(
                                vec![SCRAM_SHA_256_METHOD.to_owned()],
                            )))
                            .await?;
                        Ok(())
                    }
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                let login = self.sasl_step(client, message).await?;
                match login {
                    Some(login) => self.finish_startup(client, login).await,
                    None => Ok(()),
                }
            }
            _ => Err(errors::fatal(
                "08P01",
                "expected a startup or authentication message",
            )),
        }
    }
}

impl Conn {
    /// One SCRAM round trip; returns the login once the client is
    /// authenticated.
    async fn sasl_step<C>(
        &self,
        client: &mut C,
        message: PasswordMessageFamily,
    ) -> PgWireResult<Option<Login>>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut auth = self.auth.lock().await;
        let (Some(scram), Some(state)) = (auth.scram.clone(), auth.sasl.take()) else {
            return Err(errors::fatal("08P01", "unexpected password message"));
        };
        let (state, message) = match state {
            SASLState::Initial => {
                // pgwire's decoder panics on a short body.
                if let PasswordMessageFamily::Raw(body) = &message
                    && !frames::sasl_initial_response_fits(body)
                {
                    return Err(errors::fatal(
                        "08P01",
                        "malformed SASLInitialResponse message",
                    ));
                }
                let initial = message.into_sasl_initial_response()?;
                if initial.auth_method != SCRAM_SHA_256_METHOD {
                    return Err(PgWireError::UnsupportedSASLAuthMethod(initial.auth_method));
                }
                (
                    SASLState::ScramClientFirstReceived,
                    PasswordMessageFamily::SASLInitialResponse(initial),
                )
            }
            other => (
                other,
                PasswordMessageFamily::SASLResponse(message.into_sasl_response()?),
            ),
        };
        let (response, next) = scram.process_scram_message(client, message, &state).await?;
        client
            .send(PgWireBackendMessage::Authentication(response))
            .await?;
        if matches!(next, SASLState::Finished) {
            auth.scram = None;
            return Ok(auth.login.take());
        }
        auth.sasl = Some(next);
        Ok(None)
    }

    /// Creates the session and tells the client it may send queries.
    async fn finish_startup<C>(&self, client: &mut C, login: Login) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !self.db.database_exists(&login.database) {
            return Err(errors::fatal(
                "3D000",
                format!("database \"{}\" does not exist", login.database),
            ));
        }
        let mut session = Session::new(self.db.clone(), &login.user, &login.database);
        for (name, value) in &login.options {
            session.set_startup_option(name, value);
        }
        let (pid, secret) = session.backend_key();
        client.set_pid_and_secret_key(pid, SecretKey::I32(secret));
        client
            .feed(PgWireBackendMessage::Authentication(Authentication::Ok))
            .await?;
        for (name, value) in session.startup_parameters() {
            client
                .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(
                    name, value,
                )))
                .await?;
        }
        client
            .feed(PgWireBackendMessage::BackendKeyData(BackendKeyData::new(
                pid,
                SecretKey::I32(secret),
            )))
            .await?;
        let status = sync_status(client, &session);
        *self.session.lock().await = Some(session);
        client.set_state(PgWireConnectionState::ReadyForQuery);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                status,
            )))
            .await?;
        tracing::debug!(user = %login.user, pid, peer = %client.socket_addr(), "pgwire session started");
        Ok(())
    }
}

#[async_trait]
impl CancelHandler for Conn {
    async fn on_cancel_request(&self, request: CancelRequest) {
        // Weir hands out 4-byte secrets; a longer key cannot be one of ours.
        let Some(secret) = request.secret_key.as_i32() else {
            return;
        };
        let cancelled = self.db.cancel(request.pid, secret);
        tracing::debug!(pid = request.pid, cancelled, "pgwire cancel request");
    }
}
